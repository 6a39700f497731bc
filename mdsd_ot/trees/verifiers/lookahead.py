"""Lookahead verification of a drafted tree: soft one-step couplings (docs/math.md#lookahead-verification)."""

from __future__ import annotations

import numpy as np

from ..._validate import check_choice
from ...drafts import get_scheme, top_tokens
from ...verifiers.base import sample_index
from .base import TreeVerifier, _add, _check_rng

__all__ = ["LookaheadVerifier", "COUPLINGS", "ORDERS"]

#: ``LookaheadVerifier(coupling=...)``: ``"thin"`` (the node-wise optimal verifier's coupling, each
#: drafted token's pass thinned to the node's weight: one ``prepare`` per path, shared with node-wise
#: ``optimal``) or ``"scaled"`` (the optimal verifier prepared anew on the scaled target at every node).
COUPLINGS = ("thin", "scaled")

#: ``LookaheadVerifier(order=...)``: the order in which a node tries its children: ``"value"`` (the
#: order maximising an estimate of the children's value from their own laws;
#: docs/math.md#lookahead-verification), ``"draft"`` (draft order) or ``"quality"`` (ascending one-draft
#: acceptance ``sum min(p_c, q_c)`` of the child's own laws, leaves last; ties in draft order).
ORDERS = ("draft", "quality", "value")

#: the weights at which a child's one-step acceptance ``alpha_c(w)`` is tabulated for ``order="value"``
_GRID = np.concatenate([[0.0], np.geomspace(2.0**-30, 1.0, 61)])


class _Plan:
    """What a node entered with weight ``w`` does with its drafted children (one drafted tuple).

    ``weight[k]``: the weight child ``k`` is entered with; ``order``: the order of the tries;
    ``correction``: the probability that the node stops itself once every child failed; ``law``: the
    (unnormalised) law of the token it then adds, zero on the drafted tokens.
    """

    __slots__ = ("weight", "order", "correction", "law")

    def __init__(self, weight, order, correction, law):
        self.weight, self.order, self.correction, self.law = weight, order, correction, law


