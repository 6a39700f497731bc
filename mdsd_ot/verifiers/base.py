"""The verifier protocol shared by every published method in :mod:`mdsd_ot.verifiers`.

A *verifier* receives the target ``p``, the draft distribution ``q`` and the ``n`` drafts (drawn from
``q`` under the draft scheme the verifier assumes) and outputs one token. It is **valid** when the
output token is distributed exactly as ``p``; its **acceptance** is the probability that the output
token is one of the drafts (docs/math.md#notation).

Two layers:

* :class:`Verifier` -- a stateless registry entry (name, assumed draft scheme(s), paper). Its
  convenience methods (:meth:`Verifier.verify`, :meth:`Verifier.output_law`,
  :meth:`Verifier.acceptance`) validate the input and delegate to a prepared instance.
* :class:`PreparedVerifier` -- the verifier bound to one ``(p, q, n, scheme)``; it precomputes what does
  not depend on the drafts (residual chains, thresholds, transport plans) so that verifying many draft
  tuples, enumerating a draft law or running Monte Carlo costs little per tuple.

Numerical conventions (docs/math.md#numerics): float64 throughout; every ``(r - s)_+`` is clamped at zero
and every normalisation is guarded (a zero residual is a branch of probability zero, never a NaN); a
draft is accepted when ``u < ratio`` with ``u ~ U[0, 1)``, so a zero-probability token is never
accepted; every mass "outside a set" is a direct sum over the complement.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import numpy as np

from .._config import UNIT_ROUNDING_TOL
from .._validate import check_n, normalized_pair
from ..backends._tensor import require_torch
from ..drafts import SCHEMES, DraftScheme, get_scheme, top_tokens

#: Every draft scheme, the default (with replacement) first: for verifiers valid under any scheme.
ANY_SCHEME = ("with_replacement",) + tuple(s for s in SCHEMES if s != "with_replacement")

__all__ = [
    "Verdict",
    "Verifier",
    "PreparedVerifier",
    "residual",
    "sample_index",
    "top_k",
    "sample_drafts_batch",
    "accept_ratio",
    "accept_fraction",
    "unit_interval",
    "power_exceeds",
]


@dataclass(frozen=True)
class Verdict:
    """Outcome of verifying one draft tuple.

    Attributes
    ----------
    token : int
        The output token.
    accepted : bool
        True when the output token is one of the drafts.
    """

    token: int
    accepted: bool


# ------------------------------------------------------------------------------------ helpers
def residual(r: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, float]:
    """``res(r, s) = (r - s)_+`` normalised, and its mass ``sum (r - s)_+``.

    The mass is the rejection probability ``1 - beta(r, s)`` of one speculative-sampling step,
    computed as a sum of non-negative terms (no cancellation). When it is zero the rejection branch
    has probability zero; ``r`` itself is returned as a harmless placeholder law (never NaN).

    Complexity O(V).

    Parameters
    ----------
    r, s : numpy.ndarray, shape (V,)
        Current target and draft laws (float64, non-negative).

    Returns
    -------
    tuple of (numpy.ndarray, float)
        ``(res(r, s), sum (r - s)_+)``.
    """
    d = np.maximum(r - s, 0.0)
    mass = float(d.sum())
    if mass > 0.0:
        return d / mass, mass
    return r, 0.0


def accept_ratio(r, s):
    """``min(1, r / s)`` for ``r, s >= 0`` without overflow: 1 where ``r >= s``, else ``r / s`` (< 1).

    The acceptance probability of one speculative-sampling step; ``r / s`` alone overflows when
    ``s`` is subnormal (and warns), which this never forms. Scalars give a float, arrays an array.

    Parameters
    ----------
    r, s : float or array_like
        Non-negative numbers (arrays are broadcast together).

    Returns
    -------
    float or numpy.ndarray
    """
    if np.ndim(r) == 0 and np.ndim(s) == 0:
        return 1.0 if r >= s else float(r) / float(s)
    r, s = np.broadcast_arrays(np.asarray(r, dtype=np.float64), np.asarray(s, dtype=np.float64))
    out = np.ones(r.shape)
    below = r < s
    out[below] = r[below] / s[below]
    return out


def accept_fraction(accept: float, reject: float) -> float:
    """``accept / (accept + reject)`` for the accepted and rejected masses of one problem.

    Both are sums of non-negative terms whose total is ``sum(p) = 1`` up to rounding. The ratio lies in
    [0, 1] in floating point too (``fl(a + b) >= a`` and rounding is monotone), and dividing by the
    total removes the rounding of ``sum(p)`` itself (``p / p.sum()`` may sum to ``1 + 2**-52``), which
    is what pushed closed forms such as ``p(Top) + sum min(p, q')`` to ``1 + 2**-52``.

    Parameters
    ----------
    accept, reject : float
        Non-negative accepted and rejected masses.

    Returns
    -------
    float
        In [0, 1]; 0 when both are 0.
    """
    total = accept + reject
    return accept / total if total > 0.0 else 0.0


def torch_accept_fraction(accept, reject):
    """:func:`accept_fraction` of tensors, elementwise (the batched torch plan)."""
    torch = require_torch()
    total = accept + reject
    return torch.where(total > 0, accept / torch.where(total > 0, total, 1.0), 0.0)


class PlanVerifier(NamedTuple):
    """How the evaluation plan (:mod:`mdsd_ot.plan`) evaluates a verifier under its own default scheme
    (``Verifier.plan``).

    ``covers(n)`` says which n ``evaluate`` handles (other n go through
    :func:`mdsd_ot.verifier_acceptance`); ``evaluate(plan, ns)`` returns one acceptance per n and may
    read what :class:`mdsd_ot.interfaces.PlanView` names (``plan.p``, ``plan.q``, ``plan.tables()``
    along the q/p order, ``plan.scans(ns)``, ...), but must not keep it (work arrays are reused by the
    next position); a value it cannot vouch for is returned as an exception instance (recorded in
    ``errors``). ``needs(n)`` names the passes to prepare so that each runs once:
    ``{"greedy": n}`` (the top of q for n drafts), ``{"naive": n}``, ``{"rsd2": True}``."""

    covers: Callable
    evaluate: Callable
    needs: Callable = lambda n: {}


class BatchVerifier(NamedTuple):
    """How the batched torch plan (:func:`mdsd_ot.backends.torch.evaluate_batch`) evaluates a verifier
    on the tensors' device, under its own default scheme (``Verifier.batch``; the torch twin of
    :class:`PlanVerifier`).

    ``covers(n)`` says which n ``evaluate`` handles (other n: the numpy plan); ``evaluate(batch, ns)``
    returns ``{n: float64 tensor (B,)}`` and may read what :class:`mdsd_ot.interfaces.BatchView`
    names (``batch.pt``, ``batch.qt``, ``batch.rows``: the sorted rows and their prefix sums,
    ``batch.t`` and ``batch.greedy()``); ``needs(n)`` names what to
    prepare up front: ``{"greedy": n}`` (the greedy-family sums for n drafts)."""

    covers: Callable
    evaluate: Callable
    needs: Callable = lambda n: {}


def unit_interval(x, what: str = "acceptance"):
    """``x`` (scalar or array) clipped to [0, 1] where it is outside by rounding alone.

    The clip only removes pure rounding: every value must lie within ``UNIT_ROUNDING_TOL`` (1e-12) of
    [0, 1]. A larger excursion (or a NaN) means a formula is wrong, so it raises ``RuntimeError``
    instead of being hidden.

    Parameters
    ----------
    x : float or array_like
    what : str
        What ``x`` is, for the error message.

    Returns
    -------
    float or numpy.ndarray
        A float for scalar input, else a float64 array.
    """
    a = np.asarray(x, dtype=np.float64)
    if a.size and not (a.min() >= -UNIT_ROUNDING_TOL and a.max() <= 1.0 + UNIT_ROUNDING_TOL):
        bad = a[~((a >= -UNIT_ROUNDING_TOL) & (a <= 1.0 + UNIT_ROUNDING_TOL))].ravel()[0]
        raise RuntimeError(
            f"internal error: {what} {bad!r} lies outside [0, 1] by more than rounding "
            f"({UNIT_ROUNDING_TOL:g}); please report this input"
        )
    out = np.clip(a, 0.0, 1.0)
    return float(out) if out.ndim == 0 else out


def power_exceeds(base: int, exponent: int, limit: int) -> bool:
    """``base ** exponent > limit`` without building the power (``exponent`` may be ~2**63).

    A float ``base ** exponent`` overflows (``OverflowError``) and a Python-int one takes time and
    memory linear in ``exponent``: compare logarithms, and build the power exactly only when it is
    within a factor ``e`` of the limit (then it is small).

    Parameters
    ----------
    base, exponent : int
        Non-negative integers.
    limit : int
        A positive integer.

    Returns
    -------
    bool
    """
    if base <= 1:
        return base > limit  # 0 ** e and 1 ** e are at most 1
    log_power = exponent * math.log(base)
    if log_power > math.log(limit) + 1.0:
        return True
    if log_power < math.log(limit) - 1.0:
        return False
    return base**exponent > limit


def sample_index(w: np.ndarray, u: float) -> int:
    """Inverse-CDF draw from non-negative weights ``w`` (not necessarily normalised), ``u in [0, 1)``.

    A zero-weight token is never returned (``side='right'`` and a clamp to the last positive weight).

    Parameters
    ----------
    w : numpy.ndarray, shape (V,)
        Non-negative weights with a positive sum (``ValueError`` for an all-zero law).
    u : float
        A uniform draw in ``[0, 1)``.

    Returns
    -------
    int
        A token with ``w > 0``.
    """
    cdf = np.cumsum(w)
    total = cdf[-1]
    if not total > 0.0:
        raise ValueError("internal error: sampling from an all-zero law; please report this input")
    # cdf[idx - 1] <= u * total < cdf[idx] forces w[idx] > 0; only rounding can push idx past the end
    idx = int(np.searchsorted(cdf, u * total, side="right"))
    if idx >= w.size:
        idx = int(np.flatnonzero(w > 0)[-1])
    return idx


def top_k(q: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` most likely tokens, ties broken by index, in O(V): :func:`mdsd_ot.drafts.top_tokens`.

    Parameters
    ----------
    q : numpy.ndarray, shape (V,)
        Draft law.
    k : int
        Number of tokens.

    Returns
    -------
    numpy.ndarray of int
        The tokens in decreasing order of ``q``.
    """
    return top_tokens(q, k)


