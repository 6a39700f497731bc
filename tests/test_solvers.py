"""alpha*: the fast dual against the LP (highspy), the cvxpy model and brute force over subsets."""

import zlib

import numpy as np
import pytest
from conftest import random_pair

from mdsd_ot import SCHEMES, optimal_acceptance
from mdsd_ot._config import VALUE_TOL

EXACT_METHODS = ("dual", "lp", "cvxpy", "bruteforce")


def instances(scheme, count, seed):
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < count:
        V = int(rng.integers(2, 9))
        p, q = random_pair(rng, V)
        n = 2 if scheme == "hub" else int(rng.integers(1, 5))
        if scheme != "with_replacement":
            n = min(n, np.count_nonzero(q))
            if scheme == "hub" and n != 2:
                continue
        if scheme == "with_replacement" and V**n > 4096:
            n = 3
        out.append((p, q, n))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_all_exact_methods_agree(scheme):
    """200 seeded instances per scheme (V 2..8, n 1..4, zeros, p == q, disjoint, one-hot)."""
    for i, (p, q, n) in enumerate(instances(scheme, 200, seed=zlib.crc32(scheme.encode()))):
        results = {m: optimal_acceptance(p, q, n, sampling=scheme, method=m) for m in EXACT_METHODS}
        for m, r in results.items():
            assert r.success, (m, r.message)
            assert 0.0 <= r.value <= 1.0
        ref = results["bruteforce"].value
        for m, r in results.items():
            assert abs(r.value - ref) <= VALUE_TOL, (i, m, r.value, ref, p, q, n)


def test_lp_plan_is_a_valid_verifier(rng):
    """The LP plan plus its residual reproduce p exactly, and accept with probability alpha*."""
    for _ in range(30):
        V = int(rng.integers(2, 6))
        p, q = random_pair(rng, V)
        scheme = SCHEMES["without_replacement"] if np.count_nonzero(q) >= 2 else SCHEMES["with_replacement"]
        r = optimal_acceptance(p, q, 2, sampling=scheme.name, method="lp")
        _, set_mass = scheme.set_law(q, 2)
        accepted = set_mass @ r.plan  # P(output y and accepted)
        law = accepted + (1.0 - accepted.sum()) * r.residual
        np.testing.assert_allclose(law, p, atol=1e-9)
        assert accepted.sum() == pytest.approx(r.value, abs=1e-9)
        for s, row in zip(r.draft_sets, r.plan):  # outputs stay inside the draft set
            outside = np.setdiff1d(np.arange(V), s)
            assert np.all(row[outside] == 0)


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_draft_set_law_equals_a_loop_over_the_tuples_bit_for_bit(scheme, rng):
    """``set_law`` (sorted rows grouped by one lexsort) against a dictionary filled tuple by tuple:
    the same sets in the same order (size, then tokens) and the same masses to the last bit."""
    scheme = SCHEMES[scheme]
    for _ in range(40):
        V = int(rng.integers(1, 8))
        _, q = random_pair(rng, V)
        n = 2 if scheme.name == "hub" else int(rng.integers(1, 5))
        if scheme.name != "with_replacement" and n > np.count_nonzero(q):
            continue
        law = {}
        tuples, probs = scheme.tuple_law(q, n)
        for t, pr in zip(tuples.tolist(), probs.tolist()):
            key = tuple(sorted(set(t)))
            law[key] = law.get(key, 0.0) + pr
        sets, masses = scheme.set_law(q, n)
        assert sets == sorted(law, key=lambda s: (len(s), s))
        assert masses.tolist() == [law[s] for s in sets]
        rows, _ = scheme.set_rows(q, n)
        assert rows.shape == (len(sets), n) and [tuple(r[r >= 0].tolist()) for r in rows] == sets


MATH_TABLE = [  # docs/math.md#test-vectors: p, q, n, alpha*_with, alpha*_without, greedy
    ((1 / 3, 1 / 3, 1 / 3), (1 / 3, 1 / 2, 1 / 6), 2, 0.972222, 1.0, 1.0),
    ((0.5, 0.3, 0.2, 0.0), (0.1, 0.2, 0.3, 0.4), 2, 0.690000, 0.734524, 0.666667),
    ((0.5, 0.3, 0.2, 0.0), (0.1, 0.2, 0.3, 0.4), 3, 0.771000, 0.948810, 0.833333),
    ((0.6, 0.2, 0.1, 0.1), (0.7, 0.2, 0.05, 0.05), 2, 0.990000, 1.0, 1.0),
]


