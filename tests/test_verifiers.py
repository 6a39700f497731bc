"""Verifiers: exact validity by enumeration, closed forms against enumeration, bounds, Monte Carlo.

Oracles used here are independent of the code under test: the exact output law summed over every
draft tuple of ``scheme.tuple_law``; the optimal acceptance by brute force over all 2^V subsets of
the scheme's set law; 50-digit mpmath arithmetic for near one-hot drafts.
"""

from __future__ import annotations

import itertools
import math

import mpmath
import numpy as np
import oracles
import pytest
from scipy import stats

from mdsd_ot import optimal_acceptance
from mdsd_ot._config import LAW_TOL, VALUE_TOL
from mdsd_ot._kernels import verifiers as _kernels
from mdsd_ot.drafts import get_scheme
from mdsd_ot.verifiers import VERIFIERS, VerifierAcceptance, get_verifier, verifier_acceptance
from mdsd_ot.verifiers.rsd import rsd_rejection
from mdsd_ot.verifiers.spectr import kseq_rho

NAMES = list(VERIFIERS)
CLOSED_FORM = [name for name in NAMES if name != "optimal"]


# ---------------------------------------------------------------- instances and oracles
def random_pair(rng: np.random.Generator, V: int) -> tuple[np.ndarray, np.ndarray]:
    """A random (p, q) with zeros and ties on purpose."""

    def one():
        kind = rng.integers(3)
        if kind == 0:  # small integer weights: ties and zeros
            w = rng.integers(0, 4, size=V).astype(float)
        elif kind == 1:  # Dirichlet with a random zero
            w = rng.dirichlet(np.ones(V))
            w[rng.integers(V)] = 0.0 if rng.random() < 0.5 else w[0]
        else:  # peaked
            w = rng.dirichlet(np.full(V, 0.3))
        if w.sum() == 0:
            w[rng.integers(V)] = 1.0
        return w / w.sum()

    return one(), one()


def instances(count: int, seed: int, max_v: int = 5, max_n: int = 3):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        V = int(rng.integers(2, max_v + 1))
        n = int(rng.integers(1, max_n + 1))
        p, q = random_pair(rng, V)
        yield p, q, n


def supported(name, p, q, n, sampling=None) -> bool:
    v = VERIFIERS[name]
    try:
        v.check_n(n)
        v.resolve_scheme(sampling).check(q, n)
    except ValueError:
        return False
    return True


def enumerate_verifier(prepared):
    """Sum the exact per-drafts output law over every draft tuple: (output law, acceptance)."""
    tuples, probs = prepared.scheme.tuple_law(prepared.q, prepared.n)
    law = np.zeros(prepared.p.size)
    acc = 0.0
    for t, pr in zip(tuples, probs):
        lt, at = prepared.output_law(t)
        law += pr * lt
        acc += pr * at
        assert prepared.accept_probability(t) == pytest.approx(at, abs=LAW_TOL)  # O(n) shortcut
    return law, acc


def brute_force_bound(q, n, p, sampling) -> float:
    """alpha* = min over all subsets H of p(H) + 1 - Q(H), Q(H) from the scheme's set law."""
    sets, masses = get_scheme(sampling).set_law(q, n)
    V = p.size
    best = np.inf
    for r in range(V + 1):
        for H in itertools.combinations(range(V), r):
            Hs = set(H)
            inside = sum(m for s, m in zip(sets, masses) if set(s) <= Hs)
            best = min(best, p[list(H)].sum() + 1.0 - inside)
    return float(best)


# ---------------------------------------------------------------- docs/math.md#test-vectors
VECTORS = [
    # p, q, n, naive, rrs, rrs_wor, spectr, alpha*_with, alpha*_without, greedy, spechub
    (
        (1 / 3, 1 / 3, 1 / 3),
        (1 / 3, 1 / 2, 1 / 6),
        2,
        0.537037,
        0.861111,
        0.888889,
        0.888889,
        0.972222,
        1.0,
        1.0,
        1.0,
    ),
    (
        (0.5, 0.3, 0.2, 0),
        (0.1, 0.2, 0.3, 0.4),
        2,
        0.305,
        0.65,
        0.680952,
        0.658443,
        0.69,
        0.734524,
        0.666667,
        0.666667,
    ),
    (
        (0.5, 0.3, 0.2, 0),
        (0.1, 0.2, 0.3, 0.4),
        3,
        0.4133,
        0.685,
        0.781714,
        0.710003,
        0.771,
        0.94881,
        0.833333,
        None,
    ),
    ((0.6, 0.2, 0.1, 0.1), (0.7, 0.2, 0.05, 0.05), 2, 0.6375, 0.91, 0.933333, 0.927016, 0.99, 1.0, 1.0, 1.0),
]
COLUMNS = [
    ("naive", None),
    ("rrs", None),
    ("rrs_without_replacement", None),
    ("spectr", None),
    ("optimal", "with_replacement"),
    ("optimal", "without_replacement"),
    ("greedy", None),
    ("spechub", None),
]


@pytest.mark.parametrize("row", VECTORS, ids=[f"row{i}" for i in range(len(VECTORS))])
def test_math_section6_vectors(row):
    p, q, n, *expected = row
    for (name, sampling), want in zip(COLUMNS, expected):
        if want is None:
            with pytest.raises(ValueError, match="n = 2"):
                verifier_acceptance(name, p, q, n)
            continue
        got = verifier_acceptance(name, p, q, n, sampling=sampling)
        assert got.method == "exact" and got.stderr == 0.0
        assert round(got.value, 6) == pytest.approx(want, abs=1e-12), (name, sampling)


# ---------------------------------------------------------------- validity by enumeration
def _validity_cases():
    cases = {name: [] for name in NAMES}
    for k, (p, q, n) in enumerate(instances(170, seed=20260301)):
        for name in NAMES:
            if name == "optimal":
                sampling = ("with_replacement", "without_replacement", "greedy")[k % 3]
            else:
                sampling = None
            if supported(name, p, q, n, sampling):
                cases[name].append((p, q, n, sampling))
    # spechub is n = 2 only: add dedicated n = 2 instances so it also gets >= 100
    rng = np.random.default_rng(7)
    while len(cases["spechub"]) < 110:
        p, q = random_pair(rng, int(rng.integers(2, 6)))
        if supported("spechub", p, q, 2):
            cases["spechub"].append((p, q, 2, None))
    return cases


