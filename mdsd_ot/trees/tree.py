"""Draft trees: drafting, tree verification, and the exact expected tokens per target call.

docs/math.md#draft-trees. A drafted tree holds, for every node ``v`` (the root is the context so far,
every other node one drafted token), the target's next-token law ``p_v`` at the context ending in
``v`` and, for every internal node, the draft's law ``q_v`` from which its children were drawn by a
draft scheme (:data:`mdsd_ot.SCHEMES`).

Tree verification with a registered verifier (:data:`mdsd_ot.verifiers.VERIFIERS`): at node ``v``
the verifier, prepared on ``(p_v, q_v, b)`` with the node's ``b`` children as drafts, outputs one
token ``y``. If ``y`` is a child's token the call continues in that child's subtree (the first child
carrying ``y`` when drafts repeat), otherwise ``y`` is the corrected token and the call ends; at a
leaf one bonus token is drawn from ``p_v``. Every step emits exactly one token.

Exact expected tokens per target call, given the drafted tree (docs/math.md#tree-recursion):

.. math:: T(\\text{leaf}) = 1, \\qquad
          T(v) = 1 + \\sum_{y \\in \\text{children}(v)} P(\\text{output} = y \\mid \\text{children})\\, T(c_y)

with the verifier's exact output law at ``v`` (:meth:`PreparedVerifier.output_law`). One set of
model calls thus gives the exact block efficiency of every verifier at once.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .._validate import check_choice, check_probabilities, normalized_pair
from ..drafts import get_scheme
from ..verifiers import get_verifier
from ..verifiers.base import PreparedVerifier, sample_index
from .shape import parse_shape

__all__ = [
    "DraftTree",
    "draft_tree",
    "node_bound",
    "expected_tokens",
    "node_alpha_heuristic",
    "bound_estimate",
    "outcome_law",
    "verify_tree",
    "speedup",
    "valid_verifiers",
    "verifier_names",
    "canonical_verifier",
]


def verifier_names() -> list[str]:
    """Every verifier name a tree accepts: the node-wise registry (:data:`mdsd_ot.verifiers.VERIFIERS`)
    followed by the tree-level one (:data:`mdsd_ot.trees.TREE_VERIFIERS`).

    >>> verifier_names()[-4:]
    ['block', 'traversal', 'gbv', 'lookahead']
    """
    from ..verifiers import VERIFIERS
    from .verifiers import TREE_VERIFIERS

    return list(VERIFIERS) + list(TREE_VERIFIERS)


def canonical_verifier(name) -> str:
    """The registry name of a node-wise or tree-level verifier (aliases such as ``"specinfer"``
    resolved); ``ValueError`` listing every name when unknown, ``TypeError`` when not a string.

    Parameters
    ----------
    name : str
        Verifier name or alias.

    Returns
    -------
    str

    >>> canonical_verifier("specinfer"), canonical_verifier("block")
    ('rrs', 'block')
    """
    from ..verifiers import ALIASES

    if not isinstance(name, str):
        raise TypeError(f"verifier must be a string, one of {verifier_names()}; got {type(name).__name__}")
    name = ALIASES.get(name, name)
    if name not in verifier_names():
        raise ValueError(f"unknown verifier {name!r}; choose one of {verifier_names()}")
    return name


def _tree_level(verifier):
    """The :class:`TreeVerifier` that ``verifier`` names or is, else None (a node-wise verifier)."""
    from .verifiers import TREE_VERIFIERS, TreeVerifier

    if isinstance(verifier, TreeVerifier):
        return verifier
    if isinstance(verifier, str):
        name = canonical_verifier(verifier)
        return TREE_VERIFIERS.get(name)
    return None


def valid_verifiers(scheme, names=None, *, shape=None) -> list[str]:
    """Registry names of the verifiers valid for draft scheme ``scheme`` (all of them, or among ``names``).

    Without ``shape``: the node-wise verifiers only (:data:`mdsd_ot.verifiers.VERIFIERS`). With
    ``shape`` (a tree shape): those, then the tree-level verifiers (:data:`TREE_VERIFIERS`) that can
    verify trees of that shape drafted by ``scheme``.

    Parameters
    ----------
    scheme : str or DraftScheme
        Draft scheme (name or alias).
    names : iterable of str or Verifier, or None
        Candidates (aliases accepted); None: every registered verifier. Tree-level names need
        ``shape`` (``ValueError`` otherwise).
    shape : TreeShape, str, sequence of int or None
        Tree shape; None: node-wise verifiers only.

    Returns
    -------
    list of str
        Registry names, node-wise first, in registry (or ``names``) order.

    >>> valid_verifiers("top_n")
    ['naive', 'optimal']
    >>> valid_verifiers("with_replacement", shape="1x4")[-4:]
    ['block', 'traversal', 'gbv', 'lookahead']
    >>> valid_verifiers("without_replacement", ["rsd", "block", "traversal"], shape="2x2")
    ['rrs_without_replacement', 'traversal']
    """
    from ..verifiers import VERIFIERS
    from .verifiers import TREE_VERIFIERS

    scheme = get_scheme(scheme).name
    if names is None:
        pool = verifier_names()
    else:
        pool = [canonical_verifier(n) if isinstance(n, str) else get_verifier(n).name for n in names]
    if shape is None:
        tree_level = [n for n in pool if n in TREE_VERIFIERS]
        if names is not None and tree_level:
            raise ValueError(
                f"{tree_level} are tree-level verifiers: their validity depends on the tree; pass "
                f"shape= (e.g. valid_verifiers({scheme!r}, names, shape='4x4'))"
            )
        return [n for n in pool if n in VERIFIERS and scheme in VERIFIERS[n].schemes]
    shape = parse_shape(shape)
    node = [n for n in pool if n in VERIFIERS and scheme in VERIFIERS[n].schemes]
    tree = [n for n in pool if n in TREE_VERIFIERS and TREE_VERIFIERS[n].why_not(shape, scheme) is None]
    return node + tree


class DraftTree:
    """A drafted tree with the target and draft laws at its nodes.

    Nodes are numbered in breadth-first order: ``0`` is the root, the children of a node are
    consecutive and in draft order (the order the scheme drew them).

    Attributes
    ----------
    shape : TreeShape
    scheme : DraftScheme
    tokens : ndarray (N + 1,) int64
        ``tokens[v]`` the drafted token of node ``v`` (``-1`` for the root).
    parent : ndarray (N + 1,) int64
        Parent node (``-1`` for the root).
    depth : ndarray (N + 1,) int64
    children : list of ndarray
        ``children[v]`` the child nodes of ``v`` (empty for leaves).
    q : ndarray (I, V) float64
        Draft law at each internal node, row ``v`` for node ``v`` (internal nodes come first in
        breadth-first order).
    p : ndarray (N + 1, V) float64 or None
        Target law at every node (after :meth:`set_target`).

    Parameters
    ----------
    memo : dict or None
        Shared by trees drafted from the same models at the same context (e.g. every tree of an
        enumeration): prepared verifiers and node bounds are then cached by the node's path instead
        of per tree. Only valid when equal paths carry equal laws.
    checked : bool
        ``q`` is already a float64 array of validated rows summing to one (taken without a copy);
        for the library's own sub-trees and forests.
    """

    def __init__(
        self, shape, scheme, tokens, parent, q, p=None, *, memo: dict | None = None, checked: bool = False
    ):
        self.shape = parse_shape(shape)
        self.scheme = get_scheme(scheme)
        self.tokens = np.asarray(tokens, dtype=np.int64)
        self.parent = np.asarray(parent, dtype=np.int64)
        N1 = self.tokens.size
        if self.parent.shape != (N1,) or N1 != self.shape.size + 1:
            raise ValueError(
                f"a tree of shape {self.shape.label} has {self.shape.size + 1} nodes with the root; "
                f"got {N1} tokens and {self.parent.size} parents"
            )
        self.depth = np.zeros(N1, dtype=np.int64)
        self.children = [[] for _ in range(N1)]
        for v in range(1, N1):
            a = int(self.parent[v])
            if not 0 <= a < v:
                raise ValueError(f"node {v}: parent {a} must come before it in breadth-first order")
            self.children[a].append(v)
            self.depth[v] = self.depth[a] + 1
        self.children = [np.array(c, dtype=np.int64) for c in self.children]
        for v in range(N1):
            d = int(self.depth[v])
            want = self.shape.branching[d] if d < self.shape.depth else 0
            if self.children[v].size != want:
                raise ValueError(
                    f"node {v} at depth {d} has {self.children[v].size} children; the shape says {want}"
                )
        self.n_internal = int(np.count_nonzero(self.depth < self.shape.depth))
        if checked:  # rows already validated and normalised (sub-trees, forests): taken as they are
            self.q = np.asarray(q, dtype=np.float64)
        else:
            self.q = check_probabilities(q, "q (draft laws, one row per internal node)", ndim=2)
            self.q /= self.q.sum(axis=1, keepdims=True)
        if self.q.shape[0] != self.n_internal:
            raise ValueError(
                f"q must have one row per internal node ({self.n_internal}), got shape {self.q.shape}"
            )
        self.p = None
        self._prepared: dict = {}
        self._memo = memo
        if p is not None:
            self.set_target(p)

    @property
    def vocab(self) -> int:
        return int(self.q.shape[1])

    def set_target(self, p, *, checked: bool = False) -> DraftTree:
        """Attach the target law at every node: ``p`` of shape ``(N + 1, V)``, row ``v`` the law of the
        token after node ``v`` (validated and normalised like every verifier input; ``checked``: rows
        already validated and normalised, taken as they are)."""
        if not checked:
            p = check_probabilities(p, "p (target laws, one row per node)", ndim=2)
        if p.shape != (self.tokens.size, self.vocab):
            raise ValueError(f"p must have shape ({self.tokens.size}, {self.vocab}), got {p.shape}")
        self.p = p if checked else p / p.sum(axis=1, keepdims=True)
        self._prepared.clear()
        return self

    def path(self, v: int) -> tuple:
        """Drafted tokens from the root to node ``v`` (empty for the root)."""
        out = []
        while v > 0:
            out.append(int(self.tokens[v]))
            v = int(self.parent[v])
        return tuple(reversed(out))

    def drafts(self, v: int) -> np.ndarray:
        """The drafted tokens of ``v``'s children, in draft order."""
        return self.tokens[self.children[v]]

    def child_of(self, v: int, token: int) -> int:
        """The first child of ``v`` carrying ``token`` (-1 if none)."""
        kids = self.children[v]
        hit = np.flatnonzero(self.tokens[kids] == token)
        return int(kids[hit[0]]) if hit.size else -1

    def prepared(self, verifier, v: int) -> PreparedVerifier:
        """The verifier bound to node ``v`` (cached): ``prepare(p_v, q_v, b, sampling=scheme)``."""
        if self.p is None:
            raise ValueError("the tree has no target laws yet: call set_target(p) first")
        verifier = get_verifier(verifier)
        cache, key = self._cache_key(verifier.name, v)
        if key not in cache:
            b = int(self.children[v].size)
            p, q = self.node_pair(v)
            cache[key] = verifier.prepare_normalized(p, q, b, sampling=self.scheme.name)
        return cache[key]

    def node_pair(self, v: int) -> tuple[np.ndarray, np.ndarray]:
        """Node ``v``'s ``(p, q)`` as every verifier's ``prepare`` validates and rescales them, computed
        once per node (per path in a union forest) and shared read-only by the verifiers prepared
        there: a full-vocabulary tree holds one copy per node instead of one per node and verifier."""
        cache, key = self._cache_key("(p, q)", v)
        if key not in cache:
            p, q = normalized_pair(self.p[v], self.q[v])
            p.flags.writeable = False
            q.flags.writeable = False
            cache[key] = (p, q)
        return cache[key]

    def _cache_key(self, what: str, v: int):
        if self._memo is None:
            return self._prepared, (what, v)
        return self._memo, (what, self.scheme.name, int(self.children[v].size), self.path(v))

    def child_laws(self, verifier, v: int) -> np.ndarray:
        """``P(output = token of child c | children)`` for each distinct child token, first child per token
        (0 for a later child repeating a token): one value per child of ``v``."""
        law, _ = self.prepared(verifier, v).output_law(self.drafts(v))
        kids = self.children[v]
        toks = self.tokens[kids]
        out = np.zeros(kids.size)
        seen = set()
        for i, t in enumerate(toks.tolist()):
            if t not in seen:
                seen.add(t)
                out[i] = law[t]
        return out

    def __repr__(self) -> str:
        return f"<DraftTree {self.shape.label}, {self.scheme.name}, V={self.vocab}>"


