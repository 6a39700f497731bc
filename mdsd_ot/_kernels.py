"""Numba kernels for the dual solvers (the only module that imports numba).

All kernels take contiguous float64 arrays already ordered by ``q/p`` (high to low, see
:func:`mdsd_ot.dual.sorted_order`) and use int64 indices. Each has a slow twin in the tests.
Running sums use Neumaier compensation, so prefix masses over 256k tokens keep ~1e-16 accuracy.
"""
from __future__ import annotations

import math

import numba as nb
import numpy as np

from ._config import PRUNE_MARGIN, QUAD_STEP, QUAD_TAIL

# ------------------------------------------------------------------------------- prefix bookkeeping


@nb.njit(cache=True)
def prefix_sums(x):
    """``S[k] = sum(x[:k])`` for k = 0..V (Neumaier-compensated)."""
    V = x.size
    out = np.empty(V + 1)
    s = 0.0
    c = 0.0
    out[0] = 0.0
    for i in range(V):
        v = x[i]
        t = s + v
        if abs(s) >= abs(v):
            c += (s - t) + v
        else:
            c += (v - t) + s
        s = t
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
        v = x[i]
        t = s + v
        if abs(s) >= abs(v):
            c += (s - t) + v
        else:
            c += (v - t) + s
        s = t
        out[i] = s + c
    return out


