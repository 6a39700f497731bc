"""Kernels of the per-position evaluation plan (:mod:`mdsd_ot.plan`, docs/math.md#evaluation-plan).

Passes over the vocabulary that serve every bound and closed-form verifier of a position:

1. :func:`q_summary` (token order): the mass of q, its support, the top of q and the mass below it;
2. :func:`ratio_order_into`: the order by ``q/p`` (a bucket sort on the bits of the ratio), the
   ratios and p and q along it;
3. :func:`order_tables` (along the order, forward then backward): prefix and suffix sums and RSD
   with two drafts; :func:`prefix_scans`: every prefix scan for every n;
4. token-order sums (:func:`naive_moments`, :func:`greedy_sums`) and the greedy re-checks
   (:func:`top_check`, :func:`greedy_certificates`).

RRS and SpecTr are searches on the ratios of pass 2 and the sums of pass 3
(:func:`rrs_chain_order`, :func:`spectr_order`).

**Blocked sums.** Sums over the vocabulary whose terms are all non-negative run in blocks of
``PLAN_BLOCK`` tokens: inside a block the terms are added in any order (``fastmath={"reassoc"}`` on
that loop only, so that it runs on SIMD lanes), and the block sums are accumulated with Neumaier's
compensation. A block sum of ``b`` non-negative terms is exact to ``(b - 1) eps`` of itself, so the
whole sum is exact to ``(PLAN_BLOCK - 1) eps`` (3e-14) of its value; the loops outside those blocks
are not reassociated (the compensation would vanish).
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from .._config import INSERTION_MAX, ORDER_BINS_PER_TOKEN, PLAN_BLOCK, POWER_FROM_REST_N, PRUNE_MARGIN
from .common import neumaier_add, sort_run_descending
from .common import neumaier_add_nonneg as _add
from .scans import power_of_mass

#: Moments of the naive verifier computed per blocked pass (four accumulators on SIMD lanes).
_MOMENTS = 4

#: The smallest positive float64 (a threshold that underflowed to 0 still separates q = 0).
_TINY = 5e-324

_REASSOC = {"reassoc"}


# ------------------------------------------------------------------------------ pass 1: q
@nb.njit(cache=True, fastmath=_REASSOC, inline="always")
def _block_q(p, q, a, e):
    """``(sum q, #q > 0, max q, all p == q)`` over ``q[a:e]`` (non-negative terms, reassociated)."""
    s = 0.0
    cnt = 0
    mx = 0.0
    same = True
    for i in range(a, e):
        v = q[i]
        s += v
        cnt += v > 0.0
        mx = max(mx, v)
        same &= p[i] == v
    return s, cnt, mx, same


@nb.njit(cache=True)
def q_summary(p, q, k):
    """What the later passes need about ``q``, from one pass in token order.

    Returns ``(total, support, same, big, big_rest, top, tail)``: ``total`` the sum of q (blocked,
    compensated), ``support`` the number of tokens with ``q > 0``, ``same`` whether ``p == q`` token
    by token, ``big`` the token holding more than half of the mass (``-1`` if none) and ``big_rest``
    the mass of the others summed directly (``1 - q_big`` without cancellation), ``top`` the
    ``max(k, 1)`` most likely tokens in rank order (ties by lower index, as ``drafts.top_tokens``;
    fewer when ``V`` is smaller) and ``tail`` the mass of the tokens outside ``top``, summed directly:
    a block whose largest mass cannot enter the full top is added whole, the others token by token
    (a token evicted from the running top is added when it leaves).
    """
    V = q.size
    k = max(k, 1)
    top = np.empty(k, dtype=np.int64)
    cnt = 0
    ts, tc = 0.0, 0.0  # total
    hs, hc = 0.0, 0.0  # outside the running top
    support = 0
    same = True
    for a in range(0, V, PLAN_BLOCK):
        e = min(a + PLAN_BLOCK, V)
        s, c, mx, sm = _block_q(p, q, a, e)
        ts, tc = neumaier_add(ts, tc, s)
        support += c
        same = same and sm
        if cnt == k and not mx > q[top[k - 1]]:  # nothing here enters the top (ties rank lower)
            hs, hc = neumaier_add(hs, hc, s)
            continue
        for i in range(a, e):
            v = q[i]
            if cnt == k:
                if not v > q[top[k - 1]]:
                    hs, hc = neumaier_add(hs, hc, v)
                    continue
                hs, hc = neumaier_add(hs, hc, q[top[k - 1]])  # evicted
            u = cnt if cnt < k else k - 1
            while u > 0 and q[top[u - 1]] < v:
                top[u] = top[u - 1]
                u -= 1
            top[u] = i
            if cnt < k:
                cnt += 1
    total = ts + tc
    tail = hs + hc
    big = -1
    big_rest = 0.0
    if cnt > 0 and q[top[0]] > 0.5 * total:
        big = top[0]
        rs_, rc = tail, 0.0
        for r in range(cnt - 1, 0, -1):  # the smallest first
            rs_, rc = neumaier_add(rs_, rc, q[top[r]])
        big_rest = rs_ + rc
    return total, support, same, big, big_rest, top[:cnt].copy(), tail


# ------------------------------------------------------------------------------ pass 2: order
@nb.njit(cache=True)
def ratio_order_into(p, q, order, rs, ps, qs, bits, bins):
    """The token order of :func:`mdsd_ot.dual.sorted_order`, the ratios and p, q along it, into buffers.

    ``q/p`` from high to low, ``p = 0 < q`` first, ``q = 0`` last, ties (and both infinite runs) in
    token-index order: ``order[k]`` is the token at rank ``k``, ``rs[k]`` its ``q/p`` (``inf`` for
    ``p = 0 < q``, ``0`` for ``q = 0``), non-increasing, and ``ps[k]``, ``qs[k]`` its p and q. ``bits``
    (int64, V) and ``bins`` (int32, at least ``V + 2``; up to ``ORDER_BINS_PER_TOKEN`` bins per token
    are used when it holds them) are scratch.

    A bucket sort on the bits of the ratio (the bit pattern of a positive float is increasing in its
    value). Each token travels as one int64 record: the ratio's bits with the lowest ``ib`` cleared
    (``ib`` the bits of a token index) and ``last index - token`` in their place, so that records
    compare as (ratio truncated, then lower index first). The records are binned by the leading bits
    of the ratio (up to ``ORDER_BINS_PER_TOKEN`` bins per token over the occupied range, never finer
    than the truncation), scattered to their bins in token order, bins of more than ``INSERTION_MAX``
    records sorted whole and then one insertion pass over all records (it moves a record only inside
    its bin). Decoding gathers p and q of each token along the order (sequential writes) and divides
    again for the exact ratio; two tokens whose ratios differ only below the truncation (relative
    difference under ``2^(ib - 52)``) can come out in index order, so each run of equal truncated
    ratios with an inversion is sorted again by the exact ratio, stably. O(V) for spread-out ratios.
    """
    V = p.size
    buf = np.empty(1)
    view = buf.view(np.int64)
    lo = np.int64(1) << 62
    hi = np.int64(-1)
    n_first = 0
    n_last = 0
    for i in range(V):
        if q[i] == 0.0:
            bits[i] = -2
            n_last += 1
        elif p[i] == 0.0:
            bits[i] = -1
            n_first += 1
        else:
            buf[0] = q[i] / p[i]  # positive (q, p > 0); may be +inf, still the largest bits
            b = view[0]
            bits[i] = b
            lo = min(lo, b)
            hi = max(hi, b)
    m = V - n_first - n_last
    first = 0
    last = V - n_last
    if n_first + n_last > 0:
        for i in range(V):  # the two infinite runs, in index order
            if bits[i] == -1:
                order[first] = i
                rs[first] = np.inf
                ps[first] = p[i]
                qs[first] = q[i]
                first += 1
            elif bits[i] == -2:
                order[last] = i
                rs[last] = 0.0
                ps[last] = p[i]
                qs[last] = q[i]
                last += 1
    if m == 0:
        return
    ib = 0  # bits of a token index
    while (np.int64(1) << ib) < V:
        ib += 1
    imask = (np.int64(1) << ib) - 1
    max_bins = max(min(ORDER_BINS_PER_TOKEN * m, bins.size - 1), 1)
    shift = ib  # a bin never splits a truncated ratio
    while (hi >> shift) - (lo >> shift) + 1 > max_bins:
        shift += 1
    top = hi >> shift
    nb_ = top - (lo >> shift) + 1
    ends = bins[: nb_ + 1]  # counts, then each bin's start; the scatter moves them to its end
    ends[:] = 0
    for i in range(V):
        if bits[i] >= 0:
            ends[top - (bits[i] >> shift) + 1] += 1  # high ratios first
    big = False
    for j in range(nb_):
        big |= ends[j + 1] > INSERTION_MAX
        ends[j + 1] += ends[j]
    sb = rs.view(np.int64)[n_first : n_first + m]  # the records, decoded into the ratios in place
    for i in range(V):
        b = bits[i]
        if b >= 0:
            j = top - (b >> shift)
            f = ends[j]
            sb[f] = (b & ~imask) | (imask - i)
            ends[j] = f + 1
    if big:  # crowded bins: bucketed again on their own range (records are distinct: no stability needed)
        a = 0
        for j in range(nb_):
            e = ends[j]
            if e - a > INSERTION_MAX:
                _sort_records_descending(sb, a, e)
            a = e
    for t in range(1, m):  # insertion, high to low: records of different bins are already in order
        v = sb[t]
        if sb[t - 1] < v:
            u = t
            while u > 0 and sb[u - 1] < v:
                sb[u] = sb[u - 1]
                u -= 1
            sb[u] = v
    rb = rs.view(np.int64)
    for t in range(n_first, n_first + m):  # no loop-carried state: SIMD gathers and divisions
        i = imask - (rb[t] & imask)
        order[t] = i
        x = p[i]
        y = q[i]
        ps[t] = x
        qs[t] = y
        rs[t] = y / x
    inverted = False
    for t in range(n_first + 1, n_first + m):
        inverted |= rs[t] > rs[t - 1]
    if not inverted:
        return
    t = n_first + 1
    while t < n_first + m:  # runs of equal truncated ratios with an inversion: by the exact ratio
        if rs[t] > rs[t - 1]:
            key = rb[t] & ~imask
            a = t - 1
            while a > n_first and (rb[a - 1] & ~imask) == key:
                a -= 1
            e = t + 1
            while e < n_first + m and (rb[e] & ~imask) == key:
                e += 1
            sort_run_descending(order, rs, ps, qs, a, e)
            t = e
        else:
            t += 1


@nb.njit(cache=True, inline="always")
def _sort_records_descending(sb, a, e):
    """Sort the distinct int64 records ``sb[a:e]`` descending: one more bucket pass over their own
    range (about two bins a record: a bin of one ratio's tokens spreads by index, a bin of nearby
    ratios by their lower bits), then each sub-bin still above ``INSERTION_MAX`` sorted whole and the
    rest left to the caller's insertion pass. Where most tokens share a few ratio bins (a draft that is
    a constant times the target on most tokens) this replaces a comparison sort of tens of thousands of
    records by linear passes."""
    m = e - a
    if m <= 4 * INSERTION_MAX:
        sb[a:e] = np.sort(sb[a:e])[::-1]
        return
    lo = sb[a]
    hi = sb[a]
    for t in range(a + 1, e):
        lo = min(lo, sb[t])
        hi = max(hi, sb[t])
    shift = 0
    while (hi >> shift) - (lo >> shift) + 1 > 2 * m:
        shift += 1
    top = hi >> shift
    nb_ = top - (lo >> shift) + 1
    ends = np.zeros(nb_ + 1, dtype=np.int64)
    for t in range(a, e):
        ends[top - (sb[t] >> shift) + 1] += 1
    for j in range(nb_):
        ends[j + 1] += ends[j]
    tmp = np.empty(m, dtype=np.int64)
    for t in range(a, e):
        j = top - (sb[t] >> shift)
        tmp[ends[j]] = sb[t]
        ends[j] += 1
    sb[a:e] = tmp
    s0 = 0
    for j in range(nb_):
        s1 = ends[j]
        if s1 - s0 > INSERTION_MAX:
            sb[a + s0 : a + s1] = np.sort(sb[a + s0 : a + s1])[::-1]
        s0 = s1


@nb.njit(cache=True)
def ratio_order(p, q):
    """:func:`ratio_order_into` with fresh buffers: returns ``(order, rs, ps, qs)``."""
    V = p.size
    order = np.empty(V, dtype=np.int64)
    rs = np.empty(V)
    ps = np.empty(V)
    qs = np.empty(V)
    bins = np.empty(ORDER_BINS_PER_TOKEN * V + 2, dtype=np.int32)
    ratio_order_into(p, q, order, rs, ps, qs, np.empty(V, dtype=np.int64), bins)
    return order, rs, ps, qs


@nb.njit(cache=True, inline="always")
def first_below(rs, c, start):
    """The first position ``j`` with ``rs[j] < c`` in the non-increasing ``rs`` (``rs.size`` if none),
    galloping from ``start``: O(log d) for an answer ``d`` positions away."""
    m = rs.size
    start = min(max(start, 0), m)
    if start < m and rs[start] < c:  # the answer is at or before start: gallop down
        hi = start
        lo = 0
        step = 1
        while start - step >= 0:
            j = start - step
            if not rs[j] < c:
                lo = j + 1
                break
            hi = j
            step *= 2
    else:  # after start
        lo = start + 1 if start < m else m
        hi = m
        step = 1
        while start + step < m:
            j = start + step
            if rs[j] < c:
                hi = j
                break
            lo = j + 1
            step *= 2
    while lo < hi:
        mid = (lo + hi) // 2
        if rs[mid] < c:
            hi = mid
        else:
            lo = mid + 1
    return lo


# ------------------------------------------------------------------------------ pass 3: tables
@nb.njit(cache=True)
def order_tables(order, rs, ps, qs, total, big, big_rest, wor2, rsd2, P, Q, R, Ps, D, S):
    """Prefix and suffix sums along the order (``ps``, ``qs`` from :func:`ratio_order_into`), and RSD
    with two drafts.

    Forward: the prefix sums ``P``, ``Q`` (compensated) and, for sequential n = 2
    (``wor2``), ``S[k] = sum_{i < k, i != big} q_i / (1 - q_i)`` (``1 - q_i`` as ``total - q_i``, no
    cancellation below half of the mass). Backward: the suffix sums ``R`` of q, ``Ps`` of p and ``D``
    of ``(p - q)_+`` (direct, compensated). With ``rsd2``, RSD's rejection with two sequential drafts
    (docs/math.md#rsd): the tokens ``x`` with ``q > p`` form the head of the order, and
    ``G_x = R'_k - Q_k / (1 - q_x)`` sums over the tokens with ``q/p < (1 - q_x) / (1 - q_x + tv)``, a
    suffix of the order whose sums ``D / tv`` and ``R`` are complete when the backward pass reaches
    the head; each suffix is found by galloping on ``rs``.

    Returns ``(big_pos, rsd_rejection)``: the rank of the big token (``V + 1`` if none).
    """
    V = ps.size
    P[0] = 0.0
    Q[0] = 0.0
    sp, cp, sq, cq, so, co = 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
    big_pos = V + 1
    for k in range(V):
        a = ps[k]
        b = qs[k]
        sp, cp = _add(sp, cp, a)
        sq, cq = _add(sq, cq, b)
        P[k + 1] = sp + cp
        Q[k + 1] = sq + cq
        if wor2:
            S[k] = so + co
            if order[k] == big:
                big_pos = k
            elif b > 0.0:
                so, co = _add(so, co, b / (total - b))
    if wor2:
        S[V] = so + co
    sr, cr, sP, cP, sd, cd = 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
    R[V] = 0.0
    Ps[V] = 0.0
    D[V] = 0.0
    rej_s, rej_c = 0.0, 0.0
    tv = -1.0
    start = 0
    for k in range(V - 1, -1, -1):
        a = ps[k]
        b = qs[k]
        sr, cr = _add(sr, cr, b)
        sP, cP = _add(sP, cP, a)
        if a > b:
            sd, cd = _add(sd, cd, a - b)
        R[k] = sr + cr
        Ps[k] = sP + cP
        D[k] = sd + cd
        if rsd2 and b > a:
            if tv < 0.0:  # the first token with q > p: every token with p > q lies behind it
                tv = D[k + 1]
                start = first_below(rs, 1.0 / (1.0 + tv), k + 1) if tv > 0.0 else 0
            if tv <= 0.0:
                continue
            rest = big_rest if order[k] == big else total - b
            if rest <= 0.0:  # q one-hot at x: no second draft to reject
                continue
            c = rest / (rest + tv)
            if c <= 0.0:
                c = _TINY
            j = first_below(rs, c, start)  # r'_y (1 - q_x) > q_y exactly for the tokens from j on
            g = D[j] / tv - R[j] / rest
            if g > 0.0:
                rej_s, rej_c = neumaier_add(rej_s, rej_c, (b - a) * g)
    return big_pos, rej_s + rej_c


@nb.njit(cache=True, inline="always")
def _excess(P, Q, R, S, big_q, big_rest, big_pos, n, k, kind):
    """The excess ``Q(H_k) - p(H_k)`` of a prefix scan. ``kind`` 0: sequential n = 2
    (``(Q_k - P_k) - R_k S_k - q_b (R_k / (1 - q_b))``, :func:`scans.scan_without_replacement_2_sums`);
    1: with replacement, ``q(H)^n`` by repeated multiplication (``n <= POWER_FROM_REST_N``, about n ulps;
    capped by ``q(H)``); 2: with replacement, :func:`power_of_mass` (larger n)."""
    Qk = Q[k]
    if kind == 0:
        Rk = R[k]
        return (Qk - P[k]) - Rk * S[k] - (big_q * (Rk / big_rest) if big_pos < k else 0.0)
    if kind == 1:
        x = Qk
        for _ in range(n - 1):
            x *= Qk
        return min(x, Qk) - P[k]
    return power_of_mass(Qk, R[k], n) - P[k]


@nb.njit(cache=True, inline="always")
def _pruned_scan(P, Q, R, S, big_q, big_rest, big_pos, n, kind):
    """``(D, k)`` of one prefix scan (:func:`prefix_scans`); inlined once per ``kind`` with the kind a
    constant, so that each loop holds only its own excess (a loop that could reach the exp/log1p of
    ``power_of_mass`` ran several times slower for small n)."""
    V = P.size - 1
    best = 0.0
    best_k = 0
    for k in range(PLAN_BLOCK, V + 1, PLAN_BLOCK):
        d = _excess(P, Q, R, S, big_q, big_rest, big_pos, n, k, kind)
        if d > best:
            best = d
            best_k = k
    d = _excess(P, Q, R, S, big_q, big_rest, big_pos, n, V, kind)
    if d > best:
        best = d
        best_k = V
    for a in range(0, V, PLAN_BLOCK):
        e = min(a + PLAN_BLOCK, V)
        ub = _excess(P, Q, R, S, big_q, big_rest, big_pos, n, e, kind) + (P[e] - P[a])
        if ub < best - PRUNE_MARGIN:  # no prefix of this block comes near the best (rounding)
            continue
        for k in range(a + 1, e):
            d = _excess(P, Q, R, S, big_q, big_rest, big_pos, n, k, kind)
            if d > best or (d == best and k < best_k and d > 0.0):
                best = d
                best_k = k
    return best, best_k


@nb.njit(cache=True)
def prefix_scans(P, Q, R, S, big_q, big_rest, big_pos, ns):
    """``(D, k)`` of every prefix scan of ``ns`` (``n > 0``: with replacement; ``0``: sequential n = 2):
    the largest excess over ``k = 0..V`` (0 for the empty set) and its first maximiser.

    Pruned: the excess is evaluated at every ``PLAN_BLOCK``-th prefix first; inside a block
    ``[a, e]`` it is at most ``Q(H_e) - P_a`` (``Q(H)`` grows with ``H``, P too), so only the blocks
    whose bound is not below the best value by more than ``PRUNE_MARGIN`` (rounding of the bound) are
    scanned token by token.
    """
    m = ns.size
    out = np.zeros((m, 2))
    for j in range(m):
        n = ns[j]
        if n == 0:
            best, best_k = _pruned_scan(P, Q, R, S, big_q, big_rest, big_pos, n, 0)
        elif n <= POWER_FROM_REST_N:
            best, best_k = _pruned_scan(P, Q, R, S, big_q, big_rest, big_pos, n, 1)
        else:
            best, best_k = _pruned_scan(P, Q, R, S, big_q, big_rest, big_pos, n, 2)
        out[j, 0] = best
        out[j, 1] = best_k
    return out


# ------------------------------------------------------------------------ pass 4: token sums
@nb.njit(cache=True, fastmath=_REASSOC, inline="always")
def _block_moments(p, q, total, j0, a, e):
    """``sum p q m^j`` for ``j = j0 .. j0 + 3`` over ``[a, e)``, ``m = total - q`` (non-negative)."""
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    for i in range(a, e):
        qi = q[i]
        m = total - qi
        w = p[i] * qi
        for _ in range(j0):
            w *= m
        s0 += w
        w *= m
        s1 += w
        w *= m
        s2 += w
        w *= m
        s3 += w
    return s0, s1, s2, s3


@nb.njit(cache=True, fastmath=_REASSOC, inline="always")
def _block_sum(x, a, e):
    s = 0.0
    for i in range(a, e):
        s += x[i]
    return s


@nb.njit(cache=True)
def naive_moments(p, q, total, big, big_rest, J):
    """``M_j = sum_i p_i q_i m_i^j`` for ``j < J`` (``m_i = 1 - q_i``: ``total - q_i``, the big token's
    ``big_rest``) and ``sum p``, blocked. The naive verifier accepts ``sum p (1 - m^n) = sum_{j < n}
    M_j`` with n i.i.d. drafts: positive terms only, no logarithm (docs/math.md#evaluation-plan).
    Returns ``(M, sum_p)``."""
    V = p.size
    Jr = ((J + _MOMENTS - 1) // _MOMENTS) * _MOMENTS
    acc = np.zeros((Jr, 2))
    ps_, pc = 0.0, 0.0
    lo = 0
    for seg in range(2):
        hi = big if (seg == 0 and big >= 0) else V
        for a in range(lo, hi, PLAN_BLOCK):
            e = min(a + PLAN_BLOCK, hi)
            ps_, pc = neumaier_add(ps_, pc, _block_sum(p, a, e))
            for j0 in range(0, Jr, _MOMENTS):
                s = _block_moments(p, q, total, j0, a, e)
                for r in range(_MOMENTS):
                    acc[j0 + r, 0], acc[j0 + r, 1] = neumaier_add(acc[j0 + r, 0], acc[j0 + r, 1], s[r])
        if hi == V:
            break
        w = p[big] * q[big]  # the big token: m = big_rest
        ps_, pc = neumaier_add(ps_, pc, p[big])
        for j in range(Jr):
            acc[j, 0], acc[j, 1] = neumaier_add(acc[j, 0], acc[j, 1], w)
            w *= big_rest
        lo = big + 1
    M = np.empty(J)
    for j in range(J):
        M[j] = acc[j, 0] + acc[j, 1]
    return M, ps_ + pc


@nb.njit(cache=True)
def naive_log(p, q, total, big, big_rest, n):
    """``(sum p (1 - m^n), sum p m^n)`` with ``m^n = exp(n log m)``: the naive verifier for large n."""
    a_s, a_c, r_s, r_c = 0.0, 0.0, 0.0, 0.0
    for i in range(p.size):
        if p[i] == 0.0:
            continue
        m = big_rest if i == big else total - q[i]
        if q[i] < 0.5:
            lm = math.log1p(-q[i])
        else:
            lm = math.log(m) if m > 0.0 else -np.inf
        a_s, a_c = neumaier_add(a_s, a_c, p[i] * min(max(-math.expm1(n * lm), 0.0), 1.0))
        r_s, r_c = neumaier_add(r_s, r_c, p[i] * math.exp(n * lm))
    return a_s + a_c, r_s + r_c


@nb.njit(cache=True, fastmath=_REASSOC, inline="always")
def _block_greedy(p, q, inv, a, e):
    """``(sum min(p, q'), sum (p - q')_+, sum (q' - p)_+)`` over ``[a, e)``, ``q' = q inv``."""
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    for i in range(a, e):
        pi_ = p[i]
        qp = q[i] * inv
        mn = min(pi_, qp)
        s0 += mn
        s1 += pi_ - mn
        s2 += qp - mn
    return s0, s1, s2


@nb.njit(cache=True, fastmath=_REASSOC, inline="always")
def _block_greedy_div(p, q, rest, a, e):
    """:func:`_block_greedy` with ``q' = q / rest`` by a division per token: for a rest mass below
    ``GREEDY_INV_MIN``, whose reciprocal overflows (``q * inf = inf``: every sum of min was then 1)
    or loses its relative accuracy; ``q <= rest`` on these tokens, so ``q'`` does not overflow."""
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    for i in range(a, e):
        pi_ = p[i]
        qp = q[i] / rest
        mn = min(pi_, qp)
        s0 += mn
        s1 += pi_ - mn
        s2 += qp - mn
    return s0, s1, s2


#: Below this rest mass the greedy sums divide by it token by token instead of multiplying by its
#: reciprocal (which is finite and normal up to 2^1000, so ``q * (1 / rest)`` is within 2 ulps there).
GREEDY_INV_MIN = 2.0**-1000


@nb.njit(cache=True, inline="always")
def _greedy_block(p, q, inv, rest, a, e):
    if rest < GREEDY_INV_MIN:
        return _block_greedy_div(p, q, rest, a, e)
    return _block_greedy(p, q, inv, a, e)


@nb.njit(cache=True)
def greedy_sums(p, q, top, ns, rest):
    """The greedy closed forms for every n of ``ns`` (docs/math.md#greedy-and-hub).

    ``top`` holds the ``K >= max(ns) - 1`` most likely tokens in rank order; for n the fixed tokens are
    ``top[:n - 1]`` and ``q' = q / rest[j]`` on the others (``rest[j]`` their mass, summed directly;
    as ``q * (1 / rest[j])``, by a division below ``GREEDY_INV_MIN``).
    The tokens outside ``top`` are summed by blocks between the top tokens' indices, the unused part of
    ``top`` one by one. Returns ``out[j] = (p(Top), sum min(p, q'), sum (p - q')_+, sum (q' - p)_+)``.
    """
    V = p.size
    K = top.size
    m = ns.size
    cuts = np.sort(top)
    acc = np.zeros((m, 6))
    inv = np.empty(m)
    for j in range(m):
        inv[j] = 1.0 / rest[j]
    lo = 0
    for c in range(K + 1):
        hi = cuts[c] if c < K else V
        for a in range(lo, hi, PLAN_BLOCK):
            e = min(a + PLAN_BLOCK, hi)
            for j in range(m):
                s0, s1, s2 = _greedy_block(p, q, inv[j], rest[j], a, e)
                acc[j, 0], acc[j, 1] = neumaier_add(acc[j, 0], acc[j, 1], s0)
                acc[j, 2], acc[j, 3] = neumaier_add(acc[j, 2], acc[j, 3], s1)
                acc[j, 4], acc[j, 5] = neumaier_add(acc[j, 4], acc[j, 5], s2)
        lo = hi + 1
    out = np.zeros((m, 4))
    for j in range(m):
        fixed = ns[j] - 1
        ph, pc = 0.0, 0.0
        for r in range(fixed):
            ph, pc = neumaier_add(ph, pc, p[top[r]])
        for r in range(fixed, K):  # the part of the top that is not fixed for this n
            i = top[r]
            s0, s1, s2 = _greedy_block(p, q, inv[j], rest[j], i, i + 1)
            acc[j, 0], acc[j, 1] = neumaier_add(acc[j, 0], acc[j, 1], s0)
            acc[j, 2], acc[j, 3] = neumaier_add(acc[j, 2], acc[j, 3], s1)
            acc[j, 4], acc[j, 5] = neumaier_add(acc[j, 4], acc[j, 5], s2)
        out[j, 0] = ph + pc
        out[j, 1] = acc[j, 0] + acc[j, 1]
        out[j, 2] = acc[j, 2] + acc[j, 3]
        out[j, 3] = acc[j, 4] + acc[j, 5]
    return out


# ------------------------------------------------------------------------- greedy re-checks
@nb.njit(cache=True, fastmath=_REASSOC, inline="always")
def _block_sum_max(x, a, e):
    s = 0.0
    mx = -np.inf
    for i in range(a, e):
        s += x[i]
        mx = max(mx, x[i])
    return s, mx


@nb.njit(cache=True, inline="always")
def _position(i, top):
    for r in range(top.size):
        if top[r] == i:
            return r
    return -1


@nb.njit(cache=True)
def top_check(q, top):
    """Re-check of the greedy ``top``, independent of :func:`q_summary`: ``(ok, tail)`` where ``ok``
    says that ``top`` is in rank order and every other token has a smaller mass than its last one, or
    an equal one and a larger index (``drafts.top_tokens``), and ``tail`` is the mass of the other
    tokens summed directly by blocks (in token order)."""
    V = q.size
    K = top.size
    ok = True
    for r in range(1, K):
        a, b = q[top[r - 1]], q[top[r]]
        if not (a > b or (a == b and top[r - 1] < top[r])):
            ok = False
    cuts = np.sort(top)
    low = q[top[K - 1]] if K > 0 else np.inf
    ts, tc = 0.0, 0.0
    mx = -np.inf
    lo = 0
    for c in range(K + 1):
        hi = cuts[c] if c < K else V
        for a in range(lo, hi, PLAN_BLOCK):
            s, m_ = _block_sum_max(q, a, min(a + PLAN_BLOCK, hi))
            ts, tc = neumaier_add(ts, tc, s)
            mx = max(mx, m_)
        lo = hi + 1
    if mx > low:
        ok = False
    elif K > 0 and mx == low:  # a tie with the last top token: it must have a larger index
        last = top[K - 1]
        for i in range(last):
            if q[i] == low and _position(i, top) < 0:
                ok = False
                break
    return ok, ts + tc


@nb.njit(cache=True, fastmath=_REASSOC, inline="always")
def _block_cert(p, q, rest, a, e):
    """``(p, q)`` summed over the tokens of ``[a, e)`` with ``q / rest > p``, tested as
    ``q > p rest`` (no division; a token the two forms classify differently has ``q / rest = p`` to
    rounding and moves the objective by that rounding only; non-negative terms)."""
    s0 = 0.0
    s1 = 0.0
    for i in range(a, e):
        qi = q[i]
        pi_ = p[i]
        w = np.float64(qi > pi_ * rest)  # a 0/1 weight, not a branch (random outcomes)
        s0 += pi_ * w
        s1 += qi * w
    return s0, s1


@nb.njit(cache=True)
def greedy_certificates(p, q, top, ns, rest):
    """``p(H) + 1 - Q(H)`` of the greedy certificates ``H = top[:n - 1] + {q / rest > p}`` for every n
    of ``ns`` (``rest[j]`` the mass outside ``top[:n - 1]``, from :func:`top_check`), by blocked masked
    sums in token order: independent of :func:`greedy_sums` (another criterion for ``H``, sums of
    ``p`` and ``q`` over it rather than of ``min`` and excesses, and its own rest masses)."""
    V = p.size
    K = top.size
    m = ns.size
    cuts = np.sort(top)
    acc = np.zeros((m, 4))
    lo = 0
    for c in range(K + 1):
        hi = cuts[c] if c < K else V
        for a in range(lo, hi, PLAN_BLOCK):
            e = min(a + PLAN_BLOCK, hi)
            for j in range(m):
                s0, s1 = _block_cert(p, q, rest[j], a, e)
                acc[j, 0], acc[j, 1] = neumaier_add(acc[j, 0], acc[j, 1], s0)
                acc[j, 2], acc[j, 3] = neumaier_add(acc[j, 2], acc[j, 3], s1)
        lo = hi + 1
    out = np.empty(m)
    for j in range(m):
        for r in range(K):
            i = top[r]
            if r < ns[j] - 1:
                acc[j, 0], acc[j, 1] = neumaier_add(acc[j, 0], acc[j, 1], p[i])
            else:
                s0, s1 = _block_cert(p, q, rest[j], i, i + 1)
                acc[j, 0], acc[j, 1] = neumaier_add(acc[j, 0], acc[j, 1], s0)
                acc[j, 2], acc[j, 3] = neumaier_add(acc[j, 2], acc[j, 3], s1)
        out[j] = (acc[j, 0] + acc[j, 1]) + 1.0 - (acc[j, 2] + acc[j, 3]) / rest[j]
    return out


# ----------------------------------------------------------------- verifiers on the tables
@nb.njit(cache=True)
def rrs_chain_order(rs, ps, qs, Ps, R, ns):
    """P(all n RRS steps reject) for every n of ``ns`` (increasing), along one run of the chain
    (docs/math.md#rrs; :func:`mdsd_ot.verifiers.specinfer.rrs_chain` on the plan's tables).

    The tokens with ``t = p/q > theta`` are those with ``q/p < 1/theta``: a suffix of the order, whose
    p and q masses are ``Ps``, ``R`` at its first position (galloping on ``rs``). Between two changes
    of that suffix the chain is geometric and is jumped over as in ``rrs_chain``.
    """
    V = rs.size
    out = np.empty(ns.size)
    total = Ps[0]
    theta = 0.0
    E = total
    j = first_below(rs, np.inf, 0)  # every token with p > 0 (t > 0)
    k = 0
    for idx in range(ns.size):
        n = ns[idx]
        while k < n:
            theta = theta + E  # one explicit step
            j_new = first_below(rs, 1.0 / theta, j)
            E = max(Ps[j_new] - theta * R[j_new], 0.0)
            k += 1
            if E <= 0.0 or k >= n:
                j = j_new
                break
            if j_new == j:  # the support did not change in this step: jump while it stays the same
                Qj = R[j]
                if Qj <= 0.0:
                    k = n  # only q = 0 tokens left: every later step rejects with probability 1
                    break
                log_keep = math.log1p(-Qj) if Qj < 1.0 else -np.inf
                t_next = ps[j] / qs[j] if (j < V and qs[j] > 0.0) else np.inf
                g = 1.0 - (t_next - theta) * Qj / E
                if g <= 0.0 or log_keep == -np.inf:
                    s = n - k
                else:
                    s = min(n - k, max(int(math.log(g) / log_keep) - 1, 0))  # one short of the crossing
                if s > 0:
                    decay = s * log_keep
                    theta = theta + E * (-math.expm1(decay)) / Qj
                    E = E * math.exp(decay)
                    k += s
            j = j_new
        if E <= 0.0:
            k = max(k, n)
        out[idx] = min(E / total, 1.0) if total > 0.0 else 0.0
    return out


@nb.njit(cache=True, inline="always")
def _accept_any(beta, reject, n):
    """``1 - (1 - beta)^n`` with ``reject = 1 - beta`` summed directly (``spectr.accept_any``)."""
    if reject <= 0.0:
        return 1.0
    log_reject = math.log1p(-beta) if beta < 0.5 else math.log(reject)
    return -math.expm1(n * log_reject)


@nb.njit(cache=True, inline="always")
def _count_above(rs, c):
    """``#{j : rs[j] > c}`` for the non-increasing ``rs`` (binary search)."""
    lo = 0
    hi = rs.size
    while lo < hi:
        mid = (lo + hi) // 2
        if rs[mid] > c:
            lo = mid + 1
        else:
            hi = mid
    return lo


@nb.njit(cache=True)
def spectr_order(rs, P, Q, R, t_max, n):
    """SpecTr's acceptance with n i.i.d. drafts (docs/math.md#spectr) on the plan's tables.

    ``rho*`` is the smallest ``rho`` in ``[1, min(n, t_max)]`` with ``rho beta(rho) >= 1 - (1 -
    beta(rho))^n``, bisected as in :func:`mdsd_ot.verifiers.spectr.kseq_rho_sorted`; the tokens with
    ``p/q < rho`` are those with ``q/p > 1/rho``, a prefix of the order, so ``beta = R_k + P_k / rho``
    and ``1 - beta = (Q_k - P_k / rho)_+`` at its length ``k``. Returns the acceptance.
    """
    total = Q[Q.size - 1]
    lo = 1.0
    hi = min(float(n), t_max)
    rho = 1.0
    if not (n == 1 or hi <= 1.0):
        k = _count_above(rs, 1.0)  # gap(1): the tokens with p/q < 1, i.e. q/p > 1
        beta = R[k] + P[k]
        rej = max(Q[k] - P[k], 0.0)
        if beta - _accept_any(beta, rej, n) < 0.0:
            for _ in range(200):
                mid = 0.5 * (lo + hi)
                if mid <= lo or mid >= hi:
                    break
                k = _count_above(rs, 1.0 / mid)
                rej = max(Q[k] - P[k] / mid, 0.0)
                beta = R[k] + P[k] / mid
                if mid * beta - _accept_any(beta, rej, n) >= 0.0:
                    hi = mid
                else:
                    lo = mid
            rho = hi
    k = _count_above(rs, 1.0 / rho)
    beta = R[k] + P[k] / rho
    reject = max(Q[k] - P[k] / rho, 0.0)
    return _accept_any(beta / total, reject / total, n)


@nb.njit(cache=True)
def largest_ratio(rs, ps, qs):
    """``max p/q`` over the tokens with ``q > 0`` (``inf`` when some token has ``q = 0 < p``), from the
    order: the largest ``p/q`` lies in the last run of equal ``rs`` before the ``q = 0`` tail."""
    V = rs.size
    end = V
    while end > 0 and rs[end - 1] == 0.0:  # the q = 0 tail
        end -= 1
    for j in range(end, V):
        if ps[j] > 0.0:
            return np.inf
    if end == 0:
        return 0.0
    best = 0.0
    j = end - 1
    while j >= 0 and rs[j] == rs[end - 1]:
        v = ps[j] / qs[j]
        if v > best:
            best = v
        j -= 1
    return best
