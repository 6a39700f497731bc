"""The exact optimum over all valid tree verifiers, at small scale (docs/math.md#the-exact-tree-optimum).

One target call verifies a drafted tree ``T`` and emits ``E = u + (y,)``: a root-to-node path ``u``
of ``T`` (possibly the empty root path) followed by one token ``y``. A verifier is a law of ``E``
given ``T`` (and the models); it is **valid** when ``E`` followed by fresh sampling from the target
has the target's law, which is what makes chained calls lossless. The best valid verifier solves the
*causal* LP over ``x[T, E] >= 0`` (``T`` a path-set class of drafted trees,
:mod:`mdsd_ot.trees.enumerate`):

.. math:: \\max \\sum_{T, E} |E|\\, x[T, E] \\quad \\text{s.t.} \\quad \\sum_E x[T, E] = P(T), \\qquad
          m(u \\cdot y) = P(y \\mid u)\\, m^+(u) \\quad \\text{for every prefix } u \\text{ and token } y,

where ``m(s)`` is the mass of the ``E`` that begin with ``s`` and ``m^+(u)`` the mass of those that
strictly extend ``u`` (``|E| > |u|``). :func:`tree_optimum` solves it with HiGHS, re-checks the
solution independently, and returns the plan with a :class:`LPTreeVerifier` that samples from it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .._config import (
    LAW_TOL,
    TREE_LP_FEAS_TOL,
    TREE_LP_IPM_COLUMNS,
    TREE_LP_IPM_ITERATIONS,
    TREE_LP_ROW_SCALES,
    TREE_LP_TIME_LIMIT_S,
    TREE_OPTIMUM_MAX_CLASSES,
    VALUE_TOL,
)
from ..verifiers.base import sample_index
from .enumerate import TreeEnumeration, enumerate_trees, path_set
from .shape import parse_shape
from .verifiers import TreeVerifier

__all__ = [
    "tree_optimum",
    "solve_tree_lp",
    "TreeOptimum",
    "LPTreeVerifier",
    "CausalLP",
    "build_causal_lp",
    "emitted_law_error",
]

#: Agreement required between a tree the lp verifier is given and the laws its LP was solved for.
_LAW_MATCH_TOL = 1e-9


# ------------------------------------------------------------------------------------------- the LP
@dataclass(frozen=True)
class CausalLP:
    """The causal LP in equality form: maximise ``cost @ z`` s.t. ``A z = b``, ``z >= 0``.

    Columns: first one per (class ``T``, path ``w`` of the class, token ``y`` with ``P(y | w) > 0``):
    ``z[T, E] = x[T, E] / P(T)``, the probability of emitting ``E = w + (y,)`` given the class (each
    class's plan is then a law of its own, however rare the class: the solver's tolerances apply to
    conditional probabilities); then one auxiliary column ``m^+(u)`` per path ``u``. Rows: first one
    per class, ``sum_E z[T, E] = 1``, then one per (path ``u``, token ``y`` with ``P(y | u) > 0``):
    ``sum over (T, E), E beginning with u + (y,), of P(T) z[T, E]  -  P(y | u) m^+(u) = 0``. Summed
    over ``y`` these rows say that ``m^+(u)`` is the mass strictly extending ``u``, so no separate
    definition row is needed. Paths of target probability 0 carry no columns (no valid verifier emits
    through them). ``cost = P(T) |E|``.
    """

    enumeration: TreeEnumeration
    paths: tuple  # the paths u with positive target probability, sorted by length then tokens
    prefix_mass: np.ndarray  # P_target(u) per path
    col_class: np.ndarray  # class of each x column
    col_path: np.ndarray  # index into paths of w
    col_token: np.ndarray  # y
    start: np.ndarray  # CSC column starts (x columns, then the m^+ columns)
    index: np.ndarray
    value: np.ndarray
    b: np.ndarray
    cost: np.ndarray
    upper: np.ndarray  # an upper bound of every column at every feasible point (for the dual bound): 1

    @property
    def n_x(self) -> int:
        return int(self.col_class.size)

    @property
    def n_columns(self) -> int:
        return int(self.cost.size)

    @property
    def n_rows(self) -> int:
        return int(self.b.size)

    def matrix(self):
        """``A`` as a scipy CSC matrix."""
        import scipy.sparse as sp

        return sp.csc_matrix((self.value, self.index, self.start), shape=(self.n_rows, self.n_columns))


def build_causal_lp(e: TreeEnumeration) -> CausalLP:
    """Lay out the causal LP of the drafted-tree law ``e`` (see :class:`CausalLP`).

    Size: ``sum over classes of sum over their paths w of |supp P(. | w)|`` emission columns with
    ``|w| + 2`` nonzeros each, plus one column per path with ``|supp P(. | u)|`` nonzeros; one row per
    class and per (path, token of positive target probability).

    Parameters
    ----------
    e : TreeEnumeration
        The drafted-tree law.

    Returns
    -------
    CausalLP
    """
    K = len(e.classes)
    all_paths = e.paths
    prefix = {(): 1.0}
    kept = []
    for u in all_paths:  # sorted by length: a path's parent comes first
        if u:
            parent = prefix.get(u[:-1], 0.0)
            prefix[u] = parent * float(e.p(u[:-1])[u[-1]]) if parent > 0 else 0.0
        if prefix[u] > 0:
            kept.append(u)
    path_id = {u: i for i, u in enumerate(kept)}
    support = [np.flatnonzero(e.p(u) > 0) for u in kept]
    row_start = np.zeros(len(kept) + 1, dtype=np.int64)
    row_start[1:] = np.cumsum([s.size for s in support])
    row_start += K
    V = e.vocab
    row_of_token = []  # per path: token -> row (-1 where P(y | u) = 0)
    for i, s in enumerate(support):
        r = np.full(V, -1, dtype=np.int64)
        r[s] = row_start[i] + np.arange(s.size)
        row_of_token.append(r)
    prefix_rows = []
    for u in kept:
        prefix_rows.append(
            np.array([row_of_token[path_id[u[:k]]][u[k]] for k in range(len(u))], dtype=np.int64)
        )
    classes_of = [[] for _ in kept]
    for c, tc in enumerate(e.classes):
        for u in tc.paths:
            i = path_id.get(u)
            if i is not None:
                classes_of[i].append(c)
    mass = np.array([tc.probability for tc in e.classes])
    idx_blocks, val_blocks, cls_blocks, path_blocks, tok_blocks, nnz_per_col = [], [], [], [], [], []
    for i, u in enumerate(kept):
        cs = np.array(classes_of[i], dtype=np.int64)
        s = support[i]
        if cs.size == 0:
            continue
        n = cs.size * s.size
        rows = np.empty((n, len(u) + 2), dtype=np.int64)
        rows[:, 0] = np.repeat(cs, s.size)
        rows[:, 1 : len(u) + 1] = prefix_rows[i]
        rows[:, -1] = np.tile(row_of_token[i][s], cs.size)
        idx_blocks.append(rows.ravel())
        vals = np.empty((n, len(u) + 2))
        vals[:, 0] = 1.0
        vals[:, 1:] = mass[rows[:, :1]]
        val_blocks.append(vals.ravel())
        cls_blocks.append(rows[:, 0].copy())
        path_blocks.append(np.full(n, i, dtype=np.int64))
        tok_blocks.append(np.tile(s, cs.size))
        nnz_per_col.append(np.full(n, len(u) + 2, dtype=np.int64))
    col_class = np.concatenate(cls_blocks)
    col_path = np.concatenate(path_blocks)
    col_token = np.concatenate(tok_blocks)
    n_x = col_class.size
    lengths = np.array([len(u) for u in kept], dtype=np.float64)
    m_index = [row_of_token[i][s] for i, s in enumerate(support)]
    m_value = [-e.p(u)[s] for u, s in zip(kept, support)]
    counts = np.concatenate(nnz_per_col + [np.array([s.size for s in support], dtype=np.int64)])
    start = np.zeros(counts.size + 1, dtype=np.int64)
    start[1:] = np.cumsum(counts)
    index = np.concatenate(idx_blocks + m_index)
    value = np.concatenate(val_blocks + m_value)
    b = np.zeros(int(row_start[-1]))
    b[:K] = 1.0
    cost = np.concatenate([mass[col_class] * (lengths[col_path] + 1.0), np.zeros(len(kept))])
    upper = np.ones(n_x + len(kept))
    return CausalLP(
        e,
        tuple(kept),
        np.array([prefix[u] for u in kept]),
        col_class,
        col_path,
        col_token,
        start,
        index,
        value,
        b,
        cost,
        upper,
    )


def _solve_highs(lp: CausalLP, solver: str, row_scale: float = 1.0, presolve: bool = False):
    """HiGHS on the LP (output silenced), every row (and its right-hand side) multiplied by ``row_scale``:
    ``(ok, message, x, row_dual, objective, basic)``, the duals those of the unscaled rows and
    ``basic`` the (columns, rows) basic flags of the final basis (None without a valid basis).

    HiGHS's feasibility tolerance is absolute (1e-10, its smallest); a class of drafted trees rarer
    than that moves the causal rows by less, so its plan would go unchecked. Scaling the rows by
    ``row_scale`` enforces them to ``1e-10 / row_scale``."""
    import highspy

    from ..primal import _quiet_highs

    model = highspy.HighsLp()
    model.num_col_ = lp.n_columns
    model.num_row_ = lp.n_rows
    model.sense_ = highspy.ObjSense.kMaximize
    model.col_cost_ = lp.cost
    model.col_lower_ = np.zeros(lp.n_columns)
    model.col_upper_ = np.full(lp.n_columns, highspy.kHighsInf)
    model.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    model.a_matrix_.start_ = lp.start.astype(np.int32)
    model.a_matrix_.index_ = lp.index.astype(np.int32)
    scale = float(row_scale)
    model.row_lower_ = lp.b * scale
    model.row_upper_ = lp.b * scale
    model.a_matrix_.value_ = lp.value * scale
    h = _quiet_highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("log_to_console", False)
    h.setOptionValue("solver", solver)
    # presolve finds nothing to remove here and took up to 17x the solve itself (bench_tree_optimum.py)
    h.setOptionValue("presolve", "on" if presolve else "off")
    h.setOptionValue("primal_feasibility_tolerance", 1e-10)
    h.setOptionValue("dual_feasibility_tolerance", 1e-10)
    h.setOptionValue("ipm_optimality_tolerance", 1e-10)
    h.setOptionValue("ipm_iteration_limit", TREE_LP_IPM_ITERATIONS)
    h.setOptionValue("time_limit", TREE_LP_TIME_LIMIT_S)
    h.passModel(model)
    h.run()
    status = h.getModelStatus()
    ok = status == highspy.HighsModelStatus.kOptimal
    sol = h.getSolution()
    x = np.asarray(sol.col_value, dtype=np.float64)
    y = np.asarray(sol.row_dual, dtype=np.float64) * scale
    basis = h.getBasis()
    basic = None
    if ok and basis.valid:
        kb = highspy.HighsBasisStatus.kBasic
        basic = (
            np.array([s == kb for s in basis.col_status], dtype=bool),
            np.array([s == kb for s in basis.row_status], dtype=bool),
        )
    return ok, h.modelStatusToString(status), x, y, float(h.getInfo().objective_function_value), basic


def _resolve_basis(lp: CausalLP, basic):
    """The vertex of HiGHS's final basis recomputed in float64: ``(z, y)`` or None.

    HiGHS returns a solution feasible to its tolerance (1e-10 absolute), so a class of probability
    below that can carry a plan the causal rows do not see. With the basic columns ``B`` and the rows
    at their bounds ``N`` (``|N| = |B|``), ``A[N, B] z_B = b_N`` and ``A[N, B]^T y_N = cost_B`` are
    solved by one sparse LU: residuals of a few ulps. None when the basis matrix is singular or the
    solution leaves ``z >= 0``; the caller keeps HiGHS's solution then (and its re-checks decide)."""
    import warnings

    import scipy.sparse.linalg as sla

    cols, rows_basic = basic
    rows = np.flatnonzero(~rows_basic)
    cols = np.flatnonzero(cols)
    if rows.size != cols.size or rows.size == 0:
        return None
    B = lp.matrix()[:, cols].tocsr()[rows].tocsc()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            lu = sla.splu(B)
            zb = lu.solve(lp.b[rows])
            yn = lu.solve(lp.cost[cols], trans="T")
    except (RuntimeError, ValueError, Warning):
        return None
    if not (np.isfinite(zb).all() and np.isfinite(yn).all()) or zb.min(initial=0.0) < -TREE_LP_FEAS_TOL:
        return None
    z = np.zeros(lp.n_columns)
    z[cols] = np.maximum(zb, 0.0)
    y = np.zeros(lp.n_rows)
    y[rows] = yn
    return z, y