def sample_drafts_batch(scheme, q: np.ndarray, n: int, samples: int, rng: np.random.Generator):
    """``samples`` draft tuples, shape ``(samples, n)``: the scheme's batch sampler
    (:meth:`mdsd_ot.drafts.DraftScheme.sample_batch`; vectorised where the scheme has one).

    Parameters
    ----------
    scheme : DraftScheme
    q : numpy.ndarray, shape (V,)
        Validated draft law.
    n : int
        Drafts per tuple.
    samples : int
        Number of tuples.
    rng : numpy.random.Generator

    Returns
    -------
    numpy.ndarray of int64, shape (samples, n)
    """
    return scheme.sample_batch(q, n, samples, rng)


def _check_drafts(drafts, q: np.ndarray, n: int, scheme: DraftScheme, cache=None) -> np.ndarray:
    """Validate a draft tuple against the scheme: shape, range, q > 0, and the scheme's structure."""
    arr = np.asarray(drafts)
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind == "f" and arr.size and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise TypeError(f"drafts must be integer token indices, got dtype {arr.dtype}")
    arr = arr.astype(np.int64).reshape(-1)
    if arr.size != n:
        raise ValueError(f"expected {n} drafts, got {arr.size}")
    V = q.size
    # min/max and one gather: a verifier loop calls this per draft tuple, where numpy's per-call
    # overhead (not the n comparisons) is the cost
    if arr.min() < 0 or arr.max() >= V:
        raise ValueError(f"draft token indices must lie in [0, {V}); got {arr.tolist()}")
    drafted = q[arr]
    if not drafted.min() > 0:
        bad = int(arr[np.argmax(drafted <= 0)])
        raise ValueError(f"draft token {bad} has q = 0 and cannot have been drafted")
    scheme.check_structure(arr, q, n, cache)
    return arr


