"""Three speed floors, each as a ratio to a baseline measured in the same run.

Run: ``python benchmarks/bench_floors.py [--repeat 9]`` (prints a Markdown table).

* **Wide dynamic range**: ``optimal_acceptance`` at V = 152,064, n = 2, 4, 8, both sequential schemes
  handled by the binned scan (with replacement; without replacement n = 2), on Dirichlet(0.05) pairs
  (``q = 0.7 p + 0.3 Dirichlet(0.05)``: q/p spans hundreds of octaves, masses down to 1e-300 and a
  cluster of tens of thousands of near-equal ratios) and on a pair whose ratios span the whole
  exponent range, as a ratio to one ``np.argsort`` of ``q/p`` (CPU time, best of ``--repeat``). The
  LLM-like pair for comparison. Target: the binned scan at most sorting plus a linear scan (about
  1.2x argsort). numpy's argsort is several times faster where it sorts with SIMD (AVX-512
  x86-simd-sort) than where it does not, so the binned scan is also given in milliseconds and as a
  ratio to a machine-independent baseline measured in the same run: one memory-bound linear pass,
  ``np.cumsum(np.divide(q, p))``. Without replacement at n >= 3 the solver sorts (the plan's ratio
  order) and runs the pruned quadrature scan, so there sorting plus a scan is the cost itself.
* **Worst case per scheme and n** (``--only worst``): at V = 152,064, every draft scheme at n = 2, 3,
  4, 8, 16, 64, 128 (where the scheme allows) on every input class of ``tests/hard_inputs.py`` (blocks
  of tiny or subnormal draft masses, subnormal tails on both sides, one-hot and near one-hot targets,
  tied drafts, top-k targets with exact zeros, exact ratio clusters, wide-range and cold pairs, a
  3-token target, draft masses alternating between two far scales); the whole
  ``optimal_acceptance`` call (CPU time, median of ``--repeat`` calls, at most 3), the worst class
  of each (scheme, n) as a ratio to one ``np.argsort`` of a random V-vector measured between the
  calls (median). Targets: 10x for n <= 8, 50x up to n = 128.
  ``--schemes conditional_poisson`` (a comma list) times only those schemes: a before/after of one
  scheme's change in a few minutes.
* **Small V**: V = 60 and 1,000, the kernels compiled (as once cached; a first call on a fresh
  installation runs their Python twins instead of compiling): one ``optimal_acceptance`` call (its
  re-check included) against the ten-line numpy sort-and-scan a user would write (:func:`numpy_dual`)
  and against ``scipy.optimize.linprog`` (HiGHS) on the primal LP (the library's draft-set law and
  constraint matrices; at V = 1,000, a million columns, only with ``--linprog-1000``), and
  ``optimal_acceptance_batch``
  per row (4,096 rows; row-parallel: on a machine shared with other jobs also run it with
  ``NUMBA_NUM_THREADS=1``). CPU time, interleaved medians. Targets: one call <= 1.5x the numpy code at
  V = 60, <= 1x at V >= 1,000.
* **Per position**: ``study.evaluate_rows`` over 8 LLM-like positions at V = 151,936 (bounds with and
  greedy; naive, rrs, spectr and greedy verifiers; n = 2, 3, 4), CPU time per position as a ratio to
  one ``np.argsort`` of the same vector. Target: <= 3x.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numba
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))  # the input-class builders
from _common import best_cpu_time, header, llm_like_pair  # noqa: E402
from hard_inputs import CLASSES, build  # noqa: E402

from mdsd_ot import SCHEMES, _kernels, optimal_acceptance, optimal_acceptance_batch, primal  # noqa: E402
from mdsd_ot.drafts import complement_parts, get_scheme  # noqa: E402

WORST_NS = (2, 3, 4, 8, 16, 64, 128)


def wide_pair(V: int, rng: np.random.Generator):
    """The wide pair: p ~ Dirichlet(0.05), q = 0.7 p + 0.3 Dirichlet(0.05)."""
    p = rng.dirichlet(np.full(V, 0.05))
    q = 0.7 * p + 0.3 * rng.dirichlet(np.full(V, 0.05))
    return p / p.sum(), q / q.sum()


def full_range_pair(V: int, rng: np.random.Generator):
    """Masses log-uniform over 1e-300 .. 1 for both p and q (ratios over ~2,000 octaves)."""
    p = np.exp(rng.uniform(-690.0, 0.0, V))
    q = np.exp(rng.uniform(-690.0, 0.0, V))
    return p / p.sum(), q / q.sum()


def argsort_time(p, q, repeat):
    key = -(q / np.where(p > 0, p, 1e-300))
    return best_cpu_time(lambda: np.argsort(key), repeat=repeat)


def linear_pass_time(p, q, repeat):
    """One linear pass over the vocabulary: a division and a running sum, each a numpy loop."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return best_cpu_time(lambda: np.cumsum(np.divide(q, p)), repeat=repeat)


