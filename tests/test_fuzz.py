"""Hostile inputs: only ValueError / TypeError, in bounded time, never a NaN.

A seeded fuzzer throws more than 10,000 malformed calls at every public entry point
(:func:`optimal_acceptance`, :func:`optimal_acceptance_batch`, :func:`verifier_acceptance`,
:func:`compare`, and the torch backend when torch is importable). Each call runs under a wall-clock
budget (``SIGALRM``); it must either raise ``ValueError``/``TypeError`` or return finite values in
[0, 1]. The CLI (``mdsd_ot.cli.main``, in-process) gets bad files and bad flags and must exit with
status 2 and exactly one line on stderr, never a traceback.

Inputs that hit a *known* bug are listed in :func:`known_bug` and pinned by strict ``xfail`` tests.
Huge ``n`` / ``samples`` calls are also run in a subprocess with a time and memory limit
(:func:`test_huge_n_bounded`), so that a regression there cannot take the test session down.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import signal
import subprocess
import sys
import textwrap
import time
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest

import mdsd_ot
from mdsd_ot import get_scheme, optimal_acceptance, optimal_acceptance_batch
from mdsd_ot.cli import main as cli_main
from mdsd_ot.compare import Comparison, compare
from mdsd_ot.result import AcceptanceResult
from mdsd_ot.verifiers import VERIFIERS, VerifierAcceptance, verifier_acceptance

pytestmark = pytest.mark.slow  # fault injection / fuzzing / statistics: the full lane only

try:
    import torch

    from mdsd_ot.backends import torch as tb
except ImportError:  # pragma: no cover
    torch = tb = None

P2, Q2 = [0.5, 0.5], [0.25, 0.75]
SEED = 20261129
N_CALLS = 30_000
BUDGET_S = 3.0  # wall-clock budget of one call (a rejection takes well under a millisecond)
SCHEMES = tuple(mdsd_ot.SCHEMES)  # every registered scheme: a new one is fuzzed by construction


# ------------------------------------------------------------------------- the fixed n bug (_validate)
@pytest.mark.parametrize("n", [2**63, 2**64, 10**30, 10**5000], ids=["2^63", "2^64", "1e30", "1e5000"])
def test_n_beyond_int64_is_a_value_error(n):
    # used to escape as OverflowError from the int64 numba kernels (fixed in _validate.check_n)
    with pytest.raises(ValueError, match="at most 2\\*\\*63 - 1"):
        optimal_acceptance(P2, Q2, n)
    with pytest.raises(ValueError, match="at most 2\\*\\*63 - 1"):
        optimal_acceptance_batch([P2], [Q2], n)
    with pytest.raises(ValueError, match=">= 1"):
        optimal_acceptance(P2, Q2, -n)


def test_largest_int64_n_is_accepted():
    # with replacement, Q(H) = q(H)^n -> 0 for every H != Sigma: alpha* = 1 when p has full support
    assert optimal_acceptance(P2, Q2, 2**63 - 1).value == 1.0


# ------------------------------------------------------------------------------------ call harness
class _OverBudget(BaseException):
    """Raised by SIGALRM; a BaseException so that no ``except Exception`` in the code swallows it."""


def _alarm(signum, frame):
    raise _OverBudget()


def run_with_budget(fn, kwargs, budget=BUDGET_S):
    """``(outcome, payload, seconds)`` with outcome in {"ok", "rejected", "timeout", "crash"}."""
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, budget)
    t0 = time.perf_counter()
    try:
        out = ("ok", fn(**kwargs))
    except (ValueError, TypeError) as exc:
        out = ("rejected", exc)
    except _OverBudget:
        out = ("timeout", None)
    except BaseException as exc:  # noqa: BLE001 - any other exception is the finding
        out = ("crash", exc)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    return out[0], out[1], time.perf_counter() - t0


def _finite_unit(x) -> bool:
    a = np.asarray(x, dtype=np.float64)
    return bool(np.all(np.isfinite(a)) and np.all(a >= 0.0) and np.all(a <= 1.0))


def result_problem(result):
    """None when a returned value is sane, else a description (NaN, out of [0, 1], wrong type)."""
    if isinstance(result, AcceptanceResult):
        return None if _finite_unit(result.value) else f"value {result.value!r}"
    if isinstance(result, VerifierAcceptance):
        ok = _finite_unit(result.value) and math.isfinite(result.stderr) and result.stderr >= 0
        return None if ok else f"value {result.value!r} stderr {result.stderr!r}"
    if isinstance(result, Comparison):
        for r in result:
            if not (_finite_unit(r.acceptance) and _finite_unit(r.bound) and math.isfinite(r.gap)):
                return f"record {r}"
        return None
    if isinstance(result, np.ndarray):
        return None if _finite_unit(result) else f"array {result!r}"
    if torch is not None:
        if isinstance(result, torch.Tensor):
            return None if _finite_unit(result.cpu().numpy()) else f"tensor {result!r}"
        if isinstance(result, tuple) and hasattr(result, "prefix_len"):  # BatchBound
            return None if _finite_unit(result.value.cpu().numpy()) else f"bound {result.value!r}"
        if isinstance(result, dict):
            bad = {k: v for k, v in result.items() if not _finite_unit(v.cpu().numpy())}
            return f"dict {bad!r}" if bad else None
    return f"unexpected return type {type(result).__name__}"


# ---------------------------------------------------------------------------------- input catalog
def _valid(rng, V):
    x = rng.dirichlet(np.full(V, 0.5))
    if V > 2 and rng.random() < 0.3:
        x[rng.integers(V)] = 0.0
        x /= x.sum()
    return x


def _extreme(rng, good):
    """A valid distribution with tiny, denormal or near-one-hot entries."""
    x = np.array(good, dtype=np.float64)
    flat = x.reshape(-1, x.shape[-1])
    kind = int(rng.integers(4))
    for row in flat:
        if kind == 0:
            row[rng.random(row.size) < 0.5] = [1e-300, 5e-324, 1e-310, 1e-200][int(rng.integers(4))]
        elif kind == 1:
            row[:] = 1e-12 / max(row.size - 1, 1)
            row[int(rng.integers(row.size))] = 1.0 - 1e-12
        elif kind == 2:
            row[:] = 0.0
            row[int(rng.integers(row.size))] = 1.0
        else:
            row[:] = np.round(row * 3) + 1.0  # ties
        row /= row.sum()
    return x


def bad_array(rng, V, ndim=1):
    """A malformed (or, rarely, valid) probability input of ``ndim`` dimensions."""
    good = _valid(rng, V) if ndim == 1 else np.stack([_valid(rng, V) for _ in range(2)])
    k = int(rng.integers(43))
    options = [
        lambda: good,  # valid: the other arguments carry the fault
        lambda: float(good.ravel()[0]),
        lambda: np.float64(0.5),
        lambda: np.array(1.0),
        lambda: good[None] if ndim == 1 else good[None],  # one dimension too many
        lambda: good.ravel()[:, None, None],
        lambda: good.ravel()[0] if ndim == 2 else good[None, None],
        lambda: (good * 10).astype(np.int64),
        lambda: good > 0.1,
        lambda: good.astype(np.complex128),
        lambda: np.array(list(good.ravel()) + [None], dtype=object),
        lambda: good.astype(str),
        lambda: good.astype("S8"),
        lambda: np.where(np.arange(good.size).reshape(good.shape) == 0, np.nan, good),
        lambda: np.where(np.arange(good.size).reshape(good.shape) == 0, np.inf, good),
        lambda: np.where(np.arange(good.size).reshape(good.shape) == 0, -np.inf, good),
        lambda: good - 2 * good.max(),  # negative entries
        lambda: good * 1.5,  # unnormalised
        lambda: good * 0.5,
        lambda: np.zeros_like(good),
        lambda: np.zeros((0,) if ndim == 1 else (2, 0)),
        lambda: np.zeros((0, V)),
        lambda: [],
        lambda: [[]],
        lambda: None,
        lambda: "0.5 0.5",
        lambda: b"\x00\x01",
        lambda: {"p": [0.5, 0.5]},
        lambda: {0.5},
        lambda: object(),
        lambda: 3,
        lambda: range(V),
        lambda: [[0.5], [0.2, 0.3]],  # ragged
        lambda: [0.5, [0.5]],
        lambda: [0.5, None],
        lambda: [0.5, "0.5"],
        lambda: [Fraction(1, 2), Fraction(1, 2)],
        lambda: [Decimal("0.5"), Decimal("0.5")],
        lambda: np.full(good.shape, 1e308),  # the sum overflows
        lambda: _valid(rng, V + 1) if ndim == 1 else np.stack([_valid(rng, V + 1)] * 2),  # wrong V
        # valid but numerically extreme: must give a sane value (or a clean rejection)
        lambda: _extreme(rng, good),
        lambda: _extreme(rng, good),
        lambda: _extreme(rng, good),
    ]
    if torch is not None and k >= len(options) - 4 and rng.random() < 0.5:
        tk = int(rng.integers(5))
        return [
            lambda: torch.tensor(good),
            lambda: torch.tensor(good).to(torch.bfloat16),
            lambda: torch.tensor((good * 10).astype(np.int64)),
            lambda: torch.tensor(good).fill_(float("nan")),
            lambda: torch.tensor(good)[None, None],
        ][tk]()
    return options[k % len(options)]()


BAD_N = [
    0,
    -1,
    -(2**63),
    2**63,
    2**64,
    10**100,
    2.0,
    2.5,
    float("nan"),
    float("inf"),
    True,
    False,
    "2",
    None,
    [2],
    np.float64(2.0),
    np.int64(0),
    complex(2, 0),
    np.array(2),
    Fraction(2),
    Decimal(2),
    10**9,
    2**63 - 1,
]
GOOD_N = [1, 2, 3, np.int64(2), np.uint8(2)]
BAD_STR = [
    "bad",
    "",
    None,
    5,
    ["with_replacement"],
    "WITH_REPLACEMENT",
    " with_replacement",
    b"with_replacement",
    2.5,
]
METHODS = ["auto", "dual", "lp", "bruteforce", "cvxpy"]
BAD_SAMPLES = [0, 1, -5, 1.5, "10", None, True, 10, 50]
BAD_RNG = [None, 0, -1, "x", 1.5, object(), [1, 2]]


def pick(rng, good, bad, p_bad=0.5):
    seq = bad if rng.random() < p_bad else good
    return seq[int(rng.integers(len(seq)))]


def _int_n(n):
    return isinstance(n, (int, np.integer)) and not isinstance(n, bool)


def known_bug(fname, kw, outcome, payload):
    """The id of a known, pinned bug that explains a failed fuzz check, else None."""
    if fname.startswith("torch") and outcome == "ok":
        vals = [v for k, v in kw.items() if k in ("p", "q", "x")]
        huge = any(
            torch.is_tensor(v)
            and v.is_floating_point()
            and bool((v.abs() > 1e300).any())
            or (isinstance(v, np.ndarray) and v.dtype.kind == "f" and np.any(np.abs(v) > 1e300))
            for v in vals
        )
        if huge:
            return "torch-normalize-overflow"
    return None


def make_call(rng):
    """(name, function, kwargs) for one fuzz call: a valid baseline with 1-3 corrupted arguments."""
    V = int(rng.integers(1, 6))
    fname = [
        "optimal_acceptance",
        "optimal_acceptance_batch",
        "verifier_acceptance",
        "compare",
        "torch.sorted_prefix_bound",
        "torch.sorted_prefix_bounds",
        "torch.greedy_bounds",
        "torch.to_distribution",
    ][int(rng.integers(8 if tb is not None else 4))]
    ndim = 2 if fname == "optimal_acceptance_batch" else 1
    p_bad = 0.45
    kw = {
        "p": bad_array(rng, V, ndim)
        if rng.random() < p_bad
        else (_valid(rng, V) if ndim == 1 else np.stack([_valid(rng, V)] * 2)),
        "q": bad_array(rng, V, ndim)
        if rng.random() < p_bad
        else (_valid(rng, V) if ndim == 1 else np.stack([_valid(rng, V)] * 2)),
        "n": pick(rng, GOOD_N, BAD_N, 0.4),
    }
    if rng.random() < 0.3:
        kw["normalize"] = [True, False, "yes", None, 1][int(rng.integers(5))]
    if fname in ("optimal_acceptance", "optimal_acceptance_batch"):
        if rng.random() < 0.6:
            kw["sampling"] = pick(rng, list(SCHEMES), BAD_STR, 0.4)
        if fname == "optimal_acceptance" and rng.random() < 0.4:
            kw["method"] = pick(rng, METHODS, BAD_STR, 0.5)
        fn = optimal_acceptance if fname == "optimal_acceptance" else optimal_acceptance_batch
        return fname, fn, kw
    if fname == "verifier_acceptance":
        kw["name"] = pick(rng, list(VERIFIERS), BAD_STR + ["RRS", "optimal "], 0.3)
        if rng.random() < 0.5:
            kw["sampling"] = pick(rng, list(SCHEMES), BAD_STR, 0.4)
        if rng.random() < 0.5:
            kw["method"] = pick(rng, ["auto", "exact", "monte_carlo"], BAD_STR, 0.4)
            kw["samples"] = pick(rng, [20, 100], BAD_SAMPLES, 0.5)
            kw["rng"] = pick(rng, [0, np.random.default_rng(1)], BAD_RNG, 0.5)
        return fname, verifier_acceptance, kw
    if fname == "compare":
        if rng.random() < 0.6:
            kw["verifiers"] = pick(
                rng,
                ["rrs", "naive,spectr", ["greedy"], "spechub"],
                ["bad", "rrs,bad", "", ",", [], ["rrs", None], 5, [3]],
                0.5,
            )
        else:
            kw["verifiers"] = ["naive", "rrs", "spectr", "greedy", "rrs_without_replacement"]
        if rng.random() < 0.3:
            kw["samples"] = pick(rng, [20], BAD_SAMPLES, 0.5)
            kw["rng"] = pick(rng, [0], BAD_RNG, 0.5)
        return fname, compare, kw
    # torch backend
    tname = fname.split(".")[1]
    if tname == "to_distribution":
        kw = {"x": kw["p"], **({"normalize": kw["normalize"]} if "normalize" in kw else {})}
        kw["kind"] = pick(rng, ["logits", "probs"], BAD_STR, 0.3)
        if rng.random() < 0.5:
            kw["temperature"] = pick(
                rng, [0.3, 1.0, 2], [0, -1.0, float("nan"), float("inf"), "1", None, True, [1.0]], 0.6
            )
        if rng.random() < 0.4:
            kw["top_k"] = pick(rng, [1, 2, None], [0, -1, 2.0, "1", True, np.int64(1)], 0.6)
        if rng.random() < 0.4:
            kw["top_p"] = pick(rng, [0.5, 1.0, None], [0, -0.1, 1.5, float("nan"), "0.9", True], 0.6)
        return fname, tb.to_distribution, kw
    if tname in ("sorted_prefix_bounds", "greedy_bounds"):
        kw["ns"] = pick(rng, [[1, 2], [2], (1,)], [[], 2, None, [0], [2, "3"], [2**63], "12", [1.0]], 0.5)
        del kw["n"]
    if tname != "greedy_bounds" and rng.random() < 0.5:
        kw["sampling"] = pick(rng, ["with_replacement", "without_replacement"], BAD_STR, 0.5)
    return fname, getattr(tb, tname), kw


def _warm_up():
    """Compile every numba kernel on the fuzzed paths before any call runs under the time budget
    (a cold compile after a kernel edit takes seconds and would be cut off by the alarm)."""
    p = np.array([0.4, 0.3, 0.2, 0.1, 1e-320, 0.0])
    q = np.array([0.1, 0.2, 0.3, 0.35, 0.05, 1e-300])
    with np.errstate(all="ignore"):
        for scheme in SCHEMES:
            for n in [get_scheme(scheme).fixed_n] if get_scheme(scheme).fixed_n else [1, 2, 3]:
                for method in METHODS:  # the first call of a method imports its solver (cvxpy: seconds)
                    optimal_acceptance(p, q, n, sampling=scheme, method=method)
                optimal_acceptance_batch(np.stack([p, q]), np.stack([q, p]), n, sampling=scheme)
                for name, v in VERIFIERS.items():
                    if scheme in v.schemes and v.fixed_n in (None, n):
                        verifier_acceptance(name, p, q, n, sampling=scheme)
                        verifier_acceptance(
                            name, p, q, n, sampling=scheme, method="monte_carlo", samples=20, rng=0
                        )
        if tb is not None:
            tb.sorted_prefix_bounds(torch.tensor(p), torch.tensor(q), [1, 2], "without_replacement")
            tb.greedy_bounds(torch.tensor(p), torch.tensor(q), [2])


def test_fuzz_public_functions():
    """>= 10,000 seeded hostile calls: ValueError/TypeError or a sane value, each within budget."""
    _warm_up()
    rng = np.random.default_rng(SEED)
    counts: dict[str, int] = {}
    failures, known = [], {}
    t_start = time.perf_counter()
    slowest = (0.0, None)
    with np.errstate(all="ignore"), contextlib.redirect_stderr(io.StringIO()):
        for i in range(N_CALLS):
            fname, fn, kw = make_call(rng)  # huge n included: 87d04ee / bf055b0 bounded it everywhere
            outcome, payload, dt = run_with_budget(fn, kw)
            counts[outcome] = counts.get(outcome, 0) + 1
            slowest = max(slowest, (dt, fname))
            problem = None
            if outcome in ("timeout", "crash"):
                problem = f"{outcome}: {type(payload).__name__}: {payload}"
            elif outcome == "ok":
                problem = result_problem(payload)
            if problem is None:
                continue
            bug = known_bug(fname, kw, outcome, payload)
            if bug:
                known[bug] = known.get(bug, 0) + 1
            else:
                failures.append((i, fname, {k: repr(v)[:80] for k, v in kw.items()}, problem[:300]))
    elapsed = time.perf_counter() - t_start
    ran = sum(counts.values())
    print(
        f"fuzz: {ran} calls in {elapsed:.1f} s, outcomes {counts}, known bugs hit {known}, "
        f"slowest {slowest[0]:.2f} s ({slowest[1]})"
    )
    assert not failures, f"{len(failures)} unexpected failures, first: {failures[:5]}"
    assert ran >= 10_000
    assert counts.get("rejected", 0) > 5_000 and counts.get("ok", 0) > 300  # both paths exercised


def _cp_underflows(q, n):
    q = np.asarray(q, dtype=np.float64)
    x = np.sort(q[q > 0] / q.max())[::-1][:n]
    return bool(np.sum(np.log10(x)) < -280)


def test_fuzz_valid_extreme_inputs():
    """Valid but numerically extreme inputs (denormals, 1e-300, near one-hot, one-hot, ties) with a
    valid n for the scheme: every entry point must return a sane value, never raise."""
    _warm_up()
    rng = np.random.default_rng(SEED + 1)
    failures, known, ran = [], {}, 0
    with np.errstate(all="ignore"):
        for i in range(3000):
            V = int(rng.integers(1, 9))
            p = _extreme(rng, _valid(rng, V)) if rng.random() < 0.7 else _valid(rng, V)
            q = _extreme(rng, _valid(rng, V)) if rng.random() < 0.7 else _valid(rng, V)
            scheme = SCHEMES[int(rng.integers(len(SCHEMES)))]
            support = int(np.count_nonzero(q > 0))
            sch = get_scheme(scheme)  # the valid n for this q: the scheme's fixed n, or 1..4 it supports
            ns = [
                k for k in ([sch.fixed_n] if sch.fixed_n else range(1, 5)) if sch._min_support(k) <= support
            ]
            if not ns:
                continue
            n = ns[0] if sch.fixed_n else int(rng.integers(1, len(ns) + 1))
            which = int(rng.integers(4))
            if which == 0:
                fname, fn, kw = "optimal_acceptance", optimal_acceptance, dict(p=p, q=q, n=n, sampling=scheme)
            elif which == 1:
                fname, fn, kw = (
                    "batch",
                    optimal_acceptance_batch,
                    dict(P=p[None], Q=q[None], n=n, sampling=scheme),
                )
            elif which == 2:
                names = [
                    v
                    for v, ver in VERIFIERS.items()
                    if scheme in ver.schemes and (ver.fixed_n is None or ver.fixed_n == n)
                ]
                name = names[int(rng.integers(len(names)))]
                fname, fn, kw = (
                    "verifier_acceptance",
                    verifier_acceptance,
                    dict(name=name, p=p, q=q, n=n, sampling=scheme, method="auto", rng=0, samples=200),
                )
            else:
                if (
                    tb is None
                    or scheme not in ("with_replacement", "without_replacement")
                    or (scheme == "without_replacement" and n > 2)
                ):
                    continue
                fname, fn, kw = (
                    "torch",
                    tb.sorted_prefix_bound,
                    dict(p=torch.tensor(p), q=torch.tensor(q), n=n, sampling=scheme),
                )
            outcome, payload, dt = run_with_budget(fn, kw)
            ran += 1
            problem = None if outcome == "ok" else f"{outcome}: {type(payload).__name__}: {payload}"
            if outcome == "ok":
                problem = result_problem(payload)
            if problem is None and fname == "optimal_acceptance" and V <= 6:
                # a second, slow path: exhaustive subsets over the enumerated draft law
                slow = optimal_acceptance(p, q, n, sampling=scheme, method="bruteforce").value
                if abs(slow - payload.value) > 1e-9:
                    problem = f"dual {payload.value!r} != bruteforce {slow!r}"
            if problem is None:
                continue
            bug = None
            denormal = bool(np.any((q > 0) & (q < 2.2250738585072014e-308)))
            if scheme == "conditional_poisson" and _cp_underflows(q, n):
                bug = "conditional_poisson e_n underflow"
            elif (
                scheme == "without_replacement"
                and n >= 3
                and denormal
                and ("negative dimensions" in str(payload) or isinstance(payload, SystemError))
            ):
                bug = "sequential n >= 3 with denormal q"
            elif scheme == "without_replacement" and 0 < np.sort(q)[:-1].sum() < 1e-290:
                bug = "W_2 term q_i / (1 - q_i) overflows when 1 - q_max is denormal"
            elif fname == "verifier_acceptance" and outcome == "ok" and 1.0 < payload.value <= 1.0 + 1e-15:
                bug = "verifier acceptance 1 + ulp"
            if bug:
                known[bug] = known.get(bug, 0) + 1
            else:
                failures.append((i, fname, n, scheme, p.tolist(), q.tolist(), problem[:200]))
    print(f"valid extreme fuzz: {ran} calls, known bugs hit {known}")
    assert ran > 2000
    assert not failures, f"{len(failures)} failures, first: {failures[:5]}"


# ----------------------------------------------------------------------------------- CLI fuzzing
def _write_bad_files(d):
    """name -> path of a malformed input file (written into the pytest tmp_path)."""
    files = {}

    def w(name, content, mode="w"):
        path = d / name
        with open(path, mode) as fh:
            fh.write(content)
        files[name] = str(path)

    w("empty.txt", "")
    w("empty.json", "")
    w("empty.npy", "")
    w("empty.npz", "")
    w("garbage.txt", "hello world\n")
    w("garbage.json", "{not json")
    w("binary.txt", b"\xff\xfe\x00\x81", "wb")
    w("binary.json", b"\xff\xfe\x00\x81", "wb")
    w("truncated.npy", b"\x93NUMPY\x01\x00garbage", "wb")
    w("wrong_keys.json", json.dumps({"a": [1.0], "b": [2.0]}))
    w("nan.json", '{"p": [NaN, 1], "q": [0.5, 0.5]}')
    w("nan.txt", "nan 1\n0.5 0.5\n")
    w("inf.txt", "inf 0\n0.5 0.5\n")
    w("overflow.json", '{"p": [1e400, 1], "q": [0.5, 0.5]}')
    w("mismatch.txt", "0.5 0.5\n0.2 0.3 0.5\n")
    w("mismatch.json", '{"p": [0.5, 0.5], "q": [0.2, 0.3, 0.5]}')
    w("number.json", "3")
    w("string.json", '"abc"')
    w("null_p.json", '{"p": null, "q": [1]}')
    w("nested.json", '{"p": [[0.5], [0.5]], "q": [0.5, 0.5]}')
    w("ragged.json", '{"p": [[0.5], [0.2, 0.3]], "q": [0.5, 0.5]}')
    w("strings.json", '{"p": ["a", "b"], "q": [0.5, 0.5]}')
    w("three.json", "[[1], [1], [1]]")
    w("empty_lists.json", "[[], []]")
    w("unnormalised.txt", "0.5 0.6\n0.5 0.5\n")
    w("negative.txt", "-0.5 1.5\n0.5 0.5\n")
    w("zeros.txt", "0 0\n0.5 0.5\n")
    w("one_distribution.txt", "0.5 0.5\n")
    w("three_lines.txt", "0.5 0.5\n0.5 0.5\n0.5 0.5\n")
    w("nul.txt", "0.5\x000.5\n")
    w("onehot_q_wor.txt", "0.5 0.5\n1 0\n")  # valid file; only bad with --sampling without_replacement
    np.save(d / "int.npy", np.array([[1, 0], [0, 1]]))
    np.save(d / "object.npy", np.array([[1, None]], dtype=object), allow_pickle=True)
    np.savez(d / "no_keys.npz", a=np.ones(2))
    np.save(d / "3d.npy", np.ones((2, 2, 2)))
    np.save(d / "bool.npy", np.ones((2, 2), bool))
    np.save(d / "complex.npy", np.ones((2, 2), complex))
    np.save(d / "str.npy", np.array([["a", "b"], ["c", "d"]]))
    for name in ("int.npy", "object.npy", "no_keys.npz", "3d.npy", "bool.npy", "complex.npy", "str.npy"):
        files[name] = str(d / name)
    files["directory"] = str(d)
    files["missing"] = str(d / "does_not_exist.txt")
    return files


def _cli(argv):
    """(exit status, stdout, stderr) of ``mdsd-ot argv`` run in-process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = cli_main(argv)
        except SystemExit as exc:  # argparse errors
            rc = exc.code
    return rc, out.getvalue(), err.getvalue()