# ------------------------------------------------------------------------------------ protocol
class PreparedVerifier(ABC):
    """A verifier bound to one problem ``(p, q, n, scheme)``; build it with :meth:`Verifier.prepare`.

    Attributes
    ----------
    verifier : Verifier
        The registry entry.
    p, q : ndarray, shape (V,)
        Target and draft distributions (float64, summing to one).
    n : int
        Number of drafts.
    scheme : DraftScheme
        The draft scheme.
    """

    def __init__(self, verifier: Verifier, p: np.ndarray, q: np.ndarray, n: int, scheme: DraftScheme):
        self.verifier = verifier
        self.p = p
        self.q = q
        self.n = n
        self.scheme = scheme

    # -- per draft tuple ---------------------------------------------------------------------
    def check_drafts(self, drafts) -> np.ndarray:
        """Validate one draft tuple (shape ``(n,)``) against the scheme; int64 copy."""
        if not hasattr(self, "_structure_cache"):
            self._structure_cache = {}
        return _check_drafts(drafts, self.q, self.n, self.scheme, self._structure_cache)

    def verify(self, drafts, rng: np.random.Generator) -> Verdict:
        """Run the verification algorithm on one draft tuple with the generator ``rng``."""
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
        x = self.check_drafts(drafts)
        token = int(self._verify(x, rng))
        return Verdict(token, token in x.tolist())

    def output_law(self, drafts) -> tuple[np.ndarray, float]:
        """Exact law of the output token given the drafts, and P(output is a draft | drafts).

        Returns
        -------
        law : ndarray, shape (V,)
        accept : float
        """
        x = self.check_drafts(drafts)
        law = self._law(x)
        return law, float(law[np.unique(x)].sum())

    def accept_probability(self, drafts) -> float:
        """P(output is a draft | drafts); subclasses may override with a cheaper formula."""
        return self.output_law(drafts)[1]

    # -- overall acceptance --------------------------------------------------------------------
    def exact_available(self) -> bool:
        """True when :meth:`acceptance` can be evaluated exactly (closed form or recursion)."""
        return True

    def acceptance(self) -> float:
        """Exact acceptance rate ``E[P(output is a draft | drafts)]``."""
        raise NotImplementedError  # pragma: no cover

    def monte_carlo_range(self) -> tuple[float, float]:
        """Bounds ``(lo, hi)`` on every per-sample Monte Carlo value (default: ``[0, 1]``).

        The reported standard error is never below ``1.5 (hi - lo) / samples``: a draft event of
        probability below ``3 / samples`` is missed with probability up to 5% and would shift the mean
        by up to ``3 (hi - lo) / samples``, which a sample standard error cannot see (it is 0 when every
        sample is equal). Verifiers with a tighter range override this.
        """
        return 0.0, 1.0

    # -- to implement ------------------------------------------------------------------------
    @abstractmethod
    def _verify(self, drafts: np.ndarray, rng: np.random.Generator) -> int:
        """Sample the output token (drafts already validated)."""

    @abstractmethod
    def _law(self, drafts: np.ndarray) -> np.ndarray:
        """Exact output law, shape (V,) (drafts already validated)."""


