"""Tree-level verifiers: verify a whole drafted chain or tree at once, not node by node.

docs/math.md#tree-level-verification. A node-wise verifier (:data:`mdsd_ot.verifiers.VERIFIERS`)
decides at each node from that node's ``(p_v, q_v)`` and children alone; a tree-level verifier sees
the whole drafted tree (every ``p_v``, ``q_v`` and token) and decides which root-to-node path to keep
and which token to add after it. Registry :data:`TREE_VERIFIERS`:

=============  ==================================  ================================================
name           trees                               method
=============  ==================================  ================================================
``block``      chains ``1xL``, every scheme that   block verification (Sun, Mendlovic, Leviathan,
               drafts one child (all but ``hub``)  Aharoni, Beirami, Ro, Suresh, ICLR 2025)
``traversal``  every shape; every scheme but       traversal verification (Weng et al., NeurIPS
               ``conditional_poisson`` with more   2025), leaf to root with sequence-level
               than one child                      acceptance; equals ``block`` on chains
=============  ==================================  ================================================

Each computes, from one drafted tree, the exact law of the tokens one call emits
(:meth:`TreeVerifier.outcome_law`) and its exact expected length (:meth:`TreeVerifier.expected_tokens`)
in O(N V) numpy passes (``N`` nodes, ``V`` tokens), and samples a call (:meth:`TreeVerifier.verify`).
:func:`mdsd_ot.trees.expected_tokens`, :func:`~mdsd_ot.trees.outcome_law` and
:func:`~mdsd_ot.trees.verify_tree` accept these names, or any :class:`TreeVerifier` instance, wherever
they accept a node-wise verifier name.

**The draft law of each child.** Both algorithms need, for the ``k``-th child of a node, the law its
token was drawn from given the tokens of its elder siblings (:func:`child_draft_laws`): ``q`` for
i.i.d. drafts; ``q`` without the elder siblings' tokens, renormalised, for sequential drafts without
replacement; a point mass on the ``k``-th most likely token for ``top_n``; point masses on the top
``n - 1`` tokens and ``q`` on the rest for ``greedy``; ``q`` then, for ``hub``, the hub token (or ``q``
without it when the first draft was the hub). With one child per node every scheme but ``top_n``
drafts from ``q`` itself, and ``top_n`` from the point mass on the argmax: block verification is valid
whenever the verifier uses the law the token was actually drawn from, so it accepts deterministic
drafts too (docs/math.md#block-verification).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from ..drafts import get_scheme, top_tokens
from ..verifiers.base import sample_index

__all__ = [
    "TreeVerifier",
    "BlockVerifier",
    "TraversalVerifier",
    "TREE_VERIFIERS",
    "child_draft_laws",
]


# ------------------------------------------------------------------------------------------- base
class TreeVerifier(ABC):
    """A verifier of whole drafted trees (docs/math.md#tree-level-verification).

    Subclasses set ``name`` (registry name) and ``paper`` (citation line) and implement
    :meth:`why_not`, :meth:`outcome_law`, :meth:`expected_tokens` and :meth:`verify`. The functions of
    :mod:`mdsd_ot.trees` call :meth:`require` (which raises with :meth:`why_not`'s reason) before
    they dispatch to an instance.
    """

    name: str = ""
    paper: str = ""

    @abstractmethod
    def why_not(self, shape, scheme) -> str | None:
        """None when this verifier can verify trees of ``shape`` drafted by ``scheme``, else the reason."""

    @abstractmethod
    def outcome_law(self, tree) -> dict:
        """Exact law of the tokens one call emits given ``tree``: ``{tuple of tokens: probability}``."""

    @abstractmethod
    def expected_tokens(self, tree) -> float:
        """Exact expectation of the number of tokens one call emits, given ``tree``."""

    @abstractmethod
    def verify(self, tree, rng: np.random.Generator) -> list:
        """One sampled call: the tokens it emits (randomness from ``rng``)."""

    def require(self, tree) -> None:
        """Raise ``ValueError`` (with :meth:`why_not`'s reason) unless this verifier can verify ``tree``,
        and when the tree has no target laws yet."""
        scheme = getattr(tree.scheme, "name", tree.scheme)
        why = self.why_not(tree.shape, scheme)
        if why is not None:
            raise ValueError(
                f"verifier {self.name!r} cannot verify a {tree.shape.label} tree of {scheme!r} drafts: {why}"
            )
        if tree.p is None:
            raise ValueError("the tree has no target laws yet: call set_target(p) first")

    def __repr__(self) -> str:
        return f"<TreeVerifier {self.name!r}>"


def _check_rng(rng) -> None:
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")


# ---------------------------------------------------------------------------- draft law per child
def _point_mass(V: int, token: int) -> np.ndarray:
    e = np.zeros(V)
    e[token] = 1.0
    return e


def _without(q: np.ndarray, tokens) -> np.ndarray:
    """``q`` with ``tokens`` removed, renormalised by the direct sum of what is left (never ``1 - q(.)``)."""
    rest = q.copy()
    rest[list(tokens)] = 0.0
    total = rest.sum()
    if not total > 0.0:
        raise ValueError(
            f"no draft mass left after removing tokens {sorted(set(tokens))}: the children cannot come "
            f"from this scheme"
        )
    return rest / total


def child_draft_laws(scheme, q: np.ndarray, drafts) -> list:
    """The law each child's token was drawn from, given the tokens of its elder siblings.

    Parameters
    ----------
    scheme : str or DraftScheme
    q : ndarray (V,)
        The node's draft law (normalised).
    drafts : sequence of int
        The children's tokens in draft order.

    Returns
    -------
    list of ndarray (V,)
        ``laws[k]`` the conditional law of child ``k`` (for i.i.d. drafts every entry is ``q`` itself,
        not a copy). ``ValueError`` when a child carries a token of probability 0 under its law (the
        tree cannot come from this scheme) or when the scheme has no sequential form implemented here
        (``conditional_poisson`` with more than one child).

    Examples
    --------
    >>> q = np.array([0.5, 0.3, 0.2])
    >>> [law.round(3).tolist() for law in child_draft_laws("without_replacement", q, [1, 0])]
    [[0.5, 0.3, 0.2], [0.714, 0.0, 0.286]]
    >>> [law.tolist() for law in child_draft_laws("top_n", q, [0, 1])]
    [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
    """
    name = get_scheme(scheme).name
    drafts = [int(x) for x in drafts]
    n, V = len(drafts), q.size
    if n == 0:
        return []
    if name == "with_replacement" or (
        n == 1 and name in ("without_replacement", "greedy", "conditional_poisson")
    ):
        laws = [q] * n
    elif name == "without_replacement":
        laws = [q] + [_without(q, drafts[:k]) for k in range(1, n)]
    elif name == "top_n":
        laws = [_point_mass(V, int(t)) for t in top_tokens(q, n)]
    elif name == "greedy":
        top = top_tokens(q, n - 1).tolist()
        laws = [_point_mass(V, t) for t in top] + [_without(q, top)]
    elif name == "hub":
        if n != 2:
            raise ValueError(f"hub drafts are two children per node, got {n}")
        a = int(top_tokens(q, 1)[0])
        laws = [q, _point_mass(V, a) if drafts[0] != a else _without(q, [a])]
    else:
        raise ValueError(
            f"the {name!r} scheme draws an unordered set of {n} tokens; the law of each child given its "
            f"elder siblings is not implemented (use one child per node, or another scheme)"
        )
    for k, (x, law) in enumerate(zip(drafts, laws)):
        if not 0 <= x < V or not law[x] > 0.0:
            raise ValueError(
                f"child {k} carries token {x}, which the {name!r} scheme cannot draft there (probability "
                f"0 given its elder siblings {drafts[:k]}): this tree was not drafted by that scheme"
            )
    return laws


def _reject_update(m: np.ndarray, s: np.ndarray):
    """The state of a node after one child, drafted from ``s``, was rejected with its whole subtree.

    ``m`` is the node's residual target mass (total ``w``, the node's sequence-level acceptance).
    Returns ``(w', m')`` with ``Z = sum (m - s)_+``, ``D = sum (s - m)_+ = 1 - w + Z`` (a direct sum, so
    no cancellation), ``w' = Z / D`` and ``m' = (m - s)_+ / D``. ``D = 0`` means ``m = s`` (so
    ``w = 1``): the rejected child was accepted with probability 1 and this branch has probability 0;
    ``(1, None)`` is returned, the caller then falls back to the node's target law.
    """
    diff = m - s
    pos = np.maximum(diff, 0.0)
    D = float(np.maximum(-diff, 0.0).sum())
    if not D > 0.0:
        return 1.0, None
    Z = float(pos.sum())
    return min(1.0, Z / D), pos / D


def _emission(tree, v: int, law: np.ndarray) -> dict:
    path = tree.path(v)
    total = law.sum()
    return {path + (int(y),): float(law[y] / total) for y in np.flatnonzero(law > 0)}


def _add(out: dict, law: dict, weight: float) -> None:
    for e, pr in law.items():
        out[e] = out.get(e, 0.0) + weight * pr


# ------------------------------------------------------------------------------------------ block
class BlockVerifier(TreeVerifier):
    """Block verification of one drafted chain ``x_1..x_L`` (docs/math.md#block-verification).

    With ``p_0 = 1``, ``p_i = min(1, p_{i-1} P(x_i | x_<i) / Q(x_i | x_<i))``, residual masses
    ``Z_i = sum_y (p_i P(y | x_<=i) - Q(y | x_<=i))_+`` and stopping coins
    ``h_i = Z_i / (Z_i + 1 - p_i)`` (``i < L``), ``h_L = p_L``, ``h_0 = 1``: the call keeps
    ``x_1..x_tau`` for ``tau`` the last ``i`` whose coin succeeds and adds one token from
    ``norm(p_tau P(. | x_<=tau) - Q(. | x_<=tau))_+`` (from ``P(. | x_<=L)`` when ``tau = L``).
    ``P(tau = i) = h_i prod_{j > i} (1 - h_j)``; O(L V).

    ``Q`` is the law each drafted token was drawn from (:func:`child_draft_laws` with one child):
    ``q`` for every scheme but ``top_n``, whose chain drafts the argmax deterministically.

    Examples
    --------
    Sun et al.'s example (V = 2, p = (1/3, 2/3), q = (2/3, 1/3) at every context): a drafted
    chain ``(0, 0)``:

    >>> import numpy as np
    >>> from mdsd_ot.trees import DraftTree
    >>> p, q = [1 / 3, 2 / 3], [2 / 3, 1 / 3]
    >>> t = DraftTree("1x2", "with_replacement", [-1, 0, 0], [-1, 0, 1], [q, q], [p, p, p])
    >>> round(BlockVerifier().expected_tokens(t), 6)
    1.5
    """

    name = "block"
    paper = (
        "Sun, Mendlovic, Leviathan, Aharoni, Beirami, Ro, Suresh. Block verification accelerates "
        "speculative decoding. ICLR 2025 (arXiv 2403.10444)"
    )

    def why_not(self, shape, scheme) -> str | None:
        from .shape import parse_shape

        shape = parse_shape(shape)
        name = get_scheme(scheme).name
        if any(b != 1 for b in shape.branching):
            return f"block verification verifies one chain (shape 1xL), not {shape.label}; use 'traversal'"
        if name == "hub":
            return "hub drafts two children per node, a chain has one"
        return None

    def _coins(self, tree):
        """``(h, laws)``: the stopping coins ``h_0..h_L`` and, per ``i``, the law of the added token."""
        self.require(tree)
        L = tree.shape.depth
        P = tree.p
        # s[i]: the law node i's child x_{i+1} was drawn from (chain node i has depth i)
        s = [child_draft_laws(tree.scheme, tree.q[i], [int(tree.tokens[i + 1])])[0] for i in range(L)]
        ps = [1.0]
        for i in range(1, L + 1):
            x = int(tree.tokens[i])
            ps.append(min(1.0, ps[-1] * float(P[i - 1][x]) / float(s[i - 1][x])))
        h = np.empty(L + 1)
        laws = [None] * (L + 1)
        for i in range(L):
            diff = ps[i] * P[i] - s[i]
            pos = np.maximum(diff, 0.0)
            D = float(np.maximum(-diff, 0.0).sum())  # Z_i + 1 - p_i as a direct sum
            Z = float(pos.sum())
            if not D > 0.0:  # p_i P = Q: a branch of probability 0; any proper law will do
                h[i], laws[i] = 1.0, P[i]
            else:
                h[i], laws[i] = min(1.0, Z / D), (pos if Z > 0.0 else P[i])
        h[0] = 1.0  # p_0 = 1: Z_0 = D_0 in exact arithmetic; tau = 0 when no later coin succeeds
        h[L] = ps[L]
        laws[L] = P[L]
        return h, laws

    @staticmethod
    def _stop_probabilities(h: np.ndarray) -> np.ndarray:
        """``P(tau = i) = h_i prod_{j > i} (1 - h_j)``."""
        keep = np.ones(h.size)
        keep[:-1] = np.cumprod((1.0 - h[::-1])[:-1])[::-1]
        return h * keep

    def expected_tokens(self, tree) -> float:
        h, _ = self._coins(tree)
        pi = self._stop_probabilities(h)
        return float(np.dot(pi, np.arange(1, h.size + 1)))

    def outcome_law(self, tree) -> dict:
        h, laws = self._coins(tree)
        out: dict = {}
        for i, pr in enumerate(self._stop_probabilities(h)):
            if pr > 0.0:
                _add(out, _emission(tree, i, laws[i]), float(pr))
        return out

    def verify(self, tree, rng) -> list:
        _check_rng(rng)
        h, laws = self._coins(tree)
        tau = 0
        for i in range(h.size - 1, 0, -1):  # the last coin that succeeds, drawn from the end
            if rng.random() < h[i]:
                tau = i
                break
        return list(tree.path(tau)) + [sample_index(laws[tau], rng.random())]


# -------------------------------------------------------------------------------------- traversal
class TraversalVerifier(TreeVerifier):
    """Traversal verification of a drafted tree (docs/math.md#traversal-verification).

    Nodes are visited in post-order (every child's subtree, in draft order, before the node; the
    first visit is the leftmost leaf). Each node ``u`` holds a residual target mass ``m_u`` of total
    ``w_u``, its sequence-level acceptance: ``m_root = p_root`` (``w = 1``); a child ``c`` of ``v``
    drafted from ``s`` (its law given its elder siblings, :func:`child_draft_laws`) starts with
    ``w_c = min(1, m_v(x_c) / s(x_c))`` and ``m_c = w_c p_c``. At its visit a node is accepted with
    probability ``w_u``: the call emits the path to ``u`` and one token from ``m_u / w_u``. When it is
    rejected it is deleted and its parent's state becomes ``w' = Z / (Z + 1 - w)``,
    ``m' = (m - s)_+ / (Z + 1 - w)``, ``Z = sum (m - s)_+``, before the next sibling starts. The root
    is accepted last with probability 1.

    On a chain this is block verification; on one level it is RRS (i.i.d. drafts) or RSD (without
    replacement). Repeated tokens among i.i.d. siblings are separate nodes, each verified against the
    residual the previous ones left (lossless; docs/math.md#traversal-verification). The visits form
    one accept/reject sequence, so the exact law has at most ``N + 1`` stopping nodes; O(N V).

    Examples
    --------
    >>> import numpy as np
    >>> from mdsd_ot.trees import DraftTree
    >>> p, q = [1 / 3, 2 / 3], [2 / 3, 1 / 3]
    >>> t = DraftTree("1x2", "with_replacement", [-1, 0, 0], [-1, 0, 1], [q, q], [p, p, p])
    >>> round(TraversalVerifier().expected_tokens(t), 6)  # equals block verification on chains
    1.5
    """

    name = "traversal"
    paper = (
        "Weng, Hu, Chen, Liu, Mei, Qiu, Tian, Shi. Traversal verification for speculative tree "
        "decoding. NeurIPS 2025 (arXiv 2505.12398)"
    )

    def why_not(self, shape, scheme) -> str | None:
        from .shape import parse_shape

        shape = parse_shape(shape)
        name = get_scheme(scheme).name
        if name == "conditional_poisson" and any(b > 1 for b in shape.branching):
            return (
                "conditional Poisson draws an unordered set; the law of each child given its elder "
                "siblings is not implemented (use one child per node)"
            )
        if name == "hub" and any(b != 2 for b in shape.branching):
            return "hub drafts exactly two children per node"
        return None

    def _walk(self, tree, rng=None, laws: bool = False):
        """The post-order visit sequence.

        Without ``rng``: ``[(node, P(the call stops at node), added-token law or None)]`` for every
        node the sequence reaches with positive probability (laws only when ``laws``). With ``rng``:
        the one ``(node, law)`` a sampled call stops at.
        """
        self.require(tree)
        P, tokens, children = tree.p, tree.tokens, tree.children
        n_int = tree.n_internal
        stops = []
        survive = 1.0  # P(every node visited so far was rejected)

        def stop(u, w, law):
            """Visit ``u`` with acceptance ``w``; True when the walk ends here."""
            nonlocal survive
            if rng is not None:
                return rng.random() < w
            if w > 0.0:
                stops.append((u, survive * w, law if laws else None))
            survive *= 1.0 - w
            return survive == 0.0

        # a frame: [node, w, m, index of the next child, its child laws, law of the child being verified]
        root_laws = child_draft_laws(tree.scheme, tree.q[0], tokens[children[0]])
        stack = [[0, 1.0, P[0].copy(), 0, root_laws, None]]
        while stack:
            f = stack[-1]
            v, kids = f[0], children[f[0]]
            if f[3] < kids.size:
                c = int(kids[f[3]])
                s = f[4][f[3]]
                f[3] += 1
                f[5] = s
                x = int(tokens[c])
                wc = min(1.0, float(f[2][x]) / float(s[x]))
                if wc > 0.0:
                    if c >= n_int:  # a leaf: accepted with w_c, then a bonus token from p_c
                        if stop(c, wc, P[c]):
                            return (c, P[c]) if rng is not None else stops
                    else:
                        kid_laws = child_draft_laws(tree.scheme, tree.q[c], tokens[children[c]])
                        stack.append([c, wc, wc * P[c], 0, kid_laws, None])
                        continue
                # the child (and its subtree) rejected: update v's residual
                f[1], f[2] = self._updated(f, P[v], s)
                continue
            # every child rejected: visit v itself
            stack.pop()
            w, law = f[1], f[2]
            if v == 0:  # the root's w is 1 in exact arithmetic: it always ends the walk
                w, law = 1.0, (law if law.sum() > 0.0 else P[0])
            if stop(v, w, law):
                return (v, law) if rng is not None else stops
            parent = stack[-1]
            parent[1], parent[2] = self._updated(parent, P[parent[0]], parent[5])
        raise RuntimeError("internal error: traversal verification ended without accepting the root")

    @staticmethod
    def _updated(frame, p_v, s):
        if frame[1] == 0.0:  # m = 0 stays 0 (Z = 0, D = 1)
            return 0.0, frame[2]
        w, m = _reject_update(frame[2], s)
        return (1.0, p_v.copy()) if m is None else (w, m)

    def expected_tokens(self, tree) -> float:
        depth = tree.depth
        return float(sum(pr * (depth[u] + 1) for u, pr, _ in self._walk(tree)))

    def outcome_law(self, tree) -> dict:
        out: dict = {}
        for u, pr, law in self._walk(tree, laws=True):
            _add(out, _emission(tree, u, law), pr)
        return out

    def verify(self, tree, rng) -> list:
        _check_rng(rng)
        u, law = self._walk(tree, rng=rng)
        return list(tree.path(u)) + [sample_index(law, rng.random())]


#: name -> tree-level verifier (docs/math.md#tree-level-verification).
TREE_VERIFIERS: dict[str, TreeVerifier] = {v.name: v for v in (BlockVerifier(), TraversalVerifier())}