def draft_tree(
    shape,
    scheme,
    draft: Callable[[list], np.ndarray],
    rng: np.random.Generator,
    target: Callable[[list], np.ndarray] | None = None,
) -> DraftTree:
    """Draft a tree level by level.

    Parameters
    ----------
    shape : TreeShape, str or sequence of int
    scheme : str or DraftScheme
        How the children of a node are drawn from its draft law.
    draft : callable
        ``draft(paths) -> (len(paths), V)``: the draft's next-token law after each path (a tuple of
        drafted tokens below the root; the root's path is ``()``). Called once per depth with that
        depth's nodes (breadth-first), as a batched draft forward would be.
    rng : numpy.random.Generator
        All the randomness of the draft.
    target : callable or None
        ``target(paths) -> (len(paths), V)``: the target's law after each path, called once with every
        node (one target forward); without it, attach the laws later with :meth:`DraftTree.set_target`.

    Examples
    --------
    >>> import numpy as np
    >>> law = lambda paths: np.tile([0.5, 0.3, 0.2], (len(paths), 1))
    >>> t = draft_tree("2x2", "without_replacement", law, np.random.default_rng(0), target=law)
    >>> t.tokens.size, round(expected_tokens(t, "rrs_without_replacement"), 6)
    (5, 3.0)
    """
    shape = parse_shape(shape)
    scheme = get_scheme(scheme)
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    tokens, parent, q_rows, paths = [-1], [-1], [], [()]
    level = [0]
    for b in shape.branching:
        rows = np.asarray(draft([paths[v] for v in level]), dtype=np.float64)
        if rows.ndim != 2 or rows.shape[0] != len(level):
            raise ValueError(
                f"draft(paths) must return one row per path ({len(level)}), got shape {rows.shape}"
            )
        nxt = []
        rows = check_probabilities(rows, "draft(paths)", ndim=2)
        rows /= rows.sum(axis=1, keepdims=True)
        for v, qv in zip(level, rows):
            q_rows.append(qv)
            for x in scheme.sample(qv, b, rng).tolist():
                tokens.append(int(x))
                parent.append(v)
                paths.append(paths[v] + (int(x),))
                nxt.append(len(tokens) - 1)
        level = nxt
    tree = DraftTree(shape, scheme, tokens, parent, np.stack(q_rows))
    if target is not None:
        tree.set_target(np.asarray(target(paths), dtype=np.float64))
    return tree


