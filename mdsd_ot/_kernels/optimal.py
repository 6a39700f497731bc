"""The full-vocabulary optimal verifier for i.i.d. drafts (docs/math.md#optimal-verifier-full-v): the
lower convex hull of the sorted prefix points, runs of tokens pooled inside its blocks, the chain
decomposition into interval-class rules, and the per-draft-set selection by a range maximum.

Tokens with ``q > 0`` are sorted by ``q/p`` from LOW to high (the reverse of the dual's order), so
position ``x`` of a draft is uniform on [0, 1] and ``g(x) = 1 - (1 - x)^n`` is the probability that
the draft set meets the first ``x`` of mass. Consecutive tokens are grouped into *units* that are one
class at every level; a unit boundary ``u`` (between units ``u - 1`` and ``u``) dies at level
``tau[u]`` (its two classes merge): at a level ``t`` the classes are the runs of units between the
boundaries with ``tau > t``.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from .common import neumaier_add

#: Up to this many drafts a class secant is the sum ``sum_i A^(n-1-i) B^i`` (no division, no
#: cancellation); beyond it ``A^n (1 - (B/A)^n) / (A - B)`` through ``expm1``/``log1p``.
SECANT_SUM_MAX_N = 64


@nb.njit(cache=True, inline="always")
def class_secant(A, B, d, n):
    """``(A^n - B^n) / (A - B)``: the mean of ``g'`` over a class of mass ``d = A - B`` whose outside
    masses (every token from the class on, and every token after it) are ``A`` and ``B``."""
    if n <= SECANT_SUM_MAX_N:  # Horner in A, coefficients B^j: every term positive
        s = 1.0
        bp = 1.0
        for _ in range(n - 1):
            bp *= B
            s = s * A + bp
        return s
    if d <= 0.0 or A <= 0.0:
        return 0.0
    lead = math.exp(n * math.log(A))
    x = min(d / A, 1.0)
    if x >= 1.0:  # (1 - x)^n = 0; log1p(-1) is -inf compiled but an error in the Python twin
        return lead / d
    return lead * (-math.expm1(n * math.log1p(-x))) / d


@nb.njit(cache=True, inline="always")
def _sift(ht, hk, where, i, size):
    """Restore the heap order around slot ``i`` (indexed min-heap: ``where[k]`` is k's slot)."""
    t = ht[i]
    k = hk[i]
    while i > 0:  # up
        par = (i - 1) >> 1
        if ht[par] <= t:
            break
        ht[i] = ht[par]
        hk[i] = hk[par]
        where[hk[i]] = i
        i = par
    while True:  # down
        a = 2 * i + 1
        if a >= size:
            break
        if a + 1 < size and ht[a + 1] < ht[a]:
            a += 1
        if t <= ht[a]:
            break
        ht[i] = ht[a]
        hk[i] = hk[a]
        where[hk[i]] = i
        i = a
    ht[i] = t
    hk[i] = k
    where[k] = i


@nb.njit(cache=True, inline="always")
def _heap_set(ht, hk, where, size, k, t):
    """Insert kink ``k`` with death level ``t``, or move it there; returns the new size."""
    i = where[k]
    if i < 0:
        i = size
        size += 1
        hk[i] = k
    ht[i] = t
    _sift(ht, hk, where, i, size)
    return size


@nb.njit(cache=True, inline="always")
def _heap_remove(ht, hk, where, size, i):
    """Remove the entry in slot ``i``; returns the new size."""
    where[hk[i]] = -1
    size -= 1
    if i < size:
        ht[i] = ht[size]
        hk[i] = hk[size]
        where[hk[i]] = i
        _sift(ht, hk, where, i, size)
    return size


@nb.njit(cache=True, inline="always")
def int_power(x, n):
    """``x ** n`` for an integer ``n >= 0`` by repeated squaring (about half the time of ``pow``)."""
    out = 1.0
    while n:
        if n & 1:
            out *= x
        x *= x
        n >>= 1
    return out


@nb.njit(cache=True)
def chain_keys(p, q, key):
    """Sort keys into ``key``, ascending: ``q/p`` from low to high; ``q = 0`` first, ``p = 0 < q`` last."""
    V = p.size
    for i in range(V):
        if q[i] == 0.0:
            key[i] = -np.inf
        elif p[i] == 0.0:
            key[i] = np.inf
        else:
            key[i] = q[i] / p[i]
    return key


#: Bits per pass of :func:`chain_order`'s radix sort (2,048 counters a pass: they stay in L1).
ORDER_RADIX_BITS = 11


@nb.njit(cache=True)
def chain_order(key):
    """``np.argsort(key, kind="stable")`` for :func:`chain_keys` (no NaN) by a least-significant-digit
    radix sort: each key's float64 bits mapped to an unsigned integer of the same order (negative keys
    inverted, positive ones with the sign bit set; -0.0 as +0.0), then stable counting passes of
    :data:`ORDER_RADIX_BITS` bits (a pass whose digit every key shares is skipped). Ties keep token-index
    order, so the order is the same on every machine (numpy's unstable sort orders ties differently
    with and without SIMD). About 0.3x numpy's ``argsort`` where numpy sorts without SIMD."""
    V = key.size
    sign = np.uint64(1) << np.uint64(63)
    bits = key.view(np.uint64)
    k = np.empty(V, dtype=np.uint64)
    k_next = np.empty(V, dtype=np.uint64)
    for i in range(V):
        b = bits[i]
        if b == sign:  # -0.0
            b = np.uint64(0)
        k[i] = ~b if b & sign else b | sign
    nb_ = 1 << ORDER_RADIX_BITS
    passes = (64 + ORDER_RADIX_BITS - 1) // ORDER_RADIX_BITS
    mask = np.uint64(nb_ - 1)
    count = np.zeros((passes, nb_), dtype=np.int64)
    for i in range(V):  # every pass's histogram in one read
        x = k[i]
        for d in range(passes):
            count[d, (x >> np.uint64(d * ORDER_RADIX_BITS)) & mask] += 1
    idx = np.arange(V)
    idx_next = np.empty(V, dtype=np.int64)
    for d in range(passes):
        c = count[d]
        shift = np.uint64(d * ORDER_RADIX_BITS)
        if V == 0 or c[(k[0] >> shift) & mask] == V:
            continue
        total = 0
        for j in range(nb_):
            n_j = c[j]
            c[j] = total
            total += n_j
        for i in range(V):
            x = k[i]
            j = (x >> shift) & mask
            at = c[j]
            c[j] = at + 1
            idx_next[at] = idx[i]
            k_next[at] = x
        idx, idx_next = idx_next, idx
        k, k_next = k_next, k
    return idx


@nb.njit(cache=True, inline="always")
def _run_target(slope, sp, sq):
    """``slope * (sp / sq)``, the target ``r/q`` of a run; 0 for a zero slope even where ``sp / sq``
    overflows (a run of subnormal draft masses): the product was ``0 * inf = NaN``, which pooled the
    same way (no kink either) but raised "invalid value" in the Python bodies of small vocabularies."""
    if slope == 0.0:
        return 0.0
    return slope * (sp / sq)


@nb.njit(cache=True, inline="always")
def _pool_runs(ps, qs, a, b, slope, margin, lo, rho, ms, mc, count):
    """Pool the tokens ``a..b-1`` of one hull block into runs of constant target ``r/q`` (the q-weighted
    mean of ``slope * p/q`` over the run), appended to ``lo, rho, ms, mc`` from ``count`` on.

    Above the split (``slope >= 1``) a run grows left to right while its mean stays at least
    ``(1 + margin)`` times the largest ``p/q`` in it (its first token), so ``r >= p`` on every token;
    below it (``slope < 1``) right to left while the mean stays at most ``(1 - margin)`` times the
    smallest (its last token), so ``r <= p``. A single token always qualifies. Returns the new count.
    """
    if b - a == 1:  # one token (the target of a block's only run is never read)
        lo[count] = a
        rho[count] = 0.0
        ms[count] = qs[a]
        mc[count] = 0.0
        return count + 1
    if not slope < np.inf:  # chord block (p = 0 on it): one class, target 0
        s, c = 0.0, 0.0
        for k in range(a, b):
            s, c = neumaier_add(s, c, qs[k])
        lo[count] = a
        rho[count] = 0.0
        ms[count] = s
        mc[count] = c
        return count + 1
    if slope >= 1.0:
        k = a
        while k < b:
            thr = (ps[k] / qs[k]) * (1.0 + margin)
            sp = ps[k]
            s, c = qs[k], 0.0
            j = k + 1
            while j < b and slope * (sp + ps[j]) >= thr * (s + qs[j]):
                sp += ps[j]
                s, c = neumaier_add(s, c, qs[j])
                j += 1
            lo[count] = k
            rho[count] = _run_target(slope, sp, s + c)
            ms[count] = s
            mc[count] = c
            count += 1
            k = j
        return count
    first = count
    e = b
    while e > a:
        thr = (ps[e - 1] / qs[e - 1]) * (1.0 - margin)
        sp = ps[e - 1]
        s, c = qs[e - 1], 0.0
        j = e - 1
        while j > a and slope * (sp + ps[j - 1]) <= thr * (s + qs[j - 1]):
            sp += ps[j - 1]
            s, c = neumaier_add(s, c, qs[j - 1])
            j -= 1
        lo[count] = j
        rho[count] = _run_target(slope, sp, s + c)
        ms[count] = s
        mc[count] = c
        count += 1
        e = j
    i, j = first, count - 1  # found right to left: put them in order
    while i < j:
        lo[i], lo[j] = lo[j], lo[i]
        rho[i], rho[j] = rho[j], rho[i]
        ms[i], ms[j] = ms[j], ms[i]
        mc[i], mc[j] = mc[j], mc[i]
        i += 1
        j -= 1
    return count


#: Rows of the scratch arrays that :func:`chain_prepare` takes (:func:`chain_scratch`): float64 and
#: int64 rows of ``V + 1`` entries for the per-token, per-run and per-unit work (the last float row
#: holds the sort keys), float64 and int64 rows of ``2 V + 2`` for the merge tree.
CHAIN_F_ROWS = 19
CHAIN_I_ROWS = 10
CHAIN_T_ROWS = 7


def chain_scratch(V: int):
    """Scratch arrays for :func:`chain_prepare` at vocabulary sizes up to ``V`` (content unused)."""
    return (
        np.empty((CHAIN_F_ROWS, V + 1)),
        np.empty((CHAIN_I_ROWS, V + 1), dtype=np.int64),
        np.empty((CHAIN_T_ROWS, 2 * V + 2)),
        np.empty(2 * V + 2, dtype=np.int64),
    )


@nb.njit(cache=True)
def chain_prepare(p, q, order, n, margin, fw, iw, tw, tpar):
    """The optimal interval-class rule for i.i.d. drafts (docs/math.md#optimal-verifier-full-v).

    ``order`` sorts :func:`chain_keys` ascending (:func:`chain_order`); ``fw, iw, tw, tpar`` are scratch
    arrays (:func:`chain_scratch`; reused between calls, their content is never read before it is
    written).
    Works on the ``m`` tokens with ``q > 0`` in that order: suffix masses ``R``, the prefix points
    ``(P_k, g_k = 1 - R_k^n)``, their lower convex hull, runs of tokens pooled inside each hull block
    (:func:`_pool_runs`), *units* (maximal groups of runs with no strict concavity between them: one
    class at every level) and, in each block of two or more units, the kinetic chain decomposition
    over the unit boundaries (:func:`_kinetic`).

    Returns ``(cls, tau, ratio, lam, cdf, accept, widest)``: the unit of every token (``-1`` where ``q = 0``),
    the death level of each unit boundary (``tau[u]`` between units ``u - 1`` and ``u``; ``inf``: never;
    ``tau[0]`` and ``tau[-1]`` unused), the exact law of the selected token divided by ``q`` per unit
    (``r = q * ratio[cls]``, integrated over the levels of the rule actually built), the hull slope of
    each unit's block, the running sum of the residual weights ``(p - r)_+`` over the first tokens of
    ``order`` (those with ``q = 0`` and those below the split: the residual's support) and
    ``sum min(p, r)`` (compensated), and the largest number of units in one block.
    """
    V = p.size
    z = 0
    while z < V and q[order[z]] == 0.0:
        z += 1
    m = V - z
    ps = fw[0, :m]
    qs = fw[1, :m]
    R = fw[2, : m + 1]
    G = fw[3, : m + 1]
    P = fw[4, : m + 1]
    s, c = 0.0, 0.0
    R[m] = 0.0
    G[m] = 1.0
    for k in range(m - 1, -1, -1):
        t = order[z + k]
        ps[k] = p[t]
        qs[k] = q[t]
        s, c = neumaier_add(s, c, qs[k])
        R[k] = s + c
        G[k] = 1.0 - int_power(R[k], n)
    G[0] = 0.0
    # prefix p mass and the lower hull of (P_k, G_k) in one forward pass (monotone chain)
    s, c = 0.0, 0.0
    for i in range(z):
        s, c = neumaier_add(s, c, p[order[i]])
    P[0] = s + c
    H = iw[0, : m + 1]
    top = 0
    for k in range(m + 1):
        if k > 0:
            s, c = neumaier_add(s, c, ps[k - 1])
            P[k] = s + c
        while top >= 2:
            i = H[top - 2]
            j = H[top - 1]
            if (G[j] - G[i]) * (P[k] - P[i]) >= (G[k] - G[i]) * (P[j] - P[i]):
                top -= 1
            else:
                break
        H[top] = k
        top += 1
    blocks = top - 1
    # block slopes; the split: the first token of the first block with slope >= 1
    block_lam = fw[8, :blocks]
    split = m
    for h in range(blocks):
        a, b = H[h], H[h + 1]
        dP = P[b] - P[a]
        slope = (G[b] - G[a]) / dP if dP > 0.0 else np.inf
        block_lam[h] = slope
        if slope >= 1.0 and split == m:
            split = a
    cls = np.empty(V, dtype=np.int32)
    cdf = np.empty(z + split)
    run = 0.0
    for i in range(z):
        t = order[i]
        cls[t] = -1
        run += p[t]
        cdf[i] = run
    # block by block (hull vertices never die, so the blocks are independent): runs, units (a new
    # one wherever the target is strictly concave), the chain decomposition, then per token its unit,
    # residual weight (p - r)_+ (running sum in `order`) and min(p, r)
    run_lo = iw[1, : m + 1]
    run_rho = fw[5, :m]
    run_ms = fw[6, :m]
    run_mc = fw[7, :m]
    ulo = iw[3, : m + 1]
    ums = fw[9, :m]
    umc = fw[10, :m]
    ulam = fw[11, :m]
    slack = fw[12, : m + 1]
    tau = fw[16, : m + 1]
    ratio = fw[17, :m]
    nu = 0
    widest = 1
    a_s, a_c = 0.0, 0.0
    for h in range(blocks):
        a, b = H[h], H[h + 1]
        slope = block_lam[h]
        u0 = nu
        tau[u0] = np.inf  # a hull vertex: never dies
        if b - a == 1:
            ulo[nu] = a
            ums[nu] = qs[a]
            umc[nu] = 0.0
            ulam[nu] = slope
            nu += 1
        else:
            nr = _pool_runs(ps, qs, a, b, slope, margin, run_lo, run_rho, run_ms, run_mc, 0)
            for j in range(nr):
                if j > 0:
                    d = run_rho[j - 1] - run_rho[j]
                    if not d > 0.0:  # no kink (NaN from inf - inf: none either): same unit
                        ums[nu - 1], umc[nu - 1] = neumaier_add(ums[nu - 1], umc[nu - 1], run_ms[j])
                        umc[nu - 1] += run_mc[j]
                        continue
                    slack[nu] = d
                    tau[nu] = np.inf
                ulo[nu] = run_lo[j]
                ums[nu] = run_ms[j]
                umc[nu] = run_mc[j]
                ulam[nu] = slope
                nu += 1
        ulo[nu] = b
        widest = max(widest, nu - u0)
        if nu - u0 == 1:  # one class at every level
            ratio[u0] = class_secant(R[a], R[b], ums[u0] + umc[u0], n)
        else:
            _kinetic(R, ulo, ums, umc, slack, u0, nu, n, tau, ratio, fw, iw, tw, tpar)
        for u in range(u0, nu):
            f = ratio[u]
            for k in range(ulo[u], ulo[u + 1]):
                cls[order[z + k]] = u
                r = qs[k] * f
                if ps[k] > r:
                    a_s, a_c = neumaier_add(a_s, a_c, r)
                    if k < split:  # from the split on r >= p but for rounding: no residual weight
                        run += ps[k] - r
                else:
                    a_s, a_c = neumaier_add(a_s, a_c, ps[k])
                if k < split:
                    cdf[z + k] = run
    tau[nu] = np.inf
    return cls, tau[: nu + 1].copy(), ratio[:nu].copy(), ulam[:nu].copy(), cdf, a_s + a_c, widest


@nb.njit(cache=True)
def _kinetic(R, ulo, ums, umc, slack, u0, u1, n, tau, ratio, fw, iw, tw, tpar):
    """Chain decomposition of one hull block, units ``u0..u1-1`` (docs/math.md#optimal-verifier-full-v).

    Every boundary between two of its units is alive with concavity slack ``slack[u]``; it dies when
    its slack, falling at rate ``sigma(left class) - sigma(right class)``, reaches 0, and its two
    classes merge (an indexed min-heap of death levels). Writes the death levels into ``tau[u0+1:u1]``
    (``inf``: not before level 1) and the exact ``r/q`` of each unit, summed down the merge tree, into
    ``ratio[u0:u1]``. Local index ``i`` stands for unit (or boundary) ``u0 + i``.
    """
    L = u1 - u0
    rate = fw[13, : L + 1]
    tlast = fw[14, : L + 1]
    ht = fw[15, : L + 1]
    prev = iw[5, : L + 1]
    nxt = iw[6, : L + 1]
    node_at = iw[7, : L + 1]
    hk = iw[8, : L + 1]
    where = iw[9, : L + 1]
    n_born = tw[0]
    n_died = tw[1]
    n_sig = tw[2]
    n_ms = tw[3]
    n_mc = tw[4]
    acc_s = tw[5]
    acc_c = tw[6]
    n_par = tpar
    for i in range(L + 1):
        prev[i] = i - 1
        nxt[i] = i + 1
        where[i] = -1
        rate[i] = 0.0
        tlast[i] = 0.0
    for i in range(L):
        u = u0 + i
        n_born[i] = 0.0
        n_died[i] = 1.0
        n_ms[i] = ums[u]
        n_mc[i] = umc[u]
        n_sig[i] = class_secant(R[ulo[u]], R[ulo[u + 1]], ums[u] + umc[u], n)
        n_par[i] = -1
        node_at[i] = i
    nodes = L
    size = 0
    for i in range(1, L):
        rate[i] = n_sig[i - 1] - n_sig[i]
        if rate[i] > 0.0:
            size = _heap_set(ht, hk, where, size, i, slack[u0 + i] / rate[i])
    while size > 0:
        t = ht[0]
        k = hk[0]
        if t >= 1.0:
            break
        size = _heap_remove(ht, hk, where, size, 0)
        t = max(t, 0.0)
        tau[u0 + k] = t
        a = prev[k]
        b = nxt[k]
        nxt[a] = b
        if b <= L:
            prev[b] = a
        left = node_at[a]
        right = node_at[k]
        n_died[left] = t
        n_died[right] = t
        nd = nodes
        nodes += 1
        n_born[nd] = t
        n_died[nd] = 1.0
        n_ms[nd], n_mc[nd] = neumaier_add(n_ms[left], n_mc[left] + n_mc[right], n_ms[right])
        n_sig[nd] = class_secant(R[ulo[u0 + a]], R[ulo[u0 + b]], n_ms[nd] + n_mc[nd], n)
        n_par[nd] = -1
        n_par[left] = nd
        n_par[right] = nd
        node_at[a] = nd
        node_at[k] = -1
        for e in (a, b):
            if e <= 0 or e >= L:
                continue
            sl = max(slack[u0 + e] - rate[e] * (t - tlast[e]), 0.0)
            slack[u0 + e] = sl
            tlast[e] = t
            rate[e] = n_sig[node_at[prev[e]]] - n_sig[node_at[e]]
            if rate[e] > 0.0:
                size = _heap_set(ht, hk, where, size, e, t + sl / rate[e])
            elif where[e] >= 0:
                size = _heap_remove(ht, hk, where, size, where[e])
    # r/q of a unit: sum over the classes containing it of (level length) x (secant), top-down
    for i in range(nodes - 1, -1, -1):
        w = max(n_died[i] - n_born[i], 0.0) * n_sig[i]
        par = n_par[i]
        if par >= 0:
            acc_s[i], acc_c[i] = neumaier_add(acc_s[par], acc_c[par], w)
        else:
            acc_s[i], acc_c[i] = w, 0.0
    for i in range(L):
        ratio[u0 + i] = acc_s[i] + acc_c[i]


@nb.njit(cache=True)
def max_tree(tau):
    """A segment tree of ``tau`` for range maxima: ``(tree, size)``, leaves at ``tree[size + k]``."""
    size = 1
    while size < tau.size:
        size *= 2
    tree = np.full(2 * size, -np.inf)
    tree[size : size + tau.size] = tau
    for i in range(size - 1, 0, -1):
        tree[i] = max(tree[2 * i], tree[2 * i + 1])
    return tree, size


@nb.njit(cache=True, inline="always")
def range_max(tree, size, lo, hi):
    """max of ``tau[lo:hi]`` (``-inf`` when empty): from the segment tree of :func:`max_tree`, or, with
    ``size == 0``, by scanning ``tree``, which is then ``tau`` itself (it stops at the first ``inf``, a
    block end, so the scan is never longer than the largest block counted in units)."""
    out = -np.inf
    if size == 0:
        for k in range(lo, hi):
            v = tree[k]
            if v > out:
                out = v
                if v == np.inf:
                    break
        return out
    lo += size
    hi += size
    while lo < hi:
        if lo & 1:
            out = max(out, tree[lo])
            lo += 1
        if hi & 1:
            hi -= 1
            out = max(out, tree[hi])
        lo >>= 1
        hi >>= 1
    return out


@nb.njit(cache=True)
def join_levels(pos, tree, size):
    """Level from which each draft shares the class of the lowest draft: the largest death level of
    the kinks between them (0 for the lowest draft and its repeats; ``inf``: never)."""
    lowest = pos.min()
    out = np.empty(pos.size)
    for i in range(pos.size):
        out[i] = range_max(tree, size, lowest + 1, pos[i] + 1) if pos[i] > lowest else 0.0
    return out


@nb.njit(cache=True)
def select_at_level(pos, tree, size, t):
    """Index (in draw order) of the draft the rule selects at level ``t``: the first draft, in draw
    order, of the lowest class that the drafts meet."""
    join = join_levels(pos, tree, size)
    for i in range(pos.size):
        if join[i] <= t:
            return i
    return int(np.argmin(pos))  # not reached: the lowest draft joins at level 0


@nb.njit(cache=True)
def selection_law(pos, tree, size):
    """P(the rule selects draft i), i in draw order, over a uniform level in [0, 1) (exact)."""
    join = join_levels(pos, tree, size)
    out = np.zeros(pos.size)
    levels = np.unique(np.minimum(join, 1.0))
    for j in range(levels.size):
        lo = levels[j]
        if lo >= 1.0:
            break
        hi = levels[j + 1] if j + 1 < levels.size else 1.0
        for i in range(pos.size):
            if join[i] <= lo:
                out[i] += hi - lo
                break
    return out


@nb.njit(cache=True)
def verify_draft_set(drafts, cls, tree, size, p, q, ratio, t, u):
    """One verification step up to the residual draw: the selected draft if accepted, else -1.

    Returns ``-2`` when a draft index is outside [0, V) or has ``q = 0`` (``cls < 0``): the caller
    re-validates through the general check, which raises the right message.
    """
    V = cls.size
    dp = np.empty(drafts.size, dtype=np.int64)
    for i in range(drafts.size):
        x = drafts[i]
        if x < 0 or x >= V or cls[x] < 0:
            return -2
        dp[i] = cls[x]
    y = drafts[select_at_level(dp, tree, size, t)]
    r = q[y] * ratio[cls[y]]
    accept = 1.0 if p[y] >= r else p[y] / r
    return y if u < accept else -1


@nb.njit(cache=True)
def single_draft_prepare(p, q):
    """``n = 1``: every rule picks the one draft, ``r = q``. The outputs of :func:`chain_prepare`
    with one unit (tokens in index order)."""
    V = p.size
    cls = np.empty(V, dtype=np.int32)
    cdf = np.empty(V)
    run = 0.0
    a_s, a_c = 0.0, 0.0
    for i in range(V):
        cls[i] = 0 if q[i] > 0.0 else -1
        if p[i] > q[i]:
            run += p[i] - q[i]
            a_s, a_c = neumaier_add(a_s, a_c, q[i])
        else:
            a_s, a_c = neumaier_add(a_s, a_c, p[i])
        cdf[i] = run
    tau = np.full(2, np.inf)
    return cls, tau, np.ones(1), np.ones(1), cdf, a_s + a_c, 1
