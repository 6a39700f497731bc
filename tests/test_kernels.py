"""Numba kernels against slow pure-numpy twins (the sorted-prefix scans and the W_n quadrature)."""

import itertools

import numpy as np
import pytest
from conftest import random_pair
from numba import njit
from oracles import class_sequential_mass, mp_sequential_product_bound, slow_excess

from mdsd_ot import _kernels as K
from mdsd_ot._config import PRUNE_SLACK
from mdsd_ot._kernels.sequential import _gap_bound
from mdsd_ot.drafts import complement_masses, complement_parts
from mdsd_ot.dual import sorted_order


def llm_like(V, rng, temperature):
    z = rng.standard_normal(V) * 2.5 - 1.1 * np.log(np.arange(1, V + 1))
    zq = z + rng.standard_normal(V)
    p = np.exp((z - z.max()) / temperature)
    q = np.exp((zq - zq.max()) / temperature)
    return p / p.sum(), q / q.sum()


def sorted_pair(p, q):
    o = sorted_order(p, q)
    return np.ascontiguousarray(p[o]), np.ascontiguousarray(q[o])


@pytest.mark.parametrize(
    "scheme,code", [("with_replacement", 0), ("without_replacement", 1), ("conditional_poisson", 2)]
)
def test_prefix_scans_against_subset_masses(scheme, code, rng):
    for _ in range(60):
        V = int(rng.integers(2, 12))
        p, q = random_pair(rng, V)
        n = int(rng.integers(1, 5))
        if scheme != "with_replacement" and np.count_nonzero(q) < n:
            continue
        ps, qs = sorted_pair(p, q)
        d, k = K.solve_sorted(ps, qs, n, code)
        assert d == pytest.approx(slow_excess(ps, qs, n, scheme), abs=1e-12)
        assert 0 <= k <= V


def test_prefix_sums_are_compensated():
    x = np.full(262_144, 1.0 / 262_144) * (1 + 1e-3 * np.sin(np.arange(262_144)))
    exact = np.cumsum(x.astype(np.longdouble))
    got = K.prefix_sums(x)[1:]
    assert np.max(np.abs(got - exact.astype(float))) < 1e-15
    assert K.suffix_sums(x)[0] == pytest.approx(float(exact[-1]), abs=1e-15)


def test_fast_sequential_masses_against_dp(rng):
    """Power-sum fast path == the plain Poisson-binomial DP on the same quadrature grid."""
    for trial in range(40):
        V = int(rng.integers(5, 3000))
        n = int(rng.integers(2, 9))
        if trial % 3 == 0:
            _, q = llm_like(V, rng, rng.choice([0.3, 1.0]))
        else:
            q = rng.dirichlet(np.full(V, 10 ** rng.uniform(-2, 1)))
        ks = np.unique(rng.integers(n, V, size=15))
        R = K.suffix_sums(q)[ks]
        ks, R = ks[R > 0], R[R > 0]
        if ks.size == 0:
            continue
        np.testing.assert_allclose(
            K.sequential_masses_fast(q, ks, R, n), K.sequential_masses(q, ks, R, n), rtol=0, atol=1e-13
        )


def test_fast_sequential_masses_where_small_tokens_need_rescaling():
    """Many small tokens with t q(small) > 700 at the late nodes (the fast path's per-query rescaling
    route, :func:`_small_count_law`; reached at 5-10 (query, node) pairs here): uniform q, where
    W_n(H) = prod_j (|H| - j) / (V - j) exactly."""
    V = 40_000
    q = np.full(V, 1.0 / V)
    for n, k in ((3, 39_500), (8, 39_000), (32, 38_000)):
        exact = float(np.prod((k - np.arange(n)) / (V - np.arange(n))))
        got = K.sequential_masses_fast(q, np.array([k]), K.suffix_sums(q)[[k]], n)[0]
        assert got == pytest.approx(exact, abs=1e-14)


def test_quadrature_against_n2_closed_form_at_full_vocabulary(rng):
    """At V = 152,064 (LLM-like, T = 0.3 and 1): the quadrature with n = 2 equals the closed form."""
    for T in (0.3, 1.0):
        _, q = llm_like(152_064, rng, T)
        ks = np.array([10, 1000, 50_000, 140_000], dtype=np.int64)
        R = K.suffix_sums(q)[ks]
        rest = complement_masses(q)
        closed = [q[:k].sum() - r * np.sum(q[:k] / rest[:k]) for k, r in zip(ks, R)]
        np.testing.assert_allclose(K.sequential_masses_fast(q, ks, R, 2), closed, rtol=0, atol=1e-12)


def assert_scan_finds_the_best_prefix(p, q, n):
    """The pruned n >= 3 scan's value within PRUNE_SLACK (plus quadrature rounding) of the maximum
    over every prefix: the exact ones of the bounds pass, the others by the plain DP."""
    ps, qs = sorted_pair(p, q)
    P, Q, R, lo, _, exact = K.without_replacement_bounds(ps, qs, n)
    best = max(0.0, lo[exact].max())
    ks = np.flatnonzero(~exact).astype(np.int64)
    if ks.size:
        W = K.sequential_masses(qs, ks, R[ks], n)
        best = max(best, float(np.max(np.minimum(W, Q[ks]) - P[ks])))
    assert K.scan_without_replacement(ps, qs, n)[0] == pytest.approx(best, abs=PRUNE_SLACK + 1e-14)


