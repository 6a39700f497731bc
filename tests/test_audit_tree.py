"""The tree audit (mdsd_ot.audit.audit_tree, mdsd-ot audit --tree), GBV, and the worked examples of biased
tree verifiers (examples/biased_tree_verifiers.py).

Every deviation the audit reports is checked against an independent computation: the chained-call law
of tests/test_trees.py (its own enumeration of drafted trees and its own chaining), summed to prefixes
here, and exact fractions for HSD on Sun et al.'s example."""

import importlib.util
import itertools
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from test_trees import ToyLM, enumerate_trees, first_tokens_law

from mdsd_ot._config import LAW_TOL
from mdsd_ot.audit import VerifierError, audit_tree, tree_audit_pairs
from mdsd_ot.cli import main
from mdsd_ot.trees import (
    TREE_VERIFIERS,
    DraftTree,
    TreeVerifier,
    compare_tree,
    expected_tokens,
    outcome_law,
    valid_verifiers,
    verify_tree,
)
from mdsd_ot.trees.verifiers.gbv import GBVVerifier, clipped_ratio_order

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_FILE = ROOT / "examples" / "biased_tree_verifiers.py"
_spec = importlib.util.spec_from_file_location("biased_tree_verifiers", EXAMPLE_FILE)
ex = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ex)

#: the battery pairs the tests audit on (all of them: ties, p = q and Sun's example included)
PAIRS = {name: (name, t, d) for name, t, d in tree_audit_pairs(3, seed=0)}
TEST_PAIRS = [PAIRS[n] for n in ("sharp", "ties", "equal", "sun")]
K = 2  # first tokens checked


class _Law(TreeVerifier):
    """A law(tree) function as a TreeVerifier, so that the test's own chained-call check can run it."""

    def __init__(self, fn):
        self.fn, self.name, self.paper = fn, fn.__name__, "test"

    def why_not(self, shape, scheme):
        return None

    def outcome_law(self, tree):
        return self.fn(tree)

    def expected_tokens(self, tree):
        return sum(pr * len(e) for e, pr in self.fn(tree).items())

    def verify(self, tree, rng):
        raise NotImplementedError


class _V:
    """A battery law with the ``V`` attribute the test's oracle reads."""

    def __init__(self, law):
        self.law, self.V = law, law(()).size

    def __call__(self, ctx):
        return self.law(tuple(ctx))


def independent_deviation(verifier, shape, scheme, target, draft, k=K):
    """max |P(stream starts with s) - P_target(s)| over strings of 1..k tokens, by the test's own
    enumeration and chaining (tests/test_trees.py), the prefix sums and the target's law written here."""
    law = first_tokens_law(k, shape, scheme, verifier, target, draft)
    V = target(()).size
    worst = 0.0
    for j in range(1, k + 1):
        for s in itertools.product(range(V), repeat=j):
            ours = math.fsum(pr for e, pr in law.items() if e[:j] == s)
            theirs = math.prod(float(target(s[:i])[s[i]]) for i in range(j))
            worst = max(worst, abs(ours - theirs))
    return worst


# ----------------------------------------------------------------------------- the library: silent
LIBRARY = [
    ("block", ["1x2", "1x3"], ["with_replacement", "without_replacement"]),
    ("traversal", ["2x1", "2x2", "3x1"], ["with_replacement", "without_replacement"]),
    ("gbv", ["2x1", "2x2", "3x1"], ["with_replacement"]),
    ("gbv", ["1x2"], ["without_replacement", "top_n"]),
    ("rrs", ["2x1", "2x2"], ["with_replacement"]),
]


@pytest.mark.parametrize("name, shapes, schemes", LIBRARY, ids=[f"{c[0]}-{c[2][0]}" for c in LIBRARY])
def test_library_tree_verifiers_are_silent(name, shapes, schemes):
    r = audit_tree(name, shapes, schemes, pairs=TEST_PAIRS, k=K, optimum=False)
    assert r.lossless and r.mode == "exact" and r.max_deviation <= LAW_TOL, r
    assert all(c.prefix is None and c.tree is None for c in r.cases)
    assert {(c.shape, c.scheme) for c in r.cases} >= {(s, sc) for s in shapes for sc in schemes[:1]}


