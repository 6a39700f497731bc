"""Numba kernels for the dual solvers (the only module that imports numba).

All kernels take contiguous float64 arrays already ordered by ``q/p`` (high to low, see
:func:`mdsd_ot.dual.sorted_order`) and use int64 indices. Each has a slow twin in the tests.
Running sums use Neumaier compensation, so prefix masses over 256k tokens keep ~1e-16 accuracy.
"""
from __future__ import annotations

import math

import numba as nb
import numpy as np

from ._config import BINNED_MIN_V, PRUNE_BATCH, PRUNE_MARGIN, PRUNE_SLACK, QUAD_STEP, QUAD_TAIL

# ------------------------------------------------------------------------------- prefix bookkeeping


@nb.njit(cache=True, inline="always")
def neumaier_add(s, c, v):
    """One step of Neumaier-compensated summation: returns the new ``(sum, compensation)``."""
    t = s + v
    if abs(s) >= abs(v):
        c += (s - t) + v
    else:
        c += (v - t) + s
    return t, c


@nb.njit(cache=True)
def prefix_sums(x):
    """``S[k] = sum(x[:k])`` for k = 0..V (Neumaier-compensated)."""
    V = x.size
    out = np.empty(V + 1)
    s = 0.0
    c = 0.0
    out[0] = 0.0
    for i in range(V):
        s, c = neumaier_add(s, c, x[i])
        out[i + 1] = s + c
    return out


@nb.njit(cache=True)
def suffix_sums(x):
    """``R[k] = sum(x[k:])`` for k = 0..V (Neumaier-compensated, summed from the end)."""
    V = x.size
    out = np.empty(V + 1)
    s = 0.0
    c = 0.0
    out[V] = 0.0
    for i in range(V - 1, -1, -1):
        s, c = neumaier_add(s, c, x[i])
        out[i] = s + c
    return out


# --------------------------------------------------------------------------- with replacement
#
# Every scan returns (D, k): the largest excess D = Q(H_k) - p(H_k) over the prefixes (>= 0, attained
# first at k; k = 0 is the empty set) so that alpha* = 1 - D. Q(H_k) and p(H_k) come from prefix sums
# of the same kind, so p == q gives D = 0 exactly, and every Q(H) is capped by the exact bound q(H).


@nb.njit(cache=True)
def scan_with_replacement(ps, qs, n):
    """D = max_k min(Q_k^n, Q_k) - P_k over sorted prefixes; returns ``(D, k)``."""
    P = prefix_sums(ps)
    Q = prefix_sums(qs)
    best = 0.0
    best_k = 0
    for k in range(1, ps.size + 1):
        d = min(Q[k] ** n, Q[k]) - P[k]
        if d > best:
            best = d
            best_k = k
    return best, best_k


# ------------------------------------------------------------- without replacement, n = 2 closed form


@nb.njit(cache=True)
def scan_without_replacement_2(ps, qs, rest_s):
    """n = 2: W_2(H_k) = Q_k - R_k sum_{i in H_k} q_i / (1 - q_i); ``rest_s[i] = 1 - qs[i]``.

    ``R_k`` is a suffix sum and each ``1 - q_i`` a direct sum (no cancellation). The one token that
    may hold more than half of the mass enters as ``q_i (R_k / (1 - q_i))`` (at most q_i, since
    ``R_k <= 1 - q_i`` once it is inside): ``q_i / (1 - q_i)`` alone overflows when 1 - q_i is
    denormal. Returns ``(D, k)``.
    """
    P = prefix_sums(ps)
    Q = prefix_sums(qs)
    R = suffix_sums(qs)
    half = 0.5 * Q[ps.size]
    best = 0.0
    best_k = 0
    s = 0.0
    c = 0.0
    big_q = 0.0
    big_rest = 1.0
    for k in range(ps.size + 1):
        d = (Q[k] - P[k]) - R[k] * (s + c) - big_q * (R[k] / big_rest)
        if d > best:
            best = d
            best_k = k
        if k < ps.size:
            if qs[k] > half:
                big_q, big_rest = qs[k], rest_s[k]
            else:
                s, c = neumaier_add(s, c, qs[k] / rest_s[k])
    return best, best_k


