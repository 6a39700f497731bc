"""Draft trees: shapes, the deterministic top-n scheme, tree verification and its exact recursion."""

import itertools

import numpy as np
import pytest
from conftest import random_pair
from oracles import exact_alpha

from mdsd_ot import optimal_acceptance
from mdsd_ot._config import LAW_TOL, MAX_TREE_NODES, VALUE_TOL
from mdsd_ot.drafts import get_scheme
from mdsd_ot.trees import (
    DraftTree,
    TreeShape,
    draft_tree,
    expected_tokens,
    node_alpha_heuristic,
    node_bound,
    node_bounds,
    outcome_law,
    parse_shape,
    speedup,
    valid_verifiers,
    verify_tree,
)
from mdsd_ot.verifiers import VERIFIERS, verifier_acceptance


# ------------------------------------------------------------------------------------------ shapes
@pytest.mark.parametrize(
    "spec, branching",
    [
        ("4x4", (4, 1, 1, 1)),
        ("1x1", (1,)),
        (" 2 X 3 ", (2, 1, 1)),
        ("4,2,2,1", (4, 2, 2, 1)),
        ("3", (3,)),
        ([4, 2, 2, 1], (4, 2, 2, 1)),
        ((2, 1), (2, 1)),
        (np.array([2, 2]), (2, 2)),
        (5, (5,)),
    ],
)
def test_parse_shape(spec, branching):
    s = parse_shape(spec)
    assert s.branching == branching
    assert parse_shape(s) is s
    # size = sum over depths of prod(b_1..b_d), counted by enumerating the nodes
    depths = range(1, len(branching) + 1)
    nodes = sum(len(list(itertools.product(*[range(b) for b in branching[:d]]))) for d in depths)
    assert s.size == nodes and s.depth == len(branching)
    assert parse_shape(s.label) == s  # the label reads back


def test_shape_labels():
    assert parse_shape([4, 1, 1]).label == "4x3" and parse_shape([4, 1, 1]).is_chains
    assert parse_shape([4, 2, 2, 1]).label == "4,2,2,1" and not parse_shape([4, 2, 2, 1]).is_chains
    assert parse_shape("4,2,2,1").level_sizes == (4, 8, 16, 16)


@pytest.mark.parametrize(
    "spec, error, match",
    [
        ("", ValueError, "cannot read tree"),
        ("4x", ValueError, "cannot read tree"),
        ("a,b", ValueError, "cannot read tree"),
        ("4,,2", ValueError, "cannot read tree"),
        ("0x3", ValueError, "K >= 1 and L >= 1"),
        ("3x0", ValueError, "K >= 1 and L >= 1"),
        ("4,0,1", ValueError, "at least one child"),
        ([], ValueError, "at least one depth"),
        ([2, -1], ValueError, "at least one child"),
        ([2.5], TypeError, "ints"),
        ([True, 2], TypeError, "ints"),
        (None, TypeError, "sequence of ints"),
        (2.0, TypeError, "sequence of ints"),
        ("8,8,8,8,8", ValueError, "MAX_TREE_NODES"),
        ([10**9, 10**9, 10**9], ValueError, "MAX_TREE_NODES"),
        (f"1x{MAX_TREE_NODES + 1}", ValueError, "MAX_TREE_NODES"),
        ("9" * 5000, ValueError, "a count of 5,000 digits.*MAX_TREE_NODES"),  # never int() it
        ("2x" + "9" * 5000, ValueError, "a count of 5,000 digits"),
    ],
)
def test_bad_shapes_are_actionable(spec, error, match):
    with pytest.raises(error, match=match):
        parse_shape(spec)


def test_tree_shape_direct_construction_validates():
    with pytest.raises(TypeError):
        TreeShape("44")
    assert TreeShape([2, 1]).branching == (2, 1)


