"""The exact optimum over all valid tree verifiers (tree_optimum, its lp verifier) and compare_tree.

Oracles: Sun et al.'s closed values (19/9, 20/9, 21/9), an LP written here in the other, equivalent form
("E followed by target sampling has the target's law", one constraint per sequence) over *ordered* trees
and solved by scipy, the closed form of deterministic top_n trees, the target's autoregressive law, and
the test's own enumeration of drafted trees (tests/test_trees.py)."""

import itertools
import json
import math

import numpy as np
import pytest
from scipy.optimize import linprog
from test_trees import ToyLM, autoregressive_law, enumerate_trees, law_distance

from mdsd_ot._config import LAW_TOL, TREE_OPTIMUM_MAX_CLASSES, VALUE_TOL
from mdsd_ot.cli import main
from mdsd_ot.drafts import SCHEMES
from mdsd_ot.trees import (
    DraftTree,
    LPTreeVerifier,
    compare_tree,
    draft_tree,
    expected_tokens,
    outcome_law,
    parse_shape,
    toy_models,
    tree_optimum,
    valid_verifiers,
    verify_tree,
)
from mdsd_ot.trees.enumerate import enumerate_trees as enumerate_classes
from mdsd_ot.trees.enumerate import laws_from_json, path_set

SUN_P, SUN_Q = np.array([1 / 3, 2 / 3]), np.array([2 / 3, 1 / 3])


def sun_target(ctx):
    return SUN_P


def sun_draft(ctx):
    return SUN_Q


def ordered_trees(shape, scheme, target, draft, base=()):
    """``(DraftTree, probability)`` for every ordered drafted tree, by the test's own enumeration."""
    out, memo = [], {}
    for tokens, parent, paths, qs, prob in enumerate_trees(shape, scheme, draft, tuple(base)):
        p = np.array([target(tuple(base) + path) for path in paths])
        out.append((DraftTree(shape, scheme, tokens, parent, qs, p, memo=memo), prob))
    return out


def exact_value(trees, verifier):
    return math.fsum(pr * expected_tokens(t, verifier) for t, pr in trees)


def shapes_for(scheme):
    """Shapes of the sweep: hub draws exactly two children per node."""
    return [(2,), (2, 2)] if scheme == "hub" else [(1, 1), (2, 1), (2, 2), (1, 1, 1), (3, 1)]