def _few_ordinary_q(rng, V, n):
    """k < n ordinary masses, the others tiny (1e-300..1e-40, often within a factor of ten of each
    other): q(H) minus its largest masses lies far below one ulp of q(H)."""
    k = int(rng.integers(1, n))
    q = np.zeros(V)
    q[:k] = rng.dirichlet(np.ones(k))
    tiny = 10.0 ** -rng.uniform(40, 300)
    q[k:] = tiny * (
        rng.uniform(0.1, 10.0, V - k) if rng.random() < 0.5 else 10.0 ** -rng.uniform(0, 40, V - k)
    )
    q = np.round(q, 4) if rng.random() < 0.3 else q  # short decimals: the ordinary sums round differently
    q[k:] = np.where(q[k:] == 0.0, tiny, q[k:])
    q = q[rng.permutation(V)]
    return q / q.sum()


def _mp_draw_bound(qs, k, n):
    """The smallest of the draws' upper bounds on ``W_n(H_k)`` at 50 digits (docs/math.md#pruning):
    over every ``a < n``, ``prod_{i < n - a} (e_a - i m) / (e_a - i m + R)``, ``e_a`` the mass of H
    outside its ``a`` largest tokens, ``m`` its smallest positive mass, ``R`` the mass outside; each is
    at least W_n, so the kernel's (one of them, rounded up) is at least their minimum."""
    import mpmath

    with mpmath.workdps(50):
        inside = sorted((mpmath.mpf(float(x)) for x in qs[:k]), reverse=True)
        R = mpmath.fsum(mpmath.mpf(float(x)) for x in qs[k:])
        m = min(x for x in inside if x > 0)
        best = mpmath.mpf(1)
        for a in range(n):
            e = mpmath.fsum(inside[a:])
            w = mpmath.mpf(1)
            for i in range(n - a):
                w *= (e - i * m) / (e - i * m + R)
            best = min(best, w)
        return best


def test_cheap_bounds_are_bounds_under_rounding(rng):
    """Every prefix: ``lo[k] + P_k`` at most the product bound evaluated at 50 digits (every mass
    summed directly), which is at most W_n (to one rounding of ``lo = W - P``); ``hi[k] + P_k`` at
    least the smallest of ``q(H)^n`` and the draws' bounds at 50 digits. Inputs where the masses of H
    outside its largest ones lie far below one ulp of q(H) (the product bound formed them by
    subtraction and was about 1 where it is about 0)."""
    import mpmath

    for trial in range(40):
        V = int(rng.integers(5, 40))
        n = int(rng.integers(3, min(V, 12) + 1))
        q = _few_ordinary_q(rng, V, n) if trial % 2 else hard_q(HARD_KINDS[trial % 6], V, rng)
        p = rng.dirichlet(np.ones(V))
        if np.count_nonzero(q) < n:
            continue
        ps, qs = sorted_pair(p, q)
        P, Q, R, lo, hi, exact = K.without_replacement_bounds(ps, qs, n)
        for k in np.flatnonzero(~exact):
            mask = np.zeros(V, dtype=bool)
            mask[:k] = True
            w_lo = mp_sequential_product_bound(qs, mask, n)
            with mpmath.workdps(50):
                total = mpmath.fsum(mpmath.mpf(float(x)) for x in qs)
                q_h = mpmath.fsum(mpmath.mpf(float(x)) for x in qs[:k]) / total
                p_h = mpmath.fsum(mpmath.mpf(float(x)) for x in ps[:k]) / mpmath.fsum(
                    mpmath.mpf(float(x)) for x in ps
                )
                # lo = fl(W_lo - P_k): the lower bound on W_n itself, to the rounding of that
                # subtraction (the prefix sum P_k enters D_k unwidened; PRUNE_SLACK covers it)
                assert mpmath.mpf(lo[k]) + mpmath.mpf(P[k]) <= w_lo + 2.0**-52, (trial, k, lo[k], float(w_lo))
                w_hi = min(q_h**n, q_h, _mp_draw_bound(qs, k, n))
                assert hi[k] >= w_hi - p_h, (trial, k, hi[k], float(w_hi - p_h))