# --------------------------------------------------------------------------- conditional Poisson
#
# Q(H) = e_n(q on H) / e_n(q). The elementary symmetric polynomials are carried as logarithms
# (log e_j(S + x) = logaddexp(log e_j(S), log x + log e_{j-1}(S))): with a few large masses and
# many tiny ones e_n spans far more than float64's range.


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
def log_esp_prefix(xs, n):
    """``L[k] = log e_n(xs[:k])`` for k = 0..V (``-inf`` while fewer than n positive entries)."""
    le = np.full(n + 1, -np.inf)
    le[0] = 0.0
    out = np.empty(xs.size + 1)
    out[0] = le[n]
    for i in range(xs.size):
        if xs[i] > 0.0:
            lx = math.log(xs[i])
            for j in range(n, 0, -1):
                le[j] = logaddexp(le[j], lx + le[j - 1])
        out[i + 1] = le[n]
    return out


@nb.njit(cache=True)
def log_esp_suffix_table(xs, n):
    """``T[i, j] = log e_j(xs[i:])`` for i = 0..V, j = 0..n (for sequential sampling of a CP set)."""
    V = xs.size
    T = np.full((V + 1, n + 1), -np.inf)
    T[V, 0] = 0.0
    for i in range(V - 1, -1, -1):
        T[i, 0] = 0.0
        lx = math.log(xs[i]) if xs[i] > 0.0 else -np.inf
        for j in range(1, n + 1):
            T[i, j] = logaddexp(T[i + 1, j], lx + T[i + 1, j - 1])
    return T


@nb.njit(cache=True)
def scan_conditional_poisson(ps, xs, n):
    """Q(H_k) = e_n(q on H_k) / e_n(q), from log elementary symmetric polynomials."""
    V = xs.size
    L = log_esp_prefix(xs, n)
    P = prefix_sums(ps)
    X = prefix_sums(xs)
    best = 0.0
    best_k = 0
    for k in range(1, V + 1):
        ratio = math.exp(L[k] - L[V]) if L[k] > -np.inf else 0.0
        d = min(ratio, X[k] / X[V]) - P[k]
        if d > best:
            best = d
            best_k = k
    return best, best_k


# ------------------------------------------------- without replacement, any n: exponential clocks
#
# W_n(H) = int_0^inf R e^{-R t} P(N_H(t) >= n) dt  (R = q mass outside H, N_H(t) = number of tokens
# of H whose Exp(q_i) clock rang by time t). With s = log t the integrand R t e^{-Rt} P(.) is smooth
# and decays double-exponentially on the right and like t^(n+1) on the left, so the trapezoid rule in
# s converges geometrically. P(N_H(t) >= n) comes from a Poisson-binomial DP truncated at n, updated
# token by token along the sorted order; it only adds non-negative terms.


@nb.njit(cache=True)
def quad_grid(n, r_min):
    """Trapezoid grid in s = log t: returns ``(s_lo, h, M)``.

    Nodes may lie beyond t = 1e308 (outside masses down to denormals): kernels only ever form the
    products ``v t = exp(log v + s)`` (see :func:`times_t`), never t itself.
    """
    s_lo = math.log(QUAD_TAIL) / (n + 1)
    r_min = max(r_min, 5e-324)  # callers pass R > 0; guard the logarithm all the same
    s_hi = math.log(-math.log(QUAD_TAIL)) - math.log(r_min)  # R t e^{-R t} negligible beyond
    h = QUAD_STEP
    M = int(math.ceil((s_hi - s_lo) / h)) + 1
    return s_lo, h, M


@nb.njit(cache=True, inline="always")
def times_t(v, s):
    """``v * exp(s)`` for v >= 0 without forming exp(s) (which overflows beyond s = 709)."""
    if v == 0.0:
        return 0.0
    return math.exp(math.log(v) + s)


@nb.njit(cache=True, inline="always")
def _node_weight(h, r, s):
    """Trapezoid weight of the density R e^{-R t} dt = (R t) e^{-R t} ds at node s."""
    rt = times_t(r, s)
    return h * rt * math.exp(-rt) if rt < 800.0 else 0.0