def expected_tokens(tree: DraftTree, verifier) -> float:
    """Exact expected number of tokens this target call emits under ``verifier``, given the tree.

    ``verifier``: a node-wise name (:data:`mdsd_ot.verifiers.VERIFIERS`): ``T(v) = 1 + sum_c
    P(output = x_c | children of v) T(c)`` bottom-up, ``T(leaf) = 1`` (docs/math.md#tree-recursion),
    one ``prepare`` and one ``output_law`` per internal node; a tree-level name
    (:data:`TREE_VERIFIERS`, e.g. ``"block"``, ``"traversal"``) or any :class:`TreeVerifier`: its
    own exact value (``ValueError`` with its reason when it cannot verify this tree).

    Parameters
    ----------
    tree : DraftTree
        With its target laws set.
    verifier : str, Verifier or TreeVerifier
        Node-wise or tree-level verifier (name or alias, or an instance).

    Returns
    -------
    float
    """
    tl = _tree_level(verifier)
    if tl is not None:
        tl.require(tree)
        return float(tl.expected_tokens(tree))
    T = np.ones(tree.tokens.size)
    for v in range(tree.n_internal - 1, -1, -1):
        w = tree.child_laws(verifier, v)
        T[v] = 1.0 + float(np.dot(w, T[tree.children[v]]))
    return float(T[0])


