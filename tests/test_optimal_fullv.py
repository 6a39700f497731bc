"""The full-vocabulary optimal verifier (docs/math.md#optimal-verifier-full-v).

Oracles: the LP (HiGHS) and the dual for alpha*; exact enumeration of every draft tuple through the
scheme's own tuple law for the output law; Monte Carlo of ``verify`` against the exact acceptance;
a chi-square test of the output tokens; a hull computed here in plain Python from ``DraftScheme.mass``
(the independent evaluation of Q(H) that certifies the dual) for the hull identity.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from mdsd_ot import optimal_acceptance
from mdsd_ot._config import LAW_TOL, VALUE_TOL
from mdsd_ot.drafts import get_scheme
from mdsd_ot.verifiers import VERIFIERS, verifier_acceptance
from mdsd_ot.verifiers.optimal import OptimalVerifier

OPT = VERIFIERS["optimal"]


def _instances(rng, count, V_max=6):
    """Random small (p, q): Dirichlet, integer ties with zeros, near one-hot, p close to q."""
    out = []
    for i in range(count):
        V = int(rng.integers(1, V_max + 1))
        kind = i % 5
        if kind == 0:
            p, q = rng.dirichlet(np.full(V, 0.5)), rng.dirichlet(np.full(V, 0.5))
        elif kind == 1:  # ties and zeros
            p, q = rng.integers(0, 3, V).astype(float), rng.integers(0, 3, V).astype(float)
            p[0] += p.sum() == 0
            q[-1] += q.sum() == 0
        elif kind == 2:  # near one-hot target
            p = np.full(V, 1e-12)
            p[rng.integers(V)] = 1.0
            q = rng.dirichlet(np.ones(V))
        elif kind == 3:  # near one-hot drafts
            q = np.full(V, 1e-13)
            q[rng.integers(V)] = 1.0
            p = rng.dirichlet(np.ones(V))
        else:  # p close to q
            p = rng.dirichlet(np.ones(V))
            q = p * rng.uniform(0.8, 1.25, V)
        out.append((p / p.sum(), q / q.sum()))
    return out


def _enumerate(prepared):
    """Output law and acceptance summed over every draft tuple of the scheme (exact)."""
    tuples, probs = prepared.scheme.tuple_law(prepared.q, prepared.n)
    law = np.zeros(prepared.p.size)
    accept = 0.0
    for t, w in zip(tuples, probs):
        lw, a = prepared.output_law(t)
        law += w * lw
        accept += w * a
    return law, accept


@pytest.mark.parametrize("sampling", ["with_replacement", "greedy", "hub"])
def test_output_law_and_lp_value_by_enumeration(sampling):
    rng = np.random.default_rng({"with_replacement": 1, "greedy": 2, "hub": 3}[sampling])
    checked = 0
    for p, q in _instances(rng, 120):
        for n in (1, 2, 3):
            scheme = get_scheme(sampling)
            if sampling == "hub" and n != 2:
                continue
            try:
                scheme.check(q, n)
            except ValueError:
                continue  # e.g. greedy needs n - 1 tokens of positive q
            prepared = OPT.prepare(p, q, n, sampling=sampling)
            law, accept = _enumerate(prepared)
            assert np.abs(law - prepared.p).max() <= LAW_TOL
            lp = optimal_acceptance(p, q, n, sampling=sampling, method="lp")
            assert lp.success
            assert abs(prepared.acceptance() - lp.value) <= VALUE_TOL
            assert abs(accept - prepared.acceptance()) <= 1e-12
            checked += 1
    assert checked >= (80 if sampling == "hub" else 150)


def test_pooled_runs_and_kinetic_blocks_by_enumeration():
    """Instances where hull blocks hold several tokens: tokens pooled into one unit (one class at every
    level) and blocks of several units (the kinetic decomposition) both occur; the output law is p and
    the acceptance the LP's alpha* (enumeration of every draft tuple)."""
    rng = np.random.default_rng(8)
    pooled = kinetic = 0
    for i in range(24):
        V = int(rng.integers(7, 10))
        n = 2 + i % 2
        p = rng.dirichlet(np.ones(V))
        if i % 3:  # two groups of nearly equal q/p: pooled into runs
            q = p * np.where(rng.random(V) < 0.5, 0.2, 5.0) * np.exp(rng.standard_normal(V) * 0.01)
        else:  # spread-out ratios: blocks of several units
            q = p * np.exp(rng.standard_normal(V) * 0.3)
        p, q = p / p.sum(), q / q.sum()
        prepared = OPT.prepare(p, q, n)
        units = np.bincount(prepared.cls[prepared.cls >= 0])
        pooled += int(np.any(units >= 2))
        lam = prepared._lam_unit  # units of one block share its slope
        kinetic += int(np.any(lam[1:] == lam[:-1]))
        law, accept = _enumerate(prepared)
        assert np.abs(law - prepared.p).max() <= LAW_TOL
        lp = optimal_acceptance(p, q, n, method="lp")
        assert abs(prepared.acceptance() - lp.value) <= VALUE_TOL
        assert abs(accept - prepared.acceptance()) <= 1e-12
    assert pooled >= 10 and kinetic >= 3, (pooled, kinetic)


