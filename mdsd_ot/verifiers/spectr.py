"""SpecTr's K-SEQ verifier for i.i.d. drafts.

Reference: Sun, Suresh, Ro, Beirami, Jain & Yu, "SpecTr: Fast Speculative Decoding via Optimal
Transport", NeurIPS 2023, arXiv:2310.15141 (Algorithm K-SEQ). docs/math.md#spectr.

With ``beta(rho) = sum_y min(q(y), p(y) / rho)``, take the smallest ``rho*`` in ``[1, n]`` with

.. math:: \\rho\\,\\beta(\\rho) \\ge 1 - (1 - \\beta(\\rho))^n .

Accept draft ``x_i`` (in order) with probability ``min(1, p(x_i) / (rho* q(x_i)))``; if all are
rejected, sample

.. math:: p_{res}(y) \\propto p(y) - \\min(q(y), p(y)/\\rho^*)\\,\\frac{1 - (1-\\beta)^n}{\\beta}

(non-negative exactly when the condition above holds). Acceptance ``1 - (1 - beta(rho*))^n``, at least
``(1 - 1/e)`` times the optimum (SpecTr, Theorem 3).

Finding ``rho*``: tokens are sorted once by ``t = p/q``; with prefix sums, ``beta(rho)`` costs
O(log V) per evaluation, and the smallest root is bracketed by bisection to machine precision.
``1 - beta`` is always the direct sum ``sum_y (q(y) - p(y)/rho)_+``. Complexity O(V log V).
"""

from __future__ import annotations

import math

import numpy as np

from ..backends._tensor import require_torch
from .base import (
    BatchVerifier,
    PlanVerifier,
    PreparedVerifier,
    Verifier,
    accept_ratio,
    residual,
    sample_drafts_batch,
    sample_index,
)

__all__ = ["SpecTrVerifier", "kseq_rho", "kseq_rho_sorted", "accept_any"]


def accept_any(beta: float, reject: float, n: int) -> float:
    """``1 - (1 - beta)^n`` with ``reject = 1 - beta`` summed directly: the logarithm is taken of
    whichever of the two is accurate (``x^n`` multiplies a relative error of x by n, and n may be
    10^9), so the result is exact to a few ulps for every n.

    Parameters
    ----------
    beta : float
        Acceptance probability of one draft, in [0, 1].
    reject : float
        ``1 - beta``, summed directly.
    n : int
        Number of drafts.

    Returns
    -------
    float
    """
    if reject <= 0.0:
        return 1.0
    log_reject = math.log1p(-beta) if beta < 0.5 else math.log(reject)
    return float(-math.expm1(n * log_reject))


def _torch_accept_any(beta, reject, n):
    """``1 - (1 - beta)^n`` with ``reject = 1 - beta`` summed directly (:func:`accept_any` of tensors)."""
    torch = require_torch()
    log_reject = torch.where(
        beta < 0.5, torch.log1p(-beta.clamp(max=0.5)), torch.log(reject.clamp(min=1e-300))
    )
    return torch.where(reject <= 0, 1.0, -torch.expm1(n * log_reject))


def kseq_rho(p: np.ndarray, q: np.ndarray, n: int) -> float:
    """The smallest ``rho`` in ``[1, n]`` with ``rho beta(rho) >= 1 - (1 - beta(rho))^n``.

    O(V log V): one sort of the ratios ``p/q`` that lie in ``[1, n)`` and prefix sums, then ~60
    bisection steps of O(log V) each.

    Parameters
    ----------
    p, q : numpy.ndarray, shape (V,)
        Validated, normalised target and draft laws.
    n : int
        Number of drafts.

    Returns
    -------
    float
    """
    pos = q > 0
    qq, pp = q[pos], p[pos]
    with np.errstate(over="ignore"):  # q subnormal: the ratio overflows to +inf, which is >= n anyway
        t = pp / qq
    # for rho >= t_max = max p/q every token has min(q, p/rho) = p/rho, so rho beta(rho) = sum(p) = 1
    # and the condition holds: rho* <= t_max. Bisecting past t_max let the rounding of sum(p) (1 - ulp
    # against 1 - (1 - beta)^n) push rho* above t_max, where every draft can be rejected
    t_max = float(t.max()) if t.size and not np.any(p[~pos] > 0) else np.inf  # q = 0 < p: ratio inf
    # tokens with t < 1 have t < rho for every rho in [1, n]; tokens with t >= n never do: only the
    # ratios in [1, n) are breakpoints and need sorting
    low, high = t < 1.0, t >= n
    q_low, p_low, q_high = qq[low].sum(), pp[low].sum(), qq[high].sum()
    mid = ~(low | high)
    t, qq, pp = t[mid], qq[mid], pp[mid]
    order = np.argsort(t)
    t, qq, pp = t[order], qq[order], pp[order]
    q_lo = q_low + np.concatenate([[0.0], np.cumsum(qq)])  # q over the ratios below rho
    p_lo = p_low + np.concatenate([[0.0], np.cumsum(pp)])
    q_hi = q_high + np.concatenate([np.cumsum(qq[::-1])[::-1], [0.0]])  # the rest, summed directly
    return kseq_rho_sorted(t, q_lo, p_lo, q_hi, n, t_max)


