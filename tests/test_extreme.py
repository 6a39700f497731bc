"""Extreme numerics, each against an oracle that does not run the code under test.

Oracles used here:

* exact rational arithmetic (:class:`fractions.Fraction`): the draft law of each scheme enumerated
  from docs/math.md#draft-schemes and the dual ``min_H p(H) + 1 - Q(H)`` of section 3 (small V);
* 50-digit :mod:`mpmath` for near-one-hot drafts at V ~ 10^3 (docs/math.md#numerics);
* closed forms: ``n = 1`` gives ``sum min(p, q)``; ``p == q`` gives 1; one-hot targets give the
  inclusion probability of the target token; block-uniform inputs give
  ``alpha* = 1 - max_i [Q(m - k + i) - i / a]`` by symmetry (counts only);
* at V = 262,144: the certificate's objective recomputed here with ``math.fsum``, and single-token
  local optimality of the certificate (no token added or removed improves the dual objective),
  evaluated with docs/math.md's formulas for ``Q(H)``.
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from oracles import (
    exact_alpha,
    fr,
    mp_conditional_poisson,
    mp_greedy,
    mp_without_replacement_2,
    mp_without_replacement_3,
    top_indices,
)

import mdsd_ot
from mdsd_ot import _kernels, get_scheme, optimal_acceptance, optimal_acceptance_batch
from mdsd_ot._config import SUM_TOL
from mdsd_ot.compare import compare
from mdsd_ot.drafts.conditional_poisson import _elementary_symmetric_tree
from mdsd_ot.plan import evaluate_position
from mdsd_ot.verifiers import verifier_acceptance

#: every registered scheme (a new one joins the sweeps below by construction)
SCHEMES = tuple(mdsd_ot.SCHEMES)
#: schemes where p == q gives alpha* = 1 (``DraftScheme.q_dominates``: not top_n's deterministic drafts)
Q_DOMINATES = tuple(s for s in SCHEMES if get_scheme(s).q_dominates)
TOL = 1e-12
BIG_V = 262_144

try:  # the torch backend is optional
    import torch

    from mdsd_ot.backends import torch as tb
except ImportError:  # pragma: no cover
    torch = tb = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch not installed")


# ------------------------------------------------------------------- exact rational oracle (small V)
_fr = fr
_top = top_indices


def fsum_objective(p, q, n, scheme, subset):
    """``p(H) + 1 - Q(H)`` for the certificate, p(H) by fsum and Q(H) by the package's scheme."""
    pn, qn = p / p.sum(), q / q.sum()
    return math.fsum(pn[subset]) + 1.0 - get_scheme(scheme).mass(qn, n, subset)


# --------------------------------------------------------------------- tiny masses and denormals
TINY = [5e-324, 1e-320, 2.2250738585072014e-308 / 3, 1e-300, 1e-200]


def _tiny_cases():
    for scheme in SCHEMES:
        fixed = get_scheme(scheme).fixed_n
        for n in [fixed] if fixed else [2, 3]:
            for tiny in TINY:
                yield pytest.param(tiny, scheme, n, id=f"{scheme}-{n}-{tiny:.1e}")


@pytest.mark.parametrize("tiny, scheme, n", list(_tiny_cases()))
def test_tiny_masses_and_denormals_match_exact_rationals(tiny, scheme, n):
    """Entries down to the smallest denormal: the value matches exact rational arithmetic."""
    p = np.array([0.4, tiny, 0.3, 0.0, 0.3 - tiny, tiny])
    q = np.array([tiny, 0.5, tiny, 0.25, 0.25 - 2 * tiny, 0.0])
    r = optimal_acceptance(p, q, n, sampling=scheme)
    assert r.success, r.message
    assert abs(r.value - float(exact_alpha(p, q, n, scheme))) <= TOL
    assert abs(fsum_objective(p, q, n, scheme, r.subset) - r.value) <= TOL


@pytest.mark.parametrize("scheme", [s for s in SCHEMES if get_scheme(s).fixed_n is None])
def test_denormal_only_distributions_with_normalize(scheme):
    """Distributions whose whole mass is denormal are rescaled exactly enough with normalize=True."""
    p = np.array([5e-324, 1e-322, 0.0, 3e-323])
    q = np.array([1e-322, 5e-324, 2e-323, 0.0])
    with pytest.raises(ValueError, match="normalize=True"):
        optimal_acceptance(p, q, 1, sampling=scheme)
    r = optimal_acceptance(p, q, 1, sampling=scheme, normalize=True)
    # n = 1: 1 - TV of the rescaled denormals, in exact rationals (one draw from q)
    if get_scheme(scheme).q_dominates:
        assert exact_alpha(p, q, 1, scheme) == sum(min(a, b) for a, b in zip(_fr(p), _fr(q)))
    assert abs(r.value - float(exact_alpha(p, q, 1, scheme))) <= TOL


# ------------------------------------------------------------------------------- V = 262,144
@pytest.fixture(scope="module")
def big_pair():
    rng = np.random.default_rng(262144)
    p = rng.dirichlet(np.full(BIG_V, 0.05))
    q = rng.dirichlet(np.full(BIG_V, 0.05))
    p[rng.random(BIG_V) < 0.1] = 0.0  # zeros in both, some shared
    q[rng.random(BIG_V) < 0.1] = 0.0
    q[rng.integers(BIG_V, size=20)] = 1e-300
    return p / p.sum(), q / q.sum()


