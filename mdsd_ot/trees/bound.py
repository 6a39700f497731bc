"""Certified upper bounds on the tree optimum from drafted trees: the dual of the causal LP
(docs/math.md#the-tree-dual).

The package reads optimum / bound / verifiers: :mod:`.optimum` solves the causal LP over every
drafted tree (small vocabularies only), this module evaluates its dual on the one tree a target call
drafted (any vocabulary), and :mod:`.verifiers` / :func:`expected_tokens` give what real verifiers
attain on that tree.

**The dual.** Choose, for every path ``u`` (a string of drafted tokens below the context), heights
``h_u(y) >= 0`` and a number ``K_u >= 1 + sum_y P(y | u) h_u(y)``; give every drafted tree the value

.. math:: R(\\text{leaf}) = K_{\\text{leaf}}, \\qquad
          R(u) = K_u + \\max\\bigl(0, \\max_{y:\\ uy \\in T,\\ P(y|u) > 0} R(uy) - h_u(y)\\bigr).

If the heights are a fixed function of the path (they may use the models' laws at any path, never
which tree was drawn), then ``E_T[R(root)]``, the **mean over the drafted trees** at this context, is
at least the expected tokens per call of every valid verifier, and the minimum over heights is the
optimum (:func:`~mdsd_ot.trees.tree_optimum`). A single tree's value is *not* a bound on anything:
what is certified is the mean (over the trees drafted at one context, and so, averaged over the calls
of a run, over the contexts the run reached).

**Rules** (choices of heights computable from the one drafted tree; ``RULES``):

* ``"subtree"`` (the default for random schemes): on the top-down one-step cuts, each child's height
  is its own exact ``K`` under the same rule; then ``R(root) = K_root + X`` where ``X`` needs those
  ``K`` only for drafted children outside their parent's cut (bounded pointwise), and ``K_root`` is
  estimated without bias from the drafted subtree (a recursive Horvitz-Thompson difference
  estimator).
* ``"split"``: the heights of ``"subtree"``, evaluated with less slack: a drafted child outside its
  parent's cut enters the maximum at ``min(cap, d)``, ``d`` its own local value, and the part of its
  ``K`` above ``d`` is added once per node outside the maximum, estimated from the drafted subtree
  (``max(0, Khat - d)``: convex, so its mean is above the exact term).
* ``"semi_local"``: the same cuts, heights from the drafted children's own laws (their local guess),
  undrafted children at a cap, the root's ``K`` by Horvitz-Thompson.
* ``"local"``: the same cuts, heights from each node's own laws; no estimate.
* ``"one_level"``: ``1 + D alpha*_root`` (deterministic: the tree's depth ``D`` times the root's
  optimal one-step acceptance).
* ``"top_n"``: ``1 + sum over non-root nodes of P(path)``, the exact optimum of a deterministic
  ``top_n`` tree (the membership verifier attains it). The default for ``top_n``.

:func:`upper_bound` also evaluates any given heights (:class:`DualHeights`), e.g. the optimal ones
:func:`~mdsd_ot.trees.tree_optimum` reads from its LP.

Not to be confused with :func:`~mdsd_ot.trees.node_bound` (``alpha*`` of one node, a one-step
quantity) and :func:`~mdsd_ot.trees.node_alpha_heuristic` (a recursion over those, neither a bound
nor an estimate).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from ..drafts import get_scheme

__all__ = [
    "RULES",
    "DualHeights",
    "upper_bound",
    "mean_upper_bound",
    "certified_rules",
    "default_rule",
]

#: The rules :func:`upper_bound` computes, tightest-first where they compete (docs/math.md#the-tree-dual).
RULES = ("subtree", "split", "semi_local", "local", "one_level", "top_n")

#: Slack allowed in ``K_u >= 1 + sum_y P(y | u) h_u(y)`` for given heights (relative to ``K_u``).
_FEASIBILITY_TOL = 1e-12


# ------------------------------------------------------------------------------------ the heights
@dataclass(frozen=True)
class DualHeights:
    """Heights ``h_u`` and numbers ``K_u`` of the tree dual, per path (docs/math.md#the-tree-dual).

    ``heights[path]`` is ``(h, K)``: ``h`` a float64 array of ``V`` non-negative entries (entries at
    tokens of target probability 0 are never used), ``K`` a float with
    ``K >= 1 + sum_y P(y | path) h(y)``. A path without an entry takes ``h = 0``, ``K = 1`` (always
    feasible). The heights must not depend on which tree was drafted; feasibility is checked against
    the target laws when they are evaluated (:func:`upper_bound`).

    Attributes
    ----------
    table : dict
        ``{path (tuple of int): (h ndarray (V,), K float)}``.
    vocab : int
    """

    table: dict = field(repr=False)
    vocab: int

    def __post_init__(self):
        if isinstance(self.vocab, bool) or not isinstance(self.vocab, (int, np.integer)) or self.vocab < 1:
            raise ValueError(f"vocab must be a positive int, got {self.vocab!r}")
        clean = {}
        for path, entry in self.table.items():
            try:
                key = tuple(int(t) for t in path)
                h, K = entry
            except (TypeError, ValueError):
                raise TypeError(
                    f"heights map a path (tuple of token ids) to (h, K); got {path!r}: {entry!r}"
                ) from None
            h = np.asarray(h, dtype=np.float64)
            K = float(K)
            if h.shape != (self.vocab,):
                raise ValueError(
                    f"heights at path {list(key)}: h must have shape ({self.vocab},), got {h.shape}"
                )
            if not (np.all(np.isfinite(h)) and math.isfinite(K)):
                raise ValueError(f"heights at path {list(key)} are not finite")
            if h.min(initial=0.0) < 0:
                raise ValueError(
                    f"heights at path {list(key)} must be >= 0 (a common shift of h_u changes nothing); "
                    f"min is {h.min():.3g}"
                )
            h.setflags(write=False)
            clean[key] = (h, K)
        object.__setattr__(self, "table", clean)

    def __getitem__(self, path) -> tuple:
        return self.table[tuple(path)]

    def get(self, path, default=None):
        return self.table.get(tuple(path), default)

    def __contains__(self, path) -> bool:
        return tuple(path) in self.table

    def __len__(self) -> int:
        return len(self.table)

    @property
    def paths(self) -> tuple:
        """The paths with an entry, sorted by length then tokens."""
        return tuple(sorted(self.table, key=lambda w: (len(w), w)))


# ---------------------------------------------------------------------------------- which rules
def certified_rules(scheme) -> list[str]:
    """The rules :func:`upper_bound` computes for trees of ``scheme``, tightest first where known.

    Every rule of :data:`RULES` but ``"top_n"`` is certified for every scheme; ``"top_n"`` (the exact
    optimum of a deterministic tree) only for ``top_n`` drafts.

    Parameters
    ----------
    scheme : str or DraftScheme

    Returns
    -------
    list of str

    >>> certified_rules("with_replacement"), certified_rules("top_n")[0]
    (['subtree', 'split', 'semi_local', 'local', 'one_level'], 'top_n')
    """
    name = get_scheme(scheme).name
    if name == "top_n":
        return ["top_n", "subtree", "split", "semi_local", "local", "one_level"]
    return ["subtree", "split", "semi_local", "local", "one_level"]


def default_rule(scheme) -> str:
    """The rule ``upper_bound(tree)`` uses for ``scheme``: ``"top_n"`` (exact) for ``top_n`` drafts,
    ``"subtree"`` otherwise.

    Parameters
    ----------
    scheme : str or DraftScheme

    Returns
    -------
    str
    """
    return certified_rules(scheme)[0]


def _check_rule(rule, scheme) -> str:
    if rule is None:
        return default_rule(scheme)
    if not isinstance(rule, str):
        raise TypeError(f"rule must be a string, one of {list(RULES)}, or None; got {type(rule).__name__}")
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}; choose one of {list(RULES)} (or None for the default)")
    name = get_scheme(scheme).name
    if rule not in certified_rules(name):
        raise ValueError(
            f"rule {rule!r} is not certified for {name!r} trees (it is the exact optimum of deterministic "
            f"top_n trees only); use one of {certified_rules(name)}"
        )
    return rule


# ------------------------------------------------------------------------------ the path view
class _PathView:
    """A drafted tree by paths: the distinct root-to-node paths, their children tokens (repeated
    drafts merged: what the dual sees), and the laws at each path.

    ``p(u)``, ``q(u)`` return the target / draft law after path ``u``; ``kids[u]`` the sorted distinct
    child tokens of ``u``; ``order`` the paths by length then tokens; ``copies[u]`` how many nodes
    of the drafted tree carry path ``u`` (None for a path-set class, which merges trees that differ
    in it)."""

    __slots__ = ("scheme", "branching", "depth", "kids", "order", "_p", "_q", "vocab", "copies")

    def __init__(self, scheme, branching, kids: dict, p, q, vocab: int, copies: dict | None = None):
        self.scheme = scheme
        self.branching = tuple(int(b) for b in branching)
        self.depth = len(self.branching)
        self.kids = kids
        self.order = sorted(kids, key=lambda w: (len(w), w))
        self._p, self._q = p, q
        self.vocab = vocab
        self.copies = copies  # path -> number of nodes drafted with it (None: unknown, a class)

    def p(self, u) -> np.ndarray:
        return self._p(u)

    def q(self, u) -> np.ndarray:
        return self._q(u)


def _view_of_tree(tree) -> _PathView:
    """The path view of a :class:`~mdsd_ot.trees.DraftTree` (``ValueError`` when two nodes of one path
    carry different laws)."""
    if tree.p is None:
        raise ValueError("the tree has no target laws yet: call set_target(p) first")
    N1 = tree.tokens.size
    path_of = [()] * N1
    node_of: dict = {(): 0}
    copies: dict = {(): 1}
    kids: dict = {(): set()}
    for v in range(1, N1):
        a = int(tree.parent[v])
        w = path_of[a] + (int(tree.tokens[v]),)
        path_of[v] = w
        kids[path_of[a]].add(w[-1])
        first = node_of.setdefault(w, v)
        copies[w] = copies.get(w, 0) + 1
        if first != v:  # a repeated draft: the same path twice must carry the same laws
            same = np.array_equal(tree.p[first], tree.p[v]) and (
                v >= tree.n_internal or np.array_equal(tree.q[first], tree.q[v])
            )
            if not same:
                raise ValueError(
                    f"nodes {first} and {v} share the path {list(w)} but carry different laws; a tree's "
                    f"laws must be functions of the path"
                )
        else:
            kids[w] = set()
    kids = {w: tuple(sorted(k)) for w, k in kids.items()}
    P, Q = tree.p, tree.q
    for w, ks in kids.items():
        if ks and not np.all(Q[node_of[w]][list(ks)] > 0):
            y = next(y for y in ks if not Q[node_of[w]][y] > 0)
            raise ValueError(
                f"token {y} drafted after path {list(w)} has draft probability 0: this tree cannot come "
                f"from the {tree.scheme.name!r} scheme"
            )
    return _PathView(
        tree.scheme,
        tree.shape.branching,
        kids,
        lambda u: P[node_of[u]],
        lambda u: Q[node_of[u]],
        tree.vocab,
        copies,
    )


def _view_of_class(e, paths) -> _PathView:
    """The path view of one path-set class of a :class:`TreeEnumeration`."""
    kids: dict = {w: [] for w in paths}
    for w in paths:
        if w:
            kids[w[:-1]].append(w[-1])
    kids = {w: tuple(sorted(k)) for w, k in kids.items()}
    return _PathView(e.scheme, e.shape.branching, kids, e.p, e.q, e.vocab)


# ------------------------------------------------------------------------- per-path quantities
#: Margin below the quadrature value of a sequential (n >= 3) inclusion probability: the accuracy the
#: library's ``W_n`` evaluation is tested to (docs/math.md#independent-check).
_SEQUENTIAL_MARGIN = 1e-12


def _inclusion(scheme, q: np.ndarray, n: int, tokens) -> tuple[np.ndarray, np.ndarray]:
    """``(lo, hi)``: bounds on ``iota(y) = P(y among the children | the node)`` for each of ``tokens``,
    equal where the scheme has a closed form, with ``n`` draws of the scheme (for i.i.d. drafts ``n``
    may be the total over several independent tuples: a path drafted ``m`` times draws ``m`` tuples).

    i.i.d. drafts (and the schemes whose single child is one draw from ``q``): ``1 - (1 - q(y))^n``
    exactly, from ``log1p(-q)`` (from the directly summed complement where ``q(y) >= 1/2``).
    Sequential drafts without replacement with ``n >= 3``: ``1 - W_n(every token but y) -+ 1e-12``
    (``W_n`` enumerated at small V, by the exponential-clock evaluation at large V), the lower end
    never below the i.i.d. value, itself a lower bound there (each draw picks ``y`` with probability
    ``q(y) / (1 - q(drawn)) >= q(y)``). Other schemes: :meth:`DraftScheme.inclusion_probabilities`."""
    tokens = np.asarray(tokens, dtype=np.int64)
    name = scheme.name
    one_draw = scheme.one_draw(n)  # y ~ q
    if name == "with_replacement" or one_draw or (name == "without_replacement" and n >= 3):
        qt = q[tokens]
        lo = np.empty(tokens.size)
        hi = np.empty(tokens.size)
        for i, (t, x) in enumerate(zip(tokens.tolist(), qt.tolist())):
            if x < 0.5:
                lo[i] = -math.expm1(n * math.log1p(-x))
            else:
                miss = float(np.sum(q[:t]) + np.sum(q[t + 1 :]))  # 1 - q(y), summed directly
                lo[i] = -math.expm1(n * math.log(miss)) if miss > 0 else 1.0
            hi[i] = lo[i]
            if name == "without_replacement" and n >= 3 and x > 0:
                from ..drafts.without_replacement import sequential_mass_inside

                avoid = sequential_mass_inside(np.delete(q, t), x, n)  # all n draws avoid y
                hi[i] = min(1.0, 1.0 - avoid + _SEQUENTIAL_MARGIN)
                lo[i] = min(hi[i], max(lo[i], 1.0 - avoid - _SEQUENTIAL_MARGIN))
        return lo, hi
    pi = np.asarray(scheme.inclusion_probabilities(q, n), dtype=np.float64)[tokens]
    return pi, pi


class _Cuts:
    """The top-down weights ``beta_u``, one-step cuts ``H_u`` and local values of a path view, cached
    by path (every quantity is a fixed function of the path: the laws at the path and its ancestors,
    the shape and the scheme). Shared by the classes of an enumeration."""

    def __init__(self, scheme, branching):
        self.scheme = scheme
        self.branching = tuple(branching)
        self.depth = len(self.branching)
        self.beta = {(): 1.0}
        self.cut = {}  # path -> (mask, p(H) clamped to [0, 1])
        self.lam = {}  # path -> lam_r (r = D - |u|)
        self.iota = {}  # (path, token) -> inclusion (lower bound)

    def inclusion(self, view, u, tokens, *, copies: int = 1):
        """``(lo, hi)`` lists of the inclusion probabilities of ``tokens`` among ``u``'s children
        (``copies``: the number of tuples ``u`` drew, i.i.d. drafts of a repeated path)."""
        n = self.branching[len(u)] * copies
        need = [y for y in tokens if (u, y, n) not in self.iota]
        if need:
            lo, hi = _inclusion(self.scheme, view.q(u), n, need)
            for y, a, b in zip(need, lo.tolist(), hi.tolist()):
                if not a > 0:
                    raise ValueError(
                        f"token {y} drafted after path {list(u)} has draft probability 0 under "
                        f"{self.scheme.name!r}: this tree cannot come from that scheme"
                    )
                self.iota[(u, y, n)] = (a, b)
        pairs = [self.iota[(u, y, n)] for y in tokens]
        return [a for a, _ in pairs], [b for _, b in pairs]

    def weight(self, view, u) -> float:
        """``beta_root = 1``, ``beta_{uy} = min(1, beta_u P(y | u) / iota_u(y))``."""
        if u not in self.beta:
            par, y = u[:-1], u[-1]
            b = self.weight(view, par)
            (io,), _ = self.inclusion(view, par, [y])
            self.beta[u] = min(1.0, b * float(view.p(par)[y]) / io)
        return self.beta[u]

    def cut_of(self, view, u):
        """``(mask of H_u, p_u(H_u) clamped to [0, 1], p_u(H_u))``: ``H_u`` minimises
        ``beta_u p_u(H) + 1 - Q_u(H)`` (the scheme's one-step dual with the target scaled by
        ``beta_u``), restricted to tokens with ``q > 0``."""
        if u not in self.cut:
            from ..dual import solve_dual

            p, q = view.p(u), view.q(u)
            b = self.weight(view, u)
            n = self.branching[len(u)]
            _, subset = solve_dual(p * b if b != 1.0 else p, q, n, self.scheme)
            mask = np.zeros(p.size, dtype=bool)
            mask[subset] = True
            mask &= q > 0
            mass = float(np.sum(p, where=mask))
            self.cut[u] = (mask, min(1.0, mass), mass)
        return self.cut[u]

    def local(self, view, u) -> float:
        """``lam_r(u)``: ``lam_1 = 1``, ``lam_k = 1 + p_u(H_u) lam_{k-1}``, ``r = D - |u|`` (at most
        ``r``)."""
        if u not in self.lam:
            ph = self.cut_of(view, u)[1]
            lam = 1.0
            for _ in range(self.depth - len(u) - 1):
                lam = 1.0 + ph * lam
            self.lam[u] = lam
        return self.lam[u]

    def local_K(self, view, u) -> float:
        """``k_u = 1 + p_u(H_u) lam_r(u)`` (1 at a leaf): ``u``'s own guess of its ``K``, at most
        ``D - |u| + 1``."""
        if len(u) == self.depth:
            return 1.0
        return 1.0 + self.cut_of(view, u)[1] * self.local(view, u)

    def guess(self, view, u) -> float:
        """``u``'s own guess of a child's ``K``: ``1 + p_u(H_u) lam_{r-1}(u)`` (``lam_0 = 0``: 1 when the
        children are leaves, whose ``K`` is exactly 1)."""
        r = self.depth - len(u)
        if r == 1:
            return 1.0
        ph = self.cut_of(view, u)[1]
        lam = 1.0
        for _ in range(r - 2):
            lam = 1.0 + ph * lam
        return 1.0 + ph * lam


# --------------------------------------------------------------------------------- evaluation
def _live_kids(view, u):
    """The children tokens of ``u`` of positive target probability (no valid verifier emits through
    the others)."""
    p = view.p(u)
    return [y for y in view.kids[u] if p[y] > 0]


def _value_semi_local(view, cuts: _Cuts) -> float:
    D = view.depth
    R: dict = {}
    for u in reversed(view.order):
        if len(u) == D:
            R[u] = 1.0
            continue
        p = view.p(u)
        mask = cuts.cut_of(view, u)[0]
        kids = _live_kids(view, u)
        inside = [y for y in kids if mask[y]]
        heights = {y: cuts.local_K(view, u + (y,)) for y in inside}
        if not u:  # Horvitz-Thompson estimate of K_root (unbiased; R(root) = K_root + terms without it)
            iota, _ = cuts.inclusion(view, u, inside)  # a lower bound keeps the estimate's mean above K
            K = 1.0 + math.fsum(float(p[y]) * heights[y] / io for y, io in zip(inside, iota))
        else:  # drafted children exact, undrafted ones at their cap r = D - |u|
            rest = mask.copy()
            rest[list(view.kids[u])] = False
            K = (
                1.0
                + math.fsum(float(p[y]) * heights[y] for y in inside)
                + (D - len(u)) * float(np.sum(p, where=rest))
            )
        R[u] = K + max([0.0] + [R[u + (y,)] - heights.get(y, 0.0) for y in kids])
    return R[()]


def _value_local(view, cuts: _Cuts) -> float:
    D = view.depth
    R: dict = {}
    for u in reversed(view.order):
        if len(u) == D:
            R[u] = 1.0
            continue
        mask = cuts.cut_of(view, u)[0]
        lam = cuts.local(view, u)
        K = cuts.local_K(view, u)
        R[u] = K + max([0.0] + [R[u + (y,)] - (lam if mask[y] else 0.0) for y in _live_kids(view, u)])
    return R[()]


def _value_subtree(view, cuts: _Cuts, *, split: bool = False) -> float:
    """The subtree rule: heights ``h_u(y) = K*_{uy}`` on the cut (each child's exact ``K`` under the
    same rule, a fixed function of the path), so that ``R(root) = K*_root + X`` with ``X`` free of
    every ``K*`` in a cut; ``K*_root`` by the recursive difference estimator, the ``K*`` of drafted
    children outside their parent's cut by their pointwise upper bound ``Kbar`` (caps).

    ``split=True`` (the split rule): such a child ``w`` enters ``X`` at ``min(Kbar_w, d_w)`` with
    ``d_w = k_w`` its local value, and ``max over those w of max(0, Khat_w - d_w)`` (the ones with
    ``d_w < Kbar_w``) is added per node outside the maximum (docs/math.md#the-tree-dual)."""
    D = view.depth
    iid = view.scheme.name == "with_replacement"
    if iid and view.copies is None:
        raise ValueError("internal: the subtree rule needs the drafted tree's repeated paths (i.i.d. drafts)")
    est, cap, X = {}, {}, {}
    extra = []  # split: the parts of K* above d pulled out of the maxima, one per node
    for u in reversed(view.order):
        if len(u) == D:
            est[u] = cap[u] = 1.0
            X[u] = 0.0
            continue
        p = view.p(u)
        mask, _, mass = cuts.cut_of(view, u)
        kids = _live_kids(view, u)
        inside = [y for y in kids if mask[y]]
        outside = [y for y in kids if not mask[y]]
        rest = mask.copy()
        rest[list(view.kids[u])] = False
        cap[u] = (
            1.0
            + math.fsum(float(p[y]) * cap[u + (y,)] for y in inside)
            + (D - len(u)) * float(np.sum(p, where=rest))
        )
        if len(u) + 1 == D:  # leaf children: K* = 1 exactly, nothing to estimate
            est[u] = 1.0 + mass
            X[u] = max([0.0] + [cap[u + (y,)] for y in outside])
            continue
        out_value = {y: cap[u + (y,)] for y in outside}  # K* of a drafted child outside the cut: its cap
        if split and outside:
            above = []
            for y in outside:
                d = cuts.local_K(view, u + (y,))
                if d < out_value[y]:  # else K* <= cap <= d: nothing above d
                    out_value[y] = d
                    above.append(max(0.0, est[u + (y,)] - d))
            if above:
                extra.append(max(above))
        g = cuts.guess(view, u)
        lo, hi = cuts.inclusion(view, u, inside, copies=view.copies[u] if iid else 1)
        terms = []
        for y, a, b in zip(inside, lo, hi):
            res = est[u + (y,)] - g  # divided by the bound on iota that keeps the mean above K*
            terms.append(float(p[y]) * res / (a if res >= 0 else b))
        est[u] = 1.0 + mass * g + math.fsum(terms)
        X[u] = max([0.0] + [X[u + (y,)] for y in inside] + [out_value[y] + X[u + (y,)] for y in outside])
    return est[()] + X[()] + math.fsum(extra)


def _value_heights(view, heights: DualHeights) -> float:
    if heights.vocab != view.vocab:
        raise ValueError(f"the heights are for V = {heights.vocab} tokens, the tree has V = {view.vocab}")
    R: dict = {}
    for u in reversed(view.order):
        entry = heights.get(u)
        if entry is None:
            h, K = None, 1.0
        else:
            h, K = entry
            p = view.p(u)
            need = 1.0 + math.fsum((p * h).tolist())
            if K < need - _FEASIBILITY_TOL * max(1.0, abs(K)):
                raise ValueError(
                    f"the heights at path {list(u)} are not dual feasible: K = {K!r} < 1 + sum_y P(y|u) h(y) "
                    f"= {need!r}; raise K"
                )
        kids = _live_kids(view, u) if len(u) < view.depth else []
        R[u] = K + max([0.0] + [R[u + (y,)] - (0.0 if h is None else float(h[y])) for y in kids])
    return R[()]


def _value_top_n(view) -> float:
    """``1 + sum over non-root paths of P(path)`` (docs/math.md#top-n-trees)."""
    P = {(): 1.0}
    for u in view.order:
        if u:
            P[u] = P[u[:-1]] * float(view.p(u[:-1])[u[-1]])
    return 1.0 + math.fsum(P[u] for u in view.order if u)


def _root_alpha(view) -> float:
    from ..api import optimal_acceptance

    r = optimal_acceptance(view.p(()), view.q(()), view.branching[0], sampling=view.scheme.name)
    if not r.success:
        raise RuntimeError(f"alpha* at the root failed its re-check: {r.message}")
    return float(r.value)


def _evaluate(view, rule, heights, cuts, alpha=None) -> float:
    if heights is not None:
        return _value_heights(view, heights)
    if rule == "one_level":
        a = _root_alpha(view) if alpha is None else alpha
        return 1.0 + view.depth * a
    if rule == "top_n":
        return _value_top_n(view)
    if rule == "local":
        return _value_local(view, cuts)
    if rule in ("subtree", "split"):
        return _value_subtree(view, cuts, split=rule == "split")
    return _value_semi_local(view, cuts)


def _check_heights(rule, heights):
    if heights is None:
        return None
    if rule is not None:
        raise ValueError("pass either rule= or heights=, not both")
    if not isinstance(heights, DualHeights):
        if isinstance(heights, Mapping):
            raise TypeError(
                "heights must be a DualHeights (e.g. tree_optimum(...).heights); wrap a dict in DualHeights"
            )
        raise TypeError(f"heights must be a DualHeights, got {type(heights).__name__}")
    return heights


def upper_bound(tree, rule: str | None = None, *, heights: DualHeights | None = None) -> float:
    """The tree-dual value of one drafted tree; its **mean over drafted trees** is a certified upper
    bound on the expected tokens per call of every valid verifier (docs/math.md#the-tree-dual).

    .. math:: R(\\text{leaf}) = K, \\qquad R(u) = K_u + \\max\\bigl(0, \\max_{\\text{children } uy}
              R(uy) - h_u(y)\\bigr), \\qquad \\mathbb{E}_T[R(\\text{root})] \\ge \\text{OPT}

    What is certified: for trees drafted at one context, ``E_T[upper_bound(T)] >= OPT``, the tokens
    per call of the best valid verifier (:func:`~mdsd_ot.trees.tree_optimum`). One tree's value may
    lie below what a verifier attains on that tree; averaged over the calls of a run it bounds the
    mean optimum over the contexts reached. ``"one_level"`` and ``"top_n"`` are deterministic (each
    value is already the mean).

    Parameters
    ----------
    tree : DraftTree
        With its target laws set. Repeated drafts (i.i.d. schemes) are merged by path.
    rule : str or None
        ``"subtree"``, ``"split"``, ``"semi_local"``, ``"local"``, ``"one_level"`` or ``"top_n"``
        (:data:`RULES`);
        None: the scheme's default (:func:`default_rule`). ``ValueError`` for a rule not certified for the
        tree's scheme (:func:`certified_rules`).
    heights : DualHeights or None
        Evaluate these heights instead of a rule (e.g. ``tree_optimum(...).heights``, with which the
        mean over drafted trees is the optimum). They must be a fixed function of the path (not chosen
        after seeing the tree); ``ValueError`` where one is infeasible.

    Returns
    -------
    float

    Examples
    --------
    A one-level tree: ``"one_level"`` is ``1 + alpha*`` exactly (one draft, ``alpha* = 1 - TV``):

    >>> import numpy as np
    >>> from mdsd_ot.trees import DraftTree
    >>> t = DraftTree("1", "with_replacement", [-1, 0], [-1, 0], [[0.5, 0.5]], [[0.75, 0.25], [0.5, 0.5]])
    >>> upper_bound(t, "one_level")
    1.75
    """
    heights = _check_heights(rule, heights)
    scheme = tree.scheme
    rule = None if heights is not None else _check_rule(rule, scheme)
    view = _view_of_tree(tree)
    cuts = _Cuts(scheme, view.branching) if rule in ("semi_local", "local", "subtree", "split") else None
    return float(_evaluate(view, rule, heights, cuts))


def mean_upper_bound(enumeration, rule: str | None = None, *, heights: DualHeights | None = None) -> float:
    """The exact mean of :func:`upper_bound` over every drafted tree of an enumeration (small V):
    ``sum over path-set classes C of P(C) upper_bound(C)``, a certified upper bound on
    :func:`~mdsd_ot.trees.tree_optimum` of the same enumeration. The ``"subtree"`` and ``"split"`` rules
    under i.i.d. drafts read how often a path was drafted, which a class does not record: they are
    averaged over the ordered trees (:meth:`TreeEnumeration.trees`, at most ``TREE_COMPARE_MAX_TREES``).

    Parameters
    ----------
    enumeration : TreeEnumeration
        From :func:`~mdsd_ot.trees.enumerate_trees`.
    rule, heights
        As in :func:`upper_bound`.

    Returns
    -------
    float

    Examples
    --------
    Sun et al.'s chain (optimum 20/9; docs/math.md#the-exact-tree-optimum): the default rule is exact
    on it, the one-level rule is ``1 + 2 alpha* = 7/3``:

    >>> from mdsd_ot.trees import enumerate_trees
    >>> e = enumerate_trees(lambda c: [1/3, 2/3], lambda c: [2/3, 1/3], "1x2", "with_replacement")
    >>> round(9 * mean_upper_bound(e), 9), round(9 * mean_upper_bound(e, "one_level"), 9)
    (20.0, 21.0)
    """
    heights = _check_heights(rule, heights)
    rule = None if heights is not None else _check_rule(rule, enumeration.scheme)
    if rule == "one_level":
        return float(_evaluate(_view_of_class(enumeration, enumeration.classes[0].paths), rule, None, None))
    cuts = _Cuts(enumeration.scheme, enumeration.shape.branching)
    terms = []
    if rule in ("subtree", "split") and enumeration.scheme.name == "with_replacement":
        # the estimator reads how often a path was drafted, which a path-set class merges: every
        # ordered tree (TreeEnumeration.trees refuses more than TREE_COMPARE_MAX_TREES)
        for tree, prob in enumeration.trees():
            terms.append(prob * _evaluate(_view_of_tree(tree), rule, None, cuts))
        return math.fsum(terms)
    for c in enumeration.classes:
        view = _view_of_class(enumeration, c.paths)
        terms.append(c.probability * _evaluate(view, rule, heights, cuts))
    return math.fsum(terms)