def kseq_rho_sorted(t, q_lo, p_lo, q_hi, n: int, t_max: float) -> float:
    """The bisection of :func:`kseq_rho` on sorted tables.

    ``t`` holds ratios ``p/q`` in increasing order (at least those in ``[1, n)``), and for
    ``k = 0..t.size``: ``q_lo[k]``, ``p_lo[k]`` the q and p mass of every token with ratio below
    ``t[k]`` (the first ``k`` entries and any token with a smaller ratio left out of ``t``), and
    ``q_hi[k]`` the q mass of the others, summed directly. ``t_max`` is the largest ratio (``inf``
    when some token has ``q = 0 < p``). :func:`kseq_rho` builds the tables from ``(p, q)``; an
    evaluation plan (:mod:`mdsd_ot.plan`) reads them off its one sort.

    Parameters
    ----------
    t : numpy.ndarray, shape (K,)
        Sorted ratios.
    q_lo, p_lo, q_hi : numpy.ndarray, shape (K + 1,)
        The mass tables described above.
    n : int
        Number of drafts.
    t_max : float
        The largest ratio (``inf`` allowed).

    Returns
    -------
    float
        ``rho`` in ``[1, n]`` (1 when ``n = 1``).
    """

    def gap(rho):
        k = int(np.searchsorted(t, rho, side="left"))  # ratios t < rho: min(q, p/rho) = p/rho
        rej = max(q_lo[k] - p_lo[k] / rho, 0.0)
        beta = q_hi[k] + p_lo[k] / rho
        return rho * beta - accept_any(beta, rej, n)

    lo, hi = 1.0, min(float(n), t_max)
    if n == 1 or hi <= 1.0 or gap(lo) >= 0.0:
        return 1.0
    for _ in range(200):
        rho = 0.5 * (lo + hi)
        if rho <= lo or rho >= hi:
            break
        if gap(rho) >= 0.0:
            hi = rho
        else:
            lo = rho
    return hi


class _PreparedSpecTr(PreparedVerifier):
    def __init__(self, verifier, p, q, n, scheme):
        super().__init__(verifier, p, q, n, scheme)
        self.rho = kseq_rho(p, q, n)
        scaled = p / self.rho
        accept_one = np.minimum(q, scaled)
        self.beta = float(accept_one.sum())
        # 1 - beta, direct; as a fraction of sum(q) (one up to rounding) it is <= 1 in floating point
        # ((q - s)_+ <= q term by term, same summation tree), so p_acc below lies in [0, 1]
        self.reject_one = float(np.maximum(q - scaled, 0.0).sum()) / float(q.sum())
        self.p_acc = accept_any(self.beta / float(q.sum()), self.reject_one, n)
        if self.rho > 1.0:
            # rho* > 1 is a root of rho beta(rho) = p_acc, so c = p_acc / beta = rho* exactly and
            # p - min(q, p/rho*) c = (p - rho* q)_+: zero on every token a draft of which can be
            # rejected (t < rho*), positive elsewhere. Computed in this form, not as p - min(q, p/rho) c:
            # near the root that difference is rounding noise of the size of the whole residual mass
            # (1 - beta)^n (e.g. 1e-18), which put mass on rejected drafts and broke the per-tuple law.
            # The zero set uses the very expression of _ratio, so a rejectable draft never gets mass.
            rejectable = p < self.rho * q  # exactly where _ratio < 1 (q = 0: never)
            self.p_res, mass = residual(np.where(rejectable, 0.0, p), self.rho * q)
            if mass <= 0.0:
                # rho* lies within rounding of the largest ratio t_max, so (p - rho* q)_+ rounds to 0
                # (its exact mass (1 - beta)^n is below ~eps): its limit, p on the tokens of ratio t_max
                with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                    t = np.where(p > 0, p / q, -np.inf)
                self.p_res = np.where(t == t.max(), p, 0.0)
                self.p_res /= self.p_res.sum()
        else:
            c = self.p_acc / self.beta if self.beta > 0.0 else 0.0
            self.p_res, _ = residual(p, accept_one * c)

    def _ratio(self, x):
        return accept_ratio(self.p[x], self.rho * self.q[x])

    def _verify(self, drafts, rng):
        for x in drafts:
            if rng.random() < self._ratio(x):
                return int(x)
        return sample_index(self.p_res, rng.random())

    def _law(self, drafts):
        law = np.zeros(self.p.size)
        alive = 1.0
        for x in drafts:
            a = self._ratio(x)
            law[x] += alive * a
            alive *= 1.0 - a
        law += alive * self.p_res
        return law

    def accept_probability(self, drafts):
        """``1 - prod_i (1 - min(1, p(x_i) / (rho* q(x_i))))``, O(n) (``p_res`` is 0 on rejected drafts
        at the exact ``rho*``; here it is at most rounding)."""
        x = self.check_drafts(drafts)
        alive = 1.0
        for xi in x:
            alive *= 1.0 - self._ratio(xi)
        return 1.0 - alive

    def monte_carlo(self, samples: int, rng: np.random.Generator) -> np.ndarray:
        """:meth:`accept_probability` of ``samples`` sampled draft tuples, vectorised over the samples."""
        drafts = sample_drafts_batch(self.scheme, self.q, self.n, samples, rng)
        alive = np.ones(samples)
        for i in range(self.n):
            x = drafts[:, i]
            alive *= 1.0 - accept_ratio(self.p[x], self.rho * self.q[x])
        return 1.0 - alive

    def acceptance(self):
        """``1 - (1 - beta(rho*))^n``. O(V log V) (at preparation)."""
        return self.p_acc