def wide_rows(rng, repeat):
    V = 152_064
    out = []
    for label, (p, q) in (
        ("Dirichlet(0.05)", wide_pair(V, rng)),
        ("log-uniform 1e-300..1", full_range_pair(V, rng)),
        ("LLM-like T = 1", llm_like_pair(V, rng)),
    ):
        pos = (p > 0) & (q > 0)
        lr = np.log2(q[pos]) - np.log2(p[pos])
        octaves = float(lr.max() - lr.min())
        t_sort = argsort_time(p, q, repeat)
        t_lin = linear_pass_time(p, q, repeat)
        scan = best_cpu_time(lambda: _kernels.bucketed_scan(p, q, 2, 0, 0.0, -1, 1.0), repeat=repeat)
        scan1 = best_cpu_time(lambda: _kernels.bucketed_scan(p, q, 2, 1, *complement_parts(q)), repeat=repeat)
        cells = [
            f"{scan * 1e3:.2f} / {scan1 * 1e3:.2f}",
            f"{scan / t_sort:.2f}x / {scan1 / t_sort:.2f}x",
            f"{scan / t_lin:.1f}x / {scan1 / t_lin:.1f}x",
        ]
        for n in (2, 4, 8):
            t = best_cpu_time(lambda: optimal_acceptance(p, q, n), repeat=repeat)
            cells.append(f"{t / t_sort:.2f}x")
        for n in (2, 4, 8):
            t = best_cpu_time(
                lambda: optimal_acceptance(p, q, n, sampling="without_replacement"), repeat=repeat
            )
            cells.append(f"{t / t_sort:.2f}x")
        head = f"| {label} ({octaves:.0f} octaves) | {t_sort * 1e3:.2f} | {t_lin * 1e3:.2f} | "
        out.append(head + " | ".join(cells) + " |")
    return out


def class_pairs(V: int, rng: np.random.Generator):
    """The input classes on which pruning helps least, each as ``(label, p, q)``."""
    p_llm, q_llm = llm_like_pair(V, rng)
    out = [("p = q", p_llm, p_llm.copy())]
    q = p_llm * (1.0 + 1e-9 * rng.standard_normal(V))
    out.append(("p close to q (1e-9)", p_llm, q / q.sum()))
    a = rng.integers(1, 4, V).astype(float)  # exact ratio clusters: 9 distinct q/p values
    b = rng.integers(1, 4, V).astype(float)
    out.append(("exact ratio clusters", a / a.sum(), b / b.sum()))
    sub = np.exp(rng.uniform(-745.0, -690.0, V))  # most masses subnormal, a few ordinary
    sub[rng.integers(0, V, 40)] = rng.random(40)
    sub2 = np.exp(rng.uniform(-745.0, -690.0, V))
    sub2[rng.integers(0, V, 40)] = rng.random(40)
    out.append(("subnormal masses", sub / sub.sum(), sub2 / sub2.sum()))
    top = np.zeros(V)
    keep = rng.choice(V, 50, replace=False)
    top[keep] = p_llm[keep]
    out.append(("top-50 target (p = 0 elsewhere)", top / top.sum(), q_llm))
    hot = np.full(V, 1e-13)
    hot[int(rng.integers(V))] = 1.0
    out.append(("near one-hot draft", p_llm, hot / hot.sum()))
    return out