CASES = _validity_cases()


@pytest.mark.parametrize("name", NAMES)
def test_output_law_is_p_and_acceptance_matches_enumeration(name):
    cases = CASES[name]
    assert len(cases) >= 100
    verifier = VERIFIERS[name]
    for p, q, n, sampling in cases:
        prepared = verifier.prepare(p, q, n, sampling=sampling)
        law, acc = enumerate_verifier(prepared)
        np.testing.assert_allclose(law, p, rtol=0, atol=LAW_TOL, err_msg=f"{name} p={p} q={q} n={n}")
        assert prepared.exact_available()
        assert prepared.acceptance() == pytest.approx(acc, abs=LAW_TOL), (name, p, q, n)
        bound = brute_force_bound(q, n, p, prepared.scheme.name)
        assert acc <= bound + LAW_TOL, (name, p, q, n)
        if name in ("greedy", "spechub"):
            assert acc == pytest.approx(bound, abs=LAW_TOL)
        if name == "optimal":
            assert acc == pytest.approx(bound, abs=VALUE_TOL)
        if name == "spectr":
            assert acc >= (1 - 1 / math.e) * bound - LAW_TOL


def test_bounds_against_optimal_acceptance():
    """Every verifier stays below the library's alpha* for its scheme (the dual solver)."""
    for p, q, n in instances(40, seed=11):
        for name in CLOSED_FORM:
            if not supported(name, p, q, n):
                continue
            v = verifier_acceptance(name, p, q, n)
            bound = optimal_acceptance(p, q, n, sampling=v.sampling).value
            assert v.value <= bound + VALUE_TOL
            if name in ("greedy", "spechub"):
                assert v.value == pytest.approx(bound, abs=VALUE_TOL)


# ---------------------------------------------------------------- kernels vs slow twins
def test_rsd2_kernel_matches_slow_twin():
    rng = np.random.default_rng(3)
    for _ in range(200):
        V = int(rng.integers(2, 40))
        p, q = random_pair(rng, V)
        if np.count_nonzero(q) < 2:
            continue
        from mdsd_ot.drafts import complement_masses

        fast = _kernels.rsd2_rejection(p, q, complement_masses(q))
        slow = oracles.rsd2_rejection_slow(p, q)
        assert fast == pytest.approx(slow, abs=LAW_TOL)


def test_rsd_mc_kernel_matches_slow_twin():
    rng = np.random.default_rng(4)
    for _ in range(20):
        V = int(rng.integers(3, 12))
        n = int(rng.integers(1, 4))
        p, q = random_pair(rng, V)
        if np.count_nonzero(q) < n:
            continue
        u = rng.random((50, n))
        fast = oracles.rsd_mc_accept(p, q, n, u)
        slow = oracles.rsd_mc_accept_slow(p, q, n, u)
        np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-12)


def test_rsd_fast_n2_matches_recursion_at_larger_v():
    """O(V log V) path against the docs/math.md recursion (slow twin) on V = 300."""
    rng = np.random.default_rng(5)
    p = rng.dirichlet(np.full(300, 0.5))
    q = rng.dirichlet(np.full(300, 0.5))
    exact = verifier_acceptance("rrs_without_replacement", p, q, 2).value
    assert exact == pytest.approx(1 - oracles.rsd2_rejection_slow(p, q), abs=1e-12)


def test_rsd_n3_recursion_matches_monte_carlo_kernel():
    rng = np.random.default_rng(6)
    p = rng.dirichlet(np.ones(30))
    q = rng.dirichlet(np.ones(30))
    exact = 1 - rsd_rejection(p, q, 3)
    mc = verifier_acceptance("rrs_without_replacement", p, q, 3, method="monte_carlo", samples=4000, rng=1)
    assert abs(mc.value - exact) <= 4 * mc.stderr + 1e-12


def test_top_k_matches_stable_sort():
    from mdsd_ot.verifiers.base import top_k

    rng = np.random.default_rng(16)
    for _ in range(300):
        V = int(rng.integers(1, 12))
        q = rng.integers(0, 4, size=V).astype(float)  # many ties
        for k in range(V + 1):
            np.testing.assert_array_equal(top_k(q, k), np.argsort(-q, kind="stable")[:k])


def test_spectr_rho_is_smallest_valid():
    rng = np.random.default_rng(8)
    for _ in range(100):
        V = int(rng.integers(2, 8))
        n = int(rng.integers(1, 5))
        p, q = random_pair(rng, V)
        rho = kseq_rho(p, q, n)
        assert 1.0 <= rho <= n

        def gap(r):
            b = np.minimum(q, p / r).sum()
            return r * b - (1 - np.maximum(q - p / r, 0).sum() ** n)

        assert gap(rho) >= -1e-12
        if rho > 1.0:  # a slightly smaller rho violates the condition (grid check)
            grid = np.linspace(1.0, rho, 50)[:-1]
            assert all(gap(r) < 1e-12 for r in grid)


# ---------------------------------------------------------------- Monte Carlo and sampling
@pytest.mark.parametrize("name", CLOSED_FORM)
def test_monte_carlo_within_four_standard_errors(name):
    rng = np.random.default_rng(9)
    checked = 0
    for p, q, n in instances(40, seed=12):
        if not supported(name, p, q, n):
            continue
        samples = 1000
        # CLT regime only: a draft tuple rarer than ~1/samples may never be drawn, and then the sample
        # standard error cannot see it (it can even be 0)
        _, probs = VERIFIERS[name].resolve_scheme().tuple_law(q, n)
        if probs.min() < 20 / samples:
            continue
        exact = verifier_acceptance(name, p, q, n, method="exact")
        mc = verifier_acceptance(name, p, q, n, method="monte_carlo", samples=samples, rng=rng)
        assert mc.method == "monte_carlo" and mc.samples == samples
        assert abs(mc.value - exact.value) <= 4 * mc.stderr + 1e-12, (name, p, q, n)
        checked += 1
    assert checked >= 5


CHI_P = np.array([0.35, 0.25, 0.2, 0.15, 0.05, 0.0])
CHI_Q = np.array([0.1, 0.3, 0.05, 0.25, 0.2, 0.1])