# --------------------------------------------------------------------- the biased examples: flagged
#: (example, shape, scheme, biased?): three-plus shapes, two schemes; on drafts without replacement
#: the literal traversal rule is the library's and lossless
EXAMPLE_CASES = [
    ("gbv_mixed_ties", "2x1", "with_replacement", True),
    ("gbv_mixed_ties", "2x2", "with_replacement", True),
    ("gbv_mixed_ties", "3x1", "with_replacement", True),
    ("spectr_gbv", "1x2", "with_replacement", True),
    ("spectr_gbv", "2x2", "with_replacement", True),
    ("hsd", "1x2", "with_replacement", True),
    ("hsd", "1x3", "without_replacement", True),
    ("hsd_min", "1x3", "with_replacement", True),
    ("literal_traversal", "2x1", "with_replacement", True),
    ("literal_traversal", "2x2", "with_replacement", True),
    ("literal_traversal", "2x2", "without_replacement", False),
]


@pytest.mark.parametrize(
    "name, shape, scheme, biased", EXAMPLE_CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in EXAMPLE_CASES]
)
def test_biased_examples_are_flagged_with_the_exact_deviation(name, shape, scheme, biased):
    """Every case's max deviation equals the independent chained-call enumeration to 1e-12; the verdict
    is 'biased' exactly where that deviation is positive, and a flag names a prefix that deviates."""
    fn = getattr(ex, name)
    r = audit_tree(fn, shape, scheme, kind="law", pairs=TEST_PAIRS, k=K, optimum=False)
    assert r.mode == "exact" and r.kind == "law"
    for c in r.cases:
        target, draft = PAIRS[c.pair][1:]
        want = independent_deviation(_Law(fn), shape, scheme, _V(target), _V(draft))
        assert abs(c.max_deviation - want) <= LAW_TOL, (c.pair, c.max_deviation, want)
        assert c.lossless == (want <= LAW_TOL)
        if not c.lossless:
            assert abs(c.prefix_probability - c.target_probability) > 1e-9
            assert c.tree is not None and c.string is not None
    assert r.lossless is not biased
    if biased:
        assert r.max_deviation > 1e-3


# ------------------------------------------------------------------ HSD on Sun et al.'s example
SUN_P = (Fraction(1, 3), Fraction(2, 3))
SUN_Q = (Fraction(2, 3), Fraction(1, 3))


def hsd_sun_fraction(x):
    """HSD's one-call law on the chain ``x`` (two tokens) of Sun et al.'s example, in exact fractions,
    from the rule (the `max` capping; the laws are the same at every context)."""
    p, q = SUN_P, SUN_Q
    A = [Fraction(1), p[x[0]], p[x[0]] * p[x[1]]]
    B = [Fraction(1), q[x[0]], q[x[0]] * q[x[1]]]
    out = {}

    def add(e, w):
        if w:
            out[e] = out.get(e, 0) + w

    accept = min(Fraction(1), A[2] / B[2])
    for y in range(2):
        add(tuple(x) + (y,), accept * p[y])
    top, left = Fraction(1), 1 - accept
    stays, excess = [], []
    for i in range(2):
        top = max(top, A[i] / B[i])
        T = A[i] / top
        e = [max(T * p[y] - B[i] * q[y], Fraction(0)) for y in range(2)]
        f = [max(B[i] * q[y] - T * p[y], Fraction(0)) for y in range(2)]
        m = max(sum(e), sum(f))
        stays.append(Fraction(1) if m == 0 else sum(e) / m)
        excess.append(e)
    for i in (1, 0):
        law = excess[i] if sum(excess[i]) else list(p)
        for y in range(2):
            add(tuple(x[:i]) + (y,), left * stays[i] * law[y] / sum(law))
        left *= 1 - stays[i]
    assert left == 0
    return out