def _assert_one_line_error(argv, rc, err):
    assert rc == 2, f"{argv}: exit status {rc}, stderr {err!r}"
    assert err.endswith("\n") and err.count("\n") == 1, f"{argv}: stderr not one line: {err!r}"
    assert "Traceback" not in err and err.startswith("mdsd-ot"), f"{argv}: {err!r}"


def test_cli_bad_files(tmp_path):
    files = _write_bad_files(tmp_path)
    good = tmp_path / "good.txt"
    good.write_text("0.5 0.5\n0.25 0.75\n")
    count = 0
    for cmd in ("bound", "compare"):
        for name, path in files.items():
            argv = [cmd, path]
            if name == "onehot_q_wor.txt":  # compare skips what cannot run unless it is named
                argv += ["--sampling", "without_replacement"] + (
                    ["--verifiers", "naive"] if cmd == "compare" else []
                )
            rc, _, err = _cli(argv)
            _assert_one_line_error(argv, rc, err)
            count += 1
        # the bad file as the second of two files, and two files that each hold p and q
        for argv in (
            [cmd, str(good), files["garbage.txt"]],
            [cmd, files["missing"], str(good)],
            [cmd, str(good), str(good)],
            [cmd, files["one_distribution.txt"], files["mismatch.txt"]],
            [cmd, str(good), str(good), str(good)],
        ):
            rc, _, err = _cli(argv)
            _assert_one_line_error(argv, rc, err)
            count += 1
    assert count >= 90