# -------------------------------------------------------------------------------------- lookahead
class LookaheadVerifier(TreeVerifier):
    """Soft one-step couplings, a lossless tree verifier that looks ahead
    (docs/math.md#lookahead-verification).

    Every node ``v`` is entered with a weight ``w`` in ``[0, 1]`` (the root with 1). It takes a valid
    one-step verifier of the *scaled* target ``p' = (w p_v, 1 - w)`` against ``q' = (q_v, 0)`` (one
    extra "stop" symbol that is never drafted), whose output law ``L(. | t)`` given the drafted children
    ``t`` gives child ``k`` the share ``l_k = L(x_k | t) / #{copies of x_k in t}``. The children are
    tried one at a time; child ``k`` is entered with weight

    .. math:: \\omega_k = \\frac{l_k}{1 - \\sum_{j \\text{ tried before } k} l_j}

    and runs the same procedure below it; the next child is tried only when the call did not stop in
    this child's subtree. When every child failed, ``v`` stops with probability
    ``c = L(rest | t) / (L(rest | t) + L(stop | t))`` and adds a token drawn from ``L(. | t)`` on the
    undrafted tokens (``rest``); otherwise control returns to its parent. A leaf entered with ``w``
    stops with probability ``w`` and adds a token drawn from its target law.

    ``coupling="thin"`` (default): ``L`` thins a kernel ``pi(y | t)`` with the pass masses ``rho`` of
    node-wise ``optimal``: a drafted ``y`` passes with ``pi(y | t) min(1, w p_v(y) / rho(y))`` and the
    failing mass is drawn from ``((w p_v - rho)_+, 1 - w)``. Every token then passes at least ``w rho``
    in the mean, which makes the mean over drafted trees never below node-wise ``optimal``'s; the
    one-step acceptance is ``alpha*(w)`` where ``rho`` is scale-free (greedy, hub, ``top_n``, one child;
    i.i.d. drafts up to the full-V construction's pooling). ``coupling="scaled"``: the one-step
    verifier ``one_step`` prepared on ``(p', q')`` at every node (no such guarantee).

    Lossless by a node lemma; block verification on chains, node-wise ``optimal`` on one level, optimal
    on ``top_n`` trees (docs/math.md#lookahead-verification). Cost with ``"thin"``: node-wise
    ``optimal``'s ``prepare`` at every internal node that is entered (cached per path, so shared with
    it), O(V) per node for the thinning and the order; one-child nodes need no ``prepare`` under any
    scheme. Full vocabulary where the optimal verifier has a construction for the scheme (:meth:`covers`),
    its LP elsewhere (``without_replacement``, ``conditional_poisson`` with two or more children).

    Parameters
    ----------
    coupling : {"thin", "scaled"}
        :data:`COUPLINGS`.
    order : {"value", "draft", "quality"}
        The order of the tries (:data:`ORDERS`; it may depend on the children's tokens and laws, never
        on their drafted subtrees): ``"value"`` maximises ``sum_k R_k J_k(omega_k)`` over the orders,
        ``J_c(omega) = omega + kappa_c alpha_c(omega)`` an estimate from the child's own laws.
    symmetric : bool
        Average the kernel over the orderings of the drafted tokens (i.i.d. and sequential drafts):
        the conditional expectation given the drafted multiset, same ``rho``.
    one_step : str
        The node-wise verifier of ``coupling="scaled"`` (default ``"optimal"``).

    Examples
    --------
    >>> import numpy as np
    >>> from mdsd_ot.trees import DraftTree
    >>> p, q = [1 / 3, 2 / 3], [2 / 3, 1 / 3]
    >>> t = DraftTree("1x2", "with_replacement", [-1, 0, 0], [-1, 0, 1], [q, q], [p, p, p])
    >>> round(LookaheadVerifier().expected_tokens(t), 6)  # block verification on chains
    1.5
    """

    name = "lookahead"
    paper = "soft one-step couplings (mdsd_ot; docs/math.md#lookahead-verification)"

    def __init__(
        self,
        coupling: str = "thin",
        order: str = "value",
        symmetric: bool = True,
        one_step: str = "optimal",
    ):
        from ...verifiers import get_verifier

        self.coupling = check_choice(coupling, "coupling", COUPLINGS)
        self.one_step = get_verifier(one_step).name
        if self.one_step != "optimal" and self.coupling != "scaled":
            raise ValueError(
                f"one_step={one_step!r} needs coupling='scaled' (the thinned coupling uses node-wise "
                f"'optimal', whose pass masses it knows)"
            )
        self.order = check_choice(order, "order", ORDERS)
        self.symmetric = bool(symmetric)

    def __repr__(self) -> str:
        return f"<TreeVerifier {self.name!r} (coupling={self.coupling!r}, order={self.order!r})>"

    def why_not(self, shape, scheme) -> str | None:
        from ..shape import parse_shape

        shape = parse_shape(shape)
        s = get_scheme(scheme)
        if self.one_step != "optimal":
            from ...verifiers import get_verifier

            if s.name not in get_verifier(self.one_step).schemes and any(b > 1 for b in shape.branching):
                return f"its one-step verifier {self.one_step!r} does not verify {s.name!r} drafts"
        if s.fixed_n is not None and any(b != s.fixed_n for b in shape.branching):
            return f"{s.name} drafts exactly {s.fixed_n} children per node, the shape {shape.label} does not"
        return None

    def covers(self, scheme, shape=None) -> bool:
        """True when every node's coupling runs at any vocabulary size (no LP) for trees of ``shape``
        (None: any shape) drafted by ``scheme``."""
        from ...verifiers import get_verifier
        from ..shape import parse_shape

        name = get_scheme(scheme).name
        one_step = get_verifier(self.one_step)
        covers = getattr(one_step, "covers", None)
        if covers is None or covers(name):
            return True
        return shape is not None and all(b == 1 for b in parse_shape(shape).branching)

    # -- the one-step coupling of a node -----------------------------------------------------------
    def _thin_pass(self, tree, v: int):
        """``rho``: the mean pass mass of each token under node-wise ``optimal`` at ``v`` (cached)."""
        cache, key = tree._cache_key("lookahead:rho", v)
        if key not in cache:
            cache[key] = _pass_mass(tree.prepared("optimal", v))
        return cache[key]

    def _scaled(self, tree, v: int, w: float):
        cache, key = tree._cache_key(("lookahead:scaled", self.one_step, w), v)
        if key not in cache:
            from ...verifiers import get_verifier

            p = np.append(w * tree.p[v], 1.0 - w)
            q = np.append(tree.q[v], 0.0)
            b = int(tree.children[v].size)
            one_step = get_verifier(self.one_step)
            cache[key] = one_step.prepare(p, q, b, sampling=tree.scheme.name, normalize=True)
        return cache[key]

    def _masses(self, tree, v: int, w: float):
        """``(drafted, rest, stop)``: ``L(y | t)`` for the distinct drafted tokens (aligned with
        ``np.unique(drafts)``), the law on the undrafted tokens (zero on the drafted ones), L(stop | t)."""
        drafts = tree.drafts(v)
        toks = np.unique(drafts)
        p = tree.p[v]
        if drafts.size == 1 and tree.scheme.name != "top_n":  # speculative sampling (block step)
            x = int(drafts[0])
            qx = float(tree.q[v][x])
            a = 1.0 if w * p[x] >= qx else w * float(p[x]) / qx
            res = np.maximum(w * p - tree.q[v], 0.0)
            res[x] = 0.0  # w p(x) > q(x) means a = 1: no residual is drawn then
            Z = float(res.sum()) + (1.0 - w)
            if not Z > 0.0 or a >= 1.0:
                return np.array([a]), np.zeros(p.size), (1.0 - a)
            return np.array([a]), (1.0 - a) * res / Z, (1.0 - a) * (1.0 - w) / Z
        if self.coupling == "scaled" and (w < 1.0 or self.one_step != "optimal"):
            law, _ = self._scaled(tree, v, w).output_law(drafts)
            rest = law[: p.size].copy()
            rest[toks] = 0.0
            return law[toks], rest, float(law[p.size])
        prepared = tree.prepared("optimal", v)
        if self.symmetric:
            L, undrafted = _orbit_kernel(prepared, tree.scheme.name, drafts, toks)
        else:
            L, undrafted = _drafted_kernel(prepared, drafts, toks)
        rho = self._thin_pass(tree, v)
        keep = np.ones(toks.size)
        low = w * p[toks] < rho[toks]
        keep[low] = w * p[toks][low] / rho[toks][low]
        passed = L * keep
        # the mass that fails: the undrafted part of the kernel plus what the thinning removed (direct sums)
        fail = undrafted + float((L * (1.0 - keep)).sum())
        res = np.maximum(w * p - rho, 0.0)
        Z = float(res.sum()) + (1.0 - w)
        if not (Z > 0.0 and fail > 0.0):
            return passed, np.zeros(p.size), 0.0
        drafted = passed + fail * res[toks] / Z
        rest = res * (fail / Z)
        rest[toks] = 0.0
        return drafted, rest, fail * (1.0 - w) / Z

    def _acceptance_table(self, tree, c: int) -> np.ndarray:
        """``alpha_c`` at the weights :data:`_GRID`: the thinned coupling's mean acceptance at node ``c``,
        ``sum_y min(w p_c(y), rho_c(y))`` (exact at the grid points; cached per path)."""
        cache, key = tree._cache_key("lookahead:alpha", c)
        if key not in cache:
            p = tree.p[c]
            rho = (
                self._thin_pass(tree, c)
                if tree.children[c].size > 1 or tree.scheme.name == "top_n"
                else (np.minimum(p, tree.q[c]))
            )
            from ..._kernels import small_or_jit
            from ..._kernels.verifiers import ratio_bin_sums

            # s = rho / p binned at _GRID (_GRID[b-1] < s <= _GRID[b]): sum p s and sum p per bin
            below_ps, below_p = small_or_jit(ratio_bin_sums, p.size)(p, rho, _GRID)
            # alpha(g_j) = sum_{s <= g_j} p s + g_j sum_{s > g_j} p
            cps = np.cumsum(below_ps)[: _GRID.size]
            cp = np.cumsum(below_p)[: _GRID.size]
            cache[key] = cps + _GRID * (float(p.sum()) - cp)
        return cache[key]

    def _value_proxy(self, tree, c: int):
        """A concave stand-in for the tokens a child entered with weight ``w`` passes in mean (its own
        pass included), from the child's own laws only: ``w`` for a leaf; ``w + alpha_c(w) k_c`` with
        ``k_c = sum_{i < r} alpha_c(1)^i`` for ``r`` levels below it."""
        if c >= tree.n_internal:
            return None
        table = self._acceptance_table(tree, c)
        r = tree.shape.depth - int(tree.depth[c])
        kappa = float(sum(table[-1] ** i for i in range(r)))
        return table * kappa

    def _order(self, tree, v: int, share=None) -> np.ndarray:
        kids = tree.children[v]
        if self.order == "draft" or kids.size == 1:
            return np.arange(kids.size)
        if self.order == "value":
            import itertools

            # a child with no share is never entered: no table (and no prepare) for it
            tables = [self._value_proxy(tree, int(c)) if share[k] > 0.0 else None for k, c in enumerate(kids)]
            best, best_order = -np.inf, None
            for perm in itertools.permutations(range(kids.size)):
                left, total = 1.0, 0.0
                for k in perm:
                    lk = float(share[k])
                    if tables[k] is not None and lk > 0.0 and left > 0.0:
                        om = min(1.0, lk / left)
                        total += left * float(np.interp(om, _GRID, tables[k]))
                    left -= lk
                if total > best + 1e-15:
                    best, best_order = total, perm
            return np.array(best_order)
        n_int = tree.n_internal
        keys = []
        for c in kids.tolist():
            if c >= n_int:
                keys.append(np.inf)
            else:
                keys.append(float(np.minimum(tree.p[c], tree.q[c]).sum()))
        return np.argsort(np.array(keys), kind="stable")

    def _plan(self, tree, v: int, w: float) -> _Plan:
        key = (
            "lookahead:plan",
            self.coupling,
            self.one_step,
            self.order,
            self.symmetric,
            v,
            w,
        )
        plan = tree._prepared.get(key)  # per tree (the plan depends on the drafted children)
        if plan is None:
            plan = tree._prepared[key] = self._new_plan(tree, v, w)
        return plan

    def _new_plan(self, tree, v: int, w: float) -> _Plan:
        drafts = tree.drafts(v)
        drafted, rest, stop = self._masses(tree, v, w)
        toks, inverse, counts = np.unique(drafts, return_inverse=True, return_counts=True)
        share = drafted[inverse] / counts[inverse]
        order = self._order(tree, v, share)
        rest_mass = float(rest.sum())
        # what is left before each try: the direct sum of everything not tried yet (no cancellation)
        left = rest_mass + stop + np.cumsum(share[order][::-1])[::-1]
        weight = np.zeros(drafts.size)
        on = left > 0.0
        weight[order[on]] = np.minimum(1.0, share[order][on] / left[on])
        if rest_mass + stop > 0.0:
            correction = rest_mass / (rest_mass + stop)
        else:  # every mass on the drafts: the correction is reached with probability 0
            correction = 1.0
        law = rest if rest_mass > 0.0 else tree.p[v]
        return _Plan(weight, order, correction, law)

    # -- exact value and law -----------------------------------------------------------------------
    def expected_tokens(self, tree) -> float:
        self.require(tree)
        depth, children, n_int = tree.depth, tree.children, tree.n_internal

        def rec(v, w):
            """``(sigma, M)``: the probability that the call stops in ``v``'s subtree, and the sum over
            those stops of their probability times the number of tokens emitted."""
            d = int(depth[v])
            if v >= n_int:
                return w, w * (d + 1)
            plan = self._plan(tree, v, w)
            reach, sigma, M = 1.0, 0.0, 0.0
            for k in plan.order:
                om = float(plan.weight[k])
                if om > 0.0:
                    s, m = rec(int(children[v][k]), om)
                    sigma += reach * s
                    M += reach * m
                    reach *= 1.0 - s
            stop = reach * (1.0 if v == 0 else plan.correction)
            return sigma + stop, M + stop * (d + 1)

        return float(rec(0, 1.0)[1])

    def outcome_law(self, tree) -> dict:
        self.require(tree)
        children, n_int = tree.children, tree.n_internal

        def rec(v, w):
            path = tree.path(v)
            if v >= n_int:
                p = tree.p[v]
                return {path + (int(y),): w * float(p[y]) for y in np.flatnonzero(p > 0)}, w
            plan = self._plan(tree, v, w)
            out: dict = {}
            reach, sigma = 1.0, 0.0
            for k in plan.order:
                om = float(plan.weight[k])
                if om > 0.0:
                    law, s = rec(int(children[v][k]), om)
                    _add(out, law, reach)
                    sigma += reach * s
                    reach *= 1.0 - s
            stop = reach * (1.0 if v == 0 else plan.correction)
            if stop > 0.0:
                law, total = plan.law, float(plan.law.sum())
                _add(out, {path + (int(y),): float(law[y]) / total for y in np.flatnonzero(law > 0)}, stop)
            return out, sigma + stop

        return rec(0, 1.0)[0]

    def verify(self, tree, rng) -> list:
        _check_rng(rng)
        self.require(tree)
        children, n_int = tree.children, tree.n_internal

        def rec(v, w):
            """The emitted tokens when the call stops in ``v``'s subtree, else None."""
            if v >= n_int:
                if rng.random() < w:
                    return list(tree.path(v)) + [sample_index(tree.p[v], rng.random())]
                return None
            plan = self._plan(tree, v, w)
            for k in plan.order:
                om = float(plan.weight[k])
                if om > 0.0:
                    got = rec(int(children[v][k]), om)
                    if got is not None:
                        return got
            if v == 0 or rng.random() < plan.correction:
                return list(tree.path(v)) + [sample_index(plan.law, rng.random())]
            return None

        return rec(0, 1.0)


