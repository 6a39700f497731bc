"""Torch backend: distributions from logits and the batched sorted-prefix bound, against numpy oracles."""

from __future__ import annotations

import itertools
import subprocess
import sys

import numpy as np
import pytest

from mdsd_ot import SCHEMES, VERIFIERS, optimal_acceptance
from mdsd_ot._config import VALUE_TOL

# ---------------------------------------------------------------- oracles (plain numpy, no sorting)


def _draft_set_mass(q, H, n, sampling):
    """P(all n drafts fall in H), by enumerating ordered draft tuples (independent of MATH 3.2)."""
    V = len(q)
    H = set(H)
    if sampling == "with_replacement":
        return sum(q[i] for i in H) ** n
    total = 0.0
    for tup in itertools.permutations(range(V), n):
        if not all(t in H for t in tup):
            continue
        prob, left = 1.0, list(range(V))
        for t in tup:
            rest = sum(q[j] for j in left)  # mass not yet drawn, as a direct sum
            prob *= q[t] / rest if rest > 0 else 0.0
            left.remove(t)
        total += prob
    return total


def brute_force_bound(p, q, n, sampling):
    """alpha* = 1 - max over all 2^V subsets H of [Q(H) - p(H)]."""
    V = len(p)
    best = 0.0
    for r in range(V + 1):
        for H in itertools.combinations(range(V), r):
            best = max(best, _draft_set_mass(q, H, n, sampling) - sum(p[i] for i in H))
    return 1.0 - best


def _random_pair(rng, V, zeros=True):
    p = rng.dirichlet(np.full(V, 0.7))
    q = rng.dirichlet(np.full(V, 0.7))
    if zeros:
        p[rng.random(V) < 0.25] = 0.0
        q[rng.random(V) < 0.25] = 0.0
        if p.sum() == 0:
            p[0] = 1.0
        if (q > 0).sum() < 2:
            q[:2] += 0.5
        p /= p.sum()
        q /= q.sum()
    return p, q


def np_softmax_filter(z, T, top_k, top_p):
    """Plain numpy re-implementation of temperature -> top-k -> top-p -> renormalise, one row."""
    z = np.asarray(z, dtype=np.float64) / T
    V = len(z)
    keep = np.ones(V, dtype=bool)
    if top_k is not None and top_k < V:
        ranked = sorted(range(V), key=lambda i: (-z[i], i))
        keep[:] = False
        keep[ranked[:top_k]] = True

    def softmax(mask):
        m = np.max(z[mask])
        e = np.where(mask, np.exp(np.where(mask, z - m, 0.0)), 0.0)
        return e / e.sum()

    if top_p is not None and top_p < 1:
        pr = softmax(keep)
        ranked = sorted(range(V), key=lambda i: (-pr[i], i))
        acc = 0.0
        new = np.zeros(V, dtype=bool)
        for i in ranked:
            if acc < top_p:
                new[i] = True
            acc += pr[i]
        keep &= new
    return softmax(keep)


torch = pytest.importorskip("torch")
from mdsd_ot.backends import torch as tb  # noqa: E402

# ------------------------------------------------------------------------------------- bound tests


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_with_replacement_matches_brute_force(n):
    rng = np.random.default_rng(10 + n)
    for _ in range(4):
        V = int(rng.integers(1, 8))
        rows = [_random_pair(rng, V) for _ in range(5)]
        P = np.stack([r[0] for r in rows])
        Q = np.stack([r[1] for r in rows])
        out = tb.sorted_prefix_bound(torch.tensor(P), torch.tensor(Q), n)
        for b in range(len(rows)):
            ref = brute_force_bound(P[b], Q[b], n, "with_replacement")
            assert abs(float(out.value[b]) - ref) < VALUE_TOL
            # the certificate reproduces the value
            H = out.subset(b)
            cert = 1.0 - (Q[b][H].sum() ** n - P[b][H].sum())
            assert abs(cert - ref) < VALUE_TOL


def test_without_replacement_n2_matches_enumeration():
    rng = np.random.default_rng(7)
    for _ in range(12):
        V = int(rng.integers(2, 8))
        P, Q = zip(*[_random_pair(rng, V) for _ in range(4)])
        P, Q = np.stack(P), np.stack(Q)
        out = tb.sorted_prefix_bound(torch.tensor(P), torch.tensor(Q), 2, "without_replacement")
        for b in range(len(P)):
            ref = brute_force_bound(P[b], Q[b], 2, "without_replacement")
            assert abs(float(out.value[b]) - ref) < VALUE_TOL


