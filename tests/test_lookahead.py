"""The lookahead tree verifier (soft one-step couplings; docs/math.md#lookahead-verification).

Oracles: an independent enumeration of the verifier's coins written here (every try, stop and added
token followed, the node's one-step kernel and its mean pass masses recomputed by enumerating the
scheme's tuple law, nothing taken from the verifier but its order rule), the target's autoregressive
law over chained calls (tests/test_trees.py's enumeration of every drafted tree of every call), block
verification on chains, node-wise ``optimal`` on one level, the causal-LP optimum, and Monte Carlo."""

import math

import numpy as np
import pytest
from test_trees import ToyLM, autoregressive_law, enumerate_trees, first_tokens_law, law_distance

from mdsd_ot._config import LAW_TOL, VALUE_TOL
from mdsd_ot.drafts import get_scheme
from mdsd_ot.trees import (
    TREE_VERIFIERS,
    DraftTree,
    TreeVerifier,
    draft_tree,
    expected_tokens,
    outcome_law,
    toy_models,
    tree_optimum,
    valid_verifiers,
    verify_tree,
)
from mdsd_ot.trees import enumerate_trees as enumerate_classes
from mdsd_ot.trees.verifiers.lookahead import LookaheadVerifier
from mdsd_ot.verifiers import get_verifier

PLAIN = LookaheadVerifier(order="draft", symmetric=False)
DEFAULT = TREE_VERIFIERS["lookahead"]
VARIANTS = {
    "default": DEFAULT,  # value order, orbit average
    "plain": PLAIN,  # draft order, the node-wise kernel itself
    "scaled": LookaheadVerifier(coupling="scaled", order="draft", symmetric=False),
    "quality": LookaheadVerifier(order="quality"),
    "rsd": LookaheadVerifier(coupling="scaled", one_step="rrs_without_replacement"),
}


# --------------------------------------------------------------------- independent coin enumeration
def _tuple_law(tree, v):
    q = tree.q[v]
    tuples, probs = get_scheme(tree.scheme.name).tuple_law(q, int(tree.children[v].size))
    return [(tuple(int(x) for x in t), float(w)) for t, w in zip(tuples, probs) if w > 0]


def _node_kernel(tree, v, ver, memo):
    """``(pi, rho)``: ``pi(t)`` the one-step kernel on the distinct drafted tokens of the ordered tuple
    ``t`` (dict token -> mass), ``rho`` its mean pass mass per token, by enumeration of the tuple law."""
    b = int(tree.children[v].size)
    key = (tree.p[v].tobytes(), tree.q[v].tobytes(), b, tree.scheme.name, ver.symmetric)
    if key in memo:
        return memo[key]
    prepared = tree.prepared("optimal", v)
    law = _tuple_law(tree, v)
    kernel = {}
    for t, _ in law:
        out, _ = prepared.output_law(np.array(t))
        kernel[t] = {y: float(out[y]) for y in set(t)}
    if ver.symmetric and tree.scheme.name in ("with_replacement", "without_replacement"):
        groups = {}
        for t, w in law:
            groups.setdefault(tuple(sorted(t)), []).append((t, w))
        sym = {}
        for members in groups.values():
            total = sum(w for _, w in members)
            avg = {y: sum(w * kernel[t][y] for t, w in members) / total for y in set(members[0][0])}
            for t, _ in members:
                sym[t] = avg
        kernel = sym
    rho = np.zeros(tree.vocab)
    for t, w in law:
        for y, m in kernel[t].items():
            rho[y] += w * m
    memo[key] = (kernel, rho)
    return memo[key]


