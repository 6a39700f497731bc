"""The tree dual (mdsd_ot.trees.bound): certified upper bounds on the tree optimum from drafted trees.

Oracles: the causal LP (``solve_tree_lp``: its optimum, never this module's code) over every drafted
tree of an enumeration; hand-computed one-step values (the sorting theorem by hand on three tokens);
the test's own enumeration of ordered trees (tests/test_trees.py) for the per-tree API; a numpy
sorted-prefix scan for the binned cut at large V.
"""

import functools
import math

import numpy as np
import pytest
from test_trees import enumerate_trees as ordered_tree_draws

from mdsd_ot.trees import (
    DraftTree,
    DualHeights,
    certified_rules,
    draft_tree,
    enumerate_trees,
    mean_upper_bound,
    toy_models,
    tree_optimum,
    upper_bound,
)
from mdsd_ot.trees.optimum import solve_tree_lp

SCHEMES = ["with_replacement", "without_replacement", "greedy", "conditional_poisson", "top_n"]

#: (V, shape, schemes, seed, draft temperature, noise): the exhaustive sweep (every LP under ~0.8 s).
SWEEP = [
    (3, "2,1", SCHEMES, 0, 0.7, 0.5),
    (3, "2,2", SCHEMES, 1, 1.0, 1.0),
    (3, "3,1", SCHEMES, 2, 1.4, 2.0),
    (3, "1,1,1", SCHEMES, 3, 0.7, 1.5),
    (3, "2,1,1", SCHEMES, 4, 1.0, 2.5),
    (3, "2", ["hub"], 5, 0.7, 1.0),
    (3, "2,2", ["hub"], 6, 1.4, 1.0),
    (4, "2,1", SCHEMES, 7, 1.0, 1.5),
    (4, "2,2", SCHEMES, 8, 1.0, 1.0),
    (4, "3,1", SCHEMES, 9, 1.0, 1.0),
    (4, "1,1", SCHEMES, 10, 1.4, 0.5),
    (4, "1,1,1", SCHEMES, 11, 1.0, 2.0),
]
SLOW_SWEEP = [
    (3, "2,2,1", ["greedy", "top_n"], 12, 1.0, 1.5),
    (4, "2,1,1", ["greedy", "without_replacement"], 13, 0.7, 1.0),
]


def _cases(sweep):
    return [(V, shape, s, seed, T, noise) for V, shape, schemes, seed, T, noise in sweep for s in schemes]


@functools.cache
def solved(V, shape, scheme, seed, T, noise):
    """``(enumeration, LP result)`` of one case (cached: every test below reads the same solves)."""
    target, draft = toy_models(V, seed, T, noise)
    e = enumerate_trees(target, draft, shape, scheme)
    r = solve_tree_lp(e)
    assert r.success, r.message
    return e, r


def _check_case(case):
    e, r = solved(*case)
    for rule in certified_rules(e.scheme):
        value = mean_upper_bound(e, rule)
        assert value >= r.value - 1e-12 * r.value, (case, rule, value, r.value)
    # the optimal dual read from the LP gives the optimum back exactly
    assert r.heights is not None
    assert abs(mean_upper_bound(e, heights=r.heights) - r.value) <= 1e-9, case


@pytest.mark.parametrize("case", _cases(SWEEP), ids=lambda c: f"V{c[0]}-{c[1]}-{c[2]}")
def test_every_rule_bounds_the_optimum_and_lp_heights_are_exact(case):
    _check_case(case)


@pytest.mark.slow
@pytest.mark.parametrize("case", _cases(SLOW_SWEEP), ids=lambda c: f"V{c[0]}-{c[1]}-{c[2]}")
def test_every_rule_bounds_the_optimum_deeper_trees(case):
    _check_case(case)


def test_chain_and_top_n_rules_are_exact():
    """Block verification's chain (Sun et al.: optimum 20/9) is certified exactly by the semi-local
    rule; the top_n rule is the optimum of every top_n tree (the LP says so)."""
    e = enumerate_trees(lambda c: [1 / 3, 2 / 3], lambda c: [2 / 3, 1 / 3], "1x2", "with_replacement")
    assert abs(mean_upper_bound(e) - 20 / 9) < 1e-12
    assert abs(mean_upper_bound(e, "one_level") - 21 / 9) < 1e-12  # 1 + 2 alpha*, alpha* = 2/3
    for case in _cases(SWEEP):
        if case[2] == "top_n":
            e, r = solved(*case)
            assert abs(mean_upper_bound(e) - r.value) < 1e-12