def test_math_md_test_vectors():
    # docs/math.md#test-vectors, columns alpha*_with and alpha*_without
    cases = [
        ((1 / 3, 1 / 3, 1 / 3), (1 / 3, 1 / 2, 1 / 6), 2, 0.972222, 1.0),
        ((0.5, 0.3, 0.2, 0), (0.1, 0.2, 0.3, 0.4), 2, 0.690000, 0.734524),
        ((0.6, 0.2, 0.1, 0.1), (0.7, 0.2, 0.05, 0.05), 2, 0.990000, 1.0),
    ]
    for p, q, n, w, wo in cases:
        assert abs(float(tb.sorted_prefix_bound(p, q, n).value) - w) < 5e-7
        assert abs(float(tb.sorted_prefix_bound(p, q, n, "without_replacement").value) - wo) < 5e-7
    p, q = (0.5, 0.3, 0.2, 0), (0.1, 0.2, 0.3, 0.4)
    assert abs(float(tb.sorted_prefix_bound(p, q, 3).value) - 0.771) < 5e-7


def test_near_one_hot_draft_no_cancellation():
    # q_max = 1 - 1e-12: 1 - q_i must come from the direct sum of the others (docs/math.md#numerics)
    V = 6
    q = np.array([1.0, 4e-13, 3e-13, 2e-13, 1e-13, 0.0])
    p = np.array([0.5, 0.2, 0.1, 0.1, 0.1, 0.0])
    # exact W_2 of H = {0}: 0; the optimum here must keep alpha* in [0, 1] and match enumeration
    ref = brute_force_bound(p, q, 2, "without_replacement")
    got = float(tb.sorted_prefix_bound(p, q, 2, "without_replacement", normalize=True).value)
    assert abs(got - ref) < VALUE_TOL
    # against a draft with a truly tiny rest, the second draw is nearly uniform over the rest
    q2 = np.array([1.0 - 1e-12, 4e-13, 3e-13, 2e-13, 1e-13, 0.0])
    q2[0] = 1.0 - q2[1:].sum()
    ref2 = brute_force_bound(p, q2, 2, "without_replacement")
    got2 = float(tb.sorted_prefix_bound(p, q2, 2, "without_replacement").value)
    assert abs(got2 - ref2) < VALUE_TOL
    assert V == len(p)


def test_batch_agrees_with_rows_and_numpy_reimplementation_large_v():
    rng = np.random.default_rng(3)
    B, V = 6, 3000
    P = rng.dirichlet(np.full(V, 0.05), size=B)
    Q = rng.dirichlet(np.full(V, 0.05), size=B)
    P[:, :100] = 0.0
    Q[:, 50:150] = 0.0
    P /= P.sum(1, keepdims=True)
    Q /= Q.sum(1, keepdims=True)
    out = tb.sorted_prefix_bound(torch.tensor(P), torch.tensor(Q), 3)
    for b in range(B):
        one = tb.sorted_prefix_bound(torch.tensor(P[b]), torch.tensor(Q[b]), 3)
        assert float(one.value) == float(out.value[b])
        # numpy re-implementation with lexsort (q=0 last, p=0<q first, ratio descending, index ties)
        p, q = P[b], Q[b]
        with np.errstate(divide="ignore", invalid="ignore"):
            key = np.where(q == 0, -np.inf, np.where(p == 0, np.inf, q / np.where(p > 0, p, 1)))
        order = np.lexsort((np.arange(V), -key))
        Qk = np.concatenate([[0], np.cumsum(q[order])])
        Pk = np.concatenate([[0], np.cumsum(p[order])])
        assert abs(float(out.value[b]) - (1 - np.max(Qk**3 - Pk))) < VALUE_TOL


def test_with_numpy_core_when_available():
    mdsd = pytest.importorskip("mdsd_ot")
    if not hasattr(mdsd, "optimal_acceptance"):
        pytest.skip("mdsd_ot.optimal_acceptance not available yet")
    rng = np.random.default_rng(11)
    for _ in range(10):
        V = int(rng.integers(2, 40))
        p, q = _random_pair(rng, V)
        for n in (1, 2, 3):
            ref = mdsd.optimal_acceptance(p, q, n, sampling="with_replacement").value
            assert abs(float(tb.sorted_prefix_bound(p, q, n).value) - ref) < VALUE_TOL
        ref = mdsd.optimal_acceptance(p, q, 2, sampling="without_replacement").value
        got = float(tb.sorted_prefix_bound(p, q, 2, "without_replacement").value)
        assert abs(got - ref) < VALUE_TOL