def brute_law(tree, ver, memo=None):
    """The law of one call, by following every outcome of every coin (floats, written independently)."""
    memo = {} if memo is None else memo
    law = {}
    n_int = tree.n_internal

    def add(path, dist, mass):
        for y in range(tree.vocab):
            if dist[y] > 0:
                law[path + (y,)] = law.get(path + (y,), 0.0) + mass * dist[y]

    def enter(v, w, reach):
        """Add what happens when ``v`` is entered with weight ``w`` at probability ``reach``; return the
        probability that the call goes on (nothing stopped in ``v``'s subtree)."""
        path = tree.path(v)
        p = tree.p[v]
        if v >= n_int:
            add(path, p / p.sum(), reach * w)
            return reach * (1 - w)
        kids = [int(c) for c in tree.children[v]]
        t = tuple(int(tree.tokens[c]) for c in kids)
        one = len(t) == 1 and tree.scheme.name != "top_n"
        if ver.coupling == "scaled" and not one and (w < 1 or ver.one_step != "optimal"):
            # the one-step verifier prepared on (w p, 1 - w) against (q, 0): its law, as it is
            pp, qq = np.append(w * p, 1.0 - w), np.append(tree.q[v], 0.0)
            prepared = get_verifier(ver.one_step).prepare(
                pp, qq, len(t), sampling=tree.scheme.name, normalize=True
            )
            out, _ = prepared.output_law(np.array(t))
            L = {y: float(out[y]) for y in set(t)}
            rest = np.array([0.0 if y in L else float(out[y]) for y in range(tree.vocab)])
            stop = float(out[-1])
        else:
            if one:  # one child: the kernel is min(1, p/q)
                x = t[0]
                kernel, rho = {x: min(1.0, p[x] / tree.q[v][x])}, np.minimum(p, tree.q[v])
            else:
                kernels, rho = _node_kernel(tree, v, ver, memo)
                kernel = kernels[t]
            keep = {y: (min(1.0, w * p[y] / rho[y]) if rho[y] > 0 else 1.0) for y in kernel}
            passed = {y: kernel[y] * keep[y] for y in kernel}
            fail = 1.0 - sum(passed.values())
            res = np.append(np.maximum(w * p - rho, 0.0), 1.0 - w)
            Z = res.sum()
            L = {y: passed[y] + (fail * res[y] / Z if Z > 0 else 0.0) for y in kernel}
            rest = np.array([0.0 if y in kernel or Z == 0 else fail * res[y] / Z for y in range(tree.vocab)])
            stop = fail * res[-1] / Z if Z > 0 else 0.0
        counts = {y: t.count(y) for y in set(t)}
        share = np.array([L[x] / counts[x] for x in t])
        order = ver._order(tree, v, share)
        left = 1.0  # 1 - the shares of the children tried so far
        for k in order:
            if share[k] > 0 and left > 0:
                reach = enter(kids[k], min(1.0, share[k] / left), reach)
            left -= share[k]
        if v == 0 or rest.sum() + stop == 0:
            c = 1.0
        else:
            c = rest.sum() / (rest.sum() + stop)
        if reach * c > 0:
            add(path, rest / rest.sum() if rest.sum() > 0 else p, reach * c)
        return reach * (1 - c)

    left = enter(0, 1.0, 1.0)
    assert left <= 1e-15
    return law


class Brute(TreeVerifier):
    """The coin enumeration as a tree verifier, for tests/test_trees.py's chained-call enumeration."""

    name = "brute-lookahead"

    def __init__(self, ver):
        self.ver, self.memo = ver, {}

    def why_not(self, shape, scheme):
        return None

    def outcome_law(self, tree):
        return brute_law(tree, self.ver, self.memo)

    def expected_tokens(self, tree):  # pragma: no cover - not used
        raise NotImplementedError

    def verify(self, tree, rng):  # pragma: no cover - not used
        raise NotImplementedError


# ------------------------------------------------------------------------------------ losslessness
#: (variant, scheme, shape, V, k): the first k tokens of chained calls
CHAINED = [
    ("default", "with_replacement", (2, 1), 3, 3),
    ("default", "with_replacement", (2, 2), 3, 2),
    ("default", "without_replacement", (2, 1), 4, 2),
    ("default", "greedy", (2, 1), 4, 2),
    ("default", "hub", (2, 2), 3, 2),
    ("default", "top_n", (2, 1), 4, 3),
    ("default", "conditional_poisson", (2, 1), 3, 2),
    ("plain", "with_replacement", (3, 1), 3, 2),
    ("scaled", "with_replacement", (2, 1), 3, 2),
    ("quality", "without_replacement", (3, 1), 3, 2),
    ("rsd", "without_replacement", (2, 2), 3, 2),
]


@pytest.mark.parametrize("case", CHAINED, ids=lambda c: f"{c[0]}-{c[1]}-{','.join(map(str, c[2]))}-V{c[3]}")
def test_chained_calls_follow_the_target(case):
    """Chained calls, every drafted tree of every call enumerated, each tree's law by the coin
    enumeration above: the law of the first k emitted tokens equals the target's to 1e-12. Context-
    dependent random laws; the target has zeros (drafted tokens of target probability 0)."""
    name, scheme, shape, V, k = case
    ver = VARIANTS[name]
    assert ver.why_not(shape, scheme) is None
    target, draft = ToyLM(V, 31 + V, zeros=True), ToyLM(V, 41 + V, conc=0.5)
    law = first_tokens_law(k, shape, scheme, Brute(ver), target, draft)
    assert law_distance(law, autoregressive_law(k, target)) <= LAW_TOL
    assert abs(math.fsum(law.values()) - 1.0) <= LAW_TOL