# ------------------------------------------------------------------------------- Sun et al.'s example
def plain_coupling_sun():
    """The plain coupling of the target's two-token paths with the drafted chain: maximise
    E[1 + longest common prefix of Z and X] over couplings of Z ~ p x p and X ~ q x q (scipy LP)."""
    seqs = list(itertools.product(range(2), repeat=2))
    pz = [SUN_P[a] * SUN_P[b] for a, b in seqs]
    px = [SUN_Q[a] * SUN_Q[b] for a, b in seqs]

    def lcp(z, x):
        return 2 if z == x else (1 if z[0] == x[0] else 0)

    c = -np.array([1.0 + lcp(z, x) for z in seqs for x in seqs])
    A = []
    for i in range(4):
        A.append([1.0 if k // 4 == i else 0.0 for k in range(16)])
    for j in range(4):
        A.append([1.0 if k % 4 == j else 0.0 for k in range(16)])
    res = linprog(c, A_eq=np.array(A), b_eq=np.array(pz + px), bounds=(0, None), method="highs")
    assert res.status == 0
    return -res.fun


def test_sun_example_optimum_token_level_and_plain_coupling():
    """V = 2, p = (1/3, 2/3), q = (2/3, 1/3) at every context, a 1x2 chain: tree_optimum 20/9 (Sun et al.'s
    block verification), node-wise RRS 19/9 (1 + a + a^2 with a = sum min(p, q) = 2/3), and the plain
    coupling 21/9, above every valid verifier."""
    r = tree_optimum(sun_target, sun_draft, "1x2", "with_replacement")
    assert r.success and r.status == 0
    assert abs(r.value - 20 / 9) <= VALUE_TOL and r.dual_bound >= r.value - VALUE_TOL
    trees = ordered_trees((1, 1), "with_replacement", sun_target, sun_draft)
    a = float(np.minimum(SUN_P, SUN_Q).sum())
    assert abs(exact_value(trees, "rrs") - (1 + a + a * a)) <= LAW_TOL
    assert abs(1 + a + a * a - 19 / 9) <= 1e-15
    coupling = plain_coupling_sun()
    assert abs(coupling - 21 / 9) <= VALUE_TOL
    assert coupling > r.value + 0.1  # not attainable: 5% above the optimum
    # the lp verifier attains the optimum tree by tree
    assert abs(exact_value(trees, r.verifier) - 20 / 9) <= VALUE_TOL


# ------------------------------------------------------------------- an LP in the other form (oracle)
def prefix_form_optimum(target, draft, shape, scheme):
    """The optimum over valid verifiers written as the test's own LP over ordered trees: variables
    x[T, E] for E = path of T + one token; constraints sum_E x[T, E] = P(T) and, for every sequence s
    of length <= D + 1, P(E followed by target sampling begins with s) = P_target(s)."""
    trees = ordered_trees(shape, scheme, target, draft)
    D = parse_shape(shape).depth
    V = target(()).size
    cols = []  # (tree index, E)
    for i, (t, _) in enumerate(trees):
        for E in sorted({t.path(v) + (y,) for v in range(t.tokens.size) for y in range(V)}):
            cols.append((i, E))

    def ptarget(s, start=0):
        pr = 1.0
        for k in range(start, len(s)):
            pr *= target(s[:k])[s[k]]
        return pr

    rows, rhs = [], []
    for i, (_, prob) in enumerate(trees):
        rows.append([1.0 if c[0] == i else 0.0 for c in cols])
        rhs.append(prob)
    for L in range(1, D + 2):
        for s in itertools.product(range(V), repeat=L):
            row = []
            for _, E in cols:
                if len(E) >= L:
                    row.append(1.0 if E[:L] == s else 0.0)
                else:
                    row.append(ptarget(s, len(E)) if s[: len(E)] == E else 0.0)
            rows.append(row)
            rhs.append(ptarget(s))
    cost = -np.array([float(len(E)) for _, E in cols])
    res = linprog(cost, A_eq=np.array(rows), b_eq=np.array(rhs), bounds=(0, None), method="highs")
    assert res.status == 0, res.message
    return -res.fun, len(trees)


@pytest.mark.parametrize(
    "V, shape, scheme",
    [
        (2, (2,), "with_replacement"),
        (3, (1, 1), "with_replacement"),
        (3, (2, 1), "with_replacement"),
        (3, (2, 1), "without_replacement"),
        (2, (2, 2), "with_replacement"),
        (3, (2,), "hub"),
        (3, (2, 1), "greedy"),
        (3, (1, 1, 1), "conditional_poisson"),
    ],
)
def test_causal_lp_equals_the_prefix_form_over_ordered_trees(V, shape, scheme):
    """The causal LP over path-set classes has the value of the LP written in the prefix form over
    ordered trees (no aggregation; scipy): the aggregation and the equivalence of the two forms."""
    target, draft = ToyLM(V, 10 + V, zeros=True), ToyLM(V, 20 + V, conc=0.7)
    r = tree_optimum(target, draft, shape, scheme)
    want, n_ordered = prefix_form_optimum(target, draft, shape, scheme)
    assert r.success, r.message
    assert abs(r.value - want) <= VALUE_TOL, (r.value, want)
    assert r.n_trees <= n_ordered


def test_classes_are_the_ordered_trees_grouped_by_path_set():
    """The level-by-level class law equals the test's enumeration of ordered trees grouped by path set."""
    for scheme in SCHEMES:
        for shape in shapes_for(scheme):
            target, draft = ToyLM(3, 1, zeros=True), ToyLM(3, 2, conc=0.5)
            e = enumerate_classes(target, draft, shape, scheme)
            grouped: dict = {}
            trees = ordered_trees(shape, scheme, target, draft)
            for t, pr in trees:
                k = path_set(t)
                grouped[k] = grouped.get(k, 0.0) + pr
            assert {c.paths for c in e.classes} == set(grouped), (scheme, shape)
            assert max(abs(c.probability - grouped[c.paths]) for c in e.classes) <= LAW_TOL
            assert e.n_trees() == len(trees)
            assert len(list(e.trees())) == len(trees)


# ------------------------------------------------------------------- the optimum against every verifier
@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_optimum_at_least_every_valid_verifier(scheme):
    """Random small trees (V = 3 on the larger shapes, 4 on the others), every scheme: the optimum is at
    least the exact value of every valid verifier (node-wise and tree-level), averaged over the test's own
    enumeration of drafted trees, and the lp verifier evaluated the same way attains it."""
    for i, shape in enumerate(shapes_for(scheme)):
        V = 3 if parse_shape(shape).size > 3 else 4
        target, draft = ToyLM(V, 40 + i, zeros=True), ToyLM(V, 50 + i, conc=0.6)
        r = tree_optimum(target, draft, shape, scheme)
        assert r.success, (scheme, shape, r.message)
        trees = ordered_trees(shape, scheme, target, draft)
        names = valid_verifiers(scheme, shape=shape)
        assert names
        for name in names:
            value = exact_value(trees, name)
            assert value <= r.value + VALUE_TOL, (scheme, shape, name, value, r.value)
        assert abs(exact_value(trees, r.verifier) - r.value) <= VALUE_TOL
        assert 1.0 <= r.value <= parse_shape(shape).depth + 1


@pytest.mark.parametrize("shape", [(1,), (2,), (1, 1), (2, 1), (2, 2), (3, 1), (1, 1, 1), (2, 2, 1)])
def test_top_n_optimum_is_the_membership_closed_form(shape):
    """Deterministic top_n trees: 1 + the sum over non-root nodes of the target probability of the node's
    path (the top-n tokens found here by a stable argsort of each draft law)."""
    target, draft = ToyLM(4, 70, zeros=True), ToyLM(4, 71)
    want, frontier = 1.0, [((), 1.0)]
    for b in shape:
        nxt = []
        for w, pw in frontier:
            p = target(w)
            for x in np.argsort(-draft(w), kind="stable")[:b].tolist():
                nxt.append((w + (x,), pw * p[x]))
                want += pw * p[x]
        frontier = nxt
    r = tree_optimum(target, draft, shape, "top_n")
    assert r.success and r.n_trees == 1
    assert abs(r.value - want) <= VALUE_TOL


@pytest.mark.parametrize("L", [1, 2, 3])
@pytest.mark.parametrize("scheme", ["with_replacement", "without_replacement", "greedy", "top_n"])
def test_block_verification_is_the_optimum_on_chains(L, scheme):
    """Chains 1xL, V = 2-4: block verification's exact value (averaged over the test's enumeration of
    chains) equals tree_optimum to 1e-9."""
    for V in (2, 3, 4) if L < 3 else (2, 3):
        target, draft = ToyLM(V, 80 + V, zeros=True), ToyLM(V, 90 + V, conc=0.5)
        r = tree_optimum(target, draft, (1,) * L, scheme)
        assert r.success
        block = exact_value(ordered_trees((1,) * L, scheme, target, draft), "block")
        assert abs(block - r.value) <= VALUE_TOL, (V, L, scheme, block, r.value)


# -------------------------------------------------------------------------------------- lossless
def chained_law(k, shape, scheme, target, draft):
    """Exact law of the first ``k`` emitted tokens when every call verifies with the lp verifier of a
    tree_optimum solved at that call's context (every drafted tree of every call enumerated)."""
    calls = {}

    def call(base):
        if base not in calls:
            r = tree_optimum(target, draft, shape, scheme, context=base)
            assert r.success
            law = {}
            for t, pr in ordered_trees(shape, scheme, target, draft, base):
                for E, pe in outcome_law(t, r.verifier).items():
                    law[E] = law.get(E, 0.0) + pr * pe
            calls[base] = law
        return calls[base]

    def F(base, k):
        if k == 0:
            return {(): 1.0}
        out = {}
        for E, pr in call(base).items():
            tails = {E[:k]: 1.0} if len(E) >= k else {E + s: w for s, w in F(base + E, k - len(E)).items()}
            for s, w in tails.items():
                out[s] = out.get(s, 0.0) + pr * w
        return out

    return F((), k)


@pytest.mark.parametrize(
    "shape, scheme",
    [
        ((1, 1), "with_replacement"),
        ((2,), "without_replacement"),
        ((2, 1), "with_replacement"),
        ((2,), "hub"),
        ((1, 2), "greedy"),
        ((2, 1), "conditional_poisson"),
        ((1, 1), "top_n"),
    ],
)
def test_lp_verifier_chained_calls_follow_the_target(shape, scheme):
    """V = 3, targets with zeros: the exact law of the first 3 tokens of chained calls (a fresh tree and
    a fresh tree_optimum at every context reached) equals the target's autoregressive law to 1e-12."""
    target, draft = ToyLM(3, 100, zeros=True), ToyLM(3, 101, conc=0.5)
    law = chained_law(3, shape, scheme, target, draft)
    assert law_distance(law, autoregressive_law(3, target)) <= LAW_TOL
    assert abs(sum(law.values()) - 1.0) <= LAW_TOL


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_lp_verifier_one_call_then_the_target(scheme):
    """Larger trees, V = 4: one call of the lp verifier (every drafted tree enumerated, the plan's law per
    tree) followed by sampling from the target gives the target's law of the first 3 tokens to 1e-12:
    the per-call property that makes chained calls lossless (docs/math.md#the-exact-tree-optimum)."""
    shape = (2, 2) if scheme == "hub" else (2, 1)
    target, draft = ToyLM(4, 110, zeros=True), ToyLM(4, 111, conc=0.5)
    r = tree_optimum(target, draft, shape, scheme)
    law = one_call_then_target(r, shape, scheme, target, draft)
    assert law_distance(law, autoregressive_law(3, target)) <= LAW_TOL


def one_call_then_target(r, shape, scheme, target, draft):
    """Law of the first 3 tokens of: one call of r's lp verifier, then the target's own sampling."""
    law = {}
    for t, pr in ordered_trees(shape, scheme, target, draft):
        for E, pe in r.verifier.outcome_law(t).items():
            assert E[:-1] in set(path_set(t))  # an emission is a path of the tree plus one token
            for s, w in autoregressive_law(max(0, 3 - len(E)), target, E).items():
                full = (E + s)[:3]
                law[full] = law.get(full, 0.0) + pr * pe * w
    return law


@pytest.mark.parametrize("scheme", ["conditional_poisson", "without_replacement"])
def test_trees_rarer_than_the_solver_tolerance_keep_an_exact_plan(scheme):
    """Near one-hot laws (Dirichlet 0.05): some drafted trees have probability far below HiGHS's 1e-10
    tolerance; the plan read back is still lossless to 1e-12 (the rows are scaled for the solver)."""
    target, draft = ToyLM(3, 8, zeros=True, conc=0.05), ToyLM(3, 508, conc=0.05)
    r = tree_optimum(target, draft, (2, 1), scheme)
    assert r.success, r.message
    assert min(c.probability for c in r.classes) < 1e-20
    law = one_call_then_target(r, (2, 1), scheme, target, draft)
    assert law_distance(law, autoregressive_law(3, target)) <= LAW_TOL


def test_lp_verifier_simulation_matches_its_exact_value():
    """verify_tree with the lp verifier: on one drafted tree the mean of 4,000 sampled calls lies within
    4 standard errors of its exact expected tokens; every sample is a path of the tree plus one token."""
    target, draft = ToyLM(4, 120, zeros=True), ToyLM(4, 121, conc=0.5)
    r = tree_optimum(target, draft, (2, 2), "with_replacement")
    rng = np.random.default_rng(5)
    tree = draft_tree((2, 2), "with_replacement", draft.rows(), rng, target=target.rows())
    exact = expected_tokens(tree, r.verifier)
    law = outcome_law(tree, r.verifier)
    assert abs(math.fsum(len(E) * p for E, p in law.items()) - exact) <= LAW_TOL
    paths = set(path_set(tree))
    sims = []
    for _ in range(4000):
        E = verify_tree(tree, r.verifier, rng)
        assert tuple(E[:-1]) in paths and law.get(tuple(E), 0.0) > 0
        sims.append(len(E))
    sims = np.array(sims)
    se = sims.std(ddof=1) / np.sqrt(sims.size)
    assert abs(sims.mean() - exact) <= 4 * se + 1e-12, (sims.mean(), exact, se)


# ------------------------------------------------------------------------------------ errors and limits
def test_lp_verifier_refuses_other_trees_and_shapes():
    target, draft = ToyLM(3, 130), ToyLM(3, 131)
    r = tree_optimum(target, draft, (2, 1), "with_replacement")
    assert isinstance(r.verifier, LPTreeVerifier) and r.verifier.name == "lp"
    assert r.verifier.why_not((2, 1), "with_replacement") is None
    assert "solve tree_optimum" in r.verifier.why_not((1, 1), "with_replacement")
    assert "solve tree_optimum" in r.verifier.why_not((2, 1), "without_replacement")
    rng = np.random.default_rng(0)
    other = ToyLM(3, 999)
    tree = draft_tree((2, 1), "with_replacement", draft.rows(), rng, target=other.rows())
    with pytest.raises(ValueError, match="other laws"):
        expected_tokens(tree, r.verifier)
    chain = draft_tree((1, 1), "with_replacement", draft.rows(), rng, target=target.rows())
    with pytest.raises(ValueError, match="cannot verify"):
        expected_tokens(chain, r.verifier)


def test_too_many_classes_is_refused_with_the_count():
    target, draft = ToyLM(4, 1), ToyLM(4, 2)
    with pytest.raises(ValueError, match=r"more than max_classes = 100 path-set classes \(at least 660\)"):
        tree_optimum(target, draft, (2, 2), "with_replacement", max_classes=100)
    with pytest.raises(ValueError, match=rf"max_classes = {TREE_OPTIMUM_MAX_CLASSES:,}.*smaller vocabulary"):
        tree_optimum(ToyLM(6, 1), ToyLM(6, 2), (2, 2), "with_replacement")  # 6,951 classes
    with pytest.raises(ValueError, match="unknown solver"):
        tree_optimum(target, draft, (1,), "with_replacement", solver="cplex")
    with pytest.raises(ValueError, match="same vocabulary"):
        tree_optimum(ToyLM(3, 1), ToyLM(4, 1), (1,), "with_replacement")
    with pytest.raises(ValueError, match="hub"):
        tree_optimum(target, draft, (1,), "hub")


# The size estimate against the test's own enumeration of ordered trees (classes: their distinct path
# sets) and the LP actually built; ToyLM laws (Dirichlet) give every token positive probability.
SIZE_CASES = [
    ("with_replacement", 2, (2, 2, 1)),
    ("with_replacement", 2, (4, 1)),
    ("with_replacement", 3, (2, 1, 1)),
    ("with_replacement", 3, (3, 1)),
    ("with_replacement", 4, (2, 2)),
    ("without_replacement", 4, (2, 2)),
    ("conditional_poisson", 4, (3, 1)),
    ("greedy", 4, (2, 1, 2)),
    ("hub", 3, (2, 2)),
    ("top_n", 3, (2, 2)),
]


def test_size_estimate_is_exact_on_full_support_laws_and_a_bound_otherwise():
    from mdsd_ot.trees.enumerate import estimate_tree_size
    from mdsd_ot.trees.optimum import build_causal_lp

    for scheme, V, shape in SIZE_CASES:
        for zeros in (False, True):
            target, draft = ToyLM(V, 7, zeros=zeros), ToyLM(V, 8, zeros=zeros)
            if zeros and scheme != "with_replacement":  # schemes needing b distinct tokens may not draw
                continue
            trees = enumerate_trees(shape, scheme, draft, ())
            classes = {frozenset(tuple(paths)) for _, _, paths, _, _ in trees}
            columns = build_causal_lp(
                enumerate_classes(target, draft, shape, scheme, max_classes=10**6)
            ).n_columns
            got = estimate_tree_size(shape, scheme, V)
            if zeros:
                assert (
                    got.classes >= len(classes)
                    and got.lp_columns >= columns
                    and got.ordered_trees >= len(trees)
                )
            else:
                assert (got.classes, got.lp_columns, got.ordered_trees) == (
                    len(classes),
                    columns,
                    len(trees),
                ), (scheme, V, shape)
    # supports smaller than V, the same size at every context: exact again
    two, three = (lambda c: [0.0, 0.6, 0.4, 0.0]), (lambda c: [0.2, 0.3, 0.5, 0.0])
    e = enumerate_classes(three, two, (2, 2), "with_replacement")
    got = estimate_tree_size((2, 2), "with_replacement", 4, draft_support=2, target_support=3)
    assert (got.classes, got.lp_columns, got.ordered_trees) == (
        len(e.classes),
        build_causal_lp(e).n_columns,
        e.n_trees(),
    )
    # closed forms: 2^L chains at V = 2 (instantly, at any length), C(V, b) sets, one top-n tree
    assert estimate_tree_size("1x30", "with_replacement", 2).classes == 2**30
    assert estimate_tree_size("4", "without_replacement", 10).classes == math.comb(10, 4)
    assert estimate_tree_size("64,63", "top_n", 152_064).classes == 1
    assert estimate_tree_size("1x4096", "with_replacement", 152_064).classes == 10**18  # saturates
    with pytest.raises(ValueError, match="at least 3 tokens"):
        estimate_tree_size("3", "without_replacement", 2)


def test_class_limit_is_exact_and_checked_while_enumerating():
    """No refusal at the exact count (the running counts are lower bounds), a refusal one below it; a
    refusal costs about max_classes law evaluations, whatever the full size (2^30 classes here)."""
    for scheme, V, shape in SIZE_CASES[:6]:
        for zeros in (False, True):
            target, draft = ToyLM(V, 3, zeros=zeros), ToyLM(V, 4, zeros=zeros)
            n = len(enumerate_classes(target, draft, shape, scheme, max_classes=10**6).classes)
            assert len(enumerate_classes(target, draft, shape, scheme, max_classes=n).classes) == n
            if n > 1:
                with pytest.raises(ValueError, match=rf"more than max_classes = {n - 1:,} "):
                    enumerate_classes(target, draft, shape, scheme, max_classes=n - 1)
    calls = set()

    def coin(ctx):
        calls.add(ctx)
        return [0.5, 0.5]

    with pytest.raises(ValueError, match=r"at least 64 already by depth 6 of 30; 1,073,741,824 when") as err:
        tree_optimum(coin, coin, "1x30", "with_replacement", max_classes=50)
    assert len(calls) <= 64, len(calls)  # the contexts of depth < 6, nothing deeper
    assert "max_classes=" in str(err.value) and "--max-classes" in str(err.value)
    # one node's child sets are counted before its draft tuples are listed (20^12 of them here)
    with pytest.raises(ValueError, match=r"at least [\d,]+\)"):
        enumerate_classes(ToyLM(20, 1), ToyLM(20, 2), (12,), "with_replacement")
    for bad, exc in ((0, ValueError), ("100", TypeError), (True, TypeError)):
        with pytest.raises(exc, match="max_classes"):
            enumerate_classes(coin, coin, "1x2", "with_replacement", max_classes=bad)
        with pytest.raises(exc, match="max_trees"):
            compare_tree(coin, coin, "1x2", "with_replacement", max_trees=bad)


def test_class_refusal_never_suggests_the_scheme_in_use():
    """Greedy 1x3 at V = 64 (the tiny models' vocabulary): 262,144 classes; greedy with one child per
    node is i.i.d. sampling, so the only smaller scheme is top_n."""
    t, d = toy_models(64, seed=0)
    with pytest.raises(ValueError, match=r"by depth 2 of 3; 262,144 when") as err:
        tree_optimum(t, d, "1x3", "greedy")
    msg = str(err.value)
    assert "'top_n' (at most 1 class)" in msg and "'greedy' (" not in msg and "(top_n, greedy)" not in msg
    with pytest.raises(ValueError, match="at least 6,951") as err:
        compare_tree(ToyLM(6, 1), ToyLM(6, 2), "2,2", "with_replacement")
    assert "'with_replacement' (" not in str(err.value) and "'greedy' (at most 125 classes)" in str(err.value)


def test_iid_drafts_are_enumerated_by_counts_not_tuples(monkeypatch):
    """13 i.i.d. drafts from 3 tokens: 7 classes (the non-empty sets drawn), from the 105 count vectors
    of the multinomial law, never the 3^13 = 1.6 million ordered tuples (13 s and 22 s before); the
    class probabilities against inclusion-exclusion in exact rationals, the ordered count 3^13."""
    from fractions import Fraction

    from mdsd_ot.drafts.scheme import DraftScheme

    def no_tuples(self, q, n):
        raise AssertionError("an i.i.d. enumeration listed draft tuples")

    monkeypatch.setattr(DraftScheme, "tuple_law", no_tuples)
    q = [0.5, 0.375, 0.125]
    e = enumerate_classes(lambda c: [1 / 3, 1 / 3, 1 / 3], lambda c: q, (13,), "with_replacement")
    assert e.n_trees() == 3**13
    got = {frozenset(w[0] for w in c.paths[1:]): c.probability for c in e.classes}
    subsets = [frozenset(s) for r in (1, 2, 3) for s in itertools.combinations(range(3), r)]
    assert set(got) == set(subsets)
    for S in subsets:  # P(the drawn set is S) = sum over T in S of (-1)^|S - T| q(T)^13
        exact = sum(
            (-1) ** (len(S) - r) * sum(Fraction(q[y]) for y in T) ** 13
            for r in range(1, len(S) + 1)
            for T in itertools.combinations(sorted(S), r)
        )
        assert abs(got[S] - float(exact)) <= 1e-15, (S, got[S], float(exact))


def test_contexts_are_token_ids_never_converted():
    """A float, bool, string or negative context is refused (1.5 was read as 1, "12" as (1, 2));
    numpy and torch integers are token ids."""
    half = lambda c: [0.5, 0.5]  # noqa: E731
    for ctx, exc, match in (
        ((1.5,), TypeError, r"context\[0\] = 1.5 is not an integer"),
        ((2.0,), TypeError, "not an integer"),
        ((True,), TypeError, "is a bool"),
        ("12", TypeError, "sequence of token ids"),
        ((-1,), ValueError, "negative"),
        (None, TypeError, "sequence of token ids"),
    ):
        with pytest.raises(exc, match=match):
            tree_optimum(half, half, (1,), "with_replacement", context=ctx)
    assert enumerate_classes(half, half, (1,), "with_replacement", context=np.array([1, 0])).context == (1, 0)
    with pytest.raises(TypeError, match="target's context"):
        enumerate_classes(half, half, (1,), "with_replacement").target((0.5,))


def test_simplex_and_interior_point_agree():
    target, draft = ToyLM(4, 140, zeros=True), ToyLM(4, 141, conc=0.5)
    a = tree_optimum(target, draft, (2, 1), "without_replacement", solver="simplex")
    b = tree_optimum(target, draft, (2, 1), "without_replacement", solver="ipm")
    assert a.success and b.success and abs(a.value - b.value) <= VALUE_TOL


def test_torch_models_through_model_law():
    """A tiny torch causal LM: model_law is the float64 softmax of the last position's logits at the
    temperature (computed here from the logits), and tree_optimum runs on it at a prompt."""
    torch = pytest.importorskip("torch")
    from tiny_models import tiny_lm

    from mdsd_ot.trees import model_law

    tgt, drf = tiny_lm(3, seed=0, spread=4.0), tiny_lm(3, seed=1, spread=4.0)
    law = model_law(tgt, 0.7)
    with torch.no_grad():
        z = tgt(torch.tensor([[1, 2]])).logits[0, -1].double() / 0.7
    want = torch.softmax(z, -1).numpy()
    assert np.max(np.abs(law((1, 2)) - want)) <= 1e-12
    r = tree_optimum(law, model_law(drf, 0.7), (1, 1), "with_replacement", context=(1, 2))
    assert r.success and 1.0 <= r.value <= 3.0
    r1 = tree_optimum(tgt, drf, (1,), "with_replacement", context=(0,))
    assert r1.success
    with pytest.raises(ValueError, match="non-empty prompt"):
        tree_optimum(tgt, drf, (1,), "with_replacement")
    with pytest.raises(ValueError, match=r"token 5 of context \[5\] is outside the model's vocabulary"):
        tree_optimum(tgt, drf, (1,), "with_replacement", context=(5,))  # was an IndexError traceback


# ------------------------------------------------------------------------------ compare_tree and CLI
def test_compare_tree_table():
    t = compare_tree(sun_target, sun_draft, "1x2", "with_replacement")
    assert abs(t["rrs"].tokens - 19 / 9) <= LAW_TOL and abs(t["block"].tokens - 20 / 9) <= VALUE_TOL
    assert abs(t["rrs"].gap - 1 / 9) <= VALUE_TOL and abs(t["rrs"].relative_gap - 0.05) <= VALUE_TOL
    assert t["lp"].kind == "optimum" and t["block"].kind == "tree-level" and t["rrs"].kind == "node-wise"
    assert [r.verifier for r in t][:-1] == valid_verifiers("with_replacement", shape="1x2")
    text = str(t)
    assert "block" in text and "2.222222" in text and "path-set classes" in text
    payload = json.loads(t.to_json())
    assert payload["optimum"] == pytest.approx(20 / 9, abs=VALUE_TOL) and len(payload["records"]) == len(t)
    with pytest.raises(ValueError, match="cannot verify"):
        compare_tree(sun_target, sun_draft, "2,1", "with_replacement", verifiers="block")
    with pytest.raises(ValueError, match="unknown"):
        compare_tree(sun_target, sun_draft, "1x2", "with_replacement", verifiers="nope")
    with pytest.raises(ValueError, match="ordered drafted trees"):
        compare_tree(ToyLM(4, 1), ToyLM(4, 2), "2,2", "with_replacement", max_trees=100)


def test_laws_from_json():
    t, d = laws_from_json({"target": {"*": [0.5, 0.5], "1": [1.0, 0.0]}, "draft": {"": [0.2, 0.8]}})
    assert t((1,)).tolist() == [1.0, 0.0] and t((0, 1)).tolist() == [0.5, 0.5]
    with pytest.raises(ValueError, match="no law for context '0,1'"):
        d((0, 1))
    with pytest.raises(ValueError, match="cannot read context"):
        laws_from_json({"target": {"a": [1.0]}, "draft": {"*": [1.0]}})
    with pytest.raises(ValueError, match="JSON object"):
        laws_from_json([[0.5, 0.5]])


HALF = [0.5, 0.5]
BAD_LAWS = [  # (file text, what the one-line message must name besides the file)
    (
        '{"target": {"*": "abc"}, "draft": {"*": [0.5, 0.5]}}',
        r'"target" law at context \'\*\' must be a non-empty list',
    ),
    (
        '{"target": {"*": [0.5, NaN]}, "draft": {"*": [0.5, 0.5]}}',
        r'"target" law at context \'\*\': it contains NaN',
    ),
    (
        '{"target": {"*": [true, false]}, "draft": {"*": [0.5, 0.5]}}',
        r"holds true; every entry must be a number",
    ),
    ('{"target": {"*": [0.5, 0.7]}, "draft": {"*": [0.5, 0.5]}}', r"it sums to 1.2.*fix the law in the file"),
    (
        '{"target": {"*": [0.5, 0.5], "7": [1, 0]}, "draft": {"*": [0.5, 0.5]}}',
        r"context '7' names a token outside",
    ),
    (
        '{"target": {"*": [0.5, 0.5], "0": [1, 0], "0": [0, 1]}, "draft": {"*": [0.5, 0.5]}}',
        r"key '0' appears twice",
    ),
    (
        '{"target": {"*": [0.5, 0.5], "0,1": [1, 0], "0, 1": [0, 1]}, "draft": {"*": [0.5, 0.5]}}',
        r"'0,1' twice",
    ),
    (
        '{"target": {"*": [0.5, 0.5]}, "draft": {"*": [0.5, 0.5, 0]}}',
        r"'\*' has 3 probabilities, another law",
    ),
    ('{"target": {"*": [0.5, 0.5]}, "draft": {"*": [0.5, 0.5]}, "vocab": 3}', r"has 2 probabilities"),
    (
        '{"target": {"*": [0.5, 0.5], "0,0,0": [1, 0]}, "draft": {"*": [0.5, 0.5]}}',
        r"'0,0,0' cannot occur: target laws",
    ),
    (
        '{"target": {"*": [0.5, 0.5]}, "draft": {"*": [0.5, 0.5], "0,1": [1, 0]}}',
        r"'0,1' cannot occur: draft laws .* 1 token in",
    ),
    (
        '{"target": {"*": [0.5, 0.5], "1,0": [1, 0]}, "draft": {"*": [1.0, 0.0]}}',
        r"'1,0' cannot occur: token 1 is never drafted",
    ),
    ('{"target": {"": [0.5, 0.5]}, "draft": {"*": [0.5, 0.5]}}', r'"target" has no law for context \'0\''),
]


@pytest.mark.parametrize("text, match", BAD_LAWS)
def test_cli_trees_refuses_bad_laws_naming_the_file_and_context(tmp_path, capsys, text, match):
    import re

    laws = tmp_path / "laws.json"
    laws.write_text(text)
    assert main(["trees", "--laws", str(laws), "--shape", "1x2"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"mdsd-ot trees: error: {laws}: ") and re.search(match, line), line


def test_cli_trees_toy_options_with_laws_are_refused(tmp_path, capsys):
    laws = tmp_path / "laws.json"
    laws.write_text(json.dumps({"target": {"*": HALF}, "draft": {"*": HALF}}))
    for extra, flags in ((["--vocab", "7"], "--vocab"), (["--seed", "1", "--noise", "2"], "--seed, --noise")):
        assert main(["trees", "--laws", str(laws), *extra]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert f"{flags} set" in line and "--laws replaces" in line, line


def test_toy_models_are_context_dependent_and_seeded():
    t, d = toy_models(4, seed=3, temperature=0.5)
    t2, _ = toy_models(4, seed=3)
    assert np.array_equal(t((1,)), t2((1,))) and not np.allclose(t((1,)), t((2,)))
    assert not np.allclose(t(()), d(()))
    with pytest.raises(ValueError, match="temperature"):
        toy_models(3, temperature=0.0)


def test_cli_trees_table_json_and_errors(capsys, tmp_path):
    assert main(["trees", "--vocab", "3", "--seed", "0", "--shape", "1x2"]) == 0
    out = capsys.readouterr().out
    assert "block" in out and "optimum over all valid verifiers" in out
    assert main(["trees", "--shape", "2,1", "--sampling", "without_replacement", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["optimum_success"] and payload["scheme"] == "without_replacement"
    best = max(r["tokens"] for r in payload["records"] if r["kind"] != "optimum")
    assert best <= payload["optimum"] + VALUE_TOL
    laws = tmp_path / "sun.json"
    laws.write_text(json.dumps({"target": {"*": SUN_P.tolist()}, "draft": {"*": SUN_Q.tolist()}}))
    assert main(["trees", "--laws", str(laws), "--shape", "1x2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["optimum"] == pytest.approx(20 / 9, abs=VALUE_TOL)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    for argv in (
        ["trees", "--sampling", "nope"],
        ["trees", "--shape", "2,x"],
        ["trees", "--vocab", "1"],
        ["trees", "--laws", str(bad)],
        ["trees", "--laws", str(tmp_path / "missing.json")],
        ["trees", "--verifiers", "block", "--shape", "2,1"],
        ["trees", "--vocab", "6", "--shape", "2,2"],  # 6,951 path-set classes: over the limit
        ["trees", "--vocab", "2", "--shape", "1x30"],  # 2^30 classes, refused before any law is read
        ["trees", "--vocab", "64", "--shape", "1x3", "--sampling", "greedy"],
        ["trees", "--vocab", "3", "--shape", "1x2", "--max-classes", "8"],  # 9 classes
        ["trees", "--vocab", "3", "--shape", "1x2", "--max-trees", "8"],  # 9 ordered trees
        ["trees", "--vocab", "3", "--shape", "1x2", "--max-columns", "90"],  # 9 * 3 * 3 + 13 = 94 columns
        ["trees", "--max-classes", "0"],
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("mdsd-ot trees: error: ") and err.count("\n") == 1, (argv, err)
        assert "--sampling greedy" not in err or "greedy" not in argv, err
        if "1x30" in argv:
            assert "1,073,741,824 path-set classes" in err and "raise --max-classes" in err


def test_cli_trees_notes_the_size_before_it_starts(capsys, monkeypatch, tmp_path):
    import mdsd_ot.commands.trees as cmd

    monkeypatch.setattr(cmd, "TREE_NOTE_SECONDS", 0.0)
    assert main(["trees", "--vocab", "3", "--shape", "1x2", "--verifiers", "rrs"]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "9 path-set classes, 94 LP columns, 9 ordered trees" in err, err
    # a laws file: counted with its largest support (2 tokens of 3), an upper bound said as such
    laws = tmp_path / "two.json"
    laws.write_text(json.dumps({"target": {"*": [0.5, 0.25, 0.25]}, "draft": {"*": [0.5, 0.5, 0.0]}}))
    assert main(["trees", "--laws", str(laws), "--shape", "1x2", "--verifiers", "rrs"]) == 0
    assert "4 path-set classes" in capsys.readouterr().err
    assert main(["trees", "--laws", str(laws), "--shape", "1x2", "--max-classes", "3"]) == 2
    assert "at most (if every law" in capsys.readouterr().err
