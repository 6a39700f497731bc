"""Sequential sampling without replacement, any n: ``W_n(H)`` by exponential clocks
(docs/math.md#without-replacement): the quadrature grid, the plain DP (the reference), the fast path
(small tokens by a cut logarithmic series), the pruned scan over prefixes, and the independent
evaluation that re-checks every certificate.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from .._config import (
    BIG_LIST_MAX_SHARE,
    CERTAIN_QT,
    LOG_TERMS,
    NBANDS,
    NODE_FLOOR,
    POWER_FROM_REST_N,
    PRUNE_BATCH,
    PRUNE_SLACK,
    PRUNE_SLOPE_MARGIN,
    PRUNE_STATES,
    PRUNE_SUMS_GAP,
    QUAD_STEP,
    QUAD_TAIL,
    SATURATED,
    SMALL_QT,
)
from .common import neumaier_add, neumaier_add_nonneg, prefix_suffix_sums_into
from .scans import power_of_mass

# ------------------------------------------------- without replacement, any n: exponential clocks
#
# W_n(H) = int_0^inf R e^{-R t} P(N_H(t) >= n) dt  (R = q mass outside H, N_H(t) = number of tokens
# of H whose Exp(q_i) clock rang by time t; docs/math.md#exponential-clocks). With s = log t the
# integrand R t e^{-Rt} P(.) is analytic, decays double-exponentially on the right and like t^(n+1)
# on the left, so the trapezoid rule in s converges geometrically in 1/h. Its sharpest feature is the
# rise of P(N_H(t) >= n), of width about 1/sqrt(n) in s, hence the step QUAD_STEP / sqrt(n + 1)
# (docs/math.md#quadrature-step). Every evaluation is re-done on the grid of half that step by an
# independent kernel (:func:`sequential_mass_check`), which is the error estimate.


@nb.njit(cache=True)
def quad_grid(n, r_min, refine):
    """Trapezoid grid in s = log t: returns ``(s_lo, h, M)``; ``refine`` halves the step that often.

    The left end leaves out at most ``QUAD_TAIL`` (``P(N >= n) <= t^n``), the right end at most
    ``QUAD_TAIL`` for every outside mass ``>= r_min``. Nodes may lie beyond t = 1e308 (outside masses
    down to subnormals): kernels only form ``v t = exp(log v + s)`` (see :func:`times_t`), never t.
    """
    s_lo = math.log(QUAD_TAIL) / (n + 1)
    r_min = max(r_min, 5e-324)  # callers pass R > 0; guard the logarithm all the same
    s_hi = math.log(-math.log(QUAD_TAIL)) - math.log(r_min)  # R t e^{-R t} negligible beyond
    h = QUAD_STEP / math.sqrt(n + 1.0) / 2.0**refine
    M = int(math.ceil((s_hi - s_lo) / h)) + 1
    return s_lo, h, M


@nb.njit(cache=True, inline="always")
def times_t(v, s):
    """``v * exp(s)`` for v >= 0 without forming exp(s) (which overflows beyond s = 709)."""
    if v == 0.0:
        return 0.0
    return math.exp(math.log(v) + s)


@nb.njit(cache=True, inline="always")
def _weight_at(h, rt):
    """Trapezoid weight of the density R e^{-R t} dt = (R t) e^{-R t} ds at a node where R t = ``rt``."""
    return h * rt * math.exp(-rt) if rt < 800.0 else 0.0


@nb.njit(cache=True, inline="always")
def _node_terms(h, r, s):
    """``(weight, weight * R t)`` at node s: the trapezoid weight of :func:`_weight_at`, and that of
    the density's first moment in ``R t`` (the slopes of :func:`scan_without_replacement_into`)."""
    rt = times_t(r, s)
    weight = _weight_at(h, rt)
    return weight, weight * rt


@nb.njit(cache=True, inline="always")
def _node_weight(h, r, s):
    """Trapezoid weight of the density R e^{-R t} dt = (R t) e^{-R t} ds at node s."""
    return _node_terms(h, r, s)[0]


@nb.njit(cache=True, inline="always")
def _arrival(x):
    """``(P(clock rang by t), P(not yet))`` for ``x = q t``, each without cancellation."""
    if x < 0.5:
        a = -math.expm1(-x)
        return a, 1.0 - a
    e = math.exp(-x)
    return 1.0 - e, e


@nb.njit(cache=True, inline="always")
def _add_token(dp, a, e):
    """One more token in the count law ``dp[j] = P(N = j)``, j < len(dp): it arrives with probability
    ``a`` (``e = 1 - a``, computed without cancellation); mass moving past the last entry drops out."""
    for j in range(dp.size - 1, 0, -1):
        dp[j] = dp[j] * e + dp[j - 1] * a
    dp[0] *= e


@nb.njit(cache=True)
def sequential_masses(qs, cand, Rc, n, refine=0):
    """W_n(H_k) for prefixes ``k = cand`` (increasing), outside masses ``Rc > 0``: the plain DP.

    Every token of every prefix enters the Poisson-binomial DP at every node: O(V n M). The slow
    reference of the tests and benchmarks; the solver uses :func:`sequential_masses_fast`.
    """
    s_lo, h, M = quad_grid(n, Rc.min(), refine)
    acc = np.zeros(cand.size)
    dp = np.empty(n + 1)  # dp[j] = P(N = j) for j < n, dp[n] = P(N >= n)
    for m in range(M):
        s = s_lo + m * h
        dp[:] = 0.0
        dp[0] = 1.0
        k = 0
        for c in range(cand.size):
            while k < cand[c]:
                a, e = _arrival(times_t(qs[k], s))
                dp[n] += dp[n - 1] * a
                for j in range(n - 1, 0, -1):
                    dp[j] = dp[j] * e + dp[j - 1] * a
                dp[0] *= e
                k += 1
            acc[c] += _node_weight(h, Rc[c], s) * dp[n]
    return acc


@nb.njit(cache=True, inline="always")
def _push_top(top, v, n, rs, rc):
    """Insert ``v`` into the n-1 largest masses so far (``top``, descending); the mass that leaves
    the top (``v`` itself, or the smallest entry it evicts) is added to the compensated sum
    ``(rs, rc)`` of the masses outside the top, which is returned (docs/math.md#pruning)."""
    j = n - 2
    out = v
    if v > 0.0 and j >= 0 and v > top[j]:
        out = top[j]
        while j > 0 and top[j - 1] < v:
            top[j] = top[j - 1]
            j -= 1
        top[j] = v
    return neumaier_add_nonneg(rs, rc, out)


_PRODUCT_MIN = 1e-250  # a product of n factors in [0, 1] above this: no underflow on the way
_UNIT = 2.0**-53  # unit roundoff of float64


@nb.njit(cache=True, inline="always")
def _product_margin(n):
    """Relative rounding allowance of :func:`_product_bound`: ``(n^2 + 9n + 8) 2^-52``, twice the
    first-order bound ``(n^2 + 9n) u`` of docs/math.md#pruning (the factor 2 covers the higher-order
    terms while ``n^2 u`` is small, and the final multiplication)."""
    return (n * (n + 9.0) + 8.0) * (2.0 * _UNIT)


@nb.njit(cache=True, inline="always")
def _product_bound(r, top, rest, n):
    """``prod_{j<n} d_j / (r + d_j) <= W_n(H)``, ``d_j`` the mass of H outside its j largest tokens,
    widened by its rounding: a proven lower bound (docs/math.md#pruning).

    ``d_j`` is summed directly from the tokens that make it up, never as ``q(H) - s_j``: ``rest`` (the
    compensated sum of the masses of H outside ``top``, the n-1 largest), then the entries of ``top``
    from the smallest up. (The difference ``q(H) - s_j`` rounds to about 1e-16 where the exact value is
    1e-40; next to an outside mass ``r`` of 1e-204 the factor was then about 1 instead of 0.) Each
    ``d_j`` is then within ``(n + 3) u`` of its value, ``r`` (a compensated suffix sum) within ``3u``,
    and the product within ``(n^2 + 9n) u`` relative to first order; the result is multiplied by one
    minus :func:`_product_margin`. A product below ``_PRODUCT_MIN`` (where rounding is no longer
    relative) is returned as the trivial bound 0. One division: the products of the numerators and of
    the denominators (each numerator is at most its denominator), factor by factor only where the
    numerators' product could underflow."""
    margin = _product_margin(n)
    if not margin < 1.0:
        return 0.0
    num = 1.0
    den = 1.0
    d = rest
    for j in range(n - 1, -1, -1):
        num *= d
        den *= r + d
        if j > 0:
            d += top[j - 1]
    if num >= _PRODUCT_MIN:
        return (num / den) * (1.0 - margin)
    w = 1.0
    d = rest
    for j in range(n - 1, -1, -1):
        w *= d / (r + d) if d > 0.0 else 0.0
        if j > 0:
            d += top[j - 1]
    if not w >= _PRODUCT_MIN:
        return 0.0
    return w * (1.0 - margin)


@nb.njit(cache=True, inline="always")
def _product_bound_below(q_in, others, r, n, floor):
    """Whether :func:`_product_bound` (n >= 2) surely lies below ``floor + 3e-15``, from its first two
    factors (the others are at most 1): ``d_0 = q(H)`` (``q_in``) and ``d_1 = others``, the mass of H
    outside its largest token summed directly (as that function sums it, never ``q(H) - top[0]``),
    with room for the rounding of every later step (relative ``(2n + 8)`` units of 2.3e-16; numerators'
    products far above underflow only). A wrong "yes" would only replace a lower bound by the trivial
    one (always valid). Apart from the product bound: a hot loop that could leave it early runs
    several times slower (LLVM)."""
    num = q_in * others
    den = (r + q_in) * (r + others)
    return num > 1e-290 and num * (1.0 + (2 * n + 8) * 2.3e-16) < den * floor


_SKIP_ABS = 4e-15  # the absolute margin of the callers of _product_bound_below (values of size <= 2)
_KNOWN_SAMPLES = 256  # prefixes where _bounds_into forms the product bound before its pass,
_KNOWN_FROM = 8192  # where more prefixes than this have an upper bound above the first lower bound
_SPAN_MIN = 16  # the shortest span of prefixes _bounds_into tries to settle at once, and the wait
_SPAN_MAX = 4096  # after a span that did not settle; the longest span (doubling from the shortest)