@pytest.mark.parametrize(
    "name,n,sampling",
    [(name, 2 if name == "spechub" else 3, None) for name in NAMES] + [("optimal", 2, "without_replacement")],
)
def test_verify_sampling_chi_square(name, n, sampling):
    rng = np.random.default_rng(2024)
    prepared = VERIFIERS[name].prepare(CHI_P, CHI_Q, n, sampling=sampling)
    draws = 6000
    counts = np.zeros(CHI_P.size)
    accepted = 0
    for _ in range(draws):
        drafts = prepared.scheme.sample(CHI_Q, n, rng)
        verdict = prepared.verify(drafts, rng)
        counts[verdict.token] += 1
        accepted += verdict.accepted
        assert verdict.accepted == (verdict.token in drafts)
    assert counts[CHI_P == 0].sum() == 0  # zero-probability tokens are never output
    pos = CHI_P > 0
    _, pvalue = stats.chisquare(counts[pos], draws * CHI_P[pos])
    assert pvalue > 1e-4
    alpha = prepared.acceptance()
    sd = math.sqrt(alpha * (1 - alpha) / draws)
    assert abs(accepted / draws - alpha) <= 5 * sd + 1e-9


# ---------------------------------------------------------------- pitfalls of docs/math.md#numerics
def _near_one_hot(V=6, eps=1e-12):
    q = np.array([1 - eps] + [eps / (V - 1)] * (V - 1))
    p = np.array([0.4, 0.3, 0.1, 0.1, 0.05, 0.05])[:V]
    return p / p.sum(), q


def _mp_rsd2(p, q):
    """RSD n = 2 acceptance in 50-digit arithmetic, the recursion of docs/math.md#rsd verbatim."""
    with mpmath.workdps(50):
        P = [mpmath.mpf(float(x)) for x in p]
        Q = [mpmath.mpf(float(x)) for x in q]
        tP, tQ = sum(P), sum(Q)
        P = [x / tP for x in P]
        Q = [x / tQ for x in Q]
        V = len(P)
        beta = sum(min(a, b) for a, b in zip(P, Q))
        tv = sum(max(a - b, 0) for a, b in zip(P, Q))
        r = [max(a - b, 0) / tv for a, b in zip(P, Q)] if tv > 0 else P
        total = beta
        for x in range(V):
            if Q[x] > P[x]:
                rest = sum(Q[y] for y in range(V) if y != x)
                s = [Q[y] / rest if y != x else 0 for y in range(V)]
                total += (Q[x] - P[x]) * sum(min(a, b) for a, b in zip(r, s))
        return float(total)


def _mp_greedy(p, q, n):
    with mpmath.workdps(50):
        P = [mpmath.mpf(float(x)) for x in p]
        Q = [mpmath.mpf(float(x)) for x in q]
        tP, tQ = sum(P), sum(Q)
        P = [x / tP for x in P]
        Q = [x / tQ for x in Q]
        top = set(np.argsort(-np.asarray(q), kind="stable")[: n - 1].tolist())
        rest = sum(Q[y] for y in range(len(Q)) if y not in top)
        outside = sum(min(P[y], Q[y] / rest) for y in range(len(Q)) if y not in top)
        return float(sum(P[y] for y in top) + outside)


@pytest.mark.parametrize("eps", [1e-12, 1e-9, 1e-15])
def test_near_one_hot_drafts_match_50_digit_arithmetic(eps):
    p, q = _near_one_hot(eps=eps)
    got = verifier_acceptance("rrs_without_replacement", p, q, 2).value
    assert got == pytest.approx(_mp_rsd2(p, q), abs=1e-12)
    for n in (2, 3):
        assert verifier_acceptance("greedy", p, q, n).value == pytest.approx(_mp_greedy(p, q, n), abs=1e-12)
    assert verifier_acceptance("spechub", p, q, 2).value == pytest.approx(_mp_greedy(p, q, 2), abs=1e-12)
    for name in CLOSED_FORM:
        if supported(name, p, q, 2):
            value = verifier_acceptance(name, p, q, 2).value
            assert 0.0 <= value <= 1.0 and math.isfinite(value)


def test_near_one_hot_validity_by_enumeration():
    p, q = _near_one_hot(V=5, eps=1e-12)
    for name in NAMES:
        for n in (2, 3):
            if not supported(name, p, q, n):
                continue
            prepared = VERIFIERS[name].prepare(p, q, n)
            law, acc = enumerate_verifier(prepared)
            np.testing.assert_allclose(law, p, rtol=0, atol=LAW_TOL, err_msg=name)
            assert prepared.acceptance() == pytest.approx(acc, abs=1e-11), name


def test_equal_distributions_give_no_nan():
    """p == q: every residual is zero (probability-zero branches), no NaN, no warning."""
    p = np.array([0.5, 0.25, 0.25, 0.0])
    for name in NAMES:
        for n in (1, 2, 3):
            if not supported(name, p, p, n):
                continue
            prepared = VERIFIERS[name].prepare(p, p, n)
            law, acc = enumerate_verifier(prepared)
            np.testing.assert_allclose(law, p, atol=LAW_TOL)
            if name != "naive":
                assert prepared.acceptance() == pytest.approx(1.0, abs=LAW_TOL)


def test_disjoint_supports():
    p = np.array([0.5, 0.5, 0.0, 0.0])
    q = np.array([0.0, 0.0, 0.5, 0.5])
    for name in CLOSED_FORM:
        if supported(name, p, q, 2):
            assert verifier_acceptance(name, p, q, 2).value == pytest.approx(0.0, abs=LAW_TOL), name


def test_n1_reduces_to_speculative_sampling():
    rng = np.random.default_rng(13)
    for _ in range(20):
        p, q = random_pair(rng, 6)
        tv = 1 - np.minimum(p, q).sum()
        for name in ("rrs", "rrs_without_replacement", "spectr", "greedy"):
            assert verifier_acceptance(name, p, q, 1).value == pytest.approx(1 - tv, abs=1e-12), name


def test_acceptance_invariant_under_permutation():
    rng = np.random.default_rng(14)
    for _ in range(20):
        p = rng.dirichlet(np.ones(7))
        q = rng.dirichlet(np.ones(7))  # no ties almost surely
        perm = rng.permutation(7)
        for name in CLOSED_FORM:
            n = 2
            a = verifier_acceptance(name, p, q, n).value
            b = verifier_acceptance(name, p[perm], q[perm], n).value
            assert a == pytest.approx(b, abs=1e-12), name