def _dual_bound(lp: CausalLP, y: np.ndarray) -> float:
    """An upper bound on the LP's optimum from any row multipliers ``y``.

    For every feasible ``z`` (``A z = b``, ``0 <= z <= upper``; ``z <= 1`` holds at every feasible point:
    a plan's entries and ``m^+(u)`` are probabilities):
    ``cost @ z = y @ b + (cost - A^T y) @ z <= y @ b + sum_j max(0, cost_j - (A^T y)_j) upper_j``.
    Valid whatever ``y`` is; tight at an optimal dual. Both signs of the solver's duals are tried (a
    sign convention mix-up can only loosen the bound, never make it invalid)."""
    A = lp.matrix()
    best = math.inf
    for yy in (y, -y):
        d = lp.cost - A.T @ yy
        best = min(best, math.fsum(yy * lp.b) + math.fsum(np.maximum(d, 0.0) * lp.upper))
    return best


def emitted_law_error(e: TreeEnumeration, plans) -> tuple[float, float]:
    """``(law error, value)`` of a plan, computed from the plan alone (no LP matrix).

    ``plans[c]`` maps each emitted sequence ``E`` to ``P(E | class c)``. With ``P_E`` the mixture over
    the classes, the law of ``Z`` = ``E`` followed by fresh target sampling gives every sequence ``s``

    ``P(Z begins with s) = P_E(E begins with s) + sum_{k < |s|} P_E(E = s[:k]) P_target(s[k:] | s[:k])``;

    the error is the largest ``|P(Z begins with s) - P_target(s)|`` over ``s = u + (y,)``, ``u`` any
    path of a class and ``y`` any token (beyond those ``s`` nothing is emitted, so both sides factor
    alike), together with any emission ``E`` whose ``E[:-1]`` is not a path of its class or whose
    class's plan does not sum to one. ``value = sum_c P(c) sum_E P(E | c) |E|``.

    Parameters
    ----------
    e : TreeEnumeration
        The drafted-tree law.
    plans : sequence of dict
        One per class of ``e.classes``: ``{tuple of int: probability}``.

    Returns
    -------
    tuple of (float, float)
        ``(law error, value)``; the error is ``inf`` for an emission outside its class's paths.
    """
    mix: dict = {}
    err = 0.0
    value_terms = []
    for tc, plan in zip(e.classes, plans):
        paths = set(tc.paths)
        err = max(err, abs(math.fsum(plan.values()) - 1.0))
        for E, pr in plan.items():
            if pr < 0 or E[:-1] not in paths or not E:
                err = max(err, abs(pr) if pr < 0 else math.inf)
            mix[E] = mix.get(E, 0.0) + tc.probability * pr
            value_terms.append(tc.probability * pr * len(E))
    begins: dict = {}
    for E, pr in mix.items():
        for k in range(1, len(E) + 1):
            begins[E[:k]] = begins.get(E[:k], 0.0) + pr
    V = e.vocab
    for u in e.paths:
        for y in range(V):
            s = u + (y,)
            want = 1.0
            for k in range(len(s)):
                want *= float(e.p(s[:k])[s[k]])
            got = [begins.get(s, 0.0)]
            for k in range(len(s)):
                stop = mix.get(s[:k], 0.0)
                if stop:
                    tail = stop
                    for j in range(k, len(s)):
                        tail *= float(e.p(s[:j])[s[j]])
                    got.append(tail)
            err = max(err, abs(math.fsum(got) - want))
    return err, math.fsum(value_terms)