BAD_FLAGS = {
    "bound": [
        ["--n", "0"],
        ["--n", "x"],
        ["--n", "-1"],
        ["--n", "1e3"],
        ["--n", "2.5"],
        ["--n", ""],
        ["--n", str(2**63)],
        ["--n", str(10**30)],
        ["--n", "3", "--sampling", "hub"],
        ["--n", "5", "--sampling", "without_replacement"],
        ["--sampling", "bad"],
        ["--sampling", ""],
        ["--sampling", ","],
        ["--sampling", "with_replacement,bad"],
        ["--method", "bad"],
        ["--method", ""],
        ["--verifiers", "rrs"],
        ["--samples", "5"],
        ["--bogus"],
        ["--n"],
        ["--json", "--json", "--bogus"],
        ["-x"],
    ],
    "compare": [
        ["--n", "0"],
        ["--n", "x"],
        ["--n", "-1"],
        ["--n", "1e3"],
        ["--n", str(2**63)],
        ["--n", "3", "--verifiers", "spechub"],
        ["--verifiers", "bad"],
        ["--verifiers", ""],
        ["--verifiers", ","],
        ["--verifiers", "rrs,bad"],
        ["--seed", "x"],
        ["--samples", "x"],
        ["--samples", "1.5"],
        ["--method", "lp"],
        ["--bogus"],
        ["--n"],
        ["--sampling", "hub", "--verifiers", "rrs"],
    ],
}