def _drafted_kernel(prepared, drafts, toks):
    """``(L(toks | drafts), L(undrafted | drafts))`` of a prepared one-step verifier (the second a direct
    sum): O(n log V) for the full-V i.i.d. construction, one output law otherwise."""
    from ...verifiers.base import accept_ratio
    from ...verifiers.optimal import _PreparedChain

    if isinstance(prepared, _PreparedChain) and prepared.n > 1:
        x = np.asarray(drafts, dtype=np.int64)
        sel = prepared._selection(x)
        a = accept_ratio(prepared.p[x], prepared.r[x])
        L = np.zeros(toks.size)
        np.add.at(L, np.searchsorted(toks, x), sel * a)
        return L, float(np.dot(sel, 1.0 - a))
    law, _ = prepared.output_law(drafts)
    out = law.copy()
    out[toks] = 0.0
    return law[toks], float(out.sum())


def _orbit_kernel(prepared, scheme: str, drafts, toks):
    """:func:`_drafted_kernel` averaged over the distinct orderings of ``drafts`` with their probabilities
    under the scheme (i.i.d.: equal; sequential without replacement: the product of the conditional
    laws): the conditional expectation given the drafted multiset, which keeps every token's mean pass
    mass. Other schemes: the drafted tuple's own kernel."""
    import itertools

    if scheme not in ("with_replacement", "without_replacement") or len(drafts) < 2:
        return _drafted_kernel(prepared, drafts, toks)
    q = prepared.q
    L = np.zeros(toks.size)
    und = total = 0.0
    for perm in sorted(set(itertools.permutations(int(x) for x in drafts))):
        if scheme == "with_replacement":
            w = 1.0
        else:
            w, rest = 1.0, q.copy()
            for x in perm:  # each draw's law given the earlier ones: q over what is left (direct sums)
                w *= q[x] / float(rest.sum())
                rest[x] = 0.0
        kernel, u = _drafted_kernel(prepared, np.array(perm), toks)
        L += w * kernel
        und += w * u
        total += w
    return L / total, und / total