def node_bound(tree: DraftTree, v: int) -> float:
    """``alpha*`` of node ``v``'s draft scheme at its ``(p_v, q_v, b)`` (:func:`mdsd_ot.optimal_acceptance`),
    cached on the tree.

    Parameters
    ----------
    tree : DraftTree
        With its target laws set.
    v : int
        Index of an internal node.

    Returns
    -------
    float
        ``RuntimeError`` if the value fails its re-check.
    """
    from ..api import optimal_acceptance

    cache, key = tree._cache_key("alpha*", v)
    if key not in cache:
        b = int(tree.children[v].size)
        r = optimal_acceptance(tree.p[v], tree.q[v], b, sampling=tree.scheme.name)
        if not r.success:
            raise RuntimeError(f"alpha* at node {v} failed its re-check: {r.message}")
        cache[key] = r.value
    return cache[key]


def node_bounds(tree: DraftTree, *, backend: str = "numpy", device=None) -> np.ndarray:
    """``alpha*`` of every internal node (the values of :func:`node_bound`), cached on the tree as
    :func:`node_bound` caches.

    ``backend``: ``"numpy"``, :func:`node_bound` node by node (``optimal_acceptance``; the numpy
    evaluation plan, built to share one sort among many quantities, took about as long in all for one
    bound per node in ``benchmarks/bench_trees.py``); ``"torch"``, the
    evaluation plan batched by the torch backend on ``device``
    (:func:`mdsd_ot.rows.evaluate_rows`; the nodes with the same number of children in
    one call, float64, every certificate re-checked on the device, what the torch plan does not cover,
    e.g. sequential sampling with n >= 3 or ``top_n``, by the numpy plan); ``"auto"``, torch when
    ``device`` is an accelerator, numpy otherwise. ``RuntimeError`` naming the node where a value
    fails its re-check.
    """
    if tree.p is None:
        raise ValueError("the tree has no target laws yet: call set_target(p) first")
    check_choice(backend, "backend", ("auto", "numpy", "torch"))
    on_torch = backend == "torch" or (backend == "auto" and device is not None and str(device) != "cpu")
    out = np.empty(tree.n_internal)
    todo: dict[int, list] = {}  # number of children -> nodes not in the cache
    for v in range(tree.n_internal):
        cache, key = tree._cache_key("alpha*", v)
        if key in cache or not on_torch:
            out[v] = node_bound(tree, v)
        else:
            todo.setdefault(int(tree.children[v].size), []).append(v)
    if not todo:
        return out
    from ..backends.torch import require_torch
    from ..keys import bound_key
    from ..rows import evaluate_rows

    torch = require_torch()

    name = tree.scheme.name
    for b, nodes in todo.items():
        P = torch.as_tensor(tree.p[nodes], device=device)
        Q = torch.as_tensor(tree.q[nodes], device=device)
        rows = evaluate_rows(P, Q, ns=[b], schemes=[name], verifiers=[], backend="torch")
        key = bound_key(name, b)
        for v, row in zip(nodes, rows):
            if row.get(key) is None:
                why = row.get("errors", {}).get(key, "no value")
                raise RuntimeError(f"alpha* at node {v} failed: {why}")
            cache, ckey = tree._cache_key("alpha*", v)
            cache[ckey] = out[v] = float(row[key])
    return out


