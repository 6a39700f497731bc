"""The evaluation plan (mdsd_ot.plan) against the one-at-a-time API, and the torch batch against it.

The oracle of every value is :func:`mdsd_ot.optimal_acceptance` / :func:`mdsd_ot.verifier_acceptance`
(themselves tested against exact rationals, 50-digit arithmetic, enumeration and the LP elsewhere),
on random, near-one-hot, tied, zero-laden, top-k-truncated and tiny-mass inputs; agreement to 1e-12.
"""

from __future__ import annotations

import numpy as np
import pytest

import mdsd_ot
from mdsd_ot import _kernels, optimal_acceptance, plan, verifier_acceptance
from mdsd_ot._kernels import plan as kplan
from mdsd_ot.drafts import top_tokens
from mdsd_ot.plan import PlanVerifier, evaluate_position
from mdsd_ot.verifiers import DEFAULT_VERIFIERS
from mdsd_ot.verifiers import optimal as optimal_module

TOL = 1e-12
SCHEMES = tuple(mdsd_ot.SCHEMES)  # every registered scheme and default verifier, by construction
VERIFIERS = DEFAULT_VERIFIERS
NS = (1, 2, 3, 4)


def _norm(x):
    x = np.asarray(x, dtype=np.float64)
    return x / x.sum()