def _local_gains(p, q, n, scheme, subset):
    """Change of ``p(H) + 1 - Q(H)`` when each single token is toggled, by docs/math.md's formulas.

    with replacement: Q(H) = q(H)^n.  without replacement, n = 2 (docs/math.md#without-replacement):
    W_2(H) = q(H) - R sum_{i in H} q_i / (1 - q_i), R = q(outside H), 1 - q_i summed directly.
    """
    pn, qn = p / math.fsum(p), q / math.fsum(q)
    inside = np.zeros(pn.size, dtype=bool)
    inside[subset] = True
    qH = math.fsum(qn[inside])
    R = math.fsum(qn[~inside])
    sign = np.where(inside, -1.0, 1.0)  # toggling adds outside tokens, removes inside ones
    qH_new = qH + sign * qn
    dp = sign * pn
    if scheme == "with_replacement":
        return dp - (qH_new**n - qH**n)
    assert scheme == "without_replacement" and n == 2
    total = math.fsum(qn)
    rest = total - qn
    big = np.argmax(qn)
    rest[big] = math.fsum(np.delete(qn, big))
    ratio = np.where(qn > 0, qn / np.where(rest > 0, rest, 1.0), 0.0)
    S = math.fsum(ratio[inside])
    W = qH - R * S
    W_new = qH_new - (R - sign * qn) * (S + sign * ratio)
    return dp - (W_new - W)


@pytest.mark.parametrize(
    "scheme, n",
    [
        ("with_replacement", 2),
        ("with_replacement", 3),
        ("without_replacement", 2),
        ("without_replacement", 3),
    ],
)
def test_big_vocabulary_certificate_and_local_optimality(big_pair, scheme, n):
    """V = 262,144: the certificate attains the value; no single-token change improves it."""
    p, q = big_pair
    r = optimal_acceptance(p, q, n, sampling=scheme)
    assert r.success, r.message
    assert 0.0 <= r.value <= 1.0
    assert abs(fsum_objective(p, q, n, scheme, r.subset) - r.value) <= TOL
    # every valid verifier is below the bound; RRS/SpecTr are exact in O(nV)
    if scheme == "with_replacement":
        for name in ("rrs", "spectr"):
            assert verifier_acceptance(name, p, q, n).value <= r.value + TOL
        assert np.all(_local_gains(p, q, n, scheme, r.subset) >= -TOL)
    elif n == 2:
        assert np.all(_local_gains(p, q, n, scheme, r.subset) >= -TOL)
        assert verifier_acceptance("rrs_without_replacement", p, q, 2).value <= r.value + TOL
    # more drafts never hurt, and sequential drafts dominate i.i.d. ones (docs/math.md#test-facts)
    if n == 3:
        assert r.value >= optimal_acceptance(p, q, 2, sampling=scheme).value - TOL
    if scheme == "without_replacement":
        assert r.value >= optimal_acceptance(p, q, n, sampling="with_replacement").value - TOL


@pytest.mark.parametrize("scheme", ["with_replacement", "without_replacement"])
def test_big_vocabulary_closed_forms(big_pair, scheme):
    """V = 262,144: n = 1 is 1 - TV; p == q is exactly 1; disjoint supports give 0 for n = 1, 2, 3."""
    p, q = big_pair
    expected = math.fsum(np.minimum(p / p.sum(), q / q.sum()))
    assert abs(optimal_acceptance(p, q, 1, sampling=scheme).value - expected) <= TOL
    for n in (1, 2, 3):
        assert optimal_acceptance(p, p.copy(), n, sampling=scheme).value == 1.0
        assert optimal_acceptance(q, q.copy(), n, sampling=scheme).value == 1.0
    # disjoint supports: H = supp(q) has p(H) = 0 and Q(H) = 1
    pd, qd = p.copy(), q.copy()
    pd[1::2] = 0.0
    qd[0::2] = 0.0
    for n in (1, 2, 3):
        r = optimal_acceptance(pd / pd.sum(), qd / qd.sum(), n, sampling=scheme)
        assert r.value == pytest.approx(0.0, abs=TOL) and r.success
    batch = optimal_acceptance_batch(
        np.stack([p, pd / pd.sum()]), np.stack([p, qd / qd.sum()]), 2, sampling=scheme
    )
    assert batch[0] == 1.0 and abs(batch[1]) <= TOL


def _block_uniform(V, a, m, k):
    """p uniform on a tokens, q uniform on m tokens, k tokens shared (massive ties)."""
    p = np.zeros(V)
    q = np.zeros(V)
    p[:a] = 1.0 / a
    q[a - k : a - k + m] = 1.0 / m
    return p, q