# ---------------------------------------------------------------- API and errors
def test_result_type_and_registry():
    r = verifier_acceptance("spectr", [0.5, 0.5], [0.25, 0.75], 2)
    assert isinstance(r, VerifierAcceptance)
    assert r.verifier == "spectr" and r.sampling == "with_replacement" and r.n == 2
    with pytest.raises(AttributeError):
        r.value = 0.0  # frozen
    assert float(r) == r.value
    assert get_verifier("rrs") is VERIFIERS["rrs"]
    for name, v in VERIFIERS.items():
        assert v.name == name and v.reference and v.scheme in v.schemes
        assert name in repr(v)


def test_errors_are_actionable():
    p, q = [0.5, 0.3, 0.2], [0.2, 0.3, 0.5]
    with pytest.raises(ValueError, match="unknown verifier"):
        verifier_acceptance("nope", p, q, 2)
    with pytest.raises(ValueError, match="assumes draft sampling"):
        verifier_acceptance("rrs", p, q, 2, sampling="without_replacement")
    with pytest.raises(ValueError, match="n = 2"):
        verifier_acceptance("spechub", p, q, 3)
    with pytest.raises(ValueError, match="unknown method"):
        verifier_acceptance("rrs", p, q, 2, method="magic")
    with pytest.raises(ValueError, match="sums to"):
        verifier_acceptance("rrs", [0.5, 0.6, 0.2], q, 2)
    scaled = verifier_acceptance("rrs", [1.0, 1.0, 0.0], [1.0, 1.0, 2.0], 1, normalize=True)
    assert scaled.value == pytest.approx(0.5)
    with pytest.raises(ValueError, match="needs at least"):
        verifier_acceptance("rrs_without_replacement", [0.5, 0.5, 0.0], [1.0, 0.0, 0.0], 2)
    with pytest.raises(ValueError, match="samples"):
        verifier_acceptance("rrs", p, q, 2, method="monte_carlo", samples=1)
    with pytest.raises(TypeError, match="samples must be an int"):
        verifier_acceptance("rrs", p, q, 2, method="monte_carlo", samples=10.5)
    v = VERIFIERS["rrs"]
    rng = np.random.default_rng(0)
    with pytest.raises(TypeError, match="Generator"):
        v.verify(p, q, [0, 1], 42)
    with pytest.raises(ValueError, match="q = 0"):
        v.verify([0.5, 0.5, 0.0], [0.5, 0.5, 0.0], [0, 2], rng)
    with pytest.raises(ValueError, match="lie in"):
        v.verify(p, q, [0, 7], rng)
    with pytest.raises(ValueError, match="distinct"):
        VERIFIERS["rrs_without_replacement"].verify(p, q, [1, 1], rng)
    with pytest.raises(ValueError, match="most likely"):
        VERIFIERS["greedy"].output_law(p, q, [0, 1])
    with pytest.raises(ValueError, match="hub token"):
        VERIFIERS["spechub"].output_law(p, q, [0, 1])


def test_exact_unavailable_falls_back_to_monte_carlo():
    from mdsd_ot.verifiers import rsd

    rng = np.random.default_rng(15)
    V = 200
    p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
    n = 4
    assert V ** (n - 1) > rsd.EXACT_MAX_WORK
    with pytest.raises(ValueError, match="monte_carlo"):
        verifier_acceptance("rrs_without_replacement", p, q, n, method="exact")
    r = verifier_acceptance("rrs_without_replacement", p, q, n, samples=500, rng=0)
    assert r.method == "monte_carlo" and r.stderr > 0 and 0 < r.value < 1
    again = verifier_acceptance("rrs_without_replacement", p, q, n, samples=500, rng=0)
    assert again == r  # seeded: reproducible


# ---------------------------------------------------------------- RSD rejection-path Monte Carlo
def _sorted_positions(p, q):
    keep = np.flatnonzero((p > 0) | (q > 0))
    t = np.full(keep.size, np.inf)
    m = q[keep] > 0
    t[m] = p[keep][m] / q[keep][m]
    tok = keep[np.argsort(t, kind="stable")]
    return {int(x): i for i, x in enumerate(tok)}


def test_rsd_path_value_kernel_matches_slow_twin_and_sums_to_exact():
    """Every rejection path: theta algebra (numba) == residuals (numpy); path-weighted sum == exact."""
    rng = np.random.default_rng(17)
    checked = 0
    for trial in range(60):
        V = int(rng.integers(3, 7))
        n = int(rng.integers(1, 5))
        p, q = random_pair(rng, V)
        if np.count_nonzero(q) < n:
            continue
        t, ps, qs, Pa, Qa, Ps, Qs, atoms, rest_q = _kernels.rsd_path_tables(p, q, n)
        inv = _sorted_positions(p, q)
        total = 0.0
        for path in itertools.permutations(np.flatnonzero(q > 0), n - 1):
            value, prob = oracles.rsd_path_value_slow(p, q, path)
            if prob == 0.0:
                continue
            fast = oracles.rsd_path_value(
                t, ps, qs, Ps, Qs, atoms, rest_q, np.array([inv[int(x)] for x in path], dtype=np.int64)
            )
            assert fast == pytest.approx(value, abs=1e-12)
            total += prob * value
        assert total == pytest.approx(rsd_rejection(p, q, n), abs=1e-12)
        checked += 1
    assert checked >= 30


def test_rsd_path_monte_carlo_is_unbiased():
    rng = np.random.default_rng(18)
    for trial in range(25):
        V = int(rng.integers(3, 9))
        n = int(rng.integers(2, 5))
        p, q = random_pair(rng, V)
        if np.count_nonzero(q) < n:
            continue
        exact = verifier_acceptance("rrs_without_replacement", p, q, n, method="exact").value
        mc = verifier_acceptance(
            "rrs_without_replacement", p, q, n, method="monte_carlo", samples=3000, rng=trial
        )
        assert abs(mc.value - exact) <= 4 * mc.stderr + 1e-12, (p, q, n)


def test_rsd_path_monte_carlo_agrees_with_draft_tuple_estimator():
    """Two independent estimators (rejection paths vs draft tuples) at V = 2000, n = 4."""
    rng = np.random.default_rng(19)
    p, q = rng.dirichlet(np.full(2000, 0.3)), rng.dirichlet(np.full(2000, 0.3))
    path = verifier_acceptance("rrs_without_replacement", p, q, 4, method="monte_carlo", samples=4000, rng=0)
    tuples = oracles.rsd_mc_accept(p, q, 4, np.random.default_rng(1).random((3000, 4)))
    se = math.hypot(path.stderr, tuples.std(ddof=1) / math.sqrt(tuples.size))
    assert abs(path.value - tuples.mean()) <= 4 * se
    assert path.stderr < tuples.std(ddof=1) / math.sqrt(tuples.size)  # the variance reduction