#: (variant, scheme, shape): random trees whose exact law is checked against the coin enumeration
BRUTE = [
    (name, scheme, shape)
    for name in VARIANTS
    for scheme, shape in [
        ("with_replacement", (3, 2, 1)),
        ("without_replacement", (2, 2, 1)),
        ("greedy", (3, 1)),
        ("hub", (2, 2)),
        ("top_n", (2, 2)),
        ("conditional_poisson", (2, 1)),
    ]
    if name in ("default", "plain") or scheme == "with_replacement" and name != "rsd"
] + [("rsd", "without_replacement", (2, 2, 1)), ("rsd", "without_replacement", (3, 1))]


@pytest.mark.parametrize("name, scheme, shape", BRUTE)
def test_exact_law_equals_the_coin_enumeration(name, scheme, shape):
    """Random drafted trees (V 3-5, targets with zeros, drafts near one-hot or flat): the verifier's
    outcome law and expected tokens equal the coin enumeration to 1e-12; the law sums to one."""
    ver = VARIANTS[name]
    rng = np.random.default_rng(7)
    for i in range(3):
        V = 3 + i
        target = ToyLM(V, 500 + i, zeros=True, conc=0.5)
        draft = ToyLM(V, 600 + i, conc=0.1 if i % 2 else 1.0)
        tree = draft_tree(shape, scheme, draft.rows(), rng, target=target.rows())
        exact = brute_law(tree, ver)
        got = outcome_law(tree, ver)
        assert law_distance(got, exact) <= LAW_TOL
        assert abs(math.fsum(got.values()) - 1.0) <= LAW_TOL
        length = math.fsum(p * len(e) for e, p in exact.items())
        assert abs(expected_tokens(tree, ver) - length) <= LAW_TOL


# ------------------------------------------------------------------------- chains, one level, means
@pytest.mark.parametrize("scheme", ["with_replacement", "without_replacement", "greedy", "top_n"])
def test_equals_block_on_chains_and_optimal_on_one_level(scheme):
    """Per drafted tree: on 1x3 chains the value and law equal block verification's; on one level
    (3 drafts; hub: 2) the value equals node-wise ``optimal``'s (without orbit averaging), and the mean
    over the draws equals it with the default."""
    rng = np.random.default_rng(3)
    for i in range(3):
        target, draft = ToyLM(5, 70 + i, zeros=True), ToyLM(5, 80 + i, conc=0.4)
        chain = draft_tree((1, 1, 1), scheme, draft.rows(), rng, target=target.rows())
        assert abs(expected_tokens(chain, "lookahead") - expected_tokens(chain, "block")) <= LAW_TOL
        assert law_distance(outcome_law(chain, "lookahead"), outcome_law(chain, "block")) <= LAW_TOL
    n = 3
    target, draft = ToyLM(4, 5, zeros=True), ToyLM(4, 6)
    mean = {"optimal": 0.0, "lookahead": 0.0}
    memo = {}
    for tokens, parent, paths, qs, prob in enumerate_trees((n,), scheme, draft, ()):
        p = np.array([target(path) for path in paths])
        tree = DraftTree((n,), scheme, tokens, parent, qs, p, memo=memo)
        assert abs(expected_tokens(tree, PLAIN) - expected_tokens(tree, "optimal")) <= LAW_TOL
        for name in mean:
            mean[name] += prob * expected_tokens(tree, name)
    assert abs(mean["lookahead"] - mean["optimal"]) <= LAW_TOL


@pytest.mark.parametrize("shape", [(2, 2), (3, 1), (2, 1, 1)])
def test_optimal_on_top_n_trees(shape):
    """Deterministic top_n trees: the value is 1 + the sum over non-root nodes of the target probability
    of the node's path (computed from the models: the paths by sorting the draft's laws), the optimum
    over all valid verifiers (docs/math.md#top-n-trees)."""
    for seed in range(3):
        V = 4 + seed
        target, draft = ToyLM(V, 70 + seed, zeros=True), ToyLM(V, 80 + seed)
        tree = draft_tree(shape, "top_n", draft.rows(), np.random.default_rng(0), target=target.rows())
        paths, total = [()], 1.0
        for b in shape:
            nxt = []
            for path in paths:
                q = draft(path)
                for t in sorted(range(V), key=lambda y: (-q[y], y))[:b]:
                    nxt.append(path + (t,))
                    prob = 1.0
                    for i, tok in enumerate(path + (t,)):
                        prob *= target((path + (t,))[:i])[tok]
                    total += prob
            paths = nxt
        assert abs(expected_tokens(tree, "lookahead") - total) <= LAW_TOL