# -------------------------------------------------------------------------------- top-n scheme
def test_top_n_law_and_closed_form_against_exact_rationals(rng):
    """alpha* = p(Top_n) against brute force over all subsets in exact rationals, and the LP."""
    scheme = get_scheme("top_n")
    checked = 0
    for _ in range(60):
        V = int(rng.integers(2, 7))
        p, q = random_pair(rng, V)
        support = int(np.count_nonzero(q))
        n = int(rng.integers(1, support + 1))
        top = np.argsort(-q, kind="stable")[:n]
        tuples, probs = scheme.tuple_law(q, n)
        assert tuples.tolist() == [top.tolist()] and probs.tolist() == [1.0]
        r = optimal_acceptance(p, q, n, sampling="top_n")
        assert r.success
        assert abs(r.value - float(exact_alpha(p, q, n, "top_n"))) <= 1e-12
        assert abs(r.value - p[top].sum()) <= 1e-12
        lp = optimal_acceptance(p, q, n, sampling="top_n", method="lp")
        assert abs(lp.value - r.value) <= VALUE_TOL
        checked += 1
    assert checked == 60


def test_top_n_verifiers():
    """naive attains alpha* = p(Top_n) (the draft set is fixed); the LP verifier too; both valid."""
    p = np.array([0.4, 0.05, 0.3, 0.0, 0.25])
    q = np.array([0.1, 0.35, 0.3, 0.2, 0.05])
    for n in (1, 2, 3, 4):
        top = np.argsort(-q, kind="stable")[:n]
        for name in ("naive", "optimal"):
            prepared = VERIFIERS[name].prepare(p, q, n, sampling="top_n")
            law, acc = prepared.output_law(top)
            np.testing.assert_allclose(law, p, atol=LAW_TOL)
            assert acc == pytest.approx(p[top].sum(), abs=VALUE_TOL)
        naive = verifier_acceptance("naive", p, q, n, sampling="top_n")
        assert naive.value == pytest.approx(p[top].sum(), abs=1e-15)
    with pytest.raises(ValueError, match="top_n drafts are the 2 most likely"):
        VERIFIERS["naive"].prepare(p, q, 2, sampling="top_n").verify([1, 3], np.random.default_rng(0))
    with pytest.raises(ValueError, match="assumes draft sampling"):
        VERIFIERS["rrs"].prepare(p, q, 2, sampling="top_n")
    with pytest.raises(ValueError, match="at least 5 tokens with q > 0"):
        get_scheme("top_n").check(np.array([0.5, 0.5, 0, 0, 0, 0]), 5)


# -------------------------------------------------------------------------------- speedup model
def test_speedup_model():
    assert speedup(3.0, 4, 0.0) == 3.0
    assert speedup(3.0, 4, 0.25) == pytest.approx(1.5)
    np.testing.assert_allclose(speedup(np.array([2.0, 4.0]), 1, 1.0), [1.0, 2.0])
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="depth"):
            speedup(2.0, bad, 0.1)
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="cost_ratio"):
            speedup(2.0, 2, bad)


# ------------------------------------------------------------------------ toy models and oracles
class ToyLM:
    """A random language model over V tokens: the next-token law after each context (a tuple of
    tokens) is a Dirichlet draw seeded by the context, so every call returns the same law."""

    def __init__(self, V, seed, *, zeros=False, conc=1.0):
        self.V, self.seed, self.zeros, self.conc, self.memo = V, seed, zeros, conc, {}

    def __call__(self, ctx):
        if isinstance(ctx, tuple) and ctx in self.memo:  # numpy ints hash and compare as ints
            return self.memo[ctx]
        ctx = tuple(int(t) for t in ctx)
        if ctx not in self.memo:
            rng = np.random.default_rng([self.seed, len(ctx), *ctx])
            x = rng.dirichlet(np.full(self.V, self.conc))
            if self.zeros:
                x[rng.random(self.V) < 0.25] = 0.0
                if x.sum() == 0:
                    x[0] = 1.0
            self.memo[ctx] = x / x.sum()
        return self.memo[ctx]

    def rows(self, base=()):
        """``paths -> (len(paths), V)``: the laws after ``base + path``, as draft_tree wants."""
        return lambda paths: np.array([self(tuple(base) + tuple(path)) for path in paths])


