"""Recursive speculative decoding (RSD) with sequential drafts without replacement.

Reference: Jeon, Gagrani, Goel, Park, Lee & Lott, "Recursive Speculative Decoding: Accelerating LLM
Inference via Sampling Without Replacement", arXiv:2402.14160 (registry name
``"rrs_without_replacement"``). docs/math.md#rsd.

Start with ``r = p, s = q``. For each draft in draw order: accept ``x_i`` with probability
``min(1, r(x_i) / s(x_i))``; on rejection set ``r = (r - s)_+`` normalised, then remove ``x_i`` from
``s`` and renormalise (by the direct sum of the remaining mass). If every draft is rejected, sample
``r``.

Exact acceptance, in its rejection form (sums of non-negative terms only):

.. math:: \\mathrm{Rej}(r, s, 1) = \\sum_y (r_y - s_y)_+, \\qquad
          \\mathrm{Rej}(r, s, m) = \\sum_{x:\\, s_x > r_x} (s_x - r_x)\\,
          \\mathrm{Rej}\\bigl(\\mathrm{res}(r, s),\\, s_{-x} / s(\\Sigma \\setminus x),\\, m - 1\\bigr)

and ``alpha = 1 - Rej(p, q, n)``. ``m = 2`` is evaluated in O(V log V) by
:func:`mdsd_ot._kernels.verifiers.rsd2_rejection`, so ``n = 2`` costs O(V log V) at any vocabulary
size and ``n >= 3`` costs O(V^(n-2) V log V) (used up to ``EXACT_MAX_WORK``); beyond that the
acceptance is estimated by Monte Carlo with a standard error
(:func:`mdsd_ot._kernels.verifiers.rsd_path_mc`: rejection paths sampled from their exact laws,
O(samples n (n + log V)) after one sort).

The whole chain is governed by one scalar: with ``t = p/q``, the residual after ``k - 1`` rejections
is ``r_k = (p - theta_k q)_+ / E(theta_k)`` with ``E(theta) = sum_y (p_y - theta q_y)_+``,
``theta_1 = 0`` and ``theta_{k+1} = theta_k + E(theta_k) / M_k`` (``M_k`` the q-mass not yet drafted),
and ``P(all n steps reject) = E[E(theta_{n+1})]`` over the law of the rejected tokens.
"""

from __future__ import annotations

import math

import numpy as np

from .. import _compile
from .._kernels import small_or_jit
from .._kernels import verifiers as _kernels
from ..backends._tensor import prefix_sums, require_torch
from ..drafts import complement_masses
from ..drafts._common import torch_complement_masses
from .base import (
    BatchVerifier,
    PlanVerifier,
    PreparedVerifier,
    Verifier,
    accept_ratio,
    power_exceeds,
    residual,
    sample_index,
)

__all__ = ["RSDVerifier", "rsd_rejection", "EXACT_MAX_WORK", "MC_MAX_WORK"]

#: Largest ``support^(n-1)`` for which the exact recursion is attempted (n >= 3).
EXACT_MAX_WORK = 5_000_000

#: Largest ``samples * n**3`` of the rejection-path Monte Carlo (each of the ``n`` steps of a path
#: scans the up to ``n`` drafted tokens against the ``n`` atoms): ~10 s; beyond it, a ``ValueError``.
MC_MAX_WORK = 20_000_000_000


def _drop(s: np.ndarray, x: int) -> np.ndarray:
    """``s`` with token ``x`` removed and renormalised by the direct sum of what is left."""
    out = s.copy()
    out[x] = 0.0
    return out / out.sum()


def rsd_rejection(r: np.ndarray, s: np.ndarray, m: int) -> float:
    """``Rej(r, s, m)`` of the module docstring: P(all ``m`` RSD steps reject).

    ``m = 1``: O(V); ``m = 2``: O(V log V) numba kernel; ``m >= 3``: recursion over the rejected
    first draft, O(V^(m-2) V log V).

    Parameters
    ----------
    r, s : numpy.ndarray, shape (V,)
        Current target and draft laws (float64; ``r = p, s = q`` at the start).
    m : int
        Number of steps left (>= 1).

    Returns
    -------
    float
    """
    if m == 1:
        return float(np.maximum(r - s, 0.0).sum())
    if m == 2:
        _compile.notice("rsd", r.size)
        kernel = small_or_jit(_kernels.rsd2_rejection, r.size)  # small V: no compile on a first call
        return float(kernel(r, s, complement_masses(s)))
    nxt, tv = residual(r, s)
    if tv <= 0.0:
        return 0.0
    total = 0.0
    for x in np.flatnonzero(s > r):
        total += (s[x] - r[x]) * rsd_rejection(nxt, _drop(s, int(x)), m - 1)
    return float(total)


