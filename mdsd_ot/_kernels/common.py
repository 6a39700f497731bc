"""Compensated running sums and ``logaddexp``: the building blocks of every kernel family."""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from .._config import INSERTION_MAX


@nb.njit(cache=True, inline="always")
def neumaier_add(s, c, v):
    """One step of Neumaier-compensated summation: returns the new ``(sum, compensation)``."""
    t = s + v
    if abs(s) >= abs(v):
        c += (s - t) + v
    else:
        c += (v - t) + s
    return t, c


@nb.njit(cache=True, inline="always")
def neumaier_add_nonneg(s, c, v):
    """:func:`neumaier_add` for ``s, v >= 0`` (then ``|s| >= |v|`` iff ``s >= v``): the same sum and
    compensation bit for bit, with max/min in place of the comparison of absolute values (no branch
    to mispredict when the terms come in random order)."""
    t = s + v
    c += (max(s, v) - t) + min(s, v)
    return t, c


@nb.njit(cache=True)
def prefix_sums(x):
    """``S[k] = sum(x[:k])`` for k = 0..V (Neumaier-compensated; :func:`prefix_sums_into`)."""
    out = np.empty(x.size + 1)
    prefix_sums_into(x, out)
    return out


@nb.njit(cache=True)
def suffix_sums(x):
    """``R[k] = sum(x[k:])`` for k = 0..V (Neumaier-compensated, summed from the end;
    :func:`suffix_sums_into`)."""
    out = np.empty(x.size + 1)
    suffix_sums_into(x, out)
    return out


@nb.njit(cache=True, inline="always")
def logaddexp(a, b):
    if a == -np.inf:
        return b
    if b == -np.inf:
        return a
    if a < b:
        a, b = b, a
    return a + math.log1p(math.exp(b - a))


@nb.njit(cache=True)
def prefix_sums_into(x, out):
    """``out[k] = sum(x[:k])`` for k = 0..V, Neumaier-compensated (``out``: length ``x.size + 1``)."""
    s = 0.0
    c = 0.0
    out[0] = 0.0
    for i in range(x.size):
        s, c = neumaier_add(s, c, x[i])
        out[i + 1] = s + c


@nb.njit(cache=True)
def suffix_sums_into(x, out):
    """``out[k] = sum(x[k:])`` for k = 0..V, Neumaier-compensated and summed from the end (``out``:
    length ``x.size + 1``)."""
    V = x.size
    s = 0.0
    c = 0.0
    out[V] = 0.0
    for i in range(V - 1, -1, -1):
        s, c = neumaier_add(s, c, x[i])
        out[i] = s + c


@nb.njit(cache=True)
def prefix_suffix_sums_into(ps, qs, P, Q, R):
    """:func:`prefix_sums_into` of ``ps`` and of ``qs`` (to ``P``, ``Q``) and :func:`suffix_sums_into`
    of ``qs`` (to ``R``) in one loop, for ``ps, qs >= 0`` (probabilities): the same three compensated
    sums bit for bit (:func:`neumaier_add_nonneg`, no branch), their chains side by side (about half
    the time of the three loops)."""
    V = qs.size
    sp = cp = sq = cq = sr = cr = 0.0
    P[0] = 0.0
    Q[0] = 0.0
    R[V] = 0.0
    for i in range(V):
        sp, cp = neumaier_add_nonneg(sp, cp, ps[i])
        P[i + 1] = sp + cp
        sq, cq = neumaier_add_nonneg(sq, cq, qs[i])
        Q[i + 1] = sq + cq
        j = V - 1 - i
        sr, cr = neumaier_add_nonneg(sr, cr, qs[j])
        R[j] = sr + cr


@nb.njit(cache=True)
def sort_run_descending(order, rs, ps, qs, a, e):
    """Sort positions ``[a, e)`` by ``rs`` (non-negative, not NaN) from high to low, stably (a run in
    token order keeps its ties in index order), carrying ``order``, ``ps`` and ``qs`` along: insertion up
    to ``INSERTION_MAX`` entries, a radix sort on the bits of ``rs`` above (:func:`radix_run_descending`).
    The evaluation plan's order pass (the binned scan sorts its short leaves by insertion itself). Every
    stable sort by the same keys gives the same permutation, so which one runs changes the cost only."""
    if e - a > INSERTION_MAX:
        radix_run_descending(order, rs, ps, qs, a, e)
        return
    for t in range(a + 1, e):
        r, i, x, y = rs[t], order[t], ps[t], qs[t]
        u = t
        while u > a and rs[u - 1] < r:
            rs[u], order[u], ps[u], qs[u] = rs[u - 1], order[u - 1], ps[u - 1], qs[u - 1]
            u -= 1
        rs[u], order[u], ps[u], qs[u] = r, i, x, y


#: Digit width of :func:`radix_run_descending` (2^11 counters: a few kB, in the L1 cache).
_RADIX_BITS = 11


