"""The input classes on which the solvers were slowest (``hard_inputs.py``), against independent
oracles: V = 400 in the fast lane, the full vocabulary (V = 152,064) in the full lane.

Speed itself is measured by ``benchmarks/bench_floors.py --only worst`` on the same builders; here only
values. References never call the code under test: 50-digit prefix scans (``mp_with_replacement``,
``mp_greedy``, ``mp_conditional_poisson``), the exact reduction of drafts with fewer than n ordinary
masses (``few_ordinary_sequential_alpha``), the class DP of drafts with a few distinct masses
(``class_sequential_alpha``), exact sums for top-n drafts and, at full size, closed forms over the
class counts of a draft made of a few ordinary masses and one block of equal tiny masses.
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from hard_inputs import CLASSES, ORDINARY, build
from oracles import (
    class_sequential_alpha,
    few_ordinary_sequential_alpha,
    mp_conditional_poisson,
    mp_greedy,
    mp_with_replacement,
    top_indices,
)

from mdsd_ot import optimal_acceptance

TOL = 1e-12
SMALL_V = 400
FULL_V = 152_064


def _top_n_alpha(p, q, n):
    """alpha* = p(Top_n) / p(all) for top-n drafts (docs/math.md#top-n), each sum exactly rounded."""
    top = top_indices(q.tolist(), n) if q.size <= SMALL_V else np.argsort(-q, kind="stable")[:n].tolist()
    return min(1.0, float(Fraction(math.fsum(p[top])) / Fraction(math.fsum(p))))


def _few_values(q):
    """``(cls, values)`` when q takes at most five distinct positive values (no zeros), else None."""
    values = sorted({float(v) for v in q if v > 0}, reverse=True)
    if len(values) > 5 or np.any(q == 0):
        return None
    index = {v: c for c, v in enumerate(values)}
    return [index[float(v)] for v in q], values


def _reference(name, scheme, p, q, n):
    """The oracle's alpha* for this case, or None where no independent oracle is cheap enough."""
    if scheme == "with_replacement":
        return float(mp_with_replacement(p, q, n))
    if scheme in ("greedy", "hub"):
        return float(mp_greedy(p, q, n))
    if scheme == "top_n":
        return _top_n_alpha(p, q, n)
    if scheme == "conditional_poisson":
        return float(mp_conditional_poisson(p, q, n)) if n <= 8 else None
    if name in ORDINARY and n > ORDINARY[name]:
        value, eps = few_ordinary_sequential_alpha(p, q, n, range(ORDINARY[name]))
        assert eps < 1e-200
        return float(value)
    few = _few_values(q)
    if few is not None and n <= 3:
        return float(class_sequential_alpha(p, few[0], few[1], n))
    return None


SCHEMES = ("with_replacement", "without_replacement", "greedy", "hub", "conditional_poisson", "top_n")


@pytest.mark.parametrize("name", list(CLASSES))
def test_hard_classes_small_v_against_oracles(name):
    """Every scheme at n = 3, 8, 64, 128 (hub: 2) on the class at V = 400: the re-check passed, and
    the value agrees with the oracle wherever one applies (at least 11 of the 21 cases of a class)."""
    checked = 0
    for scheme in SCHEMES:
        for n in (2,) if scheme == "hub" else (3, 8, 64, 128):
            p, q = build(name, SMALL_V, n, seed=n)
            r = optimal_acceptance(p, q, n, sampling=scheme)
            assert r.success, (name, scheme, n, r.message)
            expected = _reference(name, scheme, p, q, n)
            if expected is not None:
                assert abs(r.value - expected) <= TOL, (name, scheme, n, r.value, expected)
                checked += 1
    assert checked >= 11, checked


def _binomial_ratios(m, M, r):
    """``C(m, r) / C(M, r)`` for an array of ``m`` as the product of ``(m - i) / (M - i)``, i < r (each
    factor in [0, 1]: relative error at most about ``2r`` ulps)."""
    out = np.ones(m.size)
    for i in range(r):
        out *= np.maximum(m - i, 0) / (M - i)
    return out


def _exact_prefix_p(p, order):
    """``p(H)`` along ``order`` as floats, each the exactly rounded value of the exact prefix sum
    (integers in units of 2^-1074, where every float64 is whole), normalised by the exact total."""
    units = [int(Fraction(float(x)) * (1 << 1074)) for x in p]
    total = sum(units)
    run, out = 0, np.empty(len(order))
    for t, i in enumerate(order):
        run += units[i]
        out[t] = run / total  # (int / int: correctly rounded)
    return out


def _block_parts(p, q, k):
    """The class structure of a draft with ``k`` ordinary masses (its first tokens) and one block of
    equal tiny masses: the ordinary masses, the block's mass, and the block in the q/p order (increasing
    p, ties by index: the sorting theorem's order; the ordinary tokens come first, q/p above 1e-3)."""
    eps = float(q[k])
    assert np.all(q[k:] == eps) and np.all(q[:k] > 1e-3) and eps < 1e-290 and np.all(p[k:] < 1)
    return q[:k], eps, k + np.argsort(p[k:], kind="stable")


def _block_sequential_alpha(p, q, k, n):
    """alpha* for sequential drafts on ``k < n`` ordinary masses plus one block of equal tiny masses:
    the reduction of ``few_ordinary_sequential_alpha`` (the ordinary tokens are the first k draws up to
    ``k q(T) / min q(O)``, below 1e-280 here; then a uniform (n - k)-subset of the block), so
    ``alpha* = min(1, p(O) + min_g [p(G_g) + 1 - C(g, m) / C(T, m)])`` with ``G_g`` the g tokens of least
    p in the block, m = n - k."""
    _, _, order = _block_parts(p, q, k)
    T, m = order.size, n - k
    P = _exact_prefix_p(p, list(range(k)) + order.tolist())
    g = np.arange(1, T + 1)
    value = (P[k:] - P[k - 1]) + 1.0 - _binomial_ratios(g, T, m)
    return min(1.0, P[k - 1] + min(1.0, float(value.min())))


def _block_conditional_poisson_alpha(p, q, k, n):
    """alpha* for conditional-Poisson drafts on the same class structure, n > k: a prefix with every
    ordinary token and g block tokens has ``e_n(H) = sum_j e_j(O) C(g, n - j) eps^(n - j)`` (a j-subset
    of O and an (n - j)-subset of the block), so ``Q(H) = sum_j A_j C(g, r_j) / C(T, r_j)`` with
    ``A_j = e_j(O) eps^r_j C(T, r_j) / e_n(all)``, ``r_j = n - j`` (the A_j at 50 digits); prefixes of
    fewer than n tokens have Q = 0."""
    ordinary, eps, order = _block_parts(p, q, k)
    T = order.size
    with mpmath.workdps(50):
        e = [mpmath.mpf(1)] + [mpmath.mpf(0)] * k
        for x in ordinary:
            for j in range(k, 0, -1):
                e[j] += mpmath.mpf(float(x)) * e[j - 1]
        A = [e[j] * mpmath.mpf(eps) ** (n - j) * mpmath.binomial(T, n - j) for j in range(k + 1)]
        total = mpmath.fsum(A)
        a = [float(x / total) for x in A]
    g = np.arange(1, T + 1)
    Q = sum(a[j] * _binomial_ratios(g, T, n - j) for j in range(k + 1))
    P = _exact_prefix_p(p, list(range(k)) + order.tolist())
    excess = Q - P[k:]
    return 1.0 - max(0.0, float(excess.max()))


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, scheme, n",
    [
        ("tiny block 1e-300", "without_replacement", 8),  # 11 s a call before
        ("subnormal block", "without_replacement", 64),  # minutes before
        ("subnormal block", "conditional_poisson", 128),  # 186 s before
        ("tiny block 1e-300", "conditional_poisson", 16),
    ],
)
def test_block_drafts_full_vocabulary_against_closed_forms(name, scheme, n):
    """A handful of ordinary draft masses and a block of 152,060 equal tiny ones (1e-300, or
    subnormal), V = 152,064: the value against the closed form over the class counts."""
    p, q = build(name, FULL_V, n)
    r = optimal_acceptance(p, q, n, sampling=scheme)
    assert r.success, r.message
    k = ORDINARY[name]
    ref = _block_sequential_alpha if scheme == "without_replacement" else _block_conditional_poisson_alpha
    assert abs(r.value - ref(p, q, k, n)) <= TOL, (r.value, ref(p, q, k, n))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tied draft", "one-hot target", "subnormal block"])