class _PreparedRSD(PreparedVerifier):
    def _verify(self, drafts, rng):
        r, s = self.p, self.q
        for i, x in enumerate(drafts):
            x = int(x)
            if rng.random() < accept_ratio(r[x], s[x]):
                return x
            r, _ = residual(r, s)
            if i + 1 < drafts.size:
                s = _drop(s, x)
        return sample_index(r, rng.random())

    def _law(self, drafts):
        law = np.zeros(self.p.size)
        alive = 1.0
        r, s = self.p, self.q
        for i, x in enumerate(drafts):
            x = int(x)
            a = accept_ratio(r[x], s[x])
            law[x] += alive * a
            alive *= 1.0 - a
            r, _ = residual(r, s)
            if i + 1 < drafts.size:
                s = _drop(s, x)
        law += alive * r
        return law

    def exact_available(self):
        if self.n <= 2:
            return True
        support = int(np.count_nonzero(self.q > 0))
        return not power_exceeds(support, self.n - 1, EXACT_MAX_WORK)  # no float overflow for large n

    def acceptance(self):
        """``1 - Rej(p, q, n)``; O(V) for n = 1, O(V log V) for n = 2, O(V^(n-1) log V) beyond."""
        return float(1.0 - rsd_rejection(self.p, self.q, self.n))

    def monte_carlo_range(self):
        """Bounds on a rejection path's ``1 - E(theta_{n+1})``, O(n V).

        ``theta_{k+1} = theta_k + E(theta_k) / M_k`` grows with ``theta_k`` and falls with the q-mass
        ``M_k`` not yet drafted, so the path that drafts the largest masses first ends at the largest
        theta (least rejection) and the one that drafts the smallest first at the smallest; every
        path lies between (both may be infeasible paths: the bounds are safe, not tight).
        """
        q_desc = np.sort(self.q[self.q > 0])[::-1]
        never = float(self.p[self.q == 0].sum())  # E(inf): mass that can never be drafted

        def excess(theta):
            if theta == np.inf:
                return never
            return float(np.maximum(self.p - theta * self.q, 0.0).sum())

        def final_excess(masses):
            theta, e = 0.0, excess(0.0)
            for m in masses:
                if e <= 0.0:
                    return 0.0
                with np.errstate(over="ignore", divide="ignore"):
                    theta = theta + e / m if m > 0.0 else np.inf
                e = excess(theta)
            return e

        k = np.arange(self.n)
        largest_first = [q_desc[j:].sum() for j in k]  # M_j with the j largest masses drafted
        smallest_first = [q_desc[: q_desc.size - j].sum() for j in k]
        return 1.0 - final_excess(smallest_first), 1.0 - final_excess(largest_first)

    def monte_carlo(self, samples: int, rng: np.random.Generator) -> np.ndarray:
        """Unbiased per-sample acceptance estimates along sampled rejection paths.

        Each sample draws the ``n - 1`` rejected tokens from their exact conditional laws and
        returns ``1 - E(theta_{n+1})`` (see :mod:`mdsd_ot._kernels.verifiers`); every step costs
        O(n + log V) after one O(V log V) sort, and the variance is far below that of sampling draft
        tuples. The numba generator is seeded from ``rng``.
        """
        if samples * self.n**3 > MC_MAX_WORK:
            raise ValueError(
                f"RSD Monte Carlo with samples={samples:,} and n={self.n:,} drafts costs samples * n^3 = "
                f"{samples * self.n**3:.3g}, more than rsd.MC_MAX_WORK = {MC_MAX_WORK:.3g}; lower samples "
                f"(at most {MC_MAX_WORK // self.n**3:,} for this n) or n"
            )
        _compile.notice("rsd_paths")  # compiled at any V
        tables = _kernels.rsd_path_tables(self.p, self.q, self.n)
        seed = int(rng.integers(0, 2**32 - 1))
        return _kernels.rsd_path_mc(*tables, self.n, samples, seed)