def test_bfloat16_and_float32_inputs_promote():
    p = torch.tensor([0.5, 0.25, 0.25], dtype=torch.bfloat16)
    q = torch.tensor([0.25, 0.25, 0.5], dtype=torch.float32)
    out = tb.sorted_prefix_bound(p, q, 1)
    assert out.value.dtype == torch.float64
    assert abs(float(out.value) - 0.75) < 1e-12


def test_bound_input_errors():
    with pytest.raises(ValueError, match="same shape"):
        tb.sorted_prefix_bound([0.5, 0.5], [1.0], 2)
    with pytest.raises(ValueError, match="normalize=True"):
        tb.sorted_prefix_bound([0.5, 0.6], [0.5, 0.5], 2)
    with pytest.raises(ValueError, match="n <= 2"):
        tb.sorted_prefix_bound([0.5, 0.5], [0.5, 0.5], 3, "without_replacement")
    with pytest.raises(ValueError, match="one-hot"):
        tb.sorted_prefix_bound([0.5, 0.5], [1.0, 0.0], 2, "without_replacement")
    with pytest.raises(ValueError, match="unknown sampling"):
        tb.sorted_prefix_bound([0.5, 0.5], [0.5, 0.5], 2, "greedy")
    with pytest.raises(TypeError):
        tb.sorted_prefix_bound(torch.tensor([1, 0]), torch.tensor([1, 0]), 2)
    with pytest.raises(ValueError, match="negative"):
        tb.sorted_prefix_bound([1.5, -0.5], [0.5, 0.5], 2)


# ------------------------------------------------------------------------------ distribution tests


@pytest.mark.parametrize(
    "T,top_k,top_p",
    [
        (1.0, None, None),
        (0.3, None, None),
        (0.7, 3, None),
        (1.3, None, 0.8),
        (0.5, 4, 0.9),
        (1.0, 1, None),
        (2.0, 100, 0.5),
        (1.0, None, 1.0),
    ],
)
def test_to_distribution_matches_numpy(T, top_k, top_p):
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(4, 9)) * 3
    Z[1, 2] = Z[1, 5] = Z[1].max() + 1  # ties at the top
    Z[2, :3] = 0.25  # ties in the middle
    Z[3, 4] = -np.inf  # a masked token
    got = tb.to_distribution(torch.tensor(Z, dtype=torch.float64), temperature=T, top_k=top_k, top_p=top_p)
    assert got.dtype == torch.float64 and got.shape == (4, 9)
    for b in range(4):
        ref = np_softmax_filter(Z[b], T, top_k, top_p)
        assert np.max(np.abs(got[b].numpy() - ref)) < 1e-12
        assert abs(got[b].sum().item() - 1) < 1e-12


def test_to_distribution_tie_conventions():
    z = torch.tensor([1.0, 2.0, 2.0, 2.0, 0.0])
    got = tb.to_distribution(z, top_k=2)
    assert (got > 0).tolist() == [False, True, True, False, False]  # ties: lower index first
    probs = torch.tensor([0.25, 0.25, 0.25, 0.25], dtype=torch.float64)
    got = tb.to_distribution(probs, kind="probs", top_p=0.5)  # mass exactly 0.5 after 2 tokens
    assert got.tolist() == [0.5, 0.5, 0.0, 0.0]
    got = tb.to_distribution(probs, kind="probs", top_p=0.500001)
    assert got.tolist() == pytest.approx([1 / 3, 1 / 3, 1 / 3, 0.0], abs=1e-15)


def _dyadic_law(rng, V):
    """Probabilities that are multiples of 2^-20 (cumulative sums exact in float64), in random order."""
    w = rng.integers(1, 2**12, V).astype(float)
    x = np.floor(w / w.sum() * 2**20) / 2**20
    x[rng.integers(V)] += 1.0 - x.sum()  # exact: every term is a multiple of 2^-20
    return x