def test_split_rule_on_chains_and_depth_two():
    """The split rule keeps subtree's heights and replaces the cap of a drafted child outside its
    parent's cut by the child's local value plus a convex estimate of the excess. On depth-2 trees the
    children outside a cut are leaf parents, whose local value is their exact K (1 + p(H)), equal to
    their cap: the rule is subtree exactly (checked at V = 3). On depth-3 chains (V = 3-4, both
    schemes) the caps bind and the split mean is lower, yet never below the LP optimum."""
    for case in _cases(SWEEP):
        V, shape, scheme = case[:3]
        if V == 3 and len(shape.split(",")) == 2 and scheme != "top_n":
            e, r = solved(*case)
            assert abs(mean_upper_bound(e, "split") - mean_upper_bound(e, "subtree")) < 1e-12, case
    for V, seed, T, noise, scheme in [
        (3, 103922439, 1.0, 0.5, "with_replacement"),
        (4, 31000564, 1.4, 1.5, "without_replacement"),
    ]:
        target, draft = toy_models(V, seed, T, noise)
        e = enumerate_trees(target, draft, "1,1,1", scheme)
        opt = solve_tree_lp(e).value
        split, sub = mean_upper_bound(e, "split"), mean_upper_bound(e, "subtree")
        assert opt - 1e-12 <= split < sub - 1e-3 * opt, (scheme, opt, split, sub)


# ------------------------------------------------------------------------------ one level by hand
P3, Q3 = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
#: alpha* of (P3, Q3, n = 2, i.i.d.) by hand: prefixes by q/p are {}, {2}, {2, 1}, all, with
#: p(H) + 1 - q(H)^2 = 1, 0.95, 0.86, 1.
ALPHA3 = 0.86


def one_level_tree(drafts):
    return DraftTree("2", "with_replacement", [-1, *drafts], [-1, 0, 0], [Q3], [P3, P3, P3])


def test_one_level_by_hand():
    """A one-level tree: every rule's mean over the drafts is 1 + alpha*, the optimum (the optimal
    verifier attains it). One tree by hand, the cut being H = {1, 2}: the semi-local rule estimates
    K = 1 + p(H) by Horvitz-Thompson, drafts (2, 2) giving 1 + p(2) / (1 - (1 - q(2))^2) = 1 + 0.2 / 0.75;
    the subtree rule knows K = 1 + p(H) = 1.5 exactly (the children are leaves); a drafted token
    outside H (token 0) adds 1 to both."""
    t = one_level_tree([2, 2])
    assert abs(upper_bound(t, "one_level") - (1 + ALPHA3)) < 1e-12
    assert abs(upper_bound(t, "semi_local") - (1 + 0.2 / 0.75)) < 1e-12
    assert abs(upper_bound(t) - 1.5) < 1e-12
    assert abs(upper_bound(one_level_tree([0, 2]), "semi_local") - (2 + 0.2 / 0.75)) < 1e-12
    assert abs(upper_bound(one_level_tree([0, 2])) - 2.5) < 1e-12
    e = enumerate_trees(lambda c: P3, lambda c: Q3, "2", "with_replacement")
    for rule in ("subtree", "semi_local", "local", "one_level"):
        assert abs(mean_upper_bound(e, rule) - (1 + ALPHA3)) < 1e-12, rule
    assert abs(tree_optimum(lambda c: P3, lambda c: Q3, "2", "with_replacement").value - (1 + ALPHA3)) < 1e-12


def test_per_tree_values_average_to_the_class_mean():
    """``upper_bound`` on every ordered tree of the test's own enumeration, averaged with the trees'
    probabilities, equals ``mean_upper_bound`` (path-set classes) and stays above the LP optimum."""
    for V, shape, scheme, seed in [
        (3, "2,1", "with_replacement", 1),
        (3, "2,1", "without_replacement", 2),
        (3, "2,2", "greedy", 3),
        (3, "1,1", "conditional_poisson", 4),
    ]:
        target, draft = toy_models(V, seed)
        e = enumerate_trees(target, draft, shape, scheme)
        opt = solve_tree_lp(e)
        for rule in ("subtree", "split", "semi_local", "local", "one_level"):
            terms = []
            for tokens, parent, paths, qs, prob in ordered_tree_draws(shape, scheme, draft, ()):
                p = np.array([target(w) for w in paths])
                terms.append(prob * upper_bound(DraftTree(shape, scheme, tokens, parent, qs, p), rule))
            mean = math.fsum(terms)
            assert abs(mean - mean_upper_bound(e, rule)) < 1e-12, (shape, scheme, rule)
            assert mean >= opt.value - 1e-12
        terms = []
        for tokens, parent, paths, qs, prob in ordered_tree_draws(shape, scheme, draft, ()):
            p = np.array([target(w) for w in paths])
            tree = DraftTree(shape, scheme, tokens, parent, qs, p)
            terms.append(prob * upper_bound(tree, heights=opt.heights))
        assert abs(math.fsum(terms) - opt.value) < 1e-9