@pytest.mark.parametrize("cmd", ["bound", "compare"])
def test_cli_bad_flags(tmp_path, cmd):
    good = tmp_path / "good.txt"
    good.write_text("0.5 0.5\n0.25 0.75\n")
    for flags in BAD_FLAGS[cmd]:
        argv = [cmd, str(good), *flags]
        rc, _, err = _cli(argv)
        _assert_one_line_error(argv, rc, err)


def test_cli_bad_commands(tmp_path):
    for argv in (
        ["bogus"],
        ["--bogus"],
        ["bound"],
        ["compare"],
        ["merge"],
        ["study"],
        ["merge", str(tmp_path / "nope"), "--out", str(tmp_path / "o")],
        ["demo", "--positions", "0"],
        ["demo", "--n", "x"],
        ["demo", "--temperatures", "9"],
        ["demo", "--temperatures", "x"],
    ):
        rc, _, err = _cli(argv)
        _assert_one_line_error(argv, rc, err)
    rc, out, _ = _cli([])  # no sub-command: the help on stdout, exit status 2
    assert rc == 2 and "bound" in out


def test_cli_fuzzed_text_files(tmp_path):
    """Random bytes and random number-like text: exit 0/1 with output, or 2 with one stderr line."""
    rng = np.random.default_rng(SEED)
    tokens = [
        "0.5",
        "0.25",
        "nan",
        "inf",
        "-1",
        "1e400",
        "1e-400",
        "0",
        ",",
        ";",
        "#",
        "x",
        "\n",
        " ",
        "0x10",
        "1_0",
        "+.5",
        "--",
        "\t",
        "\x00",
        "é",
        "[",
        "]",
        "{",
        '"p"',
        ":",
    ]
    for i in range(200):
        suffix = [".txt", ".json", ".npy", ".npz", ""][i % 5]
        path = tmp_path / f"f{i}{suffix}"
        if i % 3 == 0:
            path.write_bytes(rng.bytes(int(rng.integers(0, 64))))
        else:
            path.write_text("".join(rng.choice(tokens, size=int(rng.integers(1, 30)))), encoding="utf-8")
        argv = [["bound", "compare"][i % 2], str(path), "--n", "2"]
        rc, out, err = _cli(argv)
        if rc in (0, 1):
            assert out and "Traceback" not in err, argv
        else:
            _assert_one_line_error(argv, rc, err)


