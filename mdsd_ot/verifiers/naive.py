"""Naive membership verification: sample the target independently, accept if it was drafted.

Reference: the baseline of SpecTr (Sun et al., "SpecTr: Fast Speculative Decoding via Optimal
Transport", NeurIPS 2023, arXiv:2310.15141). docs/math.md#naive.

``Y ~ p`` independently of the drafts; the step counts as accepted iff ``Y`` is one of the drafts.
The output is exactly ``p`` whatever the draft law, so the method is valid for every draft scheme,
but it ignores ``q``:

.. math:: \\alpha = \\sum_y p(y)\\, \\pi(y), \\qquad \\pi(y) = P(y \\text{ drafted})

with the inclusion probabilities ``pi`` of the scheme (:func:`inclusion_probabilities`):
``1 - (1 - q(y))^n`` for i.i.d. drafts; ``1`` on the fixed tokens and ``q'(y)`` elsewhere for greedy and
hub drafts; ``q(y) (1 + sum_{x != y} q(x) / (1 - q(x)))`` for two sequential draws without
replacement; ``q(y) e_{n-1}(q_{-y}) / e_n(q)`` for conditional Poisson. Sequential sampling with
``n >= 3`` is enumerated for small vocabularies and estimated by Monte Carlo beyond.
"""

from __future__ import annotations

import numpy as np

from .._kernels import verifiers as _kernels
from ..drafts import complement_masses
from .base import (
    ANY_SCHEME,
    PreparedVerifier,
    Verifier,
    accept_fraction,
    power_exceeds,
    sample_drafts_batch,
    sample_index,
    top_k,
    unit_interval,
)

__all__ = ["NaiveVerifier", "inclusion_probabilities"]

#: Largest number of ordered draft tuples enumerated for an exact acceptance without a closed form.
ENUMERATE_MAX_TUPLES = 200_000


def inclusion_probabilities(q: np.ndarray, n: int, scheme: str) -> np.ndarray | None:
    """``pi(y) = P(token y is among the n drafts)`` in closed form, or None when there is none here.

    Every ``1 - q`` is a direct complement sum; no formula subtracts nearly equal numbers.
    Complexity O(V) (conditional Poisson: O(n^2 V)).
    """
    if scheme == "with_replacement":
        miss = complement_masses(q)  # 1 - q(y), no cancellation
        with np.errstate(divide="ignore"):  # log(1 - q) from whichever of q, 1 - q is accurate
            log_miss = np.where(q < 0.5, np.log1p(-np.minimum(q, 0.5)), np.log(miss))
        return -np.expm1(n * log_miss)  # 1 - miss^n, accurate for small q(y) and any n
    if scheme in ("greedy", "hub"):
        top = top_k(q, n - 1)
        rest = np.ones(q.size, dtype=bool)
        rest[top] = False
        pi = np.where(rest, q, 0.0) / q[rest].sum()
        pi[top] = 1.0
        return pi
    if scheme == "without_replacement":
        if n == 1:
            return q.copy()
        if n == 2:  # pi(y) = q(y) (1 + sum_{x != y} q(x) / (1 - q(x)))
            rest = complement_masses(q)
            big = int(np.argmax(q))
            others = np.arange(q.size) != big
            odds = np.zeros_like(q)
            odds[others] = q[others] / rest[others]  # each at most 1 (q(x) <= 1/2 of the mass)
            small = odds.sum()  # every term but the largest token's, which may overflow
            # sum over x != y; its rounding error times q(y) is at most eps * q(y) * small <= eps
            pi = q * (1.0 + np.maximum(small - odds, 0.0))
            # the largest token's term, q(y) q(big) / (1 - q(big)), written so that it cannot
            # overflow: for y != big, q(y) <= 1 - q(big), so the ratio is at most one
            pi[others] += q[big] * (q[others] / rest[big])
            return pi
        return None
    if scheme == "conditional_poisson":  # scale invariant; rescaling to max 1 avoids underflow
        return _kernels.cp_inclusion(q / q.max(), n)
    return None


class _PreparedNaive(PreparedVerifier):
    def __init__(self, verifier, p, q, n, scheme):
        super().__init__(verifier, p, q, n, scheme)
        self.pi = inclusion_probabilities(q, n, scheme.name)

    def _verify(self, drafts, rng):
        return sample_index(self.p, rng.random())

    def _law(self, drafts):
        return self.p.copy()

    def accept_probability(self, drafts):
        x = self.check_drafts(drafts)
        return float(self.p[np.unique(x)].sum())

    def exact_available(self):
        support = int(np.count_nonzero(self.q > 0))
        return self.pi is not None or not power_exceeds(support, self.n, ENUMERATE_MAX_TUPLES)

    def acceptance(self):
        """``sum_y p(y) pi(y)``; O(V) with a closed form, else by enumerating the draft tuples.

        Returned as accepted / (accepted + rejected) mass (:func:`accept_fraction`), so that it lies in
        [0, 1] although ``p`` sums to one only up to rounding.
        """
        if self.pi is not None:
            pi = unit_interval(self.pi, "inclusion probability")  # rounding of the closed forms
            # pairwise sums (np.dot may wait on BLAS threads); 1 - pi has absolute error ~eps
            return accept_fraction(float((self.p * pi).sum()), float((self.p * (1.0 - pi)).sum()))
        tuples, probs = self.scheme.tuple_law(self.q, self.n)
        covered = np.zeros(tuples.shape[0])
        for j in range(self.n):
            first = np.all(tuples[:, :j] != tuples[:, j : j + 1], axis=1)  # count repeats once
            covered += np.where(first, self.p[tuples[:, j]], 0.0)
        missed = np.maximum(self.p.sum() - covered, 0.0)  # p outside the draft set; absolute error ~eps
        return accept_fraction(float((probs * covered).sum()), float((probs * missed).sum()))

    def monte_carlo(self, samples: int, rng: np.random.Generator) -> np.ndarray:
        """Per-sample ``p(S)`` over sampled draft sets (numba sampler for sequential drafts)."""
        if self.scheme.name == "without_replacement":
            seed = int(rng.integers(0, 2**32 - 1))
            return _kernels.sequential_draft_mass(self.p, self.q, self.n, samples, seed)
        drafts = np.sort(sample_drafts_batch(self.scheme, self.q, self.n, samples, rng), axis=1)
        first = np.ones(drafts.shape, dtype=bool)  # p(S): each distinct drafted token counted once
        first[:, 1:] = drafts[:, 1:] != drafts[:, :-1]
        return np.where(first, self.p[drafts], 0.0).sum(axis=1)


class NaiveVerifier(Verifier):
    """Independent target sample, accepted iff drafted (valid for any draft scheme).

    Acceptance ``sum_y p(y) P(y drafted)``; i.i.d. drafts: ``sum_y p(y) (1 - (1 - q(y))^n)``, O(V).

    Examples
    --------
    >>> from mdsd_ot.verifiers import VERIFIERS
    >>> round(VERIFIERS["naive"].acceptance([0.5, 0.3, 0.2, 0.0], [0.1, 0.2, 0.3, 0.4], 2), 6)
    0.305
    """

    name = "naive"
    schemes = ANY_SCHEME
    reference = "membership baseline (Sun et al., SpecTr, NeurIPS 2023, arXiv:2310.15141)"

    def _prepare(self, p, q, n, scheme):
        return _PreparedNaive(self, p, q, n, scheme)