def test_lp_construction_kept_as_reference():
    p, q = np.array([0.5, 0.3, 0.2, 0.0]), np.array([0.1, 0.2, 0.3, 0.4])
    lp = OptimalVerifier(construction="lp").prepare(p, q, 2)
    assert type(lp).__name__ == "_PreparedOptimal"
    assert abs(lp.acceptance() - OPT.acceptance(p, q, 2)) <= VALUE_TOL
    assert OPT.covers("with_replacement") and not OPT.covers("without_replacement")
    assert not OptimalVerifier(construction="lp").covers("with_replacement")
    with pytest.raises(ValueError, match="construction"):
        OptimalVerifier(construction="fast")
    # schemes without a full-V construction still run the LP
    assert type(OPT.prepare(p, q, 2, sampling="without_replacement")).__name__ == "_PreparedOptimal"


def _llm_like(rng, V, shape=0.3):
    a = 1.0 / np.arange(1, V + 1) ** 1.1
    p, q = a * rng.gamma(shape, size=V), a * rng.gamma(shape, size=V)
    q = q[rng.permutation(V)] if rng.random() < 0.5 else q
    return p / p.sum(), q / q.sum()


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_acceptance_matches_dual_at_V_1000(n):
    rng = np.random.default_rng(10 + n)
    for _ in range(4):
        p, q = _llm_like(rng, 1000)
        r = verifier_acceptance("optimal", p, q, n)
        assert r.method == "exact"
        assert abs(r.value - optimal_acceptance(p, q, n).value) <= VALUE_TOL


def test_acceptance_matches_dual_with_zeros_and_top_k():
    rng = np.random.default_rng(7)
    p, q = _llm_like(rng, 1000)
    p[np.argsort(p)[:900]] = 0.0  # top-100 target
    q[rng.choice(1000, 300, replace=False)] = 0.0
    p, q = p / p.sum(), q / q.sum()
    for n in (2, 5):
        assert abs(OPT.acceptance(p, q, n) - optimal_acceptance(p, q, n).value) <= VALUE_TOL


@pytest.mark.slow
def test_acceptance_matches_dual_at_V_152064():
    rng = np.random.default_rng(152064)
    p, q = _llm_like(rng, 152_064)
    for n in (2, 8):
        assert abs(OPT.acceptance(p, q, n) - optimal_acceptance(p, q, n).value) <= VALUE_TOL


def test_segment_tree_and_scan_give_the_same_selection():
    """A block of more than CHAIN_SCAN_MAX_UNITS units: the join levels come from a segment tree; they
    must equal a plain scan of the death levels (two independent range-maximum codes), and the
    selection law sums to one; the acceptance matches the dual."""
    rng = np.random.default_rng(4)
    V, n = 500, 8
    z = rng.standard_normal(V) * 2.5 - 1.1 * np.log(np.arange(1, V + 1))
    p, q = np.exp(z - z.max()), np.exp(z - z.max() + rng.standard_normal(V))
    p, q = p / p.sum(), q / q.sum()
    prepared = OPT.prepare(p, q, n)
    assert prepared.size > 0  # the tree is in use
    assert abs(prepared.acceptance() - optimal_acceptance(p, q, n).value) <= VALUE_TOL
    tau = prepared.tau
    drafts = get_scheme("with_replacement").sample_batch(prepared.q, n, 300, rng)
    for x in drafts:
        units = prepared.cls[x]
        lowest = units.min()
        join = [0.0 if u == lowest else max(tau[lowest + 1 : u + 1]) for u in units]
        sel = prepared._selection(x)
        expect = np.zeros(n)
        levels = sorted(set(min(j, 1.0) for j in join)) + [1.0]
        for lo, hi in zip(levels[:-1], levels[1:]):
            expect[next(i for i in range(n) if join[i] <= lo)] += hi - lo
        assert np.abs(sel - expect).max() <= 1e-15
        assert abs(sel.sum() - 1.0) <= 1e-15