# ------------------------------------------------------------------------ known bugs, pinned strict
@pytest.mark.parametrize("kwargs", [{"sampling": "bad"}, {"method": "bad"}, {"sampling": ""}])
def test_compare_rejects_unknown_option(kwargs):
    with pytest.raises(ValueError):
        compare(P2, Q2, 2, **kwargs)


@pytest.mark.parametrize(
    "name, sampling, n, p, q",
    [
        ("naive", "greedy", 3, [0.7, 0.2, 0.1], [0.1, 0.2, 0.7]),
        ("naive", "without_replacement", 3, [0.7, 0.2, 0.1], [0.7, 0.2, 0.1]),
        ("naive", "conditional_poisson", 3, [0.7, 0.2, 0.1], [0.1, 0.2, 0.7]),
        ("spechub", "hub", 2, [0.6, 0.3, 0.1], [0.7, 0.2, 0.1]),
        ("greedy", "greedy", 2, [0.6, 0.3, 0.1], [0.7, 0.2, 0.1]),
    ],
    ids=["naive-greedy", "naive-wor", "naive-cp", "spechub", "greedy"],
)
def test_verifier_acceptance_at_most_one(name, sampling, n, p, q):
    assert verifier_acceptance(name, p, q, n, sampling=sampling).value <= 1.0


