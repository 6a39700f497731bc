"""The base of tree-level verifiers, and what every one of them shares: the law each child was
drafted from (:func:`child_draft_laws`), the residual update after a rejected child, and the law of
the emitted tokens at a stopping node (docs/math.md#tree-level-verification)."""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from ...drafts import get_scheme, top_tokens

__all__ = ["TreeVerifier", "child_draft_laws"]


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