def enumerate_trees(shape, scheme, draft, base):
    """Every drafted tree at context ``base`` with its probability: ``(tokens, parent, q_rows, prob)``,
    the product over internal nodes of the scheme's enumerated tuple law (independent per node)."""
    scheme = get_scheme(scheme)
    partial = [([-1], [-1], [()], [], 1.0, [0])]  # tokens, parent, paths, q rows, prob, frontier
    for b in parse_shape(shape).branching:
        grown = []
        for tokens, parent, paths, qs, prob, frontier in partial:
            laws = [draft(base + paths[v]) for v in frontier]
            options = [list(zip(*scheme.tuple_law(q, b))) for q in laws]
            for combo in itertools.product(*options):
                t, a, ps, pr, nxt = list(tokens), list(parent), list(paths), prob, []
                for v, (tup, w) in zip(frontier, combo):
                    pr *= w
                    for x in tup.tolist():
                        t.append(x)
                        a.append(v)
                        ps.append(paths[v] + (x,))
                        nxt.append(len(t) - 1)
                grown.append((t, a, ps, qs + laws, pr, nxt))
        partial = grown
    return [(t, a, ps, np.array(qs), pr) for t, a, ps, qs, pr, _ in partial]


def call_law(shape, scheme, verifier, target, draft, base):
    """Law of the tokens one target call emits at context ``base``, over every tree draw:
    the mixture of :func:`outcome_law` (the code under test) with the trees' probabilities."""
    law, memo = {}, {}  # the trees of one context share their prepared verifiers
    for tokens, parent, paths, qs, prob in enumerate_trees(shape, scheme, draft, base):
        p = np.array([target(base + path) for path in paths])
        tree = DraftTree(shape, scheme, tokens, parent, qs, p, memo=memo)
        for e, pr in outcome_law(tree, verifier).items():
            law[e] = law.get(e, 0.0) + prob * pr
    return law


def first_tokens_law(k, shape, scheme, verifier, target, draft, *, continue_exact=True):
    """Exact law of the first ``k`` emitted tokens of tree decoding from the empty context.

    Later calls start at the context the earlier ones reached and are enumerated the same way
    (``continue_exact``), or, to check one call of a large tree, continue by the target's own law."""
    laws = {}

    def F(base, k):
        if k == 0:
            return {(): 1.0}
        if base not in laws:
            laws[base] = call_law(shape, scheme, verifier, target, draft, base)
        out = {}
        for e, pr in laws[base].items():
            if len(e) >= k:
                tails = {e[:k]: 1.0}
            elif continue_exact:
                tails = {e + s: w for s, w in F(base + e, k - len(e)).items()}
            else:
                tails = {e + s: w for s, w in autoregressive_law(k - len(e), target, base + e).items()}
            for s, w in tails.items():
                out[s] = out.get(s, 0.0) + pr * w
        return out

    return F((), k)


def autoregressive_law(k, target, base=()):
    """The target's own law of the next ``k`` tokens (the oracle of losslessness)."""
    out = {}
    for s in itertools.product(range(target.V), repeat=k):
        pr = 1.0
        for i in range(k):
            pr *= target(base + s[:i])[s[i]]
        if pr > 0:
            out[s] = pr
    return out


def law_distance(a, b):
    return max(abs(a.get(s, 0.0) - b.get(s, 0.0)) for s in set(a) | set(b))


#: (verifier, scheme): every registered verifier under every scheme it accepts
COMBOS = [(v, s) for v in VERIFIERS for s in VERIFIERS[v].schemes]


def small_shapes(scheme):
    """Shapes whose every call can be enumerated: a chain (continuation and bonus) and a branching."""
    return [(2,)] if scheme == "hub" else [(1, 1), (2,)]


def large_shapes(scheme):
    """Two-level trees with branching (first call enumerated, later tokens by the target's law)."""
    return [(2, 2)] if scheme == "hub" else [(2, 1), (1, 2)]


def _combo_id(c):
    return f"{c[0]}-{c[1]}"


#: The fast lane's share of the sweep (one verifier per scheme); the slow lane runs every combination.
FAST_COMBOS = [
    ("rrs", "with_replacement"),
    ("rrs_without_replacement", "without_replacement"),
    ("greedy", "greedy"),
    ("spechub", "hub"),
    ("naive", "top_n"),
]