@nb.njit(cache=True)
def radix_run_descending(order, rs, ps, qs, a, e):
    """:func:`sort_run_descending` for a long run: a stable least-significant-digit radix sort of the
    bit patterns of ``rs`` (increasing in the value for non-negative floats), over the bits in which the
    run's keys differ only (``kmax - key``, so that one pass per ``_RADIX_BITS`` bits of the run's
    range suffices: a bin of the binned scan spans at most 2^47 patterns, five passes), then ``order``,
    ``rs``, ``ps``, ``qs`` gathered along the permutation. O(m) per pass, against the ~log2(m) passes
    of a merge sort; ties keep their order (every pass is a stable counting sort)."""
    m = e - a
    buf = np.empty(1)
    view = buf.view(np.int64)
    d = np.empty(m, dtype=np.int64)
    kmax = np.int64(0)
    kmin = np.int64(0x7FFFFFFFFFFFFFFF)
    for t in range(m):
        buf[0] = rs[a + t]
        k = view[0]
        d[t] = k
        kmax = max(kmax, k)
        kmin = min(kmin, k)
    span = kmax - kmin
    if span == 0:  # all equal: the stable order is the present one
        return
    for t in range(m):
        d[t] = kmax - d[t]  # ascending in d = descending in rs
    nbits = 0
    while nbits < 63 and (span >> nbits) > 0:
        nbits += 1
    width = min(_RADIX_BITS, nbits)
    mask = (np.int64(1) << width) - 1
    perm = np.arange(m)
    tmp = np.empty(m, dtype=np.int64)
    dk = d.copy()  # the keys along perm (read in sequence)
    dt = np.empty(m, dtype=np.int64)
    counts = np.empty(mask + 2, dtype=np.int64)
    shift = 0
    while shift < nbits:
        counts[:] = 0
        for t in range(m):
            counts[((dk[t] >> shift) & mask) + 1] += 1
        for c in range(mask + 1):
            counts[c + 1] += counts[c]
        for t in range(m):
            c = (dk[t] >> shift) & mask
            f = counts[c]
            tmp[f] = perm[t]
            dt[f] = dk[t]
            counts[c] = f + 1
        perm, tmp = tmp, perm
        dk, dt = dt, dk
        shift += width
    o2 = order[a:e].copy()
    r2 = rs[a:e].copy()
    p2 = ps[a:e].copy()
    q2 = qs[a:e].copy()
    for t in range(m):
        j = perm[t]
        order[a + t] = o2[j]
        rs[a + t] = r2[j]
        ps[a + t] = p2[j]
        qs[a + t] = q2[j]


@nb.njit(cache=True, inline="always")
def _worse(q, a, b):
    """Whether token ``a`` ranks below token ``b`` (a smaller mass, or an equal one at a larger index)."""
    return q[a] < q[b] or (q[a] == q[b] and a > b)


@nb.njit(cache=True, inline="always")
def _sift_down(q, heap, j, size):
    """Move ``heap[j]`` down the min-heap ``heap[:size]`` (root: the worst token by :func:`_worse`)."""
    while True:
        c = 2 * j + 1
        if c >= size:
            break
        if c + 1 < size and _worse(q, heap[c + 1], heap[c]):
            c += 1
        if _worse(q, heap[c], heap[j]):
            heap[j], heap[c] = heap[c], heap[j]
            j = c
        else:
            break


@nb.njit(cache=True)
def top_k_tokens(q, k):
    """The ``k`` most likely tokens of ``q`` (``1 <= k < q.size``, no NaN) in decreasing order of mass,
    ties by index: ``np.argsort(-q, kind="stable")[:k]``, in one pass.

    A min-heap of the k best tokens so far (its root the worst of them); a later token enters only
    with a larger mass than the root's (an equal mass comes at a larger index: it ranks below), so
    most tokens cost one comparison. O(V + m log k) for m entries, at most O(V log k) (increasing
    masses); unlike ``np.argpartition``, whose selection degenerates on vectors where most masses tie
    (21 ms against 0.7 ms at V = 152,064 on a draft whose masses mostly share one floor value)."""
    heap = np.empty(k, dtype=np.int64)
    for i in range(k):  # the first k tokens, then heapified
        heap[i] = i
    for start in range(k // 2 - 1, -1, -1):
        _sift_down(q, heap, start, k)
    for i in range(k, q.size):
        if q[i] > q[heap[0]]:  # ranks above the worst kept (an equal mass has a larger index)
            heap[0] = i
            _sift_down(q, heap, 0, k)
    out = np.empty(k, dtype=np.int64)
    for pos in range(k - 1, -1, -1):  # pop the worst first: filled from the back
        out[pos] = heap[0]
        heap[0] = heap[pos]  # the heap now holds heap[:pos + 1]; its last entry goes to the root
        _sift_down(q, heap, 0, pos)
    return out