# --------------------------------------------------------------------------------------- the result
class LPTreeVerifier(TreeVerifier):
    """The tree verifier of a solved causal LP: given a drafted tree of class ``T``, emit ``E`` with
    probability ``x[T, E] / P(T)``.

    Valid and optimal by construction for trees drafted from the models, shape, scheme and context the
    LP was solved for (it raises ``ValueError`` on a tree whose laws or path set do not belong to that
    enumeration).
    """

    name = "lp"
    paper = "the causal LP over every drafted tree (docs/math.md#the-exact-tree-optimum)"

    def __init__(self, enumeration: TreeEnumeration, plans):
        self.enumeration = enumeration
        self._class_of = {tc.paths: i for i, tc in enumerate(enumeration.classes)}
        self._plans = tuple(plans)
        self._tables = []
        for plan in self._plans:
            keys = sorted(plan, key=lambda E: (len(E), E))
            self._tables.append((keys, np.array([plan[E] for E in keys])))

    def why_not(self, shape, scheme) -> str | None:
        e = self.enumeration
        name = getattr(scheme, "name", scheme)
        if parse_shape(shape) != e.shape or name != e.scheme.name:
            return (
                f"this lp verifier was solved for {e.shape.label} trees of {e.scheme.name!r} drafts; "
                f"solve tree_optimum for shape {parse_shape(shape).label} and scheme {name!r}"
            )
        return None

    def _plan_index(self, tree) -> int:
        self.require(tree)
        e = self.enumeration
        V = e.vocab
        if tree.vocab != V:
            raise ValueError(f"the tree has V = {tree.vocab} tokens; this lp verifier was solved for V = {V}")
        for v in range(tree.tokens.size):
            w = tree.path(v)
            if np.max(np.abs(tree.p[v] - e.p(w))) > _LAW_MATCH_TOL or (
                v < tree.n_internal and np.max(np.abs(tree.q[v] - e.q(w))) > _LAW_MATCH_TOL
            ):
                raise ValueError(
                    f"node {v} (path {list(w)}) carries other laws than the models this lp verifier was "
                    f"solved for (at context {list(e.context)}); solve tree_optimum for these models"
                )
        c = self._class_of.get(path_set(tree))
        if c is None:
            raise ValueError(
                "this tree's path set has probability 0 under the draft scheme the lp verifier was solved "
                "for; it was not drafted by that scheme"
            )
        return c

    def outcome_law(self, tree) -> dict:
        return dict(self._plans[self._plan_index(tree)])

    def expected_tokens(self, tree) -> float:
        keys, probs = self._tables[self._plan_index(tree)]
        return math.fsum(len(E) * p for E, p in zip(keys, probs.tolist()))

    def verify(self, tree, rng: np.random.Generator) -> list:
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
        keys, probs = self._tables[self._plan_index(tree)]
        return list(keys[sample_index(probs, rng.random())])


