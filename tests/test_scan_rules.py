"""The binned scan's two ways of not looking into a run of tokens (docs/math.md#pruning), each against
exact references:

* along a run of tokens with equal q/p the excess ``Q(H) - p(H)`` is largest at one of the run's ends;
* adding q mass x raises ``q(H)^n`` by at most ``n x`` and ``W_2(H)`` by at most
  ``x (1 + sum_i q_i / (1 - q_i))``, so a run too light to raise the excess by ``GAIN_FLOOR`` is
  skipped with a loss below it.

First the two statements in rationals (the proofs' claims, independent of the code), then the kernel
on the input classes the rules exist for, against prefix scans at high precision (``_dps``).
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest

from mdsd_ot import _kernels as K
from mdsd_ot import optimal_acceptance
from mdsd_ot._config import GAIN_FLOOR
from mdsd_ot.drafts import complement_parts
from mdsd_ot.dual import sorted_order


def _with(q, H, n):
    return sum(q[i] for i in H) ** n


def _pair(q, H):
    """W_2(H) in rationals: sum over ordered pairs i != j in H of q_i q_j / (1 - q_i) (q sums to 1)."""
    return sum(q[i] * q[j] / (1 - q[i]) for i in H for j in H if i != j)


def _rational_instance(rng, V):
    q = [Fraction(int(rng.integers(1, 40))) for _ in range(V)]
    total = sum(q)
    q = [x / total for x in q]
    if rng.random() < 0.3:  # a token above half the mass
        big = int(rng.integers(V))
        q = [x / 8 for x in q]
        q[big] += 1 - sum(q)
    tokens = list(rng.permutation(V))
    k0, m = int(rng.integers(0, V - 2)), int(rng.integers(2, V - 1))
    m = min(m, V - k0)
    H0, run = tokens[:k0], tokens[k0 : k0 + m]
    r = Fraction(int(rng.integers(1, 30)), int(rng.integers(1, 30)))
    p = [Fraction(int(rng.integers(0, 40)), 40) for _ in range(V)]
    for i in run:
        p[i] = q[i] / r  # equal ratios q/p = r along the run
    return p, q, H0, run


@pytest.mark.parametrize("mass", ["with_1", "with_2", "with_5", "pair"])
def test_excess_along_a_run_of_equal_ratios_peaks_at_an_end(mass, rng):
    for _ in range(150):
        V = int(rng.integers(4, 9))
        p, q, H0, run = _rational_instance(rng, V)
        if mass == "pair":
            Q = _pair
        else:
            n = int(mass.split("_")[1])

            def Q(q, H, n=n):
                return _with(q, H, n)

        excess = [Q(q, H0 + run[:k]) - sum(p[i] for i in H0 + run[:k]) for k in range(len(run) + 1)]
        assert max(excess[1:-1]) <= max(excess[0], excess[-1]), (q, p, H0, run, excess)


@pytest.mark.parametrize("mass", ["with_1", "with_3", "with_8", "pair"])
def test_a_run_raises_the_mass_by_at_most_the_gain_cap(mass, rng):
    for _ in range(150):
        V = int(rng.integers(4, 9))
        _, q, H0, run = _rational_instance(rng, V)
        x = sum(q[i] for i in run)
        if mass == "pair":
            cap = x * (1 + sum(qi / (1 - qi) for qi in q if qi < 1))
            gains = [_pair(q, H0 + run[:k]) - _pair(q, H0) for k in range(1, len(run) + 1)]
        else:
            n = int(mass.split("_")[1])
            cap = n * x
            gains = [_with(q, H0 + run[:k], n) - _with(q, H0, n) for k in range(1, len(run) + 1)]
        assert max(gains) <= cap, (q, H0, run)


# -- the kernel on the classes the rules serve, against high-precision prefix scans


def _classes(rng, V, n=2, code=0):
    a = rng.integers(1, 4, V).astype(float)  # exact ratio clusters: 9 distinct values of q/p
    b = rng.integers(1, 4, V).astype(float)
    yield "clusters", a / a.sum(), b / b.sum()
    p = rng.dirichlet(np.full(V, 0.3))
    yield "p = q", p, p.copy()
    top = np.zeros(V)
    top[rng.choice(V, 10, replace=False)] = rng.random(10)
    yield "top-10 target", top / top.sum(), p
    for ordinary in (40, 1):  # subnormal tails; with one ordinary token, q is one-hot in effect
        s = np.exp(rng.uniform(-745.0, -700.0, (2, V)))
        s[:, rng.integers(0, V, ordinary)] = rng.random((2, ordinary))
        yield f"subnormal tail, {ordinary} ordinary", s[0] / s[0].sum(), s[1] / s[1].sum()
    # a light run where the optimum lies: 60 tokens of total q mass 1e-7 whose q/p straddle, within
    # 2%, the ratio above which a token raises the excess (1 / (n q(H)^(n-1)) for i.i.d. drafts,
    # 1 / (q(H) + sum_H q_i / (1 - q_i)) sequential n = 2); H = 400 tokens of q/p = 100 holding 0.6
    # of q, the others (0.4 of q) at q/p = 0.01
    qa, qb = 0.6 * rng.dirichlet(np.ones(400)), 0.4 * rng.dirichlet(np.ones(V - 460))
    ql = 1e-7 * rng.dirichlet(np.ones(60))
    pa, pb = qa / 100, qb / 0.01
    z = pa.sum() + pb.sum()  # p's normalisation multiplies every q/p by z
    r = 1 / (n * 0.6 ** (n - 1)) if code == 0 else 1 / (0.6 + np.sum(qa / (1 - qa)))
    pl = ql / (r * rng.uniform(0.98, 1.02, 60))  # (in normalised units already)
    p, q = np.concatenate([pa / z, pb / z, pl]), np.concatenate([qa, qb, ql])
    yield "light run at the threshold", p / p.sum(), q / q.sum()
    # a draft one-hot to 1e-25: after the big token the second sequential draft falls among the
    # light tokens, so 1e-25 of q mass decides W_2: token j adds q_j / 1e-25 to W_2 and costs p_j,
    # and p_j / (q_j / 1e-25) straddles 1 within 10%
    q = np.concatenate([[1.0], rng.dirichlet(np.ones(V - 1)) * 1e-25])
    p = np.concatenate([[1e-3], q[1:] / 1e-25 * rng.uniform(0.9, 1.1, V - 1)])
    yield "one-hot draft, 1e-25 of rest", p / p.sum(), q
    mixed = np.exp(rng.uniform(-745.0, 0.0, (2, V)))  # every magnitude, clusters of equal ratio
    mixed[1, : V // 3] = mixed[0, : V // 3] * 0.5
    yield "mixed magnitudes", mixed[0] / mixed[0].sum(), mixed[1] / mixed[1].sum()


#: Digits of the references beyond those that 1 - q_i cancels for the largest q_i (see _dps).
DPS = 40


def _dps(q) -> int:
    """``DPS`` plus the digits lost in ``1 - q_i`` for the largest ``q_i``: a token holding all but
    1e-320 of the mass needs 320 more, every other class none. Every other difference in the
    references (``1 - q(H)``, the excess ``Q(H) - p(H)``) is needed only to an absolute 1e-15, or is
    multiplied by at most ``1 / (1 - max q)``."""
    q = np.asarray(q, dtype=np.float64)
    big = int(np.argmax(q))
    rest = float(np.delete(q, big).sum()) / float(q.sum())  # sums of positive terms: no cancellation
    return DPS + (math.ceil(-math.log10(rest)) if 0.0 < rest < 1.0 else 0)


_NORMALISED: dict = {}


def _mp_normalised(x):
    """x / sum(x) at the current precision, remembered for the last few vectors (the value reference
    and the mask check convert the same p and q)."""
    key = (np.asarray(x, dtype=np.float64).tobytes(), mpmath.mp.prec)
    if key not in _NORMALISED:
        if len(_NORMALISED) >= 4:
            _NORMALISED.pop(next(iter(_NORMALISED)))
        v = [mpmath.mpf(float(t)) for t in x]
        total = mpmath.fsum(v)
        _NORMALISED[key] = tuple(t / total for t in v)
    return _NORMALISED[key]


def _mp_mass(Q, inside, n, code):
    qH = mpmath.fsum(Q[i] for i in inside)
    if code == 0:
        return min(qH**n, qH)
    R = 1 - qH
    return qH - R * mpmath.fsum(Q[i] / (1 - Q[i]) for i in inside)


def _mp_alpha(p, q, n, code):
    """alpha* at ``_dps(q)`` digits: the excess at every prefix of the q/p order (the sorting theorem),
    p and q renormalised (a float vector sums to one only to ~sqrt(V) ulps)."""
    with mpmath.workdps(_dps(q)):
        P, Q = _mp_normalised(p), _mp_normalised(q)
        key = [mpmath.inf if P[i] == 0 < Q[i] else (Q[i] / P[i] if P[i] > 0 else -1) for i in range(len(P))]
        order = sorted(range(len(P)), key=lambda i: -key[i])
        best = pH = qH = S = mpmath.mpf(0)
        for i in order:
            pH += P[i]
            qH += Q[i]
            S += Q[i] / (1 - Q[i])
            mass = min(qH**n, qH) if code == 0 else qH - (1 - qH) * S
            best = max(best, mass - pH)
        return float(1 - best)


def _mp_excess_of_mask(p, q, mask, n, code):
    with mpmath.workdps(_dps(q)):
        P, Q = _mp_normalised(p), _mp_normalised(q)
        inside = [i for i in range(len(P)) if mask[i]]
        return float(_mp_mass(Q, inside, n, code) - mpmath.fsum(P[i] for i in inside))


@pytest.mark.parametrize("code, n", [(0, 1), (0, 2), (0, 8), (1, 2)])
def test_binned_scan_on_flat_and_tied_classes(code, n, rng):
    """Against the sorted path, which evaluates every prefix token by token (``solve_sorted``, the
    same float inputs: rounding alone, amplified n-fold by ``q(H)^n``), and against the prefix scan
    at ``_dps(q)`` digits, which renormalises p and q (they sum to one only to ~sqrt(V) ulps, which
    ``q(H)^n`` also amplifies n-fold); the mask attains the value."""
    for label, p, q in _classes(rng, 1_200, n, code):
        parts = complement_parts(q) if code == 1 else (0.0, -1, 1.0)
        D, mask = K.bucketed_scan(p, q, n, code, *parts)
        order = sorted_order(p, q)
        D_sorted = K.solve_sorted(p[order], q[order], n, code)[0]
        assert abs(D - D_sorted) <= GAIN_FLOOR + 2e-15 + n * 2e-16, (label, D, D_sorted)
        alpha = _mp_alpha(p, q, n, code)
        assert abs((1.0 - D) - alpha) <= GAIN_FLOOR + 1e-15 + n * 3e-15, (label, D, alpha)
        assert abs(_mp_excess_of_mask(p, q, mask, n, code) - D) <= GAIN_FLOOR + 1e-15 + n * 3e-15, label


@pytest.mark.slow
def test_optimal_acceptance_on_flat_and_tied_classes_at_full_size(rng):
    """The same classes at V = 20,000 (the binned scan's own regime, BINNED_MIN_V = 16,384) through the
    API: the value is the high-precision prefix scan's (``_dps``)."""
    for label, p, q in _classes(rng, 20_000):
        for code, sampling in enumerate(("with_replacement", "without_replacement")):
            got = optimal_acceptance(p, q, 2, sampling=sampling)
            assert got.success, (label, sampling)
            assert abs(got.value - _mp_alpha(p, q, 2, code)) <= GAIN_FLOOR + 7e-15, (label, sampling)


def test_every_entry_point_agrees_on_these_classes_at_full_size(rng):
    """Single call, batch, evaluation plan and torch backend (CPU) at V = 16,384 (the binned scan's
    regime for the single call and the batch; the plan and torch sort): the with-replacement bound
    (n = 1, 2, 8) and the sequential n = 2 bound agree to 1e-12 on every class above."""
    torch = pytest.importorskip("torch")
    from mdsd_ot import optimal_acceptance_batch
    from mdsd_ot.backends import torch as tb
    from mdsd_ot.plan import evaluate_position

    V = 16_384
    for code, n in ((0, 1), (0, 2), (0, 8), (1, 2)):
        scheme = ("with_replacement", "without_replacement")[code]
        for label, p, q in _classes(rng, V, n, code):
            got = {
                "single": optimal_acceptance(p, q, n, sampling=scheme).value,
                # four rows: B V reaches PARALLEL_MIN_ENTRIES, so the row-parallel binned kernel runs
                "batch": float(
                    optimal_acceptance_batch(np.tile(p, (4, 1)), np.tile(q, (4, 1)), n, sampling=scheme)[2]
                ),
                "plan": evaluate_position(p, q, [n], schemes=[scheme], verifiers=()).bounds[(scheme, n)],
                "torch": float(
                    tb.sorted_prefix_bound(torch.tensor(p)[None], torch.tensor(q)[None], n, scheme).value[0]
                ),
            }
            assert max(got.values()) - min(got.values()) <= 1e-12, (label, scheme, n, got)
