"""The law of the first ``k`` tokens of chained target calls, by exact enumeration
(docs/math.md#tree-level-verification, condition (C)).

Tree decoding chains calls: a call at context ``c`` emits a string ``E`` (a path of its drafted tree
and one token), the next call starts at ``c + E`` with a freshly drafted tree, and so on. A tree
verifier is lossless exactly when the stream of emitted tokens has the target's autoregressive law
from every context. At tiny vocabularies both sides are computed exactly here:

* :func:`call_law` -- the law of what one call emits at a context, mixing a per-tree law over every
  ordered drafted tree of the shape and scheme (:meth:`TreeEnumeration.trees`);
* :func:`chained_law` -- the law of the first ``k`` streamed tokens, each call's law taken at the
  context the earlier calls reached;
* :func:`autoregressive_law` -- the target's own law of the next ``k`` tokens;
* :func:`prefix_deviation` -- the largest difference between two such laws over every prefix of
  length ``1..k``.

:func:`mdsd_ot.audit.audit_tree` is built on these.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

__all__ = ["call_law", "chained_law", "autoregressive_law", "prefix_laws", "prefix_deviation"]


def call_law(trees, law: Callable) -> dict:
    """The law of one call's emission over every drafted tree: ``sum_T P(T) law(T)``.

    Parameters
    ----------
    trees : iterable of (DraftTree, float)
        Every drafted tree at one context with its probability (:meth:`TreeEnumeration.trees`).
    law : callable
        ``law(tree) -> {tuple of int: probability}``, e.g. ``lambda t: outcome_law(t, "traversal")``.

    Returns
    -------
    dict
        ``{emission: probability}``.
    """
    out: dict = {}
    for tree, prob in trees:
        for e, pr in law(tree).items():
            out[e] = out.get(e, 0.0) + prob * pr
    return out


def chained_law(call: Callable, k: int, context=()) -> dict:
    """Exact law of the first ``k`` tokens streamed by chained calls from ``context``.

    .. math:: F(c, k) = \\sum_E L_c(E) \\, [E_{\\le k} \\text{ if } |E| \\ge k
              \\text{ else } E \\cdot F(c E, k - |E|)]

    Parameters
    ----------
    call : callable
        ``call(context) -> {emission: probability}``: the law of one call at a context (a tuple of
        tokens), e.g. :func:`call_law` over that context's trees. Called once per context reached by
        a stream shorter than ``k`` (memoise inside ``call`` if it is expensive).
    k : int
        Number of tokens (>= 1).
    context : tuple of int
        Where the first call starts.

    Returns
    -------
    dict
        ``{tuple of k tokens: probability}``.

    Examples
    --------
    A call that emits one token from ``(0.5, 0.5)`` at every context:

    >>> law = chained_law(lambda c: {(0,): 0.5, (1,): 0.5}, 2)
    >>> sorted(law.items())
    [((0, 0), 0.25), ((0, 1), 0.25), ((1, 0), 0.25), ((1, 1), 0.25)]
    """
    calls: dict = {}
    memo: dict = {}

    def F(base, k):
        if k == 0:
            return {(): 1.0}
        key = (base, k)
        if key in memo:
            return memo[key]
        if base not in calls:
            calls[base] = call(base)
        out: dict = {}
        for e, pr in calls[base].items():
            if pr == 0.0:
                continue
            if len(e) >= k:
                out[e[:k]] = out.get(e[:k], 0.0) + pr
                continue
            for s, w in F(base + e, k - len(e)).items():
                out[e + s] = out.get(e + s, 0.0) + pr * w
        memo[key] = out
        return out

    return F(tuple(int(t) for t in context), int(k))


def autoregressive_law(target: Callable, k: int, context=()) -> dict:
    """The target's own law of the next ``k`` tokens after ``context`` (strings of probability 0
    left out).

    Parameters
    ----------
    target : callable
        ``target(context) -> (V,)`` next-token law.
    k : int
    context : tuple of int

    Returns
    -------
    dict
        ``{tuple of k tokens: probability}``.

    >>> autoregressive_law(lambda c: [0.25, 0.75], 2)[(1, 1)]
    0.5625
    """
    context = tuple(int(t) for t in context)
    out = {(): 1.0}
    for _ in range(int(k)):
        nxt = {}
        for s, pr in out.items():
            law = np.asarray(target(context + s), dtype=np.float64)
            for y in np.flatnonzero(law > 0).tolist():
                nxt[s + (y,)] = pr * float(law[y])
        out = nxt
    return out


def prefix_laws(law: dict) -> dict:
    """Every prefix's probability from a law of ``k``-token strings, summed with ``math.fsum``.

    Parameters
    ----------
    law : dict
        ``{tuple of k tokens: probability}``.

    Returns
    -------
    dict
        ``{prefix: probability}`` for every prefix of length ``1..k`` of a string of ``law``.

    >>> prefix_laws({(0, 1): 0.25, (0, 0): 0.75})[(0,)]
    1.0
    """
    parts: dict = {}
    for s, pr in law.items():
        for j in range(1, len(s) + 1):
            parts.setdefault(s[:j], []).append(pr)
    return {s: math.fsum(v) for s, v in parts.items()}


def prefix_deviation(law: dict, reference: dict, *, tol: float | None = None) -> tuple:
    r"""The largest prefix deviation between two laws of ``k``-token strings, and where it shows first.

    .. math:: \max_{1 \le |s| \le k} |L(s) - R(s)|

    with ``L(s)``, ``R(s)`` the probabilities that a string begins with ``s`` (:func:`prefix_laws`).

    Parameters
    ----------
    law, reference : dict
        ``{tuple of k tokens: probability}``.
    tol : float or None
        Deviations up to ``tol`` are rounding (default ``LAW_TOL`` = 1e-12).

    Returns
    -------
    (float, tuple or None)
        The largest deviation, and the shortest prefix deviating by more than ``tol`` (among the
        shortest, the one deviating most; ``None`` when none does).

    >>> prefix_deviation({(0, 0): 0.5, (1, 1): 0.5}, {(0, 0): 0.25, (0, 1): 0.25, (1, 0): 0.25,
    ...                   (1, 1): 0.25})
    (0.25, (0, 0))
    """
    from .._config import LAW_TOL

    tol = LAW_TOL if tol is None else tol
    a, b = prefix_laws(law), prefix_laws(reference)
    worst, shortest, shortest_dev = 0.0, None, 0.0
    for s in sorted(set(a) | set(b), key=lambda s: (len(s), s)):
        d = abs(a.get(s, 0.0) - b.get(s, 0.0))
        worst = max(worst, d)
        if d > tol and (shortest is None or (len(s) == len(shortest) and d > shortest_dev)):
            shortest, shortest_dev = s, d
    return worst, shortest