def test_rsd_path_monte_carlo_near_one_hot():
    p, q = _near_one_hot(V=6, eps=1e-12)
    exact = verifier_acceptance("rrs_without_replacement", p, q, 3, method="exact").value
    mc = verifier_acceptance("rrs_without_replacement", p, q, 3, method="monte_carlo", samples=2000, rng=3)
    assert abs(mc.value - exact) <= 4 * mc.stderr + 1e-12


def test_optimal_plan_is_feasible_and_matches_the_lp():
    """The projected plan respects every capacity exactly and keeps the LP's value and residual."""
    rng = np.random.default_rng(20)
    for sampling in ("with_replacement", "without_replacement", "conditional_poisson"):
        for _ in range(5):
            p, q = random_pair(rng, 5)
            if not supported("optimal", p, q, 2, sampling):
                continue
            from mdsd_ot.verifiers.optimal import OptimalVerifier  # the LP plan: the small-V reference

            prepared = OptimalVerifier(construction="lp").prepare(p, q, 2, sampling=sampling)
            flow = prepared.plan * prepared.set_mass[:, None]
            assert np.all(flow >= 0)
            assert np.all(flow.sum(axis=1) <= prepared.set_mass * (1 + 1e-15))
            assert np.all(flow.sum(axis=0) <= p * (1 + 1e-15) + 1e-300)
            lp = optimal_acceptance(p, q, 2, sampling=sampling, method="lp")
            assert prepared.acceptance() == pytest.approx(lp.value, abs=VALUE_TOL)
            if lp.residual.sum() > 0 and prepared.acceptance() < 1 - 1e-6:
                np.testing.assert_allclose(prepared.residual, lp.residual, atol=1e-6)
            for s, row in zip(prepared.sets, prepared.plan):  # output only drafted tokens
                assert row[[y for y in range(p.size) if y not in s]].sum() == 0.0


def test_exact_unavailable_message():
    rng = np.random.default_rng(21)
    p, q = rng.dirichlet(np.ones(300)), rng.dirichlet(np.ones(300))
    with pytest.raises(ValueError, match="V=300, n=4"):
        VERIFIERS["rrs_without_replacement"].acceptance(p, q, 4)


def test_rsd_rejected_token_sampler_matches_direct_weights():
    """The O(log V) draw of the k-th rejected token has the law (s_k - r_k)_+ computed directly."""
    from numba import njit

    draw = _kernels._draw_rejected

    @njit(cache=False)
    def draw_many(t, ps, qs, Pa, Qa, atoms, drawn, nd, theta, theta_next, count, seed):
        np.random.seed(seed)
        out = np.empty(count, dtype=np.int64)
        for i in range(count):
            out[i] = draw(t, ps, qs, Pa, Qa, atoms, drawn, nd, theta, theta_next)
        return out

    rng = np.random.default_rng(22)
    checked = 0
    for trial in range(6):
        V, n = 8, 3
        p, q = random_pair(rng, V)
        if np.count_nonzero(q) < n or np.count_nonzero(q > p) < 2:
            continue
        t, ps, qs, Pa, Qa, Ps, Qs, atoms, rest_q = _kernels.rsd_path_tables(p, q, n)
        inv = _sorted_positions(p, q)
        tok = np.empty(len(inv), dtype=np.int64)
        for token, pos in inv.items():
            tok[pos] = token
        # step 1 (nothing drafted) and step 2 (after rejecting the most likely rejected token)
        r, s = p.copy(), q.copy()
        theta, e, mass = 0.0, 1.0, 1.0
        drawn = np.empty(n, dtype=np.int64)
        for nd in range(2):
            theta_next = theta + e / mass
            w = np.maximum(s - r, 0.0)
            if w.sum() <= 0:
                break
            draws = draw_many(t, ps, qs, Pa, Qa, atoms, drawn, nd, theta, theta_next, 20000, trial)
            counts = np.bincount(tok[draws], minlength=V)
            assert counts[w == 0].sum() == 0
            pos = w > 0
            if pos.sum() >= 2:
                _, pvalue = stats.chisquare(counts[pos], 20000 * w[pos] / w[pos].sum())
                assert pvalue > 1e-4, (trial, nd)
                checked += 1
            x = int(np.argmax(w))
            drawn[nd] = inv[x]
            d = np.maximum(r - s, 0.0)
            r = d / d.sum()
            s[x] = 0.0
            s = s / s.sum()
            e = _kernels._excess(t, Ps, Qs, theta_next)
            mass = q[s > 0].sum()
            theta = theta_next
    assert checked >= 6