@nb.njit(cache=True)
def _quad_nodes(qs, cand, Rc, n, s_lo, h, m0, mstep, M, acc):
    """Add the trapezoid terms of nodes m0, m0 + mstep, ... < M for every candidate prefix."""
    dp = np.empty(n + 1)  # dp[j] = P(N = j) for j < n, dp[n] = P(N >= n)
    C = cand.size
    for m in range(m0, M, mstep):
        s = s_lo + m * h
        for j in range(n + 1):
            dp[j] = 0.0
        dp[0] = 1.0
        k = 0
        for c in range(C):
            stop = cand[c]
            while k < stop:
                x = times_t(qs[k], s)
                if x < 0.5:
                    a = -math.expm1(-x)
                    e = 1.0 - a
                else:
                    e = math.exp(-x)
                    a = 1.0 - e
                dp[n] += dp[n - 1] * a
                for j in range(n - 1, 0, -1):
                    dp[j] = dp[j] * e + dp[j - 1] * a
                dp[0] *= e
                k += 1
            acc[c] += _node_weight(h, Rc[c], s) * dp[n]


@nb.njit(cache=True)
def sequential_masses(qs, cand, Rc, n):
    """W_n(H_k) for prefixes ``k = cand`` (increasing) with outside masses ``Rc > 0`` (serial)."""
    s_lo, h, M = quad_grid(n, Rc.min())
    acc = np.zeros(cand.size)
    _quad_nodes(qs, cand, Rc, n, s_lo, h, 0, 1, M, acc)
    return acc


def sequential_mass_quadrature(q_in, outside, n):
    """W_n(H) for one subset with masses ``q_in`` inside and ``outside > 0`` outside."""
    cand = np.array([q_in.size], dtype=np.int64)
    return sequential_masses(q_in, cand, np.array([float(outside)]), n)[0]


@nb.njit(cache=True)
def without_replacement_bounds(ps, qs, n):
    """Exact values where trivial, and cheap bounds elsewhere, for every sorted prefix.

    Returns ``(P, Q, R, lo, hi, exact)`` with ``lo[k] <= D_k <= hi[k]`` for the excess
    ``D_k = W_n(H_k) - P_k``; ``exact[k]`` marks prefixes where ``lo[k] == hi[k]`` is the value
    (fewer than n drafted tokens in ``H_k``: W = 0; no q mass outside: W = 1, taken as ``Q_k``).
    Bounds (MATH.md 3.2): ``prod_{j<n} (q(H) - s_j) / (1 - s_j) <= W_n(H) <= q(H)^n``, with s_j the
    sum of the j largest masses in H and ``1 - s_j`` summed directly as ``R + q(H) - s_j``.
    """
    V = qs.size
    P = prefix_sums(ps)
    Q = prefix_sums(qs)
    R = suffix_sums(qs)
    lo = np.empty(V + 1)
    hi = np.empty(V + 1)
    exact = np.zeros(V + 1, dtype=np.bool_)
    top = np.zeros(n)  # the n-1 largest masses so far, descending (top[n-1] unused)
    count = 0
    for k in range(V + 1):
        if count < n:
            lo[k] = -P[k]
            hi[k] = lo[k]
            exact[k] = True
        elif R[k] <= 0.0:
            lo[k] = Q[k] - P[k]
            hi[k] = lo[k]
            exact[k] = True
        else:
            hi[k] = min(Q[k] ** n, Q[k]) - P[k]
            w = 1.0
            s = 0.0
            for j in range(n):
                inside = max(Q[k] - s, 0.0)
                w *= inside / (R[k] + inside)
                if j < n - 1:
                    s += top[j]
            lo[k] = w - P[k]
        if k < V:
            v = qs[k]
            if v > 0.0:
                count += 1
                j = n - 2
                if j >= 0 and v > top[j]:
                    while j > 0 and top[j - 1] < v:
                        top[j] = top[j - 1]
                        j -= 1
                    top[j] = v
    return P, Q, R, lo, hi, exact


@nb.njit(cache=True)
def candidate_prefixes(lo, hi, exact):
    """Prefixes to evaluate: ``(cand (int64, increasing), best exact (D, k))``.

    The prefix with the largest lower bound is always a candidate (evaluating it secures that
    bound); any other prefix is one only if its upper bound beats that lower bound by more than
    ``PRUNE_SLACK``.
    """
    best_lo = max(lo.max(), 0.0)
    anchor = np.argmax(lo)
    best = 0.0
    best_k = 0
    keep = np.zeros(lo.size, dtype=np.bool_)
    for k in range(lo.size):
        if exact[k]:
            if lo[k] > best:
                best = lo[k]
                best_k = k
        elif hi[k] > best_lo + PRUNE_SLACK or k == anchor:
            keep[k] = True
    return np.flatnonzero(keep).astype(np.int64), best, best_k


