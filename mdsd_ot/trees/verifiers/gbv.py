"""Greedy multi-path block verification, GBV (Thomas & Pal, 2026;
docs/math.md#greedy-multi-path-block-verification).

GBV verifies ``K`` paths of length ``L`` drafted independently from the draft model (a ``KxL`` tree of
i.i.d. drafts): it picks the path that ranks highest when paths are compared token by token, and runs
block verification on that one path with the law of "the best of ``K`` i.i.d. paths" as its draft law.
"""

from __future__ import annotations

import math

import numpy as np

from ...drafts import get_scheme
from .base import TreeVerifier, _check_rng, child_draft_laws
from .block import BlockVerifier

__all__ = ["GBVVerifier", "clipped_ratio_order", "best_of_k_law"]


def _clipped_ratio(p: np.ndarray, s: np.ndarray, tokens=None) -> np.ndarray:
    """``min(1, p / s)`` (1 where ``s = 0 < p``, 0 where both are 0), at ``tokens`` or everywhere: the
    one computation the path choice and the order share."""
    if tokens is not None:
        p, s = p[tokens], s[tokens]
    return np.minimum(np.divide(p, s, out=(p > 0).astype(np.float64), where=s > 0), 1.0)


def clipped_ratio_order(p: np.ndarray, s: np.ndarray) -> np.ndarray:
    """The tokens from lowest to highest rank at a node: by the clipped ratio ``r(y) = min(1, p(y) /
    s(y))``, ties (every token with ``p >= s`` has ``r = 1``) by token id.

    ``s`` is the law the node's children were drawn from. Tokens with ``s(y) = 0`` are never drafted and
    carry no draft mass; they rank by ``r = 1`` (``p > 0``) or 0 (``p = 0``). The path choice and the
    skewed law must use this one order: GBV is lossless only then.

    Parameters
    ----------
    p, s : ndarray (V,)
        Target law and draft law at the node.

    Returns
    -------
    ndarray (V,) int64
        ``order[i]`` the token of rank ``i`` (ascending).

    >>> clipped_ratio_order(np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])).tolist()
    [2, 0, 1]
    """
    r = _clipped_ratio(p, s)
    below = np.flatnonzero(r < 1.0)  # the tokens with r = 1 come last, by id; only the others are sorted
    key = r[below]
    idx = np.argsort(key)  # introsort; a stable sort (ties by id) only when two ratios tie exactly
    ranked = key[idx]
    if np.any(ranked[1:] == ranked[:-1]):
        idx = np.argsort(key, kind="stable")
    return np.concatenate((below[idx], np.flatnonzero(r >= 1.0))).astype(np.int64)


def _ranked_masses(s: np.ndarray, order: np.ndarray):
    """``(F, F-)``: the ``s``-mass of the tokens ranked at or below each token, and strictly below it
    (running sums in rank order)."""
    cum = np.cumsum(s[order])
    upper = np.empty_like(s)
    lower = np.empty_like(s)
    upper[order] = cum
    lower[order[0]] = 0.0
    lower[order[1:]] = cum[:-1]
    return upper, lower


def _best_of_k(s, upper, lower, a: float, K: int) -> np.ndarray:
    """:func:`best_of_k_law` from the ranked masses: ``s(y) S_{K-1}(y) / sum_{j<K} z^j`` with
    ``S_0 = 1``, ``S_m = W S_{m-1} + U^m`` (positive terms only)."""
    if K == 1 or not math.isfinite(a):
        return s.copy()
    u = (a + upper) / (a + 1.0)
    w = (a + lower) / (a + 1.0)
    z = a / (a + 1.0)
    acc = np.ones_like(s)
    power = np.ones_like(s)
    for _ in range(K - 1):
        power *= u
        acc *= w
        acc += power
    den = math.fsum(z**j for j in range(K))
    out = s * acc / den
    return out / out.sum()


def best_of_k_law(s: np.ndarray, order: np.ndarray, a: float, K: int) -> np.ndarray:
    """The law of the next token of the best of ``K`` i.i.d. paths, given its prefix.

    With ``F(y)`` the ``s``-mass of the tokens ranked at or below ``y`` (``order``), ``F-(y) = F(y) -
    s(y)`` and ``a`` the draft mass of the paths ranked below the prefix divided by the prefix's own
    (``a = 0`` at the root),

    .. math:: \\tilde q(y) = \\frac{(a + F(y))^K - (a + F^-(y))^K}{(a + 1)^K - a^K}
              = s(y) \\frac{\\sum_{j<K} u^j l^{K-1-j}}{\\sum_{j<K} z^j},
              \\quad u = \\tfrac{a + F}{a + 1},\\ l = \\tfrac{a + F^-}{a + 1},\\ z = \\tfrac{a}{a + 1}

    (the second form has no cancellation and no overflow); renormalised by its direct sum. ``a = inf``
    (a prefix of draft probability below the float range) gives ``s`` itself, the limit.

    Parameters
    ----------
    s : ndarray (V,)
        Draft law at the node (of each path's next token).
    order : ndarray (V,)
        :func:`clipped_ratio_order` at the node.
    a : float
        ``>= 0``.
    K : int
        Number of paths.

    Returns
    -------
    ndarray (V,)

    >>> s = np.array([0.5, 0.5])
    >>> best_of_k_law(s, np.array([0, 1]), 0.0, 2).tolist()  # max of two fair coins: 1 w.p. 3/4
    [0.25, 0.75]
    """
    upper, lower = _ranked_masses(s, order)
    return _best_of_k(s, upper, lower, a, K)


