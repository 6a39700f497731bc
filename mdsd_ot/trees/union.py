"""One drafted tree for every smaller shape: union shapes, first-children sub-trees, drafted forests.

docs/math.md#union-trees. For a draft scheme whose first ``k`` of ``n`` draws are distributed as
``k`` draws of the same scheme (``DraftScheme.nested_draws``: with and without replacement, ``top_n``
in rank order), the sub-tree made of the first ``b_d`` children at each depth of a tree drafted with
a wider shape is distributed exactly as a tree of shape ``(b_1, b_2, ...)`` drafted on its own. One
draft pass and one target forward over the *union* tree then give the exact tokens per call of every
smaller shape, for every verifier.

* :func:`union_shape` -- the smallest shape that holds each given shape as a first-children sub-tree;
* :func:`first_children` -- that sub-tree of a drafted tree (refused for schemes without the property:
  greedy drafts fix the ``n - 1`` most likely tokens, so their first ``k < n`` draws are not greedy
  drafts of ``k``; conditional Poisson sets are not nested either);
* :func:`draft_forest` -- several trees drafted level by level with one ``draft`` call per depth over
  all of them (the decoder's batched draft forward), and one ``target`` call over every node.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .._validate import check_probabilities
from ..drafts import get_scheme
from .shape import TreeShape, parse_shape
from .tree import DraftTree

__all__ = ["union_shape", "is_subshape", "first_children", "draft_forest"]


def union_shape(shapes) -> TreeShape:
    """The smallest shape holding every shape in ``shapes`` as a first-children sub-tree: the largest
    branching at each depth, as deep as the deepest shape.

    Parameters
    ----------
    shapes : iterable of shape specs
        Anything :func:`parse_shape` accepts; at least one (``ValueError`` otherwise).

    Returns
    -------
    TreeShape

    >>> union_shape(["1x4", "2x4", "4x4", "4x3", "4,2,2,1"]).label
    '4,2,2,1'
    >>> union_shape(["2x2", "3"]).branching
    (3, 1)
    """
    shapes = [parse_shape(s) for s in shapes]
    if not shapes:
        raise ValueError("union_shape needs at least one shape")
    depth = max(s.depth for s in shapes)
    return TreeShape(tuple(max(s.branching[d] for s in shapes if s.depth > d) for d in range(depth)))


def is_subshape(small, big) -> bool:
    """Whether ``small`` is a first-children sub-tree of ``big`` (no deeper, no wider at any depth).

    Parameters
    ----------
    small, big : shape spec
        Anything :func:`parse_shape` accepts.

    Returns
    -------
    bool

    >>> is_subshape("4x3", "4,2,2,1"), is_subshape("2,2", "4x4")
    (True, False)
    """
    small, big = parse_shape(small), parse_shape(big)
    return small.depth <= big.depth and all(a <= b for a, b in zip(small.branching, big.branching))


def first_children(tree: DraftTree, shape, *, memo: dict | None = None) -> DraftTree:
    """The sub-tree of ``tree`` made of the first ``b_d`` children of each kept node at depth ``d - 1``.

    Its law is the law of a tree of ``shape`` drafted on its own when the scheme has
    ``nested_draws`` (docs/math.md#union-trees); ``ValueError`` otherwise, and when ``shape`` is not
    a first-children sub-tree of ``tree.shape``. The target laws are carried over when the tree has
    them. ``memo`` as in :class:`DraftTree` (sub-trees of one drafted tree may share it: equal paths
    carry equal laws).

    Parameters
    ----------
    tree : DraftTree
        A drafted tree (its scheme must have ``nested_draws``).
    shape : shape spec
        The sub-tree's shape (anything :func:`parse_shape` accepts).
    memo : dict or None
        Cache of laws by path, as in :class:`DraftTree`.

    Returns
    -------
    DraftTree

    >>> law = lambda paths: np.tile([0.5, 0.3, 0.2], (len(paths), 1))
    >>> big = draft_forest([("4,2", "with_replacement")], law, np.random.default_rng(1), target=law)[0]
    >>> small = first_children(big, "2x2")
    >>> kids = lambda t: [t.path(v) for v in t.children[0]]
    >>> small.shape.label, kids(small) == kids(big)[:2]
    ('2x2', True)
    """
    shape = parse_shape(shape)
    scheme = tree.scheme
    if not scheme.nested_draws:
        raise ValueError(
            f"the {scheme.name!r} scheme's first k draws are not distributed as k draws of the scheme, so "
            f"a sub-tree of a wider tree is not a tree of shape {shape.label}: draft it on its own"
        )
    if not is_subshape(shape, tree.shape):
        raise ValueError(
            f"shape {shape.label} is not a first-children sub-tree of the drafted {tree.shape.label} tree "
            f"(it must be no deeper and no wider at any depth)"
        )
    keep, parent = [0], [-1]  # nodes of the big tree, in the sub-tree's breadth-first order
    level = [0]
    for b in shape.branching:
        nxt = []
        for i in level:
            for c in tree.children[keep[i]][:b].tolist():
                keep.append(c)
                parent.append(i)
                nxt.append(len(keep) - 1)
        level = nxt
    keep = np.asarray(keep, dtype=np.int64)
    depth = tree.depth[keep]
    internal = keep[depth < shape.depth]  # breadth-first: internal nodes come first
    sub = DraftTree(shape, scheme, tree.tokens[keep], parent, tree.q[internal], memo=memo, checked=True)
    if tree.p is not None:
        sub.p = tree.p[keep]  # already validated and normalised rows
    return sub


def draft_forest(
    specs,
    draft: Callable[[list], np.ndarray],
    rng: np.random.Generator,
    target: Callable[[list], np.ndarray] | None = None,
    *,
    memo: dict | None = None,
) -> list[DraftTree]:
    """Draft several trees under one root, level by level: ``draft`` is called once per depth with the
    distinct paths of every tree's nodes at that depth (one batched draft forward), ``target`` once with
    the distinct paths of every node of every tree (one target forward).

    Parameters
    ----------
    specs : sequence of (shape, scheme)
    draft, target : callables ``paths -> (len(paths), V)``, as in :func:`mdsd_ot.trees.draft_tree`.
    rng : numpy.random.Generator
        The draws: at each depth, tree by tree in ``specs`` order, node by node breadth-first (so one
        spec draws exactly what :func:`mdsd_ot.trees.draft_tree` draws from the same generator).
    memo : dict or None
        Shared by the returned trees (equal paths carry equal laws at one context).

    Returns
    -------
    list of DraftTree, one per spec.

    >>> law = lambda paths: np.tile([0.5, 0.3, 0.2], (len(paths), 1))
    >>> trees = draft_forest([("2x2", "with_replacement"), ("2", "greedy")], law, np.random.default_rng(0))
    >>> [t.shape.label for t in trees], trees[1].drafts(0).tolist()[0]
    (['2x2', '2x1'], 0)
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    specs = [(parse_shape(s), get_scheme(k)) for s, k in specs]
    if not specs:
        raise ValueError("draft_forest needs at least one (shape, scheme)")
    state = [dict(tokens=[-1], parent=[-1], q=[], paths=[()], level=[0]) for _ in specs]
    for d in range(max(s.depth for s, _ in specs)):
        live = [i for i, (s, _) in enumerate(specs) if s.depth > d]
        wanted = sorted({state[i]["paths"][v] for i in live for v in state[i]["level"]})
        rows = _laws(draft, wanted, "draft(paths)")
        where = {p: k for k, p in enumerate(wanted)}
        for i in live:
            shape, scheme = specs[i]
            st, b, nxt = state[i], shape.branching[d], []
            for v in st["level"]:
                qv = rows[where[st["paths"][v]]]
                st["q"].append(qv)
                for x in scheme.sample(qv, b, rng).tolist():
                    st["tokens"].append(int(x))
                    st["parent"].append(v)
                    st["paths"].append(st["paths"][v] + (int(x),))
                    nxt.append(len(st["tokens"]) - 1)
            st["level"] = nxt
    trees = [
        DraftTree(shape, scheme, st["tokens"], st["parent"], np.stack(st["q"]), memo=memo, checked=True)
        for (shape, scheme), st in zip(specs, state)
    ]
    if target is not None:
        every = sorted({p for st in state for p in st["paths"]}, key=lambda p: (len(p), p))
        rows = np.asarray(target(every), dtype=np.float64)
        if rows.ndim != 2 or rows.shape[0] != len(every):
            raise ValueError(f"target(paths) must return one row per path ({len(every)}), got {rows.shape}")
        where = {p: k for k, p in enumerate(every)}
        for tree, st in zip(trees, state):
            tree.set_target(rows[[where[p] for p in st["paths"]]])
    return trees


def _laws(fn, paths, what: str) -> np.ndarray:
    rows = np.asarray(fn(paths), dtype=np.float64)
    if rows.ndim != 2 or rows.shape[0] != len(paths):
        raise ValueError(f"{what} must return one row per path ({len(paths)}), got shape {rows.shape}")
    rows = check_probabilities(rows, what, ndim=2)
    return rows / rows.sum(axis=1, keepdims=True)
