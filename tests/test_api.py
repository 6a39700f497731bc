"""Public API contract: batch == loop, input validation, dtype promotion, result fields."""

import dataclasses

import numpy as np
import pytest
from conftest import random_pair

from mdsd_ot import SCHEMES, AcceptanceResult, optimal_acceptance, optimal_acceptance_batch

#: every registered scheme defined for any n (hub is n = 2 only; its own cases below)
BATCH_SCHEMES = [s for s in SCHEMES if SCHEMES[s].fixed_n is None]


@pytest.mark.parametrize("sampling", BATCH_SCHEMES)
@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_batch_equals_loop(sampling, n, rng):
    B, V = 24, 300
    P = rng.dirichlet(np.full(V, 0.3), size=B)
    Q = rng.dirichlet(np.full(V, 0.3), size=B)
    P[:, :20] = 0.0  # zeros in p
    Q[:, 20:35] = 0.0
    P /= P.sum(axis=1, keepdims=True)
    Q /= Q.sum(axis=1, keepdims=True)
    Q[3] = P[3]  # one row with p == q
    got = optimal_acceptance_batch(P, Q, n, sampling=sampling)
    want = [optimal_acceptance(p, q, n, sampling=sampling).value for p, q in zip(P, Q)]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    assert got.shape == (B,)


def test_result_fields():
    r = optimal_acceptance([0.5, 0.3, 0.2, 0.0], [0.1, 0.2, 0.3, 0.4], 2)
    assert isinstance(r, AcceptanceResult)
    assert r.value == pytest.approx(0.69, abs=1e-12)
    assert r.subset.tolist() == [1, 2, 3] and r.subset.dtype == np.int64
    assert r.method == "dual" and r.sampling == "with_replacement" and r.n == 2
    assert r.success and r.gap == pytest.approx(0.31)
    assert float(r) == r.value
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.value = 0.5  # frozen


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_float_dtypes_are_promoted(dtype):
    p = np.array([0.5, 0.25, 0.25], dtype=dtype)
    q = np.array([0.25, 0.5, 0.25], dtype=dtype)
    assert optimal_acceptance(p, q, 1).value == pytest.approx(0.75, abs=1e-12)


def test_p_equal_q_is_exactly_one(rng):
    for scheme in [s for s in SCHEMES if SCHEMES[s].q_dominates]:  # not top_n's deterministic drafts
        for _ in range(20):
            p, _ = random_pair(rng, int(rng.integers(2, 500)))
            if np.count_nonzero(p) < 3:
                continue
            n = SCHEMES[scheme].fixed_n or 3
            assert optimal_acceptance(p, p.copy(), n, sampling=scheme).value == 1.0


def test_normalize_rescales():
    r = optimal_acceptance([2.0, 1.0, 1.0], [1.0, 1.0, 2.0], 1, normalize=True)
    assert r.value == pytest.approx(0.75)