def test_hsd_on_sun_et_al_example_in_exact_fractions():
    """P(stream starts with B A) = 1/3 against the target's 2/9 (B = token 1, A = token 0): the audit's
    shortest prefix, its probabilities and the largest deviation 1/9 agree with exact fractions; HSD
    emits 7/3 tokens per call, above the optimum 20/9 (which no lossless verifier exceeds)."""
    call = {}
    for x in itertools.product(range(2), repeat=2):
        w = SUN_Q[x[0]] * SUN_Q[x[1]]
        for e, pr in hsd_sun_fraction(x).items():
            call[e] = call.get(e, 0) + w * pr
    assert sum(call.values()) == 1
    stream = {}  # the first two tokens: the same law at every context, so a short call continues afresh
    for e, pr in call.items():
        if len(e) >= 2:
            stream[e[:2]] = stream.get(e[:2], 0) + pr
        else:
            for e2, pr2 in call.items():
                s = (e + e2)[:2]
                stream[s] = stream.get(s, 0) + pr * pr2
    target = {s: SUN_P[s[0]] * SUN_P[s[1]] for s in itertools.product(range(2), repeat=2)}
    assert stream[(1, 0)] == Fraction(1, 3) and target[(1, 0)] == Fraction(2, 9)
    first = {y: sum(pr for s, pr in stream.items() if s[0] == y) for y in range(2)}
    dev = max([abs(stream[s] - target[s]) for s in target] + [abs(first[y] - SUN_P[y]) for y in range(2)])
    assert dev == Fraction(1, 9)
    tokens = sum(pr * len(e) for e, pr in call.items())
    assert tokens == Fraction(7, 3)

    r = audit_tree(ex.hsd, "1x2", "with_replacement", kind="law", pairs=[PAIRS["sun"]], k=2)
    c = r.worst
    assert not r.lossless and c.prefix == (1, 0)
    assert abs(c.prefix_probability - 1 / 3) <= LAW_TOL and abs(c.target_probability - 2 / 9) <= LAW_TOL
    assert abs(r.max_deviation - float(dev)) <= LAW_TOL
    assert abs(c.tokens_per_call - 7 / 3) <= LAW_TOL and abs(c.optimum - 20 / 9) <= 1e-9
    assert c.context == () and c.string == (1, 0)
    assert c.tree.path(2) == (1, 0)  # the drafted chain B A, accepted whole with probability 1
    text = str(r)
    assert "NOT lossless: biased" in text and "P(stream starts 1 0) = 0.333333" in text


# ------------------------------------------------------------------------------------------ GBV
def gbv_brute_force(shape, target, draft):
    """GBV's law on a K x L i.i.d. tree, written from scratch: paths rank lexicographically by
    (min(1, p/q), token) at each node; the chosen path is the highest drafted one; its draft laws are the
    conditional laws of the highest of K i.i.d. paths, from the law of every K-tuple of full paths
    (draft model); then block verification of that chain with those laws. Returns ``tree -> law``."""
    K, L, V = shape[0], len(shape), target(()).size

    def key(path):
        out = []
        for i, y in enumerate(path):
            p, q = target(path[:i]), draft(path[:i])
            out.append((min(1.0, p[y] / q[y]), y))
        return tuple(out)

    paths = list(itertools.product(range(V), repeat=L))
    mass = {w: math.prod(draft(w[:i])[w[i]] for i in range(L)) for w in paths}
    best_law = {}
    for tup in itertools.product(paths, repeat=K):
        top = max(tup, key=key)
        best_law[top] = best_law.get(top, 0.0) + math.prod(mass[w] for w in tup)

    def law(tree):
        drafted = [tree.path(v) for v in range(tree.tokens.size) if tree.depth[v] == L]
        best = max(drafted, key=key)
        qts = []
        for d in range(L):
            u = best[:d]
            law = np.array(
                [sum(pr for w, pr in best_law.items() if w[: d + 1] == u + (y,)) for y in range(V)]
            )
            qts.append(law / law.sum())
        chain = DraftTree(f"1x{L}", "with_replacement", [-1, *best], list(range(-1, L)), np.stack(qts))
        chain.set_target(np.stack([target(best[:i]) for i in range(L + 1)]))
        return outcome_law(chain, "block")

    return law


@pytest.mark.parametrize("shape", [(2,), (3,), (2, 1)])
def test_gbv_law_per_tree_against_a_brute_force(shape):
    """Every drafted tree (the test's own enumeration, V = 3, a pair with ties and one with zeros): GBV's
    exact law equals the brute force above to 1e-12; its expected tokens and its sampler agree."""
    for target, draft in [(ToyLM(3, 51, zeros=True), ToyLM(3, 52)), PAIRS["ties"][1:]]:
        brute = gbv_brute_force(shape, target, draft)
        for tokens, parent, paths, qs, prob in enumerate_trees(shape, "with_replacement", draft, ()):
            p = np.array([target(path) for path in paths])
            tree = DraftTree(shape, "with_replacement", tokens, parent, qs, p)
            got = outcome_law(tree, "gbv")
            want = brute(tree)
            assert max(abs(got.get(e, 0.0) - want.get(e, 0.0)) for e in set(got) | set(want)) <= LAW_TOL
            length = sum(pr * len(e) for e, pr in got.items())
            assert abs(expected_tokens(tree, "gbv") - length) <= LAW_TOL
    if shape != (2, 1):
        return
    rng = np.random.default_rng(3)
    n, counts = 1500, {}
    for _ in range(n):
        e = tuple(verify_tree(tree, "gbv", rng))
        counts[e] = counts.get(e, 0) + 1
    assert set(counts) <= set(got)
    for e, pr in got.items():
        assert abs(counts.get(e, 0) / n - pr) <= 4 * math.sqrt(pr * (1 - pr) / n) + 1 / n