@pytest.mark.parametrize("tail", [1e-300, 1e-310, 1e-3])
def test_cheap_bounds_on_blocks_against_exact_masses(tail, rng):
    """Drafts of a few ordinary masses and blocks of equal small ones (where the draws' upper bound
    and the settled spans of prefixes prune, docs/math.md#pruning): at every prefix that is not
    exact, ``lo[k] + P_k <= W_n(H_k) <= hi[k] + P_k`` (to one rounding), W_n by the 50-digit DP
    over classes of equal masses (``oracles.class_sequential_mass``); and the scan's excess equals
    the best exact one over every prefix to ``PRUNE_SLACK``."""
    import mpmath

    for trial in range(4):
        k_ord = int(rng.integers(1, 5))
        B1 = int(rng.integers(20, 60))
        B2 = int(rng.integers(0, 30)) if trial % 2 else 0
        n = int(rng.integers(k_ord + 1, k_ord + 5))
        vals = list(0.2 + rng.random(k_ord)) + [tail] * B1 + [tail * 3.0] * B2
        q = np.array(vals)
        q /= q.sum()
        p = rng.dirichlet(np.ones(q.size))
        ps, qs = sorted_pair(p, q)
        P, Q, R, lo, hi, exact = K.without_replacement_bounds(ps, qs, n)
        values = sorted(set(qs.tolist()))
        best = -np.inf
        for k in range(qs.size + 1):
            if exact[k]:
                best = max(best, lo[k])
                continue
            inside = [int(np.count_nonzero(qs[:k] == v)) for v in values]
            w = class_sequential_mass(values, inside, R[k], n)
            with mpmath.workdps(50):
                pk = mpmath.mpf(float(P[k]))
                assert mpmath.mpf(float(lo[k])) + pk <= w + 2.0**-52, (trial, k)
                assert mpmath.mpf(float(hi[k])) + pk >= w - 2.0**-52, (trial, k, hi[k], float(w - pk))
            best = max(best, float(w) - P[k])
        d, _ = K.scan_without_replacement(ps, qs, n)
        assert d == pytest.approx(max(best, 0.0), abs=PRUNE_SLACK + 1e-14)


def test_pruned_scan_against_every_prefix(rng):
    """The pruned n >= 3 scan equals the maximum over every prefix evaluated by the plain DP."""
    for trial in range(60):
        V = int(rng.integers(5, 1500))
        n = int(rng.integers(3, 9))
        p, q = llm_like(V, rng, rng.choice([0.3, 1.0])) if trial % 2 else random_pair(rng, V)
        if np.count_nonzero(q) < n:
            continue
        assert_scan_finds_the_best_prefix(p, q, n)


def hard_q(kind, V, rng):
    """Draft distributions where the scan's bounds are tested hardest: LLM-like, masses spread over
    600 decades (outside masses far below 1e-16), near one-hot (q^4), ties, zeros, a sparse Dirichlet."""
    _, q = llm_like(V, rng, 1.0)
    if kind == "tiny":
        q = q * np.exp(-rng.random(V) * 600)
    elif kind == "one_hot":
        q = q**4
    elif kind == "ties":
        q = np.round(q * 50) + 1.0
    elif kind == "zeros":
        q[rng.random(V) < 0.3] = 0.0
    elif kind == "sparse":
        q = rng.dirichlet(np.full(V, 0.05))
    return q / q.sum()


HARD_KINDS = ("llm", "tiny", "one_hot", "ties", "zeros", "sparse")


def draft_set_law(q, n):
    """The law of the set of n drafts sampled in sequence without replacement: every ordered draw,
    the mass left recomputed at each step (the textbook definition)."""
    law = {}
    for t in itertools.permutations(np.flatnonzero(q > 0).tolist(), n):
        pr, left = 1.0, 1.0
        for x in t:
            pr *= q[x] / left
            left -= q[x]
        law[frozenset(t)] = law.get(frozenset(t), 0.0) + pr
    return law


def test_slope_bounds_against_brute_force(rng):
    """The slopes G of the fast path bound every token's increment of W_n(H) = P(drafts inside H)
    (docs/math.md#pruning), checked against the draft-set law by enumeration: adding j outside H_a
    gains at least q_j G(H_a), removing j from H_b loses at most q_j G(H_b), and between two prefixes
    the scan's bound (:func:`_gap_bound`) lies above W_n at every prefix; a token of mass 1e-7 gains
    q_j G to first order (the slope is the derivative, not merely a bound)."""
    from mdsd_ot._kernels.sequential import sequential_slopes_fast

    for trial in range(24):
        V = int(rng.integers(5, 8))
        n = int(rng.integers(3, min(V, 5) + 1))
        q = rng.dirichlet(np.full(V, [0.2, 1.0, 5.0][trial % 3]))
        if trial % 4 == 3:
            q[rng.integers(V)] = 1e-7  # a nearly massless token
            q /= q.sum()
        law = draft_set_law(q, n)

        def W(H):
            return sum(pr for s, pr in law.items() if s <= H)

        R = K.suffix_sums(q)
        ks = np.array([k for k in range(1, V) if R[k] > 0], dtype=np.int64)
        w, G = sequential_slopes_fast(q, ks, R[ks], n)
        exact = [W(set(range(k))) for k in ks]
        np.testing.assert_allclose(w, exact, rtol=0, atol=1e-13)
        for i, k in enumerate(ks):
            H = set(range(k))
            for j in range(V):
                step = W(H | {j}) - W(H - {j})
                if j >= k:
                    assert step >= q[j] * G[i] - 1e-13  # adding j to H_k: at least the slope there
                    if q[j] < 1e-6:
                        assert step == pytest.approx(q[j] * G[i], rel=1e-4, abs=1e-15)
                else:
                    assert step <= q[j] * G[i] + 1e-13  # removing j from H_k: at most the slope
        m = G * R[ks]
        for a in range(ks.size):
            for b in range(a, ks.size):
                for c in range(a, b + 1):
                    bound = _gap_bound(w[a], m[a], R[ks[a]], w[b], m[b], R[ks[b]], R[ks[c]])
                    assert exact[c] <= bound + 1e-13


