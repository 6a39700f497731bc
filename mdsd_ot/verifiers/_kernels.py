"""Numba kernels of the verifiers (the only numba code of :mod:`mdsd_ot.verifiers`).

Every kernel is ``@njit(cache=True)`` with int64 indices and has a slow pure-numpy twin (suffix
``_slow``) that the tests use as the oracle. Set ``NUMBA_DISABLE_JIT=1`` to run the kernels as Python.
"""
from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["rsd2_rejection", "rsd2_rejection_slow", "rsd_mc_accept", "rsd_mc_accept_slow"]


# ------------------------------------------------------------------ RSD, n = 2, O(V log V)
@njit(cache=True)
def rsd2_rejection(p, q, rest):
    """Rejection probability of recursive speculative decoding with two sequential drafts.

    .. math:: 1 - \\alpha = \\sum_{x:\\,q_x > p_x} (q_x - p_x)\\, G\\!\\left(\\tfrac{1}{1 - q_x}\\right),
              \\qquad G(c) = \\sum_y (r'_y - c\\, q_y)_+,\\quad r' = \\frac{(p - q)_+}{\\sum (p - q)_+}

    ``G(c) = 1 - beta(r', q without x renormalised)`` because ``r'_x = 0`` for every rejected ``x``.
    ``G`` is piecewise linear in ``c``: with the tokens sorted by ``r'/q`` (descending) it is
    ``R_k - c Q_k`` over the ``k`` tokens with ``r'/q > c`` (prefix sums, compensated), found by binary
    search. Complexity O(V log V).

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
    if tv <= 0.0:
        return 0.0
    # tokens with r' > 0, keyed by r'/q (inf where q = 0)
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
            r = (p[i] - q[i]) / tv
            key[j] = r / q[i] if q[i] > 0.0 else np.inf
            j += 1
    order = np.argsort(key)  # ascending; prefix sums are taken from the top
    skey = np.empty(m, dtype=np.float64)
    R = np.zeros(m + 1, dtype=np.float64)  # R[k]: r' over the k largest keys
    Q = np.zeros(m + 1, dtype=np.float64)
    sr = 0.0
    cr = 0.0
    sq = 0.0
    cq = 0.0
    for k in range(m):
        o = order[m - 1 - k]
        skey[m - 1 - k] = key[o]
        i = idx[o]
        # Neumaier-compensated running sums
        v = (p[i] - q[i]) / tv
        t = sr + v
        if abs(sr) >= abs(v):
            cr += (sr - t) + v
        else:
            cr += (v - t) + sr
        sr = t
        v = q[i]
        t = sq + v
        if abs(sq) >= abs(v):
            cq += (sq - t) + v
        else:
            cq += (v - t) + sq
        sq = t
        R[k + 1] = sr + cr
        Q[k + 1] = sq + cq
    total = 0.0
    for x in range(V):
        w = q[x] - p[x]
        if w <= 0.0:
            continue
        c = 1.0 / rest[x]
        k = m - np.searchsorted(skey, c, side="right")  # number of keys > c
        g = R[k] - c * Q[k]
        if g > 0.0:
            total += w * g
    return total


def rsd2_rejection_slow(p, q):
    """Pure-numpy O(V^2) twin of :func:`rsd2_rejection`: the recursion of MATH.md 5.3 verbatim."""
    d = np.maximum(p - q, 0.0)
    tv = d.sum()
    if tv <= 0.0:
        return 0.0
    r = d / tv
    total = 0.0
    for x in np.flatnonzero(q > p):
        keep = np.arange(q.size) != x
        s = np.where(keep, q, 0.0) / q[keep].sum()
        total += (q[x] - p[x]) * np.maximum(r - s, 0.0).sum()
    return float(total)


# ------------------------------------------------------------------ RSD Monte Carlo, any n
@njit(cache=True)
def rsd_mc_accept(p, q, n, u):
    """Per-sample P(accepted | drafts) of RSD, drafts drawn sequentially without replacement.

    Row ``j`` of ``u`` (shape ``(S, n)``, uniforms in [0, 1)) draws the ``n`` drafts of sample ``j``
    by inverse CDF over the tokens not yet drawn (their mass is re-summed directly, never
    ``1 - q(drawn)``). Given the drafts, the acceptance probability
    ``1 - prod_i (1 - min(1, r_i(x_i) / s_i(x_i)))`` is exact (Rao-Blackwellised over the accept
    coins). Complexity O(S n V).
    """
    V = p.size
    S = u.shape[0]
    out = np.empty(S, dtype=np.float64)
    r = np.empty(V, dtype=np.float64)
    live = np.empty(V, dtype=np.bool_)
    for j in range(S):
        for i in range(V):
            r[i] = p[i]
            live[i] = q[i] > 0.0
        mass = 0.0
        for i in range(V):
            if live[i]:
                mass += q[i]
        alive = 1.0
        for step in range(n):
            # draw x from q restricted to the live tokens
            target = u[j, step] * mass
            acc = 0.0
            x = -1
            last = -1
            for i in range(V):
                if live[i]:
                    last = i
                    acc += q[i]
                    if acc > target:
                        x = i
                        break
            if x < 0:
                x = last
            a = r[x] * mass / q[x]
            if a > 1.0:
                a = 1.0
            alive *= 1.0 - a
            if alive <= 0.0 or step == n - 1:
                break
            # r <- (r - s)_+ normalised, s = q / mass on the live tokens
            tot = 0.0
            for i in range(V):
                d = r[i] - (q[i] / mass if live[i] else 0.0)
                if d > 0.0:
                    r[i] = d
                    tot += d
                else:
                    r[i] = 0.0
            if tot > 0.0:
                for i in range(V):
                    r[i] /= tot
            else:  # rejection had probability zero: keep a valid placeholder law
                alive = 0.0
                break
            live[x] = False
            mass = 0.0
            for i in range(V):
                if live[i]:
                    mass += q[i]
        out[j] = 1.0 - alive
    return out


def rsd_mc_accept_slow(p, q, n, u):
    """Pure-numpy twin of :func:`rsd_mc_accept` (same uniforms, same draws)."""
    S = u.shape[0]
    out = np.empty(S)
    for j in range(S):
        r = p.copy()
        live = q > 0
        alive = 1.0
        for step in range(n):
            w = np.where(live, q, 0.0)
            cdf = np.cumsum(w)
            mass = cdf[-1]
            x = int(np.searchsorted(cdf, u[j, step] * mass, side="right"))
            if x >= q.size:
                x = int(np.flatnonzero(live)[-1])
            a = min(1.0, r[x] * mass / q[x])
            alive *= 1.0 - a
            if alive <= 0.0 or step == n - 1:
                break
            d = np.maximum(r - w / mass, 0.0)
            if d.sum() <= 0.0:
                alive = 0.0
                break
            r = d / d.sum()
            live[x] = False
        out[j] = 1.0 - alive
    return out