# ----------------------------------------------------------------------------------- ordering


@nb.njit(cache=True)
def order_keys(p, q):
    """Sort keys: ascending key = descending q/p; p = 0 < q first, q = 0 last."""
    V = p.size
    key = np.empty(V)
    for i in range(V):
        if q[i] == 0.0:
            key[i] = np.inf
        elif p[i] == 0.0:
            key[i] = -np.inf
        else:
            key[i] = -(q[i] / p[i])
    return key


@nb.njit(cache=True)
def complement_masses_kernel(qs):
    """``1 - q[i]`` without cancellation (direct sum for the one token above half the mass)."""
    total = suffix_sums(qs)[0]
    rest = np.empty(qs.size)
    for i in range(qs.size):
        rest[i] = total - qs[i]
    for i in range(qs.size):
        if qs[i] > 0.5 * total:
            s = 0.0
            for j in range(qs.size):
                if j != i:
                    s += qs[j]
            rest[i] = s
    return rest


@nb.njit(cache=True)
def break_ties_by_index(keys, order):
    """Sort each run of equal finite keys in ``order`` (a sort of ``keys``) by token index, in place.

    Runs of infinite keys (``p = 0 < q`` first, ``q = 0`` last) are left alone: inside them the
    excess is monotone, so neither the value nor the first maximising prefix depends on their order.
    """
    V = order.size
    i = 0
    while i < V:
        j = i + 1
        ki = keys[order[i]]
        while j < V and keys[order[j]] == ki:
            j += 1
        if j - i > 1 and np.isfinite(ki):
            order[i:j] = np.sort(order[i:j])
        i = j
    return order


# ------------------------------------------------------ bucketed scan: no full sort (O(V) work)
#
# For with replacement and for sequential sampling with n = 2, Q(H) depends on H only through sums
# (q(H), and sum_{i in H} q_i / (1 - q_i)). Tokens are binned by the bit pattern of q/p (monotone for
# positive floats: 8 bins per octave), so every bin boundary is a prefix of the sorted order whose
# excess is exact from bin sums. Inside a bin, D_k <= Q(H_end) - p(H_start) (Q grows, p grows), so
# only the few bins whose bound beats the best boundary are sorted and scanned token by token.

_BIN_SHIFT = 49  # keep 11 exponent bits + 3 mantissa bits of q/p
_NBINS = (1 << (63 - _BIN_SHIFT)) + 2  # bin 0: p = 0 < q; bins 1..: q/p high to low; last: q = 0


@nb.njit(cache=True)
def _bin_of(p, q):
    V = p.size
    out = np.empty(V, dtype=np.int64)
    ratio = np.empty(1)
    bits = ratio.view(np.int64)
    top = (1 << (63 - _BIN_SHIFT)) - 1
    for i in range(V):
        if q[i] == 0.0:
            out[i] = _NBINS - 1
        elif p[i] == 0.0:
            out[i] = 0
        else:
            ratio[0] = q[i] / p[i]
            out[i] = 1 + top - (bits[0] >> _BIN_SHIFT)
    return out


@nb.njit(cache=True)
def _excess(Qh, Ph, Rout, Sh, big, n, code):
    """Excess Q(H) - p(H) from sums: with replacement (code 0) or sequential n = 2 (code 1).

    For code 1, ``Sh`` sums q_i / (1 - q_i) over H except the token above half the mass, whose
    term ``q_i (R / (1 - q_i))`` is passed as ``big`` (see :func:`scan_without_replacement_2`).
    """
    if code == 0:
        return min(Qh ** n, Qh) - Ph
    return (Qh - Ph) - Rout * Sh - big