@njit(cache=False)  # not cached: numba's cache would not see a change to the library's _gap_bound
def _worst_gap_excess(w, m, r, ref, gap):
    """max over prefixes a < b < a + gap and a <= c <= b of ``ref[c] - _gap_bound(a, b, c)``: the
    library's bound, called in compiled loops (about 10^6 calls per test)."""
    worst = -np.inf
    for a in range(w.size):
        for b in range(a + 1, min(w.size, a + gap)):
            for c in range(a, b + 1):
                bound = _gap_bound(w[a], m[a], r[a], w[b], m[b], r[b], r[c])
                excess = ref[c] - bound
                if excess > worst:  # as max(worst, excess)
                    worst = excess
    return worst


def _by_family(ns, split):
    """``(kind, ns)`` for every hard family; the "tiny" family's (masses over 600 decades: the plain
    DP's finest grid is long, about 70% of these tests' time) split in two, its larger n in the full
    lane only. Each test draws its inputs for every n of ``ns`` in turn (the same inputs either way)
    and checks those of its part."""
    cases = [pytest.param(kind, ns, id=kind) for kind in HARD_KINDS if kind != "tiny"]
    cases.append(pytest.param("tiny", ns[:split], id="tiny"))
    cases.append(pytest.param("tiny", ns[split:], id="tiny-large-n", marks=pytest.mark.slow))
    return cases


SLOPE_NS, SCAN_NS = (3, 4, 8, 16), (3, 5, 16, 32)


@pytest.mark.parametrize("kind, check", _by_family(SLOPE_NS, 2))
def test_slope_bounds_against_dp(kind, check, rng):
    """The scan's bound between two evaluated prefixes (:func:`_gap_bound`, slopes and masses from
    the fast path as the scan takes them) against the plain DP on the finest grid at every prefix in
    between, for gaps of up to 40 prefixes, on the hard families (outside masses down to 1e-300)."""
    from mdsd_ot._kernels.sequential import sequential_slopes_fast

    for n in SLOPE_NS:
        q = hard_q(kind, 300, rng)
        qs = sorted_pair(rng.random(q.size), q)[1]
        if n not in check:
            continue
        R = K.suffix_sums(qs)
        count = np.cumsum(qs > 0)
        ks = np.flatnonzero((count >= n) & (R[1:] > 0)).astype(np.int64) + 1
        if ks.size < 2:
            continue
        ref = K.sequential_masses(qs, ks, R[ks], n, 3)
        w, G = sequential_slopes_fast(qs, ks, R[ks], n)
        w = np.minimum(w, 1.0 - R[ks])  # as the scan caps them, by q(H) (computed here as 1 - R)
        m = G * R[ks]
        assert _worst_gap_excess(w, m, R[ks], ref, 40) <= PRUNE_SLACK


@pytest.mark.parametrize("kind, check", _by_family(SCAN_NS, 2))
def test_pruned_scan_against_every_prefix_hard_families(kind, check, rng):
    """The scan's value within PRUNE_SLACK of the best prefix found by the plain DP at every prefix, on
    the hard families at V = 2,000 and n up to 32 (a scan once lost 7e-5 here to a bound that took
    masses between prefixes as differences of prefix sums near 1)."""
    for n in SCAN_NS:
        p = rng.dirichlet(np.ones(2000))
        q = hard_q(kind, 2000, rng)
        if n not in check or np.count_nonzero(q) < n:
            continue
        assert_scan_finds_the_best_prefix(p, q, n)


def test_prefix_suffix_sums_in_one_loop(rng):
    """The scan's three compensated sums in one loop are those of the separate loops, bit for bit."""
    from mdsd_ot._kernels.common import prefix_suffix_sums_into

    for trial in range(20):
        V = int(rng.integers(1, 5000))
        p, q = llm_like(V, rng, 1.0) if trial % 2 else random_pair(rng, V)
        q[rng.random(V) < 0.2] = 10.0 ** rng.uniform(-300, -1)
        P, Q, R = np.empty(V + 1), np.empty(V + 1), np.empty(V + 1)
        prefix_suffix_sums_into(p, q, P, Q, R)
        np.testing.assert_array_equal(P, K.prefix_sums(p))
        np.testing.assert_array_equal(Q, K.prefix_sums(q))
        np.testing.assert_array_equal(R, K.suffix_sums(q))


