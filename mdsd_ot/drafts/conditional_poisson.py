"""Conditional Poisson: an n-subset drawn with probability proportional to ``prod q``;
``Q(H) = e_n(q_H) / e_n(q)`` (docs/math.md#conditional-poisson).

The numpy mass is the independent re-check (a pairwise polynomial product); the solver's sequential
DP is the numba kernel :func:`mdsd_ot._kernels.scans.esp_prefix_scaled` (kernel code 2).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from .._config import PLAIN_ESP_MIN
from ._common import _check_enumerable_log, _distinct_structure
from .scheme import KERNEL_CP, DraftScheme

_NO_EXPONENT = -(1 << 40)  # the exponent of a zero coefficient: below every other after alignment


def _elementary_symmetric_tree(x: np.ndarray, n: int) -> tuple[float, int]:
    """``e_n(x) = m * 2**k`` as ``(m, k)`` (``m = 0``: fewer than n positive entries), by a pairwise
    product of the polynomials ``1 + x_i t`` truncated at degree n, in numpy.

    The conditional-Poisson re-check (docs/math.md#conditional-poisson): an algorithm independent of
    the solver's sequential DP (``_kernels.esp_prefix_scaled``). Each coefficient is a mantissa in
    [1/2, 1) and an integer exponent (so no range is lost); the terms of a product coefficient are
    positive and added after alignment to the largest, so the relative error is at most about
    ``(n + 2) log2(V)`` ulps."""
    x = np.asarray(x, dtype=np.float64)
    x = x[x > 0]
    if x.size < n:
        return 0.0, 0
    size = x.size + (x.size % 2)  # an even number of leaves; odd levels get one identity row below
    # Plain float64 first: with x <= 1 no coefficient overflows, and a term lost to underflow moves the
    # result by at most 2^-1074 per operation, negligible when e_n >= 2^-900 (else: exponents below)
    c = np.zeros((size, n + 1))
    c[:, 0] = 1.0
    c[: x.size, 1] = x
    if x.max() <= 1.0:
        while c.shape[0] > 1:
            if c.shape[0] % 2:
                c = np.vstack([c, np.eye(1, n + 1)])
            a, b = c[0::2], c[1::2]
            out = a * b[:, :1]
            for i in range(1, n + 1):
                out[:, i:] += a[:, : n + 1 - i] * b[:, i : i + 1]
            c = out
        if c[0, n] >= PLAIN_ESP_MIN:
            m0, k0 = np.frexp(c[0, n])
            return float(m0), int(k0)
    m = np.zeros((size, n + 1))
    k = np.full((size, n + 1), _NO_EXPONENT, dtype=np.int64)
    m[:, 0], k[:, 0] = 0.5, 1  # the constant 1
    m[: x.size, 1], k[: x.size, 1] = np.frexp(x)
    while m.shape[0] > 1:
        if m.shape[0] % 2:
            m = np.vstack([m, 0.5 * np.eye(1, n + 1)])
            k = np.vstack([k, np.where(np.eye(1, n + 1, dtype=bool), 1, _NO_EXPONENT)])
        ma, mb, ka, kb = m[0::2], m[1::2], k[0::2], k[1::2]
        mo = np.zeros_like(ma)
        ko = np.full_like(ka, _NO_EXPONENT)
        for d in range(n + 1):
            tm = ma[:, : d + 1] * mb[:, d::-1]  # terms a_i b_(d - i), i = 0..d
            tk = ka[:, : d + 1] + kb[:, d::-1]
            tk = np.where(tm > 0, tk, _NO_EXPONENT)
            top = tk.max(axis=1)
            total = np.ldexp(tm, tk - top[:, None]).sum(axis=1)
            mo[:, d], shift = np.frexp(total)
            ko[:, d] = np.where(total > 0, top + shift, _NO_EXPONENT)
        m, k = mo, ko
    return float(m[0, n]), int(k[0, n])


def _cp_sample(q, n, rng):
    from .. import _kernels

    # T[i, j] = log e_j(q[i:]); token i joins the set with probability q_i e_{j-1}(q[i+1:]) / e_j(q[i:])
    T = _kernels.log_esp_suffix_table(np.ascontiguousarray(q), n)
    chosen, need = [], n
    for i in range(q.size):
        if need == 0:
            break
        if q[i] > 0 and np.log(rng.random()) < np.log(q[i]) + T[i + 1, need - 1] - T[i, need]:
            chosen.append(i)
            need -= 1
    return np.array(chosen)


def _cp_inclusion(q, n):
    """``q(y) e_{n-1}(q without y) / e_n(q)``; scale invariant, so q is rescaled to max 1 first."""
    from .._kernels import verifiers as kernels

    return kernels.cp_inclusion(q / q.max(), n)


def _cp_log_count(k, n):
    return math.lgamma(k + 1) - math.lgamma(n + 1) - math.lgamma(k - n + 1)


def _cp_tuples(q, n):
    support = np.flatnonzero(q > 0)
    k = support.size  # >= n (checked by the scheme)
    _check_enumerable_log(_cp_log_count(k, n), lambda: math.comb(k, n), n)
    tuples = np.array(list(itertools.combinations(support, n)), dtype=np.int64).reshape(-1, n)
    logw = np.log(q[tuples]).sum(axis=1)
    return tuples, np.exp(logw - np.logaddexp.reduce(logw))


def _cp_mass(q, n, mask):
    """``e_n(q on H) / e_n(q)`` by the pairwise product (independent of the solver's DP)."""
    m_in, k_in = _elementary_symmetric_tree(q[mask], n)
    if m_in == 0.0:
        return 0.0
    m_all, k_all = _elementary_symmetric_tree(q, n)
    return float(np.ldexp(m_in / m_all, k_in - k_all))


SCHEME = DraftScheme(
    "conditional_poisson",
    "an n-subset with probability proportional to prod q",
    True,
    _cp_sample,
    _cp_tuples,
    _cp_mass,
    lambda n: n,
    _log_count=_cp_log_count,
    kernel_code=KERNEL_CP,
    _structure=_distinct_structure,
    _inclusion=_cp_inclusion,
)