def test_verify_monte_carlo_within_four_standard_errors():
    rng = np.random.default_rng(3)
    p, q = _llm_like(rng, 1000)
    n, samples = 4, 20_000
    prepared = OPT.prepare(p, q, n)
    drafts = get_scheme("with_replacement").sample_batch(prepared.q, n, samples, rng)
    hits = np.array([prepared.verify(x, rng).accepted for x in drafts], dtype=float)
    se = hits.std(ddof=1) / math.sqrt(samples)
    assert abs(hits.mean() - prepared.acceptance()) <= 4 * se
    # per-draft-set acceptance probabilities average to the same value (Rao-Blackwellised)
    per_set = np.array([prepared.accept_probability(x) for x in drafts[:4000]])
    se_rb = per_set.std(ddof=1) / math.sqrt(per_set.size)
    assert abs(per_set.mean() - prepared.acceptance()) <= 4 * se_rb + 1e-12


def test_output_tokens_chi_square_at_V_50():
    rng = np.random.default_rng(50)
    p, q = _llm_like(rng, 50, shape=1.0)
    n, samples = 3, 40_000
    prepared = OPT.prepare(p, q, n)
    drafts = get_scheme("with_replacement").sample_batch(prepared.q, n, samples, rng)
    counts = np.bincount([prepared.verify(x, rng).token for x in drafts], minlength=50)
    expected = samples * prepared.p
    big = expected >= 5  # pool the rare tokens into one cell
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    keep = exp > 0
    stat = float(((obs[keep] - exp[keep]) ** 2 / exp[keep]).sum())
    dof = int(keep.sum()) - 1
    # Wilson-Hilferty: the chi-square quantile at 1 - 1e-4 (z = 3.719)
    crit = dof * (1 - 2 / (9 * dof) + 3.719 * math.sqrt(2 / (9 * dof))) ** 3
    assert stat < crit, (stat, crit)
    assert counts[prepared.p == 0].sum() == 0


def _hull_value(p, q, n, scheme):
    """sum_y p(y) min(1, lambda(y)) from the lower convex hull of (P_k, g_k), in plain Python, with
    g_k = 1 - Q(tokens after the first k in q/p ascending order) from DraftScheme.mass."""
    V = p.size
    ratio = [(q[i] / p[i] if p[i] > 0 else math.inf, i) for i in range(V)]
    order = [i for _, i in sorted(ratio)]
    pts = []
    for k in range(V + 1):
        outside = np.zeros(V, dtype=bool)
        outside[order[k:]] = True
        pts.append((float(p[order[:k]].sum()), 1.0 - scheme.mass(q, n, outside)))
    hull = [0]
    for k in range(1, V + 1):
        while len(hull) >= 2:
            (x0, y0), (x1, y1), (x2, y2) = pts[hull[-2]], pts[hull[-1]], pts[k]
            if (y1 - y0) * (x2 - x0) >= (y2 - y0) * (x1 - x0):
                hull.pop()
            else:
                break
        hull.append(k)
    value = 0.0
    for a, b in zip(hull[:-1], hull[1:]):
        dx = pts[b][0] - pts[a][0]
        lam = (pts[b][1] - pts[a][1]) / dx if dx > 0 else math.inf
        value += min(1.0, lam) * dx if dx > 0 else 0.0
    return value


@pytest.mark.parametrize("sampling", ["with_replacement", "without_replacement"])
def test_hull_identity_against_the_dual(sampling):
    """alpha* = sum_y p(y) min(1, lambda(y)) (the hull of the sorted prefix points), both schemes."""
    rng = np.random.default_rng(11 if sampling == "with_replacement" else 12)
    scheme = get_scheme(sampling)
    for _ in range(60 if sampling == "with_replacement" else 20):
        V = int(rng.integers(2, 25 if sampling == "with_replacement" else 14))
        p, q = rng.dirichlet(np.full(V, 0.6)), rng.dirichlet(np.full(V, 0.6))
        n = int(rng.integers(1, min(V, 5) + 1))
        dual = optimal_acceptance(p, q, n, sampling=sampling).value
        assert abs(_hull_value(p, q, n, scheme) - dual) <= 1e-12