@nb.njit(cache=True)
def bucketed_scan(p, q, n, code, rest):
    """``(D, mask)`` for code 0 (with replacement, any n) or code 1 (sequential, n = 2).

    ``rest[i] = 1 - q_i`` as a direct sum (read for code 1 only). ``mask`` marks the first optimal
    prefix H of the order of :func:`mdsd_ot.dual.sorted_order` (empty when D = 0). Bin sums and
    in-bin prefixes are Neumaier-compensated.
    """
    V = p.size
    b = _bin_of(p, q)
    sums = np.zeros((6, _NBINS))  # p, q, S sums and their compensations
    cnt = np.zeros(_NBINS, dtype=np.int64)
    half = 0.0
    for i in range(V):
        half += q[i]
    half *= 0.5
    big_i = -1
    for i in range(V):
        j = b[i]
        cnt[j] += 1
        sums[0, j], sums[3, j] = neumaier_add(sums[0, j], sums[3, j], p[i])
        sums[1, j], sums[4, j] = neumaier_add(sums[1, j], sums[4, j], q[i])
        if code == 1 and q[i] > 0.0:
            if q[i] > half:
                big_i = i
            else:
                sums[2, j], sums[5, j] = neumaier_add(sums[2, j], sums[5, j], q[i] / rest[i])
    P0 = prefix_sums(sums[0] + sums[3])  # sums over the bins before bin j
    Q0 = prefix_sums(sums[1] + sums[4])
    S0 = prefix_sums(sums[2] + sums[5])
    R1 = suffix_sums(sums[1] + sums[4])  # q mass of the bins after bin j: R1[j + 1]
    big_bin = b[big_i] if big_i >= 0 else _NBINS
    big_q = q[big_i] if big_i >= 0 else 0.0
    big_rest = rest[big_i] if big_i >= 0 else 1.0
    bound = 0.0
    for j in range(_NBINS):
        if cnt[j] > 0:
            big = big_q * (R1[j + 1] / big_rest) if big_bin <= j else 0.0
            bound = max(bound, _excess(Q0[j + 1], P0[j + 1], R1[j + 1], S0[j + 1], big, n, code))
    # tokens of the bins whose inner prefixes might beat every boundary
    start = np.zeros(_NBINS + 1, dtype=np.int64)
    for j in range(_NBINS):
        inner = 0
        if j < _NBINS - 1 and cnt[j] >= 2:  # inside the q = 0 bin the excess only falls
            # Q and S grow, p grows, R falls: bound with Q, R at the bin's end and p, S at its start
            ub = _excess(Q0[j + 1], P0[j], R1[j + 1], S0[j], 0.0, n, code)
            if ub >= bound - PRUNE_MARGIN:
                inner = cnt[j]
        start[j + 1] = start[j] + inner
    members = np.empty(start[_NBINS], dtype=np.int64)
    fill = start[:-1].copy()
    for i in range(V):
        j = b[i]
        if start[j + 1] > start[j]:
            members[fill[j]] = i
            fill[j] += 1
    best = 0.0
    best_bin = -1
    best_len = 0  # tokens of best_bin inside H (cnt = the whole bin)
    best_idx = np.empty(0, dtype=np.int64)
    for j in range(_NBINS):
        if cnt[j] == 0:
            continue
        if start[j + 1] > start[j]:
            idx = members[start[j]:start[j + 1]]
            keys = np.empty(idx.size)
            for t in range(idx.size):
                keys[t] = -(q[idx[t]] / p[idx[t]]) if p[idx[t]] > 0.0 else -np.inf
            idx = idx[np.argsort(keys, kind="mergesort")]  # ties keep token index order
            tail = suffix_sums(q[idx])  # q mass of the bin after each inner prefix
            Pc, cP = P0[j], 0.0
            Qc, cQ = Q0[j], 0.0
            Sc, cS = S0[j], 0.0
            big_in = big_bin < j
            for t in range(idx.size - 1):
                i = idx[t]
                Pc, cP = neumaier_add(Pc, cP, p[i])
                Qc, cQ = neumaier_add(Qc, cQ, q[i])
                if code == 1:
                    if i == big_i:
                        big_in = True
                    else:
                        Sc, cS = neumaier_add(Sc, cS, q[i] / rest[i])
                Rout = R1[j + 1] + tail[t + 1]
                big = big_q * (Rout / big_rest) if big_in else 0.0
                d = _excess(Qc + cQ, Pc + cP, Rout, Sc + cS, big, n, code)
                if d > best:
                    best, best_bin, best_len, best_idx = d, j, t + 1, idx
        big = big_q * (R1[j + 1] / big_rest) if big_bin <= j else 0.0
        d = _excess(Q0[j + 1], P0[j + 1], R1[j + 1], S0[j + 1], big, n, code)
        if d > best:
            best, best_bin, best_len = d, j, cnt[j]
    mask = np.zeros(V, dtype=np.bool_)
    if best_bin >= 0:
        whole = best_len == cnt[best_bin]
        for i in range(V):
            if b[i] < best_bin or (whole and b[i] == best_bin):
                mask[i] = True
        if not whole:
            for t in range(best_len):
                mask[best_idx[t]] = True
    return best, mask


