"""Benchmark the full-vocabulary optimal verifier (i.i.d. drafts).

Run: ``python benchmarks/bench_optimal_verifier.py [--quick]`` (prints Markdown tables). ``prepare``
(the per-(p, q) work, input validation included) is reported as a ratio to ``np.argsort`` of a vector
of the same size measured in the same run: both are timed in CPU time of this process
(``time.process_time``), interleaved, best of N, so that other load on a shared machine inflates
neither side alone. ``prepare`` runs repeatedly, as in a decoder (one per position), so its scratch
arrays are reused. ``verify`` (one draft set, the full public call with its input checks) in
microseconds of CPU time. The last column checks the value: the verifier's exact acceptance against the dual's
``alpha*``.

Targets: prepare <= 3x argsort (with replacement), verify <= 50 us at n <= 8.

A second table times the routes to the chain's token order (``verifiers.optimal.chain_token_order``:
``np.argsort(keys, kind="stable")`` exactly): the radix sort ``chain_order``, numpy's argsort with its
ties put in index order (``index_order_ties``), numpy's stable argsort, against numpy's default
(unstable) argsort, and names the route this process's one-time timing chose.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import header, llm_like_pair  # noqa: E402

from mdsd_ot import optimal_acceptance  # noqa: E402
from mdsd_ot.drafts import get_scheme  # noqa: E402
from mdsd_ot.verifiers import VERIFIERS  # noqa: E402


def best_process_times(fns, repeat: int) -> list[float]:
    """Best CPU time (seconds) of each callable over ``repeat`` interleaved rounds, after a warm-up."""
    for fn in fns:
        fn()
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            t0 = time.process_time()
            fn()
            best[i] = min(best[i], time.process_time() - t0)
    return best


def main(quick: bool = False) -> None:
    rng = np.random.default_rng(0)
    sizes = [32_000, 152_064]
    ns = [1, 2, 4, 8]
    opt = VERIFIERS["optimal"]
    print(header("Optimal verifier at full vocabulary size (i.i.d. drafts)"))
    print("| V | n | argsort (ms, CPU) | prepare / argsort | verify (us) | acceptance - alpha* |")
    print("|---|---|---|---|---|---|")
    for V in sizes:
        p, q = llm_like_pair(V, rng)
        fns = [lambda p=p: np.argsort(p)]
        fns += [lambda p=p, q=q, n=n: opt.prepare(p, q, n) for n in ns]
        t_sort, *t_preps = best_process_times(fns, repeat=5 if quick else 25)
        for n, t_prep in zip(ns, t_preps):
            prepared = opt.prepare(p, q, n)
            drafts = get_scheme("with_replacement").sample_batch(prepared.q, n, 2000, rng)
            g = np.random.default_rng(1)
            for x in drafts[:50]:
                prepared.verify(x, g)  # warm-up
            t0 = time.process_time()
            for x in drafts:
                prepared.verify(x, g)
            t_verify = (time.process_time() - t0) / drafts.shape[0]
            gap = prepared.acceptance() - optimal_acceptance(p, q, n).value
            print(
                f"| {V:,} | {n} | {t_sort * 1e3:.2f} | {t_prep / t_sort:.2f} | {t_verify * 1e6:.1f} | "
                f"{gap:.1e} |"
            )


def order_routes(quick: bool = False) -> None:
    from mdsd_ot._kernels.optimal import chain_keys, chain_order
    from mdsd_ot.verifiers.optimal import _CHAIN_SORT, index_order_ties

    rng = np.random.default_rng(1)
    print(
        "\n| V | argsort (ms, CPU) | radix (chain_order) / argsort | argsort + ties / argsort "
        "| stable argsort / argsort | route chosen |"
    )
    print("|---|---|---|---|---|---|")
    for V in (32_000, 152_064):
        p, q = llm_like_pair(V, rng)
        p, q = p / p.sum(), q / q.sum()
        keys = chain_keys(p, q, np.empty(V))
        want = np.argsort(keys, kind="stable")
        assert np.array_equal(chain_order(keys), want)
        assert np.array_equal(index_order_ties(np.argsort(keys), keys), want)
        fns = [
            lambda: np.argsort(keys),
            lambda: chain_order(keys),
            lambda: index_order_ties(np.argsort(keys), keys),
            lambda: np.argsort(keys, kind="stable"),
        ]
        t_sort, *ts = best_process_times(fns, repeat=5 if quick else 25)
        VERIFIERS["optimal"].prepare(p, q, 2)  # the first large prepare of the process picks its route
        ratios = " | ".join(f"{t / t_sort:.2f}" for t in ts)
        print(f"| {V:,} | {t_sort * 1e3:.2f} | {ratios} | {_CHAIN_SORT.get('how', '-')} |")


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
    order_routes(quick="--quick" in sys.argv)