@dataclass(frozen=True)
class TreeOptimum:
    """The best expected tokens per call over all valid tree verifiers, with its plan (:func:`tree_optimum`).

    Attributes
    ----------
    value : float
        ``E|E|`` of the read-back plan: the expected tokens one call emits under :attr:`verifier`.
    success : bool
        True only when proven: HiGHS reported an optimum, the plan read back is feasible (class totals,
        ``x >= 0``, to ``TREE_LP_FEAS_TOL``), its emitted law passes :func:`emitted_law_error` to
        ``LAW_TOL`` (1e-12), and the
        dual bound lies within ``VALUE_TOL`` of :attr:`value`.
    status : int
        0 proven optimal; 2 the solver found no feasible plan; 4 the solver stopped (numerical trouble,
        limits) or a re-check failed (:attr:`message` says which).
    message : str
    dual_bound : float
        An upper bound on the optimum from the solver's duals, recomputed here (``inf`` when unavailable).
    law_error : float
        The re-check's largest deviation of the emitted law from the target's.
    n_trees : int
        Path-set classes of drafted trees (the LP's tree blocks; ordered trees with the same path set are
        one class).
    n_variables : int
        LP columns (emissions plus one auxiliary column per path).
    plan : tuple of dict
        ``plan[c]`` maps each emitted sequence to its probability given class ``c``
        (``enumeration.classes[c]``).
    verifier : LPTreeVerifier
        Samples from the plan; valid and optimal for trees drafted like those enumerated.
    enumeration : TreeEnumeration
    heights : DualHeights or None
        The optimal dual read from the LP's row multipliers (docs/math.md#the-tree-dual): per path
        ``u``, ``(h_u, K_u)`` with ``g(u, y) = 1 - mu(u, y)`` (``mu`` the multiplier of the causal
        row of ``(u, y)``), ``K_u = max(max_y g(u, y), 1 + sum_y P(y | u) h_u(y))`` and
        ``h_u(y) = max g(u, .) - g(u, y)``. :func:`~mdsd_ot.trees.mean_upper_bound` (or
        :func:`~mdsd_ot.trees.upper_bound` averaged over the drafted trees) with them gives
        :attr:`value` back. None when the solve failed.
    """

    value: float
    success: bool
    status: int
    message: str
    dual_bound: float
    law_error: float
    n_trees: int
    n_variables: int
    plan: tuple = field(repr=False)
    verifier: LPTreeVerifier = field(repr=False)
    enumeration: TreeEnumeration = field(repr=False)
    heights: object = field(default=None, repr=False)

    @property
    def classes(self) -> tuple:
        """The path-set classes, in the order of :attr:`plan`."""
        return self.enumeration.classes

    def __float__(self) -> float:
        return float(self.value)