@nb.njit(cache=True)
def _argmin_first(a):
    best = 0
    for k in range(1, a.size):
        if a[k] < a[best]:
            best = k
    return best


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

    ``R_k`` is a suffix sum and each ``1 - q_i`` a direct sum (no cancellation). Returns ``(D, k)``.
    """
    P = prefix_sums(ps)
    Q = prefix_sums(qs)
    R = suffix_sums(qs)
    best = 0.0
    best_k = 0
    s = 0.0
    c = 0.0
    for k in range(ps.size + 1):
        d = (Q[k] - P[k]) - R[k] * (s + c)
        if d > best:
            best = d
            best_k = k
        if k < ps.size:
            v = qs[k] / rest_s[k]
            t = s + v
            if abs(s) >= abs(v):
                c += (s - t) + v
            else:
                c += (v - t) + s
            s = t
    return best, best_k


# --------------------------------------------------------------------------- conditional Poisson


@nb.njit(cache=True)
def scan_conditional_poisson(ps, xs, n):
    """Q(H_k) = e_n(x on H_k) / e_n(x); ``xs`` is q rescaled (the ratio is scale free)."""
    V = xs.size
    e = np.zeros(n + 1)
    e[0] = 1.0
    for i in range(V):
        for j in range(n, 0, -1):
            e[j] += xs[i] * e[j - 1]
    total = e[n]
    P = prefix_sums(ps)
    X = prefix_sums(xs)
    e[:] = 0.0
    e[0] = 1.0
    best = 0.0
    best_k = 0
    for k in range(1, V + 1):
        for j in range(n, 0, -1):
            e[j] += xs[k - 1] * e[j - 1]
        d = min(e[n] / total, X[k] / X[V]) - P[k]
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
    """Trapezoid grid in s = log t: returns ``(s_lo, h, M)``."""
    s_lo = math.log(QUAD_TAIL) / (n + 1)
    s_hi = math.log(-math.log(QUAD_TAIL) / r_min)  # R t e^{-R t} negligible beyond
    h = QUAD_STEP
    M = int(math.ceil((s_hi - s_lo) / h)) + 1
    return s_lo, h, M


@nb.njit(cache=True)
def _quad_nodes(qs, cand, Rc, n, s_lo, h, m0, mstep, M, acc):
    """Add the trapezoid terms of nodes m0, m0 + mstep, ... < M for every candidate prefix."""
    dp = np.empty(n + 1)  # dp[j] = P(N = j) for j < n, dp[n] = P(N >= n)
    C = cand.size
    for m in range(m0, M, mstep):
        t = math.exp(s_lo + m * h)
        for j in range(n + 1):
            dp[j] = 0.0
        dp[0] = 1.0
        k = 0
        for c in range(C):
            stop = cand[c]
            while k < stop:
                x = qs[k] * t
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
            r = Rc[c]
            acc[c] += h * t * r * math.exp(-r * t) * dp[n]


@nb.njit(cache=True)
def sequential_masses(qs, cand, Rc, n):
    """W_n(H_k) for prefixes ``k = cand`` (increasing) with outside masses ``Rc > 0`` (serial)."""
    s_lo, h, M = quad_grid(n, Rc.min())
    acc = np.zeros(cand.size)
    _quad_nodes(qs, cand, Rc, n, s_lo, h, 0, 1, M, acc)
    return acc


@nb.njit(cache=True, parallel=True)
def _sequential_masses_parallel(qs, cand, Rc, n, threads):
    s_lo, h, M = quad_grid(n, Rc.min())
    blocks = min(M, 4 * threads)
    acc = np.zeros((blocks, cand.size))
    for b in nb.prange(blocks):
        _quad_nodes(qs, cand, Rc, n, s_lo, h, b, blocks, M, acc[b])
    out = np.zeros(cand.size)
    for b in range(blocks):
        out += acc[b]
    return out


def sequential_masses_parallel(qs, cand, Rc, n):
    """As :func:`sequential_masses`, with the quadrature nodes spread over threads."""
    return _sequential_masses_parallel(qs, cand, Rc, n, nb.get_num_threads())


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
    """Prefixes that may attain the maximum: ``(cand (int64, increasing), best exact (D, k))``."""
    best_lo = max(lo.max(), 0.0)
    best = 0.0
    best_k = 0
    count = 0
    for k in range(lo.size):
        if exact[k]:
            if lo[k] > best:
                best = lo[k]
                best_k = k
        elif hi[k] >= best_lo - PRUNE_MARGIN:
            count += 1
    cand = np.empty(count, dtype=np.int64)
    i = 0
    for k in range(lo.size):
        if not exact[k] and hi[k] >= best_lo - PRUNE_MARGIN:
            cand[i] = k
            i += 1
    return cand, best, best_k


@nb.njit(cache=True)
def _pick(P, Q, cand, W, best, best_k):
    for i in range(cand.size):
        k = cand[i]
        d = min(W[i], Q[k]) - P[k]
        if d > best or (d == best and k < best_k):
            best = d
            best_k = k
    return best, best_k


@nb.njit(cache=True)
def scan_without_replacement(ps, qs, n):
    """Any n >= 3 (serial): bounds prune the prefixes, quadrature settles the rest."""
    P, Q, R, lo, hi, exact = without_replacement_bounds(ps, qs, n)
    cand, best, best_k = candidate_prefixes(lo, hi, exact)
    if cand.size == 0:
        return best, best_k
    W = sequential_masses(qs, cand, R[cand], n)
    return _pick(P, Q, cand, W, best, best_k)


def scan_without_replacement_parallel(ps, qs, n):
    """As :func:`scan_without_replacement`, with the quadrature spread over threads."""
    P, Q, R, lo, hi, exact = without_replacement_bounds(ps, qs, n)
    cand, best, best_k = candidate_prefixes(lo, hi, exact)
    if cand.size == 0:
        return best, best_k
    W = sequential_masses_parallel(qs, cand, R[cand], n)
    return _pick(P, Q, cand, W, best, int(best_k))


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
def complement_masses_sorted(qs):
    """``1 - qs[i]`` without cancellation (direct sum for the one token above half the mass)."""
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


SCHEME_CODES = {"with_replacement": 0, "without_replacement": 1, "conditional_poisson": 2}


@nb.njit(cache=True)
def solve_sorted(ps, qs, n, code):
    """Dispatch on a scheme code (see ``SCHEME_CODES``); returns ``(D, k)``, alpha* = 1 - D."""
    if code == 0 or n == 1:
        return scan_with_replacement(ps, qs, n)
    if code == 1:
        if n == 2:
            return scan_without_replacement_2(ps, qs, complement_masses_sorted(qs))
        return scan_without_replacement(ps, qs, n)
    return scan_conditional_poisson(ps, qs / qs.max(), n)


@nb.njit(cache=True, parallel=True)
def solve_batch(P, Q, n, code):
    """Row-parallel batch solve of ``(B, V)`` arrays; each row sorted with a stable argsort."""
    B = P.shape[0]
    out = np.empty(B)
    for b in nb.prange(B):
        order = np.argsort(order_keys(P[b], Q[b]), kind="mergesort")
        ps = P[b][order]
        qs = Q[b][order]
        out[b] = max(1.0 - solve_sorted(ps, qs, n, code)[0], 0.0)
    return out
