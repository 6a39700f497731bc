"""SpecTr's K-SEQ verifier for i.i.d. drafts.

Reference: Sun, Suresh, Ro, Beirami, Jain & Yu, "SpecTr: Fast Speculative Decoding via Optimal
Transport", NeurIPS 2023, arXiv:2310.15141 (Algorithm K-SEQ). MATH.md section 5.4.

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

import numpy as np

from .base import PreparedVerifier, Verifier, residual, sample_index

__all__ = ["SpecTrVerifier", "kseq_rho"]


def kseq_rho(p: np.ndarray, q: np.ndarray, n: int) -> float:
    """The smallest ``rho`` in ``[1, n]`` with ``rho beta(rho) >= 1 - (1 - beta(rho))^n``.

    O(V log V): one sort of the ratios ``p/q`` that lie in ``[1, n)`` and prefix sums, then ~60
    bisection steps of O(log V) each.
    """
    pos = q > 0
    qq, pp = q[pos], p[pos]
    t = pp / qq
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

    def gap(rho):
        k = int(np.searchsorted(t, rho, side="left"))  # ratios t < rho: min(q, p/rho) = p/rho
        rej = max(q_lo[k] - p_lo[k] / rho, 0.0)
        beta = q_hi[k] + p_lo[k] / rho
        return rho * beta - (1.0 - rej**n)

    lo, hi = 1.0, float(n)
    if n == 1 or gap(lo) >= 0.0:
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
        self.reject_one = float(np.maximum(q - scaled, 0.0).sum())  # 1 - beta, direct
        self.p_acc = float(1.0 - self.reject_one**n)
        c = self.p_acc / self.beta if self.beta > 0.0 else 0.0
        self.p_res, _ = residual(p, accept_one * c)

    def _ratio(self, x):
        return self.p[x] / (self.rho * self.q[x])

    def _verify(self, drafts, rng):
        for x in drafts:
            if rng.random() < self._ratio(x):
                return int(x)
        return sample_index(self.p_res, rng.random())

    def _law(self, drafts):
        law = np.zeros(self.p.size)
        alive = 1.0
        for x in drafts:
            a = min(1.0, self._ratio(x))
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
            alive *= 1.0 - min(1.0, self._ratio(xi))
        return 1.0 - alive

    def acceptance(self):
        """``1 - (1 - beta(rho*))^n``. O(V log V) (at preparation)."""
        return self.p_acc


class SpecTrVerifier(Verifier):
    """SpecTr K-SEQ at the smallest valid ``rho`` (i.i.d. drafts).

    Examples
    --------
    >>> from mdsd_ot.verifiers import VERIFIERS
    >>> round(VERIFIERS["spectr"].acceptance([0.5, 0.3, 0.2, 0.0], [0.1, 0.2, 0.3, 0.4], 2), 6)
    0.658443
    """

    name = "spectr"
    schemes = ("with_replacement",)
    reference = "Sun et al., SpecTr (K-SEQ), NeurIPS 2023, arXiv:2310.15141"

    def _prepare(self, p, q, n, scheme):
        return _PreparedSpecTr(self, p, q, n, scheme)