def node_alpha_heuristic(tree: DraftTree, *, backend: str = "numpy", device=None) -> float:
    """A heuristic score of the tree, **neither a bound nor an estimate** of any verifier's tokens per
    call: every node accepts with the optimal one-step acceptance ``alpha*_v`` of its scheme and
    continues into its best drafted child,

    ``H(leaf) = 1``, ``H(v) = 1 + alpha*_v max_c H(c)`` (docs/math.md#node-alpha-heuristic).

    The ``alpha*_v`` come from :func:`node_bounds` (``backend``, ``device`` as there: the decoder
    evaluates them batched by the torch plan when its models run on an accelerator).

    Not an upper bound: ``alpha*_v`` averages over the draws of ``v``'s children while the tree holds
    one draw, so it can exceed what every valid verifier attains (averaged over the draws of ``3,1``
    ``top_n`` trees at V = 4, where the membership verifier is optimal, by up to 40%). Not a lower
    bound either: on chains it falls below block verification (by up to 17% on average over the
    draws of ``1x2`` and ``1x3`` chains at V = 4; ``tests/test_tree_level.py``). What is proven
    instead: block verification is optimal on chains (``"block"``), the membership verifier on
    ``top_n`` trees (``"naive"``; docs/math.md#top-n-trees). For a one-level tree its
    mean over draws is exactly ``1 + alpha*`` (what the ``optimal`` verifier attains).

    Parameters
    ----------
    tree : DraftTree
        With its target laws set (``ValueError`` otherwise).
    backend : {"numpy", "torch", "auto"}
        How the ``alpha*_v`` are computed (see :func:`node_bounds`).
    device : str, torch.device or None
        Device of the torch backend.

    Returns
    -------
    float
    """
    alpha = node_bounds(tree, backend=backend, device=device)
    B = np.ones(tree.tokens.size)
    for v in range(tree.n_internal - 1, -1, -1):
        B[v] = 1.0 + alpha[v] * float(B[tree.children[v]].max())
    return float(B[0])


def bound_estimate(tree: DraftTree, *, backend: str = "numpy", device=None) -> float:
    """Deprecated name of :func:`node_alpha_heuristic` (it is neither a bound nor an estimate);
    emits a ``DeprecationWarning``.

    Parameters
    ----------
    tree : DraftTree
    backend : {"numpy", "torch", "auto"}
    device : str, torch.device or None
        As in :func:`node_alpha_heuristic`.

    Returns
    -------
    float
    """
    import warnings

    warnings.warn(
        "mdsd_ot.trees.bound_estimate is neither a bound nor an estimate of the tokens per call and is "
        "deprecated: call node_alpha_heuristic (same value) or compare against block verification "
        "(chains) and tree_optimum (small cases)",
        DeprecationWarning,
        stacklevel=2,
    )
    return node_alpha_heuristic(tree, backend=backend, device=device)


