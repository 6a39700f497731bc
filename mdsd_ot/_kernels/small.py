"""One call of the dual at small V in one kernel: validation, normalisation, the sorted-prefix scan and
the certificate's independent re-check, each computed as the general path computes it (numpy's
summation order included), so that ``optimal_acceptance`` returns the same bits without the Python
and numpy calls that dominate below a few thousand tokens (docs/performance.md#small-inputs)."""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from .._config import SUM_TOL
from .plan import ratio_order
from .scans import (
    complement_masses_kernel,
    scan_with_replacement,
    scan_without_replacement_2,
)
from .sequential import pair_mass_check


@nb.njit(cache=True, inline="always")
def _pairwise_block(x, lo, n):
    """numpy's sum of at most 128 contiguous terms ``x[lo:lo + n]``: fewer than 8 in order; else eight
    interleaved partial sums added as ``((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))``, then the
    rest in order."""
    if n < 8:
        res = 0.0
        for i in range(lo, lo + n):
            res += x[i]
        return res
    r0, r1, r2, r3 = x[lo], x[lo + 1], x[lo + 2], x[lo + 3]
    r4, r5, r6, r7 = x[lo + 4], x[lo + 5], x[lo + 6], x[lo + 7]
    i = 8
    end = n - n % 8
    while i < end:
        r0 += x[lo + i]
        r1 += x[lo + i + 1]
        r2 += x[lo + i + 2]
        r3 += x[lo + i + 3]
        r4 += x[lo + i + 4]
        r5 += x[lo + i + 5]
        r6 += x[lo + i + 6]
        r7 += x[lo + i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += x[lo + i]
        i += 1
    return res


@nb.njit(cache=True)
def numpy_sum(x):
    """``x.sum()`` for a contiguous float64 array, bit for bit: numpy's pairwise summation, blocks of
    at most 128 terms (:func:`_pairwise_block`) at the leaves of halvings that split at a multiple of
    8 and add the two halves' sums. Walked with an explicit stack (numba's cached recursion is
    unreliable)."""
    n = x.size
    if n <= 128:
        return _pairwise_block(x, 0, n)
    depth = 2
    m = n
    while m > 128:
        m //= 2
        depth += 1
    f_lo = np.empty(2 * depth + 2, dtype=np.int64)  # frames to visit: (lo, n, done)
    f_n = np.empty(2 * depth + 2, dtype=np.int64)
    f_done = np.empty(2 * depth + 2, dtype=np.bool_)
    vals = np.empty(2 * depth + 2)  # the sums of finished subtrees
    top = 0
    nv = 0
    f_lo[0], f_n[0], f_done[0] = 0, n, False
    while top >= 0:
        lo, k, done = f_lo[top], f_n[top], f_done[top]
        top -= 1
        if k <= 128:
            vals[nv] = _pairwise_block(x, lo, k)
            nv += 1
        elif done:  # both halves summed: the left one below the right one
            vals[nv - 2] = vals[nv - 2] + vals[nv - 1]
            nv -= 1
        else:
            k2 = k // 2
            k2 -= k2 % 8
            top += 1
            f_lo[top], f_n[top], f_done[top] = lo, k, True
            top += 1
            f_lo[top], f_n[top], f_done[top] = lo + k2, k - k2, False  # visited second
            top += 1
            f_lo[top], f_n[top], f_done[top] = lo, k2, False  # visited first
    return vals[0]


@nb.njit(cache=True, inline="always")
def _masked_block(p, q, mask, lo, n):
    """:func:`_pairwise_block` of ``p * mask``, ``q * mask`` and ``q * ~mask`` at once (masses: a term
    outside its mask is +0, as numpy's product gives it)."""
    a = np.zeros(8)
    b = np.zeros(8)
    c = np.zeros(8)
    if n < 8:
        ra = rb = rc = 0.0
        for i in range(lo, lo + n):
            m = mask[i]
            ra += p[i] if m else 0.0
            rb += q[i] if m else 0.0
            rc += 0.0 if m else q[i]
        return ra, rb, rc
    for j in range(8):
        m = mask[lo + j]
        a[j] = p[lo + j] if m else 0.0
        b[j] = q[lo + j] if m else 0.0
        c[j] = 0.0 if m else q[lo + j]
    i = 8
    end = n - n % 8
    while i < end:
        for j in range(8):
            m = mask[lo + i + j]
            a[j] += p[lo + i + j] if m else 0.0
            b[j] += q[lo + i + j] if m else 0.0
            c[j] += 0.0 if m else q[lo + i + j]
        i += 8
    ra = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]))
    rb = ((b[0] + b[1]) + (b[2] + b[3])) + ((b[4] + b[5]) + (b[6] + b[7]))
    rc = ((c[0] + c[1]) + (c[2] + c[3])) + ((c[4] + c[5]) + (c[6] + c[7]))
    while i < n:
        m = mask[lo + i]
        ra += p[lo + i] if m else 0.0
        rb += q[lo + i] if m else 0.0
        rc += 0.0 if m else q[lo + i]
        i += 1
    return ra, rb, rc