@pytest.mark.parametrize(
    "scheme, n",
    [
        ("with_replacement", 2),
        ("with_replacement", 3),
        ("without_replacement", 2),
        ("without_replacement", 3),
    ],
)
def test_big_vocabulary_block_uniform_closed_form(scheme, n):
    """V = 262,144, blocks of equal masses (ties everywhere): alpha* in closed form by symmetry.

    By symmetry the dual only depends on how many tokens of each block H holds. With h of the m draft
    tokens in H, Q(H) = (h/m)^n (i.i.d.) or C(h, n) / C(m, n) (sequential draws of a uniform q are a
    uniform n-subset); the best H holds all m - k draft-only tokens and i of the k shared ones, so
    alpha* = 1 - max_{0 <= i <= k} [Q(m - k + i) - i / a]  (exact integers / Fractions here).
    """
    a, m, k = 150_000, 120_000, 30_000
    p, q = _block_uniform(BIG_V, a, m, k)

    def Q(h):
        if scheme == "with_replacement":
            return Fraction(h, m) ** n
        return Fraction(math.comb(h, n), math.comb(m, n))

    # the objective is convex in i (both forms), so the maximum over 0..k sits at an endpoint;
    # check a few interior points anyway
    cands = [0, k, k // 3, k // 2, 1, k - 1]
    best = max(Q(m - k + i) - Fraction(i, a) for i in cands)
    expected = 1 - max(best, Fraction(0))
    r = optimal_acceptance(p, q, n, sampling=scheme)
    assert r.success, r.message
    assert abs(fsum_objective(p, q, n, scheme, r.subset) - float(expected)) <= TOL
    assert abs(r.value - float(expected)) <= TOL


# regression: the binned scan (V >= BINNED_MIN_V) summed bins without compensation and drifted by
# 1.7e-12 on this input; fixed in 254e87f (compensated bin sums)
@pytest.mark.parametrize(
    "scheme, n", [("with_replacement", 1), ("with_replacement", 2), ("without_replacement", 2)]
)
def test_binned_scan_accuracy_on_large_tie_blocks(scheme, n):
    p, q = _block_uniform(BIG_V, 150_000, 120_000, 30_000)
    r = optimal_acceptance(p, q, n, sampling=scheme)
    # n = 1: 1 - TV = sum min(p, q) = 30,000 / 150,000, and the certificate's own objective agrees
    assert abs(fsum_objective(p, q, n, scheme, r.subset) - 0.2) <= TOL
    assert abs(r.value - 0.2) <= TOL


# --------------------------------------------------------------------------------------- one-hot
@pytest.mark.parametrize("n", [1, 2, 3, 7])
def test_one_hot_target(n):
    """p = delta_a: alpha* = P(a drafted), in closed form for each scheme (uniform q for the sets)."""
    V, a = 1000, 17
    p = np.zeros(V)
    p[a] = 1.0
    rng = np.random.default_rng(n)
    q = rng.dirichlet(np.ones(V))
    # with replacement: 1 - (1 - q_a)^n, with 1 - q_a summed directly
    expected = 1.0 - math.fsum(np.delete(q, a)) ** n
    assert abs(optimal_acceptance(p, q, n).value - expected) <= TOL
    # uniform q: sequential and conditional-Poisson sets are uniform n-subsets, P(a drafted) = n / V
    u = np.full(V, 1.0 / V)
    for scheme in ("without_replacement", "conditional_poisson"):
        assert abs(optimal_acceptance(p, u, n, sampling=scheme).value - n / V) <= TOL
    # greedy: a in Top -> 1; else q_a / q(rest)
    order = np.argsort(-q, kind="stable")
    top = set(order[: n - 1].tolist())
    rest = math.fsum(q[[i for i in range(V) if i not in top]])
    expected = 1.0 if a in top else q[a] / rest
    assert abs(optimal_acceptance(p, q, n, sampling="greedy").value - expected) <= TOL
    q2 = q.copy()
    q2[a] = 1.0  # now a is the most likely token: always drafted
    q2 /= q2.sum()
    if n >= 2:
        assert optimal_acceptance(p, q2, n, sampling="greedy").value == 1.0
    if n == 2:
        assert optimal_acceptance(p, q2, 2, sampling="hub").value == 1.0


@pytest.mark.parametrize("V", [1, 2, 1000])
def test_one_hot_draft_and_both_one_hot(V):
    """q = delta_b: every draft is b, so alpha* = p(b) (with replacement, any n; n = 1 otherwise)."""
    rng = np.random.default_rng(V)
    p = rng.dirichlet(np.ones(V))
    b = V - 1
    q = np.zeros(V)
    q[b] = 1.0
    for n in (1, 2, 5, 10**6):
        assert abs(optimal_acceptance(p, q, n).value - p[b] / p.sum()) <= TOL
    for scheme in ("without_replacement", "greedy", "conditional_poisson"):
        assert abs(optimal_acceptance(p, q, 1, sampling=scheme).value - p[b] / p.sum()) <= TOL
    # both one-hot: 1 if the same token, else 0
    pa = np.zeros(V)
    pa[0] = 1.0
    assert optimal_acceptance(pa, q, 3).value == (1.0 if V == 1 else 0.0)
    assert optimal_acceptance(q, q.copy(), 3).value == 1.0


# -------------------------------------------------------------------------------- p == q exactly
@pytest.mark.usefixtures("warm_jit")  # the first big-V calls' compile is the fixture's, not this test's
@pytest.mark.parametrize("scheme", Q_DOMINATES)
@pytest.mark.parametrize("case", ["dirichlet", "tiny", "near_one_hot", "ties", "big"])
def test_identical_inputs_give_exactly_one(scheme, case):
    rng = np.random.default_rng(7)
    V = BIG_V if case == "big" else 50
    if case == "tiny":
        p = rng.dirichlet(np.ones(V))
        p[::3] = 1e-300
    elif case == "near_one_hot":
        p = np.full(V, 1e-12 / (V - 1))
        p[3] = 1.0 - 1e-12
    elif case == "ties":
        p = np.repeat([0.3, 0.1, 0.0, 0.2], V // 4)
    else:
        p = rng.dirichlet(np.full(V, 0.1))
    p = p / p.sum()
    ns = [get_scheme(scheme).fixed_n] if get_scheme(scheme).fixed_n else [1, 2, 3]
    if scheme == "conditional_poisson" and case == "big":
        ns = [1, 2]
    for n in ns:
        r = optimal_acceptance(p, p.copy(), n, sampling=scheme)
        assert r.value == 1.0 and r.success


@pytest.mark.slow
@needs_torch
@pytest.mark.parametrize("case", ["dirichlet", "tiny", "near_one_hot", "big"])
def test_torch_identical_inputs_give_exactly_one(case):
    """torch backend, sorted-prefix scan: p == q gives exactly 1.0 (with replacement any n,
    sequential n <= 2), batched rows included."""
    rng = np.random.default_rng(11)
    V = BIG_V if case == "big" else 40
    p = rng.dirichlet(np.full(V, 0.2))
    if case == "tiny":
        p[::2] = 1e-300
    elif case == "near_one_hot":
        p = np.full(V, 1e-12 / (V - 1))
        p[5] = 1.0 - 1e-12
    P = torch.tensor(np.stack([p / p.sum(), rng.dirichlet(np.ones(V))]))
    for sampling, ns in (("with_replacement", [1, 2, 3, 8]), ("without_replacement", [1, 2])):
        for n, v in tb.sorted_prefix_bounds(P, P.clone(), ns, sampling).items():
            assert torch.all(v == 1.0), (sampling, n, v)
    for n, v in tb.greedy_bounds(P, P.clone(), [1, 2, 3]).items():
        assert torch.all(v == 1.0), ("greedy", n, v)


# regression: backends.torch._scan used Q_k**n without the cap min(Q_k**n, Q_k), so a prefix sum of
# 1 + 2e-16 made p == q give 1 - 2.2e-16 (fixed in db9bfba)
@needs_torch
@pytest.mark.parametrize("n", [2, 3])
def test_torch_power_of_prefix_above_one(n):
    p = torch.tensor([0.7, 0.2, 0.1], dtype=torch.float64)
    assert optimal_acceptance(p, p.clone(), n).value == 1.0  # numpy path: exact
    assert float(tb.sorted_prefix_bound(p, p.clone(), n).value) == 1.0


# -------------------------------------------------------------------------------- float16 / bf16
def test_float16_numpy_input_is_promoted_exactly():
    """float16 input is promoted to float64 without rounding: same value as its exact float64 copy."""
    p16 = np.array([0.5, 0.25, 0.125, 0.125, 0.0], dtype=np.float16)  # sums to 1 exactly
    q16 = np.array([0.0625, 0.4375, 0.25, 0.1875, 0.0625], dtype=np.float16)
    for scheme, n in [
        ("with_replacement", 2),
        ("without_replacement", 3),
        ("greedy", 2),
        ("hub", 2),
        ("conditional_poisson", 2),
    ]:
        r = optimal_acceptance(p16, q16, n, sampling=scheme)
        assert (
            abs(r.value - float(exact_alpha(p16.astype(np.float64), q16.astype(np.float64), n, scheme)))
            <= TOL
        )
    # a float16 softmax (5 x float16(0.2) = 0.99976) is off one by more than SUM_TOL but within the
    # rounding bound of float16 (sum_tolerance, 4.9e-4 at V = 5): renormalised in float64, and said so;
    # a float16 array off one beyond that bound raises, or is normalised on request
    x = np.full(5, 0.2, dtype=np.float16)  # float16(0.2) = 0.199951171875
    assert abs(float(x.astype(np.float64).sum()) - 1.0) > SUM_TOL
    r = optimal_acceptance(x, q16, 2)
    ref = float(exact_alpha(np.full(5, 0.2), q16.astype(np.float64), 2, "with_replacement"))
    assert abs(r.value - ref) <= TOL and "p (float16) summed to 1 - 0.00024" in r.message
    y = np.array([0.2, 0.2, 0.2, 0.2, 0.19], dtype=np.float16)
    with pytest.raises(ValueError, match="normalize=True"):
        optimal_acceptance(y, q16, 2)
    r = optimal_acceptance(y, q16, 2, normalize=True)
    assert (
        abs(r.value - float(exact_alpha(y.astype(np.float64), q16.astype(np.float64), 2, "with_replacement")))
        <= TOL
    )


@needs_torch
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_low_precision_torch_tensors(dtype):
    """torch float16/bfloat16/float32 tensors: promoted exactly, for the API and the torch backend."""
    dt = getattr(torch, dtype)
    p = torch.tensor([0.5, 0.25, 0.125, 0.125, 0.0], dtype=dt)
    q = torch.tensor([0.0625, 0.4375, 0.25, 0.1875, 0.0625], dtype=dt)
    p64 = p.to(torch.float64).numpy()
    q64 = q.to(torch.float64).numpy()
    for scheme, n in [("with_replacement", 2), ("without_replacement", 2), ("greedy", 3)]:
        exact = float(exact_alpha(p64, q64, n, scheme))
        assert abs(optimal_acceptance(p, q, n, sampling=scheme).value - exact) <= TOL
        if scheme != "greedy":
            assert abs(float(tb.sorted_prefix_bound(p, q, n, scheme).value) - exact) <= TOL
        else:
            assert abs(float(tb.greedy_bounds(p, q, [n])[n]) - exact) <= TOL
    # a softmax in this dtype rarely sums to 1 within SUM_TOL, but within its dtype's rounding bound
    # (sum_tolerance): accepted and renormalised in float64, as normalize=True does
    x = torch.softmax(torch.tensor([2.0, 1.0, 0.5, 0.1, -1.0]), -1).to(dt)
    x64 = x.double().numpy()
    exact = float(exact_alpha(x64 / x64.sum(), q64, 2, "with_replacement"))
    for kw in ({}, {"normalize": True}):
        assert abs(optimal_acceptance(x, q, 2, **kw).value - exact) <= TOL
        assert abs(float(tb.sorted_prefix_bound(x, q, 2, **kw).value) - exact) <= TOL
    # off one beyond that bound (a token's mass dropped): raise unless normalize=True
    y = x.clone()
    y[0] = 0.5 * y[0]
    with pytest.raises(ValueError, match="normalize=True"):
        optimal_acceptance(y, q, 2)
    with pytest.raises(ValueError, match="normalize=True"):
        tb.sorted_prefix_bound(y, q, 2)


# ----------------------------------------------------------------------------------- SUM_TOL edge
P4 = np.array([0.4, 0.3, 0.2, 0.1])
Q4 = np.array([0.1, 0.2, 0.3, 0.4])


def _entry_points():
    yield "optimal_acceptance", lambda p, q, **kw: optimal_acceptance(p, q, 2, **kw).value
    yield "batch", lambda p, q, **kw: float(optimal_acceptance_batch(p[None], q[None], 2, **kw)[0])
    yield "verifier_acceptance", lambda p, q, **kw: verifier_acceptance("rrs", p, q, 2, **kw).value
    yield "compare", lambda p, q, **kw: compare(p, q, 2, verifiers=["rrs"], **kw)["rrs"].bound
    if tb is not None:
        yield (
            "torch",
            lambda p, q, **kw: float(tb.sorted_prefix_bound(torch.tensor(p), torch.tensor(q), 2, **kw).value),
        )


@pytest.mark.parametrize("name, fn", list(_entry_points()), ids=[n for n, _ in _entry_points()])
@pytest.mark.parametrize("which", ["p", "q"])
def test_sum_within_tolerance_is_rescaled_beyond_raises(name, fn, which):
    """|sum - 1| <= SUM_TOL: accepted and rescaled; beyond: ValueError naming normalize=True."""
    ref = fn(P4, Q4)
    for factor in (1 + 0.5 * SUM_TOL, 1 - 0.5 * SUM_TOL):
        p, q = (P4 * factor, Q4) if which == "p" else (P4, Q4 * factor)
        assert abs(fn(p, q) - ref) <= TOL  # rescaled to one, not used as is
    for factor in (1 + 2 * SUM_TOL, 1 - 2 * SUM_TOL, 1.5, 0.5, 1e-300, 1e300):
        p, q = (P4 * factor, Q4) if which == "p" else (P4, Q4 * factor)
        with pytest.raises(ValueError, match="normalize=True"):
            fn(p, q)
        assert abs(fn(p, q, normalize=True) - ref) <= TOL


# -------------------------------------------------------------------------- n beyond the support
@pytest.mark.parametrize("scheme", ["without_replacement", "greedy", "conditional_poisson"])
def test_n_beyond_support_raises_actionably(scheme):
    p = np.array([0.2, 0.3, 0.5, 0.0])
    q = np.array([0.6, 0.0, 0.4, 0.0])  # two tokens with q > 0
    with pytest.raises(ValueError, match=r"needs at least 3 tokens with q > 0.*has 2.*lower n"):
        optimal_acceptance(p, q, 3, sampling=scheme)
    with pytest.raises(ValueError, match="needs at least 3"):
        optimal_acceptance_batch(p[None], q[None], 3, sampling=scheme)
    with pytest.raises(ValueError, match="needs at least 3"):
        verifier_acceptance("naive", p, q, 3, sampling=scheme)


def test_n_beyond_support_with_replacement_works():
    """With replacement any n works; the value matches the exact oracle, and tends to p(supp q)."""
    p = np.array([0.2, 0.3, 0.5, 0.0])
    q = np.array([0.6, 0.0, 0.4, 0.0])
    for n in (3, 5, 8):
        r = optimal_acceptance(p, q, n)
        assert r.success and abs(r.value - float(exact_alpha(p, q, n, "with_replacement"))) <= TOL
    # as n grows both tokens are drafted almost surely: alpha* -> p(0) + p(2) = 0.7
    assert abs(optimal_acceptance(p, q, 10**6).value - 0.7) <= TOL


# ----------------------------------------------------------------- near-one-hot drafts, mpmath
def _near_one_hot(V, seed, eps=1e-12):
    rng = np.random.default_rng(seed)
    tail = rng.dirichlet(np.full(V - 1, 0.3)) * eps
    q = np.empty(V)
    q[0] = 1.0 - eps
    q[1:] = tail
    p = rng.dirichlet(np.full(V, 0.3))
    p[rng.random(V) < 0.2] = 0.0
    return p / p.sum(), q / q.sum()


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("V", [8, 1000])
def test_near_one_hot_draft_without_replacement_2(V, seed):
    """q_max = 1 - 1e-12: the sequential n = 2 bound matches 50-digit arithmetic (docs/math.md#numerics)."""
    p, q = _near_one_hot(V, seed)
    r = optimal_acceptance(p, q, 2, sampling="without_replacement")
    assert r.success, r.message
    assert abs(r.value - float(mp_without_replacement_2(p, q))) <= TOL
    if V <= 8:
        assert abs(r.value - float(exact_alpha(p, q, 2, "without_replacement"))) <= TOL
    if tb is not None:
        t = tb.sorted_prefix_bound(torch.tensor(p), torch.tensor(q), 2, "without_replacement")
        assert abs(float(t.value) - float(mp_without_replacement_2(p, q))) <= TOL


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("V, n", [(8, 2), (8, 3), (1000, 2), (1000, 4)])
def test_near_one_hot_draft_greedy(V, n, seed):
    """q_max = 1 - 1e-12: greedy's rest mass q(Sigma minus Top) = 1e-12 must not be lost."""
    p, q = _near_one_hot(V, seed)
    expected = float(mp_greedy(p, q, n))
    r = optimal_acceptance(p, q, n, sampling="greedy")
    assert r.success and abs(r.value - expected) <= TOL
    assert abs(float(optimal_acceptance_batch(p[None], q[None], n, sampling="greedy")[0]) - expected) <= TOL
    if n == 2:
        assert abs(optimal_acceptance(p, q, 2, sampling="hub").value - expected) <= TOL
    if tb is not None:
        assert abs(float(tb.greedy_bounds(torch.tensor(p), torch.tensor(q), [n])[n]) - expected) <= TOL
    # the greedy verifier attains it (docs/math.md#greedy-verifier)
    assert abs(verifier_acceptance("greedy", p, q, n).value - expected) <= TOL


@pytest.mark.parametrize("seed", range(3))
def test_near_one_hot_draft_without_replacement_3_exact(seed):
    """n = 3 sequential, q_max = 1 - 1e-12, V = 7: exact rationals (all subsets)."""
    p, q = _near_one_hot(7, seed)
    r = optimal_acceptance(p, q, 3, sampling="without_replacement")
    assert r.success and abs(r.value - float(exact_alpha(p, q, 3, "without_replacement"))) <= TOL


@pytest.mark.parametrize(
    "kind, V, seed",
    [
        ("near_one_hot", 60, 0),
        ("near_one_hot", 300, 1),
        ("dirichlet-0.05", 400, 2),
        ("dirichlet-1", 400, 3),
        ("dirichlet-1", 50, 4),
    ],
)
@pytest.mark.slow
def test_without_replacement_3_against_50_digit_inclusion_exclusion(kind, V, seed):
    """Sequential n = 3 (quadrature + pruning paths) at V up to 400 against 50-digit arithmetic."""
    if kind == "near_one_hot":
        p, q = _near_one_hot(V, seed)
    else:
        conc = float(kind.split("-")[1])
        rng = np.random.default_rng(seed)
        p = rng.dirichlet(np.full(V, conc))
        q = rng.dirichlet(np.full(V, conc))
        q[rng.random(V) < 0.1] = 0.0
        q /= q.sum()
    r = optimal_acceptance(p, q, 3, sampling="without_replacement")
    assert r.success and abs(r.value - float(mp_without_replacement_3(p, q))) <= TOL


@pytest.mark.parametrize("kind", ["near_one_hot", "dirichlet-0.05", "dirichlet-1"])
@pytest.mark.parametrize("n", [2, 3, 5])
def test_conditional_poisson_against_50_digits(kind, n):
    V = 2000
    if kind == "near_one_hot":
        p, q = _near_one_hot(V, n)
    else:
        rng = np.random.default_rng(n)
        conc = float(kind.split("-")[1])
        p, q = rng.dirichlet(np.full(V, conc)), rng.dirichlet(np.full(V, conc))
    r = optimal_acceptance(p, q, n, sampling="conditional_poisson")
    assert r.success and abs(r.value - float(mp_conditional_poisson(p, q, n))) <= TOL


def _llm_pair_near_one_hot(V, seed, T):
    """A study-like position: logits with one dominant token (alpha* about 1 - 1e-6), draft logits
    perturbed, both at temperature T."""
    rng = np.random.default_rng(seed)
    z = rng.standard_normal(V) * 3.0
    z[7] = z.max() + 25.0
    zq = z + 0.5 * rng.standard_normal(V)
    p, q = np.exp((z - z.max()) / T), np.exp((zq - zq.max()) / T)
    return p / p.sum(), q / q.sum()


@pytest.mark.parametrize(
    "V, n",
    [
        # a 50-digit DP over 30,000-152,064 masses: seconds a case, so the full lane only; the fast
        # lane checks the same DP's precision at every prefix at V = 600, magnitudes 1 to subnormal
        # (test_elementary_symmetric_solver_and_recheck_against_50_digits), and at V = 2,000 above
        pytest.param(30_000, 3, id="3-V30k", marks=pytest.mark.slow),
        pytest.param(30_000, 4, id="4-V30k", marks=pytest.mark.slow),
        pytest.param(152_064, 3, id="3-V152k", marks=pytest.mark.slow),
        pytest.param(152_064, 4, id="4-V152k", marks=pytest.mark.slow),
    ],
)
def test_conditional_poisson_llm_sized_near_one_hot_against_50_digits(V, n):
    """Regression: the elementary symmetric polynomials were a DP on logarithms, which loses an ulp
    of |log e_j| per token (1e-12 relative at V = 152,064); the study refused two such values when
    the certificate re-check (the same DP) missed 1e-12. Now a compensated DP on mantissas and binary
    exponents (solver) and a pairwise product (re-check): both at rounding level, every value kept."""
    p, q = _llm_pair_near_one_hot(V, n, 0.9)
    ref = float(mp_conditional_poisson(p, q, n))
    r = optimal_acceptance(p, q, n, sampling="conditional_poisson")
    assert r.success and abs(r.value - ref) <= 1e-14, (r.value, ref, r.message)
    res = evaluate_position(p, q, [n], schemes=["conditional_poisson"], verifiers=[])
    assert abs(res.bounds[("conditional_poisson", n)] - ref) <= 1e-14, res.errors


@pytest.mark.parametrize("n", [1, 2, 3, 6])
def test_elementary_symmetric_solver_and_recheck_against_50_digits(n):
    """``e_n`` from the solver's scaled DP (every prefix) and the re-check's pairwise product, with
    magnitudes from 1 down to subnormals in one vector (the range a log-free float64 DP loses),
    against a 50-digit DP: relative error <= 1e-14 at every prefix; zero while fewer than n tokens
    are positive."""
    rng = np.random.default_rng(n)
    V = 600
    x = 10.0 ** rng.uniform(-320, 0, V)
    x[rng.random(V) < 0.1] = 0.0
    x[:3] = [0.0, 0.5, 0.0]  # a zero first, then fewer than n positive entries for a while
    M, E = _kernels.esp_prefix_scaled(x, np.array([n], dtype=np.int64))
    with mpmath.workdps(50):
        e = [mpmath.mpf(1)] + [mpmath.mpf(0)] * n
        for k in range(V + 1):
            got = mpmath.ldexp(mpmath.mpf(float(M[0, k])), int(E[0, k]))
            if e[n] == 0:
                assert M[0, k] == 0.0, k
            else:
                assert abs(got / e[n] - 1) <= 1e-14, (k, float(got / e[n] - 1))
            if k == V // 2 or k == V:
                m, kk = _elementary_symmetric_tree(x[:k], n)
                tree = mpmath.ldexp(mpmath.mpf(m), kk)
                assert abs(tree / e[n] - 1) <= 1e-14, (k, float(tree / e[n] - 1))
            if k < V and x[k] > 0:
                for j in range(n, 0, -1):
                    e[j] += mpmath.mpf(float(x[k])) * e[j - 1]


@pytest.mark.parametrize("n", [2, 8, 64, 128])
@pytest.mark.parametrize("kind", ["near-equal tiny block", "log-uniform with short runs"])
def test_elementary_symmetric_recheck_scaled_chunks_against_50_digits(kind, n):
    """The re-check's scaled chunks (single masses below ``2^(-1000/n)``, grouped by binary exponent,
    multiplied in plain float64 after an exact power-of-two scaling; short runs of equal masses fed
    in as singles): every coefficient e_0..e_n within 1e-14 of a 50-digit DP, on a block of nearly
    equal masses of 1e-300 (one class) and on masses from 1 to subnormal with runs of 2-5 equal
    ones (at n = 64, 128 a hundred exponent classes, met in no order)."""
    rng = np.random.default_rng(n)
    V = 500
    if kind == "near-equal tiny block":
        x = 1e-300 * (1.0 + 1e-6 * rng.random(V))
        x[:4] = 0.2 + rng.random(4)
    else:
        x = np.repeat(10.0 ** rng.uniform(-323, 0, V // 3), rng.integers(1, 6, V // 3))[:V]
    x[rng.random(x.size) < 0.05] = 0.0
    M, E = _kernels.esp_tree_coefficients(x, n)
    with mpmath.workdps(50):
        e = [mpmath.mpf(1)] + [mpmath.mpf(0)] * n
        for v in x[x > 0]:
            for j in range(n, 0, -1):
                e[j] += mpmath.mpf(float(v)) * e[j - 1]
        for j in range(n + 1):
            if e[j] == 0:
                assert M[j] == 0.0, j
            else:
                got = mpmath.ldexp(mpmath.mpf(float(M[j])), int(E[j]))
                assert abs(got / e[j] - 1) <= 1e-14, (j, float(got / e[j] - 1))


# ---------------------------------------------------------------------------- known bugs (strict)
# regression: backends.torch.greedy_bounds returned 1 - 1.1e-16 for p == q (fixed in db9bfba)
@needs_torch
def test_torch_greedy_identical_inputs_exactly_one():
    x = torch.tensor([1.0, 1.0, 4.0], dtype=torch.float64) / 6
    assert float(tb.greedy_bounds(x, x, [1])[1]) == 1.0


# regression: a denormal q entry made the W_n quadrature kernel raise "negative dimensions not
# allowed" (SystemError in the batch); fixed in 254e87f (quadrature in log t)
@pytest.mark.parametrize("tiny", [5e-324, 1e-320, 1e-310])
def test_denormal_draft_mass_without_replacement_3(tiny):
    p = np.full(4, 0.25)
    q = np.array([0.5, 0.25, 0.25, tiny])
    r = optimal_acceptance(p, q, 3, sampling="without_replacement")
    assert abs(r.value - float(exact_alpha(p, q, 3, "without_replacement"))) <= TOL


# regression: with 1 - q_max denormal, q_i / (1 - q_i) overflowed to inf in
# drafts.without_replacement._without_mass
# (fixed in 254e87f) and in verifiers.naive (fixed since: the big token's term is q(y) q(big) / (1 - q(big)))
@pytest.mark.parametrize("what", ["mass", "naive"])
@pytest.mark.parametrize("tiny", [1e-310, 5e-324])
def test_denormal_complement_without_replacement_2(what, tiny):
    p = np.array([0.5, 0.5])
    q = np.array([1.0, tiny])
    # two tokens, two sequential drafts: both are always drafted, so W_2({0}) = 0 and the naive
    # verifier accepts whatever p samples (acceptance 1)
    if what == "mass":
        assert get_scheme("without_replacement").mass(q, 2, [0]) == 0.0
    else:
        assert abs(verifier_acceptance(what, p, q, 2, sampling="without_replacement").value - 1.0) <= TOL


# regression: the scan overflowed and returned 1.0 (success=True, empty certificate) where
# alpha* = 0.6 (dual/batch fixed in 254e87f, torch NaN fixed in db9bfba, the naive verifier since)
@pytest.mark.parametrize("api", ["dual", "batch", "torch", "naive"])
@pytest.mark.parametrize("tiny", [1e-310, 5e-324])
def test_denormal_complement_wrong_value(api, tiny):
    p = np.array([0.3, 0.3, 0.4])
    q = np.array([1.0, tiny, 0.0])
    # q has two tokens, both always drafted: alpha* = p(0) + p(1) = 0.6 (exact oracle agrees)
    assert abs(float(exact_alpha(p, q, 2, "without_replacement")) - 0.6) <= TOL
    if api == "dual":
        value = optimal_acceptance(p, q, 2, sampling="without_replacement").value
    elif api == "batch":
        value = optimal_acceptance_batch(p[None], q[None], 2, sampling="without_replacement")[0]
    elif api == "torch":
        if tb is None:
            pytest.xfail("torch not installed")
        value = float(
            tb.sorted_prefix_bound(torch.tensor(p), torch.tensor(q), 2, "without_replacement").value
        )
    else:  # the naive verifier accepts exactly the target's mass on the drafted set {0, 1}
        value = verifier_acceptance("naive", p, q, 2, sampling="without_replacement").value
    assert abs(value - 0.6) <= TOL


def test_denormal_complement_lp_and_bruteforce_are_right():
    """The slow exact paths already get the case above right (so it is the fast scan that is wrong)."""
    p = np.array([0.3, 0.3, 0.4])
    q = np.array([1.0, 1e-310, 0.0])
    for method in ("lp", "bruteforce"):
        assert (
            abs(optimal_acceptance(p, q, 2, sampling="without_replacement", method=method).value - 0.6) <= TOL
        )


# regression: node-wise `optimal` with one draft of a sampling scheme without a full-vocabulary
# construction (without replacement, greedy, conditional Poisson) went to the LP, whose tuple law held a
# (tuples x V) mask and whose dense plan (sets x V): 21.5 GiB, then 172 GiB at V = 151,936 (the
# kernel's out-of-memory killer ended the process). One draft is one draw from q: i.i.d.'s construction.
@pytest.mark.parametrize("scheme", ["without_replacement", "greedy", "conditional_poisson"])
def test_optimal_with_one_draft_at_full_vocabulary_is_sum_min(scheme):
    rng = np.random.default_rng(3)
    V = 151_936
    p, q = rng.dirichlet(np.full(V, 0.3)), rng.dirichlet(np.full(V, 0.3))
    r = verifier_acceptance("optimal", p, q, 1, sampling=scheme)
    assert abs(r.value - math.fsum(np.minimum(p, q))) <= 1e-12
    small_p, small_q = p[:40] / p[:40].sum(), q[:40] / q[:40].sum()  # the LP, where it is affordable
    lp = optimal_acceptance(small_p, small_q, 1, sampling=scheme, method="lp").value
    assert abs(verifier_acceptance("optimal", small_p, small_q, 1, sampling=scheme).value - lp) <= 1e-9


def test_sequential_tuple_law_in_blocks_against_fractions(monkeypatch):
    """The sequential tuple law, its mask in blocks of a few prefixes (as at large V), against exact
    fractions: P(t) = prod_i q_(t_i) / (q(all) - q(t_1) - ... - q(t_(i-1)))."""
    import itertools

    from mdsd_ot.drafts import _common

    monkeypatch.setattr(_common, "_TUPLE_MASK_ENTRIES", 7)  # blocks of one prefix at V = 6
    q = np.array([0.4, 0.25, 1e-17, 0.2, 0.15 - 1e-17, 0.0])
    q = q / q.sum()
    for n in (1, 2, 3):
        tuples = np.array(list(itertools.permutations([0, 1, 2, 3, 4], n)), dtype=np.int64)
        got = _common._sequential_tuple_probs(q, tuples)
        total = sum(Fraction(float(x)) for x in q)
        for t, g in zip(tuples, got):
            exact, left = Fraction(1), total
            for y in t:
                exact *= Fraction(float(q[y])) / left
                left -= Fraction(float(q[y]))
            assert abs(Fraction(float(g)) / exact - 1) <= 1e-14, (t, float(g), float(exact))


def test_the_lp_refuses_a_plan_beyond_its_limit_in_one_line():
    rng = np.random.default_rng(4)
    V = 20_000
    p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
    with pytest.raises(ValueError, match=r"transport plan would have 20,000 draft sets x 20,000 tokens"):
        optimal_acceptance(p, q, 1, sampling="without_replacement", method="lp")
