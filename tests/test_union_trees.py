"""One drafted tree for every smaller shape (docs/math.md#union-trees): the first-children sub-tree of a
drafted tree has the smaller shape's own law, by enumeration of every drafted tree."""

import zlib

import numpy as np
import pytest

from mdsd_ot.drafts import SCHEMES, get_scheme
from mdsd_ot.trees import (
    draft_forest,
    draft_tree,
    expected_tokens,
    first_children,
    is_subshape,
    parse_shape,
    union_shape,
)

NESTED = [name for name, s in SCHEMES.items() if s.nested_draws]
NOT_NESTED = [name for name, s in SCHEMES.items() if not s.nested_draws]


def _law(V, seed):
    """A context-dependent random law: path -> q (each path gets its own Dirichlet draw)."""

    def law(path):
        rng = np.random.default_rng([seed, len(path), *path])
        return rng.dirichlet(np.full(V, 0.7))

    return law


def _tree_law(shape, scheme, law) -> dict:
    """Every drafted tree of ``shape`` as its node tokens in breadth-first order -> probability,
    enumerated from the scheme's ordered tuple law at each node (independent of the drafting code).
    The readable reference for :func:`_tree_law_arrays` (checked against it on small shapes)."""
    shape, scheme = parse_shape(shape), get_scheme(scheme)
    states = [((), [()], 1.0)]  # (tokens so far, paths of the current level, probability)
    for b in shape.branching:
        nxt = []
        for tokens, level, prob in states:
            partial = [(tokens, [], prob)]
            for path in level:
                tuples, probs = scheme.tuple_law(law(path), b)
                partial = [
                    (tk + tuple(int(x) for x in t), lv + [path + (int(x),) for x in t], pr * float(w))
                    for tk, lv, pr in partial
                    for t, w in zip(tuples, probs)
                ]
            nxt.extend(partial)
        states = nxt
    out: dict = {}
    for tokens, _, prob in states:
        out[tokens] = out.get(tokens, 0.0) + prob
    return out


def _distinct_rows(rows):
    """``(distinct rows in lexicographic order, index of each row's distinct row)``: rows of small
    tokens are coded as one integer each (base max + 1) so that a 1-d sort does the work."""
    base = int(rows.max(initial=0)) + 1
    if rows.shape[1] == 0 or base ** rows.shape[1] >= 2**62:
        keys, inverse = np.unique(rows, axis=0, return_inverse=True)
        return keys, inverse.ravel()
    codes = rows @ (base ** np.arange(rows.shape[1] - 1, -1, -1, dtype=np.int64))
    _, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
    return rows[first], inverse.ravel()


def _group(tokens, prob):
    """Distinct rows of ``tokens`` (sorted) and the summed probability of each."""
    keys, inverse = _distinct_rows(tokens)
    return keys, np.bincount(inverse, weights=prob, minlength=len(keys))


def _tree_law_arrays(shape, scheme, law):
    """:func:`_tree_law` as arrays: the same enumeration, one outcome per row (node tokens in
    breadth-first order), expanded node by node with numpy and the scheme's tuple law fetched once per
    distinct path. Returns ``(tokens (T, nodes), probs (T,))`` with distinct rows, sorted."""
    shape, scheme = parse_shape(shape), get_scheme(scheme)
    tokens, prob = np.zeros((1, 0), dtype=np.int64), np.ones(1)
    level = [[]]  # each node of the current level as the token columns of its path
    for b in shape.branching:
        nxt = []
        for cols in level:
            paths, inverse = _distinct_rows(tokens[:, cols])
            laws = [scheme.tuple_law(law(tuple(int(x) for x in path)), b) for path in paths]
            K = max(len(w) for _, w in laws)
            table = np.zeros((len(paths), K, b), dtype=np.int64)
            weight = np.zeros((len(paths), K))
            valid = np.zeros((len(paths), K), dtype=bool)
            for i, (t, w) in enumerate(laws):
                table[i, : len(w)], weight[i, : len(w)], valid[i, : len(w)] = t, w, True
            keep = valid[inverse].ravel()  # drop the padding, keep every tuple the law returned
            start = tokens.shape[1]
            tokens = np.concatenate([np.repeat(tokens, K, axis=0), table[inverse].reshape(-1, b)], axis=1)[
                keep
            ]
            prob = (np.repeat(prob, K) * weight[inverse].ravel())[keep]
            nxt.extend(cols + [start + j] for j in range(b))
        level = nxt
    return _group(tokens, prob)


