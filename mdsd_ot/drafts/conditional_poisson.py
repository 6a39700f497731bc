"""Conditional Poisson: an n-subset drawn with probability proportional to ``prod q``;
``Q(H) = e_n(q_H) / e_n(q)`` (docs/math.md#conditional-poisson).

The mass is the independent re-check (a pairwise polynomial product up a tree,
:func:`mdsd_ot._kernels.esp_tree_scaled`); the solver's sequential DP is the numba kernel
:func:`mdsd_ot._kernels.scans.esp_prefix_scaled` (kernel code 2).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ._common import _check_enumerable_log, _distinct_structure
from .scheme import KERNEL_CP, DraftScheme


def _elementary_symmetric_tree(x: np.ndarray, n: int) -> tuple[float, int]:
    """``e_n(x) = m * 2**k`` as ``(m, k)`` (``m = 0``: fewer than n positive entries), by a pairwise
    product of the polynomials ``1 + x_i t`` truncated at degree n up a balanced tree
    (:func:`mdsd_ot._kernels.esp_tree_scaled`; a run of equal masses is one leaf, ``(1 + x t)^c`` in
    closed form).

    The conditional-Poisson re-check (docs/math.md#conditional-poisson): an algorithm independent of
    the solver's sequential DP (``_kernels.esp_prefix_scaled``). Each coefficient is a mantissa in
    [1/2, 1) and an integer exponent (so no range is lost); the terms of a product coefficient are
    positive and added after alignment to the largest, so the relative error is at most about
    ``(n + 2) log2(V) + 3n`` ulps."""
    from .. import _kernels

    x = np.ascontiguousarray(x, dtype=np.float64)
    m, k = _kernels.small_or_jit(_kernels.esp_tree_scaled, x.size)(x, int(n))
    return float(m), int(k)


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
    """``e_n(q on H) / e_n(q)`` by the pairwise products of H and of its complement (independent of
    the solver's DP; :func:`mdsd_ot._kernels.esp_split_ratio`)."""
    from .. import _kernels

    inside = np.ascontiguousarray(q[mask], dtype=np.float64)
    outside = np.ascontiguousarray(q[~mask], dtype=np.float64)
    return float(_kernels.small_or_jit(_kernels.esp_split_ratio, q.size)(inside, outside, int(n)))


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