def test_top_n_full_vocabulary_on_tied_drafts(name):
    """Top-n drafts where most draft masses tie (the selection was a degenerate partition there):
    p(Top_n) exactly, n = 8 and 128."""
    for n in (8, 128):
        p, q = build(name, FULL_V, n)
        r = optimal_acceptance(p, q, n, sampling="top_n")
        assert r.success, r.message
        assert abs(r.value - _top_n_alpha(p, q, n)) <= TOL


def test_class_oracles_agree_with_the_general_ones():
    """The full-size closed forms against the general oracles at V = 400 (the same class structure):
    sequential against ``few_ordinary_sequential_alpha``, conditional Poisson against
    ``mp_conditional_poisson``."""
    for name in ORDINARY:
        p, q = build(name, SMALL_V, 8)
        value, _ = few_ordinary_sequential_alpha(p, q, 8, range(ORDINARY[name]))
        assert abs(_block_sequential_alpha(p, q, ORDINARY[name], 8) - float(value)) <= 1e-13
        cp = float(mp_conditional_poisson(p, q, 6))
        assert abs(_block_conditional_poisson_alpha(p, q, ORDINARY[name], 6) - cp) <= 1e-13


def test_top_tokens_on_tied_and_ordered_drafts_equal_the_stable_sort():
    """``top_tokens`` (the heap above TOP_HEAP_MIN_V tokens) against ``argsort(-q, stable)[:k]`` on
    drafts whose masses tie at the floor, at the top, in a few values, or increase or decrease along
    the index, k from 2 to V / 64."""
    from mdsd_ot._config import TOP_HEAP_MIN_V
    from mdsd_ot.drafts._common import top_tokens

    rng = np.random.default_rng(7)
    V = TOP_HEAP_MIN_V + 1000
    kinds = [
        lambda: np.where(rng.random(V) < 0.99, 1e-9, rng.random(V)),
        lambda: np.where(rng.random(V) < 0.5, 1.0, rng.random(V)),
        lambda: rng.integers(0, 4, V).astype(float),
        lambda: np.sort(rng.random(V)),
        lambda: np.sort(rng.random(V))[::-1].copy(),
        lambda: np.full(V, 1.0 / V),
    ]
    for make in kinds:
        q = make()
        for k in (2, 3, 17, V // 64):
            assert np.array_equal(top_tokens(q, k), np.argsort(-q, kind="stable")[:k])


def test_class_builders_are_valid_distributions():
    """Each builder returns two distributions (non-negative, summing to one) with n positive draft
    masses at every n the sweeps use, seeded (the same arrays twice)."""
    for name in CLASSES:
        for n in (3, 128):
            p, q = build(name, SMALL_V, n, seed=1)
            p2, q2 = build(name, SMALL_V, n, seed=1)
            assert np.array_equal(p, p2) and np.array_equal(q, q2)
            for x in (p, q):
                assert np.all(x >= 0) and math.isclose(math.fsum(x), 1.0, abs_tol=1e-12), name
            assert np.count_nonzero(q) >= n, name