@pytest.mark.parametrize("p,q,n,with_,without,greedy", MATH_TABLE)
def test_math_table(p, q, n, with_, without, greedy):
    assert optimal_acceptance(p, q, n).value == pytest.approx(with_, abs=5e-7)
    assert optimal_acceptance(p, q, n, sampling="without_replacement").value == pytest.approx(
        without, abs=5e-7
    )
    assert optimal_acceptance(p, q, n, sampling="greedy").value == pytest.approx(greedy, abs=5e-7)
    if n == 2:  # hub drafts have the greedy set law for n = 2
        assert optimal_acceptance(p, q, n, sampling="hub").value == pytest.approx(greedy, abs=5e-7)


@pytest.mark.slow
def test_invariants(rng):
    """docs/math.md#test-facts: n = 1 is 1 - TV; p == q gives 1; monotone in n; permutation invariant;
    singleton bound; without >= with replacement."""
    for _ in range(100):
        V = int(rng.integers(2, 40))
        p, q = random_pair(rng, V)
        assert optimal_acceptance(p, q, 1).value == pytest.approx(np.minimum(p, q).sum(), abs=1e-12)
        assert optimal_acceptance(q, q, 3).value == 1.0
        perm = rng.permutation(V)
        support = np.count_nonzero(q)
        for scheme in ("with_replacement", "without_replacement", "conditional_poisson"):
            values = [
                optimal_acceptance(p, q, n, sampling=scheme).value for n in range(1, min(5, support) + 1)
            ]
            assert np.all(np.diff(values) >= -1e-12), (scheme, values)
            for n, v in enumerate(values, start=1):
                r = optimal_acceptance(p[perm], q[perm], n, sampling=scheme)
                assert r.value == pytest.approx(v, abs=1e-12)
        for n in range(1, min(5, support) + 1):
            w = optimal_acceptance(p, q, n).value
            wo = optimal_acceptance(p, q, n, sampling="without_replacement").value
            assert wo >= w - 1e-12
            singleton = np.minimum(p, 1 - (1 - q) ** n).sum()  # P(y drafted), i.i.d.
            assert w <= singleton + 1e-12


def test_disjoint_supports_give_zero_for_one_draft():
    assert optimal_acceptance([0.5, 0.5, 0, 0], [0, 0, 0.3, 0.7], 1).value == pytest.approx(0.0, abs=1e-15)


def test_certificate_is_checked(rng):
    p, q = random_pair(rng, 30)
    r = optimal_acceptance(p, q, 2, sampling="without_replacement")
    assert r.success and r.message.startswith("certificate re-checked")
    mask = np.isin(np.arange(30), r.subset)
    from mdsd_ot.drafts import get_scheme

    assert p[mask].sum() + 1 - get_scheme("without_replacement").mass(q, 2, mask) == pytest.approx(
        r.value, abs=1e-12
    )


def test_a_wrong_dual_value_is_caught(monkeypatch, rng):
    """The certificate re-check is independent of the solver: a solver value off by 1e-6 gives
    success=False (single call), is recomputed (batch), or raises when the recomputation is wrong too."""
    from mdsd_ot import _kernels, dual, optimal_acceptance_batch

    p, q = random_pair(rng, 30)
    good = optimal_acceptance(p, q, 3, sampling="without_replacement")
    real_solve = dual.solve_dual
    real_batch = _kernels.solve_batch

    def off_batch(P, Q, n, code):
        values, masks = real_batch(P, Q, n, code)
        return values - 1e-6, masks

    monkeypatch.setattr(_kernels, "solve_batch", off_batch)
    batch = optimal_acceptance_batch(p[None], q[None], 3, sampling="without_replacement")
    assert batch[0] == pytest.approx(good.value, abs=1e-12)  # the row was recomputed and certified
    monkeypatch.setattr(dual, "solve_dual", lambda *a: (lambda v, h: (v - 1e-6, h))(*real_solve(*a)))
    bad = optimal_acceptance(p, q, 3, sampling="without_replacement")
    assert not bad.success and "certificate check failed" in bad.message
    with pytest.raises(RuntimeError, match="row 0.*fingerprint"):
        optimal_acceptance_batch(p[None], q[None], 3, sampling="without_replacement")