def test_cli_compare_unknown_sampling(tmp_path):
    good = tmp_path / "good.txt"
    good.write_text("0.5 0.5\n0.25 0.75\n")
    rc, _, err = _cli(["compare", str(good), "--sampling", "bad"])
    _assert_one_line_error(["compare", "--sampling", "bad"], rc, err)


def test_cli_deeply_nested_json(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    rc, _, err = _cli(["bound", str(path)])
    _assert_one_line_error(["bound", "deep.json"], rc, err)


def test_cli_json_booleans_rejected(tmp_path):
    path = tmp_path / "bools.json"
    path.write_text('{"p": [true, false], "q": [0.5, 0.5]}')
    rc, _, err = _cli(["bound", str(path)])
    _assert_one_line_error(["bound", "bools.json"], rc, err)


# regression: 'mdsd-ot demo --verifiers bad' exited 0 with every row recording an error (db9bfba)
def test_cli_demo_unknown_verifier(tmp_path):
    rc, _, err = _cli(
        [
            "demo",
            "--verifiers",
            "bad",
            "--positions",
            "1",
            "--no-plot",
            "--n",
            "2",
            "--temperatures",
            "1.0",
            "--out",
            str(tmp_path / "demo"),
        ]
    )
    _assert_one_line_error(["demo", "--verifiers", "bad"], rc, err)


# regression: the torch backend divided by an overflowed sum (inf) with normalize=True: NaN (db9bfba)
@pytest.mark.skipif(tb is None, reason="torch not installed")
def test_torch_normalize_overflow():
    p = torch.tensor([1.7e308, 1.7e308], dtype=torch.float64)
    with pytest.raises(ValueError):
        tb.sorted_prefix_bound(p, torch.tensor(Q2, dtype=torch.float64), 2, normalize=True)


# regression: to_distribution returned NaN when logits / temperature overflowed (db9bfba)
@pytest.mark.skipif(tb is None, reason="torch not installed")
@pytest.mark.parametrize("logits, temperature", [([1.0, 0.0], 1e-310), ([1e308, -1e308], 1e-10)])
def test_torch_to_distribution_overflow(logits, temperature):
    out = tb.to_distribution(torch.tensor(logits, dtype=torch.float64), temperature=temperature)
    assert bool(torch.isfinite(out).all())


_LIMITED = """
import resource, signal, sys, time
resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))
from mdsd_ot import optimal_acceptance
from mdsd_ot.verifiers import verifier_acceptance
from mdsd_ot.compare import compare
p, q = [0.5, 0.5], [0.25, 0.75]
optimal_acceptance(p, q, 2)  # load the compiled kernels before the clock starts
signal.setitimer(signal.ITIMER_REAL, {budget})  # default action: SIGALRM kills us, even inside C code
t0 = time.time()
try:
    {call}
except (ValueError, TypeError):
    pass
signal.setitimer(signal.ITIMER_REAL, 0)
print("done", time.time() - t0)
"""


def _bounded(call, budget=3.0):
    """Run ``call`` in a subprocess capped at 3 GiB and ``budget`` seconds (after imports, so a busy
    machine does not make it flaky): True if it returned or raised ValueError/TypeError in time."""
    code = textwrap.dedent(_LIMITED).replace("{call}", call).replace("{budget}", repr(budget))
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:  # pragma: no cover - only if even the imports hang
        return False
    return r.returncode == 0 and r.stdout.startswith("done")


@pytest.mark.parametrize(
    "call",
    [
        "verifier_acceptance('rrs', p, q, 10**9)",
        "compare(p, q, 10**9)",
        "verifier_acceptance('naive', p, q, 10**9, method='monte_carlo', samples=10)",
        "verifier_acceptance('rrs', p, q, 2, method='monte_carlo', samples=10**12)",
        "optimal_acceptance(p, q, 10**9, method='lp')",
    ],
    ids=["rrs", "compare", "mc-n", "mc-samples", "lp"],
)
def test_huge_n_bounded(call):
    assert _bounded(call)


def test_bounded_harness_passes_fast_calls():
    """The subprocess harness itself: a fast, properly rejected call passes."""
    assert _bounded("optimal_acceptance(p, q, 0)")
    assert _bounded("optimal_acceptance(p, q, 10**9)")
