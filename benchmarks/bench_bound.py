"""Benchmark the optimal-acceptance solvers against baselines measured in the same run.

Run: ``python benchmarks/bench_bound.py`` (prints a Markdown table). Ratios, not seconds, are the
result: these machines are shared and noisy.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numba
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import best_time, header, llm_like_pair  # noqa: E402

from mdsd_ot import optimal_acceptance, optimal_acceptance_batch  # noqa: E402
from mdsd_ot import primal  # noqa: E402
from mdsd_ot.drafts import get_scheme  # noqa: E402


def row(case, ours, base, base_name, target, accuracy=""):
    ratio = ours / base
    return f"| {case} | {ours * 1e3:.2f} | {base_name} {base * 1e3:.2f} | {ratio:.2f}x | {target} | {accuracy} |"


def main():
    rng = np.random.default_rng(0)
    lines = [header("Optimal acceptance: solver vs baselines"),
             "| case | ours (ms) | baseline (ms) | ratio | target | accuracy |",
             "|---|---|---|---|---|---|"]
    V = 152_064
    for T in (1.0, 0.3):
        p, q = llm_like_pair(V, rng, temperature=T)
        key = -(q / np.where(p > 0, p, 1e-300))
        t_sort = best_time(lambda: np.argsort(key))
        t_with = best_time(lambda: optimal_acceptance(p, q, 2))
        lines.append(row(f"with replacement, V={V}, n=2, T={T}", t_with, t_sort, "np.argsort", "<= 1.5x"))
        for n in (2, 4, 8):
            t = best_time(lambda: optimal_acceptance(p, q, n, sampling="without_replacement"), repeat=3)
            lines.append(row(f"without replacement, V={V}, n={n}, T={T}", t, t_sort, "np.argsort", "<= 5x"))
    # batch throughput: parallel vs one thread, same data
    B, V = 1024, 32_000
    P = np.empty((B, V))
    Q = np.empty((B, V))
    for b in range(B):
        P[b], Q[b] = llm_like_pair(V, rng)
    threads = numba.get_num_threads()
    t_par = best_time(lambda: optimal_acceptance_batch(P, Q, 2), repeat=3)
    numba.set_num_threads(1)
    t_one = best_time(lambda: optimal_acceptance_batch(P, Q, 2), repeat=3)
    numba.set_num_threads(threads)
    lines.append(f"| batch {B} x {V}, n=2, {threads} threads | {t_par * 1e3:.0f} | 1 thread {t_one * 1e3:.0f} "
                 f"| {t_one / t_par:.2f}x speed-up | >= 1.6x | |")
    # against the LP at V = 60, n = 2
    p, q = llm_like_pair(60, rng)
    lp_value = optimal_acceptance(p, q, 2, method="lp").value
    ours = optimal_acceptance(p, q, 2).value
    t_dual = best_time(lambda: optimal_acceptance(p, q, 2), repeat=20)
    t_lp = best_time(lambda: primal.solve_highs(primal.build_lp(p, q, 2, get_scheme("with_replacement"))), repeat=3)
    lines.append(row("with replacement, V=60, n=2 (vs LP)", t_dual, t_lp, "HiGHS LP", ">= 1000x faster",
                     f"|diff| = {abs(ours - lp_value):.1e}") + f" speed-up {t_lp / t_dual:.0f}x |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