def test_candidates_collected_with_the_bounds(rng):
    """The scan's candidates, collected in the bounds' pass (a superset filtered against the final
    largest lower bound, the anchor added where missing), are those of the separate pass over lo, hi."""
    from mdsd_ot._kernels.sequential import _bounds_into

    paths = set()
    for trial in range(120):
        V = int(rng.integers(5, 3000))
        n = int(rng.integers(3, 17))
        p, q = llm_like(V, rng, rng.choice([0.05, 0.3, 1.0, 2.0])) if trial % 2 else random_pair(rng, V)
        if trial % 4 == 2:  # a top-k target or draft
            x = p if trial % 8 == 2 else q
            x[np.argsort(-x)[max(1, int(V * rng.uniform(0.001, 0.3))) :]] = 0.0
            x /= x.sum()
        elif trial % 4 == 3:  # tiny masses
            for x in (p, q):
                m = rng.random(V) < 0.2
                x[m] = 10.0 ** rng.uniform(-300, -20, m.sum())
                x /= x.sum()
        if np.count_nonzero(q) < n:
            continue
        ps, qs = sorted_pair(p, q)
        P, Q, R, lo, hi, exact = K.without_replacement_bounds(ps, qs, n)
        want, best, best_k = K.candidate_prefixes(lo, hi, exact)
        out = np.full(V + 1, -1, dtype=np.int64)
        lo2, hi2, exact2 = np.empty(V + 1), np.empty(V + 1), np.empty(V + 1, dtype=bool)
        got = _bounds_into(ps, qs, n, P, Q, R, True, lo2, hi2, exact2, out, True)
        assert got == (want.size, best, best_k)
        np.testing.assert_array_equal(out[: want.size], want)
        np.testing.assert_array_equal(lo2, lo)
        anchor = int(np.argmax(lo))
        run = np.maximum.accumulate(lo)
        superset = np.flatnonzero(~exact & (hi > run + PRUNE_SLACK))
        added = bool(not exact[anchor] and anchor not in superset)
        paths.add((added, superset.size + added > want.size))
    assert len(paths) == 4, paths  # the anchor added or not, entries dropped or not


@pytest.mark.slow
@pytest.mark.parametrize("code", [0, 1])
def test_bucketed_scan_equals_full_sort_scan(code, rng):
    """Binning by q/p (no full sort) gives the sorted-prefix maximum, and its mask attains it."""
    for trial in range(400):
        V = int(rng.integers(1, 400)) if trial % 4 else int(rng.integers(20_000, 60_000))
        p, q = llm_like(V, rng, rng.choice([0.3, 1.0])) if trial % 3 == 0 else random_pair(rng, V)
        n = 2 if code == 1 else int(rng.integers(1, 6))
        if code == 1 and np.count_nonzero(q) < 2:
            continue
        rest = complement_masses(q)
        ps, qs = sorted_pair(p, q)
        want = K.solve_sorted(ps, qs, n, code)[0]
        got, mask = K.bucketed_scan(p, q, n, code, *complement_parts(q))
        assert got == pytest.approx(want, abs=1e-11)  # same sums, another summation order
        qh, ph = q[mask].sum(), p[mask].sum()
        if code == 0:
            excess = min(qh**n, qh) - ph
        else:
            excess = qh - q[~mask].sum() * np.sum(q[mask] / rest[mask]) - ph
        assert excess == pytest.approx(got, abs=1e-12)