@pytest.mark.parametrize(
    "combo",
    [c if c in FAST_COMBOS else pytest.param(c, marks=pytest.mark.slow) for c in COMBOS if c[0] != "optimal"],
    ids=_combo_id,
)
def test_first_three_tokens_follow_the_target_exactly(combo):
    """Every verifier x scheme, V = 8, a chain and a branching tree: the exact law of the first three
    emitted tokens (every tree draw of every call enumerated, each node's exact output law) equals
    the target's autoregressive law to 1e-12. Targets with zeros, drafts without."""
    verifier, scheme = combo
    for seed, shape in enumerate(small_shapes(scheme)):
        target, draft = ToyLM(8, 100 + seed, zeros=True), ToyLM(8, 200 + seed, conc=0.5)
        law = first_tokens_law(3, shape, scheme, verifier, target, draft)
        assert law_distance(law, autoregressive_law(3, target)) <= LAW_TOL, (shape, verifier, scheme)
        assert abs(sum(law.values()) - 1.0) <= LAW_TOL


@pytest.mark.slow
@pytest.mark.parametrize("combo", COMBOS, ids=_combo_id)
def test_first_three_tokens_every_combo_and_two_level_trees(combo):
    """The optimal verifier too, and trees of depth 2 that branch at the root or below (the first
    call's whole law, up to its 3 tokens, enumerated over every tree draw)."""
    verifier, scheme = combo
    shapes = small_shapes(scheme) if verifier == "optimal" else []
    for seed, shape in enumerate(shapes):
        target, draft = ToyLM(8, 300 + seed, zeros=True), ToyLM(8, 400 + seed)
        law = first_tokens_law(3, shape, scheme, verifier, target, draft)
        assert law_distance(law, autoregressive_law(3, target)) <= LAW_TOL, (shape, verifier, scheme)
    for seed, shape in enumerate(large_shapes(scheme)):
        target, draft = ToyLM(8, 500 + seed, zeros=True), ToyLM(8, 600 + seed, conc=0.5)
        law = first_tokens_law(3, shape, scheme, verifier, target, draft, continue_exact=False)
        assert law_distance(law, autoregressive_law(3, target)) <= LAW_TOL, (shape, verifier, scheme)


def sim_shape(scheme):
    return (2, 2) if scheme == "hub" else (3, 2, 1)


@pytest.mark.parametrize(
    "combo",
    [c if c in FAST_COMBOS else pytest.param(c, marks=pytest.mark.slow) for c in COMBOS],
    ids=_combo_id,
)
def test_exact_recursion_equals_simulated_decoding(combo):
    """V = 16: on one drafted tree, the mean tokens of 2,000 simulated verifications (the verifier's own
    sampler, not its output law) lie within 4 standard errors of the exact recursion; over 200 freshly
    drafted trees, the paired mean of (simulated - exact) lies within 4 standard errors of 0."""
    verifier, scheme = combo
    target, draft = ToyLM(16, 7, zeros=True), ToyLM(16, 8, conc=0.5)
    rng = np.random.default_rng(11)
    tree = draft_tree(sim_shape(scheme), scheme, draft.rows(), rng, target=target.rows())
    exact = expected_tokens(tree, verifier)
    assert 1.0 <= exact <= tree.shape.depth + 1
    sims = np.array([len(verify_tree(tree, verifier, rng)) for _ in range(2000)])
    se = sims.std(ddof=1) / np.sqrt(sims.size)
    assert abs(sims.mean() - exact) <= 4 * se + 1e-12, (sims.mean(), exact, se)
    diffs = []
    for _ in range(200 if verifier != "optimal" else 60):
        t = draft_tree(sim_shape(scheme), scheme, draft.rows(), rng, target=target.rows())
        emitted = verify_tree(t, verifier, rng)
        assert 1 <= len(emitted) <= t.shape.depth + 1
        diffs.append(len(emitted) - expected_tokens(t, verifier))
    diffs = np.array(diffs)
    assert abs(diffs.mean()) <= 4 * diffs.std(ddof=1) / np.sqrt(diffs.size) + 1e-12


