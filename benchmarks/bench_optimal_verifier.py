"""Benchmark the full-vocabulary optimal verifier (i.i.d. drafts).

Run: ``python benchmarks/bench_optimal_verifier.py [--quick]`` (prints a Markdown table). ``prepare``
(the per-(p, q) work) is reported as a ratio to ``np.argsort`` of a vector of the same size measured
in the same run; ``verify`` (one draft set, the full public call with its input checks) in
microseconds. The last columns check the value: the verifier's exact acceptance against the dual's
``alpha*``.

Targets from the issue: prepare <= 3x argsort (with replacement), verify <= 50 us at n <= 8.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import best_time, header, llm_like_pair  # noqa: E402

from mdsd_ot import optimal_acceptance  # noqa: E402
from mdsd_ot.drafts import get_scheme  # noqa: E402
from mdsd_ot.verifiers import VERIFIERS  # noqa: E402


def main(quick: bool = False) -> None:
    rng = np.random.default_rng(0)
    sizes = [32_000, 152_064]
    ns = [2, 4, 8]
    opt = VERIFIERS["optimal"]
    print(header("Optimal verifier at full vocabulary size (i.i.d. drafts)"))
    print("| V | n | argsort (ms) | prepare / argsort | verify (us) | acceptance - alpha* |")
    print("|---|---|---|---|---|---|")
    for V in sizes:
        p, q = llm_like_pair(V, rng)
        t_sort = best_time(lambda p=p: np.argsort(p), repeat=3 if quick else 7)
        for n in ns:
            t_prep = best_time(lambda p=p, q=q, n=n: opt.prepare(p, q, n), repeat=2 if quick else 5)
            prepared = opt.prepare(p, q, n)
            drafts = get_scheme("with_replacement").sample_batch(prepared.q, n, 2000, rng)
            g = np.random.default_rng(1)
            for x in drafts[:50]:
                prepared.verify(x, g)  # warm-up
            t0 = time.perf_counter()
            for x in drafts:
                prepared.verify(x, g)
            t_verify = (time.perf_counter() - t0) / drafts.shape[0]
            gap = prepared.acceptance() - optimal_acceptance(p, q, n).value
            print(
                f"| {V:,} | {n} | {t_sort * 1e3:.1f} | {t_prep / t_sort:.1f} | {t_verify * 1e6:.1f} | "
                f"{gap:.1e} |"
            )


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