def test_selected_law_is_a_base_with_the_optimal_signs():
    """r(y) <= p(y) where lambda < 1 and r(y) >= p(y) where lambda >= 1 (hence sum min(p, r) = alpha*),
    and r sums to one: the selection always picks a draft."""
    rng = np.random.default_rng(21)
    for _ in range(20):
        p, q = _llm_like(rng, 300, shape=0.5)
        prepared = OPT.prepare(p, q, 3)
        r, lam = prepared.r, prepared.lam
        assert abs(r.sum() - 1.0) <= 1e-12
        low = (lam < 1) & (q > 0)
        assert np.all(r[low] <= p[low] * (1 + 1e-9) + 1e-300)
        high = (lam >= 1) & (q > 0)
        assert np.all(r[high] >= p[high] * (1 - 1e-9))
        assert np.all(r[q == 0] == 0)


def test_bad_drafts_raise():
    p, q = np.array([0.5, 0.3, 0.2, 0.0]), np.array([0.1, 0.2, 0.3, 0.4])
    prepared = OPT.prepare(q, p, 2)  # q has a zero at token 3
    g = np.random.default_rng(0)
    with pytest.raises(ValueError, match="q = 0"):
        prepared.verify(np.array([0, 3]), g)
    with pytest.raises(ValueError, match=r"\[0, 4\)"):
        prepared.verify(np.array([0, 7]), g)
    with pytest.raises(ValueError, match="expected 2 drafts"):
        prepared.verify(np.array([0, 1, 2]), g)
    with pytest.raises(TypeError, match="integer"):
        prepared.verify(np.array([0.5, 1.0]), g)
    with pytest.raises(TypeError, match="Generator"):
        prepared.verify(np.array([0, 1]), 0)
    v = prepared.verify(np.array([0, 1]), g)
    assert v.token in range(4) and v.accepted == (v.token in (0, 1))


def _hostile_pairs(rng, V):
    """Full-V orders' worst cases: exact ties of q/p (groups with q = c p), q = 0 (top-k drafts),
    p = 0 < q, q/p overflowing to inf (a subnormal p) beside p = 0, subnormal masses."""
    p, q = rng.dirichlet(np.full(V, 0.3)), rng.dirichlet(np.full(V, 0.3))
    tied = rng.random(V) < 0.3
    q[tied] = p[tied] * rng.choice([0.5, 1.0, 2.0], tied.sum())  # many exact ties
    q[rng.random(V) < 0.2] = 0.0
    p[rng.random(V) < 0.05] = 0.0
    over = rng.random(V) < 0.01
    p[over], q[over] = 5e-324, 0.01  # q / p = inf, as for p = 0
    q[rng.random(V) < 0.01] = 1e-310
    return p, q


@pytest.mark.parametrize("V", [1, 3, 257, 5_000, 152_064])
def test_chain_order_is_the_stable_argsort_of_the_keys(V):
    """The chain's order is numpy's stable argsort of ``chain_keys`` (ties in index order, both infinite
    key groups merged) by both routes: the radix sort ``chain_order`` (compiled, and as Python at small
    V) and any argsort with its ties put in index order (``index_order_ties``); ``chain_token_order``
    on each route and on the first timed call."""
    from mdsd_ot._kernels import dispatch
    from mdsd_ot._kernels.optimal import chain_keys, chain_order
    from mdsd_ot.verifiers.optimal import _CHAIN_SORT, _chain_scratch, chain_token_order, index_order_ties

    rng = np.random.default_rng(V)
    cases = [_hostile_pairs(rng, V), (np.full(V, 1.0 / V), np.full(V, 1.0 / V))]  # all keys equal
    top = np.zeros(V)
    top[: min(V, 50)] = rng.dirichlet(np.ones(min(V, 50)))  # top-50 drafts
    cases.append((rng.dirichlet(np.ones(V)), top))
    kernels = [chain_order] + ([dispatch.python_twin(chain_order)] if V <= 5_000 else [])
    for p, q in cases:
        keys = chain_keys(p, q, np.empty(V))
        want = np.argsort(keys, kind="stable")
        for kernel in kernels:
            assert np.array_equal(kernel(keys), want)
        shuffled = np.lexsort((rng.random(V), keys))  # an argsort with its ties in random order
        for unstable in (np.argsort(keys), np.argsort(keys, kind="heapsort"), shuffled):
            assert np.array_equal(index_order_ties(unstable, keys), want)  # the other route
        for how in ("radix", "argsort", None):  # the verifier's entry point on either route
            _CHAIN_SORT.clear()
            if how:
                _CHAIN_SORT["how"] = how
            assert np.array_equal(chain_token_order(p, q, _chain_scratch(V)), want)
    _CHAIN_SORT.clear()
    signed = rng.choice([-np.inf, -1.5, -0.0, 0.0, 5e-324, 2.0, np.inf], V)  # beyond chain_keys' range
    assert np.array_equal(chain_order(signed), np.argsort(signed, kind="stable"))