SCHEME_CODES = {"with_replacement": 0, "without_replacement": 1, "conditional_poisson": 2}


@nb.njit(cache=True)
def solve_sorted(ps, qs, n, code):
    """Dispatch on a scheme code (see ``SCHEME_CODES``); returns ``(D, k)``, alpha* = 1 - D."""
    if code == 0 or n == 1:
        return scan_with_replacement(ps, qs, n)
    if code == 1:
        if n == 2:
            return scan_without_replacement_2(ps, qs, complement_masses_kernel(qs))
        return scan_without_replacement(ps, qs, n)
    return scan_conditional_poisson(ps, qs, n)


@nb.njit(cache=True, parallel=True)
def solve_batch(P, Q, n, code):
    """Row-parallel batch solve of ``(B, V)`` arrays (binned scans where sums suffice)."""
    B = P.shape[0]
    out = np.empty(B)
    for b in nb.prange(B):
        if P.shape[1] < BINNED_MIN_V:
            order = np.argsort(order_keys(P[b], Q[b]), kind="mergesort")
            d = solve_sorted(P[b][order], Q[b][order], n, code)[0]
        elif n == 1 or code == 0:
            d = bucketed_scan(P[b], Q[b], n, 0, Q[b])[0]
        elif code == 1 and n == 2:
            rest = complement_masses_kernel(Q[b])  # any order: 1 - q_i without cancellation
            d = bucketed_scan(P[b], Q[b], n, 1, rest)[0]
        else:
            order = np.argsort(order_keys(P[b], Q[b]), kind="mergesort")
            d = solve_sorted(P[b][order], Q[b][order], n, code)[0]
        out[b] = max(1.0 - d, 0.0)
    return out


# ------------------------------------------- without replacement, any n: the fast evaluation path
#
# The DP above costs one exp per token and quadrature node. The fast path splits, at each node t,
# the tokens into "big" ones (q t > SMALL_QT; few: handled by the same DP) and "small" ones, whose
# Poisson-binomial law comes from power sums: with r_i = e^{q_i t} - 1,
#   P(N_small = j) = e^{-t q(small)} e_j(r),   p_j(r) = sum_i r_i^j = sum_m c[j, m] t^m sum_i q_i^m,
# c[j, m] the x^m coefficient of (e^x - 1)^j (series truncated at m = J; q t <= SMALL_QT makes the
# remainder < SMALL_QT^(J - j + 1)), and e_j from p_j by Newton's identities (no cancellation since
# r_i <= e^SMALL_QT - 1). Tokens are binned by q in powers of two, so the per-query power sums come
# from one pass over the tokens and small tokens cost nothing per node.

SMALL_QT = 0.05
SATURATED = 1e-30  # P(N < n) or a node weight below this is dropped (far below every tolerance)
CERTAIN_QT = 40.0  # tokens with q t >= this have arrived by t (e^-40 ~ 4e-18)
NBANDS = 80
SERIES_EXTRA = 11


@nb.njit(cache=True)
def series_coefficients(n, J):
    """``c[j, m]`` = coefficient of x^m in (e^x - 1)^j for j < n, m <= J."""
    base = np.zeros(J + 1)
    f = 1.0
    for m in range(1, J + 1):
        f *= m
        base[m] = 1.0 / f
    c = np.zeros((n, J + 1))
    c[0, 0] = 1.0
    for j in range(1, n):
        for a in range(J + 1):
            if c[j - 1, a] != 0.0:
                for b in range(1, J + 1 - a):
                    c[j, a + b] += c[j - 1, a] * base[b]
    return c


@nb.njit(cache=True)
def _bands(qs):
    out = np.empty(qs.size, dtype=np.int64)
    for i in range(qs.size):
        v = qs[i]
        if v <= 0.0:
            out[i] = NBANDS - 1
        else:
            out[i] = min(int(math.floor(-math.log2(v))), NBANDS - 1)
    return out