def tree_optimum(
    target,
    draft,
    shape,
    scheme,
    *,
    context=(),
    solver: str | None = None,
    max_classes: int = TREE_OPTIMUM_MAX_CLASSES,
) -> TreeOptimum:
    """The exact optimum of the expected tokens per target call over every valid tree verifier.

    Solves the causal LP (module docstring; docs/math.md#the-exact-tree-optimum) over every path-set
    class of trees of ``shape`` drafted by ``scheme`` at ``context``, with HiGHS (dual simplex; interior
    point with crossover above ``TREE_LP_IPM_COLUMNS`` columns), and re-checks the answer: the plan is
    read back as the law of the emitted tokens per class, its validity re-derived from the plan alone
    (:func:`emitted_law_error`), and its value compared with a dual bound recomputed from the solver's
    row duals. HiGHS's tolerances are absolute (1e-10 at best), looser than the plans of classes rarer
    than that need: the rows are scaled up (``TREE_LP_ROW_SCALES``) and the vertex of HiGHS's
    final basis is recomputed by a sparse LU before the re-checks.

    Parameters
    ----------
    target, draft : callable or torch causal LM
        ``law(context) -> (V,)`` next-token laws, ``context`` a tuple of token ids (cached); a torch LM
        is read at temperature 1 (:func:`mdsd_ot.trees.model_law` for another temperature).
    shape : str, sequence of int or TreeShape
    scheme : str or DraftScheme
    context : tuple of int
        Tokens before the root (required non-empty for torch LMs).
    solver : {"simplex", "ipm", None}
        HiGHS's solver tried first; None picks by size (the other is tried when it fails).
    max_classes : int
        Refuse (``ValueError`` naming the count) more path-set classes than this.

    Returns
    -------
    TreeOptimum

    Examples
    --------
    Sun et al.'s example: two tokens, target (1/3, 2/3), draft (2/3, 1/3) at every context, a chain of
    two drafts. Token-level verification emits 19/9 tokens per call, the optimum 20/9:

    >>> r = tree_optimum(lambda c: [1/3, 2/3], lambda c: [2/3, 1/3], "1x2", "with_replacement")
    >>> r.success, round(r.value * 9, 9), r.n_trees
    (True, 20.0, 4)
    """
    if solver not in (None, "simplex", "ipm"):
        raise ValueError(f"unknown solver {solver!r}; choose 'simplex', 'ipm' or None (by size)")
    e = enumerate_trees(target, draft, shape, scheme, context=context, max_classes=max_classes)
    return solve_tree_lp(e, solver=solver)