def _first_children_columns(big, small) -> list:
    """The breadth-first node columns of the first-children sub-tree of ``small`` in the big tree's
    token rows (node k of the big tree is column k - 1: no root entry)."""
    return [k - 1 for k in _first_children_nodes(big, small)]


def _first_children_nodes(big, small) -> list:
    """The big tree's breadth-first node numbers (root 0) of its first-children sub-tree ``small``."""
    big, small = parse_shape(big), parse_shape(small)
    # children index ranges of the big tree in breadth-first order
    starts, nxt = {}, 1
    level = [0]
    for b in big.branching:
        new = []
        for v in level:
            starts[v] = nxt
            new.extend(range(nxt, nxt + b))
            nxt += b
        level = new
    out, level = [], [0]
    for b in small.branching:
        new = []
        for v in level:
            kids = list(range(starts[v], starts[v] + b))
            out.extend(kids)
            new.extend(kids)
        level = new
    return out


def _first_children_tokens(tokens, big, small) -> tuple:
    """The breadth-first tokens of the first-children sub-tree, read off the big tree's token list."""
    return tuple(tokens[c] for c in _first_children_columns(big, small))


@pytest.mark.parametrize("scheme", NESTED)
@pytest.mark.parametrize("shape", ["2,1", "1x3", "3"])
def test_array_enumeration_equals_the_readable_one(scheme, shape):
    """The numpy enumeration behind the law test below gives the dict enumeration's outcomes and
    probabilities (small shapes, where the readable version is quick), sub-tree marginal included."""
    law = _law(4, seed=11)
    expected = _tree_law(shape, scheme, law)
    keys, probs = _tree_law_arrays(shape, scheme, law)
    assert len(keys) == len(expected) == len(set(map(tuple, keys.tolist())))
    for k, pr in zip(keys.tolist(), probs):
        assert abs(expected[tuple(k)] - pr) <= 1e-15
    if shape != "3":
        small = "1x2"
        sub: dict = {}
        for tokens, prob in expected.items():
            key = _first_children_tokens(tokens, shape, small)
            sub[key] = sub.get(key, 0.0) + prob
        sk, sp = _group(keys[:, _first_children_columns(shape, small)], probs)
        assert sorted(sub) == [tuple(k) for k in sk.tolist()]
        assert np.allclose([sub[tuple(k)] for k in sk.tolist()], sp, rtol=0, atol=1e-15)


@pytest.mark.parametrize("scheme", NESTED)
@pytest.mark.parametrize(
    "big, small", [("3,2", "2,1"), ("3,2", "2,2"), ("3,2", "1x2"), ("3,2", "3"), ("2,2,1", "1x3")]
)
def test_first_children_subtree_has_the_shapes_own_law(scheme, big, small):
    # 10 drafted tokens in a 2,2,1 tree: V = 3 keeps the enumeration at 3^10 outcomes (4^10 took 80 s)
    V = 5 if scheme == "top_n" else (3 if big == "2,2,1" else 4)
    law = _law(V, seed=zlib.crc32(f"{scheme}/{big}/{small}".encode()) % 1000)  # stable across runs
    keys, probs = _tree_law_arrays(big, scheme, law)
    sub_keys, sub_probs = _group(keys[:, _first_children_columns(big, small)], probs)
    own_keys, own_probs = _tree_law_arrays(small, scheme, law)
    assert np.array_equal(sub_keys, own_keys)  # the same outcomes (rows distinct and sorted)
    assert np.all(np.abs(sub_probs - own_probs) <= 1e-12)