# --------------------------------------------------------------------------------- full vocabulary
def _sorted_objective(p, q, n, b, scheme):
    """``Q(H_k) - b p(H_k)`` along the prefixes of a numpy sort by q/p (the reference of the cut):
    ``q(H)^n`` (i.i.d.), ``W_2(H) = q(H) - R sum_H q_i / (1 - q_i)`` (sequential, n = 2), ``q(H)``."""
    key = np.where(p > 0, q / np.where(p > 0, p, 1.0), np.inf)
    order = np.argsort(-key, kind="stable")
    qs, ps = q[order], p[order]
    cq, cp = np.concatenate([[0.0], np.cumsum(qs)]), np.concatenate([[0.0], np.cumsum(ps)])
    if scheme == "with_replacement" or n == 1:
        Q = cq**n
    else:
        R = np.concatenate([np.cumsum(qs[::-1])[::-1], [0.0]])  # mass outside each prefix, summed directly
        Q = cq - R * np.concatenate([[0.0], np.cumsum(qs / (1.0 - qs))])
    return order, Q - b * cp


@pytest.mark.parametrize("scheme,shape", [("with_replacement", "3,2,1"), ("without_replacement", "2,2,1")])
def test_binned_cut_at_large_vocabulary(scheme, shape):
    """Above BINNED_MIN_V the cuts come from the binned scan fed the scaled target beta p: each cut's
    objective equals the best prefix of a plain numpy sort, and the subtree and semi-local values equal
    those recomputed with the numpy cuts."""
    from mdsd_ot.trees import bound as B

    V = 20_000

    def laws(paths, salt=9):
        out = []
        for w in paths:
            z = 3.0 * np.random.default_rng([salt, len(w), *w]).standard_normal(V)
            out.append(np.exp(z - z.max()))
        return np.array([x / x.sum() for x in out])

    def draft(paths):
        x = np.log(laws(paths)) + np.array(
            [np.random.default_rng([10, len(w), *w]).standard_normal(V) for w in paths]
        )
        x = np.exp(x - x.max(axis=1, keepdims=True))
        return x / x.sum(axis=1, keepdims=True)

    tree = draft_tree(shape, scheme, draft, np.random.default_rng(5), target=laws)
    view = B._view_of_tree(tree)
    cuts, ref = B._Cuts(tree.scheme, view.branching), B._Cuts(tree.scheme, view.branching)
    values = (B._value_subtree(view, cuts), B._value_semi_local(view, cuts))
    for u in view.order:
        if len(u) == view.depth:
            continue
        p, q, b, n = view.p(u), view.q(u), ref.weight(view, u), view.branching[len(u)]
        order, obj = _sorted_objective(p, q, n, b, scheme)
        k = int(np.argmax(obj))
        got = np.sort(np.flatnonzero(cuts.cut_of(view, u)[0]))
        at = np.flatnonzero(np.isin(order, got))  # the binned cut is a prefix of the same order
        assert at.size == got.size and (at.size == 0 or at.max() == got.size - 1), u
        assert abs(obj[got.size] - obj[k]) < 1e-12, (u, obj[got.size], obj[k])
        mask = np.zeros(V, dtype=bool)
        mask[order[:k]] = True
        mass = float(p[mask].sum())
        ref.cut[u] = (mask, min(1.0, mass), mass)
    again = (B._value_subtree(view, ref), B._value_semi_local(view, ref))
    assert np.allclose(values, again, rtol=0, atol=1e-9), (values, again)