def solve_tree_lp(e: TreeEnumeration, *, solver: str | None = None) -> TreeOptimum:
    """:func:`tree_optimum` for a drafted-tree law already enumerated (:func:`enumerate_trees`).

    The rows go to HiGHS scaled by each of ``TREE_LP_ROW_SCALES`` in turn until a solution passes
    every re-check (:func:`_solve_highs` says why), with ``solver`` (or the one chosen by size), then
    the other solver, then the first with presolve (interior point without presolve reported some
    scaled inputs infeasible; the LP is always feasible: emitting one target token at the root is
    valid). The first attempt that passes is returned, else the last one with its failed checks.

    Parameters
    ----------
    e : TreeEnumeration
        The drafted-tree law.
    solver : {"simplex", "ipm"} or None
        HiGHS solver of the first attempt; None: chosen by size (``ipm`` above
        ``TREE_LP_IPM_COLUMNS`` columns). ``ValueError`` for another value.

    Returns
    -------
    TreeOptimum
        ``success`` False when no attempt passed the re-checks.
    """
    if solver not in (None, "simplex", "ipm"):
        raise ValueError(f"unknown solver {solver!r}; choose 'simplex', 'ipm' or None (by size)")
    lp = build_causal_lp(e)
    first = solver or ("ipm" if lp.n_columns > TREE_LP_IPM_COLUMNS else "simplex")
    other = "simplex" if first == "ipm" else "ipm"
    plan = [(first, False), (other, False), (first, True)]
    for how, presolve in plan:
        for row_scale in TREE_LP_ROW_SCALES:
            result = _attempt(e, lp, how, row_scale, presolve)
            if result.success:
                return result
    return result


