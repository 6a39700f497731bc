"""The exactness promise over its whole stated domain, swept against independent references.

Every value is compared with a reference that does not call the code under test (``oracles``):
exact rationals (small V, magnitudes from 1 down to the smallest subnormal mixed in one vector),
the uniform-draft closed form (V up to 152,064, n up to 128), and a 50-digit DP over mass classes
(class-structured drafts: near one-hot, tiny masses, top-k-truncated targets). Seeded, so a failure
is reproducible.
"""

from __future__ import annotations

import numpy as np
import pytest
from oracles import (
    class_sequential_alpha,
    exact_alpha,
    exact_alpha_with_replacement,
    uniform_sequential_alpha,
)

from mdsd_ot import optimal_acceptance, optimal_acceptance_batch

TOL = 1e-12
SCHEMES = ("with_replacement", "without_replacement", "greedy", "hub", "conditional_poisson", "top_n")


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
    monkeypatch.setitem(plan.PLAN_VERIFIERS, "rrs", always_one)
    rows = study.evaluate_rows(P, Q, ns=[2], schemes=["with_replacement"], verifiers=["rrs"])
    for r in rows:
        assert r["verifier:rrs@2"] is None
        assert (
            "internal error" in r["errors"]["verifier:rrs@2"]
            and "fingerprint" in r["errors"]["verifier:rrs@2"]
        )
