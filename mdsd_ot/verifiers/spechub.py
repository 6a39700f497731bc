"""SpecHub: provably optimal verification for two drafts sharing a hub token.

Reference: Sun, Mendlovic, Leviathan, Aharoni, Beirami, Ro & Suresh (Ryan Sun et al.), "SpecHub:
Provable Acceleration to Multi-Draft Speculative Decoding", EMNLP 2024, arXiv:2411.05289.
docs/math.md#spechub.

Drafts (n = 2): the hub ``a = argmax q`` (ties by index); ``x_1 ~ q``; ``x_2 = a`` if ``x_1 != a``,
else ``x_2 ~ q`` on the other tokens. The draft set is always ``{a, b}`` with
``P(b) = q'(b) = q(b) / (1 - q(a))`` (``1 - q(a)`` summed directly over ``b != a``). Verification
accepts the non-hub draft ``b`` with probability ``min(1, p(b) / q'(b))``; otherwise it outputs the
hub ``a`` with probability ``p(a) / (1 - S)`` and else samples ``(p - q')_+`` on the non-hub tokens.

.. math:: \\alpha = S + \\min(p(a), 1 - S), \\qquad S = \\sum_{i \\ne a} \\min\\bigl(p(i), q'(i)\\bigr)

Since ``S <= 1 - p(a)``, ``alpha = S + p(a)``: the optimum for the hub draft law (whose set law is the
greedy law with n = 2). Complexity O(V).
"""

from __future__ import annotations

import numpy as np

from ..backends._tensor import require_torch
from .base import (
    BatchVerifier,
    PlanVerifier,
    PreparedVerifier,
    Verifier,
    accept_fraction,
    accept_ratio,
    sample_drafts_batch,
    sample_index,
    torch_accept_fraction,
)
from .greedy import hub_or_greedy_parts

__all__ = ["SpecHubVerifier"]


class _PreparedHub(PreparedVerifier):
    def __init__(self, verifier, p, q, n, scheme):
        super().__init__(verifier, p, q, n, scheme)
        self.a = int(np.argmax(q))  # the first maximum: ties by index
        self.qp, self.R, _ = hub_or_greedy_parts(p, q, np.array([self.a]))
        mask = np.arange(p.size) != self.a
        self.S = float(np.minimum(p[mask], self.qp[mask]).sum())
        # P(reject b) = 1 - S, as a sum of non-negative terms
        self.reject = float(np.maximum(self.qp[mask] - p[mask], 0.0).sum())
        self.tail = self.R.copy()
        self.tail[self.a] = 0.0

    def _other(self, drafts):
        return int(drafts[drafts != self.a][0])

    def _verify(self, drafts, rng):
        b = self._other(drafts)
        if rng.random() < accept_ratio(self.p[b], self.qp[b]):
            return b
        if self.reject <= 0.0:
            return sample_index(self.p, rng.random())  # rejection has probability zero here
        if rng.random() < accept_ratio(self.p[self.a], self.reject):
            return self.a
        return sample_index(self.tail, rng.random())

    def _law(self, drafts):
        b = self._other(drafts)
        acc = accept_ratio(self.p[b], self.qp[b])
        law = np.zeros(self.p.size)
        law[b] += acc
        if acc < 1.0:
            if self.reject > 0.0:
                hub = accept_ratio(self.p[self.a], self.reject)
                law[self.a] += (1.0 - acc) * hub
                tail_mass = self.tail.sum()
                if tail_mass > 0.0:
                    law += (1.0 - acc) * (1.0 - hub) * self.tail / tail_mass
            else:
                law += (1.0 - acc) * self.p
        return law

    def accept_probability(self, drafts):
        """``acc + (1 - acc) min(1, p(a) / (1 - S))`` for the non-hub draft ``b``, O(1)."""
        b = self._other(self.check_drafts(drafts))
        acc = accept_ratio(self.p[b], self.qp[b])
        if acc >= 1.0:
            return 1.0
        if self.reject <= 0.0:
            return acc + (1.0 - acc) * (self.p[self.a] + self.p[b])
        return acc + (1.0 - acc) * accept_ratio(self.p[self.a], self.reject)

    def monte_carlo(self, samples: int, rng: np.random.Generator) -> np.ndarray:
        """:meth:`accept_probability` of ``samples`` sampled draft tuples, vectorised."""
        drafts = sample_drafts_batch(self.scheme, self.q, self.n, samples, rng)
        b = np.where(drafts[:, 0] != self.a, drafts[:, 0], drafts[:, 1])  # the non-hub draft
        acc = accept_ratio(self.p[b], self.qp[b])
        if self.reject <= 0.0:
            out = acc + (1.0 - acc) * (self.p[self.a] + self.p[b])
        else:
            out = acc + (1.0 - acc) * accept_ratio(self.p[self.a], self.reject)
        return np.where(acc >= 1.0, 1.0, out)

    def acceptance(self):
        """``S + min(p(a), 1 - S)``. O(V).

        Returned as a fraction of the accepted plus rejected mass (``sum(p)``, one up to rounding):
        rejected are ``(p - q')_+`` off the hub and the part of ``p(a)`` above ``1 - S`` (0 exactly).
        """
        hub = min(self.p[self.a], self.reject)
        mask = np.arange(self.p.size) != self.a
        rejected = float(np.maximum(self.p[mask] - self.qp[mask], 0.0).sum()) + (self.p[self.a] - hub)
        return accept_fraction(float(self.S + hub), rejected)


# -- the same acceptance in the evaluation plan (mdsd_ot.plan; its numba passes in _kernels/plan.py)
def _plan_acceptance(plan, ns):
    _, s, rejected, reject = plan.greedy([2])[2]  # sum min(p, q'), (p - q')_+, (q' - p)_+
    pa = float(plan.p[plan.top(1)[0]])
    hub = min(pa, float(reject))
    return [accept_fraction(float(s) + hub, float(rejected) + (pa - hub)) for _ in ns]


# -- ... and in the batched torch plan (mdsd_ot.backends.torch.evaluate_batch), on the tensors' device
def _batch_acceptance(b, ns):
    torch = require_torch()
    _, s_min, s_p, s_q, p_a = b.greedy()[2]
    hub = torch.minimum(p_a, s_q)
    return {n: torch_accept_fraction(s_min + hub, s_p + (p_a - hub)) for n in ns}


class SpecHubVerifier(Verifier):
    """SpecHub (n = 2, hub drafts); optimal for its draft law.

    Examples
    --------
    >>> from mdsd_ot.verifiers import VERIFIERS
    >>> round(VERIFIERS["spechub"].acceptance([0.5, 0.3, 0.2, 0.0], [0.1, 0.2, 0.3, 0.4], 2), 6)
    0.666667
    """

    name = "spechub"
    plan = PlanVerifier(lambda n: n == 2, _plan_acceptance, lambda n: {"greedy": 2})
    batch = BatchVerifier(lambda n: n == 2, _batch_acceptance, lambda n: {"greedy": 2})
    schemes = ("hub",)
    fixed_n = 2
    reference = "Sun et al., SpecHub, EMNLP 2024, arXiv:2411.05289"

    def _prepare(self, p, q, n, scheme):
        return _PreparedHub(self, p, q, n, scheme)