def _attempt(e: TreeEnumeration, lp: CausalLP, solver: str, row_scale: float, presolve: bool = False):
    """One HiGHS solve and the re-checks of its plan (a :class:`TreeOptimum`)."""
    ok, message, x, y, objective, basic = _solve_highs(lp, solver, row_scale, presolve)
    how = f"HiGHS {solver}, rows scaled by {row_scale:g}" + (", presolve" if presolve else "")
    K = len(e.classes)
    plans: list = [dict() for _ in range(K)]
    if not ok:
        status = 2 if "infeasible" in message.lower() else 4
        verifier = LPTreeVerifier(e, plans)
        return TreeOptimum(
            math.nan, False, status, f"{how}: {message}", math.inf, math.inf, K, lp.n_columns, (), verifier, e
        )
    duals = [y]
    polished = _resolve_basis(lp, basic) if basic is not None else None
    if polished is not None:
        A = lp.matrix()
        if np.abs(A @ polished[0] - lp.b).max() <= np.abs(A @ np.maximum(x, 0.0) - lp.b).max():
            x = polished[0]
            objective = float(lp.cost @ x)
        duals.append(polished[1])
    xs = x[: lp.n_x]
    problems = []
    negative = float(-min(0.0, xs.min(initial=0.0)))
    if negative > TREE_LP_FEAS_TOL:
        problems.append(f"x has entries down to {-negative:.3g}")
    xs = np.maximum(xs, 0.0)
    totals = np.bincount(lp.col_class, weights=xs, minlength=K)
    off = float(np.max(np.abs(totals - lp.b[:K])))
    if off > TREE_LP_FEAS_TOL:
        problems.append(f"class totals off by up to {off:.3g}")
    for j in np.flatnonzero(xs > 0):
        c = int(lp.col_class[j])
        E = lp.paths[lp.col_path[j]] + (int(lp.col_token[j]),)
        plans[c][E] = plans[c].get(E, 0.0) + float(xs[j]) / totals[c]
    law_error, value = emitted_law_error(e, plans)
    if law_error > LAW_TOL:
        problems.append(f"the emitted law is off the target's by {law_error:.3g}")
    bound = min(_dual_bound(lp, yy) for yy in duals)
    if not bound - value <= VALUE_TOL:
        problems.append(f"the dual bound {bound:.15g} exceeds the plan's value by {bound - value:.3g}")
    if abs(objective - value) > VALUE_TOL:
        problems.append(f"HiGHS's objective {objective:.15g} differs from the plan's value")
    verifier = LPTreeVerifier(e, plans)
    if problems:
        msg = f"re-check failed ({how}): " + "; ".join(problems)
        return TreeOptimum(value, False, 4, msg, bound, law_error, K, lp.n_columns, tuple(plans), verifier, e)
    msg = (
        f"proven optimal ({how}: {message.lower()}), emitted law within {law_error:.1e} of the target's, "
        f"dual bound within {max(bound - value, 0.0):.1e}"
    )
    heights = dual_heights(lp, duals)
    return TreeOptimum(
        value, True, 0, msg, bound, law_error, K, lp.n_columns, tuple(plans), verifier, e, heights
    )