@nb.njit(cache=True, inline="always")
def _draw_upper_bound(r, top, rest, qmin, count, n, stop):
    """An upper bound on ``W_n(H)`` from the masses of H: with ``a`` of its largest tokens set aside
    (those of the n-1 largest, ``top``, above twice the smallest positive mass ``qmin`` of H) and
    ``e`` the mass of the others (``rest`` plus the entries of ``top`` from ``a`` on, summed smallest
    first, as :func:`_product_bound` sums ``d_a``), ``W_n(H) <= prod_{i < n - a} (e - i qmin) /
    (e - i qmin + r)`` (docs/math.md#pruning, "an upper bound from the draws"). Each factor is at most
    1, so the product of the first factors is an upper bound too: the loop stops once it falls below
    ``stop``. Used only where the others form a block (``count`` positive masses in H: at least 2n
    others, their mean mass at most twice ``qmin``; elsewhere 1 is returned): there it prunes, and
    elsewhere the candidates, hence the values, stay those of the cheap bounds alone. Every remaining mass
    ``e - i qmin`` is widened by its rounding (absolute ``(n + 8) u e``), ``r`` narrowed by ``4u``,
    and the product multiplied by one plus ``(8j + 8) u`` for its ``j`` factors (two roundings per
    factor and a division): a proven upper bound. A product that falls below ``_PRODUCT_MIN``
    returns twice that (never a rounded-down underflow)."""
    a = 0
    while a < n - 1 and top[a] > 2.0 * qmin:
        a += 1
    e = rest
    for j in range(n - 2, a - 1, -1):
        e += top[j]
    if count - a < 2 * n or not e <= 2.0 * qmin * (count - a):
        return 1.0  # fewer than 2n others, or their mean mass above twice the smallest: no block
    widen = (n + 8.0) * _UNIT * e
    r_lo = r * (1.0 - 4.0 * _UNIT)
    w = 1.0
    j = 0
    for i in range(n - a):
        rem = (e - i * qmin) + widen
        if not rem > 0.0:
            return 0.0  # (cannot happen for n positive masses in H: e > (n - a - 1) qmin)
        w *= rem / (rem + r_lo)
        j += 1
        if w < _PRODUCT_MIN:  # then the exact product lies below it too (rounding is monotone)
            return 2.0 * _PRODUCT_MIN
        if w < stop:
            break
    return w * (1.0 + (8.0 * j + 8.0) * _UNIT)


@nb.njit(cache=True, inline="always")
def _upper_excess(Qk, Rk, Pk, n):
    """``min(q(H)^n, q(H)) - p(H)`` from above: :func:`power_of_mass` (``exp(n log1p(-R))`` from the
    directly summed outside mass for large n), plus its rounding and that of ``P``
    (``(3 min(n, POWER_FROM_REST_N) + 8) u``, docs/math.md#pruning)."""
    return power_of_mass(Qk, Rk, n) - Pk + (3.0 * min(n, POWER_FROM_REST_N) + 8.0) * _UNIT


@nb.njit(cache=True)
def without_replacement_bounds(ps, qs, n):
    """``(P, Q, R, lo, hi, exact)`` of :func:`_bounds_into` in fresh arrays."""
    V = qs.size
    P = np.empty(V + 1)
    Q = np.empty(V + 1)
    R = np.empty(V + 1)
    lo = np.empty(V + 1)
    hi = np.empty(V + 1)
    exact = np.empty(V + 1, dtype=np.bool_)
    _bounds_into(ps, qs, n, P, Q, R, False, lo, hi, exact, np.empty(0, dtype=np.int64), False)
    return P, Q, R, lo, hi, exact


