"""Draft-sampling schemes: exact laws, Q(H), sampling, and cancellation-free masses."""

from fractions import Fraction

import numpy as np
import pytest
from conftest import random_pair
from oracles import brute_sequential_mass
from scipy import stats

from mdsd_ot.drafts import SCHEMES, complement_masses, get_scheme


@pytest.mark.parametrize("name", sorted(SCHEMES))
def test_tuple_law_is_a_distribution(name, rng):
    scheme = get_scheme(name)
    for _ in range(30):
        V = int(rng.integers(2, 7))
        _, q = random_pair(rng, V)
        n = 2 if name == "hub" else int(rng.integers(1, 4))
        if np.count_nonzero(q) < n:
            continue
        tuples, probs = scheme.tuple_law(q, n)
        assert tuples.shape[1] == n
        assert np.all(probs > 0)
        assert abs(probs.sum() - 1.0) < 1e-12
        assert np.all(q[tuples] > 0), "a zero-mass token was drafted"


@pytest.mark.parametrize("name", sorted(SCHEMES))
def test_mass_equals_enumerated_law(name, rng):
    """Q(H) from the closed forms == the enumerated probability that every draft lies in H."""
    scheme = get_scheme(name)
    for _ in range(60):
        V = int(rng.integers(2, 8))
        _, q = random_pair(rng, V)
        n = 2 if name == "hub" else int(rng.integers(1, 5))
        if np.count_nonzero(q) < n:
            continue
        tuples, probs = scheme.tuple_law(q, n)
        mask = rng.random(V) < 0.6
        expected = probs[mask[tuples].all(axis=1)].sum()
        assert scheme.mass(q, n, mask) == pytest.approx(expected, abs=1e-12)


def test_sequential_mass_against_textbook_enumeration(rng):
    """W_n(H) for n up to 5 against the definition (rest mass recomputed at every draw), to 1e-12."""
    scheme = get_scheme("without_replacement")
    for _ in range(80):
        V = int(rng.integers(5, 8))
        q = rng.dirichlet(np.full(V, 10 ** rng.uniform(-1, 1)))
        n = int(rng.integers(2, 6))
        mask = rng.random(V) < 0.7
        assert scheme.mass(q, n, mask) == pytest.approx(brute_sequential_mass(q, n, mask), abs=1e-12)


def _exact_pair_mass(q, mask):
    """W_2(H) in rationals: sum over ordered pairs i != j inside H of q_i q_j / (T (T - q_i))."""
    fq = [Fraction(float(x)) for x in q]
    T = sum(fq)
    inside = [i for i in range(q.size) if mask[i] and fq[i] > 0]
    q_in = sum(fq[i] for i in inside)
    return sum(fq[i] / T * (q_in - fq[i]) / (T - fq[i]) for i in inside if T > fq[i])


def test_pair_mass_on_extreme_masses(rng):
    """W_2(H) (the n = 2 re-check's Q(H)) against rationals where rounding bites: one token holding
    all but 1e-18 of the mass, outside masses down to subnormals, and all of q outside H."""
    scheme = get_scheme("without_replacement")
    cases = [
        (np.array([1.0, 1e-18, 3e-19, 5e-310]), np.array([True, True, False, True])),
        (np.array([1.0, 1e-18, 3e-19, 5e-310]), np.array([False, True, True, True])),
        (np.array([0.5, 0.25, 0.25, 0.0]), np.array([False, False, False, True])),
        (np.array([0.7, 0.0, 0.3]), np.array([False, True, True])),
        (np.array([0.6, 0.4 - 1e-300, 1e-300]), np.array([True, True, False])),
    ]
    for _ in range(60):
        V = int(rng.integers(2, 9))
        q = 10.0 ** rng.uniform(-320, 0, V)
        cases.append((q / q.sum(), rng.random(V) < 0.6))
    for q, mask in cases:
        exact = float(_exact_pair_mass(q, mask))
        got = scheme.mass(q, 2, mask)
        assert abs(got - exact) <= 1e-15 + 1e-13 * exact, (q, mask, got, exact)


def test_quadrature_path_of_sequential_mass(rng):
    """Large subsets go through the exponential-clock quadrature: compare with the n = 2 closed form
    (forced through the quadrature kernel) and with enumeration inside a merged complement."""
    from mdsd_ot import _kernels

    for _ in range(40):
        V = int(rng.integers(50, 3000))
        q = rng.dirichlet(np.full(V, 10 ** rng.uniform(-2, 1)))
        mask = rng.random(V) < 0.5
        q_in, outside = q[mask], q[~mask].sum()
        closed = q_in.sum() - outside * np.sum(q_in / complement_masses(q)[mask])
        q_in = np.ascontiguousarray(q_in)
        fast = _kernels.sequential_masses_fast(q_in, np.array([q_in.size]), np.array([outside]), 2)[0]
        check = _kernels.sequential_mass_check(q_in, outside, 2, 1)
        assert fast == pytest.approx(closed, abs=1e-13)
        assert check == pytest.approx(closed, abs=1e-13)
    # n = 3 on a subset of 100 tokens (10^6 ordered tuples: the quadrature path inside mass())
    # against the double-sum closed form W_3 = sum_{i != j} q_i q_j/(1-q_i) (q(H)-q_i-q_j)/(1-q_i-q_j)
    q = rng.dirichlet(np.ones(120))
    mask = np.zeros(120, dtype=bool)
    mask[:100] = True
    q_in, outside = q[mask], q[~mask].sum()
    qi, qj = q_in[:, None], q_in[None, :]
    left2 = outside + (q_in.sum() - qi - qj)  # mass left after drawing i and j, as a direct sum
    terms = qi * qj / complement_masses(q)[mask][:, None] * (q_in.sum() - qi - qj) / left2
    closed = terms.sum() - np.trace(terms)
    assert get_scheme("without_replacement").mass(q, 3, mask) == pytest.approx(closed, abs=1e-13)