class Verifier(ABC):
    """A published multi-draft verification method (a stateless registry entry).

    Class attributes
    ----------------
    name : str
        Registry name.
    schemes : tuple of str
        Draft schemes the method is valid for; the first is its default.
    fixed_n : int or None
        The only number of drafts the method is defined for, if any.
    reference : str
        The paper.
    plan : PlanVerifier or None
        Its acceptance from the evaluation plan's shared tables (None: the plan calls
        :func:`mdsd_ot.verifier_acceptance`).
    batch : BatchVerifier or None
        Its acceptance in the batched torch plan (None: not on the device).
    """

    name: ClassVar[str]
    schemes: ClassVar[tuple[str, ...]]
    fixed_n: ClassVar[int | None] = None
    reference: ClassVar[str] = ""
    plan: ClassVar[PlanVerifier | None] = None
    batch: ClassVar[BatchVerifier | None] = None

    @property
    def scheme(self) -> str:
        """The draft scheme this verifier assumes by default."""
        return self.schemes[0]

    def resolve_scheme(self, sampling=None) -> DraftScheme:
        """The scheme to use: ``sampling`` if given (it must be supported), else the default."""
        if sampling is None:
            return get_scheme(self.scheme)
        scheme = get_scheme(sampling)
        if scheme.name not in self.schemes:
            raise ValueError(
                f"verifier {self.name!r} assumes draft sampling {' or '.join(map(repr, self.schemes))}, "
                f"not {scheme.name!r}; its acceptance and validity do not hold for other draft laws"
            )
        return scheme

    def check_n(self, n: int) -> None:
        """``ValueError`` when the method is not defined for ``n`` drafts."""
        if self.fixed_n is not None and n != self.fixed_n:
            raise ValueError(
                f"verifier {self.name!r} is defined for n = {self.fixed_n} drafts only, got n={n}"
            )

    def prepare(self, p, q, n, *, sampling=None, normalize: bool = False) -> PreparedVerifier:
        """Validate ``(p, q, n)`` and bind the verifier to it.

        ``p`` and ``q`` are validated by :func:`mdsd_ot._validate.check_pair` (sums within ``SUM_TOL``
        of one, or anything positive with ``normalize=True``) and rescaled to sum to one exactly, as
        :func:`mdsd_ot.optimal_acceptance` does.
        """
        p, q = normalized_pair(p, q, normalize=normalize)
        return self.prepare_normalized(p, q, n, sampling=sampling)

    def prepare_normalized(self, p, q, n, *, sampling=None) -> PreparedVerifier:
        """:meth:`prepare` for a pair already returned by :func:`mdsd_ot._validate.normalized_pair`
        (validated float64 arrays rescaled to sum to one): no copy is made, so one pair can be
        shared by several verifiers (a draft tree prepares every verifier of a node on the same
        read-only pair). ``n`` and the scheme are checked as in :meth:`prepare`."""
        n = check_n(n)
        scheme = self.resolve_scheme(sampling)
        self.check_n(n)
        scheme.check(q, n)
        return self._prepare(p, q, n, scheme)

    @abstractmethod
    def _prepare(self, p: np.ndarray, q: np.ndarray, n: int, scheme: DraftScheme) -> PreparedVerifier:
        """Bind to validated, normalised input."""

    # -- convenience wrappers ------------------------------------------------------------------
    def verify(self, p, q, drafts, rng: np.random.Generator, *, sampling=None) -> Verdict:
        """Verify one draft tuple: ``Verdict(token, accepted)``. ``n`` is ``len(drafts)``.

        Validates and prepares on every call; to verify many draft tuples of one problem, call
        :meth:`prepare` once and use :meth:`PreparedVerifier.verify`.
        """
        n = int(np.size(drafts))
        return self.prepare(p, q, n, sampling=sampling).verify(drafts, rng)

    def output_law(self, p, q, drafts, *, sampling=None) -> tuple[np.ndarray, float]:
        """Exact law of the output token given the drafts, and P(output is a draft | drafts)."""
        n = int(np.size(drafts))
        return self.prepare(p, q, n, sampling=sampling).output_law(drafts)

    def acceptance(self, p, q, n, *, sampling=None, normalize: bool = False) -> float:
        """Exact acceptance rate (``ValueError`` when no exact method applies to this size)."""
        prepared = self.prepare(p, q, n, sampling=sampling, normalize=normalize)
        if not prepared.exact_available():
            raise ValueError(
                f"no exact acceptance for verifier {self.name!r} at V={prepared.p.size}, n={prepared.n}; "
                f"use verifier_acceptance(..., method='monte_carlo')"
            )
        return unit_interval(prepared.acceptance())  # clips rounding only; raises beyond 1e-12

    def __repr__(self) -> str:
        return f"<verifier {self.name!r}: drafts {self.scheme!r}; {self.reference}>"
