"""Kernels of the verifiers: RSD for n = 2 in O(V log V), RSD rejection paths, naive inclusion probabilities,
the lookahead tree verifier's acceptance tables.

Every kernel is ``@njit(cache=True)`` with int64 indices; its slow pure-numpy twin (suffix ``_slow``)
is a test oracle in ``tests/oracles.py``. Set ``NUMBA_DISABLE_JIT=1`` to run the kernels as Python.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .._config import THETA_SAFE
from .common import logaddexp, neumaier_add

__all__ = [
    "rsd2_rejection",
    "rsd2_rejection_keyed",
    "rsd_path_tables",
    "rsd_path_mc",
    "sequential_draft_mass",
    "cp_inclusion",
    "ratio_bin_sums",
]


# ------------------------------------------------------------------ RSD, n = 2, O(V log V)
@njit(cache=True)
def rsd2_rejection(p, q, rest):
    """Rejection probability of recursive speculative decoding with two sequential drafts.

    .. math:: 1 - \\alpha = \\sum_{x:\\,q_x > p_x} (q_x - p_x)\\, G_x, \\qquad
              G_x = \\sum_y \\bigl(r'_y - q_y / (1 - q_x)\\bigr)_+,\\quad
              r' = \\frac{(p - q)_+}{\\sum (p - q)_+}

    ``G_x = 1 - beta(r', q without x renormalised)`` because ``r'_x = 0`` for every rejected ``x``.
    With the tokens sorted by ``r'/q`` (descending), ``G_x = R_k - Q_k / (1 - q_x)`` over the ``k``
    tokens with ``r'_y (1 - q_x) > q_y`` (prefix sums, compensated), found by binary search. The
    comparison runs on ``log r' - log q`` against ``-log(1 - q_x)``, and ``Q_k`` is divided by
    ``1 - q_x``: neither ``1 / (1 - q_x)`` nor ``r'/q`` is ever formed, so a subnormal ``1 - q_x`` or
    ``q_y`` cannot overflow (``Q_k / (1 - q_x) < R_k <= 1`` for the tokens counted). O(V log V).

    Parameters
    ----------
    p, q : float64 arrays, shape (V,)
        Target and draft distributions (summing to one).
    rest : float64 array, shape (V,)
        ``1 - q_x`` for each token, computed as a direct sum over the complement.
    """
    V = p.size
    tv = 0.0
    for i in range(V):
        d = p[i] - q[i]
        if d > 0.0:
            tv += d
    m = 0
    for i in range(V):
        if p[i] > q[i]:
            m += 1
    idx = np.empty(m, dtype=np.int64)
    key = np.empty(m, dtype=np.float64)
    j = 0
    for i in range(V):
        if p[i] > q[i]:
            idx[j] = i
            key[j] = math.log((p[i] - q[i]) / tv) - math.log(q[i]) if q[i] > 0.0 else np.inf  # log(r'/q)
            j += 1
    order = np.argsort(key)
    return rsd2_rejection_keyed(p, q, rest, idx[order], key[order], tv)


@njit(cache=True)
def _count_above(skey, tau, start):
    """``#{j : skey[j] > tau}`` for ascending ``skey``, by galloping from index ``start``: O(log d) for
    a threshold ``d`` keys away from ``skey[start]`` (most thresholds of :func:`rsd2_rejection_keyed`
    lie just above 0)."""
    m = skey.size
    lo = start  # invariant: the first key above tau lies in [lo, hi]
    hi = m
    if start < m and skey[start] > tau:  # go down
        step = 1
        hi = start
        lo = start
        while True:
            j = start - step
            if j < 0:
                lo = 0
                break
            if skey[j] <= tau:
                lo = j + 1
                break
            hi = j
            step *= 2
    else:
        step = 1
        lo = start + 1 if start < m else m
        while True:
            j = start + step
            if j >= m:
                hi = m
                break
            if skey[j] > tau:
                hi = j
                break
            lo = j + 1
            step *= 2
    while lo < hi:
        mid = (lo + hi) // 2
        if skey[mid] > tau:
            hi = mid
        else:
            lo = mid + 1
    return m - lo


@njit(cache=True)
def rsd2_rejection_keyed(p, q, rest, idx, key, tv):
    """:func:`rsd2_rejection` from the tokens ``idx`` with ``p > q``, their keys ``log(r'/q)`` (``inf``
    where ``q = 0``) in ascending order up to rounding, and ``tv = sum (p - q)_+``. An evaluation plan
    passes them in its one order (keys computed vectorised); any pair that rounding left out of order is
    swapped by an insertion pass (O(m) on a sorted input; a merge sort when far from sorted), so the
    searches below always see sorted keys.
    """
    V = p.size
    if tv <= 0.0:
        return 0.0
    m = idx.size
    skey = key.copy()
    sidx = idx.copy()
    moves = 0
    for j in range(1, m):  # stable insertion: equal keys keep their order
        kj = skey[j]
        i = sidx[j]
        t = j
        while t > 0 and skey[t - 1] > kj:
            skey[t] = skey[t - 1]
            sidx[t] = sidx[t - 1]
            t -= 1
        skey[t] = kj
        sidx[t] = i
        moves += j - t
        if moves > 8 * m + 64:  # far from sorted: sort outright
            perm = np.argsort(key, kind="mergesort")
            skey = key[perm]
            sidx = idx[perm]
            break
    R = np.zeros(m + 1, dtype=np.float64)  # R[k]: r' over the k largest keys
    Q = np.zeros(m + 1, dtype=np.float64)
    sr = 0.0
    cr = 0.0
    sq = 0.0
    cq = 0.0
    for k in range(m):
        i = sidx[m - 1 - k]
        sr, cr = neumaier_add(sr, cr, (p[i] - q[i]) / tv)
        sq, cq = neumaier_add(sq, cq, q[i])
        R[k + 1] = sr + cr
        Q[k + 1] = sq + cq
    start = np.searchsorted(skey, 0.0, side="right")  # thresholds -log(1 - q_x) are >= 0, mostly ~q_x
    total = 0.0
    for x in range(V):
        w = q[x] - p[x]
        if w <= 0.0 or rest[x] <= 0.0:  # rest = 0: q one-hot at x, no second draft to reject
            continue
        k = _count_above(skey, -math.log(rest[x]), start)  # keys above log(1/(1-q_x))
        g = R[k] - Q[k] / rest[x]
        if g > 0.0:
            total += w * g
    return total


# ------------------------------------------------------------------ RSD Monte Carlo over draft tuples
# ------------------------------------------------------------------ RSD along rejection paths
#
# With t_y = p_y / q_y, RSD's residual after k - 1 rejections is r_k(y) = (p_y - theta_k q_y)_+ / E(theta_k),
# E(theta) = sum_y (p_y - theta q_y)_+, theta_1 = 0 and theta_{k+1} = theta_k + E(theta_k) / M_k, where M_k is
# the q-mass not yet drafted. Step k rejects with probability Z_k = E(theta_{k+1}) / E(theta_k), and the
# rejected token is distributed as w_k(y) = (min(theta_{k+1} q_y - p_y, (theta_{k+1} - theta_k) q_y))_+ on the
# tokens not yet drafted. Sampling the rejected tokens from w_k, the product of the Z_k telescopes:
#     P(all n steps reject) = E[ E(theta_{n+1}) ],
# an unbiased estimate per rejection path, costing O(n log V) with prefix sums over tokens sorted by t.


def rsd_path_tables(p, q, n):
    """Sorted tables for :func:`rsd_path_mc` (tokens with p = q = 0 dropped; ascending ``t = p/q``).

    Returns ``(t, ps, qs, Pa, Qa, Ps, Qs, atoms, rest_q)``. The ``n`` most likely draft tokens are
    *atoms*: drafts are mostly among them and their mass would swamp the others' in prefix sums, so
    ``Pa``/``Qa`` (prefix sums) leave them out and they are handled one by one; ``rest_q`` is the
    q-mass of the other tokens (a direct sum). ``Ps``/``Qs`` are suffix sums over all tokens.
    """
    keep = (p > 0) | (q > 0)
    idx = np.flatnonzero(keep)
    qk = q[idx]
    t = np.full(idx.size, np.inf)  # q = 0: never drafted, above every theta
    pos = qk > 0
    with np.errstate(over="ignore"):
        t[pos] = np.minimum(p[idx][pos] / qk[pos], np.finfo(np.float64).max)  # subnormal q: finite
    order = np.argsort(t, kind="stable")
    idx, t = idx[order], t[order]
    ps, qs = p[idx], q[idx]
    L = min(max(n, 1), idx.size)
    atoms = np.sort(np.argsort(-qs, kind="stable")[:L]).astype(np.int64)
    ps_ex, qs_ex = ps.copy(), qs.copy()
    ps_ex[atoms] = 0.0
    qs_ex[atoms] = 0.0
    Pa = np.concatenate([[0.0], np.cumsum(ps_ex)])
    Qa = np.concatenate([[0.0], np.cumsum(qs_ex)])
    Ps = np.concatenate([np.cumsum(ps[::-1])[::-1], [0.0]])
    Qs = np.concatenate([np.cumsum(qs[::-1])[::-1], [0.0]])
    return t, ps, qs, Pa, Qa, Ps, Qs, atoms, float(qs_ex.sum())


@njit(cache=True)
def _excess(t, Ps, Qs, theta):
    """E(theta) = sum_{t_y > theta} (p_y - theta q_y), O(log V).

    ``theta = inf`` (a step ``E / M`` that overflowed: the q-mass ``M`` not yet drafted is subnormal)
    is the limit: only tokens with ``q = 0`` (``t = inf``) keep residual mass.
    """
    if theta == np.inf:
        return Ps[np.searchsorted(t, np.inf, side="left")]
    k = np.searchsorted(t, theta, side="right")
    e = Ps[k] - theta * Qs[k]
    return e if e > 0.0 else 0.0


@njit(cache=True)
def _weight(ps, qs, j, theta, theta_next):
    """w(y) = (min(theta_next q_y - p_y, (theta_next - theta) q_y))_+ at sorted position j."""
    w = theta_next * qs[j] - ps[j]
    d = (theta_next - theta) * qs[j]
    if d < w:
        w = d
    return w if w > 0.0 else 0.0


@njit(cache=True)
def _member(j, arr, count):
    for i in range(count):
        if arr[i] == j:
            return True
    return False


@njit(cache=True)
def _undrafted_mass(qs, atoms, rest_q, drawn, nd):
    """q-mass not yet drafted: atoms one by one, the others as ``rest_q`` minus their drafts."""
    m = rest_q
    for i in range(nd):
        if not _member(drawn[i], atoms, atoms.size):
            m -= qs[drawn[i]]
    if m < 1e-6 * rest_q:  # drafts took nearly all the non-atom mass: re-sum it directly
        m = 0.0
        for j in range(qs.size):
            if not _member(j, atoms, atoms.size) and not _member(j, drawn, nd):
                m += qs[j]
    for i in range(atoms.size):
        if not _member(atoms[i], drawn, nd):
            m += qs[atoms[i]]
    return m


@njit(cache=True)
def _draw_rejected(t, ps, qs, Pa, Qa, atoms, drawn, nd, theta, theta_next):
    """One draw from w(y) on the tokens not in ``drawn[:nd]`` (sorted positions); -1 if all are 0."""
    m = t.size
    delta = theta_next - theta
    k1 = np.searchsorted(t, theta, side="right")  # t <= theta: weight delta * q
    k2 = np.searchsorted(t, theta_next, side="left")  # theta < t < theta_next: theta_next q - p
    wa = 0.0
    for i in range(atoms.size):
        if not _member(atoms[i], drawn, nd):
            wa += _weight(ps, qs, atoms[i], theta, theta_next)
    w1 = delta * Qa[k1]
    w2 = theta_next * (Qa[k2] - Qa[k1]) - (Pa[k2] - Pa[k1])
    if w2 < 0.0:
        w2 = 0.0
    total = wa + w1 + w2
    if total > 0.0:
        for _ in range(64):  # rejection of drafted non-atom tokens: exact, usually one round
            v = np.random.random() * total
            if v < wa:
                last = -1
                for i in range(atoms.size):
                    a = atoms[i]
                    if _member(a, drawn, nd):
                        continue
                    w = _weight(ps, qs, a, theta, theta_next)
                    if w > 0.0:
                        last = a
                        if v < w:
                            return a
                        v -= w
                if last >= 0:
                    return last
                continue
            v -= wa
            if v < w1:
                j = np.searchsorted(Qa[1 : k1 + 1], v / delta, side="right")
                if j >= k1:
                    j = k1 - 1
            else:
                v -= w1
                lo = k1
                hi = k2 - 1
                while lo < hi:  # smallest j with theta_next (Qa[j+1]-Qa[k1]) - (Pa[j+1]-Pa[k1]) > v
                    mid = (lo + hi) // 2
                    if theta_next * (Qa[mid + 1] - Qa[k1]) - (Pa[mid + 1] - Pa[k1]) > v:
                        hi = mid
                    else:
                        lo = mid + 1
                j = lo
                if j < k1 or j >= k2:
                    continue
            if j < 0 or _member(j, atoms, atoms.size) or _member(j, drawn, nd):
                continue
            if _weight(ps, qs, j, theta, theta_next) > 0.0:
                return j
    # exact O(V) fallback (drafted tokens hold nearly all the weight, or rounding)
    tot = 0.0
    for j in range(m):
        if not _member(j, drawn, nd):
            tot += _weight(ps, qs, j, theta, theta_next)
    if tot <= 0.0:
        return -1
    v = np.random.random() * tot
    acc = 0.0
    last = -1
    for j in range(m):
        if _member(j, drawn, nd):
            continue
        w = _weight(ps, qs, j, theta, theta_next)
        if w > 0.0:
            last = j
            acc += w
            if acc > v:
                return j
    return last


@njit(cache=True)
def _explicit_rejection(ps, qs, drawn, nd, theta, e, mass, steps):
    """``E(theta_{n+1})`` from the current state, with the residuals as explicit arrays: O(V) a step.

    The state after ``nd`` rejected drafts: ``r = (p - theta q)_+ / e``, ``s = q`` on the tokens not
    yet drafted divided by ``mass``. Each of the remaining ``steps`` steps multiplies ``e`` by its
    rejection probability ``Z = sum (r - s)_+``; between steps a rejected token is drawn with
    probability ``(s_x - r_x)_+ / Z`` and ``r, s`` are updated as RSD does. Used only where the theta
    form would overflow (a subnormal undrafted mass).
    """
    V = ps.size
    r = np.empty(V)
    sv = np.empty(V)
    live = np.ones(V, dtype=np.bool_)
    for i in range(nd):
        live[drawn[i]] = False
    for i in range(V):
        d = ps[i] - theta * qs[i]
        r[i] = d / e if d > 0.0 else 0.0
        sv[i] = qs[i] / mass if live[i] else 0.0
    for step in range(steps):
        z = 0.0
        for i in range(V):
            d = r[i] - sv[i]
            if d > 0.0:
                z += d
        e *= z
        if e <= 0.0 or step == steps - 1:
            break
        v = np.random.random() * z  # the rejected draft: P(x) = (s_x - r_x)_+ / Z
        x = -1
        for i in range(V):
            d = sv[i] - r[i]
            if d > 0.0:
                x = i
                if v < d:
                    break
                v -= d
        for i in range(V):
            d = r[i] - sv[i]
            r[i] = d / z if d > 0.0 else 0.0
        sv[x] = 0.0
        left = 0.0
        for i in range(V):
            left += sv[i]
        for i in range(V):
            sv[i] /= left
    return e


@njit(cache=True)
def rsd_path_mc(t, ps, qs, Pa, Qa, Ps, Qs, atoms, rest_q, n, samples, seed):
    """Per-sample P(accepted) estimates of RSD along sampled rejection paths (see the block comment).

    Each estimate is ``1 - E(theta_{n+1})`` for one path of ``n - 1`` rejected tokens drawn from
    ``w_1, ..., w_{n-1}``; its mean is the exact acceptance. Uses numba's generator seeded with
    ``seed``. Complexity O(samples n (n + log V)), plus an O(V) fallback in degenerate steps; a path
    whose undrafted mass becomes subnormal continues with explicit residuals
    (:func:`_explicit_rejection`, O(V) a step).
    """
    np.random.seed(seed)
    out = np.empty(samples, dtype=np.float64)
    drawn = np.empty(max(n, 1), dtype=np.int64)
    for s in range(samples):
        theta = 0.0
        e = _excess(t, Ps, Qs, 0.0)
        mass = _undrafted_mass(qs, atoms, rest_q, drawn, 0)
        nd = 0
        explicit = False
        for k in range(n - 1):
            if e > 0.0 and (mass < 1.0 / THETA_SAFE or theta > THETA_SAFE):
                e = _explicit_rejection(ps, qs, drawn, nd, theta, e, mass, n - k)
                explicit = True
                break
            theta_next = theta + e / mass
            e_next = _excess(t, Ps, Qs, theta_next)
            if e_next <= 0.0:
                e = 0.0
                break
            x = _draw_rejected(t, ps, qs, Pa, Qa, atoms, drawn, nd, theta, theta_next)
            if x < 0:
                e = 0.0
                break
            drawn[nd] = x
            nd += 1
            mass = _undrafted_mass(qs, atoms, rest_q, drawn, nd)
            theta = theta_next
            e = e_next
        if not explicit and e > 0.0 and mass > 0.0:
            if mass < 1.0 / THETA_SAFE or theta > THETA_SAFE:
                e = _explicit_rejection(ps, qs, drawn, nd, theta, e, mass, 1)
            else:
                e = _excess(t, Ps, Qs, theta + e / mass)
        out[s] = 1.0 - e
    return out


# ------------------------------------------------------------------ sequential draft sets, Monte Carlo
@njit(cache=True)
def sequential_draft_mass(p, q, n, samples, seed):
    """Per-sample ``p(S)`` for draft sets ``S`` of ``n`` sequential draws without replacement from q.

    Each draw is an inverse-CDF draw from the full ``q`` (O(log V)), redrawn while it repeats a token
    already drafted (exactly the renormalised law of the rest); after 64 repeats in a row (most of the
    mass already drafted) the draw is made directly from the rest, O(V). Uses numba's generator
    seeded with ``seed``.
    """
    np.random.seed(seed)
    V = q.size
    cdf = np.cumsum(q)
    total = cdf[V - 1]
    last = V - 1
    while last > 0 and q[last] <= 0.0:
        last -= 1
    out = np.empty(samples, dtype=np.float64)
    drawn = np.empty(n, dtype=np.int64)
    for s in range(samples):
        acc = 0.0
        for k in range(n):
            x = -1
            for _ in range(64):
                y = np.searchsorted(cdf, np.random.random() * total, side="right")
                if y > last:
                    y = last
                if not _member(y, drawn, k):
                    x = y
                    break
            if x < 0:  # draw directly from the tokens not yet drafted
                rest = 0.0
                for j in range(V):
                    if not _member(j, drawn, k):
                        rest += q[j]
                v = np.random.random() * rest
                run = 0.0
                for j in range(V):
                    if q[j] > 0.0 and not _member(j, drawn, k):
                        x = j
                        run += q[j]
                        if run > v:
                            break
            drawn[k] = x
            acc += p[x]
        out[s] = acc
    return out


# ------------------------------------------------------------------ conditional Poisson inclusion
@njit(cache=True)
def cp_inclusion(x, n):
    """``pi(y) = x_y e_{n-1}(x without y) / e_n(x)`` for every token, O(n^2 V).

    Prefix and suffix elementary-symmetric tables (``e_j(S + x) = e_j(S) + x e_{j-1}(S)``, non-negative
    terms only) are combined as ``e_{n-1}(x without y) = sum_j e_j(x[:y]) e_{n-1-j}(x[y+1:])``; no
    subtraction, hence no cancellation. The tables hold logarithms: ``e_n`` of many tokens leaves the
    float64 range in both directions (``e_1000`` of 2000 weights up to 1 is up to ~1e600, and ~1e-1000
    for small weights), which gave inf / 0 and a division by zero.
    """
    V = x.size
    lx = np.empty(V)
    for i in range(V):
        lx[i] = math.log(x[i]) if x[i] > 0.0 else -np.inf
    pre = np.full((V + 1, n + 1), -np.inf)
    suf = np.full((V + 1, n + 1), -np.inf)
    pre[0, 0] = 0.0
    suf[V, 0] = 0.0
    for i in range(V):
        pre[i + 1, 0] = 0.0
        for j in range(1, n + 1):
            pre[i + 1, j] = logaddexp(pre[i, j], lx[i] + pre[i, j - 1])
    for i in range(V - 1, -1, -1):
        suf[i, 0] = 0.0
        for j in range(1, n + 1):
            suf[i, j] = logaddexp(suf[i + 1, j], lx[i] + suf[i + 1, j - 1])
    log_en = pre[V, n]
    out = np.zeros(V)
    for y in range(V):
        if x[y] <= 0.0 or log_en == -np.inf:
            continue
        top = -np.inf  # log-sum-exp of pre[y, j] + suf[y + 1, n - 1 - j] over j
        for j in range(n):
            t = pre[y, j] + suf[y + 1, n - 1 - j]
            if t > top:
                top = t
        if top == -np.inf:
            continue
        acc = 0.0
        for j in range(n):
            acc += math.exp(pre[y, j] + suf[y + 1, n - 1 - j] - top)
        v = math.exp(lx[y] + top + math.log(acc) - log_en)
        out[y] = v if v < 1.0 else 1.0
    return out


# ------------------------------------------------------------------ lookahead: acceptance tables
@njit(cache=True)
def ratio_bin_sums(p, rho, grid):
    """``(sum p s, sum p)`` over the tokens in each bin of ``s = rho / p`` (``s = 0`` where ``p = 0``),
    bin ``b`` holding ``grid[b - 1] < s <= grid[b]`` (``np.searchsorted(grid, s, side="left")``, ``grid``
    ascending), ``grid.size + 1`` bins. One pass in token order: the same bits as ``np.bincount`` of
    ``np.searchsorted``'s bins with weights ``p * s`` and ``p`` (which adds in index order too)."""
    m = grid.size
    ps_sums = np.zeros(m + 1)
    p_sums = np.zeros(m + 1)
    for i in range(p.size):
        pi = p[i]
        s = rho[i] / pi if pi > 0.0 else 0.0
        lo, hi = 0, m  # the first grid point >= s
        while lo < hi:
            mid = (lo + hi) // 2
            if grid[mid] < s:
                lo = mid + 1
            else:
                hi = mid
        ps_sums[lo] += pi * s
        p_sums[lo] += pi
    return ps_sums, p_sums