def _cases():
    """(label, p, q): the domain the plan promises to cover."""
    rng = np.random.default_rng(20261130)
    out = []
    for V in (5, 12, 60, 300):
        out.append((f"dirichlet V={V}", rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))))
        out.append((f"peaked V={V}", rng.dirichlet(np.full(V, 0.1)), rng.dirichlet(np.full(V, 0.1))))
    V = 40
    q = np.full(V, 1e-12 / (V - 1))
    q[7] = 1.0 - 1e-12
    out.append(("near one-hot q", _norm(rng.random(V)), q))
    p = np.full(V, 1e-13 / (V - 1))
    p[3] = 1.0 - 1e-13
    out.append(("near one-hot p and q", p, q))
    p = _norm(rng.random(V))
    p[rng.random(V) < 0.4] = 0.0
    qz = _norm(rng.random(V))
    qz[rng.random(V) < 0.4] = 0.0
    out.append(("zeros in p and q", _norm(p), _norm(qz)))
    out.append(("ties", _norm(np.ones(V)), _norm(np.repeat([1.0, 2.0, 3.0, 4.0], V // 4))))
    out.append(
        ("ties in q/p", _norm(np.tile([1.0, 2.0], V // 2)), _norm(np.tile([2.0, 4.0, 1.0, 2.0], V // 4)))
    )
    logits = rng.standard_normal(V) * 2.0
    pk = np.exp(logits)
    pk[np.argsort(-pk)[8:]] = 0.0  # top-8 truncated target
    qk = np.exp(logits + rng.standard_normal(V))
    qk[np.argsort(-qk)[12:]] = 0.0  # top-12 truncated draft
    out.append(("top-k truncated", _norm(pk), _norm(qk)))
    tiny = _norm(rng.random(V))
    tiny[::3] = 1e-300
    tiny[1::5] = 5e-324
    out.append(("tiny masses", _norm(tiny), _norm(rng.random(V) ** 8)))
    same = _norm(rng.random(V))
    out.append(("p == q", same, same.copy()))
    out.append(("uniform q", _norm(rng.random(V)), _norm(np.ones(V))))
    return out


CASES = _cases()


def _reference_bound(p, q, n, s):
    try:
        r = optimal_acceptance(p, q, n, sampling=s)
    except ValueError as exc:
        return None, str(exc)
    assert r.success, r.message
    return r.value, None


def _reference_verifier(name, p, q, n, seed):
    try:
        return verifier_acceptance(name, p, q, n, rng=np.random.default_rng(seed)).value, None
    except ValueError as exc:
        return None, str(exc)


@pytest.mark.parametrize("label,p,q", CASES, ids=[c[0] for c in CASES])
def test_plan_equals_one_at_a_time_api(label, p, q):
    res = evaluate_position(p, q, NS, schemes=SCHEMES, verifiers=VERIFIERS, seed=5)
    assert set(res.bounds) == {(s, n) for s in SCHEMES for n in NS if s != "hub" or n == 2}
    for (s, n), value in res.bounds.items():
        ref, err = _reference_bound(p, q, n, s)
        if err is not None:
            assert value is None and res.errors[f"bound:{s}@{n}"] == err, (label, s, n)
        else:
            assert abs(value - ref) <= TOL, (label, s, n, value, ref)
    for (name, n), r in res.verifiers.items():
        ref, err = _reference_verifier(name, p, q, n, 5)
        if err is not None:
            assert r is None and res.errors[f"verifier:{name}@{n}"] == err, (label, name, n)
        else:
            assert abs(r.value - ref) <= TOL, (label, name, n, r.value, ref)


def test_plan_at_large_vocabulary():
    """V = 20,000 (the API's binned scans, the plan's bucket sort with real bins), LLM-like pair."""
    rng = np.random.default_rng(7)
    V = 20_000
    z = rng.standard_normal(V) * 2.5 - 1.1 * np.log(np.arange(1, V + 1))
    p = _norm(np.exp(z - z.max()))
    q = _norm(np.exp((z + rng.standard_normal(V)) - (z + 0).max()))
    schemes = ("with_replacement", "without_replacement", "greedy", "hub")
    res = evaluate_position(p, q, (2, 4), schemes=schemes, verifiers=VERIFIERS)
    for (s, n), value in res.bounds.items():
        assert abs(value - optimal_acceptance(p, q, n, sampling=s).value) <= TOL, (s, n)
    for (name, n), r in res.verifiers.items():
        ref = verifier_acceptance(name, p, q, n, rng=np.random.default_rng(0)).value
        assert abs(r.value - ref) <= TOL, (name, n)


def test_row_format_and_monte_carlo_fallback():
    """Study row keys; RSD with n >= 3 beyond enumeration is the API's Monte Carlo, seeded alike."""
    rng = np.random.default_rng(3)
    V = 3000
    p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
    res = evaluate_position(
        p, q, [3], schemes=["with_replacement"], verifiers=["rrs_without_replacement"], seed=9
    )
    row = res.row()
    ref = verifier_acceptance(
        "rrs_without_replacement", p, q, 3, rng=np.random.default_rng(9), samples=20_000
    )
    assert ref.method == "monte_carlo"
    assert row["verifier:rrs_without_replacement@3"] == ref.value
    assert row["verifier:rrs_without_replacement@3:se"] == pytest.approx(ref.stderr, rel=1e-9)
    assert set(row) == {
        "bound:with_replacement@3",
        "verifier:rrs_without_replacement@3",
        "verifier:rrs_without_replacement@3:se",
    }


def test_ratio_order_is_the_sorting_theorem_order():
    """The bucket sort equals a stable sort of ``order_keys`` (q/p descending, p = 0 < q first,
    q = 0 last, ties and infinite runs in index order), including one bucket of every token, ratios
    equal up to their last bits, crowded bins (bucketed again on their own range, by index where
    the ratios are equal) and ratios over hundreds of decades; the ratios along it
    are q/p exactly (inf for p = 0 < q, 0 for q = 0), p and q gathered along it."""
    rng = np.random.default_rng(11)
    for V in (1, 2, 7, 100, 5000):
        for kind in ("random", "ties", "zeros", "equal", "close", "crowded", "wide", "near-constant"):
            p, q = rng.random(V), rng.random(V)
            if kind == "close":  # ratios apart only in their last bits (below the records' truncation)
                q = p * (1.0 + 1e-13 * rng.standard_normal(V))
            elif kind == "near-constant":  # a crowded bin spread by lower bits (bucketed again)
                q = 0.7 * p * (1.0 + 1e-9 * rng.random(V))
                q[: V // 10] = rng.random(V // 10)
            elif kind == "crowded":  # one far ratio: the others crowd a few bins
                q[V // 2] = 1e30
            elif kind == "wide":  # ratios over ~600 decades
                p, q = 10.0 ** rng.uniform(-300, 0, V), 10.0 ** rng.uniform(-300, 0, V)
            elif kind == "ties":
                p, q = rng.integers(1, 4, V).astype(float), rng.integers(1, 4, V).astype(float)
            elif kind == "zeros":
                p[rng.random(V) < 0.3] = 0.0
                q[rng.random(V) < 0.3] = 0.0
            elif kind == "equal":
                q = p.copy()
            expected = np.argsort(_kernels.order_keys(p, q), kind="stable")
            order, rs, ps, qs = kplan.ratio_order(p, q)
            assert np.array_equal(order, expected), (V, kind)
            po, qo = p[order], q[order]
            assert np.array_equal(ps, po) and np.array_equal(qs, qo), (V, kind)
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(qo == 0, 0.0, np.where(po == 0, np.inf, qo / po))
            assert np.array_equal(rs, ratio), (V, kind)


def test_q_summary_and_top_check():
    """The top of q (ties by index) and the mass outside it against ``drafts.top_tokens`` and a
    direct sum; the big token and its complement; a wrong top is caught by ``top_check``."""
    rng = np.random.default_rng(12)
    q = rng.integers(0, 5, 50).astype(float)
    p = _norm(rng.random(50))
    for k in (1, 3, 10):
        total, support, same, big, big_rest, top, tail = kplan.q_summary(p, q, k)
        assert np.array_equal(top, top_tokens(q, k))
        assert tail == pytest.approx(np.delete(q, top).sum(), rel=1e-15)
        assert support == np.count_nonzero(q) and not same and big == -1
        assert total == pytest.approx(q.sum(), rel=1e-15)
        ok, tail2 = kplan.top_check(q, top)
        assert ok and tail2 == pytest.approx(tail, rel=1e-15)
    qn = _norm(q)
    good = kplan.q_summary(p, qn, 4)[5]
    wrong = good.copy()
    wrong[-1] = np.argsort(qn)[0]  # the least likely token instead of the fourth most likely
    assert not kplan.top_check(qn, wrong)[0]
    assert not kplan.top_check(qn, good[::-1].copy())[0]  # not in rank order
    qb = np.full(40, 1e-12 / 39)
    qb[7] = 1.0 - 1e-12
    total, _, _, big, big_rest, top, _ = kplan.q_summary(p[:40], qb, 1)
    assert big == 7 and big_rest == pytest.approx(1e-12, rel=1e-12)


def test_plan_rechecks_pass_without_fallback(monkeypatch):
    """Every re-check of the plan passes on the whole domain of CASES: no value is recomputed by the
    one-at-a-time API (a re-check that failed on valid input would hide a bug behind the fallback)."""
    from mdsd_ot import api

    calls = []
    real_api = api.optimal_acceptance
    monkeypatch.setattr(api, "optimal_acceptance", lambda *a, **k: calls.append(a[2:]) or real_api(*a, **k))
    for label, p, q in CASES:
        evaluate_position(p, q, NS, schemes=SCHEMES, verifiers=[])
        assert not calls, (label, calls)


def test_many_n_and_every_path():
    """n past the naive verifier's polynomial range and the power chain (64), many greedy n (top of
    q grown on demand), against the one-at-a-time API."""
    rng = np.random.default_rng(21)
    ns = (1, 2, 5, 64, 65, 200)
    V = 300
    for label, p, q in [
        ("dirichlet", rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))),
        ("peaked", rng.dirichlet(np.full(V, 0.05)), rng.dirichlet(np.full(V, 0.05))),
        ("one-hot q", _norm(rng.random(V)), _norm(np.r_[1.0, np.full(V - 1, 1e-13)])),
    ]:
        support = np.count_nonzero(q)
        use = [n for n in ns if n <= support]
        res = evaluate_position(
            p, q, use, schemes=("with_replacement", "greedy"), verifiers=("naive", "rrs", "spectr", "greedy")
        )
        for (s, n), value in res.bounds.items():
            assert abs(value - optimal_acceptance(p, q, n, sampling=s).value) <= TOL, (label, s, n)
        for (name, n), r in res.verifiers.items():
            assert abs(r.value - verifier_acceptance(name, p, q, n).value) <= TOL, (label, name, n)


def test_failed_recheck_falls_back_to_the_api(monkeypatch):
    """A scan that returns a wrong value is caught by the independent re-check, and the value is
    recomputed by the one-at-a-time API (so the plan never returns an unchecked bound)."""
    rng = np.random.default_rng(4)
    p, q = rng.dirichlet(np.ones(30)), rng.dirichlet(np.ones(30))
    real = kplan.prefix_scans

    def wrong(*args):
        out = real(*args)
        out[:, 0] += 1e-3
        return out

    monkeypatch.setattr(kplan, "prefix_scans", wrong)
    calls = []
    from mdsd_ot import api

    real_api = api.optimal_acceptance
    monkeypatch.setattr(api, "optimal_acceptance", lambda *a, **k: calls.append(a[2]) or real_api(*a, **k))
    res = evaluate_position(p, q, [2, 3], schemes=["with_replacement"], verifiers=[])
    assert sorted(calls) == [2, 3]
    for n in (2, 3):
        assert abs(res.bounds[("with_replacement", n)] - real_api(p, q, n).value) <= TOL


def test_rrs_chain_many_n_equals_one_at_a_time():
    from mdsd_ot.verifiers.specinfer import rrs_chain, rrs_rejection

    rng = np.random.default_rng(5)
    for _ in range(20):
        p, q = rng.dirichlet(np.full(30, 0.3)), rng.dirichlet(np.full(30, 0.3))
        pos = p > 0
        t = np.where(q[pos] > 0, p[pos] / np.where(q[pos] > 0, q[pos], 1.0), np.inf)
        o = np.argsort(-t, kind="stable")
        P = np.concatenate([[0.0], np.cumsum(p[pos][o])])
        Q = np.concatenate([[0.0], np.cumsum(q[pos][o])])
        ns = [1, 2, 3, 5, 8, 40, 1000]
        assert np.allclose(
            rrs_chain(t[o], P, Q, ns), [rrs_rejection(p, q, n) for n in ns], rtol=0, atol=1e-14
        )


def test_hook_for_plan_verifiers(monkeypatch):
    """A verifier's ``plan`` formula (``Verifier.plan``) is evaluated from the plan's tables."""
    seen = []

    def optimal_from_plan(pl, ns):
        seen.append((pl.sorted[0].size, tuple(ns)))
        return [0.5 for _ in ns]

    monkeypatch.setattr(mdsd_ot.VERIFIERS["optimal"], "plan", PlanVerifier(lambda n: True, optimal_from_plan))
    res = evaluate_position([0.5, 0.3, 0.2], [0.2, 0.3, 0.5], [2], schemes=[], verifiers=["optimal"])
    assert res.verifiers[("optimal", 2)].value == 0.5 and seen == [(3, (2,))]


def test_bad_input_is_rejected():
    with pytest.raises(ValueError):
        evaluate_position([0.5, np.nan], [0.5, 0.5], [2])
    with pytest.raises(TypeError):
        evaluate_position([0.5, 0.5], [0.5, 0.5], [2.5])
    with pytest.raises(ValueError):
        evaluate_position([0.5, 0.5], [0.5, 0.5], [2], schemes=["nope"])
    with pytest.raises(ValueError):
        plan.evaluate_positions(np.ones((2, 3)) / 3, np.ones((3, 3)) / 3, [2])


def test_torch_batch_equals_numpy_plan():
    torch = pytest.importorskip("torch")
    from mdsd_ot.backends.torch import evaluate_batch

    rows = [(p, q) for label, p, q in CASES if p.size == 40]
    P = np.array([p for p, _ in rows])
    Q = np.array([q for _, q in rows])
    schemes = ("with_replacement", "without_replacement", "greedy", "hub")
    out = evaluate_batch(torch.tensor(P), torch.tensor(Q), NS, schemes=schemes)
    assert out, "nothing evaluated"
    for b in range(P.shape[0]):
        ref = evaluate_position(P[b], Q[b], NS, schemes=schemes, verifiers=VERIFIERS).row()
        for key, values in out.items():
            assert ref[key] is not None, key
            assert abs(float(values[b]) - ref[key]) <= TOL, (b, key, float(values[b]), ref[key])
    # an LLM-like batch at V = 2,000, every key present
    rng = np.random.default_rng(8)
    z = rng.standard_normal((3, 2000)) * 2.5
    P = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    zq = z + rng.standard_normal(z.shape)
    Q = np.exp(zq) / np.exp(zq).sum(-1, keepdims=True)
    out = evaluate_batch(torch.tensor(P), torch.tensor(Q), [2, 3])
    for b in range(3):
        ref = evaluate_position(
            P[b], Q[b], [2, 3], schemes=("with_replacement", "greedy"), verifiers=VERIFIERS
        ).row()
        ref.update(evaluate_position(P[b], Q[b], [2], schemes=("without_replacement",), verifiers=()).row())
        for key, values in out.items():
            assert abs(float(values[b]) - ref[key]) <= TOL, (b, key)
    # a subnormal rest mass (1 - q_max ~ 2e-313): RSD's threshold on p/q overflowed to inf on the device
    p, q = _subnormal_tail_pair()
    out = evaluate_batch(torch.tensor(p)[None], torch.tensor(q)[None], [2, 3], schemes=schemes)
    ref = evaluate_position(p, q, [2, 3], schemes=schemes, verifiers=VERIFIERS).row()
    assert "verifier:rrs_without_replacement@2" in out
    for key, values in out.items():
        assert abs(float(values[0]) - ref[key]) <= TOL, (key, float(values[0]), ref[key])


def test_n_beyond_the_support_is_an_error_not_a_crash():
    """Greedy needs n tokens with q > 0: n = 99 on a 43-token pair is reported per key (the plan once
    asked its top-k kernel for more tokens than the vocabulary holds and crashed the process)."""
    rng = np.random.default_rng(5)
    p, q = rng.dirichlet(np.ones(43)), rng.dirichlet(np.ones(43))
    res = evaluate_position(
        p, q, [2, 99], schemes=["with_replacement", "greedy"], verifiers=["greedy", "rrs"]
    )
    assert res.bounds[("greedy", 99)] is None
    assert "needs at least 99 tokens" in res.errors["bound:greedy@99"]
    assert "verifier:greedy@99" in res.errors
    assert res.bounds[("greedy", 2)] == pytest.approx(
        optimal_acceptance(p, q, 2, sampling="greedy").value, abs=1e-12
    )
    assert res.bounds[("with_replacement", 99)] == pytest.approx(
        optimal_acceptance(p, q, 99).value, abs=1e-12
    )


def test_optimal_verifier_in_the_plan(monkeypatch):
    """The full-vocabulary optimal verifier (i.i.d. drafts) through the plan's hook: equal to
    ``verifier_acceptance("optimal")`` to 1e-12 and to the with-replacement bound alpha* (LP-tested
    elsewhere) to 1e-9, across the domain; a disagreement with alpha* is an error, not a value."""
    assert mdsd_ot.VERIFIERS["optimal"].plan is not None and mdsd_ot.VERIFIERS["optimal"].plan.covers(2)
    for label, p, q in CASES:
        if p.size > 60:
            continue
        res = evaluate_position(p, q, NS, schemes=["with_replacement"], verifiers=["optimal"])
        for n in NS:
            got = res.verifiers[("optimal", n)]
            assert got is not None and got.method == "exact", (label, n, res.errors)
            ref = verifier_acceptance("optimal", p, q, n).value
            assert abs(got.value - ref) <= TOL, (label, n, got.value, ref)
            assert abs(got.value - res.bounds[("with_replacement", n)]) <= 1e-9, (label, n)
    rng = np.random.default_rng(31)
    V = 3000
    z = rng.standard_normal(V) * 2.5
    p, q = _norm(np.exp(z)), _norm(np.exp(z + rng.standard_normal(V)))
    res = evaluate_position(p, q, (2, 4), schemes=[], verifiers=["optimal"])
    for n in (2, 4):
        assert abs(res.verifiers[("optimal", n)].value - verifier_acceptance("optimal", p, q, n).value) <= TOL
        assert abs(res.verifiers[("optimal", n)].value - optimal_acceptance(p, q, n).value) <= 1e-9
    # the plan's own cross-check: a construction off alpha* is reported, not stored
    monkeypatch.setattr(optimal_module, "VALUE_TOL", -1.0)
    res = evaluate_position(p, q, [2], schemes=[], verifiers=["optimal"])
    assert res.verifiers[("optimal", 2)] is None
    assert "internal error" in res.errors["verifier:optimal@2"]


def test_nonnegative_compensated_add_matches_neumaier():
    """The tables' compensated step for non-negative terms (max/min in place of the comparison of
    absolute values) gives Neumaier's sum and compensation bit for bit, large and tiny terms mixed."""
    from mdsd_ot._kernels.common import neumaier_add

    rng = np.random.default_rng(13)
    x = rng.random(2000) * 10.0 ** rng.integers(-300, 3, 2000)
    x[::7] = 0.0
    a = (0.0, 0.0)
    b = (0.0, 0.0)
    for v in x:
        a = neumaier_add(a[0], a[1], v)
        b = kplan._add(b[0], b[1], v)
        assert a == b


def _subnormal_tail_pair(V=50, seed=0):
    """A draft at T = 0.05 whose top logit leads the rest by 36: the mass outside its n - 1 most
    likely tokens is subnormal (about 2e-313)."""
    rng = np.random.default_rng(seed)
    z = rng.standard_normal(V)
    z[0] = z[1:].max() + 36.0
    q = np.exp((z - z.max()) / 0.05)
    q /= q.sum()
    p = _norm(rng.random(V) + 0.5)
    return p, q


def test_greedy_and_spechub_with_a_subnormal_rest_mass():
    """The reciprocal of a subnormal rest mass overflowed (q' = q * inf): the plan and the study's
    numpy path reported greedy and SpecHub acceptance 1.0 instead of alpha*_greedy (50 digits; both
    verifiers attain it for their drafts), whether or not the bound was requested."""
    from oracles import mp_greedy

    from mdsd_ot.study import evaluate_rows

    p, q = _subnormal_tail_pair()
    assert 0.0 < q[1:].sum() < 2.2e-308
    expected = {n: float(mp_greedy(p, q, n)) for n in (2, 3)}
    assert expected[2] < 0.9
    for schemes in ((), ("greedy", "hub")):
        r = evaluate_position(p, q, [2, 3], schemes=schemes, verifiers=("greedy", "spechub"))
        assert not r.errors, r.errors
        for (name, n), v in r.verifiers.items():
            assert abs(v.value - expected[n]) <= TOL, (name, n, v.value, expected[n])
        for (s, n), b in r.bounds.items():
            assert abs(b - expected[n]) <= TOL, (s, n, b)
    row = evaluate_rows(p[None], q[None], ns=[2], schemes=[], verifiers=["greedy", "spechub"])[0]
    assert (
        abs(row["verifier:greedy@2"] - expected[2]) <= TOL
        and abs(row["verifier:spechub@2"] - expected[2]) <= TOL
    )


def test_every_plan_verifier_is_checked_against_its_bound(monkeypatch):
    """A plan verifier value above its scheme's alpha* is an internal error in ``errors`` (with a
    fingerprint), never a value, also when that bound was not requested (then it is not reported)."""
    rng = np.random.default_rng(3)
    p, q = rng.dirichlet(np.ones(30)), rng.dirichlet(np.ones(30))
    for name in ("greedy", "rrs", "spectr", "naive"):
        entry = mdsd_ot.VERIFIERS[name].plan
        always_one = entry._replace(evaluate=lambda plan, ns: [1.0 for _ in ns])
        monkeypatch.setattr(mdsd_ot.VERIFIERS[name], "plan", always_one)
        for schemes in ((), plan.DEFAULT_SCHEMES):
            r = evaluate_position(p, q, [2], schemes=schemes, verifiers=(name,))
            assert r.verifiers[(name, 2)] is None
            message = r.errors[f"verifier:{name}@2"]
            assert (
                message.startswith("internal error: acceptance 1 above the bound")
                and "fingerprint" in message
            )
            assert set(r.bounds) == {(s, 2) for s in schemes}
        monkeypatch.setattr(mdsd_ot.VERIFIERS[name], "plan", entry)
        r = evaluate_position(p, q, [2], schemes=(), verifiers=(name,))
        assert not r.errors and r.verifiers[(name, 2)] is not None
