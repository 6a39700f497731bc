"""The optimal verifier: the transport plan of the primal LP (any draft scheme, small V).

Reference: the optimal-transport formulation of SpecTr (Sun et al., NeurIPS 2023,
arXiv:2310.15141) and its membership-cost LP / max-flow form (Hu et al., ICLR 2025,
arXiv:2502.18779). docs/math.md#primal-lp and docs/math.md#optimal-verifier.

Given a feasible flow ``pi(S, y)`` (``sum_y pi(S, y) <= Q_S``, ``sum_S pi(S, y) <= p(y)``), the
verifier outputs ``y in S`` with probability ``pi(S, y) / Q_S`` for the observed draft set ``S`` and
otherwise samples the residual ``(p - sum_S pi(S, .)) / (1 - sum pi)``. The output is exactly ``p``
for any feasible flow; a maximum flow attains ``alpha*``.

The plan comes from :func:`mdsd_ot.optimal_acceptance` with ``method="lp"`` (HiGHS). Solver
tolerances (``LP_SOLVER_TOL``) can leave the flow infeasible by ~1e-10, which would break exact
validity, so the flow is projected back onto the feasible set (negative entries dropped, then rows
and columns scaled down to their capacities) and the residual is recomputed from it. The acceptance
is the total projected flow (within ~1e-9 of ``alpha*``). The LP has ``sum_S |S|`` columns: small
vocabularies only.
"""

from __future__ import annotations

import numpy as np

from .base import ANY_SCHEME, PreparedVerifier, Verifier, residual, sample_drafts_batch, sample_index

__all__ = ["OptimalVerifier", "feasible_flow"]


def feasible_flow(flow: np.ndarray, set_mass: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Project a nearly feasible flow ``flow[s, y]`` onto the feasible set.

    Rows are scaled so that ``sum_y flow[s, y] <= set_mass[s]`` and then columns so that
    ``sum_s flow[s, y] <= p[y]`` (scaling down never breaks the other family of constraints).
    """
    f = np.maximum(flow, 0.0)
    rows = f.sum(axis=1)
    over = rows > set_mass
    f[over] *= (set_mass[over] / rows[over])[:, None]
    cols = f.sum(axis=0)
    over = cols > p
    f[:, over] *= p[over] / cols[over]  # cols > p >= 0 there
    return f


class _PreparedOptimal(PreparedVerifier):
    def __init__(self, verifier, p, q, n, scheme):
        super().__init__(verifier, p, q, n, scheme)
        from ..api import optimal_acceptance

        result = optimal_acceptance(p, q, n, sampling=scheme.name, method="lp")
        if not result.success or result.plan is None:
            raise ValueError(f"the LP for the optimal verifier failed: {result.message}")
        self.bound = result
        self.sets = tuple(tuple(int(y) for y in s) for s in result.draft_sets)
        self.row = {s: i for i, s in enumerate(self.sets)}
        sets, masses = scheme.set_law(q, n)
        law = dict(zip((tuple(s) for s in sets), masses))
        self.set_mass = np.array([law.get(s, 0.0) for s in self.sets])
        flow = feasible_flow(result.plan * self.set_mass[:, None], self.set_mass, p)
        with np.errstate(divide="ignore", invalid="ignore"):
            plan = np.where(self.set_mass[:, None] > 0, flow / self.set_mass[:, None], 0.0)
        self.plan = plan  # P(output y | draft set s), rows sum to <= 1
        self.stay = np.maximum(1.0 - plan.sum(axis=1), 0.0)  # P(reject | s)
        self.residual, _ = residual(p, flow.sum(axis=0))
        self.value = float(flow.sum())

    def _plan_row(self, drafts):
        key = tuple(sorted(set(int(x) for x in drafts)))
        if key not in self.row:
            raise ValueError(f"draft set {list(key)} has probability 0 under {self.scheme.name!r}")
        return self.row[key]

    def _verify(self, drafts, rng):
        i = self._plan_row(drafts)
        u = rng.random()
        cdf = np.cumsum(self.plan[i])
        if u < cdf[-1]:
            return min(int(np.searchsorted(cdf, u, side="right")), self.p.size - 1)
        return sample_index(self.residual, rng.random())

    def _law(self, drafts):
        i = self._plan_row(drafts)
        return self.plan[i] + self.stay[i] * self.residual

    def monte_carlo(self, samples: int, rng: np.random.Generator) -> np.ndarray:
        """P(accepted | drafts) of ``samples`` sampled draft tuples: it depends on the draft set only,
        so it is evaluated once per distinct set (the same values as the per-tuple loop)."""
        drafts = sample_drafts_batch(self.scheme, self.q, self.n, samples, rng)
        sets, inverse = np.unique(np.sort(drafts, axis=1), axis=0, return_inverse=True)
        accept = np.array([self._law(s)[np.unique(s)].sum() for s in sets])
        return accept[inverse.reshape(-1)]

    def acceptance(self):
        """Total (projected) flow of the optimal plan, ``alpha*`` to the LP tolerance."""
        return self.value


class OptimalVerifier(Verifier):
    """The LP-optimal verifier for any draft scheme (small vocabularies).

    Examples
    --------
    >>> from mdsd_ot.verifiers import VERIFIERS
    >>> round(VERIFIERS["optimal"].acceptance([0.5, 0.3, 0.2, 0.0], [0.1, 0.2, 0.3, 0.4], 2), 6)
    0.69
    """

    name = "optimal"
    schemes = ANY_SCHEME
    reference = "optimal transport plan (SpecTr, arXiv:2310.15141; Hu et al., arXiv:2502.18779)"

    def _prepare(self, p, q, n, scheme):
        return _PreparedOptimal(self, p, q, n, scheme)