def test_top_p_boundary_is_one_rule_in_numpy_and_torch():
    """top_p equal to a cumulative mass keeps exactly that prefix (numpy and torch, probabilities and
    their logits); a mass within TOP_P_TIE below top_p counts as reaching it, 2e-12 below does not.
    The sorted order ties by lower index. Masses are exact binary fractions."""
    from mdsd_ot._config import TOP_P_TIE
    from mdsd_ot.logits import to_distribution as np_to_distribution

    rng = np.random.default_rng(34)
    for _ in range(15):
        V = int(rng.integers(2, 10))
        x = _dyadic_law(rng, V)
        order = np.argsort(-x, kind="stable")
        mass = np.cumsum(x[order])  # exact
        for r in range(V - 1):
            for top_p, kept in ((mass[r], r + 1), (mass[r] + TOP_P_TIE / 2, r + 1), (mass[r] + 2e-12, r + 2)):
                want = np.zeros(V, dtype=bool)
                want[order[:kept]] = True
                for kind, arr in (("probs", x), ("logits", np.log(x))):
                    a = np_to_distribution(arr, kind=kind, top_p=float(top_p)) > 0
                    b = tb.to_distribution(torch.tensor(arr), kind=kind, top_p=float(top_p)).numpy() > 0
                    assert a.tolist() == want.tolist() == b.tolist(), (x, top_p, kind)
    # ties: equal masses keep the lower index first
    assert (np_to_distribution([0.25, 0.25, 0.25, 0.25], kind="probs", top_p=0.5) > 0).tolist() == [
        1,
        1,
        0,
        0,
    ]


def test_top_p_numpy_and_torch_agree_on_every_boundary():
    """Differential sweep: random logits (V up to 2,000, temperatures, with and without top-k), top_p at
    every kind of place (numpy's cumulative masses themselves, just above them, random): the same
    kept tokens and the same values to 1e-12."""
    from mdsd_ot.logits import to_distribution as np_to_distribution

    rng = np.random.default_rng(35)
    cases = 0
    for _ in range(16):
        V = int(rng.choice([3, 17, 200, 2000]))
        z = rng.standard_normal((2, V)) * rng.uniform(0.5, 4.0)
        z[:, rng.integers(V)] = z[:, rng.integers(V)]  # some equal logits
        T = float(rng.choice([0.3, 1.0, 1.7]))
        top_k = None if rng.random() < 0.5 else int(rng.integers(1, V + 1))
        base = np_to_distribution(z, temperature=T, top_k=top_k)
        for row in range(2):
            order = np.argsort(-np.where(base[row] > 0, z[row], -np.inf), kind="stable")
            mass = np.cumsum(base[row][order])
            for r in rng.choice(V, min(V, 5), replace=False):
                for top_p in (float(mass[r]), float(mass[r]) + 1e-15, float(rng.uniform(0.01, 1.0))):
                    if not 0.0 < top_p <= 1.0:
                        continue
                    a = np_to_distribution(z[row], temperature=T, top_k=top_k, top_p=top_p)
                    b = tb.to_distribution(
                        torch.tensor(z[row]), temperature=T, top_k=top_k, top_p=top_p
                    ).numpy()
                    assert ((a > 0) == (b > 0)).all(), (V, T, top_k, top_p)
                    assert np.abs(a - b).max() <= 1e-12
                    cases += 1
    assert cases > 150


def test_to_distribution_low_precision_and_probs():
    z = torch.randn(3, 50, generator=torch.Generator().manual_seed(1))
    for dt in (torch.bfloat16, torch.float16, torch.float32):
        got = tb.to_distribution(z.to(dt), temperature=0.5)
        ref = np.stack([np_softmax_filter(r, 0.5, None, None) for r in z.to(dt).double().numpy()])
        assert got.dtype == torch.float64
        assert np.max(np.abs(got.numpy() - ref)) < 1e-12
    # probabilities with temperature: p ** (1/T) renormalised, zeros stay zero
    p = torch.tensor([0.5, 0.3, 0.2, 0.0], dtype=torch.float64)
    got = tb.to_distribution(p, kind="probs", temperature=0.5)
    ref = np.array([0.25, 0.09, 0.04, 0.0]) / 0.38
    assert np.max(np.abs(got.numpy() - ref)) < 1e-15