# ------------------------------------------------------------------------------- the dual heights
def dual_heights(lp: CausalLP, duals):
    """The tree dual's heights read from row multipliers of the causal LP (docs/math.md#the-tree-dual).

    The LP's dual is ``min sum_C lambda_C`` over class multipliers ``lambda_C`` and causal-row
    multipliers ``mu(u, y)`` with ``lambda_C >= P(C) sum_k g(E_<k, E_k)`` for every emission ``E``
    of class ``C`` (its column) and ``sum_y P(y | u) g(u, y) >= 1`` (the ``m^+(u)`` column), where
    ``g = 1 - mu``. Each candidate ``y`` in ``duals`` is tried with both signs (the solver's sign
    convention); the sign whose class multipliers sum to a positive value is kept, and among the
    candidates the one that violates ``sum_y P(y | u) g(u, y) >= 1`` least. The heights are then
    repaired to be feasible whatever the rounding: ``h_u(y) = max g(u, .) - g(u, y)`` and
    ``K_u = max(max g(u, .), 1 + sum_y P(y | u) h_u(y))``, so they are always a valid dual.

    Parameters
    ----------
    lp : CausalLP
    duals : sequence of numpy.ndarray
        Row multipliers (one entry per LP row).

    Returns
    -------
    DualHeights
    """
    from .bound import DualHeights

    e = lp.enumeration
    K = len(e.classes)
    V = e.vocab
    layout = []  # per kept path: (its target law, its support tokens, their rows)
    row = K
    for u in lp.paths:
        p = e.p(u)
        s = np.flatnonzero(p > 0)
        layout.append((p, s, np.arange(row, row + s.size)))
        row += s.size
    best = None
    for y in duals:
        y = np.asarray(y, dtype=np.float64)
        if not np.all(np.isfinite(y)):
            continue
        sign = 1.0 if math.fsum(y[:K]) >= 0 else -1.0
        violation = 0.0
        for p, s, rows in layout:
            g = 1.0 - sign * y[rows]
            violation = max(violation, 1.0 - math.fsum((p[s] * g).tolist()))
        if best is None or violation < best[0]:
            best = (violation, sign, y)
    if best is None:
        return None
    _, sign, y = best
    table = {}
    for u, (p, s, rows) in zip(lp.paths, layout):
        g = 1.0 - sign * y[rows]
        top = float(g.max())
        h = np.zeros(V)
        h[s] = top - g
        table[u] = (h, max(top, 1.0 + math.fsum((p[s] * h[s]).tolist())))
    return DualHeights(table, V)