BAD_INPUTS = [
    (dict(p=[0.5, 0.5], q=[0.5, 0.25, 0.25], n=1), ValueError, "same shape"),
    (dict(p=[[0.5, 0.5]], q=[[0.5, 0.5]], n=1), ValueError, "shape"),
    (dict(p=[np.nan, 1.0], q=[0.5, 0.5], n=1), ValueError, "NaN or inf"),
    (dict(p=[np.inf, 1.0], q=[0.5, 0.5], n=1), ValueError, "NaN or inf"),
    (dict(p=[1.5, -0.5], q=[0.5, 0.5], n=1), ValueError, "negative"),
    (dict(p=[0.5, 0.4], q=[0.5, 0.5], n=1), ValueError, "normalize=True"),
    (dict(p=[0.0, 0.0], q=[0.5, 0.5], n=1), ValueError, "total mass 0"),
    (dict(p=[], q=[], n=1), ValueError, "empty"),
    (dict(p=[1, 0], q=[0.5, 0.5], n=1), TypeError, "integer dtype"),
    (dict(p="0.5 0.5", q=[0.5, 0.5], n=1), TypeError, "array of probabilities"),
    (dict(p=[0.5, 0.5], q=[0.5, 0.5], n=0), ValueError, ">= 1"),
    (dict(p=[0.5, 0.5], q=[0.5, 0.5], n=2.0), TypeError, "n=2"),
    (dict(p=[0.5, 0.5], q=[0.5, 0.5], n=True), TypeError, "positive int"),
    (dict(p=[0.5, 0.5], q=[0.5, 0.5], n=1, sampling="bogus"), ValueError, "unknown sampling"),
    (dict(p=[0.5, 0.5], q=[0.5, 0.5], n=1, method="simplex"), ValueError, "unknown method"),
    (
        dict(p=[0.5, 0.5, 0], q=[0.5, 0.5, 0], n=3, sampling="without_replacement"),
        ValueError,
        "at least 3 tokens with q > 0",
    ),
    (dict(p=[0.5, 0.5, 0], q=[1.0, 0, 0], n=2, sampling="greedy"), ValueError, "at least 2 tokens"),
    (dict(p=[0.5, 0.5], q=[0.5, 0.5], n=3, sampling="hub"), ValueError, "n = 2 only"),
    (dict(p=np.full(30, 1 / 30), q=np.full(30, 1 / 30), n=1, method="bruteforce"), ValueError, "2\\^V"),
]