#: (scheme, shape, V, seed, temperature, noise): toy model pairs, sharp and mismatched drafts included
MEANS = [
    ("with_replacement", "2,1", 3, 11, 1.0, 2.5),
    ("with_replacement", "2,2", 3, 7, 0.4, 1.0),
    ("without_replacement", "2,1", 4, 5, 0.7, 1.5),
    ("without_replacement", "2,1,1", 3, 2, 1.0, 1.0),
    ("greedy", "2,1", 4, 4, 0.7, 1.0),
]


@pytest.mark.parametrize("scheme, shape, V, seed, temperature, noise", MEANS)
def test_mean_between_node_wise_verifiers_and_the_optimum(scheme, shape, V, seed, temperature, noise):
    """Averaged over every drafted tree: every thinned variant is at least node-wise ``optimal`` (the
    theorem), the default and the plain one at least ``traversal`` too (measured), every variant at most
    the causal-LP optimum; the default strictly above both node-wise verifiers here."""
    target, draft = toy_models(V, seed=seed, temperature=temperature, noise=noise)
    opt = tree_optimum(target, draft, shape, scheme)
    assert opt.success
    trees = list(enumerate_classes(target, draft, shape, scheme).trees())
    names = ["optimal", "traversal"]
    means = {n: math.fsum(pr * expected_tokens(t, n) for t, pr in trees) for n in names}
    for name in ("default", "plain", "quality", "scaled"):
        value = math.fsum(pr * expected_tokens(t, VARIANTS[name]) for t, pr in trees)
        floor = max(means.values()) if name in ("default", "plain") else means["optimal"]
        if name != "scaled":
            assert value >= floor - LAW_TOL, (name, value, means)
        assert value <= opt.value + VALUE_TOL, (name, value, opt.value)
        if name == "default":
            assert value > max(means.values()) + 1e-3, (value, means)


# ------------------------------------------------------------------------------------------ sampling
@pytest.mark.parametrize(
    "scheme, shape, fresh", [("with_replacement", (3, 2, 1), 100), ("without_replacement", (2, 2), 0)]
)
def test_sampling_agrees_with_the_exact_law(scheme, shape, fresh):
    """V = 8: 2,000 sampled calls of one tree lie within 4 standard errors of its exact expected tokens,
    every emitted sequence has positive exact probability, and the paired mean (sampled - exact) over
    freshly drafted trees lies within 4 standard errors of 0."""
    target, draft = ToyLM(8, 7, zeros=True), ToyLM(8, 8, conc=0.5)
    rng = np.random.default_rng(12)
    tree = draft_tree(shape, scheme, draft.rows(), rng, target=target.rows())
    exact = expected_tokens(tree, "lookahead")
    law = outcome_law(tree, "lookahead")
    sims = []
    for _ in range(2000):
        e = tuple(verify_tree(tree, "lookahead", rng))
        assert law.get(e, 0.0) > 0.0, e
        sims.append(len(e))
    sims = np.array(sims)
    assert abs(sims.mean() - exact) <= 4 * sims.std(ddof=1) / np.sqrt(sims.size) + 1e-12
    diffs = []
    for _ in range(fresh):
        t = draft_tree(shape, scheme, draft.rows(), rng, target=target.rows())
        diffs.append(len(verify_tree(t, "lookahead", rng)) - expected_tokens(t, "lookahead"))
    if fresh:
        diffs = np.array(diffs)
        assert abs(diffs.mean()) <= 4 * diffs.std(ddof=1) / np.sqrt(diffs.size) + 1e-12


