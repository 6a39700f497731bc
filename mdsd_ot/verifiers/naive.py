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

from .._config import NAIVE_POLY_MAX_N
from ..backends._tensor import require_torch
from ..drafts import get_scheme
from ..drafts._common import torch_complement_masses
from .base import (
    ANY_SCHEME,
    BatchVerifier,
    PlanVerifier,
    PreparedVerifier,
    Verifier,
    accept_fraction,
    power_exceeds,
    sample_index,
    torch_accept_fraction,
    unit_interval,
)

__all__ = ["NaiveVerifier", "inclusion_probabilities"]

#: Largest number of ordered draft tuples enumerated for an exact acceptance without a closed form.
ENUMERATE_MAX_TUPLES = 200_000


def inclusion_probabilities(q: np.ndarray, n: int, scheme: str) -> np.ndarray | None:
    """``pi(y) = P(token y is among the n drafts)`` in closed form, or None when there is none here.

    The scheme's own formula (:meth:`mdsd_ot.drafts.DraftScheme.inclusion_probabilities`): every
    ``1 - q`` a direct complement sum, nothing subtracted that could cancel. O(V) (conditional
    Poisson: O(n^2 V)).

    Parameters
    ----------
    q : numpy.ndarray, shape (V,)
        Validated draft law.
    n : int
        Number of drafts.
    scheme : str or DraftScheme
        Draft scheme (name or alias).

    Returns
    -------
    numpy.ndarray, shape (V,), or None
    """
    return get_scheme(scheme).inclusion_probabilities(q, n)


class _PreparedNaive(PreparedVerifier):
    @property
    def pi(self):
        """Inclusion probabilities, computed on first use: the output law (``p``) does not need them,
        so the exact tree recursion (docs/math.md#tree-recursion) never pays for them."""
        if "_pi" not in self.__dict__:
            self._pi = inclusion_probabilities(self.q, self.n, self.scheme.name)
        return self._pi

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
        """Per-sample ``p(S)`` over sampled draft sets (the scheme's fastest sampler of them)."""
        return self.scheme.drafted_mass_samples(self.p, self.q, self.n, samples, rng)


# -- the same acceptance in the evaluation plan (mdsd_ot.plan; its numba passes in _kernels/plan.py)
def _plan_acceptance(plan, ns):
    sums = plan.naive(ns)
    return [accept_fraction(float(sums[n][0]), float(sums[n][1])) for n in ns]


# -- ... and in the batched torch plan (mdsd_ot.backends.torch.evaluate_batch), on the tensors' device
def _batch_acceptance(b, ns):
    return _torch_naive(b.pt, b.qt, ns)


def _torch_naive(pt, qt, ns):
    """Naive (i.i.d.) acceptance ``sum p (1 - m^n) / sum p`` for every n, ``m = 1 - q`` summed directly:
    ``sum p (1 - m^n) = sum_{j < n} M_j`` with the positive moments ``M_j = sum p q m^j`` (no
    logarithm, as :func:`mdsd_ot._kernels.plan.naive_moments`); ``-expm1(n log m)`` above
    ``NAIVE_POLY_MAX_N``."""
    torch = require_torch()
    miss = torch_complement_masses(qt)
    total_p = pt.sum(-1)
    out = {}
    poly = [n for n in ns if n <= NAIVE_POLY_MAX_N]
    if poly:
        w = pt * qt
        run = torch.zeros_like(total_p)
        for j in range(max(poly)):
            run = run + w.sum(-1)
            if j + 1 in poly:
                accept = torch.minimum(run, total_p)
                out[j + 1] = torch_accept_fraction(accept, total_p - accept)
            w.mul_(miss)
    for n in ns:
        if n > NAIVE_POLY_MAX_N:
            log_miss = torch.where(qt < 0.5, torch.log1p(-qt.clamp(max=0.5)), torch.log(miss))
            pi = (-torch.expm1(n * log_miss)).clamp_(0.0, 1.0)
            out[n] = torch_accept_fraction((pt * pi).sum(-1), (pt * (1.0 - pi)).sum(-1))
    return out


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
    plan = PlanVerifier(lambda n: True, _plan_acceptance, lambda n: {"naive": n})
    batch = BatchVerifier(lambda n: True, _batch_acceptance)
    schemes = ANY_SCHEME
    reference = "membership baseline (Sun et al., SpecTr, NeurIPS 2023, arXiv:2310.15141)"

    def _prepare(self, p, q, n, scheme):
        return _PreparedNaive(self, p, q, n, scheme)
