"""Traversal verification of a drafted tree (Weng et al., NeurIPS 2025;
docs/math.md#traversal-verification)."""

from __future__ import annotations

from ...drafts import get_scheme
from ...verifiers.base import sample_index
from .base import TreeVerifier, _add, _check_rng, _emission, _reject_update, capped_ratio, child_draft_laws

__all__ = ["TraversalVerifier"]


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
    one accept/reject sequence, so the exact law has at most ``N + 1`` stopping nodes; O(N V). The
    residual is kept factored as ``m = w r`` (``r`` a law) and every ratio goes through
    :func:`~mdsd_ot.trees.verifiers.base.capped_ratio`, so no ``w p(x)`` underflows before its
    division (docs/math.md#traversal-verification, numerics).

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
        from ..shape import parse_shape

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

        # a frame: [node, w, r, index of the next child, its child laws, law of the child being
        # verified]; the node's residual target mass is m = w r (r a law), kept factored
        root_laws = child_draft_laws(tree.scheme, tree.q[0], tokens[children[0]])
        stack = [[0, 1.0, P[0], 0, root_laws, None]]
        while stack:
            f = stack[-1]
            v, kids = f[0], children[f[0]]
            if f[3] < kids.size:
                c = int(kids[f[3]])
                s = f[4][f[3]]
                f[3] += 1
                f[5] = s
                x = int(tokens[c])
                wc = capped_ratio(f[1], float(f[2][x]), float(s[x]))  # m_v(x) / s(x), m_v = w r
                if wc > 0.0:
                    if c >= n_int:  # a leaf: accepted with w_c, then a bonus token from p_c
                        if stop(c, wc, P[c]):
                            return (c, P[c]) if rng is not None else stops
                    else:
                        kid_laws = child_draft_laws(tree.scheme, tree.q[c], tokens[children[c]])
                        stack.append([c, wc, P[c], 0, kid_laws, None])
                        continue
                # the child (and its subtree) rejected: update v's residual
                f[1], f[2] = self._updated(f, P[v], s)
                continue
            # every child rejected: visit v itself
            stack.pop()
            w, law = f[1], f[2]
            if v == 0:  # the root's w is 1 in exact arithmetic: it always ends the walk
                w, law = 1.0, (law if w > 0.0 and law.sum() > 0.0 else P[0])
            if stop(v, w, law):
                return (v, law) if rng is not None else stops
            parent = stack[-1]
            parent[1], parent[2] = self._updated(parent, P[parent[0]], parent[5])
        raise RuntimeError("internal error: traversal verification ended without accepting the root")

    @staticmethod
    def _updated(frame, p_v, s):
        w, r = _reject_update(frame[1], frame[2], s)  # w = 0 stays 0 (Z = 0, D = 1)
        return (1.0, p_v) if r is None else (w, r)

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