# -- the same acceptance in the evaluation plan (mdsd_ot.plan; its numba passes in _kernels/plan.py)
def _plan_acceptance(plan, ns):
    t = plan.tables(rsd2=2 in ns)
    # n = 2: RSD's closed form on the order; n = 1: one speculative-sampling step, sum (p - q)_+
    return [1.0 - float(t.rsd_rejection if n == 2 else t.D[0]) for n in ns]


# -- ... and in the batched torch plan (mdsd_ot.backends.torch.evaluate_batch), on the tensors' device
def _batch_acceptance(b, ns):
    r = b.rows
    return {n: _torch_rsd2(b.pt, b.qt, r.ps, r.qs, b.t, torch_complement_masses(b.qt)) for n in ns}


def _torch_rsd2(pt, qt, ps, qs, t, rest):
    """RSD acceptance with two sequential drafts (docs/math.md#rsd): ``1 - sum_x (q_x - p_x)_+ G_x``,
    ``G_x = R'_k - Q_k / (1 - q_x)`` over the tokens ``y`` with ``r'_y (1 - q_x) > q_y``, i.e.
    ``q_y / p_y < (1 - q_x) / (1 - q_x + tv)``: the tail of the order beyond a batched search on the
    ratios ``q/p`` (descending along the order; no logarithm, and no overflow where ``1 - q_x`` or a
    ``q_y`` is subnormal, as the threshold ``1 + tv / (1 - q_x)`` on ``p/q`` had: it was ``inf`` and
    dropped every token; a token at the boundary contributes about nothing either way). ``t`` is
    unused (kept for the callers)."""
    torch = require_torch()
    diff = (ps - qs).clamp_(min=0.0)
    tv = diff.sum(-1, keepdim=True)
    safe_tv = torch.where(tv > 0, tv, 1.0)
    Rr = prefix_sums(diff.div_(safe_tv))  # r' along the order (zero where p <= q)
    Qr = prefix_sums(torch.where(ps > qs, qs, 0.0))
    w = (qt - pt).clamp_(min=0.0)
    ok = (w > 0) & (rest > 0)
    safe_rest = torch.where(ok, rest, 1.0)
    u = torch.where(ps > 0, qs / torch.where(ps > 0, ps, 1.0), math.inf)
    neg_u = torch.cummax(-u, -1).values.contiguous()  # -q/p, ascending (monotone against rounding)
    c = safe_rest / (safe_rest + tv)
    j = torch.searchsorted(neg_u, -c, right=True)  # q/p >= c before j
    g = (Rr[:, -1:] - torch.gather(Rr, -1, j)) - (Qr[:, -1:] - torch.gather(Qr, -1, j)) / safe_rest
    rej = torch.where(ok, w * g.clamp_(min=0.0), 0.0).sum(-1, keepdim=True)
    return torch.where(tv > 0, 1.0 - rej, 1.0).squeeze(-1)


class RSDVerifier(Verifier):
    """Recursive speculative decoding for sequential drafts without replacement.

    Examples
    --------
    >>> from mdsd_ot.verifiers import VERIFIERS
    >>> v = VERIFIERS["rrs_without_replacement"]
    >>> round(v.acceptance([0.5, 0.3, 0.2, 0.0], [0.1, 0.2, 0.3, 0.4], 2), 6)
    0.680952
    """

    name = "rrs_without_replacement"
    plan = PlanVerifier(lambda n: n <= 2, _plan_acceptance, lambda n: {"rsd2": n == 2})
    batch = BatchVerifier(lambda n: n == 2, _batch_acceptance)
    schemes = ("without_replacement",)
    reference = "Jeon et al., Recursive Speculative Decoding, arXiv:2402.14160"

    def _prepare(self, p, q, n, scheme):
        return _PreparedRSD(self, p, q, n, scheme)