def _pass_mass(prepared) -> np.ndarray:
    """``rho(y) = sum_t Q(t) L(y | t) [y in t]``: the mean probability that a one-step verifier outputs
    ``y`` as a drafted token, from its prepared state (closed forms; the LP plan's sets at small V)."""
    from ...verifiers.greedy import _PreparedGreedy
    from ...verifiers.naive import _PreparedNaive
    from ...verifiers.optimal import _PreparedChain, _PreparedOptimal
    from ...verifiers.spechub import _PreparedHub

    p = prepared.p
    if isinstance(prepared, _PreparedChain):  # a rejection never lands on a draft: min(p, r)
        return np.minimum(p, prepared.r)
    if isinstance(prepared, (_PreparedGreedy, _PreparedHub)):  # fixed drafts: p; the drawn one: min(p, q')
        rho = np.minimum(p, prepared.qp)
        fixed = prepared.top if isinstance(prepared, _PreparedGreedy) else [prepared.a]
        rho[fixed] = p[fixed]
        return rho
    if isinstance(prepared, _PreparedNaive):  # top_n: the drafted set is fixed, each output is p
        rho = np.zeros(p.size)
        top = top_tokens(prepared.q, prepared.n)
        rho[top] = p[top]
        return rho
    if isinstance(prepared, _PreparedOptimal):
        rho = np.zeros(p.size)
        for i, s in enumerate(prepared.sets):
            s = list(s)
            rho[s] += prepared.set_mass[i] * (prepared.plan[i, s] + prepared.stay[i] * prepared.residual[s])
        return np.minimum(rho, p)
    raise TypeError(f"internal error: no pass masses for {type(prepared).__name__}; please report this")