@nb.njit(cache=True)
def _band_suffix_power_sums(qs, bands, queries, J):
    """``S[c, b, m] = sum of q_i^m over i < queries[c] with band(i) >= b``, m = 1..J."""
    C = queries.size
    acc = np.zeros((NBANDS, J + 1))
    S = np.zeros((C, NBANDS + 1, J + 1))
    i = 0
    for c in range(C):
        while i < queries[c]:
            v = qs[i]
            x = v
            b = bands[i]
            for m in range(1, J + 1):
                acc[b, m] += x
                x *= v
            i += 1
        for b in range(NBANDS - 1, -1, -1):
            for m in range(1, J + 1):
                S[c, b, m] = S[c, b + 1, m] + acc[b, m]
    return S


@nb.njit(cache=True)
def _node_band(s):
    """Bands >= this index hold tokens with q <= 2^-index <= SMALL_QT / t (small at node s = log t)."""
    return min(max(int(math.ceil((s - math.log(SMALL_QT)) / math.log(2.0))), 0), NBANDS)


@nb.njit(cache=True)
def _big_lists(bands, top, s_lo, h, M):
    """For every node: the positions (< top, increasing) of its big tokens, concatenated.

    Returns ``(flat, start)``: node m's big tokens are ``flat[start[m, 0]:start[m, 1]]``; nodes
    with the same band threshold share one list.
    """
    start = np.empty((M, 2), dtype=np.int64)
    total = 0
    prev = -1
    size = 0
    for m in range(M):  # the node thresholds increase with m
        bm = _node_band(s_lo + m * h)
        if bm != prev:
            size = 0
            for i in range(top):
                if bands[i] < bm:
                    size += 1
            total += size
            prev = bm
    flat = np.empty(total, dtype=np.int64)
    pos = 0
    prev = -1
    first = 0
    for m in range(M):
        bm = _node_band(s_lo + m * h)
        if bm != prev:
            first = pos
            for i in range(top):
                if bands[i] < bm:
                    flat[pos] = i
                    pos += 1
            prev = bm
        start[m, 0] = first
        start[m, 1] = pos
    return flat, start


@nb.njit(cache=True)
def _fast_nodes(qs, bands, flat, start, queries, Rq, n, coef, S, s_lo, h, m0, mstep, M, acc):
    """Trapezoid terms of nodes m0, m0 + mstep, ... for every query prefix (fast path)."""
    J = coef.shape[1] - 1
    dp = np.empty(n)
    pw = np.empty(J + 1)
    psum = np.empty(n)
    e = np.empty(n)
    small = np.empty(n)
    C = queries.size
    for m in range(m0, M, mstep):
        s = s_lo + m * h
        bm = _node_band(s)
        # bands <= bcert hold q >= 2^-(bcert + 1) >= CERTAIN_QT / t: arrived, up to e^-40 ~ 4e-18
        bcert = int(math.floor((s - math.log(CERTAIN_QT)) / math.log(2.0))) - 1
        big = flat[start[m, 0]:start[m, 1]]
        for j in range(n):
            dp[j] = 0.0
        dp[0] = 1.0
        ptr = 0
        certain = 0
        for c in range(C):
            weight = _node_weight(h, Rq[c], s)
            stop = queries[c]
            while ptr < big.size and big[ptr] < stop and certain < n:
                i = big[ptr]
                ptr += 1
                if bands[i] <= bcert:  # shift the count by one arrival, no exp needed
                    for j in range(n - 1, 0, -1):
                        dp[j] = dp[j - 1]
                    dp[0] = 0.0
                    certain += 1
                    continue
                x = times_t(qs[i], s)
                if x < 0.5:
                    a = -math.expm1(-x)
                    ee = 1.0 - a
                else:
                    ee = math.exp(-x)
                    a = 1.0 - ee
                for j in range(n - 1, 0, -1):
                    dp[j] = dp[j] * ee + dp[j - 1] * a
                dp[0] *= ee
            below_big = 0.0
            for j in range(n):
                below_big += dp[j]
            if below_big < SATURATED:
                # P(N < n) <= P(N_big < n) < SATURATED here and for every longer prefix (tokens
                # only add arrivals): the integrand is the weight alone from now on
                for c2 in range(c, C):
                    acc[c2] += _node_weight(h, Rq[c2], s)
                break
            if weight < SATURATED:
                continue  # this node adds nothing measurable to this prefix
            # the small tokens of this prefix
            if bm < NBANDS:
                lam = times_t(S[c, bm, 1], s)
                for mm in range(1, J + 1):  # pw[mm] = t^mm sum q^mm = sum (q t)^mm over small tokens
                    pw[mm] = math.exp(mm * s + math.log(S[c, bm, mm])) if S[c, bm, mm] > 0.0 else 0.0
                for j in range(1, n):
                    v = 0.0
                    for mm in range(j, J + 1):
                        v += coef[j, mm] * pw[mm]
                    psum[j] = v
                e[0] = 1.0
                for k in range(1, n):
                    v = 0.0
                    sign = 1.0
                    for i2 in range(1, k + 1):
                        v += sign * e[k - i2] * psum[i2]
                        sign = -sign
                    e[k] = max(v / k, 0.0)
                for j in range(n):
                    if e[j] > 0.0:
                        small[j] = math.exp(math.log(e[j]) - lam)
                    else:
                        small[j] = 0.0
            else:
                small[0] = 1.0
                for j in range(1, n):
                    small[j] = 0.0
            below = 0.0  # P(N < n)
            for i2 in range(n):
                for j in range(n - i2):
                    below += dp[i2] * small[j]
            acc[c] += weight * max(1.0 - below, 0.0)