def class_rows(rng, repeat):
    V = 152_064
    out = []
    for label, p, q in class_pairs(V, rng):
        base = argsort_time(p, q, repeat) + linear_pass_time(p, q, repeat)
        cells = []
        for sampling, n in (("with_replacement", 2), ("with_replacement", 8), ("without_replacement", 2)):
            t = best_cpu_time(lambda: optimal_acceptance(p, q, n, sampling=sampling), repeat=repeat)
            cells.append(f"{t * 1e3:.2f} ms = {t / base:.2f}x")
        out.append(f"| {label} | {base * 1e3:.2f} | " + " | ".join(cells) + " |")
    return out


def numpy_dual(p, q, n):
    """alpha* with replacement as a user would write it: sort by q/p, prefix sums, the minimum of
    p(H) + 1 - q(H)^n over the prefixes (q = 0 last, p = 0 < q first)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(p > 0, q / p, np.inf)
    ratio[q == 0] = -1.0
    order = np.argsort(-ratio, kind="stable")
    P = np.cumsum(p[order])
    Q = np.cumsum(q[order])
    return min(1.0, 1.0 + min(0.0, float(np.min(P - Q**n))))


def linprog_primal(p, q, n):
    """alpha* by ``scipy.optimize.linprog`` (HiGHS) on the primal LP: flows from draft sets to tokens,
    at most Q_S out of each set and p(y) into each token (the library's set law and matrices)."""
    import scipy.sparse as sps
    from scipy.optimize import linprog

    lp = primal.build_lp(p, q, n, get_scheme("with_replacement"))
    a_sets, a_tok = lp.constraint_matrices()
    A = sps.vstack([a_sets, a_tok]).tocsr()
    res = linprog(
        -np.ones(A.shape[1]), A_ub=A, b_ub=np.concatenate([lp.set_mass, p]), bounds=(0, None), method="highs"
    )
    return -res.fun


def interleaved(fns, number, rounds):
    """Median CPU time per call of each function, the functions timed in turn ``rounds`` times."""
    for f in fns:
        f()
    times = [[] for _ in fns]
    for _ in range(rounds):
        for j, f in enumerate(fns):
            t0 = time.process_time()
            for _ in range(number):
                f()
            times[j].append((time.process_time() - t0) / number)
    return [float(np.median(t)) for t in times]


def small_rows(rng, repeat, linprog_big=False):
    for s in ("with_replacement", "without_replacement"):  # the scan kernels compiled (or loaded)
        optimal_acceptance(*llm_like_pair(300, rng), 2, sampling=s)
    out = []
    for V, number in ((60, 200), (1000, 50)):
        p, q = llm_like_pair(V, rng)
        for n in (2, 8):
            ours, plain = interleaved(
                [lambda: optimal_acceptance(p, q, n), lambda: numpy_dual(p, q, n)], number, max(repeat, 15)
            )
            wor_cell = ""
            if n == 2:
                call = lambda: optimal_acceptance(p, q, n, sampling="without_replacement")  # noqa: E731
                wor_cell = f"{interleaved([call], number, 5)[0] * 1e6:.1f} us"
            lp_cell = ""
            if n == 2 and (V <= 300 or linprog_big):  # (V = 1,000: a million columns, minutes)
                linprog_primal(p, q, n)  # (scipy.optimize imported, HiGHS loaded)
                t0 = time.process_time()
                value = linprog_primal(p, q, n)
                lp = time.process_time() - t0
                assert abs(value - optimal_acceptance(p, q, n).value) < 1e-6  # (HiGHS's tolerances)
                lp_cell = f"{lp * 1e3:,.1f} ms ({lp / ours:,.0f}x ours)"
            target = "<= 1.5x" if V < 1000 else "<= 1x"
            out.append(
                f"| V = {V:,}, n = {n} | {ours * 1e6:.1f} us | {plain * 1e6:.1f} us "
                f"| **{ours / plain:.2f}x** | {target} | {lp_cell} | {wor_cell} |"
            )
    threads = numba.get_num_threads()
    for V in (60, 1000):
        B = 4096 if V == 60 else 256
        P = np.empty((B, V))
        Q = np.empty((B, V))
        for b in range(B):
            P[b], Q[b] = llm_like_pair(V, rng)
        plain = interleaved([lambda: numpy_dual(P[0], Q[0], 2)], 100, 5)[0]
        # one thread, CPU time (with several on a machine shared with other jobs, the row-parallel
        # kernels wait for a busy core and CPU time counts their spinning); all threads, wall time
        numba.set_num_threads(1)
        one = best_cpu_time(lambda: optimal_acceptance_batch(P, Q, 2), repeat=repeat) / B
        numba.set_num_threads(threads)
        optimal_acceptance_batch(P, Q, 2)
        wall = min(_wall(lambda: optimal_acceptance_batch(P, Q, 2)) for _ in range(repeat)) / B
        out.append(
            f"| batch of {B:,} x {V:,}, n = 2, per row: 1 thread (CPU) / {threads} threads (wall) "
            f"| {one * 1e6:.2f} / {wall * 1e6:.2f} us | {plain * 1e6:.1f} us "
            f"| **{one / plain:.2f}x** / {wall / plain:.2f}x | far below 1x | | |"
        )
    return out


def _wall(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def worst_rows(repeat, ns=WORST_NS, V=152_064, schemes=SCHEMES):
    """Per scheme and n, the slowest input class: CPU time of one call (median) as a ratio to one
    argsort of a random V-vector (median of the argsorts timed between the calls)."""
    rng = np.random.default_rng(0)
    x = rng.random(V)
    sorts = []

    def argsort_time():
        t0 = time.process_time()
        np.argsort(x)
        sorts.append(time.process_time() - t0)

    out = []
    for scheme in schemes:
        for n in (2,) if scheme == "hub" else ns:
            timed = []
            for name in CLASSES:
                p, q = build(name, V, n)
                if scheme != "with_replacement" and np.count_nonzero(q) < n:
                    continue
                t0 = time.process_time()
                optimal_acceptance(p, q, n, sampling=scheme)  # warm (and the first time)
                first = time.process_time() - t0
                calls = []
                for _ in range(1 if first > 1.0 else min(repeat, 3)):
                    argsort_time()
                    t0 = time.process_time()
                    optimal_acceptance(p, q, n, sampling=scheme)
                    calls.append(time.process_time() - t0)
                    argsort_time()
                timed.append((float(np.median(calls)), name))
            timed.sort(reverse=True)
            base = float(np.median(sorts))
            (t, name), (t2, name2) = timed[0], timed[1]
            target = "10x" if n <= 8 else "50x"
            out.append(
                f"| {scheme} | {n} | {name} | {t * 1e3:.1f} | **{t / base:.1f}x** "
                f"| {name2}: {t2 / base:.1f}x | {target} |"
            )
            print(out[-1], file=sys.stderr, flush=True)
    base = float(np.median(sorts))
    return out, base


def position_rows(rng, repeat):
    from mdsd_ot.study import evaluate_rows

    V, m = 151_936, 8
    pairs = [llm_like_pair(V, rng) for _ in range(m)]
    P = np.array([a for a, _ in pairs])
    Q = np.array([b for _, b in pairs])
    t_sort = min(argsort_time(P[i], Q[i], repeat) for i in range(2))
    kw = dict(
        ns=[2, 3, 4], schemes=["with_replacement", "greedy"], verifiers=["naive", "rrs", "spectr", "greedy"]
    )
    evaluate_rows(P, Q, **kw)  # warm-up
    cpu = wall = np.inf
    for _ in range(max(2, repeat // 3)):
        t0, w0 = time.process_time(), time.perf_counter()
        evaluate_rows(P, Q, **kw)
        cpu = min(cpu, (time.process_time() - t0) / m)
        wall = min(wall, (time.perf_counter() - w0) / m)
    return [
        f"| evaluate_rows, 8 positions, 2 bounds + 4 verifiers x n = 2, 3, 4 | {cpu * 1e3:.2f} ms "
        f"(wall {wall * 1e3:.2f}) | {t_sort * 1e3:.2f} ms | **{cpu / t_sort:.2f}x** "
        f"(wall {wall / t_sort:.2f}x) | <= 3x |"
    ]


def machine_line():
    """The CPU, and numpy's SIMD features and its argsort time at V = 152,064 (about 2 ms where numpy
    sorts with AVX-512 x86-simd-sort, 8-12 ms where it does not)."""
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), cpu)
    except OSError:
        pass
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as feats

        simd = ", ".join(f for f in ("AVX2", "AVX512F", "AVX512_SKX", "AVX512_ICL") if feats.get(f))
    except ImportError:
        simd = "unknown"
    x = np.random.default_rng(0).random(152_064)
    t = best_cpu_time(lambda: np.argsort(x), repeat=9)
    return (
        f"CPU: {cpu}; numpy SIMD features: {simd or 'none'}; "
        f"np.argsort of 152,064 float64: {t * 1e3:.2f} ms\n"
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--only", choices=("worst", "wide", "classes", "small", "position"), default=None)
    ap.add_argument(
        "--linprog-1000", action="store_true", help="also time linprog at V = 1,000 (10^6 columns: minutes)"
    )
    ap.add_argument(
        "--schemes", default=",".join(SCHEMES), help="schemes of --only worst, comma list (default: all)"
    )
    args = ap.parse_args()
    schemes = [x.strip() for x in args.schemes.split(",") if x.strip()]
    if unknown := sorted(set(schemes) - set(SCHEMES)):
        ap.error(f"--schemes: unknown {', '.join(unknown)}; choose from {', '.join(SCHEMES)}")
    rng = np.random.default_rng(0)
    lines = [header("Speed floors: ratios to baselines measured in the same run"), machine_line()]
    if args.only in (None, "worst"):
        rows, base = worst_rows(args.repeat, schemes=schemes)
        lines += [
            "",
            f"Worst input class per scheme and n, V = 152,064: one optimal_acceptance call (CPU time, "
            f"median), ratio to one np.argsort of a random V-vector ({base * 1e3:.2f} ms, median, "
            f"timed between the calls):",
            "",
            "| scheme | n | worst class | ms | ratio | runner-up | target |",
            "|---|---|---|---|---|---|---|",
        ] + rows
    if args.only in (None, "wide"):
        lines += [
            "",
            "Wide dynamic range, V = 152,064 (CPU time; the binned scan in ms and as ratios to one "
            "np.argsort of q/p and to one linear pass np.cumsum(np.divide(q, p)); optimal_acceptance "
            "as ratios to the argsort):",
            "",
            "| pair | argsort ms | linear pass ms | binned scan ms, with / without repl. n=2 "
            "| binned / argsort | binned / linear pass | with n=2 | with n=4 | with n=8 "
            "| without n=2 | without n=4 | without n=8 |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ] + wide_rows(rng, args.repeat)
    if args.only in (None, "classes"):
        lines += [
            "",
            "Input classes where pruning helps least, V = 152,064: the whole optimal_acceptance call "
            "(CPU time) against sorting plus one linear pass (one np.argsort of q/p plus "
            "np.cumsum(np.divide(q, p)), measured on the same pair in the same run). Target: <= 1x.",
            "",
            "| pair | argsort + linear pass ms | with replacement n=2 | with replacement n=8 "
            "| without replacement n=2 |",
            "|---|---|---|---|---|",
        ] + class_rows(rng, args.repeat)
    if args.only in (None, "small"):
        lines += [
            "",
            "Small V (CPU time, interleaved medians): one optimal_acceptance call (re-check included) "
            "against the ten-line numpy sort-and-scan and scipy.optimize.linprog on the primal LP:",
            "",
            "| call, with replacement | ours | numpy sort-and-scan | ours / numpy | target | linprog (HiGHS) "
            "| ours, without replacement n = 2 |",
            "|---|---|---|---|---|---|---|",
        ] + small_rows(rng, args.repeat, args.linprog_1000)
    if args.only in (None, "position"):
        lines += [
            "",
            "Per position, V = 151,936 (CPU time per position, ratio to one np.argsort of the same vector):",
            "",
            "| path | per position | argsort | ratio | target |",
            "|---|---|---|---|---|",
        ] + position_rows(rng, args.repeat)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