def test_near_one_hot_draft_has_no_cancellation():
    """q_max = 1 - 1e-12: 1 - q_max must come from the direct sum of the other masses."""
    V = 1000
    q = np.full(V, 1e-12 / (V - 1))
    q[3] = 1.0 - 1e-12
    rest = complement_masses(q)
    assert rest[3] == pytest.approx(1e-12, rel=1e-12)
    scheme = get_scheme("without_replacement")
    mask = np.zeros(V, dtype=bool)
    mask[:500] = True  # holds the big token and half of the tiny ones
    # second draw lands in H with probability (499 tiny) / (999 tiny)
    expected = (1.0 - 1e-12) * 499 / 999 + (499 * 1e-12 / 999) * (1.0 - 1e-12) / (1.0 - 1e-12 / 999)
    assert scheme.mass(q, 2, mask) == pytest.approx(expected, rel=1e-9)
    g = get_scheme("greedy")
    assert g.mass(q, 2, mask) == pytest.approx(499 / 999, rel=1e-9)


@pytest.mark.parametrize("name", sorted(SCHEMES))
def test_sampling_matches_the_law(name):
    """Seeded chi-square smoke test: sampled draft tuples follow tuple_law."""
    rng = np.random.default_rng(7)
    q = np.array([0.4, 0.25, 0.2, 0.0, 0.15])
    n = 2
    scheme = get_scheme(name)
    tuples, probs = scheme.tuple_law(q, n)
    index = {tuple(t): i for i, t in enumerate(tuples.tolist())}
    counts = np.zeros(len(index))
    draws = 4000
    for _ in range(draws):
        t = tuple(scheme.sample(q, n, rng).tolist())
        if name == "conditional_poisson":
            t = tuple(sorted(t))
        assert t in index, f"sampled {t}, which has probability 0"
        counts[index[t]] += 1
    if len(index) == 1:  # a deterministic scheme (top_n): every draw is the one tuple
        assert counts[0] == draws
        return
    assert stats.chisquare(counts, probs * draws).pvalue > 1e-4


def test_scheme_errors():
    q = np.array([0.5, 0.5, 0.0])
    with pytest.raises(ValueError, match="at least 3 tokens with q > 0"):
        get_scheme("without_replacement").check(q, 3)
    with pytest.raises(ValueError, match="n = 2 only"):
        get_scheme("hub").check(q, 3)
    with pytest.raises(ValueError, match="unknown sampling"):
        get_scheme("bogus")
    with pytest.raises(TypeError, match="Generator"):
        get_scheme("with_replacement").sample(q, 2, rng=42)


def _stable_top(q, k):
    """The reference: a full stable sort (ties by index)."""
    return np.argsort(-np.asarray(q), kind="stable")[: max(k, 0)]


def test_top_tokens_equals_the_stable_sort_on_ties():
    """O(V) selection == the stable argsort, tokens and order, ties at the k-th value included."""
    from mdsd_ot.drafts import top_tokens

    rng = np.random.default_rng(17)
    for _ in range(400):  # small V, every k, heavy ties
        V = int(rng.integers(1, 14))
        q = rng.integers(0, 4, size=V).astype(float) * rng.choice([1.0, 5e-324, 1e-300])
        for k in range(V + 2):
            got = top_tokens(q, k)
            assert got.dtype == np.int64
            np.testing.assert_array_equal(got, _stable_top(q, k))
    V = 151_936  # a real vocabulary: a few distinct values, ties straddle every boundary
    cases = {
        "ties": rng.integers(0, 50, V).astype(float),
        "few levels": rng.choice([0.0, 1e-9, 3e-5, 3e-5, 0.2], V),
        "one-hot": np.eye(1, V, 12345).ravel(),
        "all equal": np.full(V, 1.0 / V),
        "signed zeros": np.where(rng.random(V) < 0.5, -0.0, 0.0) + (rng.random(V) < 0.001) * 0.5,
        "subnormal": rng.integers(0, 3, V) * 5e-324,
        "float32": rng.integers(0, 7, V).astype(np.float32),
        "with inf": np.where(rng.random(V) < 1e-4, np.inf, rng.integers(0, 3, V).astype(float)),
        "with nan": np.where(rng.random(V) < 1e-4, np.nan, rng.integers(0, 3, V).astype(float)),
        "dirichlet": rng.dirichlet(np.full(V, 0.05)),
    }
    for name, q in cases.items():
        ks = {0, 1, 2, 3, 4, 8, 16, 1000, V // 2, V - 1, V, V + 5} | set(rng.integers(1, V, 4).tolist())
        full = _stable_top(q, V)  # the reference sorted once per vector: its first k are _stable_top(q, k)
        for k in sorted(ks):
            np.testing.assert_array_equal(top_tokens(q, k), full[: max(k, 0)], err_msg=f"{name}, k={k}")


def test_sequential_draws_unchanged_by_the_selection():
    """Sequential drafts (Gumbel-top-n, the draw order) equal the stable sort of the same keys."""
    from mdsd_ot.drafts import get_scheme

    q = np.random.default_rng(3).dirichlet(np.full(500, 0.1))
    q[::7] = 0.0
    q /= q.sum()
    for n in (1, 2, 5, 40):
        got = get_scheme("without_replacement").sample(q, n, np.random.default_rng(n))
        g = np.random.default_rng(n)
        with np.errstate(divide="ignore"):
            keys = np.log(q) + g.gumbel(size=q.size)
        keys[q == 0] = -np.inf
        np.testing.assert_array_equal(got, _stable_top(keys, n))