@pytest.mark.parametrize("shape", [(2,), (2, 1), (3,), (2, 1, 1)])
def test_gbv_is_lossless_by_the_shared_chained_call_check(shape):
    """tests/test_trees.py's check: the first three tokens of chained calls (every tree of every call
    enumerated by the test's own enumeration) follow the target to 1e-12; targets with zeros."""
    V = 3 if len(shape) < 3 else 2
    target, draft = ToyLM(V, 61 + len(shape), zeros=True), ToyLM(V, 71 + len(shape), conc=0.5)
    law = first_tokens_law(3, shape, "with_replacement", "gbv", target, draft)
    want = {
        s: math.prod(target(s[:i])[s[i]] for i in range(3)) for s in itertools.product(range(V), repeat=3)
    }
    assert max(abs(law.get(s, 0.0) - w) for s, w in want.items()) <= LAW_TOL
    assert abs(sum(law.values()) - 1.0) <= LAW_TOL


def test_gbv_equals_block_at_k_1():
    """One path (K = 1): GBV is block verification, law and value, under every scheme block accepts."""
    rng = np.random.default_rng(8)
    for scheme in ["with_replacement", "without_replacement", "greedy", "top_n", "conditional_poisson"]:
        for i in range(2):
            V, L = 3 + i, 2 + i
            target, draft = ToyLM(V, 300 + i, zeros=True), ToyLM(V, 400 + i, conc=0.3)
            from mdsd_ot.trees import draft_tree

            tree = draft_tree((1,) * L, scheme, draft.rows(), rng, target=target.rows())
            a, b = outcome_law(tree, "gbv"), outcome_law(tree, "block")
            assert max(abs(a.get(e, 0.0) - b.get(e, 0.0)) for e in set(a) | set(b)) <= LAW_TOL
            assert abs(expected_tokens(tree, "gbv") - expected_tokens(tree, "block")) <= LAW_TOL


def test_clipped_ratio_order_is_one_order_with_ties_by_token_id():
    """The order GBV's path choice and skewed law share: ascending (min(1, p/q), token id), against numpy's
    lexsort on explicit keys; small integer weights make exact ties (p = q, and p >= q clipped to 1)."""
    rng = np.random.default_rng(4)
    for _ in range(200):
        V = int(rng.integers(2, 40))
        p, q = rng.integers(0, 4, V).astype(float), rng.integers(0, 4, V).astype(float)
        p[0] += p.sum() == 0
        q[-1] += q.sum() == 0
        p, q = p / p.sum(), q / q.sum()
        r = [min(1.0, p[y] / q[y]) if q[y] > 0 else float(p[y] > 0) for y in range(V)]
        assert clipped_ratio_order(p, q).tolist() == np.lexsort((np.arange(V), r)).tolist()


def test_gbv_is_registered_and_refuses_other_trees():
    assert "gbv" in TREE_VERIFIERS and isinstance(TREE_VERIFIERS["gbv"], GBVVerifier)
    assert "gbv" in valid_verifiers("with_replacement", shape="4x4")
    assert "gbv" in valid_verifiers("top_n", shape="1x3")
    assert "gbv" not in valid_verifiers("with_replacement", shape="4,2")
    assert "gbv" not in valid_verifiers("without_replacement", shape="2x2")
    v = GBVVerifier()
    assert "KxL" in v.why_not("2,2", "with_replacement")
    assert "i.i.d." in v.why_not("2x2", "without_replacement")
    assert v.why_not("2x2", "with_replacement") is None
    with pytest.raises(ValueError, match="cannot verify 2,2 trees"):
        audit_tree("gbv", "2,2", k=1)
    table = compare_tree(*PAIRS["near"][1:], "2x2", "with_replacement", verifiers="naive,gbv")
    assert table["gbv"].kind == "tree-level" and 0.0 <= table["gbv"].gap
    assert table["gbv"].tokens > table["naive"].tokens


def test_the_decoder_and_its_union_runs_evaluate_gbv():
    """The decoder's cells pick GBV up from the registry (K x L i.i.d. cells only), and a union run reads
    a K x L cell as the first-children sub-tree of the union tree, where GBV's value is that of the same
    tree built afresh."""
    from mdsd_ot.decode.config import DecodeConfig
    from mdsd_ot.trees import draft_forest, first_children

    config = DecodeConfig(trees=["2x3", "4,2"], schemes=["with_replacement", "without_replacement"])
    config.validate()
    assert "gbv" in config.verifiers_for("with_replacement", "2x3")
    assert "gbv" not in config.verifiers_for("with_replacement", "4,2")
    assert "gbv" not in config.verifiers_for("without_replacement", "2x3")
    target, draft = ToyLM(5, 90), ToyLM(5, 91)
    union_shape = "4,2,1"  # the union of 2x3 and 4,2
    (union,) = draft_forest([(union_shape, "with_replacement")], draft.rows(), np.random.default_rng(0),
                            target=target.rows())  # fmt: skip
    sub = first_children(union, "2x3")
    fresh = DraftTree("2x3", "with_replacement", sub.tokens, sub.parent, sub.q, sub.p)
    assert abs(expected_tokens(sub, "gbv") - expected_tokens(fresh, "gbv")) <= LAW_TOL


