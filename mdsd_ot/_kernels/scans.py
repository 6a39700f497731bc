"""Sorted-prefix scans of the dual (docs/math.md#dual-and-sorting-theorem): with replacement, sequential
n = 2, conditional Poisson, the token order, and the binned scan that needs no full sort.

Every scan takes contiguous float64 arrays ordered by ``q/p`` (high to low, see
:func:`mdsd_ot.dual.sorted_order`) and returns ``(D, k)``, the largest excess and its first prefix.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from .._config import BIN_BUDGET, POWER_FROM_REST_N, PRUNE_MARGIN
from .common import (
    logaddexp,
    neumaier_add,
    neumaier_add_nonneg,
    prefix_sums,
    sort_run_descending,
    suffix_sums,
)

# --------------------------------------------------------------------------- with replacement
#
# Every scan returns (D, k): the largest excess D = Q(H_k) - p(H_k) over the prefixes (>= 0, attained
# first at k; k = 0 is the empty set) so that alpha* = 1 - D. Q(H_k) and p(H_k) come from prefix sums
# of the same kind, so p == q gives D = 0 exactly, and every Q(H) is capped by the exact bound q(H).


@nb.njit(cache=True, inline="always")
def power_of_mass(Qh, Rout, n):
    """``q(H)^n``, capped by ``q(H)``, accurate for every n.

    ``x^n`` multiplies the relative error of x by n: q(H) close to one carries an absolute rounding
    error of ~1e-16, so for n = 10^9 the power is off by ~1e-7. The outside mass ``Rout = 1 - q(H)``,
    summed directly, does not have that error: ``exp(n log1p(-R))`` is exact to a few ulps. Used above
    ``POWER_FROM_REST_N`` drafts (below, n eps <= 7e-15) when ``R < 1/2``.
    """
    if n > POWER_FROM_REST_N and Rout < 0.5:
        return min(math.exp(n * math.log1p(-Rout)), Qh)
    return min(Qh**n, Qh)


@nb.njit(cache=True)
def scan_with_replacement(ps, qs, n):
    """D = max_k min(Q_k^n, Q_k) - P_k over sorted prefixes; returns ``(D, k)``."""
    P = prefix_sums(ps)
    Q = prefix_sums(qs)
    R = suffix_sums(qs) if n > POWER_FROM_REST_N else Q  # R only read above that n
    return scan_with_replacement_sums(P, Q, R, n)


@nb.njit(cache=True)
def scan_with_replacement_sums(P, Q, R, n):
    """The scan of :func:`scan_with_replacement` from its prefix sums ``P``, ``Q`` and suffix sums ``R``
    of ``q`` (read above ``POWER_FROM_REST_N`` only): shared by every ``n`` of an evaluation plan."""
    best = 0.0
    best_k = 0
    for k in range(1, P.size):
        d = power_of_mass(Q[k], R[k], n) - P[k]
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
    return scan_without_replacement_2_sums(prefix_sums(ps), prefix_sums(qs), suffix_sums(qs), qs, rest_s)


@nb.njit(cache=True)
def scan_without_replacement_2_sums(P, Q, R, qs, rest_s):
    """The scan of :func:`scan_without_replacement_2` from prefix sums ``P``, ``Q`` and suffix sums
    ``R`` (shared with the other scans of an evaluation plan)."""
    half = 0.5 * Q[qs.size]
    best = 0.0
    best_k = 0
    s = 0.0
    c = 0.0
    big_q = 0.0
    big_rest = 1.0
    for k in range(qs.size + 1):
        d = (Q[k] - P[k]) - R[k] * (s + c) - big_q * (R[k] / big_rest)
        if d > best:
            best = d
            best_k = k
        if k < qs.size:
            if qs[k] > half:
                big_q, big_rest = qs[k], rest_s[k]
            else:
                s, c = neumaier_add(s, c, qs[k] / rest_s[k])
    return best, best_k


# --------------------------------------------------------------------------- conditional Poisson
#
# Q(H) = e_n(q on H) / e_n(q). With a few large masses and many tiny ones e_n spans far more than
# float64's range, and a DP on logarithms loses a relative ulp of |log e_j| (up to 2^-43 at
# |log e| = 700) at each of the V steps: 1e-12 relative at V = 152,064 (docs/math.md#conditional-poisson).
# Here each e_j is carried as a mantissa in [1/2, 1), a Neumaier compensation term and an integer
# binary exponent: a sum of positive terms, exact to a few ulps for every V and every magnitude.


@nb.njit(cache=True)
def esp_prefix_scaled(xs, ns):
    """``e_{ns[j]}(xs[:k]) = M[j, k] * 2**E[j, k]`` for k = 0..V and every requested degree (one pass,
    the DP up to ``max(ns)``); ``M = 0`` where fewer than that many entries are positive.

    Every term ``x * e_{j-1}`` is positive, so relative errors do not grow with V: each e_j is within
    a few ulps times j of the exact value (the compensated sum), whatever the magnitudes."""
    n = 0
    for j in range(ns.size):
        n = max(n, ns[j])
    m = np.zeros(n + 1)
    c = np.zeros(n + 1)
    e = np.zeros(n + 1, dtype=np.int64)
    m[0] = 0.5  # e_0 = 1 = 0.5 * 2**1
    e[0] = 1
    M = np.empty((ns.size, xs.size + 1))
    E = np.empty((ns.size, xs.size + 1), dtype=np.int64)
    for j in range(ns.size):
        M[j, 0] = m[ns[j]] + c[ns[j]]
        E[j, 0] = e[ns[j]]
    for i in range(xs.size):
        if xs[i] > 0.0:
            fx, kx = math.frexp(xs[i])
            for j in range(n, 0, -1):
                if m[j - 1] == 0.0:
                    continue
                t = fx * (m[j - 1] + c[j - 1])  # about [1/4, 1): no underflow whatever x is
                et = kx + e[j - 1]
                if m[j] == 0.0:
                    m[j], c[j], e[j] = t, 0.0, et
                else:
                    d = et - e[j]
                    if d > 0:  # the new term is the larger: move the sum to its exponent
                        m[j] = math.ldexp(m[j], int(-d))
                        c[j] = math.ldexp(c[j], int(-d))
                        e[j] = et
                        d = 0
                    a = math.ldexp(t, int(d))  # <= the sum's scale; 0 when below its last ulp by far
                    s = m[j] + a
                    if m[j] >= a:
                        c[j] += (m[j] - s) + a
                    else:
                        c[j] += (a - s) + m[j]
                    m[j] = s
                f, k = math.frexp(m[j])
                m[j] = f
                c[j] = math.ldexp(c[j], int(-k))
                e[j] += k
        for j in range(ns.size):
            M[j, i + 1] = m[ns[j]] + c[ns[j]]
            E[j, i + 1] = e[ns[j]]
    return M, E


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
    """Q(H_k) = e_n(q on H_k) / e_n(q), from the scaled elementary symmetric polynomials."""
    M, E = esp_prefix_scaled(xs, np.array([n], dtype=np.int64))
    return scan_conditional_poisson_sums(M[0], E[0], prefix_sums(ps), prefix_sums(xs))


@nb.njit(cache=True)
def scan_conditional_poisson_sums(M, E, P, X):
    """The scan of :func:`scan_conditional_poisson` from ``e_n(q on H_k) = M[k] * 2**E[k]``
    (:func:`esp_prefix_scaled`) and the prefix sums ``P``, ``X`` (shared by every ``n`` of an
    evaluation plan)."""
    V = X.size - 1
    best = 0.0
    best_k = 0
    for k in range(1, V + 1):
        ratio = math.ldexp(M[k] / M[V], int(E[k] - E[V])) if M[k] > 0.0 else 0.0
        d = min(ratio, X[k] / X[V]) - P[k]
        if d > best:
            best = d
            best_k = k
    return best, best_k


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
# positive floats; up to 256 bins per octave over the occupied range, at most BIN_BUDGET bins), so
# every bin boundary is a prefix of the sorted order whose
# excess is exact from bin sums. Inside a bin, D_k <= Q(H_end) - p(H_start) (Q grows, p grows), so
# only the few bins whose bound beats the best boundary are sorted and scanned token by token.


@nb.njit(cache=True)
def _bin_of(p, q):
    """Bins of q/p, high to low: ``(bins, nbins)``.

    Bin 0 holds ``p = 0 < q``, the last bin ``q = 0``; in between, the bit pattern of the positive
    float ``q/p`` (monotone in its value) cut to its exponent and the leading mantissa bits, over the
    occupied range only, so that LLM-like ratios spread over 2^8 bins per octave (fewer where the
    ratios span more octaves than the budget allows).
    """
    V = p.size
    key = np.empty(V, dtype=np.int64)
    ratio = key.view(np.float64)  # the ratio, then its bit pattern (monotone for positive floats)
    r_lo = np.inf
    r_hi = -1.0
    for i in range(V):
        r = q[i] / (p[i] if p[i] > 0.0 else 1.0)  # p = 0: never read below
        ratio[i] = r
        if q[i] > 0.0 and p[i] > 0.0:
            r_lo = min(r_lo, r)
            r_hi = max(r_hi, r)
    ends = np.array([r_lo, r_hi]).view(np.int64)
    lo = ends[0]
    hi = ends[1] if r_hi > 0.0 else np.int64(-1)
    shift = 44  # 8 mantissa bits; fewer while the occupied range needs more than the budget
    if hi >= 0:
        while (hi >> shift) - (lo >> shift) + 1 > BIN_BUDGET:
            shift += 1
    top = hi >> shift if hi >= 0 else 0
    nbins = (top - (lo >> shift) + 1 if hi >= 0 else 0) + 2
    for i in range(V):  # in place, without branches
        j = 1 + top - (key[i] >> shift)
        j = 0 if p[i] == 0.0 else j
        key[i] = nbins - 1 if q[i] == 0.0 else j
    return key, nbins


@nb.njit(cache=True)
def _excess(Qh, Ph, Rout, Sh, big, n, code):
    """Excess Q(H) - p(H) from sums: with replacement (code 0) or sequential n = 2 (code 1).

    For code 1, ``Sh`` sums q_i / (1 - q_i) over H except the token above half the mass, whose
    term ``q_i (R / (1 - q_i))`` is passed as ``big`` (see :func:`scan_without_replacement_2`).
    """
    if code == 0:
        return power_of_mass(Qh, Rout, n) - Ph
    return (Qh - Ph) - Rout * Sh - big


@nb.njit(cache=True)
def bucketed_scan(p, q, n, code, rest):
    """``(D, mask)`` for code 0 (with replacement, any n) or code 1 (sequential, n = 2).

    ``rest[i] = 1 - q_i`` as a direct sum (read for code 1 only). ``mask`` marks the first optimal
    prefix H of the order of :func:`mdsd_ot.dual.sorted_order` (empty when D = 0). Bin sums and
    in-bin prefixes are Neumaier-compensated (every term is non-negative:
    :func:`neumaier_add_nonneg`, without branches).
    """
    V = p.size
    b, nbins = _bin_of(p, q)
    sums = np.zeros((nbins, 6))  # per bin: p, q, S sums and their compensations (one cache line)
    cnt = np.zeros(nbins, dtype=np.int64)
    half = 0.0
    if code == 1:  # (the token above half the mass: sequential n = 2 only)
        for i in range(V):
            half += q[i]
        half *= 0.5
    big_i = -1
    for i in range(V):
        j = b[i]
        cnt[j] += 1
        sums[j, 0], sums[j, 3] = neumaier_add_nonneg(sums[j, 0], sums[j, 3], p[i])
        sums[j, 1], sums[j, 4] = neumaier_add_nonneg(sums[j, 1], sums[j, 4], q[i])
        if code == 1 and q[i] > 0.0:
            if q[i] > half:
                big_i = i
            else:
                sums[j, 2], sums[j, 5] = neumaier_add_nonneg(sums[j, 2], sums[j, 5], q[i] / rest[i])
    P0 = prefix_sums(sums[:, 0] + sums[:, 3])  # sums over the bins before bin j
    Q0 = prefix_sums(sums[:, 1] + sums[:, 4])
    S0 = prefix_sums(sums[:, 2] + sums[:, 5])
    R1 = suffix_sums(sums[:, 1] + sums[:, 4])  # q mass of the bins after bin j: R1[j + 1]
    big_bin = b[big_i] if big_i >= 0 else nbins
    big_q = q[big_i] if big_i >= 0 else 0.0
    big_rest = rest[big_i] if big_i >= 0 else 1.0
    bound = 0.0
    for j in range(nbins):
        if cnt[j] > 0:
            big = big_q * (R1[j + 1] / big_rest) if big_bin <= j else 0.0
            bound = max(bound, _excess(Q0[j + 1], P0[j + 1], R1[j + 1], S0[j + 1], big, n, code))
    # tokens of the bins whose inner prefixes might beat every boundary
    start = np.zeros(nbins + 1, dtype=np.int64)
    for j in range(nbins):
        inner = 0
        if j < nbins - 1 and cnt[j] >= 2:  # inside the q = 0 bin the excess only falls
            # Q and S grow, p grows, R falls: bound with Q, R at the bin's end and p, S at its start
            ub = _excess(Q0[j + 1], P0[j], R1[j + 1], S0[j], 0.0, n, code)
            if ub >= bound - PRUNE_MARGIN:
                inner = cnt[j]
        start[j + 1] = start[j] + inner
    members = np.empty(start[nbins], dtype=np.int64)
    fill = start[:-1].copy()
    for i in range(V):
        j = b[i]
        if start[j + 1] > start[j]:
            members[fill[j]] = i
            fill[j] += 1
    # each candidate bin sorted by q/p in place (ties keep token index order), with p and q along it,
    # and the q mass of the bin after each of its inner prefixes, in arrays shared by all bins
    rs = np.empty(members.size)
    ps = np.empty(members.size)
    qs = np.empty(members.size)
    for t in range(members.size):
        i = members[t]
        rs[t] = q[i] / p[i] if p[i] > 0.0 else np.inf
        ps[t] = p[i]
        qs[t] = q[i]
    tail = np.empty(members.size + 1)
    for j in range(nbins):
        a, e = start[j], start[j + 1]
        if e > a:
            sort_run_descending(members, rs, ps, qs, a, e)
            s_, c_ = 0.0, 0.0
            tail[e] = 0.0
            for t in range(e - 1, a - 1, -1):
                s_, c_ = neumaier_add_nonneg(s_, c_, qs[t])
                tail[t] = s_ + c_
    best = 0.0
    best_bin = -1
    best_len = 0  # tokens of best_bin inside H (cnt = the whole bin)
    for j in range(nbins):
        if cnt[j] == 0:
            continue
        a, e = start[j], start[j + 1]
        if e > a:
            Pc, cP = P0[j], 0.0
            Qc, cQ = Q0[j], 0.0
            Sc, cS = S0[j], 0.0
            big_in = big_bin < j
            for t in range(a, e - 1):
                i = members[t]
                Pc, cP = neumaier_add_nonneg(Pc, cP, ps[t])
                Qc, cQ = neumaier_add_nonneg(Qc, cQ, qs[t])
                if code == 1:
                    if i == big_i:
                        big_in = True
                    else:
                        Sc, cS = neumaier_add_nonneg(Sc, cS, qs[t] / rest[i])
                Rout = R1[j + 1] + tail[t + 1]
                big = big_q * (Rout / big_rest) if big_in else 0.0
                d = _excess(Qc + cQ, Pc + cP, Rout, Sc + cS, big, n, code)
                if d > best:
                    best, best_bin, best_len = d, j, t + 1 - a
        big = big_q * (R1[j + 1] / big_rest) if big_bin <= j else 0.0
        d = _excess(Q0[j + 1], P0[j + 1], R1[j + 1], S0[j + 1], big, n, code)
        if d > best:
            best, best_bin, best_len = d, j, cnt[j]
    mask = np.zeros(V, dtype=np.bool_)
    if best_bin >= 0:
        whole = best_len == cnt[best_bin]
        for i in range(V):  # (no branch: bitwise operators on the booleans)
            mask[i] = (b[i] < best_bin) | (whole & (b[i] == best_bin))
        if not whole:
            for t in range(start[best_bin], start[best_bin] + best_len):
                mask[members[t]] = True
    return best, mask
