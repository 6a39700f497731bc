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
* **Small V**: V = 60, n = 2, the kernels compiled (as once cached; a first call on a fresh
  installation runs their Python twins instead of compiling): one ``optimal_acceptance`` call and
  ``optimal_acceptance_batch`` per row (4,096 and 256 rows), as speed-ups over one HiGHS LP of the
  same pair (wall time, best of several; the batch kernels are row-parallel, so on a machine shared
  with other jobs also run it with ``NUMBA_NUM_THREADS=1``). Targets: >= 300x and >= 5,000x.
* **Per position**: ``study.evaluate_rows`` over 8 LLM-like positions at V = 151,936 (bounds with and
  greedy; naive, rrs, spectr and greedy verifiers; n = 2, 3, 4), CPU time per position as a ratio to
  one ``np.argsort`` of the same vector. Target: <= 3x.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numba
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import best_cpu_time, best_time, header, llm_like_pair  # noqa: E402

from mdsd_ot import _kernels, optimal_acceptance, optimal_acceptance_batch, primal  # noqa: E402
from mdsd_ot.drafts import complement_parts, get_scheme  # noqa: E402


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


def small_rows(rng, repeat):
    V, n = 60, 2
    for s in ("with_replacement", "without_replacement"):  # the scan kernels compiled (or loaded)
        optimal_acceptance(*llm_like_pair(300, rng), n, sampling=s)
    p, q = llm_like_pair(V, rng)
    scheme = get_scheme("with_replacement")
    t_lp = best_time(lambda: primal.solve_highs(primal.build_lp(p, q, n, scheme)), repeat=3)
    t_one = best_time(lambda: optimal_acceptance(p, q, n), repeat=max(repeat, 20), number=20)
    t_wor = best_time(
        lambda: optimal_acceptance(p, q, n, sampling="without_replacement"), repeat=repeat, number=20
    )
    out = [
        f"| one call, with replacement | {t_one * 1e6:.0f} us | {t_lp * 1e3:.1f} ms "
        f"| **{t_lp / t_one:.0f}x** | >= 300x |",
        f"| one call, without replacement | {t_wor * 1e6:.0f} us | {t_lp * 1e3:.1f} ms "
        f"| {t_lp / t_wor:.0f}x | |",
    ]
    for B in (4096, 256):
        P = np.empty((B, V))
        Q = np.empty((B, V))
        for b in range(B):
            P[b], Q[b] = llm_like_pair(V, rng)
        t = best_time(lambda: optimal_acceptance_batch(P, Q, n), repeat=repeat) / B
        out.append(
            f"| batch of {B}, per row, {numba.get_num_threads()} threads | {t * 1e6:.1f} us "
            f"| {t_lp * 1e3:.1f} ms | **{t_lp / t:.0f}x** | >= 5000x |"
        )
    return out


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--only", choices=("wide", "classes", "small", "position"), default=None)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    lines = [header("Speed floors: ratios to baselines measured in the same run")]
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
            "Small V = 60, n = 2 (wall time; speed-up over one HiGHS LP of the same pair):",
            "",
            "| call | ours | HiGHS LP | speed-up | target |",
            "|---|---|---|---|---|",
        ] + small_rows(rng, args.repeat)
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
