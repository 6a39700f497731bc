"""The full-vocabulary optimal verifier for i.i.d. drafts (docs/math.md#optimal-verifier-full-v): the
lower convex hull of the sorted prefix points, its chain decomposition into interval-class rules,
and the per-draft-set selection by a range maximum.

Tokens with ``q > 0`` are sorted by ``q/p`` from LOW to high (the reverse of the dual's order), so
position ``x`` of a draft is uniform on [0, 1] and ``g(x) = 1 - (1 - x)^n`` is the probability that
the draft set meets the first ``x`` of mass. A *kink* ``k`` (1 <= k < m) separates tokens ``k - 1``
and ``k``; ``tau[k]`` is the level at which it dies (its two classes merge): at a level ``t`` the
classes are the runs between the kinks with ``tau > t``.
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
    return lead * (-math.expm1(n * math.log1p(-min(d / A, 1.0)))) / d


@nb.njit(cache=True)
def lower_hull(P, G):
    """Vertex indices (increasing, first 0, last ``P.size - 1``) of the lower convex hull of the
    points ``(P[k], G[k])``, ``P`` non-decreasing (monotone chain; collinear points dropped)."""
    m = P.size
    H = np.empty(m, dtype=np.int64)
    top = 0
    for k in range(m):
        while top >= 2:
            i = H[top - 2]
            j = H[top - 1]
            if (G[j] - G[i]) * (P[k] - P[i]) >= (G[k] - G[i]) * (P[j] - P[i]):
                top -= 1
            else:
                break
        H[top] = k
        top += 1
    return H[:top].copy()


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


@nb.njit(cache=True)
def chain_plan(ps, qs, R, P0, n):
    """The optimal interval-class rule for i.i.d. drafts, tokens sorted by ``q/p`` ascending (q > 0).

    ``R[k]`` is the q mass of tokens ``k..`` (and of no token with q = 0), summed directly; ``P0`` the
    p mass of the tokens with q = 0 (left out here). Returns ``(tau, ratio, lam)``: the death level
    of every kink (``tau[0]``, ``tau[m]`` unused), the exact law of the selected token divided by q
    (``r = q * ratio``, integrated over the levels of the rule actually built, whatever rounding did
    to the levels) and the hull slope of each token's block.
    """
    m = ps.size
    P = np.empty(m + 1)
    G = np.empty(m + 1)
    s, c = P0, 0.0
    P[0] = P0
    G[0] = 0.0
    for k in range(m):
        s, c = neumaier_add(s, c, ps[k])
        P[k + 1] = s + c
        G[k + 1] = 1.0 - R[k + 1] ** n
    H = lower_hull(P, G)
    immortal = np.zeros(m + 1, dtype=np.bool_)
    lam = np.empty(m)
    rho = np.empty(m)  # target law / q: lam p / q, constant (0) where lam is infinite (chord)
    for h in range(H.size - 1):
        a, b = H[h], H[h + 1]
        immortal[a] = True
        dP = P[b] - P[a]
        slope = (G[b] - G[a]) / dP if dP > 0.0 else np.inf
        for k in range(a, b):
            lam[k] = slope
            if slope < np.inf and qs[k] > 0.0:
                rho[k] = slope * (ps[k] / qs[k])
                if not rho[k] < np.inf:
                    rho[k] = np.inf
            else:
                rho[k] = 0.0
    immortal[m] = True
    immortal[0] = True
    # kinks: alive ones form a linked list; dead-at-start ones (non-concave or flat) get tau = 0
    tau = np.full(m + 1, np.inf)
    slack = np.zeros(m + 1)
    alive = np.zeros(m + 1, dtype=np.bool_)
    for k in range(m + 1):
        if immortal[k]:
            alive[k] = True
        else:
            d = rho[k - 1] - rho[k]
            if d > 0.0:  # (NaN from inf - inf: merged)
                alive[k] = True
                slack[k] = d
            else:
                tau[k] = 0.0
    prev = np.empty(m + 1, dtype=np.int64)
    nxt = np.empty(m + 1, dtype=np.int64)
    last = 0
    for k in range(1, m + 1):
        if alive[k]:
            prev[k] = last
            nxt[last] = k
            last = k
    nxt[m] = m + 1
    prev[0] = -1
    # merge-tree nodes: classes [lo, hi), born, died, secant, parent; node of the class starting at a
    cap = 2 * m + 2
    n_lo = np.empty(cap, dtype=np.int64)
    n_born = np.empty(cap)
    n_died = np.empty(cap)
    n_sig = np.empty(cap)
    n_mass = np.empty(cap)
    n_par = np.full(cap, -1, dtype=np.int64)
    node_at = np.full(m + 1, -1, dtype=np.int64)
    leaf = np.empty(m, dtype=np.int64)
    nodes = 0
    a = 0
    while a < m:
        b = nxt[a]
        ms, mc = 0.0, 0.0
        for k in range(a, b):
            ms, mc = neumaier_add(ms, mc, qs[k])
            leaf[k] = nodes
        n_lo[nodes] = a
        n_born[nodes] = 0.0
        n_died[nodes] = 1.0
        n_mass[nodes] = ms + mc
        n_sig[nodes] = class_secant(R[a], R[b], ms + mc, n)
        node_at[a] = nodes
        nodes += 1
        a = b
    rate = np.zeros(m + 1)
    tlast = np.zeros(m + 1)
    ht = np.empty(m + 1)
    hk = np.empty(m + 1, dtype=np.int64)
    where = np.full(m + 1, -1, dtype=np.int64)
    size = 0
    for k in range(1, m):
        if alive[k] and not immortal[k]:
            rate[k] = n_sig[node_at[prev[k]]] - n_sig[node_at[k]]
            if rate[k] > 0.0:
                size = _heap_set(ht, hk, where, size, k, slack[k] / rate[k])
    while size > 0:
        t = ht[0]
        k = hk[0]
        if t >= 1.0:
            break
        size = _heap_remove(ht, hk, where, size, 0)
        t = max(t, 0.0)
        tau[k] = t
        alive[k] = False
        a = prev[k]
        b = nxt[k]
        nxt[a] = b
        if b <= m:
            prev[b] = a
        left = node_at[a]
        right = node_at[k]
        n_died[left] = t
        n_died[right] = t
        nd = nodes
        nodes += 1
        n_lo[nd] = a
        n_born[nd] = t
        n_died[nd] = 1.0
        n_mass[nd] = n_mass[left] + n_mass[right]
        n_sig[nd] = class_secant(R[a], R[b], n_mass[nd], n)
        n_par[left] = nd
        n_par[right] = nd
        node_at[a] = nd
        node_at[k] = -1
        for e in (a, b):
            if e <= 0 or e >= m or immortal[e] or not alive[e]:
                continue
            slack[e] = max(slack[e] - rate[e] * (t - tlast[e]), 0.0)
            tlast[e] = t
            rate[e] = n_sig[node_at[prev[e]]] - n_sig[node_at[e]]
            if rate[e] > 0.0:
                size = _heap_set(ht, hk, where, size, e, t + slack[e] / rate[e])
            elif where[e] >= 0:
                size = _heap_remove(ht, hk, where, size, where[e])
    # ratio of a token: sum over the classes containing it of (level length) x (secant), top-down
    acc_s = np.zeros(nodes)
    acc_c = np.zeros(nodes)
    for i in range(nodes - 1, -1, -1):
        w = max(n_died[i] - n_born[i], 0.0) * n_sig[i]
        par = n_par[i]
        if par >= 0:
            acc_s[i], acc_c[i] = neumaier_add(acc_s[par], acc_c[par], w)
        else:
            acc_s[i], acc_c[i] = w, 0.0
    ratio = np.empty(m)
    for k in range(m):
        ratio[k] = acc_s[leaf[k]] + acc_c[leaf[k]]
    return tau, ratio, lam


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
    """max of ``tau[lo:hi]`` (``-inf`` when empty)."""
    out = -np.inf
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
def verify_draft_set(drafts, pos, tree, size, p, r, t, u):
    """One verification step up to the residual draw: the selected draft if accepted, else -1.

    Returns ``-2`` when a draft index is outside [0, V) or has ``q = 0`` (``pos < 0``): the caller
    re-validates through the general check, which raises the right message.
    """
    V = pos.size
    dp = np.empty(drafts.size, dtype=np.int64)
    for i in range(drafts.size):
        x = drafts[i]
        if x < 0 or x >= V or pos[x] < 0:
            return -2
        dp[i] = pos[x]
    y = drafts[select_at_level(dp, tree, size, t)]
    ratio = 1.0 if p[y] >= r[y] else p[y] / r[y]
    return y if u < ratio else -1
