"""Helpers shared by the draft schemes: top tokens, complements without cancellation, subset masks,
enumeration limits, the sequential tuple law and inverse-CDF draws."""

from __future__ import annotations

import math

import numpy as np

from .._config import ENUMERATION_MAX_TUPLES, TOP_HEAP_MIN_V
from ..backends._tensor import require_torch


def complement_parts(q: np.ndarray) -> tuple[float, int, float]:
    """The parts of :func:`complement_masses`, without its array.

    Parameters
    ----------
    q : numpy.ndarray
        Draft probabilities (non-empty).

    Returns
    -------
    (float, int, float)
        ``total = q.sum()``, ``big``, the token holding more than half of the mass (-1: none), and
        ``big_rest``, its ``1 - q`` summed directly (1.0 when there is none). Every other
        ``1 - q_i`` is ``total - q_i``.
    """
    total = q.sum()
    big = int(np.argmax(q))
    if q[big] > 0.5 * total:  # at most one token
        return total, big, np.delete(q, big).sum()
    return total, -1, 1.0


def complement_masses(q: np.ndarray) -> np.ndarray:
    """``1 - q_i`` for every token, computed without cancellation.

    Only a token holding more than half of the mass can suffer cancellation in ``sum(q) - q_i``;
    for it the complement is summed directly (:func:`complement_parts`).
    """
    total, big, big_rest = complement_parts(q)
    rest = total - q
    if big >= 0:
        rest[big] = big_rest
    return rest


def torch_complement_masses(qt):
    """:func:`complement_masses` of ``(B, V)`` tensors: ``total - q_i``, the largest token's as the direct
    sum of the others."""
    torch = require_torch()
    total = qt.sum(-1, keepdim=True)
    rest = total - qt
    top = torch.argmax(qt, -1, keepdim=True)
    others = torch.where(torch.arange(qt.shape[-1], device=qt.device).unsqueeze(0) == top, 0.0, qt).sum(-1)
    return rest.scatter_(-1, top, others.unsqueeze(-1))