# -------------------------------------------------------------------------------------------- gbv
class GBVVerifier(TreeVerifier):
    """Greedy multi-path block verification of a ``KxL`` tree of i.i.d. paths
    (docs/math.md#greedy-multi-path-block-verification).

    1. **Path choice.** At every node the tokens are ranked by :func:`clipped_ratio_order` (the clipped
       ratio ``min(1, p/q)``, ties by token id); paths compare lexicographically under these ranks, and
       the call keeps the highest of the ``K`` drafted paths ``s`` (a greedy walk from the root, always
       into the best child; repeated paths are one).
    2. **Its law.** Along ``s``, ``qt_d = best_of_k_law(q, order, a_d, K)`` with ``a_0 = 0`` and
       ``a_{d+1} = (a_d + F-(s_{d+1})) / q(s_{d+1})``: the conditional laws of the best of ``K`` i.i.d.
       paths, so ``s`` is distributed exactly as ``prod_d qt_d``.
    3. **Block verification** (:class:`BlockVerifier`) of the chain ``s`` with draft laws ``qt_d``.

    Lossless because the chosen path is drawn from the laws it is verified with, whatever the other
    paths; with ``K = 1`` it is block verification (``qt = q``). The exact law is block verification's
    on one chain: O(L V + K L) per tree. The path choice and the law use one tie order: with two
    (e.g. ties broken by draft order in the walk, by token id in the law) the output is biased
    (docs/tree-decoding.md#auditing-a-tree-verifier).

    Trees: chains ``KxL`` of i.i.d. drafts (``with_replacement``); ``1xL`` under every scheme block
    verification accepts (the one path's law is the scheme's one-child law).

    Examples
    --------
    Sun et al.'s laws (V = 2, p = (1/3, 2/3), q = (2/3, 1/3)), two one-token paths ``0``, ``1``: ``1``
    ranks higher (clipped ratio 1 against 1/2) and is verified against ``qt = (4/9, 5/9)``, the law of
    the better of two draws; ``p(1) = 2/3 >= 5/9``, so it is kept surely and a bonus token follows:

    >>> from mdsd_ot.trees import DraftTree
    >>> p, q = [1 / 3, 2 / 3], [2 / 3, 1 / 3]
    >>> t = DraftTree("2x1", "with_replacement", [-1, 0, 1], [-1, 0, 0], [q], [p, p, p])
    >>> {e: round(pr, 6) for e, pr in sorted(GBVVerifier().outcome_law(t).items())}
    {(1, 0): 0.333333, (1, 1): 0.666667}
    """

    name = "gbv"
    paper = (
        "Thomas, Pal. Greedy multi-path block verification for faster decoding in speculative sampling. "
        "arXiv 2602.16961, 2026"
    )

    def why_not(self, shape, scheme) -> str | None:
        from ..shape import parse_shape

        shape = parse_shape(shape)
        name = get_scheme(scheme).name
        if not shape.is_chains:
            return (
                f"GBV verifies K drafted paths (shape KxL, e.g. '4x4'), not the tree {shape.label}; use "
                f"'traversal'"
            )
        K = shape.branching[0]
        if K == 1:
            return BlockVerifier().why_not(shape, scheme)
        if name != "with_replacement":
            return (
                f"GBV's path law is that of the best of K i.i.d. paths, and {name!r} does not draft the K "
                f"paths independently (only 'with_replacement' does); use 'traversal'"
            )
        return None

    def _chain(self, tree):
        """The chosen path as a ``1xL`` chain whose draft laws are the skewed laws ``qt``."""
        from ..tree import DraftTree

        self.require(tree)
        P, Q, tokens, children = tree.p, tree.q, tree.tokens, tree.children
        K, L = int(tree.shape.branching[0]), tree.shape.depth
        scheme = tree.scheme

        def law(v):
            """The law ``v``'s children were drawn from (their tokens validated)."""
            return child_draft_laws(scheme, Q[v], tokens[children[v]])[0]

        # 1. the greedy walk: keep the candidates carrying the highest-ranked token, by the key
        #    (clipped ratio, token id) of the order (compared on the candidates' tokens only)
        cands = [int(c) for c in children[0]]
        at = 0  # a node whose context is the prefix kept so far
        for d in range(L):
            toks = tokens[cands]
            r = _clipped_ratio(P[at], law(at), toks)
            best = max(zip(r.tolist(), toks.tolist()))[1]
            cands = [c for c, t in zip(cands, toks.tolist()) if t == best]
            if d + 1 < L:
                at = cands[0]
                cands = [int(children[c][0]) for c in cands]
        path = [0]
        v = cands[0]
        while v > 0:
            path.insert(1, v)
            v = int(tree.parent[v])
        # 2. the skewed laws along the path
        qts = []
        a = 0.0
        for d in range(L):
            s = law(path[d])
            order = clipped_ratio_order(P[path[d]], s)
            upper, lower = _ranked_masses(s, order)
            qts.append(_best_of_k(s, upper, lower, a, K))
            x = int(tokens[path[d + 1]])
            a = (a + float(lower[x])) / float(s[x])
        chain = DraftTree(
            f"1x{L}",
            "with_replacement",
            [-1] + [int(tokens[v]) for v in path[1:]],
            list(range(-1, L)),
            np.stack(qts),
            checked=True,
        )
        chain.set_target(P[path], checked=True)
        return chain

    def expected_tokens(self, tree) -> float:
        return BlockVerifier().expected_tokens(self._chain(tree))

    def outcome_law(self, tree) -> dict:
        return BlockVerifier().outcome_law(self._chain(tree))

    def verify(self, tree, rng) -> list:
        _check_rng(rng)
        return BlockVerifier().verify(self._chain(tree), rng)
