"""Recursive rejection sampling (RRS) with i.i.d. drafts.

Reference: Miao et al., "SpecInfer: Accelerating Large Language Model Serving with Tree-based
Speculative Inference and Verification", ASPLOS 2024, arXiv:2305.09781 (multi-step speculative
sampling). MATH.md section 5.2.

Start with ``r_1 = p``. For draft ``i = 1..n`` (in order; repeated tokens are processed again): accept
``x_i`` with probability ``min(1, r_i(x_i) / q(x_i))``; on rejection move to the residual
``r_{i+1} = (r_i - q)_+ / sum (r_i - q)_+`` -- the same update whichever token was rejected. If every
draft is rejected, sample from ``r_{n+1}``. Because the update does not depend on the rejected token,
the residual chain is precomputed once per ``(p, q, n)``.

.. math:: \\alpha = 1 - \\prod_{i=1}^n \\bigl(1 - \\beta(r_i, q)\\bigr),
          \\qquad 1 - \\beta(r_i, q) = \\sum_y (r_i(y) - q(y))_+

Complexity O(nV).
"""
from __future__ import annotations

import numpy as np

from .base import PreparedVerifier, Verifier, residual, sample_index

__all__ = ["SpecInferVerifier"]


class _PreparedRRS(PreparedVerifier):
    def __init__(self, verifier, p, q, n, scheme):
        super().__init__(verifier, p, q, n, scheme)
        chain, rejects = [p], []
        for _ in range(n):
            nxt, mass = residual(chain[-1], q)
            chain.append(nxt)
            rejects.append(mass)
        self.chain = chain  # r_1 .. r_{n+1}
        self.rejects = np.array(rejects)  # 1 - beta(r_i, q)

    def _ratio(self, i, x):
        return self.chain[i][x] / self.q[x]

    def _verify(self, drafts, rng):
        for i, x in enumerate(drafts):
            if rng.random() < self._ratio(i, x):
                return int(x)
        return sample_index(self.chain[-1], rng.random())

    def _law(self, drafts):
        law = np.zeros(self.p.size)
        alive = 1.0
        for i, x in enumerate(drafts):
            a = min(1.0, self._ratio(i, x))
            law[x] += alive * a
            alive *= 1.0 - a
        law += alive * self.chain[-1]
        return law

    def accept_probability(self, drafts):
        """``1 - prod_i (1 - min(1, r_i(x_i) / q(x_i)))``, O(n): the residual is 0 on rejected drafts."""
        x = self.check_drafts(drafts)
        alive = 1.0
        for i, xi in enumerate(x):
            alive *= 1.0 - min(1.0, self._ratio(i, xi))
        return 1.0 - alive

    def acceptance(self):
        """``1 - prod_i sum_y (r_i - q)_+``. O(nV) (the chain is built at preparation)."""
        return float(1.0 - np.prod(self.rejects))


class SpecInferVerifier(Verifier):
    """SpecInfer's recursive rejection sampling for i.i.d. drafts (registry name ``"rrs"``).

    Examples
    --------
    >>> from mdsd_ot.verifiers import VERIFIERS
    >>> round(VERIFIERS["rrs"].acceptance([0.5, 0.3, 0.2, 0.0], [0.1, 0.2, 0.3, 0.4], 2), 6)
    0.65
    """

    name = "rrs"
    schemes = ("with_replacement",)
    reference = "Miao et al., SpecInfer, ASPLOS 2024, arXiv:2305.09781"

    def _prepare(self, p, q, n, scheme):
        return _PreparedRRS(self, p, q, n, scheme)