# -- the same acceptance in the evaluation plan (mdsd_ot.plan; its numba passes in _kernels/plan.py)
def _plan_acceptance(plan, ns):
    from .._kernels import plan as plan_kernels

    t = plan.tables()
    t_max = plan_kernels.largest_ratio(plan.rs, t.ps, t.qs)
    return [float(plan_kernels.spectr_order(plan.rs, t.P, t.Q, t.R, t_max, n)) for n in ns]


# -- ... and in the batched torch plan (mdsd_ot.backends.torch.evaluate_batch), on the tensors' device
def _batch_acceptance(b, ns):
    r = b.rows
    return {n: _torch_spectr(r.ps, r.qs, b.t, r.P, r.Q, n) for n in ns}


def _torch_spectr(ps, qs, t, P, Q, n):
    """SpecTr acceptance ``1 - (1 - beta(rho*))^n`` with ``rho*`` bisected on the ratio tables."""
    torch = require_torch()
    total_q = Q[:, -1:]
    finite = torch.where(torch.isfinite(t), t, 0.0).max(-1, keepdim=True).values
    never = ((qs == 0) & (ps > 0)).any(-1, keepdim=True)
    t_max = torch.where(never, math.inf, finite)

    def parts(rho):
        k = torch.searchsorted(t, rho, right=False)  # t < rho: min(q, p/rho) = p/rho
        pk, qk = torch.gather(P, -1, k), torch.gather(Q, -1, k)
        beta = (total_q - qk) + pk / rho
        return beta, (qk - pk / rho).clamp(min=0.0)

    def gap(rho):
        beta, rej = parts(rho)
        return rho * beta - _torch_accept_any(beta, rej, n)

    lo = torch.ones_like(total_q)
    hi = torch.minimum(torch.full_like(lo, float(n)), t_max)
    done = (hi <= 1.0) | (gap(lo) >= 0.0) if n > 1 else torch.ones_like(lo, dtype=torch.bool)
    hi = torch.where(done, lo, hi)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        live = ~done & (mid > lo) & (mid < hi)
        if not bool(live.any()):
            break
        up = gap(mid) >= 0.0
        hi = torch.where(live & up, mid, hi)
        lo = torch.where(live & ~up, mid, lo)
        done = done | ~live
    beta, rej = parts(hi)
    return _torch_accept_any(beta / total_q, rej / total_q, n).squeeze(-1)


class SpecTrVerifier(Verifier):
    """SpecTr K-SEQ at the smallest valid ``rho`` (i.i.d. drafts).

    Examples
    --------
    >>> from mdsd_ot.verifiers import VERIFIERS
    >>> round(VERIFIERS["spectr"].acceptance([0.5, 0.3, 0.2, 0.0], [0.1, 0.2, 0.3, 0.4], 2), 6)
    0.658443
    """

    name = "spectr"
    plan = PlanVerifier(lambda n: True, _plan_acceptance)
    batch = BatchVerifier(lambda n: True, _batch_acceptance)
    schemes = ("with_replacement",)
    reference = "Sun et al., SpecTr (K-SEQ), NeurIPS 2023, arXiv:2310.15141"

    def _prepare(self, p, q, n, scheme):
        return _PreparedSpecTr(self, p, q, n, scheme)