@nb.njit(cache=True)
def sequential_masses_fast(qs, queries, Rq, n):
    """W_n(H_k) at increasing prefix lengths ``queries`` (outside masses ``Rq > 0``), fast path."""
    s_lo, h, M = quad_grid(n, Rq.min())
    J = n - 1 + SERIES_EXTRA
    coef = series_coefficients(n, J)
    bands = _bands(qs)
    flat, start = _big_lists(bands, queries[-1], s_lo, h, M)
    S = _band_suffix_power_sums(qs, bands, queries, J)
    acc = np.zeros(queries.size)
    _fast_nodes(qs, bands, flat, start, queries, Rq, n, coef, S, s_lo, h, 0, 1, M, acc)
    return acc


@nb.njit(cache=True)
def scan_without_replacement(ps, qs, n):
    """Any n >= 3: exact W_n at a few prefixes, the rest bounded away. Returns ``(D, k)``.

    ``W_n`` is non-decreasing along the prefixes, so for an evaluated prefix ``b >= k``,
    ``D_k <= W_n(H_b) - P_k``; with the cheap bounds of :func:`without_replacement_bounds` this
    discards every prefix that cannot beat the best excess found so far. Each round evaluates up to
    ``PRUNE_BATCH`` of the remaining prefixes (evenly spread) by the fast quadrature.
    """
    P, Q, R, lo, hi, exact = without_replacement_bounds(ps, qs, n)
    todo, best, best_k = candidate_prefixes(lo, hi, exact)
    V1 = P.size
    evaluated = np.zeros(V1, dtype=np.bool_)
    w_at = np.zeros(V1)
    while todo.size > 0:
        step = max(1, todo.size // PRUNE_BATCH)
        count = (todo.size - 1) // step + 1
        last_extra = 1 if (todo.size - 1) % step != 0 else 0
        pick = np.empty(count + last_extra, dtype=np.int64)
        for i in range(count):
            pick[i] = todo[i * step]
        if last_extra:
            pick[count] = todo[todo.size - 1]
        w = sequential_masses_fast(qs, pick, R[pick], n)
        for i in range(pick.size):
            k = pick[i]
            wk = min(w[i], Q[k])
            evaluated[k] = True
            w_at[k] = wk
            d = wk - P[k]
            if d > best or (d == best and k < best_k):
                best = d
                best_k = k
        # cap[k] = W_n at the nearest evaluated prefix >= k (an upper bound on W_n(H_k))
        cap = np.empty(V1)
        nxt = np.inf
        for k in range(V1 - 1, -1, -1):
            if evaluated[k]:
                nxt = w_at[k]
            cap[k] = nxt
        keep = 0
        for i in range(todo.size):
            k = todo[i]
            if not evaluated[k] and min(hi[k], cap[k] - P[k]) > best + PRUNE_SLACK:
                todo[keep] = k
                keep += 1
        todo = todo[:keep].copy()
    return best, best_k