@nb.njit(cache=True)
def masked_sums(p, q, mask):
    """``((p * mask).sum(), (q * mask).sum(), (q * ~mask).sum())`` bit for bit, in one walk of
    :func:`numpy_sum`'s tree (non-negative ``p``, ``q``)."""
    n = p.size
    if n <= 128:
        return _masked_block(p, q, mask, 0, n)
    depth = 2
    m = n
    while m > 128:
        m //= 2
        depth += 1
    f_lo = np.empty(2 * depth + 2, dtype=np.int64)
    f_n = np.empty(2 * depth + 2, dtype=np.int64)
    f_done = np.empty(2 * depth + 2, dtype=np.bool_)
    va = np.empty(2 * depth + 2)
    vb = np.empty(2 * depth + 2)
    vc = np.empty(2 * depth + 2)
    top = 0
    nv = 0
    f_lo[0], f_n[0], f_done[0] = 0, n, False
    while top >= 0:
        lo, k, done = f_lo[top], f_n[top], f_done[top]
        top -= 1
        if k <= 128:
            va[nv], vb[nv], vc[nv] = _masked_block(p, q, mask, lo, k)
            nv += 1
        elif done:
            va[nv - 2] = va[nv - 2] + va[nv - 1]
            vb[nv - 2] = vb[nv - 2] + vb[nv - 1]
            vc[nv - 2] = vc[nv - 2] + vc[nv - 1]
            nv -= 1
        else:
            k2 = k // 2
            k2 -= k2 % 8
            top += 1
            f_lo[top], f_n[top], f_done[top] = lo, k, True
            top += 1
            f_lo[top], f_n[top], f_done[top] = lo + k2, k - k2, False
            top += 1
            f_lo[top], f_n[top], f_done[top] = lo, k2, False
    return va[0], vb[0], vc[0]


@nb.njit(cache=True, inline="always")
def _total_ok(x):
    """``(x.sum(), passes)``: the sum, and whether ``x`` passes ``check_totals`` without normalising
    (finite, non-negative entries, positive sum within ``SUM_TOL`` of one)."""
    total = numpy_sum(x)
    lowest = np.inf
    for i in range(x.size):
        lowest = min(lowest, x[i])
    ok = math.isfinite(total) and lowest >= 0.0 and total > 0.0 and abs(total - 1.0) <= SUM_TOL
    return total, ok