@pytest.mark.parametrize("kwargs,exc,match", BAD_INPUTS)
def test_bad_input_raises(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        optimal_acceptance(**kwargs)


def test_batch_bad_input():
    with pytest.raises(ValueError, match="shape \\(B, V\\)"):
        optimal_acceptance_batch([0.5, 0.5], [0.5, 0.5], 1)
    with pytest.raises(ValueError, match="same shape"):
        optimal_acceptance_batch(np.full((2, 3), 1 / 3), np.full((3, 3), 1 / 3), 1)
    with pytest.raises(ValueError, match="at least 2 tokens"):
        optimal_acceptance_batch(
            [[0.5, 0.5], [0.5, 0.5]], [[0.5, 0.5], [1.0, 0.0]], 2, sampling="without_replacement"
        )


def test_large_batch_validation_in_one_pass(rng):
    """Batches of at least PARALLEL_MIN_ENTRIES float64 entries are checked and normalised by one
    row-parallel pass per array (``_kernels.normalized_rows``): the same rows as numpy's copy and
    divide to 1e-15, values equal to the row-by-row API, and every input the small path refuses is
    refused with the same message (a bad row anywhere, either array)."""
    from mdsd_ot._config import PARALLEL_MIN_ENTRIES
    from mdsd_ot.api import _normalized_rows

    B, V = 6, PARALLEL_MIN_ENTRIES // 4
    P = rng.dirichlet(np.full(V, 0.3), size=B)
    Q = rng.dirichlet(np.full(V, 0.3), size=B)
    P[:, :50] = 0.0
    P /= P.sum(axis=1, keepdims=True)
    a, b = _normalized_rows(P, Q, False)
    assert a is not P and b is not Q  # fresh arrays
    np.testing.assert_allclose(a, P / P.sum(axis=1, keepdims=True), rtol=1e-15, atol=0)
    np.testing.assert_allclose(b, Q / Q.sum(axis=1, keepdims=True), rtol=1e-15, atol=0)
    got = optimal_acceptance_batch(P, Q, 2)
    want = [optimal_acceptance(p, q, 2).value for p, q in zip(P, Q)]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    scaled = optimal_acceptance_batch(3.0 * P, Q, 2, normalize=True)  # sums off one: rescaled
    np.testing.assert_allclose(scaled, want, rtol=0, atol=1e-12)
    for bad, message in [
        (np.nan, "NaN or inf \\(first at index \\(4, 7\\)\\)"),
        (np.inf, "NaN or inf \\(first at index \\(4, 7\\)\\)"),
        (-1e-3, "negative entries \\(first at index \\(4, 7\\)"),
    ]:
        for which in (0, 1):
            X = [P.copy(), Q.copy()]
            X[which][4, 7] = bad
            with pytest.raises(ValueError, match=message):
                optimal_acceptance_batch(*X, 2)
    zero = P.copy()
    zero[2] = 0.0
    with pytest.raises(ValueError, match="total mass 0"):
        optimal_acceptance_batch(zero, Q, 2, normalize=True)
    with pytest.raises(ValueError, match="sums to 3, more than"):
        optimal_acceptance_batch(P, 3.0 * Q, 2)


@pytest.mark.parametrize("flag", ["no", "yes", 1, 0, None])
def test_normalize_must_be_a_bool(flag):
    """normalize="no" was treated as True (a truthy string); every entry point now refuses non-bools."""
    with pytest.raises(TypeError, match="normalize must be True or False"):
        optimal_acceptance([0.5, 0.5], [0.5, 0.5], 2, normalize=flag)
    with pytest.raises(TypeError, match="normalize must be True or False"):
        optimal_acceptance_batch([[0.5, 0.5]], [[0.5, 0.5]], 2, normalize=flag)


def test_masked_arrays_with_masked_entries_are_refused():
    p = np.ma.masked_array([0.5, 0.3, 0.2], mask=[False, True, False])
    with pytest.raises(ValueError, match="masked array with 1 masked entries.*filled"):
        optimal_acceptance(p, [0.2, 0.3, 0.5], 2)
    unmasked = np.ma.masked_array([0.5, 0.3, 0.2], mask=False)
    assert (
        optimal_acceptance(unmasked, [0.2, 0.3, 0.5], 2).value
        == optimal_acceptance([0.5, 0.3, 0.2], [0.2, 0.3, 0.5], 2).value
    )


def test_lower_bound_proves_optimality_where_a_verifier_attains_alpha():
    """``lower_bound``: the exact acceptance of a verifier that attains alpha*, computed by the
    verifier's own code (O(V) for greedy, hub and top-n drafts; i.i.d. drafts with ``prove=True``);
    it meets the dual value, and both agree with the LP. Sequential and conditional-Poisson drafts
    have none (``None``)."""
    from oracles import exact_alpha

    rng = np.random.default_rng(11)
    for _ in range(6):
        V = int(rng.integers(3, 7))
        p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
        for sampling in (
            "with_replacement",
            "without_replacement",
            "greedy",
            "hub",
            "conditional_poisson",
            "top_n",
        ):
            n = 2 if sampling == "hub" else int(rng.integers(2, V + 1))
            expected = float(exact_alpha(p, q, n, sampling))
            r = optimal_acceptance(p, q, n, sampling=sampling, prove=True)
            assert r.success and abs(r.value - expected) <= 1e-12
            if sampling in ("without_replacement", "conditional_poisson"):
                assert r.lower_bound is None and "optimality proven" not in r.message
            else:
                assert abs(r.lower_bound - expected) <= 1e-12 and "optimality proven" in r.message
    assert optimal_acceptance([0.5, 0.5], [0.9, 0.1], 2).lower_bound is None  # i.i.d.: only with prove
    with pytest.raises(TypeError, match="prove"):
        optimal_acceptance([0.5, 0.5], [0.9, 0.1], 2, prove="yes")


def test_a_lower_bound_above_the_dual_value_is_not_a_success(monkeypatch):
    """A valid verifier attaining more than the returned optimum means one of two independent
    computations is wrong: success is False with an internal-error message, never a silent value."""
    from mdsd_ot import api

    monkeypatch.setattr(api, "_lower_bound", lambda p, q, n, scheme, prove: 0.99)
    r = optimal_acceptance([0.5, 0.3, 0.2], [0.2, 0.3, 0.5], 2, sampling="greedy")
    assert not r.success and r.message.startswith("internal error: a valid verifier attains 0.99")