# ---------------------------------------------------------------- property-based (hypothesis)
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_weights = st.lists(
    st.one_of(st.just(0.0), st.floats(1e-9, 1.0), st.sampled_from([0.25, 0.5, 1.0])), min_size=2, max_size=4
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(wp=_weights, wq=_weights, n=st.integers(1, 3))
def test_property_every_verifier_is_valid(wp, wq, n):
    V = min(len(wp), len(wq))
    p, q = np.array(wp[:V]), np.array(wq[:V])
    if p.sum() == 0 or q.sum() == 0:
        return
    p, q = p / p.sum(), q / q.sum()
    for name in CLOSED_FORM:
        if not supported(name, p, q, n):
            continue
        prepared = VERIFIERS[name].prepare(p, q, n)
        law, acc = enumerate_verifier(prepared)
        np.testing.assert_allclose(law, prepared.p, rtol=0, atol=LAW_TOL, err_msg=name)
        assert prepared.acceptance() == pytest.approx(acc, abs=LAW_TOL), name
        assert -LAW_TOL <= acc <= 1 + LAW_TOL


# ---------------------------------------------------------------- naive under every scheme
SCHEME_NAMES = ["with_replacement", "without_replacement", "greedy", "hub", "conditional_poisson", "top_n"]


def test_naive_inclusion_probabilities_match_enumeration():
    from mdsd_ot.verifiers.naive import inclusion_probabilities

    rng = np.random.default_rng(23)
    checked = 0
    for _ in range(150):
        V = int(rng.integers(2, 6))
        n = int(rng.integers(1, 4))
        _, q = random_pair(rng, V)
        for s in SCHEME_NAMES:
            scheme = get_scheme(s)
            try:
                scheme.check(q, n)
            except ValueError:
                continue
            pi = inclusion_probabilities(q, n, s)
            if pi is None:
                continue
            tuples, probs = scheme.tuple_law(q, n)
            ref = np.zeros(V)
            for t, pr in zip(tuples, probs):
                ref[np.unique(t)] += pr
            np.testing.assert_allclose(pi, ref, rtol=0, atol=1e-12, err_msg=f"{s} q={q} n={n}")
            checked += 1
    assert checked >= 300


@pytest.mark.parametrize("sampling", SCHEME_NAMES)
def test_naive_exact_under_every_scheme(sampling):
    checked = 0
    for p, q, n in instances(40, seed=25):
        if not supported("naive", p, q, n, sampling):
            continue
        prepared = VERIFIERS["naive"].prepare(p, q, n, sampling=sampling)
        law, acc = enumerate_verifier(prepared)
        np.testing.assert_allclose(law, p, atol=LAW_TOL)
        assert prepared.exact_available()
        assert prepared.acceptance() == pytest.approx(acc, abs=LAW_TOL)
        assert acc <= brute_force_bound(q, n, p, sampling) + LAW_TOL
        checked += 1
    assert checked >= 10


def test_naive_sequential_monte_carlo_and_near_one_hot():
    p = np.array([0.3, 0.25, 0.2, 0.15, 0.1, 0.0])
    for q in (np.array([0.1, 0.2, 0.3, 0.2, 0.1, 0.1]), _near_one_hot(V=6, eps=1e-12)[1]):
        exact = verifier_acceptance("naive", p, q, 3, sampling="without_replacement", method="exact")
        mc = verifier_acceptance(
            "naive", p, q, 3, sampling="without_replacement", method="monte_carlo", samples=4000, rng=5
        )
        assert abs(mc.value - exact.value) <= 4 * mc.stderr + 1e-12
    # two sequential draws, near one-hot: closed form against 50-digit arithmetic
    p, q = _near_one_hot(V=6, eps=1e-12)
    with mpmath.workdps(50):
        Q = [mpmath.mpf(float(x)) for x in q]
        tQ = sum(Q)
        Q = [x / tQ for x in Q]
        P = [mpmath.mpf(float(x)) for x in p / p.sum()]
        rest = [sum(Q[j] for j in range(6) if j != i) for i in range(6)]
        pi = [Q[y] * (1 + sum(Q[x] / rest[x] for x in range(6) if x != y)) for y in range(6)]
        want = float(sum(a * b for a, b in zip(P, pi)))
    got = verifier_acceptance("naive", p, q, 2, sampling="without_replacement").value
    assert got == pytest.approx(want, abs=1e-14)


def test_cp_inclusion_kernel_matches_slow_twin():
    rng = np.random.default_rng(26)
    for _ in range(50):
        V = int(rng.integers(2, 30))
        n = int(rng.integers(1, min(V, 6) + 1))
        x = rng.dirichlet(np.full(V, 0.5))
        x[rng.random(V) < 0.2] = 0.0
        if np.count_nonzero(x) < n:
            continue
        x = x / x.max()
        np.testing.assert_allclose(
            _kernels.cp_inclusion(x, n), oracles.cp_inclusion_slow(x, n), rtol=1e-12, atol=1e-15
        )


@pytest.mark.parametrize("sampling", ["with_replacement", "greedy", "hub", "without_replacement"])
def test_batch_draft_sampler_matches_tuple_law(sampling):
    from mdsd_ot.verifiers import sample_drafts_batch

    q = np.array([0.3, 0.0, 0.25, 0.2, 0.15, 0.1])
    n = 2
    scheme = get_scheme(sampling)
    tuples, probs = scheme.tuple_law(q, n)
    draws = sample_drafts_batch(
        scheme, q, n, 20000 if sampling != "without_replacement" else 3000, np.random.default_rng(27)
    )
    index = {tuple(t): i for i, t in enumerate(tuples.tolist())}
    counts = np.zeros(len(tuples))
    for d in draws.tolist():
        counts[index[tuple(d)]] += 1  # KeyError if a zero-probability tuple is drawn
    _, pvalue = stats.chisquare(counts, counts.sum() * probs)
    assert pvalue > 1e-4


# ---------------------------------------------------------------- acceptance in [0, 1], huge n
from fractions import Fraction  # noqa: E402

from mdsd_ot._config import MAX_MONTE_CARLO_DRAWS, RRS_MAX_CHAIN_ENTRIES, UNIT_ROUNDING_TOL  # noqa: E402
from mdsd_ot.compare import compare  # noqa: E402
from mdsd_ot.verifiers.base import power_exceeds, residual, unit_interval  # noqa: E402
from mdsd_ot.verifiers.specinfer import rrs_rejection  # noqa: E402


def _rrs_rejection_exact(p, q, n) -> Fraction:
    """prod_i sum_y (r_i - q)_+ in rational arithmetic (the residual chain of docs/math.md#rrs)."""
    p = [Fraction(x) for x in p]
    q = [Fraction(x) for x in q]
    p = [x / sum(p) for x in p]
    q = [x / sum(q) for x in q]
    r, prod = p, Fraction(1)
    for _ in range(n):
        d = [max(a - b, 0) for a, b in zip(r, q)]
        mass = sum(d)
        prod *= mass
        if mass == 0:
            break
        r = [x / mass for x in d]
    return prod


def test_rrs_rejection_matches_the_rational_residual_chain():
    rng = np.random.default_rng(31)
    for p, q, _ in instances(150, seed=32, max_v=6):
        n = int(rng.integers(1, 30))
        exact = float(_rrs_rejection_exact(p, q, n))
        assert rrs_rejection(p / p.sum(), q / q.sum(), n) == pytest.approx(exact, abs=4e-16)


def test_rrs_rejection_jumps_match_the_explicit_chain_for_long_chains():
    # the closed-form jumps over steps with an unchanged support: compare with the float chain
    for p, q, n in [
        ([0.5, 0.5, 0.0], [1e-3, 2e-3, 0.997], 3000),
        ([0.3, 0.3, 0.4], [0.2, 0.3, 0.5], 500),
        ([0.5, 0.25, 0.25], [0.0, 0.5, 0.5], 200),
        ([0.6, 0.4], [0.6, 0.4], 50),
    ]:
        p, q = np.array(p), np.array(q)
        r, prod = p, 1.0
        for _ in range(n):
            r, mass = residual(r, q)
            prod *= mass
        assert rrs_rejection(p, q, n) == pytest.approx(prod, abs=1e-13)


@pytest.mark.parametrize("n", [10**9, 2**62, 2**63 - 1])
def test_rrs_huge_n_is_exact_and_fast(n):
    # p = (1/2, 1/2), q = (1/4, 3/4): r_2 = (1, 0) is a fixed point and 1 - beta = 3/4 from then on
    p, q = [0.5, 0.5], [0.25, 0.75]
    assert verifier_acceptance("rrs", p, q, 3).value == pytest.approx(1 - 0.25 * 0.75**2, abs=1e-15)
    r = verifier_acceptance("rrs", p, q, n)
    assert r.value == 1.0 and r.method == "exact"
    # only q = 0 tokens left in the support: every later step rejects, the product stops changing
    r = verifier_acceptance("rrs", [0.5, 0.5, 0.0], [0.0, 0.5, 0.5], n)
    assert r.value == pytest.approx(0.5, abs=1e-15)
    # a long geometric phase (q-mass 3e-6 on the support) is jumped, not walked
    r = verifier_acceptance("rrs", [0.5, 0.5, 0.0], [1e-6, 2e-6, 1 - 3e-6], n)
    assert r.value == 1.0


@pytest.mark.slow
def test_rrs_chain_stops_at_its_fixed_point():
    prepared = VERIFIERS["rrs"].prepare([0.5, 0.5], [0.25, 0.75], 10**6)
    law, acc = prepared.output_law(np.zeros(10**6, dtype=np.int64))  # 10^6 drafts of token 0
    assert len(prepared.chain) == 2  # r_1 = p, r_2 = (1, 0) = r_3 = ...
    assert acc == 1.0 and law[0] == 1.0
    V = 100_000
    p = np.full(V, 1.0 / V)
    q = np.concatenate([[0.5], np.full(V - 1, 0.5 / (V - 1))])
    long = VERIFIERS["rrs"].prepare(p, q, RRS_MAX_CHAIN_ENTRIES // V + 10)
    with pytest.raises(ValueError, match="RRS_MAX_CHAIN_ENTRIES"):
        long._r(RRS_MAX_CHAIN_ENTRIES // V + 5)


def test_monte_carlo_draws_are_bounded():
    with pytest.raises(ValueError, match="MAX_MONTE_CARLO_DRAWS"):
        verifier_acceptance("naive", [0.5, 0.5], [0.25, 0.75], 10**9, method="monte_carlo", samples=10)
    with pytest.raises(ValueError, match="lower samples \\(at most"):
        verifier_acceptance(
            "rrs", [0.5, 0.5], [0.25, 0.75], 2, method="monte_carlo", samples=MAX_MONTE_CARLO_DRAWS
        )
    r = verifier_acceptance(
        "rrs", [0.5, 0.5], [0.25, 0.75], 2, method="monte_carlo", samples=MAX_MONTE_CARLO_DRAWS // 2000, rng=0
    )
    assert abs(r.value - 0.8125) < 5 * r.stderr + 1e-12


def test_power_exceeds_never_builds_huge_powers():
    assert power_exceeds(2, 10**18, 5) and not power_exceeds(1, 2**63, 5) and not power_exceeds(0, 9, 0)
    for b in range(0, 12):
        for e in range(1, 30):
            assert power_exceeds(b, e, 200_000) == (b**e > 200_000), (b, e)


def test_unit_interval_clips_rounding_and_raises_beyond():
    assert unit_interval(1.0 + 2**-52) == 1.0 and unit_interval(-1e-17) == 0.0
    with pytest.raises(RuntimeError, match="outside \\[0, 1\\] by more than rounding"):
        unit_interval(1.0 + 10 * UNIT_ROUNDING_TOL)
    with pytest.raises(RuntimeError):
        unit_interval(np.array([0.5, np.nan]))


@pytest.mark.parametrize(
    "name, sampling, n",
    [
        ("naive", "greedy", 3),
        ("naive", "without_replacement", 3),
        ("naive", "conditional_poisson", 3),
        ("naive", "with_replacement", 2),
        ("spechub", "hub", 2),
        ("greedy", "greedy", 2),
        ("rrs", None, 3),
        ("spectr", None, 3),
        ("rrs_without_replacement", None, 3),
    ],
)
def test_acceptance_in_unit_interval_when_p_sums_to_one_plus_ulp(name, sampling, n):
    # p / p.sum() of these sums to 1 + 2**-52: the closed forms used to return 1 + 2**-52
    rng = np.random.default_rng(5)
    for p, q in [
        ([0.7, 0.2, 0.1], [0.1, 0.2, 0.7]),
        ([0.7, 0.2, 0.1], [0.7, 0.2, 0.1]),
        ([0.6, 0.3, 0.1], [0.7, 0.2, 0.1]),
    ] + [(rng.dirichlet([0.3] * 4), rng.dirichlet([0.3] * 4)) for _ in range(30)]:
        if not supported(name, np.asarray(p), np.asarray(q), n, sampling):
            continue
        v = verifier_acceptance(name, p, q, n, sampling=sampling).value
        assert 0.0 <= v <= 1.0
        assert VERIFIERS[name].acceptance(p, q, n, sampling=sampling) == v


def test_spectr_rho_never_exceeds_the_largest_ratio():
    # sum(p) = 1 - ulp against 1 - (1 - beta)^3 pushed the bisection to rho = 1 + 5.5e-6 > max p/q,
    # where every draft can be rejected: P(accept | drafts) was off by 5.5e-6 on some tuples
    p = np.array(
        [
            2.0932284166902602e-16,
            0.9999999999999992,
            6.157522630051387e-17,
            1.7721115853533296e-16,
            3.3912694746163864e-16,
        ]
    )
    q = np.array(
        [
            5.02661073953024e-13,
            0.9999999999991571,
            4.565623580628854e-14,
            1.6196631884727163e-13,
            1.3257216571813302e-13,
        ]
    )
    prepared = VERIFIERS["spectr"].prepare(p, q, 3)
    assert prepared.rho <= np.max(prepared.p / prepared.q)
    law, acc = enumerate_verifier(prepared)  # asserts P(accept | drafts) against the law, per tuple
    np.testing.assert_allclose(law, prepared.p, rtol=0, atol=LAW_TOL)
    # rho* within rounding of max p/q: the residual (p - rho* q)_+ rounds to 0 and its limit is used
    p, q = np.array([1e-9, 0.0, 1.0]), np.array([1e-9, 0.0, 0.5])
    prepared = VERIFIERS["spectr"].prepare(p / p.sum(), q / q.sum(), 2)
    law, acc = enumerate_verifier(prepared)
    np.testing.assert_allclose(law, prepared.p, rtol=0, atol=LAW_TOL)
    assert prepared.acceptance() == pytest.approx(acc, abs=LAW_TOL)


def test_cp_inclusion_beyond_float_range_of_e_n():
    # e_1000 of 2000 weights leaves float64 (inf / 0): the log-space tables used to divide by zero
    q = np.random.default_rng(3).dirichlet(np.ones(2000))
    pi = _kernels.cp_inclusion(q / q.max(), 1000)
    assert np.all((pi > 0) & (pi <= 1)) and pi.sum() == pytest.approx(1000, rel=1e-11)
    r = verifier_acceptance("naive", np.full(2000, 1 / 2000), q, 1000, sampling="conditional_poisson")
    assert r.value == pytest.approx(0.5, abs=1e-12)  # uniform p: sum_y pi(y) / V = n / V


@pytest.mark.parametrize(
    "sampling, n, V",
    [
        ("with_replacement", 30, 2),
        ("with_replacement", 10**9, 2),
        ("with_replacement", 2**62, 2),
        ("with_replacement", 10**9, 1),
        ("with_replacement", 2**63 - 1, 1),
        ("without_replacement", 10, 1000),
        ("conditional_poisson", 500, 1000),
    ],
)
def test_lp_enumeration_size_is_checked_before_it_is_built(sampling, n, V):
    # 2^(10^9) as a Python int, one tuple of 10^9 drafts (V = 1), or 1000!/990! overflowing int64
    # (then enumerated): rejected at once, also by compare (which skips the LP verifier)
    p = q = np.full(V, 1.0 / V)
    with pytest.raises(ValueError, match="exact enumeration (would visit about 10\\^|of draft tuples of n)"):
        optimal_acceptance(p, q, n, sampling=sampling, method="lp")
    if sampling == "with_replacement":
        table = compare(p, q, n)
        # i.i.d. drafts: the full-vocabulary optimal verifier runs (no LP), p == q gives exactly 1
        assert "optimal" not in dict(table.skipped) and table["optimal"].acceptance == 1.0
        assert all(r.acceptance == 1.0 for r in table if n > 10**6)


def test_rsd_path_monte_carlo_work_is_bounded():
    from mdsd_ot.verifiers.rsd import MC_MAX_WORK

    V = 2000
    p = q = np.full(V, 1.0 / V)
    n = 1000  # no exact recursion at this size: Monte Carlo, O(samples n^3)
    with pytest.raises(ValueError, match="rsd.MC_MAX_WORK"):
        verifier_acceptance("rrs_without_replacement", p, q, n, samples=MC_MAX_WORK // n**3 + 1)
    table = compare(p, q, n, verifiers=None, samples=200)  # skipped with the reason, not a hang
    assert "MC_MAX_WORK" in dict(table.skipped)["rrs_without_replacement"]


def test_optimal_prepare_warns_nothing_for_subnormal_draft_masses():
    """Subnormal draft masses at small V (the Python bodies run there): no "invalid value" warning
    (0 * inf in a run's target); a ``-W error`` caller does not fail, and the value is alpha*."""
    import warnings

    from mdsd_ot import VERIFIERS, optimal_acceptance

    rng = np.random.default_rng(0)
    checked = 0
    for V in (2, 3, 4, 5, 8):
        for t in range(30):
            p = rng.dirichlet(np.ones(V))
            if t % 3 == 0:
                p[rng.random(V) < 0.3] = 0.0
                p[0] += 1e-3
                p /= p.sum()
            q = np.where(rng.random(V) < 0.5, 5e-324 * rng.integers(1, 1000, V), rng.random(V))
            q[0] = 1.0
            q /= q.sum()
            for n in (1, 2, 3):
                with warnings.catch_warnings():
                    warnings.simplefilter("error")
                    value = VERIFIERS["optimal"].prepare(p, q, n, sampling="with_replacement").acceptance()
                assert abs(value - optimal_acceptance(p, q, n).value) <= 1e-12
                checked += 1
    assert checked == 5 * 30 * 3


def test_a_prepared_problem_checks_every_draft_tuple():
    """check_drafts keeps the top tokens it needs per prepared problem (greedy, hub, top-n), and still
    refuses each bad tuple on every call: negative and out-of-range tokens, q = 0, repeats, a greedy
    last draft inside the top, a hub tuple without the hub; the verdict says whether a draft won."""
    p, q = np.array([0.4, 0.3, 0.2, 0.1, 0.0]), np.array([0.1, 0.4, 0.3, 0.2, 0.0])
    rng = np.random.default_rng(3)
    cases = {
        "greedy": (3, [1, 2, 0], [[1, 2, 1], [2, 1, 2], [1, 0, 2], [1, 2, 4]]),
        "spechub": (2, [1, 3], [[0, 2], [1, 1]]),
        "rrs_without_replacement": (2, [3, 0], [[0, 0], [-1, 2], [0, 5], [4, 1]]),
        "rrs": (2, [0, 0], [[-1, 0], [0, 5], [0, 4]]),
    }
    for name, (n, good, bads) in cases.items():
        prepared = VERIFIERS[name].prepare(p, q, n)
        for _ in range(2):  # the second round runs on what the first one cached
            verdict = prepared.verify(good, rng)
            assert verdict.accepted == (verdict.token in good)
            for bad in bads:
                with pytest.raises(ValueError):
                    prepared.verify(bad, rng)
    top_n = VERIFIERS["naive"].prepare(p, q, 2, sampling="top_n")
    assert top_n.check_drafts([2, 1]).tolist() == [2, 1]
    for bad in ([1, 1], [1, 0], [0, 3]):
        with pytest.raises(ValueError, match="top_n drafts"):
            top_n.check_drafts(bad)