@pytest.mark.parametrize("combo", COMBOS, ids=_combo_id)
def test_one_node_tree_is_single_step_acceptance_plus_one(combo):
    """A tree of one level, averaged over the scheme's exact tuple law, gives 1 + the verifier's exact
    single-step acceptance (its closed form, docs/math.md#verifiers) to 1e-12; the node-alpha heuristic
    gives 1 + alpha*, which the optimal verifier attains."""
    verifier, scheme = combo
    target, draft = ToyLM(6, 21, zeros=True), ToyLM(6, 22)
    p, q = target(()), draft(())
    ns = (2,) if scheme == "hub" else ((1, 2) if verifier == "optimal" else (1, 2, 3))
    for n in ns:
        tuples, probs = get_scheme(scheme).tuple_law(q, n)
        mean, bound = 0.0, 0.0
        for x, w in zip(tuples, probs):
            tree = DraftTree(
                (n,), scheme, [-1, *x.tolist()], [-1] + [0] * n, q[None], np.vstack([p] + [p] * n)
            )
            mean += w * expected_tokens(tree, verifier)
            bound += w * node_alpha_heuristic(tree)
        single = verifier_acceptance(verifier, p, q, n, sampling=scheme, method="exact").value
        tol = VALUE_TOL if verifier == "optimal" else LAW_TOL
        assert abs(mean - (1.0 + single)) <= tol, (verifier, scheme, n, mean, single)
        alpha = optimal_acceptance(p, q, n, sampling=scheme).value
        assert abs(bound - (1.0 + alpha)) <= LAW_TOL
        assert mean <= bound + VALUE_TOL


def test_node_alpha_heuristic_recursion_by_hand():
    """B(v) = 1 + alpha*_v max_c B(c) on a 2 x 2 tree, against alpha* = 1 - TV at the n = 1 nodes."""
    target, draft = ToyLM(5, 1), ToyLM(5, 2)
    tree = draft_tree("2x2", "with_replacement", draft.rows(), np.random.default_rng(0), target=target.rows())
    below = [1.0 + np.minimum(tree.p[c], tree.q[c]).sum() for c in tree.children[0]]
    root = optimal_acceptance(tree.p[0], tree.q[0], 2).value
    assert node_alpha_heuristic(tree) == pytest.approx(1.0 + root * max(below), abs=1e-14)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("scheme", ["with_replacement", "without_replacement", "greedy", "hub", "top_n"])
def test_node_bounds_by_the_plan_equal_the_api(scheme, backend, monkeypatch):
    """alpha* of every internal node (numpy: node by node; torch: the evaluation plan batched on CPU
    tensors, one call per number of children, sequential n >= 3 and top_n through its numpy
    fallback) equals ``optimal_acceptance`` node by node to 1e-12, and the heuristic built on them is
    the same."""
    batched = []
    if backend == "torch":
        pytest.importorskip("torch")
        import mdsd_ot.backends.torch as tb

        real = tb.evaluate_batch

        def spy(*args, **kwargs):
            out = real(*args, **kwargs)
            batched.extend(out)
            return out

        monkeypatch.setattr(tb, "evaluate_batch", spy)
    target, draft = ToyLM(40, 31, zeros=True), ToyLM(40, 32)
    shape = "2,2" if scheme == "hub" else "3,2,1"  # (hub: two drafts at every node)
    rng = np.random.default_rng(5)
    tree = draft_tree(shape, scheme, draft.rows(), rng, target=target.rows())
    got = node_bounds(tree, backend=backend, device="cpu")
    for v in range(tree.n_internal):
        b = int(tree.children[v].size)
        alpha = optimal_acceptance(tree.p[v], tree.q[v], b, sampling=scheme).value
        assert got[v] == pytest.approx(alpha, abs=1e-12)
        assert node_bound(tree, v) == got[v]  # cached
    twin = DraftTree(tree.shape, scheme, tree.tokens, tree.parent, tree.q, tree.p)
    by_api = np.ones(tree.tokens.size)
    for v in range(tree.n_internal - 1, -1, -1):
        by_api[v] = 1.0 + node_bound(twin, v) * by_api[tree.children[v]].max()
    assert node_alpha_heuristic(tree, backend=backend, device="cpu") == pytest.approx(by_api[0], abs=1e-12)
    if backend == "torch" and scheme != "top_n":  # (top_n: not in the torch plan, numpy only)
        assert f"bound:{scheme}@2" in batched  # evaluated on the tensors, not by the fallback
    with pytest.raises(ValueError, match="backend"):
        node_bounds(twin, backend="gpu")