# ------------------------------------------------------------------------------------ sampling mode
def _always_first_path(tree, rng):
    """Grossly biased: the first drafted path, whole, then a bonus token from the target."""
    v = 0
    while tree.children[v].size:
        v = int(tree.children[v][0])
    return list(tree.path(v)) + [int(rng.choice(tree.vocab, p=tree.p[v]))]


def test_sampling_mode_flags_a_gross_bias_and_passes_a_lossless_verifier():
    pairs = [PAIRS["mismatched"]]
    bad = audit_tree(_always_first_path, "2x1", pairs=pairs, trials=600, k=2, seed=1, optimum=False)
    assert bad.mode == "sample" and not bad.lossless and bad.pvalue < 1e-6
    good = audit_tree(
        lambda t, rng: verify_tree(t, "traversal", rng), "2x1", pairs=pairs, trials=600, k=2, seed=1,
        optimum=False,
    )  # fmt: skip
    assert good.lossless and good.pvalue >= 0.01
    c = good.cases[0]
    assert 0.0 < c.detectable < 0.2 and c.df >= 1
    assert abs(c.tokens_per_call - 1.6) <= 0.3  # the first calls' mean, 2x1 trees: between 1 and 2
    assert "no evidence of bias" in str(good) and "NOT lossless" in str(bad)


# ------------------------------------------------------------------------------------- bad input
def test_a_verifier_that_raises_or_returns_garbage_is_named_with_the_tree():
    def boom(tree):
        raise ZeroDivisionError("oops")

    with pytest.raises(VerifierError, match=r"law raised ZeroDivisionError on pair sun .* paths \["):
        audit_tree(boom, "2x1", kind="law", pairs=[PAIRS["sun"]], k=1, optimum=False)
    for bad, match in [
        (lambda t: {(0,): 0.5}, "sum to 0.5"),
        (lambda t: {(1, 1, 1): 1.0}, "not a path"),
        (lambda t: {(7,): 1.0}, "outside"),
        (lambda t: [(0,)], "must return a dict"),
        (lambda t: {(): 1.0}, "empty"),
    ]:
        with pytest.raises(VerifierError, match=match):
            audit_tree(bad, "2x1", kind="law", pairs=[PAIRS["sun"]], k=1, optimum=False)
    with pytest.raises(VerifierError, match="not a path"):
        audit_tree(lambda t, rng: [1, 1, 1, 1], "2x1", pairs=[PAIRS["sun"]], k=1, trials=2, optimum=False)
    with pytest.raises(VerifierError, match="kind='law'"):  # a law audited as a sampler
        audit_tree(lambda t, rng: ex.hsd(t), "1x2", pairs=[PAIRS["sun"]], k=1, trials=2, optimum=False)
    with pytest.raises(ValueError, match="kind='law'"):
        audit_tree(lambda t, rng: [0], "2x1", mode="exact")
    with pytest.raises(ValueError, match="kind must be"):
        audit_tree(lambda t: {}, "2x1", kind="laws")
    with pytest.raises(ValueError, match="k .* must be an int >= 1"):
        audit_tree("traversal", "2x1", k=0)


def test_cli_exit_status(capsys):
    assert main(["audit", "--tree", "gbv", "--shape", "2x1", "--k", "1", "--no-optimum", "--vocab", "2"]) == 0
    out = capsys.readouterr().out
    assert "lossless" in out and "tree audit of gbv" in out
    target = f"{EXAMPLE_FILE}:hsd"
    assert (
        main(["audit", "--tree", "--law", target, "--shape", "1x2", "--k", "2", "--vocab", "2", "--json"])
        == 1
    )
    assert '"lossless": false' in capsys.readouterr().out
    assert main(["audit", "--tree", "--law", f"{EXAMPLE_FILE}:_paths", "--shape", "2x1", "--k", "1"]) == 2
    assert "examples" in capsys.readouterr().err
    assert main(["audit", "rrs", "--p", "0.5,0.5", "--q", "0.5,0.5", "--shape", "2x1"]) == 2
    assert "--tree" in capsys.readouterr().err