@nb.njit(cache=True)
def _bounds_into(ps, qs, n, P, Q, R, have_sums, lo, hi, exact, out, collect):
    """Exact values where trivial, and cheap bounds elsewhere, for every sorted prefix.

    Returns ``(P, Q, R, lo, hi, exact)`` with ``lo[k] <= D_k <= hi[k]`` for the excess
    ``D_k = W_n(H_k) - P_k``; ``exact[k]`` marks prefixes where ``lo[k] == hi[k]`` is the value
    (fewer than n drafted tokens in ``H_k``: W = 0; no q mass outside: W = 1, taken as ``Q_k``).
    Bounds (docs/math.md#pruning): ``prod_{j<n} d_j / (R + d_j) <= W_n(H) <= q(H)^n``, with ``d_j``
    the mass of H outside its j largest tokens, summed directly from those tokens (never as q(H) minus
    the j largest), each bound widened by its rounding (:func:`_product_bound`,
    :func:`_upper_excess`); where the upper bound cannot beat an earlier lower bound the lower one is
    the trivial ``W_n(H) >= 0`` (the maximum of ``lo`` and its first position are those of the
    product bound everywhere).

    Written into the given arrays (length ``V + 1``); ``P``, ``Q``, ``R`` are the compensated sums of
    :func:`prefix_sums` and :func:`suffix_sums`, computed here unless ``have_sums`` (then the caller's,
    e.g. the evaluation plan's tables, summed by the same algorithm).

    With ``collect``, the candidates of :func:`_candidates_into` are written to ``out`` as well, in
    the same pass (docs/math.md#pruning), and ``(count, best exact D, its k)`` is returned; without,
    ``(0, 0.0, 0)``.
    """
    V = qs.size
    if not have_sums:
        prefix_suffix_sums_into(ps, qs, P, Q, R)
    # a lower bound known before the scan, attained at some prefix: the product bound at the prefix
    # with the largest upper bound, and the exact value at k = V (nothing outside); prefixes whose
    # upper bound lies below it cannot hold the maximum of lo
    top = np.zeros(n)  # the n-1 largest masses so far, descending (top[n-1] unused)
    rs, rc = 0.0, 0.0  # the masses so far outside top, compensated (_product_bound)
    count = 0
    k_star = -1
    hi_star = -np.inf
    for k in range(V + 1):
        if count >= n and R[k] > 0.0:
            hi[k] = _upper_excess(Q[k], R[k], P[k], n)
            if hi[k] > hi_star:
                hi_star = hi[k]
                k_star = k
        if k < V and qs[k] > 0.0:
            count += 1
    known = Q[V] - P[V] if count >= n else -np.inf
    if k_star >= 0:
        for k in range(k_star):
            rs, rc = _push_top(top, qs[k], n, rs, rc)
        known = max(known, _product_bound(R[k_star], top, rs + rc, n) - P[k_star])
        # and the product bound at prefixes spread evenly from there on: the pass below keeps the
        # trivial bound wherever the upper bound lies below the largest of them, so a maximum of the
        # excess far along the order (a block of tiny masses) is not approached by a long rise of
        # prefixes that each need their product bound (docs/math.md#pruning)
        # (only where many prefixes have an upper bound above it: the pass of pushes costs as much as
        # the main pass's sums, which is most of it on subnormal masses)
        above = 0
        for k in range(k_star, V + 1):  # (hi is written there wherever R > 0)
            above += R[k] > 0.0 and hi[k] > known
        step = max(1, (V - k_star) // _KNOWN_SAMPLES)
        k = k_star
        nxt = k_star + step if above > _KNOWN_FROM else V
        while nxt < V:
            while k < nxt:
                rs, rc = _push_top(top, qs[k], n, rs, rc)
                k += 1
            if R[k] > 0.0:
                known = max(known, _product_bound(R[k], top, rs + rc, n) - P[k])
            nxt += step
    top[:] = 0.0
    rs, rc = 0.0, 0.0
    os_, oc = 0.0, 0.0  # the masses so far except the largest, compensated (_product_bound_below)
    count = 0
    best_lo = -np.inf  # the largest lower bound so far
    qmin = np.inf  # the smallest positive mass so far (_draw_upper_bound)
    # collect: every non-exact prefix whose upper bound beats the largest lower bound *so far* by
    # PRUNE_SLACK (a superset of the candidates: that bound only grows, and from the first position of
    # its maximum on it is the final one), the first position of the maximum of lo (the anchor) and
    # the best exact D (the first position of its largest value above 0)
    cnt = 0
    anchor = 0
    best = 0.0
    best_k = 0
    span = _SPAN_MIN  # the prefixes a span of small tokens tries to settle at once (see below)
    span_at = 0  # no span tried before this prefix
    k = -1
    while k < V:
        k += 1
        if count < n:
            lo[k] = -P[k]
            hi[k] = lo[k]
            exact[k] = True
            if collect and lo[k] > best:
                best = lo[k]
                best_k = k
        elif R[k] <= 0.0:
            lo[k] = Q[k] - P[k]
            hi[k] = lo[k]
            exact[k] = True
            if collect and lo[k] > best:
                best = lo[k]
                best_k = k
        else:  # hi[k] from the first pass
            exact[k] = False
            floor_k = max(best_lo, known)
            # (a prefix whose upper bound is within PRUNE_SLACK of best_lo is no candidate whatever
            # its tighter bound: left to the cheaper tests below, as on flat stretches of the excess)
            worth = hi[k] > max(best_lo + PRUNE_SLACK, known) and floor_k + P[k] > 1e-200
            if n >= 2 and k >= span_at and worth and top[n - 2] > 0.0:
                # a span of prefixes k..k2-1 whose tokens all lie at or below the smallest of the
                # n-1 largest (pushing them leaves top as it is): the draws' bound at H_k2, a superset
                # of each of them, bounds every W_n(H_j) there (W_n grows with H); where it lies
                # below the floor at P_k (P_j >= P_k) the whole span is settled as the loop below
                # would settle each prefix: the trivial lower bound, no candidate
                # (docs/math.md#pruning, "a span of small tokens")
                k2 = min(k + span, V)
                mx = 0.0
                mn = np.inf
                for j in range(k, k2):
                    v = qs[j]
                    mx = max(mx, v)
                    mn = min(mn, v if v > 0.0 else np.inf)
                settled = False
                if mx <= top[n - 2] and R[k2] > 0.0:
                    # the span's mass from above (suffix sums, each within _R_REL), added to rest
                    add = (R[k] - R[k2]) + _R_REL * (R[k] + R[k2])
                    rest_up = ((rs + rc) + add) * (1.0 + 4.0 * _UNIT)
                    up = _draw_upper_bound(
                        R[k2], top, rest_up, min(qmin, mn), count + (k2 - k), n, floor_k + P[k] - 4e-15
                    )
                    settled = up - P[k] + 64.0 * _UNIT < floor_k
                if settled:
                    for j in range(k, k2):
                        exact[j] = False
                        lo[j] = -P[j]
                        hi[j] = min(hi[j], up - P[j] + 16.0 * _UNIT)
                        if collect and hi[j] > max(best_lo, lo[j]) + PRUNE_SLACK:
                            out[cnt] = j  # (not expected: the test above leaves hi below the floor)
                            cnt += 1
                        if lo[j] > best_lo:
                            anchor = j
                        best_lo = max(best_lo, lo[j])
                        v = qs[j]
                        if v > 0.0:  # as below; _push_top(top, v) leaves top and adds v to rest
                            count += 1
                            os_, oc = neumaier_add_nonneg(os_, oc, min(v, top[0]))
                            rs, rc = neumaier_add_nonneg(rs, rc, v)
                            qmin = min(qmin, v)
                    span = min(2 * span, _SPAN_MAX)
                    k = k2 - 1  # the loop goes on at prefix k2
                    continue
                span = max(span // 2, _SPAN_MIN)
                span_at = k + _SPAN_MIN
            if n >= 2 and worth:
                # the draws' upper bound, where q(H)^n does not prune and the one below could
                up = _draw_upper_bound(R[k], top, rs + rc, qmin, count, n, floor_k + P[k] - 4e-15)
                hi[k] = min(hi[k], up - P[k] + 16.0 * _UNIT)
            if hi[k] <= best_lo or hi[k] < known:
                # lo[k] <= hi[k] cannot exceed (nor, before it, equal) a lower bound attained
                # elsewhere: the trivial bound W >= 0 leaves the maximum of lo and its first
                # position unchanged, and saves n divisions
                lo[k] = -P[k]
            elif n >= 2 and _product_bound_below(
                Q[k], os_ + oc, R[k], n, max(best_lo, known) + P[k] - _SKIP_ABS
            ):
                lo[k] = -P[k]  # the product bound lies below best_lo or known: the same as above
            else:
                lo[k] = _product_bound(R[k], top, rs + rc, n) - P[k]
            if collect and hi[k] > max(best_lo, lo[k]) + PRUNE_SLACK:
                out[cnt] = k
                cnt += 1
        if lo[k] > best_lo:
            anchor = k
        best_lo = max(best_lo, lo[k])
        if k < V and qs[k] > 0.0:
            count += 1
            os_, oc = neumaier_add_nonneg(os_, oc, min(qs[k], top[0]))  # the smaller of the two leaves
            rs, rc = _push_top(top, qs[k], n, rs, rc)
            qmin = min(qmin, qs[k])
    if not collect:
        return 0, 0.0, 0
    # before the anchor the superset holds prefixes whose bound does not beat the final one: drop
    # them; the anchor itself is a candidate unless exact (as in _candidates_into)
    floor = max(best_lo, 0.0) + PRUNE_SLACK  # (best_lo = lo.max())
    i = 0
    keep = 0
    while i < cnt and out[i] < anchor:
        k = out[i]
        if hi[k] > floor:
            out[keep] = k
            keep += 1
        i += 1
    need = not exact[anchor] and (i == cnt or out[i] != anchor)  # the tail is increasing
    if need and keep == i:  # nothing dropped: the tail moves up by one
        for j in range(cnt - 1, i - 1, -1):
            out[j + 1] = out[j]
        out[i] = anchor
        return cnt + 1, best, best_k
    if need:
        out[keep] = anchor
        keep += 1
    if keep < i:  # the tail moves down (keep <= i: a forward copy)
        for j in range(i, cnt):
            out[keep + j - i] = out[j]
    return keep + cnt - i, best, best_k


@nb.njit(cache=True)
def candidate_prefixes(lo, hi, exact):
    """:func:`_candidates_into` in a fresh array."""
    out = np.empty(lo.size, dtype=np.int64)
    count, best, best_k = _candidates_into(lo, hi, exact, out)
    return out[:count].copy(), best, best_k


@nb.njit(cache=True)
def _candidates_into(lo, hi, exact, out):
    """Prefixes to evaluate, written (increasing) to ``out``: returns ``(count, best exact D, its k)``.

    The prefix with the largest lower bound is always a candidate (evaluating it secures that
    bound); any other prefix is one only if its upper bound beats that lower bound by more than
    ``PRUNE_SLACK``.
    """
    best_lo = max(lo.max(), 0.0)
    anchor = np.argmax(lo)
    best = 0.0
    best_k = 0
    count = 0
    for k in range(lo.size):
        if exact[k]:
            if lo[k] > best:
                best = lo[k]
                best_k = k
        elif hi[k] > best_lo + PRUNE_SLACK or k == anchor:
            out[count] = k
            count += 1
    return count, best, best_k


# ------------------------------------------- without replacement, any n: the fast evaluation path
#
# The plain DP costs one exp per token and node. The fast path splits, at each node t, the tokens
# into "big" ones (q t > SMALL_QT; few: the DP) and "small" ones, whose count law follows from a
# short power series (docs/math.md#small-tokens). With r_i = e^{q_i t} - 1,
#   P(N_small = k) = e^{-t q(small)} e_k(r),   sum_k e_k(r) z^k = exp(sum_j (-1)^(j-1) p_j(r) z^j / j),
#   p_j(r) = sum_i r_i^j = sum_m c[j, m] sum_i (q_i t)^m,
# c[j, m] the x^m coefficient of (e^x - 1)^j. As r_i <= e^SMALL_QT - 1 = 0.051, the log series is cut
# after LOG_TERMS terms (p_j <= 0.051^(j-1) p_1), each p_j after x^J (series_length), and e_k comes
# from k e_k = sum_j (-1)^(j-1) p_j e_{k-j}: O(n LOG_TERMS) per prefix and node. Tokens are binned by
# q in powers of two (bands); a band's power sums are scaled by its own power of two, so that no q^m
# underflows while it matters, and the sums over the bands at or above a node's threshold are one
# lookup per prefix.

LOG_CERTAIN = math.log(CERTAIN_QT)
_LN2 = math.log(2.0)
_RESCALE = 1e200
# 2^b of band b as a product of two factors (2^b overflows from b = 1024 on): _POW2[b] * _POW2_HI[b],
# the second one 1 below band 960, so that q 2^b is one exact multiplication there as it always was
_POW2 = np.array([2.0 ** min(b, 960) for b in range(NBANDS)])
_POW2_HI = np.array([2.0 ** (b - min(b, 960)) for b in range(NBANDS)])
_POW2_NEG_MAX = 1100
_POW2_NEG = np.array([2.0**-e for e in range(_POW2_NEG_MAX + 1)])  # 2^-e (0 from e = 1075 on)
_SAT_EVERY = 8  # the fast path looks whether a node's big tokens saturate every this many tokens
_S_DIRECT = 700.0  # below: q t = q * e^s (e^s finite); above, exp(log q + s)


@nb.njit(cache=True)
def series_coefficients(L, J):
    """``c[j, m]`` = coefficient of x^m in (e^x - 1)^j for j <= L, m <= J."""
    base = np.zeros(J + 1)
    f = 1.0
    for m in range(1, J + 1):
        f *= m
        base[m] = 1.0 / f
    c = np.zeros((L + 1, J + 1))
    c[0, 0] = 1.0
    for j in range(1, L + 1):
        for a in range(J + 1):
            if c[j - 1, a] != 0.0:
                for b in range(1, J + 1 - a):
                    c[j, a + b] += c[j - 1, a] * base[b]
    return c


@nb.njit(cache=True)
def series_length(L):
    """Smallest J such that cutting every p_j, j <= L, after x^J leaves out at most 1e-18 of a small
    token's leading term x (x <= SMALL_QT): 9 for L = 1, 12 for L = 3, 16 for L = 13."""
    c = series_coefficients(L, L + 40)
    J = L
    while J < L + 39:
        tail = 0.0
        x = SMALL_QT ** (J + 1)
        for j in range(1, L + 1):
            tail = max(tail, c[j, J + 1] * x)
        if tail <= 1e-18 * SMALL_QT:
            break
        J += 1
    return J


@nb.njit(cache=True)
def _bands(qs, out):
    """Band of each token, ``q in (2^-(b+1), 2^-b]``, from the float's exponent bits (a subnormal mass's
    from ``math.frexp``): every positive float64 has its own band, up to ``NBANDS - 1 = 1074``.
    Written to ``out``; returns the number of bands in use, one more than the highest band of a
    positive mass (at least 1). Zero masses go to the last band in use (they add
    nothing to any sum, and are never drawn)."""
    bits = qs.view(np.int64)
    used = 0
    zeros = False
    last = -1.0  # a run of equal masses shares its band (no frexp per subnormal mass)
    last_b = 0
    for i in range(qs.size):
        if qs[i] <= 0.0:
            zeros = True
            out[i] = -1
            continue
        if qs[i] == last:
            out[i] = last_b
            continue
        e = (bits[i] >> 52) & 0x7FF
        if e == 0:  # subnormal: q = f 2^E with f in [1/2, 1), exactly
            f, E = math.frexp(qs[i])
            b = -E + (1 if f == 0.5 else 0)
        else:
            b = 1022 - e + (1 if (bits[i] & 0xFFFFFFFFFFFFF) == 0 else 0)  # q = 2^-b exactly: band b
        b = min(max(b, 0), NBANDS - 1)
        out[i] = b
        used = max(used, b + 1)
        last = qs[i]
        last_b = b
    used = max(used, 1)
    if zeros:
        for i in range(qs.size):
            if out[i] < 0:
                out[i] = used - 1
    return used


@nb.njit(cache=True, inline="always")
def _add_power_sums(qs, bands, run, comp, i0, i1, J):
    """Add the tokens ``i0 <= i < i1`` to the running power sums of their bands: ``run[b, k]`` (+
    ``comp[b, k]``, k <= 2) = sum of ``(q_i 2^b)^k``. Each term is at most 1, scaled to its own band,
    so no power that matters underflows; the sums of the first two powers are Neumaier-compensated
    (a band may hold 10^5 equal terms), higher ones enter scaled by ``SMALL_QT^(k - 1)`` and need
    not be. A run of equal masses reuses the scaled value (the same number: no multiplication with a
    subnormal operand per token, which the hardware runs many times slower)."""
    last = -1.0
    v = 0.0
    for i in range(i0, i1):
        b = bands[i]
        if qs[i] != last:
            last = qs[i]
            v = last * _POW2[b] * _POW2_HI[b]  # exact, as ldexp (the result lies in (1/2, 1], or is 0)
        run[b, 1], comp[b, 1] = neumaier_add_nonneg(run[b, 1], comp[b, 1], v)
        x = v * v
        run[b, 2], comp[b, 2] = neumaier_add_nonneg(run[b, 2], comp[b, 2], x)
        for k in range(3, J + 1):
            x *= v
            run[b, k] += x


@nb.njit(cache=True)
def _band_tables(qs, bands, J, lo, perm, node_band, limit, nb):
    """Tokens grouped by band, and the power sums of each band before position ``lo``:
    ``(off, perm, run, comp)``.

    ``off[b]`` = number of tokens in bands below b; ``perm[off[b]:off[b + 1]]`` are the positions of
    the tokens of band b, increasing (a counting sort, written to ``perm``), for the bands that
    :func:`_big_lists` reads (below the last node threshold ``node_band[m]`` with ``off[.] <=
    limit``; ``perm`` is left as it was beyond). ``run``, ``comp`` as in :func:`_add_power_sums` over
    the tokens before ``lo`` (prefixes queried later are no shorter). ``nb``: the bands in use
    (:func:`_bands`); every table has a row per band in use, none beyond.
    """
    V = qs.size
    cnt = np.zeros((4, nb), dtype=np.int64)  # four counts side by side: no chain through memory
    V4 = V - V % 4
    for i in range(0, V4, 4):
        cnt[0, bands[i]] += 1
        cnt[1, bands[i + 1]] += 1
        cnt[2, bands[i + 2]] += 1
        cnt[3, bands[i + 3]] += 1
    for i in range(V4, V):
        cnt[0, bands[i]] += 1
    off = np.zeros(nb + 1, dtype=np.int64)
    for b in range(nb):
        off[b + 1] = off[b] + (cnt[0, b] + cnt[1, b] + cnt[2, b] + cnt[3, b])
    top_band = 0  # the bands that _big_lists reads: below top_band
    for m in range(node_band.size):
        bm = min(node_band[m], nb)
        if off[bm] > limit:
            break
        top_band = max(top_band, bm)
    fill = off[:nb].copy()
    for i in range(V):
        b = bands[i]
        if b < top_band:
            perm[fill[b]] = i
            fill[b] += 1
    run = np.zeros((nb, J + 1))
    comp = np.zeros((nb, 3))
    _add_power_sums(qs, bands, run, comp, 0, lo, J)
    return off, perm, run, comp


@nb.njit(cache=True)
def _node_band(s):
    """Smallest band b with ``t 2^-b <= SMALL_QT`` at t = e^s (bands >= b are small), in [0, NBANDS]."""
    return min(max(int(math.ceil((s - math.log(SMALL_QT)) / _LN2)), 0), NBANDS)


@nb.njit(cache=True)
def _big_lists(off, perm, node_band, M, limit):
    """For every node: the positions (increasing) of its big tokens (band below the node's), concatenated.

    Returns ``(flat, start)``: node m's big tokens are ``flat[start[m, 0]:start[m, 1]]``. Nodes with
    the same band threshold share one list; each list is the previous one merged with the tokens of
    the bands in between (``perm``, ``off`` from :func:`_band_tables`). A node with more than
    ``limit`` big tokens gets no list (``start[m] = -1``): it finds them by their bands as it walks
    (the lists are cumulative, so long ones would cost more to build than the walk over all tokens).
    """
    start = np.full((M, 2), -1, dtype=np.int64)
    total = 0
    prev = -1
    for m in range(M):  # the node thresholds increase with m
        if node_band[m] != prev:
            prev = node_band[m]
            if off[min(prev, off.size - 1)] > limit:
                break
            total += off[min(prev, off.size - 1)]
    flat = np.empty(total, dtype=np.int64)
    pos = 0
    prev = 0
    first = 0
    last = 0  # flat[first:last] is the previous list
    for m in range(M):
        bm = min(node_band[m], off.size - 1)
        if off[bm] > limit:
            break  # (and every later node)
        if m == 0 or bm != prev:
            new = perm[off[prev] if m > 0 else 0 : off[bm]]
            if m == 0 or bm - prev > 1:  # several bands: each increasing, not the whole
                new = np.sort(new)
            i, j, begin = first, 0, pos
            while i < last or j < new.size:  # merge two increasing lists
                if j == new.size or (i < last and flat[i] < new[j]):
                    flat[pos] = flat[i]
                    i += 1
                else:
                    flat[pos] = new[j]
                    j += 1
                pos += 1
            first, last, prev = begin, pos, bm
        start[m, 0] = first
        start[m, 1] = last
    return flat, start


@nb.njit(cache=True)
def _prepare_fast(qs, top, n, refine, r_min, lo, iwork, lq):
    """Everything about the tokens ``qs[:top]`` and the grid that does not depend on the prefixes
    (prefixes queried later have lengths in ``[lo, top]``).

    Returns ``(s_lo, h, M, bands, lq, off, run, comp, flat, start, node_band, coef, lo, qs)``
    with ``coef[j, k] = c[j, k]`` of the series (:func:`_node_coefficients` folds a node's
    ``u = t 2^-b`` into them where the node needs them).
    ``iwork`` (int64, two rows of at least ``top``) holds ``bands`` and the band order, ``lq`` (at
    least ``top``) the logarithms of the masses.
    """
    s_lo, h, M = quad_grid(n, r_min, refine)
    L = min(n - 1, LOG_TERMS)
    J = series_length(L)
    coef = series_coefficients(L, J)
    bands = iwork[0][:top]
    nb = _bands(qs[:top], bands)
    node_band = np.empty(M, dtype=np.int64)
    for m in range(M):
        node_band[m] = min(_node_band(s_lo + m * h), nb)  # nb: every band in use is big there
    limit = int(BIG_LIST_MAX_SHARE * top)
    off, perm, run, comp = _band_tables(qs[:top], bands, J, lo, iwork[1][:top], node_band, limit, nb)
    flat, start = _big_lists(off, perm, node_band, M, limit)
    lq = lq[:top]
    lq[:] = -np.inf
    if s_lo + (M - 1) * h >= _S_DIRECT:  # some node needs q t in logarithms (see _fast_nodes)
        last = node_band[M - 1]
        for i in range(top):  # every token that is big at some node
            if bands[i] < last and qs[i] > 0.0:
                lq[i] = math.log(qs[i])
    return s_lo, h, M, bands, lq, off, run, comp, flat, start, node_band, coef, lo, qs


@nb.njit(cache=True, inline="always")
def _node_coefficients(coef, s, band, cu):
    """``cu[k, j] = c[j, k] u^k`` with ``u = t 2^-band <= SMALL_QT`` at node s: the series' coefficients
    with the node's power of ``t`` folded in (``cu[1, 1] = u``)."""
    L = coef.shape[0] - 1
    u = math.exp(s - band * _LN2)
    uk = 1.0
    for k in range(coef.shape[1]):
        for j in range(1, L + 1):
            cu[k, j] = coef[j, k] * uk
        uk *= u


@nb.njit(cache=True)
def _query_power_sums(qs, bands, resume, queries, J, saved, save_every, rows):
    """``(S, tops)``: ``S[r, k, c]`` = sum of ``(q_i 2^b)^k`` over the tokens before ``queries[c]`` in
    bands ``>= b = rows[r]``, for the bands ``rows`` (increasing) that hold tokens and that the nodes
    read (a node whose threshold band holds no token reads the next band in ``rows``, scaled by
    :data:`_POW2_NEG`: the sums of the empty bands in between add zeros), from the band sums at the
    prefix of ``resume`` (no longer than ``queries[0]``); ``tops[c]``: the highest band with a positive
    mass before ``queries[c]``. The band sums at every ``save_every``-th query are written to
    ``saved`` where ``PRUNE_SUMS_GAP`` tokens lie since the last ones written (``saved[5][k]``: the
    saved query whose sums hold for the k-th, -1: those of ``resume``). Queries last in memory: the
    nodes evaluate all queries side by side."""
    run = resume[4].copy()
    comp = resume[5].copy()
    s_run, s_comp, s_src = saved[3], saved[4], saved[5]
    src = -1
    src_pos = resume[3][0]
    C = queries.size
    nr = rows.size
    S = np.empty((nr, J + 1, C))
    tops = np.empty(C, dtype=np.int64)
    acc = np.zeros(J + 1)
    i = resume[3][0]
    for c in range(C):
        _add_power_sums(qs, bands, run, comp, i, queries[c], J)
        i = queries[c]
        top = run.shape[0] - 1  # bands above the highest one with a positive mass add zeros
        while top > 0 and run[top, 1] == 0.0:
            top -= 1
        tops[c] = top
        acc[:] = 0.0
        prev = run.shape[0]  # the band of the last row summed (none yet)
        for r in range(nr - 1, -1, -1):  # each band's sums plus those of the bands above, scaled
            b = rows[r]
            if b > top:
                for k in range(J + 1):
                    S[r, k, c] = 0.0
                continue
            gap = prev - b if prev <= top else 0  # (the empty bands in between: factors 2^-k each)
            acc[1] = (run[b, 1] + comp[b, 1]) + _POW2_NEG[min(gap, _POW2_NEG_MAX)] * acc[1]
            acc[2] = (run[b, 2] + comp[b, 2]) + _POW2_NEG[min(2 * gap, _POW2_NEG_MAX)] * acc[2]
            for k in range(3, J + 1):
                acc[k] = run[b, k] + _POW2_NEG[min(k * gap, _POW2_NEG_MAX)] * acc[k]
            for k in range(J + 1):
                S[r, k, c] = acc[k]
            prev = b
        if c % save_every == 0:
            k = c // save_every
            if queries[c] - src_pos >= PRUNE_SUMS_GAP:
                s_run[k] = run
                s_comp[k] = comp
                src = k
                src_pos = queries[c]
            s_src[k] = src
    return S, tops


@nb.njit(cache=True)
def _small_count_law(Sb, c, cu, n, L, J, a, g):
    """``g[k] = P(N_small = k)`` for k < n, query ``c`` at a node (``Sb[k, c]``: the power sums of its
    small tokens, see :func:`_fast_nodes`), one query at a time: the path of
    :func:`_small_count_laws` for the queries where it needs a rescale.

    ``a[j] = (-1)^(j-1) p_j(r)``; the recurrence runs on ``e_k(r)`` scaled by a running power of
    ``_RESCALE`` (e_k spans far more than float64 when t q(small) is large); the factor
    ``e^{-t q(small)}`` is applied at the end, in logarithms where it would underflow.
    """
    lam = cu[1, 1] * Sb[1, c]  # c[1, 1] = 1: t q(small)
    # p_j = sum_k c[j, k] u^k S_k, each summed over k upwards
    for j in range(1, L + 1):
        a[j] = 0.0
    for k in range(1, J + 1):
        sk = Sb[k, c]
        for j in range(1, min(k, L) + 1):
            a[j] += cu[k, j] * sk
    for j in range(2, L + 1, 2):
        a[j] = -a[j]
    g[0] = 1.0
    log_scale = -lam
    for k in range(1, n):
        v = 0.0  # the term of the newest g[k - 1] last, and 1 / k off the chain from g[k - 1] to g[k]
        for j in range(min(k, L), 1, -1):
            v += a[j] * g[k - j]
        g[k] = (v + a[1] * g[k - 1]) * (1.0 / k)
        if g[k] > _RESCALE:
            for i in range(k + 1):
                g[i] /= _RESCALE
            log_scale += math.log(_RESCALE)
    if log_scale > -700.0:
        f = math.exp(log_scale)
        for k in range(n):
            g[k] = g[k] * f if g[k] > 0.0 else 0.0
    else:
        for k in range(n):
            g[k] = math.exp(math.log(g[k]) + log_scale) if g[k] > 0.0 else 0.0


@nb.njit(cache=True, inline="always")
def _small_count_laws(Sb, cn, cu, n, L, J, A, G, big):
    """The unscaled laws of :func:`_small_count_law` for the queries ``c < cn`` side by side (each loop
    over the queries innermost, so that it runs in vector registers; every value is summed in the
    same order as there): ``A[j, c] = a[j]``, ``G[k, c] = e_k(r)`` (before the factor
    ``e^{-t q(small)}``), and ``big[c]`` = the largest of them, which tells where that function would
    rescale."""
    for j in range(1, L + 1):
        for c in range(cn):
            A[j, c] = 0.0
    for k in range(1, J + 1):
        for j in range(1, min(k, L) + 1):
            f = cu[k, j]
            for c in range(cn):
                A[j, c] += f * Sb[k, c]
    for j in range(2, L + 1, 2):
        for c in range(cn):
            A[j, c] = -A[j, c]
    for c in range(cn):
        G[0, c] = 1.0
        big[c] = 0.0
    for k in range(1, n):
        inv = 1.0 / k
        for c in range(cn):
            G[k, c] = 0.0
        for j in range(min(k, L), 1, -1):
            for c in range(cn):
                G[k, c] += A[j, c] * G[k - j, c]
        for c in range(cn):
            G[k, c] = (G[k, c] + A[1, c] * G[k - 1, c]) * inv
            big[c] = G[k, c] if G[k, c] > big[c] else big[c]  # (NaN: no rescale there either)


@nb.njit(cache=True)
def _new_state(prep, n):
    """Where a round of evaluations starts (docs/math.md#pruning): ``(dp, ptr, flag, pos, run,
    comp)``. ``pos[0]`` is a prefix length; ``run``, ``comp`` the band power sums before it
    (:func:`_add_power_sums`); per node m, ``flag[m]`` = 0: no DP state (start from the empty
    prefix), 1: ``dp[m]`` is the count law of the node's big tokens before ``pos[0]`` and ``ptr[m]``
    the next of them, 2: saturated there. A new state: the prepared prefix, every node from scratch."""
    M = prep[2]
    pos = np.zeros(1, dtype=np.int64)
    pos[0] = prep[12]
    return (
        np.empty((M, n)),
        np.zeros(M, dtype=np.int64),
        np.zeros(M, dtype=np.int64),
        pos,
        prep[6].copy(),
        prep[7].copy(),
    )


@nb.njit(cache=True)
def _fast_nodes(prep, queries, Rq, n, S, tops, M, acc, accx, resume, saved, save_every, node_row):
    """Add the trapezoid terms of nodes 0..M-1 for every query prefix (fast path): those of W_n to
    ``acc``, those of ``X = int R e^{-R t} (R t) P(N >= n - 1) dt`` to ``accx`` (the slope bounds of
    docs/math.md#pruning).

    Each node's DP over its big tokens starts from ``resume`` (the states at a prefix no longer than
    ``queries[0]``) where it holds one; the states at every ``save_every``-th query are written to
    ``saved`` (one state set per saved query, see :func:`_new_state`), so that a later round can
    resume there. A resumed state is the very one a fresh run computes: the values are the same.
    Per node, the walk over the big tokens first keeps the count law at every query; then the small
    tokens' laws of all queries are formed side by side (:func:`_small_count_laws`). Node m's small
    tokens are those of the bands from its threshold on: their power sums are the row
    ``node_row[m, 0]`` of ``S`` (:func:`_query_power_sums`, -1: no small token) scaled by
    ``2^-(k node_row[m, 1])`` (the empty bands in between).
    """
    s_lo, h, _, bands, lq, off, _, _, flat, start, node_band, coef, _, qs = prep
    r_dp, r_ptr, r_flag = resume[0], resume[1], resume[2]
    s_dp, s_ptr, s_flag = saved[0], saved[1], saved[2]
    dp = np.empty(n)  # P(N_big = j), j < n
    L = coef.shape[0] - 1
    J = coef.shape[1] - 1
    cu = np.zeros((J + 1, L + 1))  # the node's coefficients (_node_coefficients)
    a = np.empty(L + 1)
    g = np.empty(n)
    C = queries.size
    D = np.empty((C, n))  # dp at every query of the node
    A = np.empty((L + 1, C))
    G = np.empty((n, C))
    big_g = np.empty(C)
    Sb = np.empty((J + 1, C))  # the node's power sums of its small tokens, per query
    nbig = np.empty(C, dtype=np.int64)  # at least the number of big tokens before each query
    wts = np.empty(C)  # the node's weight and R t for each query
    rts = np.empty(C)
    live = np.empty(C, dtype=np.bool_)  # the node adds a measurable term to the query
    log_r = np.log(Rq)
    log_floor = math.log(NODE_FLOOR * h)
    log_fact = np.empty(n + 1)  # log m!
    for k in range(n + 1):
        log_fact[k] = math.lgamma(k + 1.0)
    for m in range(M):
        s = s_lo + m * h
        bm = node_band[m]
        log_certain = LOG_CERTAIN - s
        direct = s < _S_DIRECT
        et = math.exp(s) if direct else 0.0
        by_band = start[m, 0] < 0  # no list: the big tokens are those of bands below bm
        big = flat[start[m, 0] : start[m, 1]] if not by_band else flat[:0]
        if r_flag[m] == 2:
            for c in range(C):
                weight, moment = _node_terms(h, Rq[c], s)
                acc[c] += weight
                accx[c] += moment
            for c in range(0, C, save_every):
                s_flag[c // save_every, m] = 2
            continue
        row = node_row[m, 0]
        gap = node_row[m, 1]
        small = row >= 0  # some query may have small tokens at this node
        u = math.exp(s - bm * _LN2) if small else 0.0  # t 2^-bm: t q(small) = u Sb[1, c]
        scale1 = _POW2_NEG[min(gap, _POW2_NEG_MAX)]
        # the whole node, for every query, when the bound below holds for the longest query (the
        # most big tokens and small mass; lam^m / m! falls with m while lam <= 1) with the largest
        # weight bound: no walk, no state saved (a later round starts the node afresh)
        last = queries[C - 1]
        most = last if by_band else np.searchsorted(big, last)
        if most <= n - 2:
            lam = u * (S[row, 1, C - 1] * scale1) if small and bm <= tops[C - 1] else 0.0
            if lam <= 1.0:
                if not lam > 0.0:
                    continue  # no small token: fewer than n - 1 tokens can ring, for every query
                rt = Rq[0] * et if direct else math.exp(log_r[0] + s)  # the largest R t
                lw = math.log(h) + math.log(min(rt, 1.0 / math.e))  # weight <= h min(R t, 1/e)
                lw1 = math.log(h) + 2.0 * math.log(min(rt, 2.0 / math.e))  # weight R t <= h min(.)^2
                mm = n - most
                lg = math.log(lam)
                if (
                    lw + mm * lg - log_fact[mm] < log_floor
                    and lw1 + (mm - 1) * lg - log_fact[mm - 1] < log_floor
                ):
                    continue
        slot = 0  # the next saved state, and the query it belongs to
        next_save = 0
        if r_flag[m] == 1:
            dp[:] = r_dp[m]
            ptr = r_ptr[m]
        else:
            dp[:] = 0.0
            dp[0] = 1.0
            ptr = 0
        walked = 0  # big tokens since the last look at P(N_big < n)
        cn = C  # the queries before the first saturated one
        for c in range(C):
            stop = queries[c]
            while True:  # the big tokens before stop: ptr indexes big, or (by_band) the tokens
                if by_band:
                    while ptr < stop and bands[ptr] >= bm:
                        ptr += 1
                    if ptr >= stop:
                        break
                    i = ptr
                else:
                    if ptr >= big.size or big[ptr] >= stop:
                        break
                    i = big[ptr]
                if walked == _SAT_EVERY:  # saturated mid-walk: handled below as at a query
                    walked = 0
                    below_big = 0.0
                    for j in range(n):
                        below_big += dp[j]
                    if below_big < SATURATED:
                        break
                walked += 1
                ptr += 1
                if direct:  # q t = q e^s: no logarithm, one exponential
                    x = qs[i] * et
                    if x >= CERTAIN_QT:  # rang by t: shift the count by one arrival
                        for j in range(n - 1, 0, -1):
                            dp[j] = dp[j - 1]
                        dp[0] = 0.0
                        continue
                elif lq[i] >= log_certain:
                    for j in range(n - 1, 0, -1):
                        dp[j] = dp[j - 1]
                    dp[0] = 0.0
                    continue
                else:
                    x = math.exp(lq[i] + s)
                ai, ei = _arrival(x)
                _add_token(dp, ai, ei)
            below_big = 0.0
            for j in range(n):
                below_big += dp[j]
            if below_big < SATURATED:
                # P(N < n) <= P(N_big < n) < SATURATED here and for every longer prefix (tokens
                # only add arrivals): the integrand is the weight alone from now on
                cn = c
                for c2 in range(c + (-c) % save_every, C, save_every):
                    s_flag[c2 // save_every, m] = 2
                break
            nbig[c] = stop if by_band else ptr  # (the list's tokens before stop; by band: all of them)
            if c == next_save:  # (no integer division per query and node)
                k = slot
                slot += 1
                next_save += save_every
                for j in range(n):  # (a loop: no array view per query and node)
                    s_dp[k, m, j] = dp[j]
                s_ptr[k, m] = ptr
                s_flag[k, m] = 1
            for j in range(n):
                D[c, j] = dp[j]
        series = False  # some query needs the small tokens' count law
        for c in range(cn):
            rt = Rq[c] * et if direct else math.exp(log_r[c] + s)
            weight = _weight_at(h, rt)
            wts[c] = weight
            rts[c] = rt
            if small:
                Sb[1, c] = S[row, 1, c] * scale1
            has_small = small and bm <= tops[c] and Sb[1, c] > 0.0
            # this node adds nothing measurable to this prefix: a weight below SATURATED, or fewer
            # than n - 1 big tokens and a small tokens' mean count lam = t q(small) for which
            # P(N >= n) <= lam^(n - nbig) / (n - nbig)! (and P(N >= n - 1) likewise) leaves both
            # terms below NODE_FLOOR h (docs/math.md#small-tokens)
            keep = weight >= SATURATED
            if keep and nbig[c] <= n - 2:
                mm = n - nbig[c]
                lam = u * Sb[1, c] if has_small else 0.0
                if not lam > 0.0:
                    keep = False  # no small token: P(N >= n - 1) = 0
                else:
                    lg = math.log(lam)
                    lw = math.log(weight)
                    keep = (
                        lw + mm * lg - log_fact[mm] >= log_floor
                        or lw + math.log(rt) + (mm - 1) * lg - log_fact[mm - 1] >= log_floor
                    )
            live[c] = keep
            series = series or (keep and has_small)
        if series:
            _node_coefficients(coef, s, bm, cu)
            for k in range(J + 1):
                if k != 1:
                    f = _POW2_NEG[min(k * gap, _POW2_NEG_MAX)]
                    for c in range(cn):
                        Sb[k, c] = S[row, k, c] * f
            _small_count_laws(Sb, cn, cu, n, L, J, A, G, big_g)
        for c in range(cn):
            if not live[c]:
                continue
            weight = wts[c]
            rt = rts[c]
            if small and bm <= tops[c] and Sb[1, c] > 0.0:
                lam = cu[1, 1] * Sb[1, c]  # c[1, 1] = 1: t q(small)
                if big_g[c] > _RESCALE or not -lam > -700.0:
                    _small_count_law(Sb, c, cu, n, L, J, a, g)
                else:  # e^{-t q(small)} e_k(r) as that function forms it without a rescale
                    f = math.exp(-lam)
                    for k in range(n):
                        g[k] = G[k, c] * f if G[k, c] > 0.0 else 0.0
            else:
                for k in range(n):
                    g[k] = 0.0
                g[0] = 1.0
            below = 0.0  # P(N < n) = sum_i P(N_big = i) P(N_small < n - i)
            below1 = 0.0  # P(N < n - 1)
            run = 0.0
            for k in range(n - 1):
                run += g[k]
                below += D[c, n - 1 - k] * run
                below1 += D[c, n - 2 - k] * run
            run += g[n - 1]
            below += D[c, 0] * run
            acc[c] += weight * max(1.0 - below, 0.0)
            accx[c] += weight * rt * max(1.0 - below1, 0.0)
        if cn < C:  # the saturated query, with the weight of the loop above, and the later ones
            c = cn  # (P(N < n - 1) <= P(N < n) < SATURATED: both probabilities taken as 1)
            rt = Rq[c] * et if direct else math.exp(log_r[c] + s)
            weight = _weight_at(h, rt)
            acc[c] += weight
            accx[c] += weight * rt
            for c2 in range(c + 1, C):
                weight, moment = _node_terms(h, Rq[c2], s)
                acc[c2] += weight
                accx[c2] += moment


@nb.njit(cache=True)
def _nodes_needed(s_lo, h, M, r_min):
    """Nodes of the grid that a set of prefixes with outside masses ``>= r_min`` needs."""
    s_hi = math.log(-math.log(QUAD_TAIL)) - math.log(max(r_min, 5e-324))
    return min(M, int(math.ceil((s_hi - s_lo) / h)) + 1)


@nb.njit(cache=True)
def _evaluate_fast(prep, queries, Rq, n, resume, save_every):
    """W_n at ``queries`` (increasing, ``>= resume``'s prefix); returns the values, the moments ``X``
    of :func:`_fast_nodes` and the states at every ``save_every``-th query (:func:`_fast_nodes`,
    :func:`_query_power_sums`)."""
    J = prep[11].shape[1] - 1  # (coef: (L + 1, J + 1))
    M = _nodes_needed(prep[0], prep[1], prep[2], Rq.min())
    ns = (queries.size - 1) // save_every + 1
    saved = (
        np.empty((ns, M, n)),
        np.zeros((ns, M), dtype=np.int64),
        np.zeros((ns, M), dtype=np.int64),
        np.empty((ns, prep[6].shape[0], J + 1)),
        np.empty((ns, prep[6].shape[0], 3)),
        np.empty(ns, dtype=np.int64),
    )
    node_band = prep[10]
    off = prep[5]
    nb = off.size - 1
    # the bands that hold tokens from the first node's threshold on (thresholds increase with m);
    # node m reads the first of them at or above its threshold (node_row: its row and the gap)
    b_lo = min(node_band[0], nb)
    nr = 0
    for b in range(b_lo, nb):
        nr += off[b + 1] > off[b]
    rows = np.empty(nr, dtype=np.int64)
    r = 0
    for b in range(b_lo, nb):
        if off[b + 1] > off[b]:
            rows[r] = b
            r += 1
    node_row = np.empty((M, 2), dtype=np.int64)
    r = 0
    for m in range(M):
        while r < nr and rows[r] < node_band[m]:
            r += 1
        node_row[m, 0] = r if r < nr else -1
        node_row[m, 1] = rows[r] - node_band[m] if r < nr else 0
    S, tops = _query_power_sums(prep[13], prep[3], resume, queries, J, saved, save_every, rows)
    acc = np.zeros(queries.size)
    accx = np.zeros(queries.size)
    _fast_nodes(prep, queries, Rq, n, S, tops, M, acc, accx, resume, saved, save_every, node_row)
    return acc, accx, saved


@nb.njit(cache=True)
def sequential_masses_fast(qs, queries, Rq, n, refine=0):
    """W_n(H_k) at increasing prefix lengths ``queries`` (outside masses ``Rq > 0``), fast path."""
    top = queries[-1]
    prep = _prepare_fast(
        qs, top, n, refine, Rq.min(), queries[0], np.empty((2, top), dtype=np.int64), np.empty(top)
    )
    resume = _new_state(prep, n)
    return _evaluate_fast(prep, queries, Rq, n, resume, queries.size)[0]


@nb.njit(cache=True)
def sequential_slopes_fast(qs, queries, Rq, n, refine=0):
    """``(W, G)`` at increasing prefix lengths ``queries`` (outside masses ``Rq > 0``), fast path:
    ``W = W_n(H_k)`` and the slope ``G = (X - W) / R`` that bounds every later or earlier token's
    increment (docs/math.md#pruning): ``W_n(H + j) - W_n(H) <= q_j G(H')`` for ``j`` outside ``H``,
    ``H + j`` inside ``H'``, and ``>= q_j G(H)``, without the margin the scan adds."""
    top = queries[-1]
    prep = _prepare_fast(
        qs, top, n, refine, Rq.min(), queries[0], np.empty((2, top), dtype=np.int64), np.empty(top)
    )
    resume = _new_state(prep, n)
    w, x, _ = _evaluate_fast(prep, queries, Rq, n, resume, queries.size)
    return w, (x - w) / Rq


@nb.njit(cache=True)
def _next_picks(todo, ev_pos, starts, flag):
    """The prefixes a pruning round evaluates (increasing): the remaining candidates ``todo`` fall
    into gaps between the evaluated prefixes ``ev_pos``; the round takes the last candidate of every
    gap and spreads ``PRUNE_BATCH`` minus the number of gaps more over the gaps, in proportion to their
    sizes (docs/math.md#pruning). ``starts`` (int64) and ``flag`` (bool): work arrays of at least
    ``todo.size + 1`` entries."""
    N = todo.size
    # gap g holds todo[starts[g]:starts[g + 1]]
    G = 0
    e = 0
    prev = -1
    for i in range(N):
        while e < ev_pos.size and ev_pos[e] < todo[i]:
            e += 1
        if e != prev:
            starts[G] = i
            G += 1
            prev = e
    starts[G] = N
    flag[:N] = False
    extra = max(0, PRUNE_BATCH - G)
    rest = N - G  # candidates that are not the last of their gap
    for g in range(G):
        flag[starts[g + 1] - 1] = True
        size = starts[g + 1] - starts[g] - 1
        if extra == 0 or size == 0:
            continue
        share = extra * size // rest
        step = max(1, size // (share + 1))
        for j in range(1, share + 1):
            flag[starts[g] + min(j * step, size - 1)] = True
    return todo[flag[:N]]


_R_REL = 1e-15  # relative error allowed in an outside mass R (compensated suffix sums: about 2 ulps)


@nb.njit(cache=True, inline="always")
def _gap_bound(wa, ma, ra, wb, mb, rb, rk):
    """Upper bound on ``W_n(H_k)`` for ``a <= k <= b`` from the evaluated prefixes a and b
    (docs/math.md#pruning): ``W_a + G_b q(H_k - H_a)`` and ``W_b - G_a q(H_b - H_k)``, the slopes
    ``G = m / r`` with ``m = X - W`` as the fast path gives them, widened by ``PRUNE_SLOPE_MARGIN``.
    The masses in between are differences of outside masses (accurate next to a small ``R``, where
    prefix sums near 1 are not), widened by their rounding; ``inf`` where neither bound is a number."""
    bound = np.inf
    slope = mb + PRUNE_SLOPE_MARGIN
    if slope > 0.0:
        up = wa + slope * ((ra - rk + _R_REL * (ra + rk)) / rb)
        if up < bound:  # (NaN: no bound)
            bound = up
    slope = ma - PRUNE_SLOPE_MARGIN
    between = rk - rb - _R_REL * (rk + rb)
    if slope > 0.0 and between > 0.0:
        down = wb - slope * (between / ra)
        if down < bound:
            bound = down
    return bound


@nb.njit(cache=True)
def new_workspace(V):
    """Work arrays of :func:`scan_without_replacement_into` for ``V`` tokens: ``(fwork, iwork, bwork)``."""
    return np.empty((6, V + 1)), np.empty((3, V + 1), dtype=np.int64), np.empty((2, V + 1), dtype=np.bool_)


@nb.njit(cache=True)
def scan_without_replacement(ps, qs, n, refine=0):
    """:func:`scan_without_replacement_into` with fresh work arrays."""
    fwork, iwork, bwork = new_workspace(qs.size)
    V1 = qs.size + 1
    return scan_without_replacement_into(
        ps, qs, n, refine, fwork[0][:V1], fwork[1][:V1], fwork[2][:V1], False, fwork, iwork, bwork
    )


@nb.njit(cache=True)
def scan_without_replacement_into(ps, qs, n, refine, P, Q, R, have_sums, fwork, iwork, bwork):
    """Any n >= 3: exact W_n at a few prefixes, the rest bounded away. Returns ``(D, k)``.

    ``W_n`` is non-decreasing along the prefixes, so for an evaluated prefix ``b >= k``,
    ``D_k <= W_n(H_b) - P_k``; between two evaluated prefixes the slopes of :func:`_gap_bound` bound it
    tighter; with the cheap bounds of :func:`without_replacement_bounds` these discard every prefix
    that cannot beat the best excess found so far. Each round evaluates up to
    ``PRUNE_BATCH`` of the remaining prefixes (evenly spread) by the fast quadrature; the tokens and
    the grid are prepared once, and each round resumes every node's DP over the big tokens at the
    last saved state before the first remaining prefix (docs/math.md#pruning).

    ``P``, ``Q``, ``R`` (length ``V + 1``): the prefix and suffix sums, given when ``have_sums``, else
    written there; ``fwork`` (float, 6 rows), ``iwork`` (int64, 3 rows), ``bwork`` (bool, 2 rows), each
    row of at least ``V + 1`` entries (:func:`new_workspace`): kept between calls by the caller, so
    that a call does not page-fault megabytes of fresh memory.
    """
    V1 = qs.size + 1
    lo = fwork[3][:V1]
    hi = fwork[4][:V1]
    exact = bwork[0][:V1]
    # the candidates of _candidates_into, collected in the bounds' pass
    count, best, best_k = _bounds_into(ps, qs, n, P, Q, R, have_sums, lo, hi, exact, iwork[2][:V1], True)
    if count == 0:
        return best, best_k
    todo = iwork[2][:count]
    prep = _prepare_fast(qs, todo[-1], n, refine, R[todo[-1]], todo[0], iwork, fwork[5])
    M = prep[2]
    resume = _new_state(prep, n)
    ev_pos = np.empty(0, dtype=np.int64)  # evaluated prefixes, increasing, W_n and X - W_n there
    ev_w = np.empty(0)
    ev_m = np.empty(0)
    while todo.size > 0:
        pick = _next_picks(todo, ev_pos, iwork[1], bwork[1])  # (the band order is no longer needed)
        save_every = max(1, pick.size * M * n // PRUNE_STATES + 1)
        w, x, saved = _evaluate_fast(prep, pick, R[pick], n, resume, save_every)
        for i in range(pick.size):
            k = pick[i]
            x[i] -= w[i]
            wk = min(w[i], Q[k])
            w[i] = wk
            d = wk - P[k]
            if d > best or (d == best and k < best_k):
                best = d
                best_k = k
        pos = np.concatenate((ev_pos, pick))
        order = np.argsort(pos, kind="mergesort")
        ev_pos = pos[order]
        ev_w = np.concatenate((ev_w, w))[order]
        ev_m = np.concatenate((ev_m, x))[order]
        # cap = W_n at the nearest evaluated prefix b >= k (an upper bound on W_n(H_k)), and the
        # slopes' bound between b and the evaluated prefix a < k before it; todo is increasing, so one
        # pointer walks the evaluated prefixes
        keep = 0
        e = 0
        for i in range(todo.size):
            k = todo[i]
            while e < ev_pos.size and ev_pos[e] < k:
                e += 1
            if e < ev_pos.size and ev_pos[e] == k:
                continue  # evaluated
            cap = ev_w[e] if e < ev_pos.size else np.inf
            if e > 0 and e < ev_pos.size:
                a, b = ev_pos[e - 1], ev_pos[e]
                cap = min(cap, _gap_bound(ev_w[e - 1], ev_m[e - 1], R[a], ev_w[e], ev_m[e], R[b], R[k]))
            if min(hi[k], cap - P[k]) > best + PRUNE_SLACK:
                todo[keep] = k
                keep += 1
        todo = todo[:keep]
        if todo.size > 0:  # resume the next round at the last saved query before todo[0]
            c = -1
            for i in range(0, pick.size, save_every):
                if pick[i] <= todo[0]:
                    c = i
            if c >= 0:  # pick[c] >= todo[0] of this round >= the prefix of resume
                k = c // save_every
                Ms = saved[2].shape[1]
                resume[2][:] = 0  # nodes the round did not need have no state
                resume[0][:Ms] = saved[0][k]
                resume[1][:Ms] = saved[1][k]
                resume[2][:Ms] = saved[2][k]
                src = saved[5][k]  # the band sums: from the last ones kept, plus the tokens since
                p0 = resume[3][0]
                if src >= 0:
                    resume[4][:] = saved[3][src]
                    resume[5][:] = saved[4][src]
                    p0 = pick[src * save_every]
                _add_power_sums(qs, prep[3], resume[4], resume[5], p0, pick[c], prep[11].shape[1] - 1)
                resume[3][0] = pick[c]
    return best, best_k


# ---------------------------------------- without replacement: an independent evaluation of W_n(H)
#
# sequential_mass_check evaluates W_n(H) for one subset by another route than the solver's fast
# path, so that a bug in one cannot certify itself (it backs DraftScheme.mass, hence every
# certificate re-check): the tokens of H sorted by q instead of the solver's q/p order; the small
# tokens of a node are an exact suffix of that order (no bands); their power sums are rescaled to each
# node's own threshold as the scan meets it; their count law comes from Newton's identities in full
# (no cut log series); every big token enters the plain DP (no arrival shortcut); and its nodes lie
# half-way between the solver's, so that the difference of the two values is also the quadrature
# error estimate (docs/math.md#independent-check).


@nb.njit(cache=True)
def _newton_count_law(pw, coef, n, psum, e, g, log_scale0):
    """``g[k] = P(N_small = k)`` for k < n by Newton's identities, ``pw[m] = sum_i (q_i t)^m``."""
    J = coef.shape[1] - 1
    for j in range(1, n):
        v = 0.0
        for m in range(j, J + 1):
            v += coef[j, m] * pw[m]
        psum[j] = v  # p_j(r), r_i = e^{q_i t} - 1
    e[0] = 1.0
    log_scale = log_scale0
    for k in range(1, n):
        v = 0.0
        for i in range(1, k + 1):
            term = e[k - i] * psum[i]
            v += term if i % 2 == 1 else -term
        e[k] = v / k
        if e[k] > _RESCALE:
            for i in range(k + 1):
                e[i] /= _RESCALE
            log_scale += math.log(_RESCALE)
    for k in range(n):
        g[k] = math.exp(math.log(e[k]) + log_scale) if e[k] > 0.0 else 0.0


def sequential_mass_check(q_in, outside, n, refine):
    """``W_n(H)`` for the masses ``q_in`` of H (any order, zeros allowed) and ``outside > 0``.

    The trapezoid nodes sit half-way between those of the solver's grid at the same ``refine``:
    the leading error term of the trapezoid rule changes sign under that shift (Poisson summation),
    so the difference of the two values is about twice the error of either.

    Two kernels with numpy's sort in between (vectorised; several times faster than numba's on the
    tens of thousands of masses that are big at some node when q(outside) is small): the sorted
    values are the same whatever the sort, so is the result.
    """
    s_lo, h, M, J, coef, acc, comp, neg = _check_small_sums(q_in, outside, n, refine)
    neg = np.sort(neg)
    return _check_nodes(outside, n, s_lo, h, M, J, coef, acc, comp, -neg)


@nb.njit(cache=True)
def _check_small_sums(q_in, outside, n, refine):
    """The first part of :func:`sequential_mass_check`: the grid, the power sums of the tokens small
    at every node, and the negated masses of the others (unsorted)."""
    s_lo, h, M = quad_grid(n, outside, refine)
    s_lo -= 0.5 * h  # half a step further left: the left tail left out only shrinks
    M += 1
    J = series_length(n - 1)
    coef = series_coefficients(n - 1, J)
    # tokens small at every node (q t <= SMALL_QT up to the last node) are summed once; the others
    # are sorted high to low, and node m's small tokens are a suffix of them
    log_theta_min = math.log(SMALL_QT) - (s_lo + (M - 1) * h)
    # theta_min = e^log_theta_min as a float when it is a normal number and 1 / theta_min finite:
    # then a token is small at every node when q <= theta_min, scaled as q / theta_min (no logarithm)
    plain = -700.0 < log_theta_min < 700.0
    theta_min = math.exp(log_theta_min) if plain else 0.0
    inv_theta = 1.0 / theta_min if plain else 0.0
    acc = np.zeros(J + 1)  # sum of (q_i / theta)^j over the small tokens met so far
    comp = np.zeros(3)  # compensations of the first two powers
    neg = np.empty(q_in.size)  # the others' masses, negated, in token order (only `rest` written)
    rest = 0
    # a run of equal masses (a block of tiny draft masses) repeats the last small token's scaled
    # value and powers: they are added again as computed, without the logarithm, exponential and
    # chain of multiplications (the sums are those of the loop below, bit for bit)
    pows = np.zeros(J + 1)
    last_small = -1.0
    for i in range(q_in.size):
        if q_in[i] <= 0.0:
            continue
        if q_in[i] == last_small:
            acc[1], comp[1] = neumaier_add_nonneg(acc[1], comp[1], pows[1])
            acc[2], comp[2] = neumaier_add_nonneg(acc[2], comp[2], pows[2])
            for j in range(3, J + 1):
                acc[j] += pows[j]
            continue
        if plain:
            if q_in[i] > theta_min:
                neg[rest] = -q_in[i]
                rest += 1
                continue
            v = q_in[i] * inv_theta
        else:
            lv = math.log(q_in[i]) - log_theta_min
            if lv > 0.0:
                neg[rest] = -q_in[i]
                rest += 1
                continue
            v = math.exp(lv)
        acc[1], comp[1] = neumaier_add_nonneg(acc[1], comp[1], v)  # (v > 0: no branch)
        x = v * v
        acc[2], comp[2] = neumaier_add_nonneg(acc[2], comp[2], x)
        pows[1] = v
        pows[2] = x
        for j in range(3, J + 1):
            x *= v
            acc[j] += x
            pows[j] = x
        last_small = q_in[i]
    return s_lo, h, M, J, coef, acc, comp, neg[:rest]


#: :func:`_check_nodes` tries the Chernoff bound of :func:`_surely_n_arrivals` before its DP from this
#: many drafts on (below, the DP over a node's big tokens costs a few operations a token anyway).
CHERNOFF_MIN_N = 16


@nb.njit(cache=True, inline="always")
def _surely_n_arrivals(qv, lq, cut, s, et, n):
    """True when the first ``cut`` tokens of ``qv`` (clocks ``q t``, ``t = e^s``; ``et = t`` or 0 beyond
    float range, then from ``lq = log q``) provably give ``P(N < n) < SATURATED / 2`` for the count
    ``N`` of those rung by ``t``: the Chernoff bound ``P(N <= k) <= e^-mu (e mu / k)^k`` (``k = n - 1 <
    mu``, ``mu = E N``; from ``E e^(-lam N) <= exp(mu (e^-lam - 1))`` at ``lam = log(mu / k)``) with
    ``mu`` replaced by the smaller ``sum x / (1 + x)`` (``1 - e^-x >= x / (1 + x)``: the bound falls as
    ``mu`` grows past k). A division a token instead of the DP's n operations; checked every 16
    tokens. Where it holds, the DP of :func:`_check_nodes` would have found ``P(N < n) < SATURATED``
    (it computes that probability to rounding) and added the node's whole weight: the same term."""
    k = n - 1.0
    target = math.log(0.5 * SATURATED)
    mu = 0.0
    for i in range(cut):
        x = qv[i] * et if et > 0.0 else math.exp(lq[i] + s)
        mu += 1.0 if x > 1e300 else x / (1.0 + x)
        if (i & 15) == 15 or i == cut - 1:
            if mu > k and k * (1.0 + math.log(mu / k)) - mu < target:
                return True
    return False


@nb.njit(cache=True)
def _check_nodes(outside, n, s_lo, h, M, J, coef, acc, comp, qv):
    """The second part of :func:`sequential_mass_check`, ``qv`` the other tokens, high to low."""
    rest = qv.size
    log_theta_min = math.log(SMALL_QT) - (s_lo + (M - 1) * h)
    lq = np.log(qv)
    cut = np.empty(M, dtype=np.int64)  # node m: lq[cut[m]:] are small
    pw = np.zeros((M, J + 1))  # node m: pw[m, j] = sum of (q t)^j over its small tokens
    ptr = rest
    log_theta_prev = log_theta_min
    for m in range(M - 1, -1, -1):  # theta = SMALL_QT / t grows as m falls
        log_theta = math.log(SMALL_QT) - (s_lo + m * h)
        f = math.exp(log_theta_prev - log_theta)
        fj = f
        for j in range(1, J + 1):
            acc[j] *= fj
            if j <= 2:
                comp[j] *= fj
            fj *= f
        while ptr > 0 and lq[ptr - 1] <= log_theta:
            ptr -= 1
            v = math.exp(lq[ptr] - log_theta)
            acc[1], comp[1] = neumaier_add(acc[1], comp[1], v)
            x = v * v
            acc[2], comp[2] = neumaier_add(acc[2], comp[2], x)
            for j in range(3, J + 1):
                x *= v
                acc[j] += x
        cut[m] = ptr
        xj = SMALL_QT
        for j in range(1, J + 1):
            pw[m, j] = (acc[j] + (comp[j] if j <= 2 else 0.0)) * xj
            xj *= SMALL_QT
        log_theta_prev = log_theta
    dp = np.empty(n)
    psum = np.empty(n)
    e = np.empty(n)
    g = np.empty(n)
    total = 0.0
    log_floor = math.log(NODE_FLOOR * h)
    for m in range(M):
        s = s_lo + m * h
        weight = _node_weight(h, outside, s)
        if weight == 0.0:
            continue
        if cut[m] <= n - 1:
            # at most cut[m] big tokens ring, and m' = n - cut[m] of the small ones (mean count
            # lam = t q(small) = pw[m, 1]) with probability <= lam^m' / m'!: a term below
            # NODE_FLOOR h adds nothing measurable (docs/math.md#small-tokens)
            lam = pw[m, 1]
            mm = n - cut[m]
            if not lam > 0.0 or math.log(weight) + mm * math.log(lam) - math.lgamma(mm + 1.0) < log_floor:
                continue
        et = math.exp(s) if s < 700.0 else 0.0
        if n >= CHERNOFF_MIN_N and _surely_n_arrivals(qv, lq, cut[m], s, et, n):
            total += weight  # what the DP below adds once its P(N < n) falls under SATURATED
            continue
        dp[:] = 0.0
        dp[0] = 1.0
        below_big = 1.0
        for i in range(cut[m]):
            if et > 0.0:
                ai, ei = _arrival(qv[i] * et)
            else:
                ai, ei = _arrival(math.exp(lq[i] + s))
            _add_token(dp, ai, ei)
            if i % 4 == 3 or i == cut[m] - 1:  # the sum every few tokens: it only falls
                below_big = 0.0
                for j in range(n):
                    below_big += dp[j]
                if below_big < SATURATED:  # later tokens only add arrivals
                    break
        if below_big < SATURATED:
            total += weight
            continue
        _newton_count_law(pw[m], coef, n, psum, e, g, -pw[m, 1])
        below = 0.0
        run = 0.0
        for k in range(n):
            run += g[k]
            below += dp[n - 1 - k] * run
        total += weight * max(1.0 - below, 0.0)
    return total


# ------------------------------------------- without replacement, n = 2: the re-check of W_2(H)


@nb.njit(cache=True)
def pair_mass_check(q, mask, total, big, big_rest):
    """``W_2(H) = q(H) - R sum_{i in H} q_i / (1 - q_i)``, ``R = q(not H)``, for the certificate
    re-check (:meth:`mdsd_ot.drafts.DraftScheme.mass`): from the mask, token by token in one pass of
    three compensated sums (the scans work from bin or prefix sums of the q/p order instead).

    Each ``1 - q_i`` is ``total - q_i`` (at least half the mass: the ratio is at most 2 q_i), except
    for ``big`` (-1: none), whose ``1 - q`` is ``big_rest`` (the parts of
    :func:`mdsd_ot.drafts.complement_masses`) and whose term, when in H, is ``q_big (R / max(big_rest,
    R))``: ``1 - q_big >= R`` inside H, and the ratio stays finite when ``big_rest`` is subnormal."""
    s_in = c_in = s_out = c_out = s_odd = c_odd = 0.0
    k = 0
    for i in range(q.size):
        inside = q[i] if mask[i] else 0.0
        s_in, c_in = neumaier_add_nonneg(s_in, c_in, inside)
        s_out, c_out = neumaier_add_nonneg(s_out, c_out, q[i] - inside)
        odd = 0.0 if i == big else inside / (total - q[i])
        s_odd, c_odd = neumaier_add_nonneg(s_odd, c_odd, odd)
        k += inside > 0.0
    R = s_out + c_out
    if R == 0.0:
        return 1.0 if k >= 2 else 0.0
    big_term = q[big] * (R / max(big_rest, R)) if big >= 0 and mask[big] else 0.0
    return (s_in + c_in) - R * (s_odd + c_odd) - big_term
