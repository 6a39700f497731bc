r"""Thin torch backend: model outputs in, validated float64 distributions and batched bounds out.

Importing this module does not import torch; each function imports it on first use and raises
``ImportError`` (``pip install -e ".[torch]"`` from the clone) when it is missing.

Two jobs:

1. :func:`to_distribution` turns logits or probabilities (any float dtype, including bfloat16 and
   float16; any device; shape ``(V,)`` or ``(B, V)``) into float64 probability tensors, applying
   temperature, top-k and top-p on the way. The order is always: temperature, then top-k, then top-p
   (on the top-k renormalised distribution), then one renormalisation computed as a float64 softmax
   over the surviving logits (no ``x / x.sum()`` of a float32 vector).
2. :func:`sorted_prefix_bound` evaluates the optimal acceptance alpha*
   (docs/math.md#dual-and-sorting-theorem) for a batch
   of pairs on the tensors' device by one ``torch.sort`` and a few ``cumsum``: sampling with
   replacement for any ``n`` and sequential sampling without replacement for ``n = 2``;
   :func:`greedy_bounds` the closed form for greedy drafts (docs/math.md#greedy-and-hub).

Tie and boundary conventions
----------------------------
* **top-k** keeps exactly ``min(k, V)`` tokens: those with the largest logits (temperature does
  not change the order; for probability input, the largest probabilities), ties broken by the
  lower token index (stable sort). ``top_k=None`` or ``top_k >= V`` keeps all.
* **top-p** sorts tokens by probability, descending, ties by lower index, and keeps the token at rank
  ``r`` iff the mass of the tokens strictly before it is ``< top_p``: the smallest prefix whose mass
  reaches ``top_p``. The top token is always kept; a prefix whose mass equals ``top_p`` exactly stops
  there. ``top_p=1`` (the default ``None``) keeps everything, including zero-probability tokens.
* **temperature** ``T > 0`` divides the logits by ``T``; for probability input it maps ``p`` to
  ``p**(1/T)`` renormalised (zero stays zero). ``T = 0`` is rejected: use ``top_k=1`` for greedy.
* **bound order**: tokens sorted by ``q/p`` descending, ``p = 0 < q`` tokens first (key ``+inf``),
  ``q = 0`` tokens last (key ``-inf``), ties kept in index order (``torch.sort(stable=True)``).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .._config import RECHECK_TOL, SUM_TOL, TOP_P_TIE
from .._validate import LOGITS_HINT, NORMALIZE_HINT, check_bool, check_n, source_dtype, sum_tolerance
from ..drafts import SCHEMES, get_scheme
from ..drafts.greedy import torch_bound as greedy_torch_bound
from ..drafts.greedy import torch_sums as greedy_torch_sums
from ..keys import bound_key, verifier_key
from ..verifiers import VERIFIERS
from ..verifiers.base import BatchVerifier
from ._tensor import prefix_sums as _prefix_sums
from ._tensor import require_torch

__all__ = [
    "require_torch",
    "to_distribution",
    "sorted_prefix_order",
    "sorted_prefix_bound",
    "BatchBound",
    "sorted_prefix_bounds",
    "greedy_bounds",
    "SAMPLINGS",
    "evaluate_batch",
    "BATCH_VERIFIERS",
    "BatchVerifier",
]


def cpu_matmul_slowdown(dtype, size: int = 512) -> float:
    """CPU time of a ``size``-square matmul in ``dtype`` over the same in float32, measured now.

    A CPU without native bfloat16/float16 matrix instructions (no AVX512-BF16 or AMX; e.g. an AVX2
    machine) runs half-precision matmuls in a slow fallback: measured 36x slower than float32 on an
    AVX2 AMD EPYC with torch 2.13, while AMX machines run bfloat16 2.8x faster. Model loaders call
    this before committing a long run to a precision (best of three, about 0.1 s).
    """
    import time

    torch = require_torch()
    kind = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    best = {}
    for dt in (torch.float32, kind):
        a = torch.ones(size, size, dtype=dt)
        a @ a  # warm
        times = []
        for _ in range(3):
            t0 = time.process_time()
            a @ a
            times.append(time.process_time() - t0)
        best[dt] = max(min(times), 1e-6)
    return best[kind] / best[torch.float32]


def _as_float64_tensor(x, name: str):
    """``x`` (tensor or array-like of floats) as a float64 tensor on its own device, 1-D or 2-D."""
    torch = require_torch()
    if not isinstance(x, torch.Tensor):
        if isinstance(x, (str, bytes, dict, set)) or x is None:
            raise TypeError(f"{name} must be a tensor or array of floats, got {type(x).__name__}")
        try:
            x = torch.as_tensor(x)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise TypeError(f"{name} could not be read as a numeric tensor: {exc}") from None
    if x.dtype == torch.bool or x.is_complex() or not x.is_floating_point():
        raise TypeError(
            f"{name} has dtype {x.dtype}; pass floating-point logits or probabilities (e.g. {name}.float())"
        )
    if x.ndim not in (1, 2):
        raise ValueError(f"{name} must have shape (V,) or (B, V); got shape {tuple(x.shape)}")
    if x.shape[-1] == 0 or (x.ndim == 2 and x.shape[0] == 0):
        raise ValueError(f"{name} is empty (shape {tuple(x.shape)}); a distribution needs a token")
    return x.detach().to(torch.float64)


def _check_probs(x, name: str, normalize: bool, dtype: str = "float64"):
    """Validate a float64 probability tensor along the last axis; return it (rescaled if asked). Sums
    may be off one by :func:`mdsd_ot._validate.sum_tolerance` of ``dtype``, the dtype it came in."""
    torch = require_torch()
    normalize = check_bool(normalize, "normalize")
    if not bool(torch.isfinite(x).all()):
        bad = torch.nonzero(~torch.isfinite(x))[0].tolist()
        raise ValueError(f"{name} contains NaN or inf (first at index {tuple(bad)})")
    if bool((x < 0).any()):
        bad = torch.nonzero(x < 0)[0].tolist()
        raise ValueError(
            f"{name} has negative entries (first at index {tuple(bad)}: {float(x[tuple(bad)]):.3g}); "
            f"probabilities must be >= 0 (pass logits with kind='logits' instead?)"
        )
    sums = x.sum(dim=-1, keepdim=True)
    if not bool(torch.isfinite(sums).all()):
        raise ValueError(
            f"{name} has a row whose sum overflows float64; rescale it (e.g. divide by "
            f"its maximum) before passing it"
        )
    if bool((sums <= 0).any()):
        raise ValueError(f"{name} has a row with total mass 0; a distribution needs positive mass")
    if normalize:
        return x / sums
    off = (sums - 1.0).abs()
    tol = sum_tolerance(dtype, x.shape[-1])
    if bool((off > tol).any()):
        worst = float(sums.flatten()[int(off.flatten().argmax())])
        raise ValueError(
            f"{name} sums to {worst:.9g}, more than {tol:.2g} away from 1"
            + (
                ""
                if tol == SUM_TOL
                else f", the rounding bound of a {dtype} softmax of {x.shape[-1]:,} tokens"
            )
            + f": not a probability distribution; {LOGITS_HINT}; "
            f"to rescale positive weights, {NORMALIZE_HINT}"
        )
    return x


def to_distribution(
    x, *, kind: str = "logits", temperature: float = 1.0, top_k=None, top_p=None, normalize: bool = False
):
    r"""Logits or probabilities -> validated float64 probabilities (temperature, top-k, top-p).

    .. math:: \pi_T(y) \propto \exp(z_y / T)\,[y \in \text{top-}k]\,[y \in \text{top-}p]

    Parameters
    ----------
    x : torch.Tensor or array_like, shape (V,) or (B, V)
        Logits (``kind="logits"``; ``-inf`` marks a masked token) or probabilities
        (``kind="probs"``), any float dtype, any device.
    kind : {"logits", "probs"}
        How to read ``x``.
    temperature : float
        ``T > 0``. Applied first, to the logits (for probabilities: ``p**(1/T)`` renormalised).
    top_k : int or None
        Keep the ``top_k`` most likely tokens (ties: lower index first). ``None``: keep all.
    top_p : float or None
        Nucleus mass in ``(0, 1]``: keep the smallest prefix of the sorted tokens whose mass reaches
        ``top_p`` (within ``TOP_P_TIE`` = 1e-12 below it), the rule of :mod:`mdsd_ot.logits` (ranked by
        the input, not by rounded probabilities), so that numpy and torch keep the same tokens.
        ``None``: keep all.
    normalize : bool
        ``kind="probs"`` only: rescale rows that do not sum to one (else a ``ValueError``).

    Returns
    -------
    torch.Tensor, float64, same shape and device as ``x``
        Each row sums to one (up to float64 rounding); truncated tokens are exactly 0.

    Notes
    -----
    Cost: one softmax, plus one sort per row when ``top_k`` or ``top_p`` is set.
    Temperature does not commute with truncation: capture each temperature from the logits.

    Examples
    --------
    >>> import torch
    >>> to_distribution(torch.tensor([0.0, 0.0, -1e9]), top_k=1).tolist()
    [1.0, 0.0, 0.0]
    """
    torch = require_torch()
    if kind not in ("logits", "probs"):
        raise ValueError(f"unknown kind {kind!r}; choose 'logits' or 'probs'")
    dtype = source_dtype(x)
    t = _as_float64_tensor(x, "x")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise TypeError(f"temperature must be a positive float, got {type(temperature).__name__}")
    temperature = float(temperature)
    if not math.isfinite(temperature) or temperature <= 0:
        raise ValueError(
            f"temperature must be a finite float > 0, got {temperature!r} (for greedy use top_k=1)"
        )
    if top_k is not None:
        if isinstance(top_k, bool) or not isinstance(top_k, int):
            raise TypeError(f"top_k must be a positive int or None, got {type(top_k).__name__}")
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
    if top_p is not None:
        if isinstance(top_p, bool) or not isinstance(top_p, (int, float)):
            raise TypeError(f"top_p must be a float in (0, 1] or None, got {type(top_p).__name__}")
        top_p = float(top_p)
        if not (0.0 < top_p <= 1.0):
            raise ValueError(f"top_p must lie in (0, 1], got {top_p!r}")

    if kind == "probs":
        t = _check_probs(t, "x", normalize, dtype)
        if temperature == 1.0 and top_k is None and (top_p is None or top_p == 1.0):
            return t if normalize else t.clone()
        base = torch.log(t)  # log 0 = -inf: a zero stays zero under any temperature
    else:
        if bool(torch.isnan(t).any()) or bool((t == math.inf).any()):
            bad = torch.nonzero(torch.isnan(t) | (t == math.inf))[0].tolist()
            raise ValueError(f"logits contain NaN or +inf (first at index {tuple(bad)})")
        if bool((t == -math.inf).all(dim=-1).any()):
            raise ValueError("a row of logits is entirely -inf; no token is left to sample")
        base = t
    # shift by the row maximum before dividing by T: (z - max) / T <= 0 cannot overflow to +inf
    # (a difference that overflows to -inf is a token of probability 0 at any positive T)
    z = (base - base.max(dim=-1, keepdim=True).values) / temperature

    V = z.shape[-1]
    # rank by the input itself (logits, or the probabilities), as mdsd_ot.logits does: the order of z
    # without ties created by rounding
    key = base if kind == "logits" else t
    if top_k is not None and top_k < V:
        order = torch.sort(key, dim=-1, descending=True, stable=True).indices
        drop = order[..., top_k:]
        z = z.scatter(-1, drop, -math.inf)
    if top_p is not None and top_p < 1.0:
        exact = kind == "probs" and temperature == 1.0 and (top_k is None or top_k >= V)
        prob = t if exact else torch.softmax(z, dim=-1)
        order = torch.sort(
            key.masked_fill(z == -math.inf, -math.inf), dim=-1, descending=True, stable=True
        ).indices
        sorted_p = prob.gather(-1, order)
        # mass strictly before each rank, as a running sum of the earlier entries (no subtraction)
        before = torch.cat(
            [torch.zeros_like(sorted_p[..., :1]), torch.cumsum(sorted_p, -1)[..., :-1]], dim=-1
        )
        drop_sorted = before >= top_p - TOP_P_TIE
        drop_sorted[..., 0] = False  # the most likely token is always kept
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        z = z.masked_fill(drop, -math.inf)
    return torch.softmax(z, dim=-1)


class BatchBound(NamedTuple):
    """Batched optimal acceptance from :func:`sorted_prefix_bound`.

    Attributes
    ----------
    value : torch.Tensor, float64, shape (B,) or ()
        alpha* per row.
    prefix_len : torch.Tensor, int64, shape (B,) or ()
        Length k of an optimal prefix (the first maximiser): the optimal dual subset is
        ``order[..., :k]``.
    order : torch.Tensor, int64, shape (B, V) or (V,)
        The token order by ``q/p`` descending (see the module conventions).
    """

    value: object
    prefix_len: object
    order: object

    def subset(self, row: int = 0):
        """Sorted token indices of the optimal dual subset H of one row (a numpy int64 array)."""
        import numpy as np

        order = self.order if self.order.ndim == 1 else self.order[row]
        k = int(self.prefix_len if self.prefix_len.ndim == 0 else self.prefix_len[row])
        return np.sort(order[:k].cpu().numpy().astype(np.int64))


def sorted_prefix_order(p, q):
    """Token order for the sorting theorem: ``q/p`` descending, ``p=0<q`` first, ``q=0`` last.

    Parameters
    ----------
    p, q : torch.Tensor, float64, shape (B, V)

    Returns
    -------
    torch.Tensor, int64, shape (B, V)
        ``order[b, r]`` = the token at rank ``r`` of row ``b`` (ties in index order).
    """
    torch = require_torch()
    ratio = q / torch.where(p > 0, p, torch.ones_like(p))
    key = torch.where(p > 0, ratio, torch.full_like(p, math.inf))
    key = torch.where(q > 0, key, torch.full_like(p, -math.inf))
    return torch.sort(key, dim=-1, descending=True, stable=True).indices


def sorted_prefix_bound(
    p, q, n: int, sampling: str = "with_replacement", *, normalize: bool = False
) -> BatchBound:
    r"""Optimal acceptance alpha* for a batch of (p, q) pairs by the sorted-prefix scan, in torch.

    .. math::
        \alpha^* = 1 - \max_{k=0..V} \bigl[ Q(H_k) - P_k \bigr],

    with :math:`H_k` the first ``k`` tokens in ``q/p``-descending order and :math:`P_k = p(H_k)`.

    * ``"with_replacement"``: :math:`Q(H_k) = (Q_k)^n`, :math:`Q_k = q(H_k)` (any ``n``).
    * ``"without_replacement"`` (sequential, ``n = 2`` only):
      :math:`W_2(H) = q(H) - R \sum_{i \in H} q_i / (1 - q_i)`, where :math:`R` is the mass outside
      ``H`` computed as a direct suffix sum and each :math:`1 - q_i` as the sum of the other entries
      (prefix before ``i`` plus suffix after ``i``), never by subtraction from 1 (docs/math.md#numerics).
      ``n = 1`` is the same for both schemes.

    Parameters
    ----------
    p, q : torch.Tensor or array_like, shape (V,) or (B, V)
        Target and draft probabilities (any float dtype and device; computed in float64 there).
    n : int
        Number of drafts, ``>= 1``.
    sampling : {"with_replacement", "without_replacement"}
    normalize : bool
        Rescale rows that do not sum to one (else sums off by more than ``SUM_TOL`` raise). Rows
        within ``SUM_TOL`` of one are rescaled to one as in :func:`mdsd_ot.optimal_acceptance`.

    Returns
    -------
    BatchBound
        ``value`` (alpha* per row), ``prefix_len``, ``order``; 0-d / 1-D when the input was 1-D.

    Notes
    -----
    Cost: one sort and O(V) cumulative sums per row, all on the input device.

    Examples
    --------
    >>> import torch
    >>> p = torch.tensor([0.5, 0.3, 0.2, 0.0], dtype=torch.float64)
    >>> q = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    >>> round(float(sorted_prefix_bound(p, q, 2).value), 6)
    0.69
    >>> round(float(sorted_prefix_bound(p, q, 2, "without_replacement").value), 6)
    0.734524
    """
    pt, qt, _, squeeze = _prepare(p, q, [n], sampling, normalize)
    n = check_n(n)
    order = sorted_prefix_order(pt, qt)
    value, k = _scan(pt, qt, order, [n], sampling)[n]
    if squeeze:
        return BatchBound(value[0], k[0], order[0])
    return BatchBound(value, k, order)


class _SortedRows:
    """p and q of (B, V) rows along one order, their prefix sums ``P``, ``Q`` (k = 0..V) and, on first
    use, the suffix sums ``R`` of q (``R[k]`` the mass of ranks ``k..V-1``, outside ``H_k``, summed
    directly; ``R[V] = 0``)."""

    def __init__(self, ps, qs, P=None, Q=None, R=None):
        self.ps, self.qs = ps, qs
        self.P = _prefix_sums(ps) if P is None else P  # P[k] = p(H_k), k = 0..V
        self.Q = _prefix_sums(qs) if Q is None else Q
        self._R = R

    @classmethod
    def of(cls, pt, qt, order):
        torch = require_torch()
        return cls(torch.gather(pt, -1, order), torch.gather(qt, -1, order))

    @property
    def R(self):
        if self._R is None:
            torch = require_torch()
            self._R = torch.flip(_prefix_sums(torch.flip(self.qs, [-1])), [-1])
        return self._R


#: Sampling schemes :func:`sorted_prefix_bound` evaluates (those with a torch prefix family).
SAMPLINGS = tuple(name for name, s in SCHEMES.items() if s.torch_prefix is not None)


def _prefix_scheme(sampling):
    """The registry scheme ``sampling`` (a name or a ``DraftScheme``) if the torch backend evaluates it."""
    name = getattr(sampling, "name", sampling)
    if not isinstance(name, str) or name not in SAMPLINGS:
        raise ValueError(
            f"unknown sampling {sampling!r} for the torch backend; choose one of "
            f"{list(SAMPLINGS)} (others: use mdsd_ot.optimal_acceptance)"
        )
    return get_scheme(name)


def _scan(pt, qt, order, ns, sampling, tables=None):
    """{n: (alpha* per row, first optimal prefix length)} for (B, V) float64 rows sharing ``order``
    (or the :class:`_SortedRows` ``tables`` of that order)."""
    torch = require_torch()
    scheme = _prefix_scheme(sampling)
    rows = _SortedRows.of(pt, qt, order) if tables is None else tables
    out = {}
    for n in ns:
        QH = scheme.torch_prefix.mass(rows, n)
        best, k = torch.max(QH - rows.P, dim=-1)  # first maximiser; the k = 0 term is 0, so best >= 0
        value = (1.0 - best).clamp(0.0, 1.0)
        _recheck(rows.ps, rows.qs, k, n, scheme, value)
        out[n] = (value, k)
    return out


def _recheck(ps, qs, k, n, sampling, value):
    """Re-evaluate every row's certificate ``p(H) + 1 - Q(H)`` at its prefix ``H`` by another route
    (plain masked sums, no prefix sums: the scheme's ``torch_prefix.check``) and raise ``RuntimeError``
    naming the rows where it differs from ``value`` by more than ``RECHECK_TOL``: no unchecked bound
    leaves the backend.
    """
    torch = require_torch()
    scheme = _prefix_scheme(sampling)
    inside = torch.arange(ps.shape[-1], device=ps.device).unsqueeze(0) < k.unsqueeze(-1)
    zero = torch.zeros_like(ps)
    p_h = torch.where(inside, ps, zero).sum(-1)
    q_h = torch.where(inside, qs, zero).sum(-1)
    out_h = torch.where(inside, zero, qs).sum(-1)  # the mass outside H, summed directly
    mass = scheme.torch_prefix.check(ps, qs, inside, q_h, out_h, n)
    check = p_h + 1.0 - mass
    bad = torch.nonzero((check - value).abs() > RECHECK_TOL).flatten()
    if bad.numel():
        i = int(bad[0])
        raise RuntimeError(
            f"internal error: the torch bound of row {i} ({scheme.name}, n={n}) is {float(value[i])!r} but "
            f"its certificate re-evaluates to {float(check[i])!r}; {bad.numel()} row(s) differ by more than "
            f"{RECHECK_TOL:g}; please report this input"
        )


def _prepare(p, q, ns, sampling, normalize):
    """Validate inputs of the bound functions; return (pt, qt, ns, squeeze) with 2-D float64 rows.
    ``sampling``: a scheme of :data:`SAMPLINGS` whose n and support are checked too, or None."""
    require_torch()
    ns = [check_n(n) for n in ns]
    scheme = None if sampling is None else _prefix_scheme(sampling)
    if scheme is not None and ns:
        top = scheme.torch_prefix.max_n
        if top is not None and max(ns) > top:
            raise ValueError(
                f"the torch backend evaluates {scheme.name!r} sampling for n <= {top} only; "
                f"use mdsd_ot.optimal_acceptance(p, q, n, sampling={scheme.name!r}) for n > {top}"
            )
    pt = _as_float64_tensor(p, "p")
    qt = _as_float64_tensor(q, "q")
    if pt.shape != qt.shape:
        raise ValueError(f"p and q must have the same shape; got p {tuple(pt.shape)} and q {tuple(qt.shape)}")
    if pt.device != qt.device:
        raise ValueError(f"p and q must be on the same device; got {pt.device} and {qt.device}")
    squeeze = pt.ndim == 1
    pt = _check_probs(pt.reshape(-1, pt.shape[-1]), "p", normalize, source_dtype(p))
    qt = _check_probs(qt.reshape(-1, qt.shape[-1]), "q", normalize, source_dtype(q))
    # rescale to sum to one exactly as mdsd_ot.optimal_acceptance does (a change of ~1e-16 here)
    pt = pt / pt.sum(-1, keepdim=True)
    qt = qt / qt.sum(-1, keepdim=True)
    if scheme is not None and ns:
        need = max(scheme._min_support(n) for n in ns)
        have = int((qt > 0).sum(-1).min())
        if have < need:
            raise ValueError(
                f"sampling {scheme.name!r} with n = {max(ns)} needs at least {need} tokens with q > 0 in "
                f"every row; a row of q has {have}" + (" (it is one-hot)" if have == 1 else "")
            )
    return pt, qt, ns, squeeze


def sorted_prefix_bounds(p, q, ns, sampling: str = "with_replacement", *, normalize: bool = False):
    """alpha* for several ``n`` at once, sharing one sort (see :func:`sorted_prefix_bound`).

    Parameters
    ----------
    p, q : torch.Tensor or array_like, shape (V,) or (B, V)
    ns : iterable of int
    sampling : {"with_replacement", "without_replacement"}
    normalize : bool

    Returns
    -------
    dict
        ``{n: torch.Tensor float64 of shape (B,) (or () for 1-D input)}``.
    """
    pt, qt, ns, squeeze = _prepare(p, q, list(ns), sampling, normalize)
    order = sorted_prefix_order(pt, qt)
    res = _scan(pt, qt, order, ns, sampling)
    return {n: (v[0] if squeeze else v) for n, (v, _) in res.items()}


def greedy_bounds(p, q, ns, *, normalize: bool = False):
    r"""alpha* for greedy drafts (Hu et al.; docs/math.md#greedy-and-hub) for several ``n``, batched.

    .. math:: \alpha^*_{greedy} = p(\mathrm{Top}) + \sum_{x \notin \mathrm{Top}} \min(p(x), q'(x)),
        \quad q'(x) = q(x) / q(\Sigma \setminus \mathrm{Top})

    ``Top`` holds the ``n - 1`` most likely draft tokens (ties: lower index first; ``torch.topk``, no
    full sort); the rest mass is a direct sum over the complement of ``Top`` (never ``1 - q(Top)``).
    The same code as :func:`evaluate_batch`'s greedy and hub bounds: each certificate is re-checked
    on the device (``RuntimeError`` naming the row otherwise).

    Parameters
    ----------
    p, q : torch.Tensor or array_like, shape (V,) or (B, V)
    ns : iterable of int
        Each needs at least ``n`` tokens with ``q > 0`` in every row.
    normalize : bool

    Returns
    -------
    dict
        ``{n: torch.Tensor float64 of shape (B,) (or ())}``.
    """
    pt, qt, ns, squeeze = _prepare(p, q, list(ns), None, normalize)
    need = max(ns)
    if bool(((qt > 0).sum(-1) < need).any()):
        raise ValueError(f"greedy drafts with n = {need} need at least {need} tokens with q > 0 in every row")
    batch = _Batch(pt, qt, ns)
    out = {n: batch.greedy_bound(n) for n in ns}
    return {n: v[0] for n, v in out.items()} if squeeze else out


# ------------------------------------------------------------------ the evaluation plan, batched
def _plan_tables(ps, qs):
    """``t = p/q`` along the plan's order (``q/p`` descending), ascending (``inf`` where ``q = 0``; made
    monotone by a running maximum against rounding)."""
    torch = require_torch()
    t = torch.where(qs > 0, ps / torch.where(qs > 0, qs, 1.0), math.inf)
    return torch.cummax(t, -1).values


class _Batch:
    """The shared tensors of one :func:`evaluate_batch` call, each computed on first use: the rows along
    the ``q/p`` order (one sort) and their ratio table, the greedy-family sums for every n asked for up
    front (one pass of ``torch.topk``), and the support sizes."""

    def __init__(self, pt, qt, greedy_ns=()):
        self.pt, self.qt = pt, qt
        self.support = (qt > 0).sum(-1)
        self.greedy_ns = sorted(set(greedy_ns))
        self._rows = self._t = self._greedy = None
        self._greedy_bounds = {}

    def has_support(self, scheme, n: int) -> bool:
        """Every row has the tokens with ``q > 0`` that ``scheme`` needs for ``n`` drafts."""
        return bool((self.support >= scheme._min_support(n)).all())

    @property
    def rows(self) -> _SortedRows:
        if self._rows is None:
            torch = require_torch()
            order = sorted_prefix_order(self.pt, self.qt)
            self._rows = _SortedRows(torch.gather(self.pt, -1, order), torch.gather(self.qt, -1, order))
        return self._rows

    @property
    def t(self):
        """``p/q`` along the order, ascending (:func:`_plan_tables`)."""
        if self._t is None:
            self._t = _plan_tables(self.rows.ps, self.rows.qs)
        return self._t

    def greedy(self):
        """``{n: (p(Top), sum min(p, q'), sum (p - q')_+, sum (q' - p)_+, p(argmax q))}``
        (:func:`mdsd_ot.drafts.greedy.torch_sums`)."""
        if self._greedy is None:
            self._greedy = greedy_torch_sums(self.pt, self.qt, self.greedy_ns)
        return self._greedy[0]

    def greedy_bound(self, n: int):
        """alpha* of the greedy family (top ``n - 1`` of q plus one draw) for ``n`` drafts, re-checked."""
        if n not in self._greedy_bounds:
            self._greedy_bounds[n] = greedy_torch_bound(self.pt, self.qt, self.greedy(), self._greedy[1], n)
        return self._greedy_bounds[n]


#: Verifiers :func:`evaluate_batch` evaluates on the tensors' device (each under its own scheme): those
#: whose module gives a ``Verifier.batch`` (a :class:`mdsd_ot.verifiers.base.BatchVerifier`).
BATCH_VERIFIERS = tuple(name for name, v in VERIFIERS.items() if v.batch is not None)


def evaluate_batch(
    p, q, ns, *, schemes=("with_replacement", "without_replacement", "greedy"), verifiers=BATCH_VERIFIERS
):
    """The evaluation plan (:mod:`mdsd_ot.plan`) for ``(B, V)`` tensors on their own device.

    One sort by ``q/p`` per row serves the with-replacement bounds (any n), sequential n <= 2 and
    the verifiers ``rrs``, ``spectr`` and ``rrs_without_replacement`` (n = 2), with the prefix sums
    computed once; the greedy and hub bounds and the ``greedy``, ``spechub`` verifiers need only the
    top of q (``torch.topk``, no sort); ``naive`` is elementwise (moments, no logarithm). float64
    throughout; the numpy plan is the reference (equal to 1e-12, tested). Every bound's certificate is
    re-checked on the device by plain masked sums before it is returned (``RuntimeError`` naming the
    rows otherwise).

    Which quantities are evaluated here is asked of the scheme (its torch twin ``torch_prefix``,
    ``top_family``, ``fixed_n``, the support it needs) and of each verifier (its ``Verifier.batch``);
    a quantity needing more tokens with ``q > 0`` than some row has is left to the caller.

    Parameters
    ----------
    p, q : torch.Tensor, shape (B, V) or (V,)
    ns : iterable of int
    schemes : iterable of str
        Registry scheme names; those evaluated here are ``with_replacement``, ``without_replacement``
        (n <= 2 here), ``greedy`` and ``hub``, the others are skipped.
    verifiers : iterable of str
        Registry verifier names; those evaluated here are :data:`BATCH_VERIFIERS`
        (``rrs_without_replacement`` and ``spechub`` for n = 2 only), the others are skipped.

    Returns
    -------
    dict
        ``{"bound:<scheme>@<n>" or "verifier:<name>@<n>": float64 tensor (B,)}`` for every quantity
        this function covers; the caller evaluates the others with :func:`mdsd_ot.plan.evaluate_position`.
    """
    from ..verifiers import get_verifier

    ns = sorted({check_n(n) for n in ns})
    pt, qt, _, _ = _prepare(p, q, ns, None, False)
    batch = _Batch(pt, qt)
    # what to evaluate, asked of the schemes and the verifier registry; the greedy family's n up front
    bound_tasks = []  # (scheme, n, kind)
    for s in schemes:
        scheme = get_scheme(s)
        for n in ns:
            if scheme.fixed_n not in (None, n) or not batch.has_support(scheme, n):
                continue
            kind = scheme.torch_route(n)
            if kind is not None:
                bound_tasks.append((scheme, n, kind))
    verifier_tasks = []  # (name, BatchVerifier, ns)
    for name in verifiers:
        v = get_verifier(name)
        entry = v.batch
        if entry is None:
            continue
        scheme = get_scheme(v.scheme)
        vns = [n for n in ns if entry.covers(n) and v.fixed_n in (None, n) and batch.has_support(scheme, n)]
        if vns:
            verifier_tasks.append((v.name, entry, vns))
    greedy_ns = {n for _, n, kind in bound_tasks if kind == "greedy"}
    greedy_ns |= {entry.needs(n).get("greedy") for _, entry, vns in verifier_tasks for n in vns} - {None}
    batch.greedy_ns = sorted(greedy_ns)

    out = {}
    prefix = {}
    for scheme, n, kind in bound_tasks:
        if kind == "prefix":
            prefix.setdefault(scheme.name, []).append(n)
        else:
            out[bound_key(scheme.name, n)] = batch.greedy_bound(n)
    for name, pns in prefix.items():
        for n, (v, _) in _scan(pt, qt, None, pns, name, batch.rows).items():
            out[bound_key(name, n)] = v
    extra = {}  # bounds not requested, computed to check the verifiers against them
    for name, entry, vns in verifier_tasks:
        for n, value in entry.evaluate(batch, vns).items():
            out[verifier_key(name, n)] = value
            _check_below_bound(name, n, value, _bound_for(get_verifier(name).scheme, n, out, extra, batch))
    return out


def _bound_for(sampling, n, out, extra, batch):
    """alpha* tensor of the scheme bounding a verifier run under ``sampling`` (that scheme, or the one
    with the same draft-set law): the requested one from ``out``, else computed (and kept in
    ``extra``) by the same device code, re-checked alike; ``None`` where the device does not cover it."""
    scheme = get_scheme(sampling)
    scheme = get_scheme(scheme.same_sets_as or scheme.name)
    key = bound_key(scheme.name, n)
    if key in out:
        return out[key]
    if key not in extra:
        kind = scheme.torch_route(n) if batch.has_support(scheme, n) else None
        if kind == "prefix":
            extra[key] = _scan(batch.pt, batch.qt, None, [n], scheme.name, batch.rows)[n][0]
        elif kind is not None:
            extra[key] = batch.greedy_bound(n)
        else:
            extra[key] = None
    return extra[key]


def _check_below_bound(name, n, value, bound):
    """No valid verifier beats the optimal acceptance of its scheme: ``RuntimeError`` naming the first
    row where ``value`` exceeds ``bound`` by more than ``RECHECK_TOL`` (the caller falls back to the
    numpy plan, which checks the same)."""
    if bound is None:
        return
    bad = (value - bound > RECHECK_TOL).nonzero().flatten()
    if bad.numel():
        i = int(bad[0])
        raise RuntimeError(
            f"internal error: the torch acceptance of {name!r} (n={n}) in row {i} is {float(value[i])!r}, "
            f"above the optimal acceptance {float(bound[i])!r} of its drafts; please report this input"
        )


def __getattr__(name):
    if name == "TORCH_VERIFIERS":  # deprecated: each verifier module holds its torch formula
        from ..verifiers import deprecated_formula_registry

        return deprecated_formula_registry("batch", "mdsd_ot.backends.torch.TORCH_VERIFIERS")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