def test_tree_errors_are_actionable():
    law = ToyLM(4, 0)
    rng = np.random.default_rng(0)
    q1 = law(())[None]
    with pytest.raises(ValueError, match="has 3 nodes with the root"):
        DraftTree((2,), "with_replacement", [-1, 0], [-1, 0], q1)
    with pytest.raises(ValueError, match="must come before it"):
        DraftTree((1, 1), "with_replacement", [-1, 0, 1], [-1, 2, 0], np.vstack([q1, q1]))
    with pytest.raises(ValueError, match="children; the shape says"):
        DraftTree((2, 1), "with_replacement", [-1, 0, 1, 2, 3], [-1, 0, 0, 1, 1], np.vstack([q1] * 3))
    with pytest.raises(ValueError, match="one row per internal node"):
        DraftTree((2,), "with_replacement", [-1, 0, 1], [-1, 0, 0], np.vstack([q1, q1]))
    with pytest.raises(ValueError, match="sums to"):
        DraftTree((1,), "with_replacement", [-1, 0], [-1, 0], q1 * 2)
    tree = DraftTree((1,), "with_replacement", [-1, 0], [-1, 0], q1)
    with pytest.raises(ValueError, match="set_target"):
        expected_tokens(tree, "rrs")
    with pytest.raises(ValueError, match="must have shape"):
        tree.set_target(q1)
    with pytest.raises(ValueError, match="negative"):
        tree.set_target(np.vstack([q1, -q1]))
    tree.set_target(np.vstack([q1, q1]))
    with pytest.raises(ValueError, match="assumes draft sampling"):
        expected_tokens(tree, "greedy")
    with pytest.raises(ValueError, match="unknown verifier|choose"):
        expected_tokens(tree, "nope")
    with pytest.raises(TypeError, match="Generator"):
        verify_tree(tree, "rrs", 0)
    with pytest.raises(TypeError, match="Generator"):
        draft_tree("1x1", "with_replacement", law.rows(), 0)
    with pytest.raises(ValueError, match="one row per path"):
        draft_tree("2x2", "with_replacement", lambda paths: q1, rng)
    with pytest.raises(ValueError, match="at least 3 tokens with q > 0"):
        draft_tree(
            (3,), "without_replacement", lambda paths: np.array([[0.5, 0.5, 0.0, 0.0]] * len(paths)), rng
        )
    assert valid_verifiers("hub") == ["naive", "spechub", "optimal"]
    assert valid_verifiers("with_replacement", ["specinfer", "greedy"]) == ["rrs"]


@pytest.mark.parametrize("scheme", sorted({s for _, s in COMBOS}))
def test_verifiers_of_a_node_share_one_read_only_pair_bit_identically(scheme, monkeypatch):
    """A tree prepares every verifier of a node on one validated, normalised, read-only (p, q)
    (``DraftTree.node_pair``: one copy per node instead of one per node and verifier): no verifier
    writes to it (a write would raise), and every verifier's exact value and sampled tokens are
    bit-identical to those of verifiers prepared on fresh copies, as ``Verifier.prepare`` makes."""
    from mdsd_ot._validate import normalized_pair
    from mdsd_ot.trees.tree import DraftTree

    target, draft = ToyLM(12, 31, zeros=True), ToyLM(12, 32, conc=0.5)
    shape = sim_shape(scheme)
    tree = draft_tree(shape, scheme, draft.rows(), np.random.default_rng(3), target=target.rows())
    p, q = tree.node_pair(0)
    assert tree.node_pair(0)[0] is p and not p.flags.writeable and not q.flags.writeable
    ref = normalized_pair(tree.p[0], tree.q[0])
    assert np.array_equal(p, ref[0]) and np.array_equal(q, ref[1])
    names = valid_verifiers(scheme, shape=shape)

    def run():
        tree._prepared.clear()
        values = [expected_tokens(tree, name) for name in names]
        draws = [verify_tree(tree, name, np.random.default_rng(k)) for name in names for k in range(3)]
        return values, draws

    shared = run()
    monkeypatch.setattr(DraftTree, "node_pair", lambda self, v: normalized_pair(self.p[v], self.q[v]))
    assert run() == shared
