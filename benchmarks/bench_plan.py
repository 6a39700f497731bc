"""Benchmark the per-position evaluation plan (mdsd_ot.plan) against np.argsort of the same vector.

Run: ``python benchmarks/bench_plan.py [--batch 64]`` (prints a Markdown table). Times are CPU times
(``time.process_time``, best of several runs; the argsort baseline measured the same way in the same
run), since wall time on a shared machine mostly measures the other jobs. One position at
V = 151,936 (an LLM-like pair, benchmarks/_common.py), n = 2, 3, 4:

* the study's bounds (with replacement, without replacement n = 2, greedy, hub) and every closed-form
  verifier (naive, rrs, spectr, greedy, spechub, RSD n = 2), certificates re-checked, as a ratio to one
  ``np.argsort`` of the same vector measured in the same run (target <= 3x);
* conditional Poisson n = 2, 3, 4 on its own (it is not a study scheme);
* sequential sampling without replacement n = 3, 4: what they add to the plan of the closed forms
  (target <= 5x), and on their own (the plan's sort and tables included);
* the full-vocabulary optimal verifier for i.i.d. drafts, n = 2, 3, 4, through the plan's hook;
* the one-at-a-time API for the same quantities (what the study did before the plan);
* batched torch on CPU, B positions at once (``evaluate_batch`` plus the numpy plan for nothing else),
  positions per second beside the numpy plan looped over the same positions.

Accuracy: the largest difference between the plan and the one-at-a-time API over every value.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import best_cpu_time, header, llm_like_pair  # noqa: E402

from mdsd_ot import optimal_acceptance, verifier_acceptance  # noqa: E402
from mdsd_ot.plan import _evaluate  # noqa: E402

V = 151_936
NS = (2, 3, 4)
STUDY_SCHEMES = ("with_replacement", "without_replacement", "greedy", "hub")
VERIFIERS = ("naive", "rrs", "spectr", "greedy", "spechub", "rrs_without_replacement")


def _closed_form_keys():
    bounds = [(s, n) for s in STUDY_SCHEMES for n in NS if (s != "hub" or n == 2)]
    bounds = [(s, n) for s, n in bounds if not (s == "without_replacement" and n >= 3)]
    pairs = [(v, n) for v in VERIFIERS for n in NS if (v != "spechub" or n == 2)]
    pairs = [(v, n) for v, n in pairs if not (v == "rrs_without_replacement" and n >= 3)]
    return bounds, pairs


def _api(p, q, bounds, pairs):
    for s, n in bounds:
        optimal_acceptance(p, q, n, sampling=s)
    for v, n in pairs:
        verifier_acceptance(v, p, q, n)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    bounds, pairs = _closed_form_keys()
    cp = [("conditional_poisson", n) for n in NS]
    wor = [("without_replacement", n) for n in (3, 4)]
    lines = [
        header("Evaluation plan: one position, every bound and verifier, vs np.argsort"),
        "| V = 151,936, n = 2, 3, 4 | T | plan ms | argsort ms | ratio | one-at-a-time API ratio | target |",
        "|---|---|---|---|---|---|---|",
    ]
    worst = 0.0
    for T in (1.0, 0.3):
        p, q = llm_like_pair(V, rng, temperature=T)
        t_sort = best_cpu_time(lambda: np.argsort(q), repeat=args.repeat)
        t_plan = best_cpu_time(lambda: _evaluate(p, q, bounds, pairs), repeat=args.repeat)
        t_api = best_cpu_time(lambda: _api(p, q, bounds, pairs), repeat=2)
        t_cp = best_cpu_time(lambda: _evaluate(p, q, cp, []), repeat=args.repeat)
        t_wor = best_cpu_time(lambda: _evaluate(p, q, wor, []), repeat=args.repeat)
        # what n = 3, 4 add to the plan of the closed forms (target: "<= 5x more")
        t_with = best_cpu_time(lambda: _evaluate(p, q, bounds + wor, pairs), repeat=args.repeat)
        t_add = t_with - t_plan
        t_wor_api = best_cpu_time(lambda: _api(p, q, wor, []), repeat=2)
        opt = [("optimal", n) for n in NS]
        t_opt = best_cpu_time(lambda: _evaluate(p, q, [], opt), repeat=2)
        res = _evaluate(p, q, bounds + cp + wor, pairs + opt)
        for (s, n), v in res.bounds.items():
            worst = max(worst, abs(v - optimal_acceptance(p, q, n, sampling=s).value))
        for (name, n), r in res.verifiers.items():
            worst = max(worst, abs(r.value - verifier_acceptance(name, p, q, n).value))
        r = t_sort
        lines += [
            f"| {len(bounds)} bounds + {len(pairs)} verifiers (closed forms) | {T} | {t_plan * 1e3:.1f} | "
            f"{r * 1e3:.2f} | **{t_plan / r:.1f}x** | {t_api / r:.1f}x | <= 3x |",
            f"| conditional Poisson n = 2, 3, 4 | {T} | {t_cp * 1e3:.1f} | {r * 1e3:.2f} | {t_cp / r:.1f}x | "
            f"| reported |",
            f"| without replacement n = 3, 4 on top of the closed forms | {T} | {t_add * 1e3:.1f} | "
            f"{r * 1e3:.2f} | **{t_add / r:.1f}x** | {t_wor_api / r:.1f}x | <= 5x |",
            f"| without replacement n = 3, 4 alone (the plan's sort and tables included) | {T} | "
            f"{t_wor * 1e3:.1f} | {r * 1e3:.2f} | {t_wor / r:.1f}x | | reported |",
            f"| optimal verifier (i.i.d., full V) n = 2, 3, 4 | {T} | {t_opt * 1e3:.1f} | {r * 1e3:.2f} | "
            f"{t_opt / r:.1f}x | | reported |",
        ]
    lines.append("")
    lines.append(f"largest |plan - one-at-a-time API| over every value above: {worst:.1e}")
    lines.append("")
    try:
        import torch

        from mdsd_ot.backends.torch import evaluate_batch
    except ImportError:
        lines.append("torch not installed: batched figures skipped")
        print("\n".join(lines))
        return
    B = args.batch
    pairs_np = [llm_like_pair(V, rng, temperature=1.0) for _ in range(B)]
    P = np.array([a for a, _ in pairs_np])
    Q = np.array([b for _, b in pairs_np])
    Pt, Qt = torch.tensor(P), torch.tensor(Q)
    evaluate_batch(Pt[:2], Qt[:2], NS)  # warm-up
    schemes = ("with_replacement", "without_replacement", "greedy", "hub")
    t_torch = best_cpu_time(lambda: evaluate_batch(Pt, Qt, NS, schemes=schemes), repeat=2)
    t_loop = best_cpu_time(lambda: [_evaluate(P[b], Q[b], bounds, pairs) for b in range(B)], repeat=2)
    lines += [
        f"Batched, B = {B} positions at V = 151,936, the same closed-form bounds and verifiers, "
        f"{torch.get_num_threads()} torch threads:",
        "",
        "| path | positions / CPU-second |",
        "|---|---|",
        f"| torch `evaluate_batch` on CPU (float64) | {B / t_torch:.1f} |",
        f"| numpy plan, loop over positions | {B / t_loop:.1f} |",
        "| torch on CUDA | untested (no GPU here) |",
    ]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
