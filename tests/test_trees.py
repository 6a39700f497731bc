"""Draft trees: shapes, the deterministic top-n scheme, tree verification and its exact recursion."""

import itertools

import numpy as np
import pytest
from conftest import random_pair
from oracles import exact_alpha

from mdsd_ot import optimal_acceptance
from mdsd_ot._config import LAW_TOL, MAX_TREE_NODES, VALUE_TOL
from mdsd_ot.drafts import get_scheme
from mdsd_ot.trees import TreeShape, parse_shape, speedup
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
