"""Compensated running sums and ``logaddexp``: the building blocks of every kernel family."""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from .._config import INSERTION_MAX


@nb.njit(cache=True, inline="always")
def neumaier_add(s, c, v):
    """One step of Neumaier-compensated summation: returns the new ``(sum, compensation)``."""
    t = s + v
    if abs(s) >= abs(v):
        c += (s - t) + v
    else:
        c += (v - t) + s
    return t, c


@nb.njit(cache=True, inline="always")
def neumaier_add_nonneg(s, c, v):
    """:func:`neumaier_add` for ``s, v >= 0`` (then ``|s| >= |v|`` iff ``s >= v``): the same sum and
    compensation bit for bit, with max/min in place of the comparison of absolute values (no branch
    to mispredict when the terms come in random order)."""
    t = s + v
    c += (max(s, v) - t) + min(s, v)
    return t, c


@nb.njit(cache=True)
def prefix_sums(x):
    """``S[k] = sum(x[:k])`` for k = 0..V (Neumaier-compensated; :func:`prefix_sums_into`)."""
    out = np.empty(x.size + 1)
    prefix_sums_into(x, out)
    return out


@nb.njit(cache=True)
def suffix_sums(x):
    """``R[k] = sum(x[k:])`` for k = 0..V (Neumaier-compensated, summed from the end;
    :func:`suffix_sums_into`)."""
    out = np.empty(x.size + 1)
    suffix_sums_into(x, out)
    return out


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
def prefix_sums_into(x, out):
    """``out[k] = sum(x[:k])`` for k = 0..V, Neumaier-compensated (``out``: length ``x.size + 1``)."""
    s = 0.0
    c = 0.0
    out[0] = 0.0
    for i in range(x.size):
        s, c = neumaier_add(s, c, x[i])
        out[i + 1] = s + c


@nb.njit(cache=True)
def suffix_sums_into(x, out):
    """``out[k] = sum(x[k:])`` for k = 0..V, Neumaier-compensated and summed from the end (``out``:
    length ``x.size + 1``)."""
    V = x.size
    s = 0.0
    c = 0.0
    out[V] = 0.0
    for i in range(V - 1, -1, -1):
        s, c = neumaier_add(s, c, x[i])
        out[i] = s + c


@nb.njit(cache=True)
def prefix_suffix_sums_into(ps, qs, P, Q, R):
    """:func:`prefix_sums_into` of ``ps`` and of ``qs`` (to ``P``, ``Q``) and :func:`suffix_sums_into`
    of ``qs`` (to ``R``) in one loop, for ``ps, qs >= 0`` (probabilities): the same three compensated
    sums bit for bit (:func:`neumaier_add_nonneg`, no branch), their chains side by side (about half
    the time of the three loops)."""
    V = qs.size
    sp = cp = sq = cq = sr = cr = 0.0
    P[0] = 0.0
    Q[0] = 0.0
    R[V] = 0.0
    for i in range(V):
        sp, cp = neumaier_add_nonneg(sp, cp, ps[i])
        P[i + 1] = sp + cp
        sq, cq = neumaier_add_nonneg(sq, cq, qs[i])
        Q[i + 1] = sq + cq
        j = V - 1 - i
        sr, cr = neumaier_add_nonneg(sr, cr, qs[j])
        R[j] = sr + cr


@nb.njit(cache=True)
def sort_run_descending(order, rs, ps, qs, a, e):
    """Sort positions ``[a, e)`` by ``rs`` from high to low, stably (a run in token order keeps its
    ties in index order), carrying ``order``, ``ps`` and ``qs`` along: insertion up to
    ``INSERTION_MAX`` entries, merge sort above. The evaluation plan's order pass and the binned scan's
    candidate bins."""
    if e - a > INSERTION_MAX:
        perm = np.argsort(-rs[a:e], kind="mergesort")
        order[a:e] = order[a:e][perm]
        rs[a:e] = rs[a:e][perm]
        ps[a:e] = ps[a:e][perm]
        qs[a:e] = qs[a:e][perm]
        return
    for t in range(a + 1, e):
        r, i, x, y = rs[t], order[t], ps[t], qs[t]
        u = t
        while u > a and rs[u - 1] < r:
            rs[u], order[u], ps[u], qs[u] = rs[u - 1], order[u - 1], ps[u - 1], qs[u - 1]
            u -= 1
        rs[u], order[u], ps[u], qs[u] = r, i, x, y