def test_to_distribution_errors():
    with pytest.raises(ValueError, match="temperature"):
        tb.to_distribution(torch.zeros(3), temperature=0.0)
    with pytest.raises(ValueError, match="top_p"):
        tb.to_distribution(torch.zeros(3), top_p=0.0)
    with pytest.raises(ValueError, match="top_k"):
        tb.to_distribution(torch.zeros(3), top_k=0)
    with pytest.raises(ValueError, match="NaN"):
        tb.to_distribution(torch.tensor([0.0, float("nan")]))
    with pytest.raises(ValueError, match="entirely -inf"):
        tb.to_distribution(torch.full((2,), -float("inf")))
    with pytest.raises(ValueError, match="normalize=True"):
        tb.to_distribution(torch.tensor([0.5, 0.6]), kind="probs")
    with pytest.raises(TypeError, match="dtype"):
        tb.to_distribution(torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="shape"):
        tb.to_distribution(torch.zeros(2, 2, 2))


# ----------------------------------------------------------------------------- optional dependency


def test_import_mdsd_ot_does_not_import_torch():
    code = (
        "import sys, mdsd_ot, mdsd_ot.backends, mdsd_ot.backends.torch, mdsd_ot.sample, "
        "mdsd_ot.cli; mdsd_ot.cli.build_parser(); "
        "print('torch' in sys.modules, 'transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_missing_torch_gives_actionable_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    with pytest.raises(ImportError, match=r'pip install -e "\.\[torch\]"'):
        tb.to_distribution([0.0, 1.0])
    with pytest.raises(ImportError, match=r"from your clone of the repository"):
        tb.sorted_prefix_bound([0.5, 0.5], [0.5, 0.5], 2)


def test_multi_n_shares_sort_and_matches_single():
    rng = np.random.default_rng(5)
    P, Q = zip(*[_random_pair(rng, 30) for _ in range(5)])
    P, Q = torch.tensor(np.stack(P)), torch.tensor(np.stack(Q))
    multi = tb.sorted_prefix_bounds(P, Q, [1, 2, 3, 4])
    for n in (1, 2, 3, 4):
        assert torch.equal(multi[n], tb.sorted_prefix_bound(P, Q, n).value)
    prev = None
    for n in (1, 2, 3, 4):  # alpha* is non-decreasing in n (docs/math.md#test-facts)
        if prev is not None:
            assert bool((multi[n] >= prev - 1e-12).all())
        prev = multi[n]
    wo = tb.sorted_prefix_bounds(P, Q, [1, 2], "without_replacement")
    assert torch.equal(wo[1], multi[1])
    assert bool((wo[2] >= multi[2] - 1e-12).all())  # without >= with (observed, docs/math.md#test-facts)


def test_greedy_bounds_match_numpy_formula_and_enumeration():
    rng = np.random.default_rng(9)
    for _ in range(10):
        V = int(rng.integers(4, 9))
        p, q = _random_pair(rng, V)
        if (q > 0).sum() < 4:
            continue
        got = tb.greedy_bounds(p, q, [1, 2, 3, 4])
        for n in (1, 2, 3, 4):
            top = sorted(range(V), key=lambda i: (-q[i], i))[: n - 1]
            rest = [i for i in range(V) if i not in top]
            rmass = sum(q[i] for i in rest)
            # oracle: brute force over subsets with the greedy set law Q(H) = 1[Top in H] q'(H)
            best = 0.0
            for r in range(V + 1):
                for H in itertools.combinations(range(V), r):
                    QH = (sum(q[i] for i in H if i in rest) / rmass) if set(top) <= set(H) else 0.0
                    best = max(best, QH - sum(p[i] for i in H))
            assert abs(float(got[n]) - (1 - best)) < VALUE_TOL
    with pytest.raises(ValueError, match="tokens with q > 0"):
        tb.greedy_bounds([0.5, 0.5, 0.0], [0.5, 0.5, 0.0], [3])


# ------------------------------------------------------------------ extreme numerics (regressions)


@pytest.mark.parametrize("n", [2, 3, 8])
def test_identical_pair_gives_exactly_one(n):
    # a rounded prefix sum of 1 + 2e-16 must not push Q^n above Q (cap min(Q^n, Q))
    rng = np.random.default_rng(n)
    for x in [np.array([0.7, 0.2, 0.1])] + [rng.dirichlet(np.ones(50)) for _ in range(20)]:
        t = torch.tensor(x)
        assert float(tb.sorted_prefix_bound(t, t.clone(), n).value) == 1.0
        assert float(tb.greedy_bounds(t, t.clone(), [1])[1]) == 1.0
    x = torch.tensor([1.0, 1.0, 4.0], dtype=torch.float64) / 6
    assert float(tb.greedy_bounds(x, x, [1])[1]) == 1.0


@pytest.mark.parametrize("tiny", [1e-310, 5e-324])
def test_denormal_complement_without_replacement(tiny):
    # q has two tokens and both are always drafted (n = 2): alpha* = p(0) + p(1) = 0.6, although
    # q_0 / (1 - q_0) overflows float64
    p = torch.tensor([0.3, 0.3, 0.4], dtype=torch.float64)
    q = torch.tensor([1.0, tiny, 0.0], dtype=torch.float64)
    v = float(tb.sorted_prefix_bound(p, q, 2, "without_replacement").value)
    assert abs(v - 0.6) < 1e-15


def test_big_token_split_matches_enumeration_near_one_hot():
    rng = np.random.default_rng(21)
    for _ in range(10):
        V = int(rng.integers(3, 7))
        q = rng.dirichlet(np.ones(V)) * 1e-9
        big = int(rng.integers(V))
        q[big] = 0.0
        q[big] = 1.0 - q.sum()
        p = rng.dirichlet(np.ones(V))
        ref = brute_force_bound(p, q, 2, "without_replacement")
        assert abs(float(tb.sorted_prefix_bound(p, q, 2, "without_replacement").value) - ref) < VALUE_TOL


def test_overflowing_inputs_are_handled():
    with pytest.raises(ValueError, match="overflows"):
        tb.sorted_prefix_bound(
            torch.tensor([1.7e308, 1.7e308], dtype=torch.float64),
            torch.tensor([0.5, 0.5], dtype=torch.float64),
            2,
            normalize=True,
        )
    for logits, T, expect in (
        ([1.0, 0.0], 1e-310, [1.0, 0.0]),
        ([1e308, -1e308], 1e-10, [1.0, 0.0]),
        ([5.0, 5.0, -1e308], 1e-300, [0.5, 0.5, 0.0]),
    ):
        out = tb.to_distribution(torch.tensor(logits, dtype=torch.float64), temperature=T)
        assert out.tolist() == expect


@pytest.mark.slow
@pytest.mark.parametrize("sampling", ["with_replacement", "without_replacement"])
def test_prefix_sums_do_not_drift_on_an_adversarial_vocabulary(sampling):
    """One token of mass 1/2, then 2^20 tokens of 0.75 ulp(1/2) each: a plain cumsum rounds every
    step up and drifted 2.9e-11; the compensated prefix sums keep torch == numpy to 1e-12."""
    V = 2**20
    x = np.full(V + 1, 0.75 * np.spacing(0.5))
    x[0] = 0.5
    q = x / x.sum()
    p = np.random.default_rng(0).dirichlet(np.ones(V + 1))
    ref = optimal_acceptance(p, q, 2, sampling=sampling).value
    got = float(tb.sorted_prefix_bound(torch.tensor(p), torch.tensor(q), 2, sampling).value)
    assert abs(got - ref) <= 1e-12


@pytest.mark.parametrize("sampling", ["with_replacement", "without_replacement"])
def test_torch_rows_are_rechecked(sampling):
    """Each row's torch bound is re-evaluated at its prefix by masked sums; a wrong value raises."""
    rng = np.random.default_rng(1)
    P = torch.tensor(rng.dirichlet(np.ones(30), size=3))
    Q = torch.tensor(rng.dirichlet(np.ones(30), size=3))
    order = tb.sorted_prefix_order(P, Q)
    value, k = tb._scan(P, Q, order, [2], sampling)[2]
    ps, qs = torch.gather(P, -1, order), torch.gather(Q, -1, order)
    tb._recheck(ps, qs, k, 2, sampling, value)  # the right values pass
    with pytest.raises(RuntimeError, match="internal error: the torch bound of row 1"):
        tb._recheck(ps, qs, k, 2, sampling, value + torch.tensor([0.0, 1e-9, 0.0], dtype=torch.float64))


# ------------------------------------------------------------- registries (schemes and verifiers)
@pytest.mark.parametrize("sampling", [name for name, s in SCHEMES.items() if s.torch_prefix is not None])
def test_torch_twins_equal_enumeration(sampling):
    """Each scheme's torch twin (``DraftScheme.torch_prefix``): ``mass`` along an order and ``check`` at a
    prefix equal Q(H) by enumeration of draft tuples, for every prefix and every n the twin covers
    (near one-hot rows too); beyond ``max_n`` the backend refuses."""
    scheme = SCHEMES[sampling]
    rng = np.random.default_rng(11)
    rows = [rng.dirichlet(np.full(6, 0.6)) for _ in range(3)]
    rows.append(np.array([1 - 3e-12, 1e-12, 1e-12, 1e-12, 0.0, 0.0]))
    Q = torch.tensor(np.array(rows))
    P = torch.tensor(rng.dirichlet(np.ones(6), size=len(rows)))
    order = tb.sorted_prefix_order(P, Q)
    sr = tb._SortedRows.of(P, Q, order)
    twin = scheme.torch_prefix
    for n in (1, 2, 3, 4):
        if not scheme.torch_covers(n):
            assert twin.max_n < n
            with pytest.raises(ValueError, match=f"n <= {twin.max_n} only"):
                tb.sorted_prefix_bounds(P, Q, [n], sampling)
            continue
        mass = twin.mass(sr, n)
        for b, q in enumerate(rows):
            for k in range(7):
                H = order[b, :k].tolist()
                ref = _draft_set_mass(q, H, n, sampling if n > 1 else "with_replacement")
                assert abs(float(mass[b, k]) - ref) <= 1e-13, (n, b, k)
                inside = torch.zeros_like(sr.ps, dtype=torch.bool)
                inside[:, :k] = True
                zero = torch.zeros_like(sr.ps)
                q_h = torch.where(inside, sr.qs, zero).sum(-1)
                out_h = torch.where(inside, zero, sr.qs).sum(-1)
                got = twin.check(sr.ps, sr.qs, inside, q_h, out_h, n)
                assert abs(float(got[b]) - ref) <= 1e-13, (n, b, k)


def test_samplings_and_batch_verifiers_come_from_the_registries():
    """``SAMPLINGS`` lists the schemes with a torch twin, ``BATCH_VERIFIERS`` the verifiers with one; the
    deprecated ``TORCH_VERIFIERS`` still reads them, with a warning."""
    assert tb.SAMPLINGS == tuple(s for s, sc in SCHEMES.items() if sc.torch_prefix is not None)
    assert set(tb.SAMPLINGS) == {"with_replacement", "without_replacement"}
    assert tb.BATCH_VERIFIERS == tuple(n for n, v in VERIFIERS.items() if v.batch is not None)
    expected = {"naive", "rrs", "spectr", "greedy", "spechub", "rrs_without_replacement"}
    assert set(tb.BATCH_VERIFIERS) == expected
    with pytest.warns(DeprecationWarning, match="Verifier.batch"):
        assert tuple(tb.TORCH_VERIFIERS) == tb.BATCH_VERIFIERS
    from mdsd_ot import plan

    with pytest.warns(DeprecationWarning, match="Verifier.plan"):
        assert set(plan.PLAN_VERIFIERS) == {n for n, v in VERIFIERS.items() if v.plan is not None}


def test_a_batch_verifier_is_a_registry_entry(monkeypatch):
    """A verifier with a torch formula (``Verifier.batch``) is evaluated by ``evaluate_batch`` with no other
    edit, for the n it covers; names outside the registries are skipped, unknown names rejected."""
    rng = np.random.default_rng(2)
    P = torch.tensor(rng.dirichlet(np.ones(9), size=2))
    Q = torch.tensor(rng.dirichlet(np.ones(9), size=2))
    entry = tb.BatchVerifier(lambda n: n == 3, lambda b, ns: {n: b.pt[:, 0] * 0 + n / 100 for n in ns})
    monkeypatch.setattr(VERIFIERS["spectr"], "batch", entry)
    out = tb.evaluate_batch(
        P, Q, [2, 3], schemes=["conditional_poisson", "top_n"], verifiers=["spectr", "optimal"]
    )
    assert set(out) == {"verifier:spectr@3"}
    assert out["verifier:spectr@3"].tolist() == [0.03, 0.03]
    # a value above the optimal acceptance of its scheme (here not requested) is an internal error
    entry = tb.BatchVerifier(lambda n: n == 3, lambda b, ns: {n: b.pt[:, 0] * 0 + 1.0 for n in ns})
    monkeypatch.setattr(VERIFIERS["spectr"], "batch", entry)
    with pytest.raises(RuntimeError, match="above the optimal acceptance"):
        tb.evaluate_batch(P, Q, [3], schemes=[], verifiers=["spectr"])
    with pytest.raises(ValueError, match="unknown"):
        tb.evaluate_batch(P, Q, [2], schemes=["nope"], verifiers=())
