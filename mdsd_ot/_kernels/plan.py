"""Kernels of the per-position evaluation plan (:mod:`mdsd_ot.plan`, docs/math.md#evaluation-plan).

One order of the tokens (``q/p`` from high to low, by a bucket sort on the bits of the ratio), then
O(V) passes: the top of ``q`` for greedy and hub drafts, their sums for every ``n`` at once, the
naive verifier's inclusion sums, the ratio tables of the verifiers, and the plain masked sums that
re-check every prefix certificate (no prefix sums: independent of the scans).
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from .common import neumaier_add

#: A bucket of the order holding more tokens than this is sorted by merge sort, not by insertion.
INSERTION_MAX = 32


# ----------------------------------------------------------------------------------- the order
@nb.njit(cache=True)
def ratio_order(p, q):
    """The token order of :func:`mdsd_ot.dual.sorted_order`: ``q/p`` from high to low, ``p = 0 < q``
    first, ``q = 0`` last, ties (and both infinite runs) in token-index order.

    A bucket sort: the bit pattern of a positive float is increasing in its value, so the ratios are
    binned by their leading bits (about one bin per token over the occupied range), the tokens are
    scattered to their bins in index order, and each bin is sorted by the exact ratio, stably
    (insertion; merge sort for bins of more than ``INSERTION_MAX`` tokens, e.g. ``p == q``, where
    every ratio is one). O(V) for spread-out ratios.
    """
    V = p.size
    bits = np.empty(V, dtype=np.int64)
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
    order = np.empty(V, dtype=np.int64)
    first = 0
    last = V - n_last
    for i in range(V):  # the two infinite runs, in index order
        if bits[i] == -1:
            order[first] = i
            first += 1
        elif bits[i] == -2:
            order[last] = i
            last += 1
    if m == 0:
        return order
    shift = 0
    while (hi >> shift) - (lo >> shift) + 1 > max(m, 1):
        shift += 1
    top = hi >> shift
    nb_ = top - (lo >> shift) + 1
    start = np.zeros(nb_ + 1, dtype=np.int32)
    for i in range(V):
        if bits[i] >= 0:
            start[top - (bits[i] >> shift) + 1] += 1  # high ratios first
    for j in range(nb_):
        start[j + 1] += start[j]
    fill = start[:-1].copy()
    sb = np.empty(m, dtype=np.int64)  # (bits, token) scattered to their bins, side by side
    si = np.empty(m, dtype=np.int64)
    for i in range(V):
        b = bits[i]
        if b >= 0:
            j = top - (b >> shift)
            f = fill[j]
            sb[f] = b
            si[f] = i
            fill[j] = f + 1
    for j in range(nb_):
        a = start[j]
        e = start[j + 1]
        if e - a <= 1:
            continue
        if e - a > INSERTION_MAX:
            perm = np.argsort(-sb[a:e], kind="mergesort")  # stable: equal ratios stay in index order
            sb[a:e] = sb[a:e][perm]
            si[a:e] = si[a:e][perm]
            continue
        for t in range(a + 1, e):  # stable insertion by descending ratio
            b = sb[t]
            i = si[t]
            u = t
            while u > a and sb[u - 1] < b:
                sb[u] = sb[u - 1]
                si[u] = si[u - 1]
                u -= 1
            sb[u] = b
            si[u] = i
    order[n_first : n_first + m] = si
    return order


# --------------------------------------------------------------------------- greedy and hub
@nb.njit(cache=True)
def top_of_q(q, k):
    """The ``k`` most likely tokens in rank order, ties by lower index (``drafts.top_tokens``), O(V k)."""
    top = np.empty(k, dtype=np.int64)
    cnt = 0
    for i in range(q.size):
        v = q[i]
        if cnt == k and not v > q[top[k - 1]]:  # an equal mass with a larger index ranks lower
            continue
        u = cnt if cnt < k else k - 1
        while u > 0 and q[top[u - 1]] < v:
            top[u] = top[u - 1]
            u -= 1
        top[u] = i
        if cnt < k:
            cnt += 1
    return top


@nb.njit(cache=True)
def greedy_sums(p, q, top, ns):
    """Sums of the greedy (and hub) closed forms for every ``n`` of ``ns`` at once.

    ``top`` holds the ``max(ns) - 1`` most likely tokens in rank order; for ``n`` the fixed tokens
    are ``top[:n - 1]`` and ``q' = q / rest`` on the others, ``rest`` their q mass summed directly
    (the tail below ``top`` plus the unused part of ``top``, never ``1 - q(Top)``). Returns
    ``out[j] = (p(Top), rest, sum min(p, q'), sum (p - q')_+, sum (q' - p)_+)`` (the last three over
    the tokens outside ``Top``), Neumaier-compensated. docs/math.md#greedy-and-hub.
    """
    V = p.size
    K = top.size
    m = ns.size
    fixed = np.zeros(V, dtype=np.bool_)
    for r in range(K):
        fixed[top[r]] = True
    ts, tc = 0.0, 0.0
    for i in range(V):
        if not fixed[i]:
            ts, tc = neumaier_add(ts, tc, q[i])
    out = np.zeros((m, 5))
    rest = np.empty(m)
    for j in range(m):
        s, c = ts, tc
        for r in range(K - 1, ns[j] - 2, -1):  # the smallest first
            s, c = neumaier_add(s, c, q[top[r]])
        rest[j] = s + c
        ps, pc = 0.0, 0.0
        for r in range(ns[j] - 1):
            ps, pc = neumaier_add(ps, pc, p[top[r]])
        out[j, 0] = ps + pc
        out[j, 1] = rest[j]
    acc = np.zeros((m, 6))  # (sum, compensation) of the three sums
    for i in range(V):
        if fixed[i]:
            continue
        pi = p[i]
        qi = q[i]
        for j in range(m):
            qp = qi / rest[j]
            if qp < pi:
                acc[j, 0], acc[j, 1] = neumaier_add(acc[j, 0], acc[j, 1], qp)
                acc[j, 2], acc[j, 3] = neumaier_add(acc[j, 2], acc[j, 3], pi - qp)
            else:
                acc[j, 0], acc[j, 1] = neumaier_add(acc[j, 0], acc[j, 1], pi)
                acc[j, 4], acc[j, 5] = neumaier_add(acc[j, 4], acc[j, 5], qp - pi)
    for j in range(m):  # the part of top that is not fixed for this n
        for r in range(ns[j] - 1, K):
            i = top[r]
            qp = q[i] / rest[j]
            pi = p[i]
            if qp < pi:
                acc[j, 0], acc[j, 1] = neumaier_add(acc[j, 0], acc[j, 1], qp)
                acc[j, 2], acc[j, 3] = neumaier_add(acc[j, 2], acc[j, 3], pi - qp)
            else:
                acc[j, 0], acc[j, 1] = neumaier_add(acc[j, 0], acc[j, 1], pi)
                acc[j, 4], acc[j, 5] = neumaier_add(acc[j, 4], acc[j, 5], qp - pi)
        out[j, 2] = acc[j, 0] + acc[j, 1]
        out[j, 3] = acc[j, 2] + acc[j, 3]
        out[j, 4] = acc[j, 4] + acc[j, 5]
    return out


@nb.njit(cache=True)
def greedy_certificate(p, q, top, n):
    """``p(H) + 1 - Q(H)`` of the greedy certificate ``H = Top + {q' > p}``, recomputed by plain sums.

    Independent of :func:`greedy_sums`: it first checks that ``top[:n - 1]`` are the ``n - 1`` most
    likely tokens (every other token has a smaller mass, or an equal one and a larger index than the
    fixed tokens of that mass), sums the rest mass over the complement in index order, and then
    evaluates the objective. Returns ``nan`` when ``Top`` is wrong.
    """
    V = p.size
    k = n - 1
    fixed = np.zeros(V, dtype=np.bool_)
    low = np.inf
    low_idx = -1
    for r in range(k):
        i = top[r]
        fixed[i] = True
        if q[i] < low or (q[i] == low and i > low_idx):
            low = q[i]
            low_idx = i
    rest = 0.0
    for i in range(V):
        if not fixed[i]:
            if k > 0 and (q[i] > low or (q[i] == low and i < low_idx)):
                return np.nan
            rest += q[i]
    ph = 0.0
    qh = 0.0
    for i in range(V):
        if fixed[i]:
            ph += p[i]
        elif q[i] / rest > p[i]:
            ph += p[i]
            qh += q[i]
    return ph + 1.0 - qh / rest


# ----------------------------------------------------------------------------- naive verifier
#: Below this ``n q`` the inclusion probability ``1 - (1 - q)^n`` is summed from its binomial
#: series (terms fall by ``n q / 2`` at least; stopped below ``1e-17`` of the sum), above it
#: ``-expm1(n log1p(-q))`` as :func:`mdsd_ot.drafts._with_inclusion` does.
SERIES_MAX_NQ = 1e-2


@nb.njit(cache=True)
def naive_with_sums(p, q, miss, ns):
    """``(sum p pi, sum p (1 - pi))`` per ``n`` for i.i.d. drafts, ``pi = 1 - (1 - q)^n``, one pass.

    ``miss[i] = 1 - q_i`` as a direct sum (read where ``q_i >= 1/2``). The same values as
    :func:`mdsd_ot.drafts._with_inclusion` (tested to 1e-15), without a logarithm and an exponential
    per token and ``n`` where ``n q`` is small: there the finite binomial sum
    ``sum_j C(n, j) (-1)^(j+1) q^j`` has terms falling by a factor ``n q`` or more.
    """
    m = ns.size
    acc = np.zeros((m, 4))
    for i in range(p.size):
        pi_ = p[i]
        if pi_ == 0.0:
            continue
        qi = q[i]
        lm = 0.0
        have_log = False
        for j in range(m):
            n = ns[j]
            if n * qi <= SERIES_MAX_NQ:
                term = n * qi
                incl = term
                r = 1
                while r < n:
                    term *= -(n - r) * qi / (r + 1)
                    incl += term
                    if abs(term) < 1e-17 * incl:
                        break
                    r += 1
            else:
                if not have_log:
                    if qi < 0.5:
                        lm = math.log1p(-qi)
                    elif miss[i] > 0.0:
                        lm = math.log(miss[i])
                    else:
                        lm = -np.inf
                    have_log = True
                incl = -math.expm1(n * lm)
            incl = min(max(incl, 0.0), 1.0)
            acc[j, 0], acc[j, 1] = neumaier_add(acc[j, 0], acc[j, 1], pi_ * incl)
            acc[j, 2], acc[j, 3] = neumaier_add(acc[j, 2], acc[j, 3], pi_ * (1.0 - incl))
    out = np.empty((m, 2))
    for j in range(m):
        out[j, 0] = acc[j, 0] + acc[j, 1]
        out[j, 1] = acc[j, 2] + acc[j, 3]
    return out


# ------------------------------------------------------------------ ratio tables (verifiers)
@nb.njit(cache=True)
def ratio_tables(ps, qs):
    """Tables of ``t = p/q`` read off the plan's order (``ps``, ``qs``: ``p``, ``q`` in that order).

    Returns ``(t_up, P_up, Q_up, Qhi_up, t_down, P_down, Q_down)``:

    * ``t_up`` the ratios of the tokens with ``q > 0`` in increasing order (the plan's order up to
      its ``q = 0`` run), made monotone against rounding by a running maximum, with prefix sums
      ``P_up``, ``Q_up`` and suffix sums ``Qhi_up`` of q (SpecTr's tables);
    * ``t_down`` the ratios of the tokens with ``p > 0`` in decreasing order (``inf`` where ``q = 0``),
      with prefix sums ``P_down``, ``Q_down`` (RRS's tables).
    """
    V = ps.size
    m = 0
    while m < V and qs[m] > 0.0:
        m += 1
    t_up = np.empty(m)
    run = 0.0
    for j in range(m):
        v = ps[j] / qs[j] if ps[j] > 0.0 else 0.0
        run = max(run, v)
        t_up[j] = run
    P_up = np.empty(m + 1)
    Q_up = np.empty(m + 1)
    Qhi = np.empty(m + 1)
    s, c, u, d = 0.0, 0.0, 0.0, 0.0
    P_up[0] = 0.0
    Q_up[0] = 0.0
    for j in range(m):
        s, c = neumaier_add(s, c, ps[j])
        u, d = neumaier_add(u, d, qs[j])
        P_up[j + 1] = s + c
        Q_up[j + 1] = u + d
    u, d = 0.0, 0.0
    Qhi[m] = 0.0
    for j in range(m - 1, -1, -1):
        u, d = neumaier_add(u, d, qs[j])
        Qhi[j] = u + d
    k = 0
    for j in range(V):
        if ps[j] > 0.0:
            k += 1
    t_down = np.empty(k)
    P_down = np.empty(k + 1)
    Q_down = np.empty(k + 1)
    P_down[0] = 0.0
    Q_down[0] = 0.0
    s, c, u, d = 0.0, 0.0, 0.0, 0.0
    r = 0
    run = np.inf
    for j in range(V - 1, -1, -1):
        if ps[j] > 0.0:
            v = ps[j] / qs[j] if qs[j] > 0.0 else np.inf
            run = min(run, v)
            t_down[r] = run
            s, c = neumaier_add(s, c, ps[j])
            u, d = neumaier_add(u, d, qs[j])
            P_down[r + 1] = s + c
            Q_down[r + 1] = u + d
            r += 1
    return t_up, P_up, Q_up, Qhi, t_down, P_down, Q_down


# ------------------------------------------------------------------ certificates (re-checks)
@nb.njit(cache=True)
def prefix_certificate_sums(p, q, rank, ks):
    """Plain masked sums for the certificates ``H_j = {i : rank[i] < ks[j]}``, in token-index order.

    Returns ``out[j] = (p(H), q(H), q outside H, sum_{i in H, i != b} q_i / (1 - q_i), q_b, 1 - q_b,
    [b in H])`` with ``b`` the token holding more than half of the mass (if any; ``1 - q_b`` summed
    directly over the others, every other ``1 - q_i`` as ``total - q_i >= total / 2``). No prefix
    sums: an evaluation independent of the scans it re-checks (docs/math.md#evaluation-plan).
    """
    V = p.size
    m = ks.size
    total = 0.0
    for i in range(V):
        total += q[i]
    big = -1
    for i in range(V):
        if q[i] > 0.5 * total:
            big = i
    big_rest = 0.0
    if big >= 0:
        for i in range(V):
            if i != big:
                big_rest += q[i]
    acc = np.zeros((m, 8))
    for i in range(V):
        r = rank[i]
        odds = q[i] / (total - q[i]) if (i != big and q[i] > 0.0) else 0.0
        for j in range(m):
            if r < ks[j]:
                acc[j, 0], acc[j, 1] = neumaier_add(acc[j, 0], acc[j, 1], p[i])
                acc[j, 2], acc[j, 3] = neumaier_add(acc[j, 2], acc[j, 3], q[i])
                acc[j, 6], acc[j, 7] = neumaier_add(acc[j, 6], acc[j, 7], odds)
            else:
                acc[j, 4], acc[j, 5] = neumaier_add(acc[j, 4], acc[j, 5], q[i])
    out = np.empty((m, 7))
    for j in range(m):
        out[j, 0] = acc[j, 0] + acc[j, 1]
        out[j, 1] = acc[j, 2] + acc[j, 3]
        out[j, 2] = acc[j, 4] + acc[j, 5]
        out[j, 3] = acc[j, 6] + acc[j, 7]
        out[j, 4] = q[big] if big >= 0 else 0.0
        out[j, 5] = big_rest if big >= 0 else 1.0
        out[j, 6] = 1.0 if (big >= 0 and rank[big] < ks[j]) else 0.0
    return out