@nb.njit(cache=True)
def small_dual(p, q, n, code):
    """``optimal_acceptance(p, q, n)`` for i.i.d. drafts (``code`` 0, any n) or sequential drafts with
    n = 2 (``code`` 1) below ``BINNED_MIN_V`` tokens: ``(status, value, subset, diff)``.

    ``status`` 1: the input needs the general path (a check fails there with its message: entries or
    sums off, too few tokens with q > 0); 0: ``value`` = alpha*, ``subset`` the certificate H (sorted
    indices), ``diff`` = |re-check - value|. The same steps as the general path, in the same
    arithmetic: p and q divided by their (numpy-order) sums, identical distributions give 1 with the
    empty set, the order of :func:`mdsd_ot.dual.sorted_order` (the plan's bucket sort, as the general
    path's above 4,096 tokens), the scan kernel, H from the order, and the
    re-check ``p(H) + 1 - Q(H)`` from plain masked sums of the token order (``q(H)^n`` by ``pow``, as
    Python's ``**``; the outside mass's ``exp(n log1p(-R))`` form; for n = 2 sequential,
    :func:`pair_mass_check`), independent of the scan's compensated prefix sums."""
    V = p.size
    empty = np.empty(0, dtype=np.int64)
    sp, ok_p = _total_ok(p)
    sq, ok_q = _total_ok(q)
    if not (ok_p and ok_q):
        return 1, 0.0, empty, 0.0
    pn = p / sp
    qn = q / sq
    if code == 1:
        support = 0
        for i in range(V):
            support += qn[i] > 0.0
        if support < 2:
            return 1, 0.0, empty, 0.0
    same = True
    for i in range(V):
        if pn[i] != qn[i]:
            same = False
            break
    if same:  # p == q: alpha* = 1, certified by the empty set (objective 1)
        return 0, 1.0, empty, 0.0
    # the evaluation plan's bucket sort: the order of dual.sorted_order (by q/p, ties by index), p and q
    # gathered along it
    order, _, ps, qs = ratio_order(pn, qn)
    if code == 0 or n == 1:
        d, k = scan_with_replacement(ps, qs, n)
    else:
        d, k = scan_without_replacement_2(ps, qs, complement_masses_kernel(qs))
    value = max(1.0 - d, 0.0)
    if k == 0:
        return 0, value, empty, abs(1.0 - value)
    mask = np.zeros(V, dtype=np.bool_)
    if 2 * k <= V:
        for i in range(k):
            mask[order[i]] = True
    else:
        mask[:] = True
        for i in range(k, V):
            mask[order[i]] = False
    subset = np.flatnonzero(mask).astype(np.int64)
    inside_p, inside, outside = masked_sums(pn, qn, mask)
    if code == 0:
        if n > 1 and outside < 0.5:
            mass = min(math.exp(float(n) * math.log1p(-outside)), inside)
        else:
            mass = math.pow(inside, float(n))
    else:
        total, big, big_rest = _complement_parts(qn)
        mass = pair_mass_check(qn, mask, total, big, big_rest)
    check = inside_p + 1.0 - mass
    return 0, value, subset, abs(check - value)


@nb.njit(cache=True)
def _complement_parts(q):
    """``(total, big, big_rest)`` of :func:`mdsd_ot.drafts.complement_parts` with numpy's sums
    (:func:`numpy_sum`): the total mass, and the largest token with the sum of the others where it
    holds more than half of it (else ``big = -1``, ``big_rest = 1``)."""
    total = numpy_sum(q)
    big = int(np.argmax(q))
    if q[big] <= 0.5 * total:
        return total, -1, 1.0
    rest = np.empty(q.size - 1)
    rest[:big] = q[:big]
    rest[big:] = q[big + 1 :]
    return total, big, numpy_sum(rest)


@nb.njit(cache=True)
def pair_mass_rows(Q, masks):
    """``W_2(H_b)`` for every row of a ``(B, V)`` batch (the batch re-check of sequential n = 2): per
    row what :meth:`DraftScheme.mass` computes for one (:func:`mdsd_ot.drafts.complement_parts` with
    numpy's sums, :func:`numpy_sum`, then :func:`pair_mass_check`), without a Python call per row."""
    out = np.empty(Q.shape[0])
    for b in range(Q.shape[0]):
        total, big, big_rest = _complement_parts(Q[b])
        out[b] = pair_mass_check(Q[b], masks[b], total, big, big_rest)
    return out
