"""The primal LP: optimal transport with membership cost (docs/math.md#primal-lp).

Variables ``pi(S, y) >= 0`` for each reachable draft set ``S`` and each ``y in S``:

.. math:: \\max \\sum \\pi \\quad\\text{s.t.}\\quad \\sum_y \\pi(S, y) \\le Q_S,
          \\quad \\sum_S \\pi(S, y) \\le p(y)

(a bipartite max-flow: source -> S -> y -> sink). Two formulations of the same model: a direct
sparse HiGHS model through ``highspy`` (:func:`solve_highs`, dual simplex, interior point above
``IPM_COLUMNS`` columns) and a cvxpy model solved by HiGHS (:func:`solve_cvxpy`). Both return a
:class:`PrimalSolution` with the value, the transport plan ``P(y | S)``, the rejection residual and
an optimal dual subset (from the min cut of the flow). The LP grows like ``V^n``: it is the ground
truth for small vocabularies, never the fast path.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ._config import IPM_COLUMNS, LP_MAX_COLUMNS, LP_PLAN_MAX_ENTRIES, LP_SOLVER_TOL
from .drafts import DraftScheme
from .drafts.scheme import set_tuples

__all__ = ["TransportLP", "PrimalSolution", "build_lp", "solve_highs", "solve_cvxpy"]


@dataclass(frozen=True)
class TransportLP:
    """The flow LP over aggregated draft sets (columns ordered set by set, tokens ascending)."""

    p: np.ndarray
    sets: tuple  # tuple of sorted token tuples
    set_mass: np.ndarray  # Q_S
    col_set: np.ndarray  # set index of each column
    col_token: np.ndarray  # token of each column

    @property
    def num_columns(self) -> int:
        return int(self.col_set.size)

    def constraint_matrices(self):
        """``(A_sets (num_sets x N), A_tokens (V x N))`` as CSR matrices of ones."""
        N = self.num_columns
        ones = np.ones(N)
        cols = np.arange(N)
        a_sets = sp.csr_matrix((ones, (self.col_set, cols)), shape=(len(self.sets), N))
        a_tok = sp.csr_matrix((ones, (self.col_token, cols)), shape=(self.p.size, N))
        return a_sets, a_tok


@dataclass(frozen=True)
class PrimalSolution:
    """Solution of the flow LP."""

    value: float
    flow: np.ndarray  # pi per column
    success: bool
    message: str
    lp: TransportLP

    @property
    def plan(self) -> np.ndarray:
        """``plan[s, y] = P(output y | draft set s)``, shape ``(num_sets, V)``."""
        plan = np.zeros((len(self.lp.sets), self.lp.p.size))
        np.add.at(plan, (self.lp.col_set, self.lp.col_token), self.flow)
        return plan / self.lp.set_mass[:, None]

    @property
    def residual(self) -> np.ndarray:
        """The law to sample on rejection, ``(p - inflow)_+`` normalised (zeros if never rejected)."""
        inflow = np.bincount(self.lp.col_token, weights=self.flow, minlength=self.lp.p.size)
        left = np.maximum(self.lp.p - inflow, 0.0)
        total = left.sum()
        return left / total if total > LP_SOLVER_TOL else np.zeros_like(left)

    def min_cut_subset(self, tol: float = 1e-9) -> np.ndarray:
        """Tokens on the source side of a minimum cut: an optimal dual subset ``H``.

        In the residual graph a set node is reached from the source when its capacity is not used
        up; from a set every member token is reached (infinite capacity); from a token, every set
        sending it positive flow is reached back. ``alpha* = p(H) + 1 - Q(H)`` for the reached tokens.
        """
        lp = self.lp
        out = np.bincount(lp.col_set, weights=self.flow, minlength=len(lp.sets))
        set_seen = out < lp.set_mass - tol
        tok_seen = np.zeros(lp.p.size, dtype=bool)
        while True:
            new_tok = np.zeros_like(tok_seen)
            new_tok[lp.col_token[set_seen[lp.col_set]]] = True
            back = (self.flow > tol) & new_tok[lp.col_token]
            new_set = set_seen.copy()
            new_set[lp.col_set[back]] = True
            if np.array_equal(new_tok, tok_seen) and np.array_equal(new_set, set_seen):
                return np.flatnonzero(tok_seen).astype(np.int64)
            tok_seen, set_seen = new_tok, new_set


def build_lp(p: np.ndarray, q: np.ndarray, n: int, scheme: DraftScheme) -> TransportLP:
    """Aggregate the scheme's draft tuples into sets and lay out the flow LP's columns.

    Parameters
    ----------
    p, q : numpy.ndarray, shape (V,)
        Validated, normalised target and draft distributions.
    n : int
        Number of drafts.
    scheme : DraftScheme
        Gives the law of the draft sets (:meth:`DraftScheme.set_law`).

    Returns
    -------
    TransportLP
        ``ValueError`` if it would have more than ``LP_MAX_COLUMNS`` columns, or its dense transport
        plan (draft sets x tokens) more than ``LP_PLAN_MAX_ENTRIES`` entries.
    """
    rows, masses = scheme.set_rows(q, n)
    drafted = rows >= 0
    sizes = drafted.sum(axis=1)
    if sizes.sum() > LP_MAX_COLUMNS:
        raise ValueError(f"the LP would have {sizes.sum():,} columns; use method='dual'")
    if len(rows) * p.size > LP_PLAN_MAX_ENTRIES:
        raise ValueError(
            f"the LP's transport plan would have {len(rows):,} draft sets x {p.size:,} tokens = "
            f"{len(rows) * p.size:,} entries (limit {LP_PLAN_MAX_ENTRIES:,}); use method='dual', or a "
            f"smaller vocabulary for the LP"
        )
    sets = tuple(set_tuples(rows))
    col_set = np.repeat(np.arange(len(rows), dtype=np.int64), sizes)
    return TransportLP(p, sets, masses, col_set, rows[drafted])


_BANNER_SILENCED = False


def _quiet_highs():
    """A ``highspy.Highs`` instance; the once-per-process banner goes to /dev/null, not stdout."""
    global _BANNER_SILENCED
    import highspy

    if _BANNER_SILENCED:
        return highspy.Highs()
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 1)
            h = highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    _BANNER_SILENCED = True
    return h


def solve_highs(lp: TransportLP, *, solver: str | None = None) -> PrimalSolution:
    """Solve the flow LP with HiGHS through ``highspy`` (output silenced).

    Parameters
    ----------
    lp : TransportLP
    solver : str or None
        HiGHS ``solver`` option; None: ``"ipm"`` above ``IPM_COLUMNS`` columns, else ``"simplex"``.

    Returns
    -------
    PrimalSolution
        ``value`` is NaN and ``flow`` zero unless HiGHS reports an optimum.
    """
    import highspy

    N = lp.num_columns
    num_sets = len(lp.sets)
    model = highspy.HighsLp()
    model.num_col_ = N
    model.num_row_ = num_sets + lp.p.size
    model.sense_ = highspy.ObjSense.kMaximize
    model.col_cost_ = np.ones(N)
    model.col_lower_ = np.zeros(N)
    model.col_upper_ = np.full(N, highspy.kHighsInf)
    model.row_lower_ = np.full(model.num_row_, -highspy.kHighsInf)
    model.row_upper_ = np.concatenate([lp.set_mass, lp.p])
    # column j has two ones: its set's row and its token's row (rows sorted within the column)
    model.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    model.a_matrix_.start_ = np.arange(0, 2 * N + 1, 2, dtype=np.int32)
    model.a_matrix_.index_ = np.column_stack([lp.col_set, num_sets + lp.col_token]).ravel().astype(np.int32)
    model.a_matrix_.value_ = np.ones(2 * N)

    h = _quiet_highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("log_to_console", False)
    h.setOptionValue("solver", solver or ("ipm" if N > IPM_COLUMNS else "simplex"))
    h.setOptionValue("primal_feasibility_tolerance", LP_SOLVER_TOL)
    h.setOptionValue("dual_feasibility_tolerance", LP_SOLVER_TOL)
    h.setOptionValue("ipm_optimality_tolerance", LP_SOLVER_TOL)
    h.passModel(model)
    h.run()
    status = h.getModelStatus()
    ok = status == highspy.HighsModelStatus.kOptimal
    message = h.modelStatusToString(status)
    flow = np.maximum(np.asarray(h.getSolution().col_value, dtype=float), 0.0) if ok else np.zeros(N)
    return PrimalSolution(float(flow.sum()) if ok else float("nan"), flow, ok, message, lp)


def solve_cvxpy(lp: TransportLP) -> PrimalSolution:
    """The same LP as a cvxpy model, solved by HiGHS through cvxpy.

    Parameters
    ----------
    lp : TransportLP

    Returns
    -------
    PrimalSolution
        ``value`` is NaN and ``flow`` zero unless cvxpy reports an optimum.
    """
    import cvxpy as cp

    _quiet_highs()  # the banner, if any, is printed (to /dev/null) here rather than inside cvxpy
    a_sets, a_tok = lp.constraint_matrices()
    x = cp.Variable(lp.num_columns, nonneg=True)
    problem = cp.Problem(cp.Maximize(cp.sum(x)), [a_sets @ x <= lp.set_mass, a_tok @ x <= lp.p])
    try:
        problem.solve(
            solver=cp.HIGHS,
            primal_feasibility_tolerance=LP_SOLVER_TOL,
            dual_feasibility_tolerance=LP_SOLVER_TOL,
        )
    except cp.error.SolverError as exc:  # pragma: no cover - reported, not raised
        return PrimalSolution(float("nan"), np.zeros(lp.num_columns), False, str(exc), lp)
    ok = problem.status == cp.OPTIMAL
    flow = np.maximum(np.asarray(x.value, dtype=float), 0.0) if ok else np.zeros(lp.num_columns)
    return PrimalSolution(float(flow.sum()) if ok else float("nan"), flow, ok, str(problem.status), lp)