def top_tokens(q: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` most likely tokens of ``q`` in decreasing order, ties broken by token index.

    Exactly ``np.argsort(-q, kind="stable")[:k]`` (the reference, and the path for ``k >= V`` and for
    input with NaN). Above ``TOP_HEAP_MIN_V`` tokens (float64 input) one pass keeping a heap of the
    best k (:func:`mdsd_ot._kernels.top_k_tokens`, O(V) for small k whatever the ties); below, in
    O(V + k log k): ``np.argpartition`` finds the k-th largest value ``v``; every token above ``v`` is
    taken and the remaining places go to the lowest-index tokens equal to ``v``; the ``k`` candidates
    are then sorted by value, ties by index.

    >>> top_tokens(np.array([0.1, 0.3, 0.2, 0.3, 0.1]), 3).tolist()
    [1, 3, 2]
    """
    q = np.asarray(q)
    V = q.size
    k = int(k)
    if k <= 0:
        return np.empty(0, dtype=np.int64)
    if k >= V or np.isnan(q).any():
        return np.argsort(-q, kind="stable")[:k].astype(np.int64)
    if k == 1:
        return np.array([int(np.argmax(q))], dtype=np.int64)  # argmax returns the first maximum
    if V >= TOP_HEAP_MIN_V and k <= V // 64 and q.dtype == np.float64 and q.ndim == 1:
        from .. import _kernels

        return _kernels.top_k_tokens(np.ascontiguousarray(q), k)
    v = q[np.argpartition(q, V - k)[V - k]]  # the k-th largest value
    above = np.flatnonzero(q > v)
    ties = np.flatnonzero(q == v)[: k - above.size]
    sel = np.concatenate([above, ties])
    return sel[np.lexsort((sel, -q[sel]))].astype(np.int64)


def _as_mask(subset, V: int) -> np.ndarray:
    mask = np.zeros(V, dtype=bool)
    subset = np.asarray(subset)
    if subset.dtype == bool:
        if subset.shape != (V,):
            raise ValueError(f"a boolean subset mask must have shape ({V},), got {subset.shape}")
        return subset.copy()
    mask[subset.astype(np.int64)] = True
    return mask


def _support_size(q: np.ndarray) -> int:
    return int(np.count_nonzero(q > 0))


def _check_enumerable(count: int) -> None:
    if count > ENUMERATION_MAX_TUPLES:
        raise ValueError(
            f"exact enumeration would visit {count:,} draft tuples (limit "
            f"{ENUMERATION_MAX_TUPLES:,}); use a smaller vocabulary or the dual solver"
        )


def _check_enumerable_log(log_count: float, exact_count, n: int) -> None:
    """:func:`_check_enumerable` from ``log(count)`` first, so that a huge count (``n`` up to 2**63)
    is rejected before it is built; ``exact_count()`` is only evaluated when the count is small.
    A single tuple of more than ``ENUMERATION_MAX_TUPLES`` drafts (one token with q > 0) is too large too.
    """
    if n > ENUMERATION_MAX_TUPLES:
        raise ValueError(
            f"exact enumeration of draft tuples of n = {n:,} drafts (more than {ENUMERATION_MAX_TUPLES:,}); "
            f"use the dual solver"
        )
    if log_count > math.log(ENUMERATION_MAX_TUPLES) + 1.0:
        raise ValueError(
            f"exact enumeration would visit about 10^{log_count / math.log(10):.0f} draft tuples (limit "
            f"{ENUMERATION_MAX_TUPLES:,}); use a smaller vocabulary or the dual solver"
        )
    _check_enumerable(exact_count())


#: Entries of the (tuples x tokens) mask :func:`_sequential_tuple_probs` holds at once.
_TUPLE_MASK_ENTRIES = 1 << 24


def _sequential_tuple_probs(q: np.ndarray, tuples: np.ndarray) -> np.ndarray:
    """Probability of each ordered tuple of distinct tokens under sequential sampling.

    The mass left before each draw is summed directly over the tokens not yet drawn, once per distinct
    prefix of drawn tokens (tuples sharing a prefix share it): before the first draw that is the whole
    sum (numpy's, once: the same bits as a row of all tokens), before the others a row of a mask of
    the prefix's tokens, in blocks of at most ``_TUPLE_MASK_ENTRIES`` entries (a mask of every tuple at
    once was tuples x V booleans: 21.5 GiB for the 151,936 one-token tuples of n = 1 at V = 151,936).
    Before the last draw there are ``T / (k - n + 1)`` prefixes for the ``T`` tuples of ``k`` tokens.
    """
    T, n = tuples.shape
    probs = q[tuples[:, 0]] / q.sum() if n else np.ones(T)
    block = max(1, _TUPLE_MASK_ENTRIES // max(q.size, 1))
    for i in range(1, n):
        prefixes, which = group_rows(tuples[:, :i])
        left = np.empty(len(prefixes))
        for a in range(0, len(prefixes), block):
            part = prefixes[a : a + block]
            remaining = np.ones((part.shape[0], q.size), dtype=bool)
            remaining[np.arange(part.shape[0])[:, None], part] = False
            left[a : a + block] = (remaining * q).sum(axis=1)
        probs *= q[tuples[:, i]] / left[which]
    return probs


def group_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of a 2-D integer array in lexicographic order, and each row's index among
    them: ``np.unique(rows, axis=0, return_inverse=True)`` by one ``np.lexsort`` (several times
    faster than numpy's row view at millions of rows)."""
    order = np.lexsort(rows.T[::-1])
    ranked = rows[order]
    first = np.ones(len(ranked), dtype=bool)
    first[1:] = (ranked[1:] != ranked[:-1]).any(axis=1)
    inverse = np.empty(len(ranked), dtype=np.int64)
    inverse[order] = np.cumsum(first) - 1
    return ranked[first], inverse


def _inverse_cdf(q: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse-CDF draws; a zero-mass token is never returned (``side='right'``, ``u < 1``)."""
    cdf = np.cumsum(q)
    idx = np.searchsorted(cdf, u * cdf[-1], side="right")
    return np.minimum(idx, np.flatnonzero(q > 0)[-1])


def _distinct_structure(drafts, q, n, cache):
    if len(set(drafts.tolist())) != drafts.size:
        raise ValueError(f"this scheme drafts distinct tokens; got {drafts.tolist()}")