# --------------------------------------------------------------------------- registry, errors, hooks
def test_registry_validity_and_errors():
    assert "lookahead" in TREE_VERIFIERS and TREE_VERIFIERS["lookahead"] is DEFAULT
    assert "lookahead" in valid_verifiers("without_replacement", shape="3,1")
    assert "lookahead" in valid_verifiers("conditional_poisson", shape="2,2")
    assert "lookahead" not in valid_verifiers("hub", shape="3,2")
    assert "exactly 2 children" in DEFAULT.why_not("3,2", "hub")
    assert DEFAULT.covers("with_replacement") and DEFAULT.covers("greedy") and DEFAULT.covers("top_n")
    assert not DEFAULT.covers("without_replacement") and DEFAULT.covers("without_replacement", "1x4")
    with pytest.raises(ValueError, match="coupling"):
        LookaheadVerifier(coupling="nope")
    with pytest.raises(ValueError, match="order"):
        LookaheadVerifier(order="random")
    target, draft = ToyLM(4, 1), ToyLM(4, 2)
    tree = draft_tree("2,1", "with_replacement", draft.rows(), np.random.default_rng(0))
    with pytest.raises(ValueError, match="set_target"):
        expected_tokens(tree, "lookahead")
    tree.set_target(np.array([target(tree.path(v)) for v in range(tree.tokens.size)]))
    with pytest.raises(TypeError, match="Generator"):
        DEFAULT.verify(tree, 0)


def test_the_decoder_runs_it_where_it_runs_at_full_vocabulary():
    from mdsd_ot.decode import runs_at

    assert runs_at("lookahead", "with_replacement", 151_936)
    assert not runs_at("lookahead", "without_replacement", 151_936, shape="4,2,2,1")
    assert runs_at("lookahead", "without_replacement", 151_936, shape="1x4")
    assert runs_at("lookahead", "without_replacement", 32)


def test_degenerate_inputs_give_no_nan():
    """The draft equal to the target (every 0/0 branch), one-hot drafts and targets with zeros: the law
    sums to one, the value lies in [1, depth + 1], and a chain drafted from the target is kept whole."""
    for target, draft in [(ToyLM(4, 5), ToyLM(4, 5)), (ToyLM(4, 9, zeros=True), ToyLM(4, 10, conc=0.02))]:
        cases = [("with_replacement", (2, 2)), ("without_replacement", (2, 1)), ("greedy", (2, 1))]
        for scheme, shape in cases:
            rng = np.random.default_rng(1)
            tree = draft_tree(shape, scheme, draft.rows(), rng, target=target.rows())
            law = outcome_law(tree, "lookahead")
            assert all(np.isfinite(list(law.values())))
            assert abs(math.fsum(law.values()) - 1.0) <= LAW_TOL
            assert 1.0 <= expected_tokens(tree, "lookahead") <= len(shape) + 1 + LAW_TOL
    same = ToyLM(4, 5)
    rng = np.random.default_rng(2)
    chain = draft_tree((1, 1, 1), "with_replacement", same.rows(), rng, target=same.rows())
    assert abs(expected_tokens(chain, "lookahead") - 4.0) <= LAW_TOL


def test_acceptance_table_bins_are_the_searchsorted_bincount_bits():
    """The kernel behind ``order="value"``'s tables (compiled, and its Python twin at small V) gives the
    bits of numpy's ``searchsorted`` + ``bincount`` it replaced: ratios exactly on grid points, 0, 1,
    zero target mass, subnormals, and full-vocabulary rows as the verifier builds them."""
    import oracles

    from mdsd_ot._kernels import dispatch
    from mdsd_ot._kernels.verifiers import ratio_bin_sums
    from mdsd_ot.trees.verifiers.lookahead import _GRID

    rng = np.random.default_rng(37)
    cases = []
    for V in (1, 2, 7, 300, 152_064):
        p = rng.dirichlet(np.full(V, 0.3))
        p[rng.random(V) < 0.1] = 0.0
        p[rng.random(V) < 0.02] = 5e-320
        rho = np.minimum(p, rng.dirichlet(np.full(V, 0.3)))
        on_grid = rng.random(V) < 0.2
        rho[on_grid] = p[on_grid] * rng.choice(_GRID, on_grid.sum())  # s = rho / p may round off the grid
        k = min(V, 3)
        rho[:k] = p[:k] * np.array([0.0, 1.0, 0.5])[:k]
        cases.append((p, rho))
    for p, rho in cases:
        want = oracles.ratio_bin_sums_slow(p, rho, _GRID)
        for kernel in (ratio_bin_sums, dispatch.python_twin(ratio_bin_sums)):
            got = kernel(p, rho, _GRID)
            for g, w in zip(got, want):
                assert np.array_equal(g, w), (p.size, np.flatnonzero(g != w))
