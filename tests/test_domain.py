"""The exactness promise over its whole stated domain, swept against independent references.

Every value is compared with a reference that does not call the code under test (``oracles``):
exact rationals (small V, magnitudes from 1 down to the smallest subnormal mixed in one vector),
the uniform-draft closed form (V up to 152,064, n up to 128), and a 50-digit DP over mass classes
(class-structured drafts: near one-hot, tiny masses, top-k-truncated targets). Seeded, so a failure
is reproducible.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from oracles import (
    class_sequential_alpha,
    exact_alpha,
    exact_alpha_with_replacement,
    exact_sequential_alpha,
    few_ordinary_sequential_alpha,
    fr,
    mp_conditional_poisson,
    mp_greedy,
    mp_sequential_product_bound,
    mp_with_replacement,
    top_indices,
    uniform_sequential_alpha,
)

import mdsd_ot
from mdsd_ot import optimal_acceptance, optimal_acceptance_batch

TOL = 1e-12
SCHEMES = tuple(mdsd_ot.SCHEMES)  # every registered scheme: a new one must join the sweeps below


def mixed_magnitudes(rng, V, *, zeros=True):
    """A vector whose entries range from 1 down to subnormals (10^-U(0, 323)), some zero."""
    x = 10.0 ** -rng.uniform(0, 323, V)
    if rng.random() < 0.5:
        x[rng.integers(V)] = 1.0  # one dominant token (near one-hot)
    if zeros:
        x[rng.random(V) < 0.2] = 0.0
    if x.sum() == 0:
        x[0] = 1.0
    return x / x.sum()


def target(rng, V):
    """A target: mixed magnitudes, one-hot, or truncated to its top k (top-k / top-p sampling)."""
    kind = rng.integers(3)
    p = mixed_magnitudes(rng, V) if kind else rng.dirichlet(np.ones(V))
    if kind == 1:
        p = np.zeros(V)
        p[rng.integers(V)] = 1.0
    elif kind == 2:
        k = int(rng.integers(1, V + 1))
        p[np.argsort(-p, kind="stable")[k:]] = 0.0
        p /= p.sum()
    return p


def _cases(rng, count):
    for _ in range(count):
        V = int(rng.integers(2, 7))
        q = mixed_magnitudes(rng, V)
        support = int(np.count_nonzero(q))
        for scheme in SCHEMES:
            top_n = 2 if scheme == "hub" else min(support, 6 if V <= 5 else 4)
            need = 1 if scheme == "with_replacement" else 2
            if scheme != "with_replacement" and support < need:
                continue
            n = (
                2
                if scheme == "hub"
                else int(rng.integers(1 if scheme == "with_replacement" else 2, top_n + 1))
            )
            yield V, q, scheme, n


def test_mixed_magnitudes_every_scheme_against_exact_rationals():
    """V <= 6, masses from 1 to 1e-323 mixed (subnormals, zeros, near one-hot), every scheme, n up to
    the support size: the dual value and the batch value equal exact rational arithmetic to 1e-12."""
    rng = np.random.default_rng(8_2026)
    checked = 0
    for V, q, scheme, n in _cases(rng, 40):
        p = target(rng, V)
        expected = float(exact_alpha(p, q, n, scheme))
        r = optimal_acceptance(p, q, n, sampling=scheme)
        assert r.success, (scheme, n, p, q, r.message)
        assert abs(r.value - expected) <= TOL, (scheme, n, p.tolist(), q.tolist(), r.value, expected)
        batch = optimal_acceptance_batch(p[None], q[None], n, sampling=scheme)[0]
        assert abs(batch - expected) <= TOL, (scheme, n, p.tolist(), q.tolist(), batch, expected)
        checked += 1
    assert checked >= 150


@pytest.mark.slow
@pytest.mark.parametrize("n", [1, 2, 7, 32, 128])
def test_with_replacement_many_drafts_mixed_magnitudes(n):
    """With replacement, any n: exact rationals (q(H)^n) at magnitudes down to subnormals."""
    rng = np.random.default_rng(n)
    for _ in range(15):
        V = int(rng.integers(2, 9))
        p, q = target(rng, V), mixed_magnitudes(rng, V)
        expected = float(exact_alpha_with_replacement(p, q, n))
        assert abs(optimal_acceptance(p, q, n).value - expected) <= TOL


def test_issue_examples_tiny_draft_masses():
    """The inputs that returned wrong values with success=True: tiny masses, sequential n = 3."""
    p = np.array([1.0, 0, 0, 0])
    q = np.array([1e-55, 1e-200, 1e-140, 1.0])
    q /= q.sum()
    expected = float(exact_alpha(p, q, 3, "without_replacement"))
    assert expected == 1.0
    r = optimal_acceptance(p, q, 3, sampling="without_replacement")
    assert r.success and abs(r.value - expected) <= TOL
    assert (
        abs(optimal_acceptance_batch(p[None], q[None], 3, sampling="without_replacement")[0] - expected)
        <= TOL
    )
    # V = 100: q = 1e-40 except q[0] = 1 and q[-1] = 1e-30; p one-hot on the last token
    V = 100
    cls = [1] * V
    cls[0], cls[-1] = 0, 2
    values = [1.0, 1e-40, 1e-30]
    q = np.array([values[c] for c in cls])
    q /= q.sum()
    p = np.zeros(V)
    p[-1] = 1.0
    expected = float(class_sequential_alpha(p, cls, values, 3))
    r = optimal_acceptance(p, q, 3, sampling="without_replacement")
    assert r.success and abs(r.value - expected) <= TOL


# ------------------------------------------- fewer than n tokens of non-negligible draft mass
#
# The pruning bound of the sequential scan used to form q(H) - s_j by subtraction: where the exact
# difference lies far below one ulp of q(H) (a few ordinary masses, the rest tiny) it rounded to ~1e-16
# next to an outside mass of 1e-204, the "lower bound" W >= ~1 was false, and the optimum was pruned
# unevaluated (docs/math.md#pruning).


def _few_ordinary_case(rng, n, *, classes=1):
    """k < n ordinary draft masses and at least n - k tiny ones (1e-300..1e-40, ``classes`` distinct
    values, each class 0.1..10 times the first), a random or top-k-truncated target."""
    k = int(rng.integers(max(1, n // 2), n) if rng.random() < 0.7 else rng.integers(1, n))
    m = n - k
    t = max(int(rng.integers(m, m + 6)), classes)
    V = k + t
    idx = rng.permutation(V)
    q = np.zeros(V)
    q[idx[:k]] = 0.1 / k + 0.9 * rng.dirichlet(np.ones(k))
    tiny = 10.0 ** -rng.uniform(40, 300)
    values = [tiny] + [tiny * rng.uniform(0.1, 10.0) for _ in range(classes - 1)]
    q[idx[k:]] = rng.choice(values, t)
    q[idx[k : k + classes]] = values  # every class present
    q /= q.sum()
    p = rng.dirichlet(np.full(V, float(rng.choice([0.3, 1.0, 3.0]))))
    if rng.random() < 0.3:
        p[np.argsort(-p, kind="stable")[int(rng.integers(1, V + 1)) :]] = 0.0
        p /= p.sum()
    return p, q, sorted(idx[:k].tolist())


def _reference(scheme, p, q, n, ordinary):
    """alpha* of every registered scheme on a few-ordinary-masses input, by an independent oracle."""
    if scheme == "without_replacement":
        value, eps = few_ordinary_sequential_alpha(p, q, n, ordinary)
        assert eps < 1e-20
        return float(value)
    if scheme == "with_replacement":
        return float(mp_with_replacement(p, q, n))
    if scheme == "greedy":
        return float(mp_greedy(p, q, n))
    if scheme == "conditional_poisson":
        return float(mp_conditional_poisson(p, q, n))
    if scheme == "top_n":  # Q(H) = 1[Top_n in H]: alpha* = min(1, p(Top_n))
        exact_p = fr(p)
        return float(min(1, sum(exact_p[i] for i in top_indices(q.tolist(), n))))
    if scheme == "hub":
        return None  # n = 2 only: the exact-rational sweep at tiny V covers it
    raise AssertionError(f"no reference for the registered scheme {scheme!r}: add one here")


@pytest.mark.parametrize(
    "ns",
    [
        pytest.param(range(3, 33), id="n3-32"),
        pytest.param(range(33, 65), id="n33-64"),
        pytest.param([128], id="n128"),
        # the sequential scan takes ~40 ms a call at n ~ 100 (these two blocks: 80% of the sweep's time)
        pytest.param(range(65, 97), id="n65-96", marks=pytest.mark.slow),
        pytest.param(range(97, 128), id="n97-127", marks=pytest.mark.slow),
    ],
)
def test_fewer_ordinary_masses_than_drafts_every_n_every_scheme(ns):
    """n = 3..128 (every n, in five blocks; n = 65..127 in the full lane only), k < n ordinary draft
    masses and tiny ones down to 1e-300: every registered scheme (single call and batch) against its
    independent reference; for sequential sampling the exact reduction to the tiny tokens (exact
    rationals, or the 50-digit class DP with two classes of tiny masses)."""
    checked = 0
    for n in ns:
        rng = np.random.default_rng(25_000 + n)
        classes = 2 if n <= 12 and n % 2 == 0 else 1
        p, q, ordinary = _few_ordinary_case(rng, n, classes=classes)
        for scheme in SCHEMES:
            if get_fixed_n(scheme) not in (None, n):
                continue
            expected = _reference(scheme, p, q, n, ordinary)
            r = optimal_acceptance(p, q, n, sampling=scheme)
            assert r.success, (scheme, n, r.message)
            assert abs(r.value - expected) <= TOL, (scheme, n, p.tolist(), q.tolist(), r.value, expected)
            batch = optimal_acceptance_batch(p[None], q[None], n, sampling=scheme)[0]
            assert abs(batch - expected) <= TOL, (scheme, n, batch, expected)
            checked += 1
    assert checked >= 4 * len(ns)


def get_fixed_n(scheme):
    return mdsd_ot.get_scheme(scheme).fixed_n


@pytest.mark.parametrize("n", range(3, 17))
def test_fewer_ordinary_masses_than_drafts_sequential_dense(n):
    """The same class, denser at small n (where rounding luck decided most often: about 1 input in 20
    was wrong), one and two classes of tiny masses, single call and batch of all rows at once."""
    rng = np.random.default_rng(2_500 + n)
    rows = [_few_ordinary_case(rng, n, classes=1 + (i % 2)) for i in range(10)]
    for p, q, ordinary in rows:
        expected = _reference("without_replacement", p, q, n, ordinary)
        r = optimal_acceptance(p, q, n, sampling="without_replacement")
        assert r.success, r.message
        assert abs(r.value - expected) <= TOL, (n, p.tolist(), q.tolist(), r.value, expected)
        batch = optimal_acceptance_batch(p[None], q[None], n, sampling="without_replacement")[0]
        assert abs(batch - expected) <= TOL, (n, batch, expected)


@pytest.mark.parametrize(
    "p, q, n",
    [
        (
            [0.1501, 0.2546, 0.0868, 0.2021, 0.0615, 0.0139, 0.2309],
            [0.3968, 0.0569, 5e-170, 0.101, 2e-170, 0.4452, 1e-170],
            5,
        ),
        (
            [0.2243, 0.0726, 0.0471, 0.0255, 0.196, 0.126, 0.002, 0.3066],
            [0.2203, 0.0972, 0.3017, 2e-238, 0.2753, 4e-238, 0.1055, 2e-238],
            6,
        ),
    ],
)
def test_fewer_ordinary_masses_issue_examples(p, q, n):
    """Inputs of the class that returned 1.0 with success=True (exact alpha* 0.894077 and 0.943431):
    n - 1 ordinary draft masses, the rest tiny; as given and renormalised first."""
    p, q = np.array(p), np.array(q)
    ordinary = np.flatnonzero(q > 1e-3)
    expected, eps = few_ordinary_sequential_alpha(p, q, n, ordinary)
    assert eps < 1e-150
    for qq in (q, q / q.sum()):
        r = optimal_acceptance(p, qq, n, sampling="without_replacement", normalize=True)
        assert r.success and abs(r.value - float(expected)) <= TOL, (r.value, float(expected))


@pytest.mark.parametrize("seed", [0, 1, 2] + [pytest.param(s, marks=pytest.mark.slow) for s in (3, 4, 5)])
def test_fewer_ordinary_masses_tiny_v_every_scheme_exact_rationals(seed):
    """V <= 7, masses from 1 down to 1e-300 mixed, fewer ordinary tokens than drafts (and the hub's
    n = 2): every registered scheme against exact rationals over every subset (no sorting theorem)."""
    rng = np.random.default_rng(7_250 + seed)
    checked = 0
    for _ in range(4):
        V = int(rng.integers(4, 8))
        n = int(rng.integers(3, V + 1))
        k = int(rng.integers(1, n))
        q = 10.0 ** -rng.uniform(40, 300, V)
        q[:k] = rng.dirichlet(np.ones(k))
        q = q[rng.permutation(V)]
        q /= q.sum()
        p = target(rng, V)
        for scheme in SCHEMES:
            m = get_fixed_n(scheme) or n
            if scheme == "without_replacement":
                expected = float(exact_sequential_alpha(p, q, m))
            elif scheme == "with_replacement":
                expected = float(exact_alpha_with_replacement(p, q, m))
            else:
                expected = float(exact_alpha(p, q, m, scheme))
            r = optimal_acceptance(p, q, m, sampling=scheme)
            assert r.success, (scheme, m, r.message)
            assert abs(r.value - expected) <= TOL, (scheme, m, p.tolist(), q.tolist(), r.value, expected)
            checked += 1
    assert checked == 4 * len(SCHEMES)


def _cold_draft_pair(rng, V, temperature):
    """An LLM-like pair: target at T = 1, draft at a low temperature (most of its mass on a few tokens,
    the rest far below one ulp of it)."""
    z = rng.standard_normal(V) * 2.5 - 1.1 * np.log(np.arange(1, V + 1))
    p = np.exp(z - z.max())
    zq = (z + 0.5 * rng.standard_normal(V)) / temperature
    q = np.exp(zq - zq.max())
    return p / p.sum(), q / q.sum()


@pytest.mark.parametrize(
    "V, temperature, n", [(300, 0.2, 4), (300, 0.05, 16), (2000, 0.1, 8), (2000, 0.05, 32)]
)
def test_cold_drafts_sequential_below_certified_prefixes(V, temperature, n):
    """Low-temperature drafts (they returned 1.0 where alpha* <= 0.38): alpha* <= p(H) + 1 - L(H) for
    H = the m most likely draft tokens, every m, with L(H) a lower bound on W_n(H) evaluated at 50 digits
    (the product bound of docs/math.md#pruning, every mass summed directly); and the value is attained
    (the independent certificate re-check passed)."""
    for seed in range(3):
        rng = np.random.default_rng(seed)
        p, q = _cold_draft_pair(rng, V, temperature)
        r = optimal_acceptance(p, q, n, sampling="without_replacement")
        assert r.success, r.message
        by_q = np.argsort(-q, kind="stable")
        for m in range(n, min(V, n + 40)):
            mask = np.zeros(V, dtype=bool)
            mask[by_q[:m]] = True
            upper = math.fsum(p[by_q[:m]]) + 1.0 - float(mp_sequential_product_bound(q, mask, n))
            assert r.value <= upper + TOL, (seed, m, r.value, upper)


@pytest.mark.parametrize("seed", range(12))
def test_class_structured_drafts_without_replacement(seed):
    """Sequential sampling, n = 3..16: drafts with 2-3 mass classes of wildly different magnitude
    (near one-hot heads, tails down to 1e-300) and targets that are one-hot, top-k-truncated or
    random, against the 50-digit class DP (no quadrature)."""
    rng = np.random.default_rng(100 + seed)
    V = int(rng.integers(20, 80))
    values = sorted(10.0 ** -rng.uniform(0, 300, int(rng.integers(2, 4))), reverse=True)
    values[0] = 1.0
    cls = rng.integers(0, len(values), V)
    cls[rng.integers(V)] = 0
    q = np.array([values[c] for c in cls])
    q /= q.sum()
    p = target(rng, V)
    n = int(rng.integers(3, min(16, V) + 1))
    expected = float(class_sequential_alpha(p, list(cls), values, n))
    r = optimal_acceptance(p, q, n, sampling="without_replacement")
    assert r.success, r.message
    assert abs(r.value - expected) <= TOL, (seed, n, r.value, expected)


@pytest.mark.parametrize(
    "V, n",
    [
        (1000, 3),
        (1000, 64),
        (10_000, 8),
        (10_000, 128),
        (10_000, 500),
        pytest.param(152_064, 16, marks=pytest.mark.slow),
        pytest.param(152_064, 128, marks=pytest.mark.slow),
    ],
)
def test_uniform_draft_many_drafts(V, n):
    """Uniform q (the drafted set is a uniform n-subset): closed form at every n, random and
    top-k-truncated targets (the error grew to 1e-3 at n = 128 before the step depended on n)."""
    rng = np.random.default_rng(V + n)
    q = np.full(V, 1.0 / V)
    for kind in range(2):
        p = rng.dirichlet(np.full(V, 0.5))
        if kind == 1:
            p[np.argsort(-p)[max(n, V // 20) :]] = 0.0
            p /= p.sum()
        expected = float(uniform_sequential_alpha(p, n))
        r = optimal_acceptance(p, q, n, sampling="without_replacement")
        assert r.success, r.message
        assert abs(r.value - expected) <= TOL, (kind, r.value, expected)


def _llm_top5_pair(rng, V):
    z = rng.standard_normal(V) * 2.5 - 1.1 * np.log(np.arange(1, V + 1))
    p = np.exp(z - z.max())
    p[np.argsort(-p)[5:]] = 0.0  # a target truncated to its top 5 (top-k sampling)
    zq = (z + rng.standard_normal(V)) / 0.05  # the draft: a full softmax at temperature 0.05
    q = np.exp(zq - zq.max())
    return p / p.sum(), q / q.sum()


@pytest.mark.parametrize(
    "V, seeds", [(1200, range(8)), pytest.param(4000, range(8, 12), marks=pytest.mark.slow)]
)
@pytest.mark.slow
def test_llm_like_top5_target_cold_draft_n3(V, seeds):
    """The LLM-like pairs that were wrong by up to 1.4e-2: top-5 target, T = 0.05 draft, n = 3.

    p = 0 tokens come first in the q/p order and only add draft mass, so the optimal H is one of the
    6 prefixes that end the p = 0 block; W_3 of each by its double-sum closed form (extended
    precision) gives alpha* independently of the quadrature.
    """
    from oracles import sequential_mass_3

    for seed in seeds:
        rng = np.random.default_rng(seed)
        p, q = _llm_top5_pair(rng, V)
        zero = p == 0
        nonzero = np.flatnonzero(~zero)
        nonzero = nonzero[np.argsort(-(q[nonzero] / p[nonzero]), kind="stable")]
        best = 0.0
        for k in range(nonzero.size + 1):
            mask = zero.copy()
            mask[nonzero[:k]] = True
            best = max(best, sequential_mass_3(q, mask) - p[mask].sum())
        r = optimal_acceptance(p, q, 3, sampling="without_replacement")
        assert r.success, r.message
        assert abs(r.value - (1.0 - best)) <= TOL, (seed, r.value, 1.0 - best)


# ------------------------------------------------------------------------------ every verifier
def _verifier_cases(seed, count):
    from mdsd_ot.verifiers import VERIFIERS

    rng = np.random.default_rng(seed)
    for _ in range(count):
        V = int(rng.integers(2, 6))
        p, q = target(rng, V), mixed_magnitudes(rng, V)
        for name, verifier in VERIFIERS.items():
            schemes = ("with_replacement", "without_replacement", "greedy") if name == "optimal" else (None,)
            for sampling in schemes:
                scheme = verifier.resolve_scheme(sampling)
                n = 2 if name == "spechub" else int(rng.integers(1, 4))
                try:
                    verifier.check_n(n)
                    scheme.check(q, n)
                except ValueError:
                    continue
                yield name, p, q, n, scheme.name


@pytest.mark.slow
def test_every_verifier_is_valid_and_below_its_bound_at_extreme_magnitudes():
    """Masses from 1 to subnormals mixed (1 - q_x subnormal included), every verifier: the exact
    output law summed over every draft tuple equals p to 1e-12, the exact acceptance equals that
    enumeration, and no acceptance exceeds its scheme's exact (rational) bound."""
    from mdsd_ot.verifiers import VERIFIERS

    checked = 0
    for name, p, q, n, sampling in _verifier_cases(31, 60):
        prepared = VERIFIERS[name].prepare(p, q, n, sampling=sampling)
        tuples, probs = prepared.scheme.tuple_law(prepared.q, n)
        law = np.zeros(p.size)
        acc = 0.0
        for t, pr in zip(tuples, probs):
            lt, at = prepared.output_law(t)
            law += pr * lt
            acc += pr * at
        np.testing.assert_allclose(law, prepared.p, rtol=0, atol=1e-12, err_msg=f"{name} {p} {q} {n}")
        bound = float(exact_alpha(p, q, n, sampling))
        assert acc <= bound + 1e-12, (name, p.tolist(), q.tolist(), n, acc, bound)
        if prepared.exact_available():
            assert abs(prepared.acceptance() - acc) <= 1e-12, (name, p.tolist(), q.tolist(), n)
        checked += 1
    assert checked >= 300


@pytest.mark.parametrize("n", [2, 3])
def test_rsd_with_subnormal_complement(n):
    """RSD when 1 - q_x is subnormal: 1 / (1 - q_x) overflowed and the rejection term was dropped
    (acceptance 1.0, three times alpha*). Exact and Monte Carlo stay at or below the exact bound."""
    from mdsd_ot.verifiers import verifier_acceptance

    p = np.array([0.0, 1.0, 0.0, 0.0])
    q = np.array([1.0, 1.5e-321, 1.5e-321, 1.5e-321])
    bound = float(exact_alpha(p, q, n, "without_replacement"))
    exact = verifier_acceptance("rrs_without_replacement", p, q, n)
    assert exact.value <= bound + 1e-12
    mc = verifier_acceptance("rrs_without_replacement", p, q, n, method="monte_carlo", samples=2000, rng=0)
    assert mc.value <= bound + 1e-12


def test_monte_carlo_error_is_honest_when_rare_paths_are_never_sampled():
    """Near one-hot drafts: the rare rejection paths are not sampled, every sample can be equal, and
    the sample standard error is 0; the reported error still covers the distance to the exact value."""
    from mdsd_ot.verifiers import verifier_acceptance

    rng = np.random.default_rng(5)
    for _ in range(6):
        V = 6
        q = np.full(V, 1e-7)
        q[0] = 1.0
        q[1:] = 10.0 ** -rng.uniform(6, 9, V - 1)
        q /= q.sum()
        p = rng.dirichlet(np.ones(V))
        for n in (3, 4):
            exact = verifier_acceptance("rrs_without_replacement", p, q, n, method="exact").value
            mc = verifier_acceptance(
                "rrs_without_replacement", p, q, n, method="monte_carlo", samples=500, rng=1
            )
            assert mc.stderr > 0.0
            assert abs(mc.value - exact) <= 4 * mc.stderr, (n, mc, exact)


def test_sequential_mass_at_many_drafts_warns_nothing_and_is_exact():
    """DraftScheme.mass at n = 128, V = 500 overflowed a float product (a RuntimeWarning escaped);
    against the uniform closed form C(k, n) / C(V, n)."""
    import math
    from fractions import Fraction

    from mdsd_ot import get_scheme

    V, n, k = 500, 128, 400
    q = np.full(V, 1.0 / V)
    mask = np.arange(V) < k
    expected = float(Fraction(math.comb(k, n), math.comb(V, n)))
    assert abs(get_scheme("without_replacement").mass(q, n, mask) - expected) <= 1e-15


@pytest.mark.parametrize("n", [100, 10**3, 10**6, 10**9, 10**15])
def test_with_replacement_and_its_verifiers_at_huge_n(n):
    """q(H)^n at n = 10^9: a prefix sum near one carries ~1e-16 of rounding, which x^n multiplies by n
    (the bound and SpecTr's 1 - (1 - beta)^n were 2e-8 apart). Against 50-digit arithmetic over all
    subsets; SpecTr and naive stay below it."""
    import itertools

    import mpmath

    from mdsd_ot.verifiers import verifier_acceptance

    rng = np.random.default_rng(n % 1000)
    for trial in range(7):
        V = int(rng.integers(3, 7))
        p = rng.dirichlet(np.ones(V))
        q = rng.dirichlet(np.ones(V)) if trial % 2 else mixed_magnitudes(rng, V)
        if trial == 0:
            p[0], q[0] = 0.2, 0.0  # a token that is never drafted
            p, q = p / p.sum(), q / q.sum()
        if trial == 6:  # the fuzz input that found it
            p = np.array([0.0, 0.17533786, 0.30284902, 0.00078905, 0.52102406])
            q = np.array([0.91546315, 0.0, 0.03999421, 0.01001797, 0.03452467])
            V = 5
        with mpmath.workdps(60):
            P = [mpmath.mpf(float(x)) for x in p]
            Q = [mpmath.mpf(float(x)) for x in q]
            tp, tq = mpmath.fsum(P), mpmath.fsum(Q)
            best = min(
                mpmath.fsum(P[i] for i in H) / tp + 1 - (mpmath.fsum(Q[i] for i in H) / tq) ** n
                for r in range(V + 1)
                for H in itertools.combinations(range(V), r)
            )
        expected = float(best)
        assert abs(optimal_acceptance(p, q, n).value - expected) <= TOL, (trial, p, q)
        for name in ("spectr", "naive", "rrs"):
            assert verifier_acceptance(name, p, q, n).value <= expected + TOL, (name, trial)


def test_study_stores_only_checked_values(monkeypatch):
    """The study keeps a bound only when its certificate re-check passed, and records a verifier
    above its bound as an internal error (with the input's fingerprint), never as a value."""
    import mdsd_ot
    from mdsd_ot import study
    from mdsd_ot.result import AcceptanceResult

    rng = np.random.default_rng(3)
    P = rng.dirichlet(np.ones(8), size=2)
    Q = rng.dirichlet(np.ones(8), size=2)
    rows = study.evaluate_rows(P, Q, ns=[2], schemes=["with_replacement"], verifiers=["rrs"])
    assert all(r["bound:with_replacement@2"] is not None and "errors" not in r for r in rows)
    real = mdsd_ot.optimal_acceptance

    def failing(p, q, n, **kw):
        r = real(p, q, n, **kw)
        return AcceptanceResult(
            r.value, r.subset, r.method, r.sampling, n, False, "certificate check failed: test"
        )

    from mdsd_ot import api, plan

    # the plan's own re-check fails, then the one-at-a-time API it falls back to fails too
    monkeypatch.setattr(plan, "_recheck_prefixes", lambda pl, solved: {key: 1.0 for key in solved})
    monkeypatch.setattr(api, "optimal_acceptance", failing)
    rows = study.evaluate_rows(P, Q, ns=[2], schemes=["with_replacement"], verifiers=[])
    assert all(r["bound:with_replacement@2"] is None for r in rows)
    assert all("certificate check failed" in r["errors"]["bound:with_replacement@2"] for r in rows)
    monkeypatch.setattr(api, "optimal_acceptance", real)
    rows = study.evaluate_rows(P, Q, ns=[2], schemes=["with_replacement"], verifiers=[])
    assert all(r["bound:with_replacement@2"] is not None for r in rows)  # the API recovered the value
    monkeypatch.undo()

    always_one = plan.PlanVerifier(lambda n: True, lambda pl, ns: [1.0 for _ in ns])
    monkeypatch.setattr(mdsd_ot.VERIFIERS["rrs"], "plan", always_one)
    rows = study.evaluate_rows(P, Q, ns=[2], schemes=["with_replacement"], verifiers=["rrs"])
    for r in rows:
        assert r["verifier:rrs@2"] is None
        assert (
            "internal error" in r["errors"]["verifier:rrs@2"]
            and "fingerprint" in r["errors"]["verifier:rrs@2"]
        )


# ------------------------------------------------------- every entry point on the new input classes
def _subnormal_rest_pair(rng, V):
    """A draft at T = 0.05 whose top logit leads by 36: the mass outside its top tokens is subnormal."""
    z = rng.standard_normal(V)
    z[int(rng.integers(V))] = z.max() + 36.0
    q = np.exp((z - z.max()) / 0.05)
    return target(rng, V), q / q.sum()


def _differential_cases():
    rng = np.random.default_rng(2_525)
    for i in range(32):
        kind = i % 4
        if kind == 0:
            n = int(rng.integers(3, 9))
            p, q, _ = _few_ordinary_case(rng, n, classes=1 + (i % 8 == 0))
        elif kind == 1:
            p, q = _subnormal_rest_pair(rng, int(rng.integers(3, 60)))
        elif kind == 2:
            V = int(rng.integers(2, 12))
            p, q = target(rng, V), mixed_magnitudes(rng, V)
        else:
            p, q = _cold_draft_pair(rng, int(rng.integers(20, 300)), float(rng.choice([0.05, 0.1, 0.2])))
        yield i, p, q


def _outcome(fn):
    """``float`` value, or ``"refused"`` for a ValueError (bad input for this scheme and n)."""
    try:
        value = fn()
    except ValueError:
        return "refused"
    return "refused" if value is None else float(value)


@pytest.mark.parametrize(
    "cases",
    [
        pytest.param(range(16), id="cases0-15"),  # four inputs of each class
        pytest.param(range(16, 32), id="cases16-31", marks=pytest.mark.slow),
    ],
)
def test_every_entry_point_agrees_or_all_refuse(cases):
    """Single call, batch, evaluation plan and torch backend (CPU) on the new input classes (fewer
    ordinary masses than drafts, subnormal rest masses, masses from 1 to 1e-300 mixed, cold drafts):
    every bound of every registered scheme and every closed-form verifier agrees to 1e-12 across the
    entry points that cover it, or every one of them refuses the input. 32 seeded inputs drawn in
    turn from one generator, checked in two parts (the second in the full lane)."""
    torch = pytest.importorskip("torch")
    from mdsd_ot import verifier_acceptance
    from mdsd_ot.backends import torch as tb
    from mdsd_ot.plan import evaluate_position

    checked = 0
    for i, p, q in _differential_cases():
        if i not in cases:
            continue
        pt, qt = torch.tensor(p)[None], torch.tensor(q)[None]
        for n in (1, 2, 3, 5):
            for scheme in SCHEMES:
                if get_fixed_n(scheme) not in (None, n):
                    continue
                res = {
                    "single": _outcome(lambda: optimal_acceptance(p, q, n, sampling=scheme).value),
                    "batch": _outcome(
                        lambda: optimal_acceptance_batch(p[None], q[None], n, sampling=scheme)[0]
                    ),
                    "plan": _outcome(
                        lambda: evaluate_position(p, q, [n], schemes=[scheme], verifiers=()).bounds[
                            (scheme, n)
                        ]
                    ),
                }
                covered = scheme in tb.SAMPLINGS and (scheme == "with_replacement" or n <= 2)
                if covered:
                    res["torch"] = _outcome(lambda: tb.sorted_prefix_bound(pt, qt, n, scheme).value[0])
                if scheme in ("greedy", "hub"):
                    batch = tb.evaluate_batch(pt, qt, [n], schemes=[scheme], verifiers=())
                    res["torch"] = float(batch[f"bound:{scheme}@{n}"][0]) if batch else "refused"
                values = [v for v in res.values() if v != "refused"]
                assert not values or len(values) == len(res), (i, scheme, n, res)
                if values:
                    assert max(values) - min(values) <= TOL, (i, scheme, n, res)
                checked += 1
            names = ("naive", "rrs", "spectr", "greedy") + (
                ("spechub", "rrs_without_replacement") if n == 2 else ()
            )
            plan = evaluate_position(p, q, [n], schemes=(), verifiers=names)
            fast = tb.evaluate_batch(pt, qt, [n], schemes=(), verifiers=names)
            for name in names:
                res = {
                    "api": _outcome(lambda: verifier_acceptance(name, p, q, n).value),
                    "plan": _outcome(
                        lambda: None if plan.verifiers[(name, n)] is None else plan.verifiers[(name, n)].value
                    ),
                }
                if f"verifier:{name}@{n}" in fast:
                    res["torch"] = float(fast[f"verifier:{name}@{n}"][0])
                values = [v for v in res.values() if v != "refused"]
                assert not values or len(values) == len(res), (i, name, n, res, plan.errors)
                if values:
                    assert max(values) - min(values) <= TOL, (i, name, n, res)
                checked += 1
    assert checked > 500  # 1,000 over the 32 inputs