# --------------------------------------------------------------------------------------- refusals
def test_refusals():
    t = one_level_tree([2, 2])
    with pytest.raises(ValueError, match="unknown rule"):
        upper_bound(t, "best")
    with pytest.raises(TypeError, match="rule must be a string"):
        upper_bound(t, 3)
    with pytest.raises(ValueError, match="not certified for 'with_replacement'"):
        upper_bound(t, "top_n")
    with pytest.raises(ValueError, match="either rule= or heights="):
        upper_bound(t, "local", heights=DualHeights({}, 3))
    with pytest.raises(TypeError, match="wrap a dict in DualHeights"):
        upper_bound(t, heights={(): (np.zeros(3), 1.0)})
    with pytest.raises(ValueError, match="not dual feasible"):
        upper_bound(t, heights=DualHeights({(): (np.ones(3), 1.5)}, 3))
    with pytest.raises(ValueError, match="must be >= 0"):
        DualHeights({(): (-np.ones(3), 1.0)}, 3)
    with pytest.raises(ValueError, match="shape"):
        DualHeights({(): (np.ones(2), 3.0)}, 3)
    with pytest.raises(ValueError, match="V = 4 tokens"):
        upper_bound(t, heights=DualHeights({}, 4))
    bare = DraftTree("2", "with_replacement", [-1, 2, 2], [-1, 0, 0], [Q3])
    with pytest.raises(ValueError, match="no target laws"):
        upper_bound(bare)
    odd = DraftTree("2", "with_replacement", [-1, 0, 2], [-1, 0, 0], [[0.0, 0.5, 0.5]], [P3, P3, P3])
    with pytest.raises(ValueError, match="draft probability 0"):
        upper_bound(odd)


def test_compare_tree_and_cli_show_the_bounds(capsys):
    """``compare_tree`` and ``mdsd-ot trees`` report each certified rule's mean above the optimum."""
    import json

    from mdsd_ot.cli import main
    from mdsd_ot.trees import compare_tree

    t = compare_tree(lambda c: [1 / 3, 2 / 3], lambda c: [2 / 3, 1 / 3], "1x2", "with_replacement")
    bounds = dict(t.bounds)
    assert list(bounds) == certified_rules("with_replacement")
    assert abs(bounds["one_level"] - 21 / 9) < 1e-12 and abs(bounds["subtree"] - 20 / 9) < 1e-12
    assert "certified upper bounds" in str(t) and "one_level   2.333333  (+5.00% over the optimum)" in str(t)
    assert json.loads(t.to_json())["upper_bounds"] == bounds
    assert main(["trees", "--shape", "2,1", "--sampling", "top_n", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["upper_bounds"]["top_n"] == pytest.approx(out["optimum"], abs=1e-12)
    assert min(out["upper_bounds"].values()) >= out["optimum"] - 1e-12


# ------------------------------------------------------------------------------------- the decoder
def test_decode_rows_record_the_bounds_and_the_summary_shows_the_sandwich():
    """A decode row gets ``upper:<rule>`` for the scheme's default rule and one_level (failures
    recorded, never silent); the summary's sandwich per cell takes the best verifier, the rule whose
    interval ends lowest, and the clustered mean of the per-call differences (hand-computed)."""
    from mdsd_ot.decode import DecodeConfig
    from mdsd_ot.decode.report import format_sandwich, sandwich
    from mdsd_ot.decode.runner import _exact_values, _upper_values, upper_rules

    t = one_level_tree([0, 2])
    row: dict = {}
    _exact_values(row, t, ["rrs"], "with_replacement", DecodeConfig())
    assert row["upper:subtree"] == upper_bound(t, "subtree") and row["upper:one_level"] == 1 + ALPHA3
    assert row["exact:rrs"] > 0 and upper_rules("top_n") == ["top_n", "one_level"]
    odd = DraftTree("2", "with_replacement", [-1, 0, 2], [-1, 0, 0], [[0.0, 0.5, 0.5]], [P3, P3, P3])
    row = {}
    _upper_values(row, odd, "with_replacement")
    assert row["upper:subtree"] is None and "draft probability 0" in row["errors"]["upper:subtree"]

    def r(rec, a, b, s, o):
        return {"record": rec, "T": 1.0, "tree": "2", "scheme": "with_replacement", "driver": "rrs",
                "exact:a": a, "exact:b": b, "upper:subtree": s, "upper:one_level": o}  # fmt: skip

    rows = [r("x", 1.0, 1.5, 2.0, 2.5), r("x", 1.2, 1.7, 1.6, 2.5), r("y", 1.4, 1.3, 1.8, 2.5),
            r("y", 1.0, 1.5, 2.2, 2.5), r("z", 1.1, 1.6, 1.9, 2.5)]  # fmt: skip
    (cell,) = sandwich(rows)
    # best: b (mean 1.52 > 1.14); subtree's mean 1.9 with a positive interval beats one_level's 2.5
    assert cell["best"] == "b" and abs(cell["best_mean"] - 1.52) < 1e-12 and cell["rule"] == "subtree"
    assert abs(cell["width"] - (1.9 - 1.52)) < 1e-12 and cell["calls"] == 5 and cell["records"] == 3
    assert abs(cell["relative"] - 0.38 / 1.52) < 1e-12 and cell["width_ci95"] > 0
    assert "| 1 | 2 | with_replacement | b | 1.520 ± " in format_sandwich([cell])