def outcome_law(tree: DraftTree, verifier) -> dict:
    """Exact law of the tokens one call emits, given the tree: ``{tuple of tokens: probability}``.

    For small vocabularies (tests): the law has up to ``V`` outcomes per node. ``verifier`` as in
    :func:`expected_tokens` (node-wise or tree-level).

    Parameters
    ----------
    tree : DraftTree
        With its target laws set.
    verifier : str, Verifier or TreeVerifier
        As in :func:`expected_tokens`.

    Returns
    -------
    dict
        ``{tuple of int: float}``.
    """
    tl = _tree_level(verifier)
    if tl is not None:
        tl.require(tree)
        return tl.outcome_law(tree)
    laws: dict[int, dict] = {}
    for v in range(tree.tokens.size - 1, -1, -1):
        if v >= tree.n_internal:
            laws[v] = {(int(y),): float(tree.p[v][y]) for y in np.flatnonzero(tree.p[v] > 0)}
            continue
        law, _ = tree.prepared(verifier, v).output_law(tree.drafts(v))
        out: dict = {}
        for y in np.flatnonzero(law > 0).tolist():
            c = tree.child_of(v, y)
            if c < 0:
                out[(y,)] = out.get((y,), 0.0) + float(law[y])
            else:
                for e, pr in laws[c].items():
                    out[(y,) + e] = out.get((y,) + e, 0.0) + float(law[y]) * pr
        laws[v] = out
    return laws[0]


def verify_tree(tree: DraftTree, verifier, rng: np.random.Generator) -> list[int]:
    """Verify the tree once with ``verifier`` (randomness from ``rng``): the tokens this call emits.

    The accepted draft tokens along one root-to-node path, then one corrected token (or, after a
    leaf, one bonus token from the target). ``verifier`` as in :func:`expected_tokens`.

    Parameters
    ----------
    tree : DraftTree
        With its target laws set.
    verifier : str, Verifier or TreeVerifier
        As in :func:`expected_tokens`.
    rng : numpy.random.Generator
        ``TypeError`` for anything else.

    Returns
    -------
    list of int
        The emitted tokens (at least one).
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    tl = _tree_level(verifier)
    if tl is not None:
        tl.require(tree)
        return [int(t) for t in tl.verify(tree, rng)]
    out, v = [], 0
    while True:
        if v >= tree.n_internal:
            out.append(sample_index(tree.p[v], rng.random()))
            return out
        verdict = tree.prepared(verifier, v).verify(tree.drafts(v), rng)
        out.append(int(verdict.token))
        c = tree.child_of(v, verdict.token) if verdict.accepted else -1
        if c < 0:
            return out
        v = c


def speedup(block_efficiency, depth: int, cost_ratio: float):
    """Expected wall-clock speedup over plain target decoding (SpecTr, Sun et al. 2023, Sec. 5; the
    improvement factor of Leviathan et al. 2023):

    .. math:: \\text{speedup} = \\frac{\\tau}{1 + D c}

    with ``tau`` the tokens per target call, ``D`` the draft forward passes per call (the tree depth:
    one batched draft forward per level) and ``c`` the cost of one draft forward relative to one
    target forward; verifying the whole tree is assumed to cost one target forward.

    Parameters
    ----------
    block_efficiency : float or array_like
        ``tau``, tokens per target call.
    depth : int
        ``D``, draft forwards per call (>= 1; ``ValueError`` otherwise).
    cost_ratio : float
        ``c``, finite and >= 0 (``ValueError`` otherwise).

    Returns
    -------
    float or numpy.ndarray
        An array (float64) for array input.

    >>> round(speedup(3.0, 4, 0.1), 6)
    2.142857
    """
    if isinstance(depth, bool) or int(depth) != depth or depth < 1:
        raise ValueError(f"depth must be a positive int (draft forwards per call), got {depth!r}")
    c = float(cost_ratio)
    if not (c >= 0.0 and np.isfinite(c)):
        raise ValueError(
            f"cost_ratio must be a finite number >= 0 (draft/target forward cost), got {cost_ratio!r}"
        )
    if np.ndim(block_efficiency):
        return np.asarray(block_efficiency, dtype=np.float64) / (1.0 + int(depth) * c)
    return float(block_efficiency) / (1.0 + int(depth) * c)
