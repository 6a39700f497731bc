"""Naive membership verification: sample the target independently, accept if it was drafted.

Reference: the baseline of SpecTr (Sun et al., "SpecTr: Fast Speculative Decoding via Optimal
Transport", NeurIPS 2023, arXiv:2310.15141). MATH.md section 5.1.

``Y ~ p`` independently of the drafts; the step counts as accepted iff ``Y`` is one of the drafts. The
output is exactly ``p`` whatever the draft law, so the method is valid for every draft scheme, but it
ignores ``q``:

.. math:: \\alpha = \\sum_y p(y)\\, P(y \\text{ drafted}) = \\sum_y p(y)\\,\\bigl(1 - (1 - q(y))^n\\bigr)

for i.i.d. drafts.
"""
from __future__ import annotations

import numpy as np

from ..drafts import SCHEMES, complement_masses
from .base import PreparedVerifier, Verifier, sample_index

__all__ = ["NaiveVerifier"]


class _PreparedNaive(PreparedVerifier):
    def _verify(self, drafts, rng):
        return sample_index(self.p, rng.random())

    def _law(self, drafts):
        return self.p.copy()

    def accept_probability(self, drafts):
        x = self.check_drafts(drafts)
        return float(self.p[np.unique(x)].sum())

    def exact_available(self):
        return self.scheme.name == "with_replacement"

    def acceptance(self):
        """``sum_y p(y) (1 - (1 - q(y))^n)``, with ``1 - q(y)`` a direct complement sum. O(V)."""
        if self.scheme.name != "with_replacement":
            raise ValueError("the naive closed form is for with_replacement drafts only")
        miss = complement_masses(self.q)  # 1 - q(y), no cancellation
        with np.errstate(divide="ignore"):
            hit = -np.expm1(self.n * np.log(miss))  # 1 - miss^n, accurate for small q(y)
        return float((self.p * hit).sum())  # pairwise sum; np.dot may wait on BLAS threads


class NaiveVerifier(Verifier):
    """Independent target sample, accepted iff drafted (valid for any draft scheme).

    Acceptance (i.i.d. drafts): ``sum_y p(y) (1 - (1 - q(y))^n)``, O(V).

    Examples
    --------
    >>> from mdsd_ot.verifiers import VERIFIERS
    >>> round(VERIFIERS["naive"].acceptance([0.5, 0.3, 0.2, 0.0], [0.1, 0.2, 0.3, 0.4], 2), 6)
    0.305
    """

    name = "naive"
    schemes = ("with_replacement",) + tuple(s for s in SCHEMES if s != "with_replacement")
    reference = "membership baseline (Sun et al., SpecTr, NeurIPS 2023, arXiv:2310.15141)"

    def _prepare(self, p, q, n, scheme):
        return _PreparedNaive(self, p, q, n, scheme)
