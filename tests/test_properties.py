"""Property-based tests of the public API against independent oracles.

Every property of docs/math.md#test-facts is checked on random inputs drawn by hypothesis, with the awkward
cases generated on purpose: zeros, ties, tiny masses (1e-300), near-one-hot drafts
(``q_max = 1 - 1e-12``), ``p == q``, disjoint supports.

The main oracle, :func:`exact_alpha`, is written from docs/math.md alone and shares no code with the
package: it enumerates the draft law of each scheme (``tests/oracles.py::exact_set_law``, the one exact
oracle of the suite) in exact rational arithmetic
(:class:`fractions.Fraction`, so ``1 - 1e-12`` costs no digits), then minimises the dual objective
``p(H) + 1 - Q(H)`` over all ``2^V`` subsets (section 3). The LP (``method="lp"``) is a second,
in-package oracle for the fast dual.

Runs with ``derandomize=True`` so CI sees the same examples every time.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from oracles import exact_set_law

import mdsd_ot
from mdsd_ot import get_scheme, optimal_acceptance, optimal_acceptance_batch
from mdsd_ot._config import VALUE_TOL
from mdsd_ot.verifiers import VERIFIERS, verifier_acceptance

#: every registered scheme: a new one joins every sweep below (and needs its case in oracles.exact_set_law)
SCHEMES = tuple(mdsd_ot.SCHEMES)
#: schemes defined for every n (hub is n = 2 only)
ANY_N = tuple(s for s in SCHEMES if get_scheme(s).fixed_n is None)
#: schemes where p == q gives alpha* = 1 (``DraftScheme.q_dominates``; not top_n, whose drafts are
#: deterministic); with n = 1 these draw the one draft from q, so alpha* = 1 - TV
Q_DOMINATES = tuple(s for s in SCHEMES if get_scheme(s).q_dominates)
#: schemes drafting the top-k tokens of q (ties by index): k as a function of n
TOP_K_OF = {"greedy": lambda n: n - 1, "hub": lambda n: 1, "top_n": lambda n: n}

#: absolute agreement demanded between float64 results and the exact rational oracle
TOL = 1e-12

FAST = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
SLOW = settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


# ------------------------------------------------------------------------ exact rationals (tests/oracles.py)
def as_fractions(x):
    """Exact rationals of float64 entries, renormalised exactly (the code renormalises in floats)."""
    f = [Fraction(float(v)) for v in x]
    s = sum(f)
    return [v / s for v in f]


def exact_alpha(p, q, n, scheme):
    """Exact ``alpha* = min_H p(H) + 1 - Q(H)`` (docs/math.md#dual-and-sorting-theorem), brute force
    over subsets, as a Fraction.

    Also returns the exact inclusion probabilities ``P(y drafted)`` for the singleton bound.
    """
    P, Qf = as_fractions(p), as_fractions(q)
    V = len(P)
    law = exact_set_law(Qf, n, scheme)
    masks = [(sum(1 << i for i in s), pr) for s, pr in law.items()]
    best = None
    for h in range(1 << V):
        ph = sum((P[i] for i in range(V) if h >> i & 1), Fraction(0))
        qh = sum((pr for m, pr in masks if m & ~h == 0), Fraction(0))
        val = ph + 1 - qh
        best = val if best is None or val < best else best
    incl = [sum((pr for s, pr in law.items() if y in s), Fraction(0)) for y in range(V)]
    return best, incl


def exact_mass(q, n, scheme, subset):
    """Exact ``Q(H)`` for one subset."""
    law = exact_set_law(as_fractions(q), n, scheme)
    h = set(int(i) for i in subset)
    return sum((pr for s, pr in law.items() if s <= h), Fraction(0))


# ------------------------------------------------------------------------------------ strategies
_ATOMS = st.sampled_from([0.0, 0.0, 1e-300, 1e-12, 0.25, 0.5, 1.0, 1.0, 3.0])
_WEIGHT = st.one_of(_ATOMS, st.floats(1e-6, 1.0))


def _normalise(w):
    w = np.asarray(w, dtype=np.float64)
    if w.sum() == 0.0:
        w[0] = 1.0
    return w / w.sum()


@st.composite
def pairs(draw, min_v=1, max_v=6):
    """A (p, q) pair of float64 distributions with the awkward cases docs/math.md asks for.

    docs/math.md#test-facts and docs/math.md#numerics."""
    V = draw(st.integers(min_v, max_v))
    p = _normalise(draw(st.lists(_WEIGHT, min_size=V, max_size=V)))
    kind = draw(st.sampled_from(["independent"] * 4 + ["equal", "near_one_hot", "ties", "disjoint"]))
    if kind == "equal":
        q = p.copy()
    elif kind == "near_one_hot" and V >= 2:  # low-temperature drafts, docs/math.md#numerics
        top = draw(st.integers(0, V - 1))
        q = np.full(V, 1e-12 / (V - 1))
        q[top] = 1.0 - 1e-12
    elif kind == "ties":
        q = _normalise(draw(st.lists(st.sampled_from([0.0, 1.0, 2.0]), min_size=V, max_size=V)))
    elif kind == "disjoint" and V >= 2:
        cut = draw(st.integers(1, V - 1))
        p = p.copy()
        p[cut:] = 0.0
        p = _normalise(p)
        q = np.zeros(V)
        q[cut:] = draw(st.lists(st.floats(1e-3, 1.0), min_size=V - cut, max_size=V - cut))
        q = _normalise(q)
    else:
        q = _normalise(draw(st.lists(_WEIGHT, min_size=V, max_size=V)))
    return p, q


def support(q):
    return int(np.count_nonzero(q > 0))


def valid_ns(q, scheme, n_max=3):
    """The numbers of drafts the scheme accepts for this q (docs/math.md#draft-schemes)."""
    s = get_scheme(scheme)
    ns = [s.fixed_n] if s.fixed_n is not None else range(1, n_max + 1)
    return [n for n in ns if support(q) >= s._min_support(n)]


@st.composite
def problems(draw, schemes=SCHEMES, min_v=1, max_v=6, n_max=3):
    """(p, q, n, scheme) with n valid for the scheme."""
    p, q = draw(pairs(min_v, max_v))
    scheme = draw(st.sampled_from(schemes))
    ns = valid_ns(q, scheme, n_max)
    assume(ns)
    return p, q, draw(st.sampled_from(ns)), scheme


# ------------------------------------------------------------------------------------ properties
@pytest.mark.slow
@FAST
@given(problems())
def test_dual_equals_exact_rational_bruteforce(prob):
    """The fast dual value is alpha* of the exact rational oracle, and lies in [0, 1]."""
    p, q, n, scheme = prob
    r = optimal_acceptance(p, q, n, sampling=scheme)
    exact, _ = exact_alpha(p, q, n, scheme)
    assert r.success, r.message
    assert 0.0 <= r.value <= 1.0
    assert abs(r.value - float(exact)) <= TOL, (r.value, float(exact))


@FAST
@given(problems())
def test_certificate_attains_value(prob):
    """``p(H) + 1 - Q(H) == value`` for the returned subset, Q by the package and by the oracle."""
    p, q, n, scheme = prob
    r = optimal_acceptance(p, q, n, sampling=scheme)
    H = r.subset
    assert H.dtype == np.int64 and np.all(np.diff(H) > 0) and (H.size == 0 or 0 <= H[0] <= H[-1] < p.size)
    mask = np.zeros(p.size, dtype=bool)
    mask[H] = True
    pn = p / p.sum()
    qn = q / q.sum()
    Qh = get_scheme(scheme).mass(qn, n, H)
    assert abs(math.fsum(pn[mask]) + 1.0 - Qh - r.value) <= TOL
    P = as_fractions(p)
    exact_obj = sum((P[i] for i in H.tolist()), Fraction(0)) + 1 - exact_mass(q, n, scheme, H)
    assert abs(float(exact_obj) - r.value) <= TOL


@FAST
@given(pairs(), st.sampled_from([s for s in ANY_N if s in Q_DOMINATES]))
def test_single_draft_is_one_minus_tv(pair, scheme):
    """n = 1: alpha* = sum_y min(p(y), q(y)) = 1 - TV(p, q) for every scheme that allows n = 1."""
    p, q = pair
    expected = math.fsum(np.minimum(p / p.sum(), q / q.sum()))
    assert abs(optimal_acceptance(p, q, 1, sampling=scheme).value - expected) <= TOL


@FAST
@given(pairs(), st.integers(1, 4), st.sampled_from(Q_DOMINATES))
def test_identical_distributions_give_exactly_one(pair, n, scheme):
    """p == q: alpha* is exactly 1.0 (outputting the draft law unchanged is valid)."""
    p, _ = pair
    n = get_scheme(scheme).fixed_n or n
    assume(n in valid_ns(p, scheme, n_max=4))
    for method in ("auto", "dual"):
        r = optimal_acceptance(p, p.copy(), n, sampling=scheme, method=method)
        assert r.value == 1.0 and r.success
    # the same through the batch API, with the identical row repeated
    batch = optimal_acceptance_batch(np.stack([p, p]), np.stack([p, p]), n, sampling=scheme)
    assert np.all(batch == 1.0)


# regression: batch rows with p == q gave 1 - 1e-16 for greedy/hub/conditional Poisson (fixed 254e87f)
@pytest.mark.parametrize(
    "scheme, weights", [("greedy", [1, 1, 4]), ("hub", [1, 1, 4]), ("conditional_poisson", [6, 23, 1])]
)
def test_batch_identical_rows_exactly_one(scheme, weights):
    p = np.array(weights, dtype=float) / sum(weights)
    assert optimal_acceptance(p, p, 2, sampling=scheme).value == 1.0  # the single call is exact
    assert optimal_acceptance_batch(p[None], p[None], 2, sampling=scheme)[0] == 1.0


@FAST
@given(
    pairs(min_v=2),
    st.sampled_from(ANY_N),
)
def test_monotone_in_n(pair, scheme):
    """alpha* is non-decreasing in the number of drafts (docs/math.md#test-facts)."""
    p, q = pair
    ns = valid_ns(q, scheme, n_max=4)
    values = [optimal_acceptance(p, q, n, sampling=scheme).value for n in ns]
    assert all(b >= a - TOL for a, b in zip(values, values[1:])), values


@pytest.mark.slow
@FAST
@given(problems(), st.randoms(use_true_random=False))
def test_permutation_invariance(prob, random):
    """Relabelling the vocabulary changes neither alpha* nor the certificate (up to relabelling)."""
    p, q, n, scheme = prob
    perm = list(range(p.size))
    random.shuffle(perm)
    perm = np.array(perm)
    if scheme in TOP_K_OF:
        # these schemes break ties in "most likely" by token index, so a tie across the boundary of
        # Top is resolved differently after relabelling: only untied boundaries are invariant
        qs = np.sort(q)[::-1]
        k = TOP_K_OF[scheme](n)
        assume(k == 0 or k >= q.size or qs[k - 1] != qs[k])
    r = optimal_acceptance(p, q, n, sampling=scheme)
    rp = optimal_acceptance(p[perm], q[perm], n, sampling=scheme)
    assert abs(r.value - rp.value) <= TOL
    assert rp.success


@FAST
@given(pairs(), st.integers(1, 4))
def test_without_replacement_dominates_with(pair, n):
    """alpha*_without >= alpha*_with (docs/math.md#test-facts: observed on every random instance)."""
    p, q = pair
    assume(n <= support(q))
    w = optimal_acceptance(p, q, n, sampling="with_replacement").value
    wo = optimal_acceptance(p, q, n, sampling="without_replacement").value
    assert wo >= w - TOL


@pytest.mark.slow
@FAST
@given(problems())
def test_singleton_bound(prob):
    """alpha* <= sum_y min(p(y), P(y drafted)), inclusion probabilities from the exact oracle."""
    p, q, n, scheme = prob
    _, incl = exact_alpha(p, q, n, scheme)
    P = as_fractions(p)
    bound = float(sum(min(a, b) for a, b in zip(P, incl)))
    assert optimal_acceptance(p, q, n, sampling=scheme).value <= bound + TOL


@SLOW
@given(problems(max_v=5))
def test_dual_equals_lp(prob):
    """The fast dual and the primal LP (HiGHS) agree to VALUE_TOL; the LP certificate re-checks."""
    p, q, n, scheme = prob
    dual = optimal_acceptance(p, q, n, sampling=scheme)
    lp = optimal_acceptance(p, q, n, sampling=scheme, method="lp")
    assert lp.success, lp.message
    assert abs(dual.value - lp.value) <= VALUE_TOL


@settings(
    max_examples=35,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(
    pairs(min_v=8, max_v=24),
    st.sampled_from(
        [
            ("with_replacement", 2),
            ("without_replacement", 3),
            ("conditional_poisson", 3),
            ("greedy", 3),
            ("hub", 2),
            ("without_replacement", 2),
            ("top_n", 3),
        ]
    ),
)
def test_dual_equals_lp_medium_vocabulary(pair, case):
    """Larger V (the binned / pruned / quadrature paths of the scan) against the LP."""
    p, q = pair
    scheme, n = case
    assume(n in valid_ns(q, scheme))
    dual = optimal_acceptance(p, q, n, sampling=scheme)
    lp = optimal_acceptance(p, q, n, sampling=scheme, method="lp")
    assert lp.success and dual.success
    assert abs(dual.value - lp.value) <= VALUE_TOL


def _verifier_cases():
    for name, v in VERIFIERS.items():
        for scheme in v.schemes:
            yield name, scheme


@SLOW
@given(pairs(max_v=5), st.integers(1, 3), st.sampled_from(list(_verifier_cases())))
def test_every_verifier_below_its_bound(pair, n, case):
    """Each verifier's exact acceptance is at most alpha* of the scheme it runs under (+1e-12)."""
    p, q = pair
    name, scheme = case
    v = VERIFIERS[name]
    if v.fixed_n is not None:
        n = v.fixed_n
    assume(n in valid_ns(q, scheme))
    acc = verifier_acceptance(name, p, q, n, sampling=scheme, method="exact")
    assert acc.method == "exact" and acc.stderr == 0.0
    bound = optimal_acceptance(p, q, n, sampling=scheme).value
    assert 0.0 <= acc.value <= bound + 1e-12, (name, scheme, acc.value, bound)
    if name == "optimal":  # attains the bound (the projected LP flow, docs/math.md#optimal-verifier)
        assert acc.value >= bound - VALUE_TOL


@pytest.mark.slow
@FAST
@given(st.integers(1, 6), st.integers(1, 5), st.sampled_from(SCHEMES), st.data())
def test_batch_equals_loop(V, B, scheme, data):
    """optimal_acceptance_batch row b equals optimal_acceptance on row b."""
    rows = [data.draw(pairs(min_v=V, max_v=V)) for _ in range(B)]
    P = np.stack([r[0] for r in rows])
    Q = np.stack([r[1] for r in rows])
    ns = set(valid_ns(Q[0], scheme))
    for row in Q[1:]:
        ns &= set(valid_ns(row, scheme))
    assume(ns)
    n = data.draw(st.sampled_from(sorted(ns)))
    batch = optimal_acceptance_batch(P, Q, n, sampling=scheme)
    assert batch.shape == (B,) and batch.dtype == np.float64
    loop = np.array([optimal_acceptance(p, q, n, sampling=scheme).value for p, q in zip(P, Q)])
    np.testing.assert_allclose(batch, loop, rtol=0, atol=TOL)


# regression: e_n(q / max q) used to underflow to 0 (ZeroDivisionError, numba SystemError, 1.5e-76
# for p == q); fixed in 5ddd731 by carrying e_n as logarithms
@pytest.mark.parametrize("p", [[1e-300, 1e-300, 1.0], [0.2, 0.3, 0.5]], ids=["p==q", "p-dense"])
@pytest.mark.parametrize("api", ["single", "batch"])
def test_conditional_poisson_underflow(p, api):
    q = np.array([1e-300, 1e-300, 1.0])
    p = np.array(p)
    # one 3-set is ever drafted: Q(H) = 1 iff H = Sigma, so alpha* = 1 (the oracle agrees)
    assert exact_alpha(p, q, 3, "conditional_poisson")[0] == 1
    if api == "single":
        value = optimal_acceptance(p, q, 3, sampling="conditional_poisson").value
    else:
        value = optimal_acceptance_batch(p[None], q[None], 3, sampling="conditional_poisson")[0]
    assert value == 1.0


_DENORMAL_ATOMS = st.sampled_from([0.0, 5e-324, 1e-310, 1e-300, 1e-200, 1e-12, 0.25, 0.5, 1.0, 3.0])


@settings(
    max_examples=400,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@pytest.mark.slow
@given(st.integers(1, 6), st.sampled_from(SCHEMES), st.integers(1, 4), st.data())
def test_denormal_and_tiny_masses_against_exact_oracle(V, scheme, n, data):
    """Entries from {0, 5e-324, 1e-310, 1e-300, 1e-200, 1e-12, ...}: single and batch values equal
    the exact rational alpha* (this found the denormal bugs of sequential sampling fixed in 254e87f)."""
    p = _normalise(data.draw(st.lists(_DENORMAL_ATOMS, min_size=V, max_size=V)))
    q = _normalise(data.draw(st.lists(_DENORMAL_ATOMS, min_size=V, max_size=V)))
    n = get_scheme(scheme).fixed_n or n
    assume(n in valid_ns(q, scheme, n_max=4))
    exact = float(exact_alpha(p, q, n, scheme)[0])
    r = optimal_acceptance(p, q, n, sampling=scheme)
    assert r.success and abs(r.value - exact) <= TOL, (r.value, exact)
    assert abs(optimal_acceptance_batch(p[None], q[None], n, sampling=scheme)[0] - exact) <= TOL


@FAST
@given(
    pairs(max_v=8), st.sampled_from(["with_replacement", "without_replacement", "greedy"]), st.integers(1, 4)
)
def test_torch_backend_equals_numpy(pair, scheme, n):
    """backends.torch (sorted_prefix_bound, greedy_bounds) agrees with optimal_acceptance to 1e-12."""
    torch = pytest.importorskip("torch")
    from mdsd_ot.backends import torch as tb

    p, q = pair
    if scheme == "without_replacement":
        n = min(n, 2)  # the torch backend evaluates sequential sampling for n <= 2
    assume(n in valid_ns(q, scheme, n_max=4))
    ref = optimal_acceptance(p, q, n, sampling=scheme).value
    if scheme == "greedy":
        got = float(tb.greedy_bounds(torch.tensor(p), torch.tensor(q), [n])[n])
    else:
        got = float(tb.sorted_prefix_bound(torch.tensor(p), torch.tensor(q), n, scheme).value)
    assert abs(got - ref) <= TOL


def test_oracle_reproduces_math_md_test_vectors():
    """The rational oracle itself reproduces docs/math.md#test-vectors (guards the oracle, not the code)."""
    cases = [
        (
            (1 / 3, 1 / 3, 1 / 3),
            (1 / 3, 1 / 2, 1 / 6),
            2,
            {"with_replacement": 0.972222, "without_replacement": 1, "greedy": 1, "hub": 1},
        ),
        (
            (0.5, 0.3, 0.2, 0),
            (0.1, 0.2, 0.3, 0.4),
            2,
            {"with_replacement": 0.69, "without_replacement": 0.734524, "greedy": 0.666667, "hub": 0.666667},
        ),
        (
            (0.5, 0.3, 0.2, 0),
            (0.1, 0.2, 0.3, 0.4),
            3,
            {"with_replacement": 0.771, "without_replacement": 0.948810, "greedy": 0.833333},
        ),
        (
            (0.6, 0.2, 0.1, 0.1),
            (0.7, 0.2, 0.05, 0.05),
            2,
            {"with_replacement": 0.99, "without_replacement": 1, "greedy": 1, "hub": 1},
        ),
    ]
    for p, q, n, expected in cases:
        for scheme, value in expected.items():
            got = float(exact_alpha(np.array(p), np.array(q), n, scheme)[0])
            assert abs(got - value) < 5e-7, (p, q, n, scheme, got, value)
    # docs/math.md#draft-schemes: sequential W_2 vs the conditional-Poisson e_2 ratio on H = {0, 1}
    q = as_fractions([0.5, 0.3, 0.2])
    seq = sum(pr for s, pr in exact_set_law(q, 2, "without_replacement").items() if s <= {0, 1})
    cp = sum(pr for s, pr in exact_set_law(q, 2, "conditional_poisson").items() if s <= {0, 1})
    assert round(float(seq), 4) == 0.5143 and round(float(cp), 4) == 0.4839


@pytest.mark.parametrize("scheme", SCHEMES)
def test_disjoint_supports_single_draft_is_zero(scheme):
    """Disjoint supports with n = 1 give alpha* = 0 (docs/math.md#test-facts); hub needs n = 2."""
    p = np.array([0.5, 0.5, 0.0, 0.0])
    q = np.array([0.0, 0.0, 0.3, 0.7])
    if scheme == "hub":
        assert optimal_acceptance(p, q, 2, sampling=scheme).value == 0.0
    else:
        assert optimal_acceptance(p, q, 1, sampling=scheme).value == 0.0