@pytest.mark.parametrize("scheme", NOT_NESTED)
def test_schemes_without_nested_draws_are_refused(scheme):
    """Greedy's first draw is argmax q, not a draw from q: its sub-trees are not greedy trees."""
    law = _law(4, 1)
    shape = "2,2"
    tree = draft_forest(
        [(shape, scheme)], lambda ps: np.stack([law(p) for p in ps]), np.random.default_rng(0)
    )[0]
    with pytest.raises(ValueError, match="draft it on its own"):
        first_children(tree, "2x2")


def test_greedy_subtree_law_really_differs():
    """The refusal is needed: for greedy drafts the first child of a 2-wide node is the argmax of q
    with probability one, while a 1-wide greedy node draws it from q."""
    law = _law(4, 3)
    q = law(())
    tuples, probs = get_scheme("greedy").tuple_law(q, 2)
    assert np.all(tuples[:, 0] == np.argmax(q))
    one, _ = get_scheme("greedy").tuple_law(q, 1)
    assert len(set(one[:, 0].tolist())) > 1


def test_union_and_subshape():
    assert union_shape(["1x4", "2x4", "4x4", "4x3", "4,2,2,1"]).branching == (4, 2, 2, 1)
    assert union_shape(["2", "1x3"]).branching == (2, 1, 1)
    assert is_subshape("1x4", "4,2,2,1") and is_subshape("4x3", "4x4")
    assert not is_subshape("1x5", "4x4") and not is_subshape("3,3", "4,2")
    law = _law(4, 2)
    tree = draft_forest(
        [("2x2", "with_replacement")], lambda ps: np.stack([law(p) for p in ps]), np.random.default_rng(0)
    )[0]
    with pytest.raises(ValueError, match="not a first-children sub-tree"):
        first_children(tree, "3")
    with pytest.raises(ValueError):
        union_shape([])


@pytest.mark.parametrize("scheme", ["with_replacement", "greedy", "top_n"])
def test_forest_of_one_tree_draws_what_draft_tree_draws(scheme):
    law = _law(6, 5)
    rows = lambda ps: np.stack([law(p) for p in ps])  # noqa: E731
    a = draft_tree("3,2", scheme, rows, np.random.default_rng(7), target=rows)
    (b,) = draft_forest([("3,2", scheme)], rows, np.random.default_rng(7), target=rows)
    assert np.array_equal(a.tokens, b.tokens) and np.array_equal(a.parent, b.parent)
    assert np.array_equal(a.q, b.q) and np.array_equal(a.p, b.p)


def test_forest_calls_each_model_once_per_depth_and_subtree_values():
    """One draft call per depth over every tree, one target call in all; a sub-tree's exact value
    equals that of the same tree built directly from its nodes."""
    law = _law(5, 9)
    calls = {"draft": [], "target": []}

    def draft(ps):
        calls["draft"].append(list(ps))
        return np.stack([law(p) for p in ps])

    def target(ps):
        calls["target"].append(list(ps))
        return np.stack([law((99,) + tuple(p)) for p in ps])

    specs = [("4,2,1", "with_replacement"), ("4,2,1", "without_replacement"), ("2x3", "greedy")]
    trees = draft_forest(specs, draft, np.random.default_rng(0), target=target)
    assert len(calls["draft"]) == 3 and len(calls["target"]) == 1
    assert calls["draft"][0] == [()]
    for paths in calls["draft"] + calls["target"]:
        assert len(paths) == len(set(paths))  # distinct paths only
    big = trees[1]
    sub = first_children(big, "2x3")
    direct = draft_tree(
        "2x3",
        "without_replacement",
        lambda ps: np.stack([law(p) for p in ps]),
        np.random.default_rng(0),
    )
    # rebuild the sub-tree's laws from the callables: the same rows as carried over
    for v in range(sub.tokens.size):
        assert np.allclose(sub.p[v], law((99,) + sub.path(v)), rtol=0, atol=1e-15)
    for v in range(sub.n_internal):
        assert np.allclose(sub.q[v], law(sub.path(v)), rtol=0, atol=1e-15)
    assert direct.shape == sub.shape
    for name in ("rrs_without_replacement", "naive"):
        value = expected_tokens(sub, name)
        assert 1.0 <= value <= 1.0 + sub.shape.depth