@pytest.mark.parametrize("code", [0, 1])
def test_bucketed_scan_mask_is_a_prefix_of_the_sorted_order_with_ties(code, rng):
    """With many exact ties of q/p (quantised masses), and bins both shorter and longer than the
    insertion-sort limit, the binned scan's subset is the first k tokens of ``dual.sorted_order``
    (ties by token index) and its value is the full-sort scan's."""
    from mdsd_ot.dual import sorted_order

    for trial in range(6):
        V = 20_000 + 1_000 * trial
        levels = 3 + 40 * trial  # few distinct values: runs of equal q/p of every length
        p = rng.integers(1, levels, V).astype(float)
        q = rng.integers(0 if trial % 2 else 1, levels, V).astype(float)
        p[rng.integers(0, V, V // 50)] = 0.0
        p /= p.sum()
        q /= q.sum()
        n = 2 if code == 1 else 1 + trial % 4
        got, mask = K.bucketed_scan(p, q, n, code, *complement_parts(q))
        order = sorted_order(p, q)
        k = int(mask.sum())
        assert mask[order[:k]].all()  # the subset is a prefix of the order
        ps, qs = sorted_pair(p, q)
        assert got == pytest.approx(K.solve_sorted(ps, qs, n, code)[0], abs=1e-12)


@pytest.mark.slow
def test_small_inputs_compile_no_large_kernel(tmp_path):
    """The README snippet on a fresh installation compiles no kernel: at its size every kernel, and
    every kernel it calls, runs as Python (no timing: what reached numba's on-disk cache is checked)."""
    import os
    import subprocess
    import sys

    code = (
        "import numpy as np\n"
        "from mdsd_ot import optimal_acceptance, optimal_acceptance_batch, compare\n"
        "p = np.array([0.5, 0.3, 0.2, 0.0]); q = np.array([0.1, 0.2, 0.3, 0.4])\n"
        "optimal_acceptance(p, q, n=2, sampling='without_replacement')\n"
        "optimal_acceptance_batch(np.stack([p, q]), np.stack([q, p]), 3)\n"
        "compare(p, q, 2)\n"
    )
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)
    compiled = {p.name.split("-")[0] for p in tmp_path.rglob("*.nbi")}
    assert not compiled, compiled  # V = 4: every kernel runs as its Python twin (dispatch.python_twin)


def test_python_twin_calls_python_twins():
    """A kernel's twin runs the Python bodies of the kernels it calls (so a small input compiles
    nothing) and returns what the compiled kernel returns."""
    from mdsd_ot._kernels import dispatch, scans

    twin = dispatch.python_twin(scans.scan_with_replacement)
    if twin is scans.scan_with_replacement:
        pytest.skip("NUMBA_DISABLE_JIT=1: kernels are plain functions")
    assert twin.__globals__["scan_with_replacement_sums"] is dispatch.python_twin(
        scans.scan_with_replacement_sums
    )
    assert twin.__globals__["prefix_sums"] is not scans.prefix_sums
    rng = np.random.default_rng(2)
    ps, qs = rng.dirichlet(np.ones(40)), rng.dirichlet(np.ones(40))
    (d_twin, k_twin), (d_jit, k_jit) = twin(ps, qs, 3), scans.scan_with_replacement(ps, qs, 3)
    assert k_twin == k_jit and d_twin == pytest.approx(d_jit, abs=1e-15)  # libm vs LLVM: last-bit differences


def test_radix_sort_of_long_runs_is_the_stable_sort(rng):
    """Long runs (beyond insertion) are radix-sorted on the bits of q/p: the same permutation as a
    stable sort, ties kept in their order, clusters just above one ratio and infinite ratios included."""
    for trial in range(40):
        m = int(rng.integers(33, 3000))
        rs = [
            rng.random(m),
            rng.integers(0, 4, m).astype(float),
            0.7 * (1.0 + 10.0 ** rng.uniform(-17, -2, m)),
            np.where(rng.random(m) < 0.1, np.inf, np.exp(rng.uniform(-700, 700, m))),
        ][trial % 4]
        order = rng.permutation(m).astype(np.int64)
        ps, qs = rng.random(m), rng.random(m)
        a = int(rng.integers(0, m // 2))
        e = m - int(rng.integers(0, m // 4))
        perm = a + np.argsort(-rs[a:e], kind="stable")
        want = [x.copy() for x in (order, rs, ps, qs)]
        for x in want:
            x[a:e] = x[perm]
        K.common.sort_run_descending(order, rs, ps, qs, a, e)
        for got, w in zip((order, rs, ps, qs), want):
            assert np.array_equal(got, w)


@pytest.mark.parametrize("code", [0, 1])
def test_bucketed_scan_refines_crowded_bins(code, rng):
    """Bins crowded with near-equal ratios (q = 0.7 p + 0.3 r: tens of thousands of tokens just above
    q/p = 0.7, exact ties among them), ratios over the whole exponent range and p close to q are
    refined, not sorted: the value is the full-sort scan's and the mask attains it, recomputed by plain
    sums, and is the first k tokens of the sorted order."""
    V = 20_000
    for trial in range(6):
        if trial % 3 == 0:
            p = rng.dirichlet(np.full(V, 0.05))
            q = 0.7 * p + 0.3 * rng.dirichlet(np.full(V, 0.05))
        elif trial % 3 == 1:
            p, q = np.exp(rng.uniform(-690, 0, V)), np.exp(rng.uniform(-690, 0, V))
        else:
            p, _ = llm_like(V, rng, 1.0)
            q = p * (1.0 + 1e-9 * rng.standard_normal(V))
        p, q = p / p.sum(), q / q.sum()
        n = 2 if code == 1 else (1, 2, 8)[trial % 3]
        rest = complement_masses(q)
        got, mask = K.bucketed_scan(p, q, n, code, *complement_parts(q))
        ps, qs = sorted_pair(p, q)
        assert got == pytest.approx(K.solve_sorted(ps, qs, n, code)[0], abs=1e-14)
        qh, ph = q[mask].sum(), p[mask].sum()
        if code == 0:
            excess = min(qh**n, qh) - ph
        else:
            excess = qh - q[~mask].sum() * np.sum(q[mask] / rest[mask]) - ph
        assert excess == pytest.approx(got, abs=1e-13)
        order = sorted_order(p, q)
        assert mask[order[: int(mask.sum())]].all()


def _numpy_prefix_scan(p, q, n, code, rest):
    """Independent oracle for the binned scan: tokens sorted by q/p with np.lexsort (p = 0 < q first,
    q = 0 last, ties by index), every prefix's excess from np.cumsum: ``(D, order, excess)``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(q == 0, -1.0, np.where(p == 0, np.inf, q / np.where(p > 0, p, 1.0)))
    order = np.lexsort((np.arange(p.size), -r))
    P = np.concatenate([[0.0], np.cumsum(p[order])])
    Q = np.concatenate([[0.0], np.cumsum(q[order])])
    if code == 0:
        excess = np.minimum(Q**n, Q) - P
    else:  # the outside mass summed directly (Q[-1] - Q cancels next to a token of mass near 1)
        R = np.concatenate([np.cumsum(q[order][::-1])[::-1], [0.0]])
        S = np.concatenate([[0.0], np.cumsum(q[order] / rest[order])])
        excess = Q - P - R * S
    return max(float(excess.max()), 0.0), order, excess


def test_bin_members_both_ways_against_numpy(rng):
    """The candidate bins' tokens, collected with a branch (few candidates) or without (many), are
    those of np.flatnonzero per bin, in token order."""
    for trial in range(8):
        V = int(rng.integers(1_000, 20_000))
        nbins = int(rng.integers(3, 400))
        b = rng.integers(0, nbins, V).astype(np.int32)
        cnt = np.bincount(b, minlength=nbins)
        share = (0.02, 0.9)[trial % 2]  # below and above the 1/8 of the tokens that picks the way
        take = rng.random(nbins) < share
        start = np.concatenate([[0], np.cumsum(np.where(take, cnt, 0))]).astype(np.int64)
        want = np.concatenate([np.flatnonzero(b == j) for j in range(nbins) if take[j]] + [np.zeros(0, int)])
        assert (8 * start[-1] <= V) == (trial % 2 == 0)
        np.testing.assert_array_equal(K.scans._bin_members(b, start), want)


@pytest.mark.parametrize("code", [0, 1])
def test_bucketed_scan_deep_refinement_against_numpy(code, rng, monkeypatch):
    """Refinement many levels deep (the Python bodies with 4 sub-bins a level and leaves of 2 tokens:
    its stack of pending runs outgrows its first allocation) on crowded, wide and tied ratios: the value
    is the plain numpy sort-and-cumsum scan's, the mask attains it and is a prefix of its order. Near
    one-hot q puts a token above half the mass (its term bounds the bins after it, code 1)."""
    from mdsd_ot._kernels import dispatch

    twin = dispatch.python_twin(K.scans.bucketed_scan)
    monkeypatch.setitem(twin.__globals__, "REFINE_BINS", 4)
    monkeypatch.setitem(twin.__globals__, "REFINE_MIN", 2)
    for trial in range(8):
        V = 1_500
        if trial % 4 == 0:
            p = rng.dirichlet(np.full(V, 0.05))
            q = 0.7 * p + 0.3 * rng.dirichlet(np.full(V, 0.05))
        elif trial % 4 == 1:
            p, q = np.exp(rng.uniform(-690, 0, V)), np.exp(rng.uniform(-690, 0, V))
        elif trial % 4 == 2:
            p, q = rng.integers(1, 6, V).astype(float), rng.integers(0, 6, V).astype(float)
            p[:20] = 0.0
        else:
            p, q = llm_like(V, rng, 1.0)
            q = q * 1e-9
            q[int(rng.integers(V))] += 1.0
        p, q = p / p.sum(), q / q.sum()
        n = 2 if code == 1 else (1, 2, 8, 2)[trial % 4]
        rest = complement_masses(q)
        got, mask = twin(p, q, n, code, *complement_parts(q))
        want, order, excess = _numpy_prefix_scan(p, q, n, code, rest)
        assert got == pytest.approx(want, abs=1e-12)  # (np.cumsum: plain sums, ~V ulps)
        k = int(mask.sum())
        assert mask[order[:k]].all()
        assert excess[k] == pytest.approx(got, abs=1e-12)


def test_small_v_compiled_and_python_bodies_agree(monkeypatch):
    """At V <= PYTHON_MAX_V the scans run compiled once they are compiled or cached, as Python twins
    before: the two give the same bits (values and subsets), every scheme with a scan."""
    from mdsd_ot import optimal_acceptance
    from mdsd_ot._kernels import dispatch

    if not isinstance(K.scan_with_replacement, type(K.bucketed_scan)) or not hasattr(
        K.scan_with_replacement, "py_func"
    ):
        pytest.skip("NUMBA_DISABLE_JIT=1: kernels are plain functions")
    rng = np.random.default_rng(11)
    cases = []
    for trial in range(12):
        V = int(rng.integers(3, 257))
        p, q = llm_like(V, rng, (0.3, 1.0, 2.0)[trial % 3])
        if trial % 4 == 1:
            q = q * 10.0 ** rng.uniform(-300, 0, V)
            q /= q.sum()
        cases.append((p, q))
    runs = {}
    for compiled in (False, True):
        monkeypatch.setattr(dispatch, "compiled_ready", lambda kernel, c=compiled: c)
        out = []
        for p, q in cases:
            for s, n in (
                ("with_replacement", 2),
                ("with_replacement", 8),
                ("without_replacement", 2),
                ("conditional_poisson", 3),
            ):
                r = optimal_acceptance(p, q, n, sampling=s)
                out.append((r.value, tuple(r.subset), r.success))
        runs[compiled] = out
    assert runs[False] == runs[True]


def test_numpy_sum_is_numpys_sum_bit_for_bit(rng):
    """``_kernels.numpy_sum`` and ``masked_sums`` reproduce numpy's pairwise summation exactly (the
    one-kernel small-V path divides by these sums and re-checks with them)."""
    for trial in range(400):
        V = int(rng.integers(1, 3000)) if trial % 2 else int(rng.integers(1, 200))
        x = rng.random(V) * 10.0 ** -rng.uniform(0, 30, V)
        y = rng.random(V)
        if trial % 3 == 0:
            x[rng.random(V) < 0.5] = 0.0
        mask = rng.random(V) < 0.5
        assert K.numpy_sum(x) == x.sum()
        assert K.small.masked_sums(x, y, mask) == ((x * mask).sum(), (y * mask).sum(), (y * ~mask).sum())


def test_small_dual_kernel_is_the_general_path_bit_for_bit(rng):
    """``optimal_acceptance`` below BINNED_MIN_V tokens with its defaults (i.i.d. drafts, sequential
    n = 2) runs one kernel (``_kernels.small_dual``); ``method="dual"`` runs the general path. Same
    value, subset, success and message on every kind of input, refusals included (the kernel hands
    those to the general path, whose message is raised)."""
    from mdsd_ot import optimal_acceptance

    if not hasattr(K.small_dual, "py_func"):
        pytest.skip("NUMBA_DISABLE_JIT=1: kernels are plain functions")
    cases = []
    for trial in range(90):
        V = int(rng.choice([1, 2, 7, 8, 9, 60, 128, 129, 300, 1000, 4097, 9000]))
        kind = trial % 6
        if kind == 0:
            p, q = llm_like(V, rng, float(rng.choice([0.05, 0.3, 1.0, 2.0])))
        elif kind == 1:
            p, q = rng.dirichlet(np.full(V, 0.05)), rng.dirichlet(np.full(V, 0.05))
        elif kind == 2:  # zeros on both sides
            p, q = rng.random(V), rng.random(V)
            p[rng.random(V) < 0.3] = 0.0
            q[rng.random(V) < 0.3] = 0.0
            p[0], q[-1] = 1.0, 1.0
            p, q = p / p.sum(), q / q.sum()
        elif kind == 3:  # masses down to subnormals
            p, q = 10.0 ** -rng.uniform(0, 320, V), 10.0 ** -rng.uniform(0, 320, V)
            p, q = p / p.sum(), q / q.sum()
        elif kind == 4:  # identical, and off one by up to SUM_TOL
            p, _ = llm_like(V, rng, 1.0)
            q = p.copy() if trial % 12 < 6 else p * (1 + 1e-7 * rng.standard_normal(V))
        else:  # refused: a negative entry, a sum off one, too few tokens for sequential n = 2
            p, q = llm_like(V, rng, 1.0)
            which = trial % 18
            if which < 6:
                p[0] = -1e-3
            elif which < 12:
                q = q * 1.1
            else:
                q = np.zeros(V)
                q[0] = 1.0
        cases.append((p, q))
    refused = 0
    for p, q in cases:
        for sampling, n in (
            ("with_replacement", 1),
            ("with_replacement", 2),
            ("with_replacement", 100),
            ("without_replacement", 2),
        ):
            got = []
            for method in ("auto", "dual"):
                try:
                    r = optimal_acceptance(p, q, n, sampling=sampling, method=method)
                    got.append((r.value, r.subset.tolist(), r.success, r.message, r.lower_bound))
                except ValueError as exc:
                    got.append(str(exc))
            assert got[0] == got[1], (sampling, n, p.size)
            refused += isinstance(got[0], str)
    assert 0 < refused < len(cases) * 4 // 3


def test_chernoff_saturation_of_the_sequential_check_is_a_bound():
    """``_surely_n_arrivals`` (the sequential re-check's shortcut for a node where n arrivals are
    certain): wherever it says so, the probability that fewer than n of the clocks have rung, by a
    plain Poisson-binomial DP over ``1 - e^(-q t)`` in numpy (positive terms: relative error about
    1e-15), is below ``SATURATED / 2``; it says so on some of the sets and not on others.
    Clocks in both forms: ``t = e^s`` as a float and, beyond float range, from ``log q + s``."""
    import math

    from mdsd_ot._config import SATURATED
    from mdsd_ot._kernels.sequential import _surely_n_arrivals

    surely = njit(lambda qv, lq, cut, s, et, n: _surely_n_arrivals(qv, lq, cut, s, et, n))
    rng = np.random.default_rng(5)
    said = 0
    for _ in range(60):
        n = int(rng.choice([16, 64, 128]))
        cut = int(rng.integers(n, 20 * n))
        qv = np.sort(rng.uniform(0.5, 1.5, cut) * 10.0 ** rng.uniform(-12, -2))[::-1].copy()
        mean_x = n * rng.uniform(0.8, 8.0) / cut  # a mean count from 0.8 n to 8 n
        s = math.log(mean_x / qv.mean())
        far = rng.random() < 0.3  # the clocks from logarithms (t given as e^s beyond float range)
        lq = np.log(qv)
        got = surely(qv, lq, cut, s, 0.0 if far else math.exp(s), n)
        a = -np.expm1(-qv * math.exp(s))  # (float64 DP: positive terms, relative error ~1e-15)
        dp = np.zeros(n)
        dp[0] = 1.0
        for ai in a:
            dp[1:] = dp[1:] * (1.0 - ai) + dp[:-1] * ai
            dp[0] *= 1.0 - ai
        below = float(dp.sum())
        if got:
            assert below < 0.5 * SATURATED, (n, cut, below)
            said += 1
    assert 5 <= said <= 55, said
