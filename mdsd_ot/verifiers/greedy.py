"""The optimal verifier for greedy multi-draft sampling.

Reference: Hu, Zheng, Liu & Huang, "Towards Optimal Multi-draft Speculative Decoding", ICLR 2025,
arXiv:2502.18779. docs/math.md#greedy-and-hub and docs/math.md#greedy-verifier.

Drafts: the ``n - 1`` most likely tokens ``Top`` of ``q`` (ties by index), then one token ``x_n`` drawn
from ``q' = q / q(rest)`` on the remaining tokens (``q(rest)`` summed directly over the rest, never
``1 - q(Top)``). Verification: accept ``x_n`` with probability ``min(1, p(x_n) / q'(x_n))``; on
rejection sample ``R(y) \\propto p(y)`` on ``Top`` and ``(p(y) - q'(y))_+`` elsewhere. An output in
``Top`` is a drafted token, so it counts as accepted.

.. math:: \\alpha = p(\\mathrm{Top}) + \\sum_{y \\notin \\mathrm{Top}} \\min(p(y), q'(y))

which equals the optimal acceptance for the greedy draft law. Complexity O(V) after the top-(n-1)
selection (O(V log V) with a stable sort).
"""

from __future__ import annotations

import numpy as np

from .base import (
    BatchVerifier,
    PlanVerifier,
    PreparedVerifier,
    Verifier,
    accept_fraction,
    accept_ratio,
    sample_drafts_batch,
    sample_index,
    top_k,
    torch_accept_fraction,
)

__all__ = ["GreedyVerifier", "hub_or_greedy_parts"]


def hub_or_greedy_parts(p: np.ndarray, q: np.ndarray, top: np.ndarray):
    """``(q', R, accept_mass)`` for the fixed drafts ``top`` and one draw from the rest.

    ``q'`` is ``q`` restricted to the rest and renormalised by the direct rest sum; ``R`` is the
    unnormalised rejection law (``p`` on ``top``, ``(p - q')_+`` elsewhere); ``accept_mass`` is
    ``p(top) + sum_rest min(p, q')``, returned as a fraction of ``accept_mass + sum_rest (p - q')_+``
    (``= sum(p)``, one up to rounding) so that it lies in [0, 1].

    Parameters
    ----------
    p, q : numpy.ndarray, shape (V,)
        Validated, normalised target and draft laws (``q`` must have mass outside ``top``).
    top : numpy.ndarray of int
        The fixed draft tokens.

    Returns
    -------
    tuple of (numpy.ndarray, numpy.ndarray, float)
        ``(q', R, accept_mass)``.
    """
    rest = np.ones(q.size, dtype=bool)
    rest[top] = False
    rest_mass = q[rest].sum()  # direct sum over the complement of Top
    qp = np.where(rest, q, 0.0) / rest_mass
    R = np.where(rest, np.maximum(p - qp, 0.0), p)
    accept = float(p[top].sum() + np.minimum(p[rest], qp[rest]).sum())
    return qp, R, accept_fraction(accept, float(R[rest].sum()))


class _PreparedGreedy(PreparedVerifier):
    def __init__(self, verifier, p, q, n, scheme, top):
        super().__init__(verifier, p, q, n, scheme)
        self.top = top
        self.qp, self.R, self._accept = hub_or_greedy_parts(p, q, top)
        self.R_mass = float(self.R.sum())
        self._p_top = float(p[top].sum())

    def _last(self, drafts):
        rest = drafts[~np.isin(drafts, self.top)]
        return int(rest[0])

    def _verify(self, drafts, rng):
        x = self._last(drafts)
        if rng.random() < accept_ratio(self.p[x], self.qp[x]):
            return x
        if self.R_mass > 0.0:
            return sample_index(self.R, rng.random())
        return sample_index(self.p, rng.random())  # rejection has probability zero here

    def _law(self, drafts):
        x = self._last(drafts)
        a = accept_ratio(self.p[x], self.qp[x])
        law = np.zeros(self.p.size)
        law[x] += a
        if a < 1.0:
            law += (1.0 - a) * (self.R / self.R_mass if self.R_mass > 0.0 else self.p)
        return law

    def accept_probability(self, drafts):
        """``a + (1 - a) p(Top) / R_mass`` with ``a = min(1, p(x_n) / q'(x_n))``, O(n)."""
        x = self._last(self.check_drafts(drafts))
        a = accept_ratio(self.p[x], self.qp[x])
        if self.R_mass <= 0.0:  # rejection has probability zero; the law's placeholder is p
            return a + (1.0 - a) * (self._p_top + self.p[x])
        return a + (1.0 - a) * accept_ratio(self._p_top, self.R_mass)  # R is 0 at a rejectable x_n

    def monte_carlo(self, samples: int, rng: np.random.Generator) -> np.ndarray:
        """:meth:`accept_probability` of ``samples`` sampled draft tuples, vectorised (the sampled
        tuples put the drawn token last)."""
        x = sample_drafts_batch(self.scheme, self.q, self.n, samples, rng)[:, -1]
        a = accept_ratio(self.p[x], self.qp[x])
        if self.R_mass <= 0.0:
            return a + (1.0 - a) * (self._p_top + self.p[x])
        return a + (1.0 - a) * accept_ratio(self._p_top, self.R_mass)

    def acceptance(self):
        """``p(Top) + sum_{y not in Top} min(p(y), q'(y))``. O(V)."""
        return self._accept


# -- the same acceptance in the evaluation plan (mdsd_ot.plan; its numba passes in _kernels/plan.py)
def _plan_acceptance(plan, ns):
    sums = plan.greedy(ns)
    return [accept_fraction(float(sums[n][0] + sums[n][1]), float(sums[n][2])) for n in ns]


# -- ... and in the batched torch plan (mdsd_ot.backends.torch.evaluate_batch), on the tensors' device
def _batch_acceptance(b, ns):
    sums = b.greedy()
    return {n: torch_accept_fraction(sums[n][0] + sums[n][1], sums[n][2]) for n in ns}


class GreedyVerifier(Verifier):
    """Hu et al.'s verifier for greedy drafts (optimal for that draft law).

    Examples
    --------
    >>> from mdsd_ot.verifiers import VERIFIERS
    >>> round(VERIFIERS["greedy"].acceptance([0.5, 0.3, 0.2, 0.0], [0.1, 0.2, 0.3, 0.4], 3), 6)
    0.833333
    """

    name = "greedy"
    plan = PlanVerifier(lambda n: True, _plan_acceptance, lambda n: {"greedy": n})
    batch = BatchVerifier(lambda n: True, _batch_acceptance, lambda n: {"greedy": n})
    schemes = ("greedy",)
    reference = "Hu et al., Towards Optimal Multi-draft Speculative Decoding, ICLR 2025, arXiv:2502.18779"

    def _prepare(self, p, q, n, scheme):
        return _PreparedGreedy(self, p, q, n, scheme, top_k(q, n - 1))
