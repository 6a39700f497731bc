"""Sorted-prefix scans of the dual (docs/math.md#dual-and-sorting-theorem): with replacement, sequential
n = 2, conditional Poisson, the token order, and the binned scan that needs no full sort.

Every scan takes contiguous float64 arrays ordered by ``q/p`` (high to low, see
:func:`mdsd_ot.dual.sorted_order`) and returns ``(D, k)``, the largest excess and its first prefix.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from .._config import BIN_BUDGET, GAIN_FLOOR, POWER_FROM_REST_N, PRUNE_MARGIN, REFINE_BINS, REFINE_MIN
from .common import (
    logaddexp,
    neumaier_add,
    neumaier_add_nonneg,
    prefix_sums,
    suffix_sums,
)

# --------------------------------------------------------------------------- with replacement
#
# Every scan returns (D, k): the largest excess D = Q(H_k) - p(H_k) over the prefixes (>= 0, attained
# first at k; k = 0 is the empty set) so that alpha* = 1 - D. Q(H_k) and p(H_k) come from prefix sums
# of the same kind, so p == q gives D = 0 exactly, and every Q(H) is capped by the exact bound q(H).


#: Above this exponent :func:`int_power` calls ``math.pow`` (numba's own cut-off for ``x ** n``).
_INT_POWER_MAX = 0x10000


@nb.njit(cache=True, inline="always")
def int_power(x, n):
    """``x ** n`` for an integer ``n >= 0`` by binary exponentiation: numba's algorithm for a float to
    an integer power, written out so that the compiled kernel and its Python twin (where ``x ** n``
    would call libm's ``pow``, which rounds differently) give the same bits."""
    if n > _INT_POWER_MAX:
        return math.pow(x, float(n))
    r = 1.0
    e = n
    while e != 0:
        if e & 1:
            r *= x
        e >>= 1
        x *= x
    return r


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
    return min(int_power(Qh, n), Qh)


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


_SCALE_MAX = 1100
_SCALE_DOWN = np.array([2.0**-i for i in range(_SCALE_MAX + 1)])  # 2^-i (0 from i = 1075 on)


@nb.njit(cache=True, inline="always")
def _scale_down(x, i):
    """``ldexp(x, -i)`` for ``i >= 0`` as one multiplication by the exact power ``2^-i`` (0 beyond the
    table, where ``|x| < 2`` makes the exact result round to 0 anyway): the product of a float and a
    power of two is rounded once, correctly, as ``ldexp`` rounds a subnormal result, so the two give
    the same bits, without a library call."""
    return x * _SCALE_DOWN[min(i, _SCALE_MAX)]


#: :func:`esp_prefix_scaled` drops a term this many octaves below the sum it would join.
ESP_DROP_OCTAVES = 100


@nb.njit(cache=True)
def esp_prefix_scaled(xs, ns):
    """``e_{ns[j]}(xs[:k]) = M[j, k] * 2**E[j, k]`` for k = 0..V and every requested degree (one pass,
    the DP up to ``max(ns)``); ``M = 0`` where fewer than that many entries are positive.

    Every term ``x * e_{j-1}`` is positive, so relative errors do not grow with V: each e_j is within
    a few ulps times j of the exact value (the compensated sum), whatever the magnitudes. The binary
    exponents are moved by multiplications with exact powers of two (:func:`_scale_down`; a mantissa
    after one addition lies in [1/4, 2), renormalised by 1/2 or 2), bit for bit what ``ldexp`` and
    ``frexp`` give. A term more than ``ESP_DROP_OCTAVES`` octaves below the running sum is not added
    (it would only enter the compensation, as a subnormal where the masses are tiny: 11-17x slower
    arithmetic): the sum only grows, so the terms dropped from one ``e_j`` add up to less than
    ``V 2^-100`` of it, under ``2^-60`` of an ulp at any vocabulary below 2^47 tokens."""
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
                    if d < -ESP_DROP_OCTAVES:  # below 2^-100 of the sum: dropped (see the docstring)
                        continue
                    if d > 0:  # the new term is the larger: move the sum to its exponent
                        m[j] = _scale_down(m[j], d)
                        c[j] = _scale_down(c[j], d)
                        e[j] = et
                        d = 0
                    a = _scale_down(t, -d)  # <= the sum's scale; 0 when below its last ulp by far
                    s = m[j] + a
                    if m[j] >= a:
                        c[j] += (m[j] - s) + a
                    else:
                        c[j] += (a - s) + m[j]
                    m[j] = s
                v = m[j]  # in [1/4, 2): frexp's (f, k) is (v/2, 1), (v, 0) or (2v, -1)
                if v >= 1.0:
                    m[j] = v * 0.5
                    c[j] = c[j] * 0.5
                    e[j] += 1
                elif v < 0.5:
                    if v >= 0.25:
                        m[j] = v * 2.0
                        c[j] = c[j] * 2.0
                        e[j] -= 1
                    else:  # (not reached: kept exact all the same)
                        f, k = math.frexp(v)
                        m[j] = f
                        c[j] = math.ldexp(c[j], int(-k))
                        e[j] += k
        for j in range(ns.size):
            M[j, i + 1] = m[ns[j]] + c[ns[j]]
            E[j, i + 1] = e[ns[j]]
    return M, E


@nb.njit(cache=True, inline="always")
def _normalised(v, k):
    """``(f, k + j)`` with ``v = f 2^j``, ``f`` in [1/2, 1) (``v > 0``): ``math.frexp``, by exact
    halvings and doublings where ``v`` lies within a few octaves of [1/2, 1) (every sum of aligned
    terms here: at least 1/4, at most n + 1), so without a library call."""
    if v < 2.0**-8 or v >= 2.0**16:
        f, j = math.frexp(v)
        return f, k + j
    while v >= 1.0:
        v *= 0.5
        k += 1
    while v < 0.5:
        v *= 2.0
        k -= 1
    return v, k


@nb.njit(cache=True, inline="always")
def _poly_product(am, ae, da, bm, be, db, om, oe, n):
    """``o = a b`` truncated at degree n for polynomials with coefficients ``m * 2**e`` (mantissas in
    [1/2, 1)); returns the degree of ``o``, ``min(da + db, n)``. Each coefficient's positive terms are
    aligned to the largest and added, then renormalised."""
    dd = min(da + db, n)
    for d in range(dd + 1):
        i0 = max(0, d - db)
        i1 = min(d, da)
        top = ae[i0] + be[d - i0]
        for i in range(i0 + 1, i1 + 1):
            top = max(top, ae[i] + be[d - i])
        acc = 0.0
        for i in range(i0, i1 + 1):
            acc += _scale_down(am[i] * bm[d - i], top - (ae[i] + be[d - i]))  # a term in [1/4, 1)
        om[d], oe[d] = _normalised(acc, top)
    return dd


@nb.njit(cache=True)  # (not inlined: one compiled copy for its three callers)
def _push_leaf(sm, se, sdeg, slev, depth, tm, te, td, om, oe, n):
    """Push the polynomial ``(tm, te)`` of degree ``td`` on the binary counter's stack, multiplying it
    with the stack's top while their levels are equal (a balanced tree); returns the new depth."""
    lev = 0
    while depth > 0 and slev[depth - 1] == lev:
        depth -= 1
        td = _poly_product(sm[depth], se[depth], sdeg[depth], tm, te, td, om, oe, n)
        for j in range(td + 1):
            tm[j] = om[j]
            te[j] = oe[j]
        lev += 1
    for j in range(td + 1):
        sm[depth, j] = tm[j]
        se[depth, j] = te[j]
    sdeg[depth] = td
    slev[depth] = lev
    return depth + 1


#: Scaled chunks of :func:`esp_tree_coefficients`: a mass's class is ``(k + _CLASS_BASE) // width``
#: for its binary exponent ``k`` (at least -1073, so never negative), each class with its own chunk.
_CLASS_BASE = 1100


@nb.njit(cache=True, inline="always")
def _push_chunk(cs, count, row, s, sm, se, sdeg, slev, depth, tm, te, om, oe, n):
    """Push the chunk in ``row`` (its coefficient j is ``cs[row, j] 2^(j s)``: ``s = 0`` for the plain
    chunk, the class's scale exponent for a scaled one) on the stack as one leaf and mark it empty (its
    row is set again at its next mass); returns the new depth."""
    td = min(count[row], n)
    for j in range(td + 1):
        tm[j], te[j] = _normalised(cs[row, j], j * s)
    count[row] = 0
    return _push_leaf(sm, se, sdeg, slev, depth, tm, te, td, om, oe, n)


@nb.njit(cache=True)
def esp_tree_coefficients(x, n):
    """``e_j(x) = m[j] * 2**k[j]`` for j = 0..n as ``(m, k)`` (``m[j] = 0``: fewer than j positive
    entries) by a pairwise product of polynomials up a balanced tree: the conditional-Poisson
    certificate re-check (docs/math.md#conditional-poisson), independent of the solver's sequential DP
    (:func:`esp_prefix_scaled`).

    The leaves, in token order: a run of ``c`` consecutive equal positive masses ``v``, at least a
    chunk long, is the polynomial ``(1 + v t)^c`` truncated at degree n, coefficients ``C(c, j) v^j``
    in closed form (each within ``3j`` ulps); a shorter run is ``c`` single masses. Single masses of
    at least ``2^(-1000 / n)`` are multiplied in plain float64 in chunks of ``max(16, 4n)`` (every
    product of at most n of them is above 2^-1000: no underflow; positive terms, within the chunk's
    length in ulps); a smaller one joins the chunk of its binary exponent's class (``1000 // n - 1``
    octaves a class, at most 512 masses a chunk), scaled by an exact power of two into
    ``[2^-(width + 1), 1/2)`` and multiplied in plain float64 the same way, its chunk's coefficient j
    carrying the scale to the power j in its exponent (for n > 500 such a mass is a leaf ``1 + v t``
    of its own). Leaves are multiplied in pairs, pairs of pairs and so on (a binary counter
    over a stack of at most ``log2(V) + 1`` polynomials: no memory grows with V), a product of
    degrees ``a``, ``b`` having degree ``min(a + b, n)`` and only the products of coefficients within
    the degrees formed. Every coefficient above the chunks is a mantissa in [1/2, 1) and an integer
    exponent, so no range is lost; the terms of a product coefficient are positive and added after
    alignment to the largest, so the relative error is at most about
    ``(n + 2) (log2(V) + 1) + 4n + 16`` ulps. O(V n) in all.
    """
    levels = 66  # a binary counter over at most 2^63 leaves
    sm = np.zeros((levels, n + 1))
    se = np.zeros((levels, n + 1), dtype=np.int64)
    sdeg = np.zeros(levels, dtype=np.int64)
    slev = np.zeros(levels, dtype=np.int64)
    depth = 0
    tm = np.zeros(n + 1)  # the polynomial being pushed
    te = np.zeros(n + 1, dtype=np.int64)
    om = np.zeros(n + 1)
    oe = np.zeros(n + 1, dtype=np.int64)
    chunk = max(16, 4 * n)
    safe = 2.0 ** (-1000.0 / n)
    # the chunks, one per row of cs: row `plain` multiplies single masses of at least `safe` as they
    # are; a smaller single mass with binary exponent k (v = f 2^k, f in [1/2, 1)) joins the row of
    # its class (k + _CLASS_BASE) // width, multiplied by 2^-s (s the class's top exponent + 1: exact,
    # into [2^-(width + 1), 1/2)); coefficient j of a row is cs[row, j] 2^(j s)
    width = 1000 // n - 1  # octaves per class: a product of n scaled masses stays above 2^-1000
    classes = _CLASS_BASE // width + 1 if width >= 1 else 0  # (n > 500: each such mass a leaf)
    schunk = min(chunk, 512)  # a coefficient of a scaled chunk stays below C(512, j) 2^-j: no overflow
    plain = classes
    cs = np.empty((classes + 1, n + 1))  # a row is set at the first mass of each of its chunks
    count = np.zeros(classes + 1, dtype=np.int64)  # masses in each row's chunk
    i = 0
    V = x.size
    while i < V:
        v = x[i]
        if not v > 0.0:
            i += 1
            continue
        c = 1  # a run of c equal masses
        while i + c < V and x[i + c] == v:
            c += 1
        i += c
        if v >= safe and c < chunk:  # into the plain chunk, c times
            row, sc, y, limit = plain, 0, v, chunk
        elif v < safe and c < schunk and classes > 0:  # into the scaled chunk of its class, c times
            row = (math.frexp(v)[1] + _CLASS_BASE) // width
            sc = (row + 1) * width - _CLASS_BASE
            y, limit = math.ldexp(v, -sc), schunk
        else:
            row = -1  # a long run, or n > 500: a closed-form leaf
        if row >= 0:
            for _ in range(c):
                k = count[row]
                if k == 0:
                    cs[row, 0] = 1.0
                    for j in range(1, n + 1):
                        cs[row, j] = 0.0
                for j in range(min(k + 1, n), 0, -1):
                    cs[row, j] += y * cs[row, j - 1]
                count[row] = k + 1
                if k + 1 == limit:
                    depth = _push_chunk(cs, count, row, sc, sm, se, sdeg, slev, depth, tm, te, om, oe, n)
            continue
        td = min(c, n)  # (1 + v t)^c: C(c, j) v^j = C(c, j - 1) v^(j - 1) * v * (c - j + 1) / j
        fv, kv = math.frexp(v)
        tm[0], te[0] = 0.5, 1
        for j in range(1, td + 1):
            tm[j], te[j] = _normalised(tm[j - 1] * fv * ((c - j + 1) / j), te[j - 1] + kv)
        depth = _push_leaf(sm, se, sdeg, slev, depth, tm, te, td, om, oe, n)
    for r in range(-1, classes):  # the plain chunk first, then the classes in order
        row = plain if r < 0 else r
        if count[row] > 0:
            sc = 0 if row == plain else (row + 1) * width - _CLASS_BASE
            depth = _push_chunk(cs, count, row, sc, sm, se, sdeg, slev, depth, tm, te, om, oe, n)
    out_m = np.zeros(n + 1)
    out_e = np.zeros(n + 1, dtype=np.int64)
    if depth == 0:
        out_m[0], out_e[0] = 0.5, 1  # the empty product: e_0 = 1
        return out_m, out_e
    depth -= 1  # the rest, from the smallest subtree up
    td = sdeg[depth]
    for j in range(td + 1):
        tm[j] = sm[depth, j]
        te[j] = se[depth, j]
    while depth > 0:
        depth -= 1
        td = _poly_product(sm[depth], se[depth], sdeg[depth], tm, te, td, om, oe, n)
        for j in range(td + 1):
            tm[j] = om[j]
            te[j] = oe[j]
    for j in range(td + 1):
        out_m[j] = tm[j]
        out_e[j] = te[j]
    return out_m, out_e


@nb.njit(cache=True)
def esp_tree_scaled(x, n):
    """``e_n(x) = m * 2**k`` as ``(m, k)`` (``m = 0``: fewer than n positive entries): the coefficient
    of degree n of :func:`esp_tree_coefficients`."""
    m, k = esp_tree_coefficients(x, n)
    return m[n], k[n]


@nb.njit(cache=True)
def esp_split_ratio(x_in, x_out, n):
    """``e_n(x_in) / e_n(x_in + x_out)`` (0 when ``x_in`` has fewer than n positive entries) from the
    tree polynomials of the two parts (:func:`esp_tree_coefficients`): the whole set's
    ``e_n = sum_i e_i(x_in) e_(n-i)(x_out)``, its positive terms aligned to the largest and added, so
    that one tree over the vocabulary gives both sides of the conditional-Poisson ``Q(H)``."""
    am, ae = esp_tree_coefficients(x_in, n)
    if am[n] == 0.0:
        return 0.0
    bm, be = esp_tree_coefficients(x_out, n)
    top = ae[n] + be[0]  # (b_0 = 1: a term that is always there)
    for i in range(n + 1):
        if am[i] > 0.0 and bm[n - i] > 0.0:
            top = max(top, ae[i] + be[n - i])
    acc = 0.0
    for i in range(n + 1):
        if am[i] > 0.0 and bm[n - i] > 0.0:
            acc += _scale_down(am[i] * bm[n - i], top - (ae[i] + be[n - i]))
    f, k = math.frexp(acc)
    return math.ldexp(am[n] / f, int(ae[n] - (top + k)))


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
def complement_parts_kernel(qs):
    """``(total, big, big_rest)``: ``total = sum(qs)`` (compensated, from the end, as
    :func:`suffix_sums`), ``big`` the token above half the mass (-1: none) and ``big_rest`` its
    ``1 - q`` summed directly (1.0 when there is none). Every other ``1 - q_i`` is ``total - q_i``."""
    s = 0.0
    c = 0.0
    for i in range(qs.size - 1, -1, -1):
        s, c = neumaier_add(s, c, qs[i])
    total = s + c
    big = -1
    big_rest = 1.0
    for i in range(qs.size):
        if qs[i] > 0.5 * total:
            big = i
            r = 0.0
            for j in range(qs.size):
                if j != i:
                    r += qs[j]
            big_rest = r
    return total, big, big_rest


@nb.njit(cache=True)
def complement_masses_kernel(qs):
    """``1 - q[i]`` without cancellation (direct sum for the one token above half the mass)."""
    total, big, big_rest = complement_parts_kernel(qs)
    rest = np.empty(qs.size)
    for i in range(qs.size):
        rest[i] = total - qs[i]
    if big >= 0:
        rest[big] = big_rest
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
#
# Cost (docs/performance.md): two passes over the vocabulary for the bins (the ratios' top bits kept
# in the bins' own 4-byte array, then their sums), one over the bins to collect the candidate bins'
# tokens (as 4-byte indices), and work on those tokens only, read where they lie (``p[members[t]]``,
# in increasing index order: sub-bins are scattered stably). A crowded candidate bin (the wide pair's
# 66,000 ratios just above 0.7) then moves indices, not four arrays of values, and every scratch array
# is a few bytes per candidate token: the fresh pages of per-call temporaries cost more than the
# arithmetic (a page fault is ~2.5 us on a virtual machine: the 10 MB of the earlier version, 3 ms).


@nb.njit(cache=True)
def _bin_of(p, q):
    """Bins of q/p, high to low: ``(bins, nbins)``, 4-byte bin numbers.

    Bin 0 holds ``p = 0 < q``, the last bin ``q = 0``; in between, the bit pattern of the positive
    float ``q/p`` (monotone in its value) cut to its exponent and the leading mantissa bits, over the
    occupied range only, so that LLM-like ratios spread over 2^8 bins per octave (fewer where the
    ratios span more octaves than the budget allows). Bins never resolve more than the top 20 bits of
    the pattern (sign, exponent, 8 mantissa bits), so the first pass keeps only those, in the array it
    returns (half the fresh memory of the ratios themselves, one division per token).
    """
    V = p.size
    key = np.empty(V, dtype=np.int32)
    buf = np.empty(1)
    bits = buf.view(np.int64)  # the ratio's bit pattern (monotone for positive floats)
    r_lo = np.inf
    r_hi = -1.0
    for i in range(V):
        r = q[i] / (p[i] if p[i] > 0.0 else 1.0)  # p = 0: never read below
        buf[0] = r
        key[i] = bits[0] >> 44
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
    s = np.int32(shift - 44)  # (bits >> 44) >> s == bits >> shift
    top32 = np.int32(top)
    last = np.int32(nbins - 1)
    for i in range(V):  # in place, without branches
        j = np.int32(1) + top32 - (key[i] >> s)
        j = np.int32(0) if p[i] == 0.0 else j
        key[i] = last if q[i] == 0.0 else j
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
def _bin_sums(p, q, b, nbins, code, total, big_i):
    """Per bin: the compensated sums of p, q and (code 1) q_i / (1 - q_i) without the token
    ``big_i`` (each ``1 - q_i`` as ``total - q_i``: see :func:`bucketed_scan`), as
    ``(sums (3, nbins), cnt)``; every term is non-negative (:func:`neumaier_add_nonneg`). A pass
    of its own: folded into :func:`_bin_of`'s second pass it runs slower (the bin arithmetic and the
    random-order adds of one loop get in each other's way)."""
    V = p.size
    acc = np.zeros((nbins, 6))  # per bin: p, q, S sums and their compensations
    cnt = np.zeros(nbins, dtype=np.int64)
    for i in range(V):
        j = b[i]
        cnt[j] += 1
        acc[j, 0], acc[j, 3] = neumaier_add_nonneg(acc[j, 0], acc[j, 3], p[i])
        acc[j, 1], acc[j, 4] = neumaier_add_nonneg(acc[j, 1], acc[j, 4], q[i])
        if code == 1 and q[i] > 0.0 and i != big_i:
            acc[j, 2], acc[j, 5] = neumaier_add_nonneg(acc[j, 2], acc[j, 5], q[i] / (total - q[i]))
    sums = np.empty((3, nbins))
    for j in range(nbins):
        for r in range(3):
            sums[r, j] = acc[j, r] + acc[j, r + 3]
    return sums, cnt


@nb.njit(cache=True, inline="always")
def _can_gain(q_run, n, code, odds):
    """Whether the tokens of a run (q mass ``q_run``, summed directly) could raise the excess above
    its value at the run's start by more than ``GAIN_FLOOR`` (docs/math.md#pruning). Adding q mass x
    raises ``q(H)^n`` by at most ``n x`` (code 0) and ``W_2(H)`` by at most the chance that a draft
    falls among the run's tokens, ``x (1 + odds)`` with ``odds = sum_i q_i / (1 - q_i)`` over the
    vocabulary (code 1; infinite when a ``1 - q_i`` is 0); the p mass only lowers the excess."""
    if q_run <= 0.0:
        return False
    cap = n * q_run if code == 0 else q_run * (1.0 + odds)
    return cap > GAIN_FLOOR


@nb.njit(cache=True)
def _bin_candidates(P0, Q0, S0, R1, cnt, qb, odds, big_bin, big_q, big_rest, n, code):
    """The best bin boundary's excess (``bound``) and ``start``: the offsets of the candidate bins'
    tokens (a bin whose inner prefixes might beat ``bound`` by more than ``GAIN_FLOOR``; the others
    get no room). ``qb``: each bin's q mass; ``odds``: see :func:`_can_gain`."""
    nbins = cnt.size
    bound = 0.0
    for j in range(nbins):
        if cnt[j] > 0:
            big = big_q * (R1[j + 1] / big_rest) if big_bin <= j else 0.0
            bound = max(bound, _excess(Q0[j + 1], P0[j + 1], R1[j + 1], S0[j + 1], big, n, code))
    start = np.zeros(nbins + 1, dtype=np.int64)
    for j in range(nbins):
        inner = 0
        # inside the q = 0 bin the excess only falls; a bin of too little q mass gains nothing
        if j < nbins - 1 and cnt[j] >= 2 and _can_gain(qb[j], n, code, odds):
            # Q and S grow, p grows, R falls: bound with Q, R at the bin's end and p, S at its start;
            # the token above half the mass, when in an earlier bin, costs at least its term at R(end)
            big = big_q * (R1[j + 1] / big_rest) if big_bin < j else 0.0
            ub = _excess(Q0[j + 1], P0[j], R1[j + 1], S0[j], big, n, code)
            if ub >= bound - PRUNE_MARGIN:
                inner = cnt[j]
        start[j + 1] = start[j] + inner
    return bound, start


@nb.njit(cache=True)
def _bin_members(b, start):
    """The tokens of the candidate bins, bin by bin in token order (``members[start[j]:start[j + 1]]``
    for bin j), as 4-byte token indices.

    When the candidates are few (LLM-like pairs) a branch skips the other tokens, well predicted;
    when they are many (a crowded bin: the branch would go either way at random) there is none: the
    other bins' tokens are all written to one extra slot past the end."""
    nbins = start.size - 1
    M = start[nbins]
    members = np.empty(M + 1, dtype=np.int32)
    fill = np.empty(nbins, dtype=np.int64)
    if 8 * M <= b.size:
        for j in range(nbins):
            fill[j] = start[j]
        for i in range(b.size):
            j = b[i]
            if start[j + 1] > start[j]:
                members[fill[j]] = i
                fill[j] += 1
        return members[:M]
    for j in range(nbins):
        fill[j] = start[j] if start[j + 1] > start[j] else M
    for i in range(b.size):  # (a candidate bin's slots end at or before M: it stops there, full)
        j = b[i]
        f = fill[j]
        members[f] = i
        fill[j] = f + (f < M)
    return members[:M]


@nb.njit(cache=True, inline="always")
def _better(d, rank, best, best_rank):
    """The first largest excess: ``d`` at ``rank`` tokens replaces ``best`` at ``best_rank``."""
    return d > best or (d == best and rank < best_rank)


@nb.njit(cache=True, inline="always")
def _ratio(p, q, i):
    """q/p of token i (``inf`` for p = 0)."""
    return q[i] / p[i] if p[i] > 0.0 else np.inf


@nb.njit(cache=True)
def _leaf_scan(
    members,
    p,
    q,
    total,
    work,
    tail,
    a0,
    a,
    e,
    P,
    Q,
    S,
    R,
    big_i,
    big_in,
    big_q,
    big_rest,
    n,
    code,
    bound,
    best,
    best_rank,
):
    """The inner prefixes of ``members[a:e]`` (a run of at most ``REFINE_MIN`` tokens of a candidate
    bin starting at ``a0``) token by token: the run sorted by q/p in place, stably, by insertion with
    the ratios in ``work`` (at that length faster than
    :func:`mdsd_ot._kernels.common.sort_run_descending`'s radix sort, which clears 2^11 counters a
    pass), then running compensated sums from ``P``, ``Q``, ``S`` (the sums before ``a``) and the
    outside mass ``R`` after ``e`` plus the run's own tail (in ``tail``)."""
    m = e - a
    rs = work  # insertion, stably from high to low (the permutation of any stable sort)
    for t in range(m):
        rs[t] = _ratio(p, q, members[a + t])
    for t in range(1, m):
        r, i = rs[t], members[a + t]
        u = t
        while u > 0 and rs[u - 1] < r:
            rs[u], members[a + u] = rs[u - 1], members[a + u - 1]
            u -= 1
        rs[u], members[a + u] = r, i
    s_, c_ = 0.0, 0.0
    tail[m] = 0.0
    for t in range(m - 1, -1, -1):
        s_, c_ = neumaier_add_nonneg(s_, c_, q[members[a + t]])
        tail[t] = s_ + c_
    Pc, cP = P, 0.0
    Qc, cQ = Q, 0.0
    Sc, cS = S, 0.0
    for t in range(a, e - 1):
        i = members[t]
        Pc, cP = neumaier_add_nonneg(Pc, cP, p[i])
        Qc, cQ = neumaier_add_nonneg(Qc, cQ, q[i])
        if code == 1:
            if i == big_i:
                big_in = True
            else:
                Sc, cS = neumaier_add_nonneg(Sc, cS, q[i] / (total - q[i]))
        Rout = R + tail[t + 1 - a]
        big = big_q * (Rout / big_rest) if big_in else 0.0
        d = _excess(Qc + cQ, Pc + cP, Rout, Sc + cS, big, n, code)
        bound = max(bound, d)
        if _better(d, t + 1 - a0, best, best_rank):
            best, best_rank = d, t + 1 - a0
    return bound, best, best_rank


#: The sub-bin of a token of a run being refined, as stored (``REFINE_BINS + 1`` sub-bins at most).
_SUB_DTYPE = np.uint16 if REFINE_BINS + 2 <= 1 << 16 else np.int64


@nb.njit(cache=True)
def _refine_bin(
    members,
    p,
    q,
    total,
    work,
    tail,
    jb,
    iwork,
    a0,
    e0,
    P,
    Q,
    S,
    R,
    big_i,
    big_in0,
    big_q,
    big_rest,
    n,
    code,
    odds,
    bound,
):
    """The first largest excess over the inner prefixes of one candidate bin ``members[a0:e0]`` (sums
    ``P``, ``Q``, ``S`` before it, outside mass ``R`` after it): ``(bound, best, best_rank)``, with
    ``best_rank`` tokens of the bin inside H (``-1``: none evaluated above 0) and ``bound`` raised by
    every excess attained. Scratch: ``work`` (``REFINE_MIN``), ``tail`` (``e0 - a0 + 1``),
    ``jb`` and ``iwork`` (``e0 - a0``).

    A run of more than ``REFINE_MIN`` tokens is not sorted: it is binned again by the next bits of its
    own occupied range of q/p (at most ``REFINE_BINS`` sub-bins, scattered in place, stably), every
    sub-bin boundary is a prefix whose excess follows from sub-bin sums, and only the sub-bins whose
    bound ``Q(end) - p(start)`` can beat the best attained excess by ``PRUNE_MARGIN`` and whose q mass
    could raise the excess by more than ``GAIN_FLOOR`` (:func:`_can_gain`) are looked into,
    recursively; shorter runs are sorted and scanned token by token. A run of equal ratios is not
    looked into at all: along it the excess is largest at one of its ends (docs/math.md#pruning),
    which are boundaries evaluated already. The tokens end up arranged so that the best prefix is
    ``members[a0:a0 + best_rank]``.

    The run's tokens are read where they lie, ``p[members[t]]`` (in increasing index order: the
    scatter is stable), their ratios computed in each of the two passes that need them rather than
    kept: per token the refinement touches 6 bytes of scratch (sub-bin, scatter), not 32.
    """
    m = e0 - a0
    best = 0.0
    best_rank = np.int64(-1)
    if m <= REFINE_MIN:
        return _leaf_scan(
            members,
            p,
            q,
            total,
            work,
            tail,
            a0,
            a0,
            e0,
            P,
            Q,
            S,
            R,
            big_i,
            big_in0,
            big_q,
            big_rest,
            n,
            code,
            bound,
            best,
            best_rank,
        )
    most = min(REFINE_BINS, m)  # sub-bins per refinement (fewer for a short bin: less to clear)
    cap = min(m // 2 + 2, most + 2)  # grown when needed (pushed runs: >= 2 tokens each, disjoint)
    st_a = np.empty(cap, dtype=np.int64)
    st_e = np.empty(cap, dtype=np.int64)
    st_f = np.empty((cap, 5))  # P, Q, S before the run, R after it, its upper bound
    st_big = np.empty(cap, dtype=np.bool_)
    top_ = 0
    st_a[0], st_e[0], st_big[0] = a0, e0, big_in0
    st_f[0, 0], st_f[0, 1], st_f[0, 2], st_f[0, 3], st_f[0, 4] = P, Q, S, R, np.inf
    top_ = 1
    cnt = np.empty(most + 2, dtype=np.int64)
    acc = np.empty((most + 1, 6))
    Rs = np.empty(most + 2)
    buf = np.empty(2)
    bits = buf.view(np.int64)
    while top_ > 0:
        top_ -= 1
        a, e, big_in = st_a[top_], st_e[top_], st_big[top_]
        Pa, Qa, Sa, Re, ub = st_f[top_, 0], st_f[top_, 1], st_f[top_, 2], st_f[top_, 3], st_f[top_, 4]
        if ub < bound - PRUNE_MARGIN:  # the bound rose since the run was pushed
            continue
        r_lo = np.inf
        r_2 = np.inf  # the smallest ratio above r_lo
        r_hi = 0.0
        for t in range(a, e):
            r = _ratio(p, q, members[t])
            if r < r_2:  # (rarely taken once a few tokens are in)
                if r < r_lo:
                    r_2 = r_lo
                    r_lo = r
                elif r > r_lo:
                    r_2 = r
            r_hi = max(r_hi, r)
        if r_lo == r_hi:  # the excess along the run is largest at one of its ends, evaluated
            continue
        if e - a <= REFINE_MIN:
            bound, best, best_rank = _leaf_scan(
                members,
                p,
                q,
                total,
                work,
                tail,
                a0,
                a,
                e,
                Pa,
                Qa,
                Sa,
                Re,
                big_i,
                big_in,
                big_q,
                big_rest,
                n,
                code,
                bound,
                best,
                best_rank,
            )
            continue
        # keys: the bits of q/p, or, where the run spans at most one octave, the bits of q/p - min q/p
        # (exact by Sterbenz's lemma, so the same order and the same ties): a run crowded just above
        # its smallest ratio, as q = 0.7 p + (tiny) makes it, then spreads over the exponents. x ->
        # x - r_sub is monotone and positive iff x > r_sub: the smallest positive key is that of r_2
        # (r_sub = r_lo, or r_lo = 0), else of r_lo; the largest, that of r_hi.
        r_sub = r_lo if r_hi <= 2.0 * r_lo else 0.0
        buf[0] = (r_2 if r_sub > 0.0 or r_lo == 0.0 else r_lo) - r_sub
        buf[1] = r_hi - r_sub
        k_lo, k_hi = bits[0], bits[1]
        shift = 0
        while (k_hi >> shift) - (k_lo >> shift) + 1 > most:
            shift += 1
        hi_ = k_hi >> shift
        nsub = hi_ - (k_lo >> shift) + 2  # the last sub-bin: ratios equal to r_lo (key 0)
        cnt[: nsub + 1] = 0
        acc[:nsub] = 0.0
        big_sub = nsub
        for t in range(e - a):  # counts and sums per sub-bin (high ratios first)
            i = members[a + t]
            buf[0] = _ratio(p, q, i) - r_sub
            k = bits[0]
            j = hi_ - (k >> shift) if k > 0 else nsub - 1
            jb[t] = j
            cnt[j + 1] += 1
            acc[j, 0], acc[j, 3] = neumaier_add_nonneg(acc[j, 0], acc[j, 3], p[i])
            acc[j, 1], acc[j, 4] = neumaier_add_nonneg(acc[j, 1], acc[j, 4], q[i])
            if code == 1:
                if i == big_i:
                    big_sub = j
                else:
                    acc[j, 2], acc[j, 5] = neumaier_add_nonneg(acc[j, 2], acc[j, 5], q[i] / (total - q[i]))
        for j in range(nsub):
            cnt[j + 1] += cnt[j]
        for t in range(e - a):  # stable scatter into sub-bin order, then back in place
            j = jb[t]
            f = cnt[j]
            iwork[f] = members[a + t]
            cnt[j] = f + 1
        members[a:e] = iwork[: e - a]
        # cnt[j] is now the end of sub-bin j (relative to a)
        rs_, rc_ = 0.0, 0.0
        Rs[nsub] = Re
        for j in range(nsub - 1, -1, -1):  # outside mass after sub-bin j: Re plus the later sub-bins
            rs_, rc_ = neumaier_add_nonneg(rs_, rc_, acc[j, 1] + acc[j, 4])
            Rs[j] = Re + (rs_ + rc_)
        if top_ + nsub > cap:  # room for every sub-bin of this run
            cap = max(2 * cap, top_ + nsub)
            st_a2 = np.empty(cap, dtype=np.int64)
            st_e2 = np.empty(cap, dtype=np.int64)
            st_f2 = np.empty((cap, 5))
            st_big2 = np.empty(cap, dtype=np.bool_)
            st_a2[:top_] = st_a[:top_]
            st_e2[:top_] = st_e[:top_]
            st_f2[:top_] = st_f[:top_]
            st_big2[:top_] = st_big[:top_]
            st_a, st_e, st_f, st_big = st_a2, st_e2, st_f2, st_big2
        Pc, cP = Pa, 0.0
        Qc, cQ = Qa, 0.0
        Sc, cS = Sa, 0.0
        lo = 0
        for j in range(nsub):
            hi = cnt[j]
            if hi == lo:
                continue
            Ps, Qs_, Ss = Pc + cP, Qc + cQ, Sc + cS  # sums before sub-bin j
            bin_big = big_in
            Pc, cP = neumaier_add_nonneg(Pc, cP, acc[j, 0] + acc[j, 3])
            Qc, cQ = neumaier_add_nonneg(Qc, cQ, acc[j, 1] + acc[j, 4])
            Sc, cS = neumaier_add_nonneg(Sc, cS, acc[j, 2] + acc[j, 5])
            big_in = big_in or big_sub == j
            Rout = Rs[j + 1]
            if a + hi < e:  # (the run's own end is a boundary its parent evaluated)
                big = big_q * (Rout / big_rest) if big_in else 0.0
                d = _excess(Qc + cQ, Pc + cP, Rout, Sc + cS, big, n, code)
                bound = max(bound, d)
                if _better(d, a + hi - a0, best, best_rank):
                    best, best_rank = d, a + hi - a0
            if hi - lo >= 2 and _can_gain(acc[j, 1] + acc[j, 4], n, code, odds):  # (big: _bin_candidates)
                big = big_q * (Rout / big_rest) if bin_big else 0.0
                ub_j = _excess(Qc + cQ, Ps, Rout, Ss, big, n, code)
                if ub_j >= bound - PRUNE_MARGIN:
                    st_a[top_], st_e[top_], st_big[top_] = a + lo, a + hi, bin_big
                    st_f[top_, 0], st_f[top_, 1], st_f[top_, 2], st_f[top_, 3], st_f[top_, 4] = (
                        Ps,
                        Qs_,
                        Ss,
                        Rout,
                        ub_j,
                    )
                    top_ += 1
            lo = hi
    return bound, best, best_rank


@nb.njit(cache=True)
def _bin_scan(
    P0, Q0, S0, R1, cnt, start, members, p, q, total, big_i, big_bin, big_q, big_rest, n, code, odds, bound
):
    """The first largest excess over every bin boundary and the candidate bins' inner prefixes:
    ``(best, best_bin, best_len)`` (``best_len`` tokens of ``best_bin`` inside H)."""
    nbins = cnt.size
    widest = 0
    for j in range(nbins):
        widest = max(widest, start[j + 1] - start[j])
    work = np.empty(REFINE_MIN)  # scratch shared by the candidate bins (_refine_bin)
    tail = np.empty(widest + 1)
    jb = np.empty(widest, dtype=_SUB_DTYPE)
    iwork = np.empty(widest, dtype=members.dtype)
    best = 0.0
    best_bin = -1
    best_len = 0  # tokens of best_bin inside H (cnt = the whole bin)
    for j in range(nbins):
        if cnt[j] == 0:
            continue
        a, e = start[j], start[j + 1]
        if e > a:
            bound, d, k = _refine_bin(
                members,
                p,
                q,
                total,
                work,
                tail,
                jb,
                iwork,
                a,
                e,
                P0[j],
                Q0[j],
                S0[j],
                R1[j + 1],
                big_i,
                big_bin < j,
                big_q,
                big_rest,
                n,
                code,
                odds,
                bound,
            )
            if k >= 0 and d > best:
                best, best_bin, best_len = d, j, k
        big = big_q * (R1[j + 1] / big_rest) if big_bin <= j else 0.0
        d = _excess(Q0[j + 1], P0[j + 1], R1[j + 1], S0[j + 1], big, n, code)
        if d > best:
            best, best_bin, best_len = d, j, cnt[j]
    return best, best_bin, best_len


@nb.njit(cache=True)
def bucketed_scan(p, q, n, code, total, big_i, big_rest):
    """``(D, mask)`` for code 0 (with replacement, any n) or code 1 (sequential, n = 2).

    Code 1 reads each ``1 - q_i`` as ``total - q_i`` (``total = sum(q)``), except for ``big_i``,
    the token above half the mass (-1: none), whose ``1 - q_i`` is ``big_rest``, summed directly:
    the parts of :func:`mdsd_ot.drafts.complement_masses` (:func:`complement_parts`), without
    its array. Code 0 reads none of them. ``mask`` marks the first optimal
    prefix H of the order of :func:`mdsd_ot.dual.sorted_order` (empty when D = 0). Bin sums and
    in-bin prefixes are Neumaier-compensated (every term is non-negative:
    :func:`neumaier_add_nonneg`, without branches).
    """
    V = p.size
    b, nbins = _bin_of(p, q)
    if code != 1:
        big_i = -1
    sums, cnt = _bin_sums(p, q, b, nbins, code, total, big_i)
    P0 = prefix_sums(sums[0])  # sums over the bins before bin j
    Q0 = prefix_sums(sums[1])
    S0 = prefix_sums(sums[2])
    R1 = suffix_sums(sums[1])  # q mass of the bins after bin j: R1[j + 1]
    big_bin = b[big_i] if big_i >= 0 else nbins
    big_q = q[big_i] if big_i >= 0 else 0.0
    big_rest = big_rest if big_i >= 0 else 1.0
    odds = 0.0
    if code == 1:  # sum_i q_i / (1 - q_i): the bins' S sums and the big token's term
        odds = S0[nbins] + (big_q / big_rest if big_rest > 0.0 else np.inf)
    bound, start = _bin_candidates(P0, Q0, S0, R1, cnt, sums[1], odds, big_bin, big_q, big_rest, n, code)
    members = _bin_members(b, start)
    best, best_bin, best_len = _bin_scan(
        P0,
        Q0,
        S0,
        R1,
        cnt,
        start,
        members,
        p,
        q,
        total,
        big_i,
        big_bin,
        big_q,
        big_rest,
        n,
        code,
        odds,
        bound,
    )
    mask = np.zeros(V, dtype=np.bool_)
    if best_bin >= 0:
        whole = best_len == cnt[best_bin]
        for i in range(V):  # (no branch: bitwise operators on the booleans)
            mask[i] = (b[i] < best_bin) | (whole & (b[i] == best_bin))
        if not whole:
            for t in range(start[best_bin], start[best_bin] + best_len):
                mask[members[t]] = True
    return best, mask
