"""The base of tree-level verifiers, and what every one of them shares: the law each child was
drafted from (:func:`child_draft_laws`), the residual update after a rejected child, and the law of
the emitted tokens at a stopping node (docs/math.md#tree-level-verification)."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import numpy as np

from ...drafts import get_scheme, top_tokens

__all__ = ["TreeVerifier", "child_draft_laws", "capped_ratio"]


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
    scheme = get_scheme(scheme)
    name = scheme.name
    drafts = [int(x) for x in drafts]
    n, V = len(drafts), q.size
    if n == 0:
        return []
    if name == "with_replacement" or scheme.one_draw(n):
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


def capped_ratio(w: float, a: float, b: float) -> float:
    """``min(1, w a / b)`` for ``w, a >= 0`` and ``b > 0``, with no spurious underflow or overflow.

    ``w * a`` may underflow to 0 (``1e-200 * 1e-200``) and ``a / b`` overflow to ``inf``, although
    ``w a / b`` is an ordinary number (``1e-100`` for ``b = 1e-300``): the three are split into
    mantissas in ``[0.5, 1)`` and exponents (:func:`math.frexp`), the mantissas combined (in ``(0.25,
    2)``, two roundings) and the exponent applied last (:func:`math.ldexp`, one rounding; a result below
    the smallest float rounds to it or to 0, as the exact value would). Chained acceptance weights of
    tree verifiers (block, traversal) go through it, so a per-tree value does not depend on the order
    of a multiplication and a division.

    Parameters
    ----------
    w : float
        The running weight (a sequence-level acceptance), ``>= 0``.
    a, b : float
        The target and draft probabilities of the token, ``a >= 0``, ``b > 0``.

    Returns
    -------
    float
        ``min(1, w a / b)``, correctly rounded up to two roundings of the mantissas.

    Examples
    --------
    >>> capped_ratio(2.0**-600, 2.0**-600, 2.0**-1000) == 2.0**-200, 2.0**-600 * 2.0**-600 / 2.0**-1000
    (True, 0.0)
    >>> capped_ratio(1e-100, 0.5, 1e-101)
    1.0
    """
    if not (w > 0.0 and a > 0.0):
        return 0.0
    mw, ew = math.frexp(w)
    ma, ea = math.frexp(a)
    mb, eb = math.frexp(b)
    e = ew + ea - eb
    if e > 2:  # the mantissa part is above 1/4: the value is above 1
        return 1.0
    return min(1.0, math.ldexp(mw * ma / mb, e))


def _reject_update(w: float, r: np.ndarray, s: np.ndarray):
    """The state of a node after one child, drafted from ``s``, was rejected with its whole subtree.

    The node's residual target mass is ``m = w r`` (``w`` its sequence-level acceptance, ``r`` a law),
    kept factored so that no product ``w r(y)`` is ever divided by a draft probability. With
    ``Z = sum (m - s)_+`` and ``D = sum (s - m)_+ = 1 - w + Z`` (a direct sum, so no cancellation) the
    new state is ``w' = Z / D``, ``m' = (m - s)_+ / D``: returned as ``(w', r')`` with
    ``r' = (r - s / w)_+`` normalised (``s / w`` may overflow to ``inf``, which only zeroes entries
    whose exact value is 0) and ``w' = min(1, w sum(r - s / w)_+ / D)`` by :func:`capped_ratio`.
    ``w = 0`` stays ``(0, r)``; ``D = 0`` means ``m = s`` (so ``w = 1``): the rejected child was accepted
    with probability 1 and this branch has probability 0; ``(1, None)`` is returned, the caller then
    falls back to the node's target law.
    """
    if not w > 0.0:
        return 0.0, r
    with np.errstate(over="ignore", under="ignore"):
        u = np.maximum(r - s / w, 0.0)
        D = float(np.maximum(s - w * r, 0.0).sum())  # terms lost to underflow are below 5e-324 each
    if not D > 0.0:
        return 1.0, None
    total = float(u.sum())
    if not total > 0.0:
        return 0.0, r
    return capped_ratio(w, total, D), u / total


def _emission(tree, v: int, law: np.ndarray) -> dict:
    path = tree.path(v)
    total = law.sum()
    return {path + (int(y),): float(law[y] / total) for y in np.flatnonzero(law > 0)}


def _add(out: dict, law: dict, weight: float) -> None:
    for e, pr in law.items():
        out[e] = out.get(e, 0.0) + weight * pr
