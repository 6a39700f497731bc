#!/usr/bin/env python
"""Wall-time estimates of the second edition's runs from a short trial (``run_tree_report2.sh trial``).

    python scripts/tree_trials.py TRIAL_FOLDER [--subset 64] [--chat-tokens 64] [--json OUT]

For every part folder in ``TRIAL_FOLDER`` (``main``, ``driven-*``, ``chat``): the mean seconds of a
target call (the rows' own timings: drafting, the target forward, every exact value) and the tokens a
call emits, then the full part's estimate

    hours = problems x temperatures x ceil(new tokens / tokens per call) x seconds per call / 3600

(problems: 164 for ``main``, ``--subset`` for the driven parts, 80 for ``chat``). The trial runs on
shared cores: the load average at the end of the trial is printed, and a second estimate rescales
every part by the first edition's mean call time on this machine class (AMD EPYC, AVX512-BF16, the
last 80 problems of ``docs/results/trees``) over the trial's ``main`` call time (same configuration
before the columns merged later: their cost is in the trial only once they exist).

``--model`` prints a second, trial-free estimate anchored on the first edition's rows on the
AVX512-BF16 machine (mean call 4.78 s: drafting 1.53 s, target 2.07 s, exact values 1.18 s, 89 target
positions on average): a union part keeps that call; a driven part scales drafting and the target
forward by the measured costs (``docs/results/trees2/cost.json``) of its one tree against the union
forest's, and the exact values by its share of the forest's nodes; calls per problem and temperature
scale with the new tokens (the first edition: 4.39 calls for 16 tokens).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

FULL = {"main": (164, 16), "chat": (80, None)}  # problems, new tokens (None: --chat-tokens)
TEMPERATURES = 3


def _call_rows(folder: Path) -> list[dict]:
    from mdsd_ot import _store

    return [r for r in _store.read_rows(folder) if "emitted" in r]


def first_edition_call_seconds() -> float:
    """Mean seconds per call of the first edition on the AVX512-BF16 machine (its last 80 problems)."""
    from study_rows import load_rows

    folder = ROOT / "docs" / "results" / "trees"
    order = [json.loads(x)["id"] for x in (folder / "done.txt").read_text().splitlines() if x]
    late = set(order[84:])
    calls = [r for r in load_rows(folder) if "emitted" in r and r["record"] in late]
    return math.fsum(r["t_draft"] + r["t_target"] + r["t_exact"] for r in calls) / len(calls)


#: (trees, tokens, problems, exact-value share) of each part for the trial-free model
PARTS = {
    "main": (None, 16, 164, 1.0),
    "driven-rrs": ("4,2,2,1", 16, None, 44 / 336),
    "driven-optimal": ("4,2,2,1", 16, None, 44 / 336),
    "driven-lookahead": ("4,2,2,1", 16, None, 44 / 336),
    "driven-traversal": ("4,2,2,1", 16, None, 44 / 336),
    "driven-block": ("1x4", 16, None, 4 / 336),
    "chat": (None, None, 80, 1.0),
}


def _forest_widths() -> list[int]:
    """Draft forward widths of the first edition's union forest per depth (nested i.i.d., without
    replacement and top_n [4,2,2,1] trees, plus greedy's five own trees), before de-duplication."""
    from mdsd_ot.trees import parse_shape

    union, greedy = parse_shape("4,2,2,1"), ["1x4", "2x4", "4x4", "4x3", "4,2,2,1"]
    widths = []
    for d in range(1, union.depth):
        w = 3 * math.prod(union.branching[:d])
        for g in greedy:
            sg = parse_shape(g)
            if d < sg.depth:
                w += math.prod(sg.branching[:d])
        widths.append(w)
    return widths


def model_estimates(subset: int, chat_tokens: int) -> list[dict]:
    """The trial-free estimate of every part (see the module docstring)."""
    from study_rows import load_rows
    from tree_cost import _interp, medians

    cost = json.loads((ROOT / "docs" / "results" / "trees2" / "cost.json").read_text())
    med = medians(cost)
    folder = ROOT / "docs" / "results" / "trees"
    order = [json.loads(x)["id"] for x in (folder / "done.txt").read_text().splitlines() if x]
    late = set(order[84:])
    rows = load_rows(folder)
    calls = [r for r in rows if "emitted" in r and r["record"] in late]
    mean = {k: math.fsum(r[k] for r in calls) / len(calls) for k in ("t_draft", "t_target", "t_exact")}
    pos = math.fsum(r["positions"] for r in calls) / len(calls)
    every = [r for r in rows if "emitted" in r]
    per_cell = len(every) / (len({r["record"] for r in every}) * TEMPERATURES)  # calls per (problem, T)
    pending = math.fsum(len(r["tokens"]) for r in every) / len(every)
    forest_draft = _interp(med["draft"], pending, "draft") + math.fsum(
        _interp(med["draft"], w, "draft") for w in _forest_widths()
    )
    forest_target = _interp(med["target"], pos, "target")
    out = []
    for part, (tree, tokens, problems, share) in PARTS.items():
        tokens = chat_tokens if tokens is None else tokens
        problems = subset if problems is None else problems
        if tree is None:
            per_call = mean["t_draft"] + mean["t_target"] + mean["t_exact"]
        else:
            from tree_cost import call_cost

            d, t = call_cost(tree, cost, pending)
            per_call = (
                mean["t_draft"] * d / forest_draft
                + mean["t_target"] * t / forest_target
                + mean["t_exact"] * share
            )
        n_calls = problems * TEMPERATURES * per_cell * tokens / 16
        out.append(
            {"part": part, "seconds_per_call": per_call, "calls": n_calls, "hours": n_calls * per_call / 3600}
        )
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trial")
    parser.add_argument("--subset", type=int, default=64)
    parser.add_argument("--chat-tokens", type=int, default=64)
    parser.add_argument("--json", default=None, help="also write the estimates as JSON")
    parser.add_argument("--model", action="store_true", help="also the trial-free estimate")
    args = parser.parse_args(argv)
    if args.model:
        print("Trial-free estimate (first edition's AVX512-BF16 calls scaled by the measured costs):")
        print("| part | s per call | calls | hours |")
        print("|---|---|---|---|")
        for r in model_estimates(args.subset, args.chat_tokens):
            print(f"| {r['part']} | {r['seconds_per_call']:.2f} | {r['calls']:.0f} | {r['hours']:.2f} |")
        print()
    trial = Path(args.trial)
    parts = sorted(p for p in trial.iterdir() if p.is_dir() and (p / "config.json").exists())
    if not parts:
        print(f"tree_trials.py: no decode folders in {trial}", file=sys.stderr)
        return 1
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    base = first_edition_call_seconds()
    est, main_call = [], None
    for p in parts:
        calls = _call_rows(p)
        if not calls:
            continue
        secs = [r["t_draft"] + r["t_target"] + r["t_exact"] for r in calls]
        per_call = math.fsum(secs) / len(secs)
        tokens = statistics.mean(r["emitted"] for r in calls)
        problems, new = FULL.get(p.name, (args.subset, 16))
        new = args.chat_tokens if new is None else new
        n_calls = problems * TEMPERATURES * math.ceil(new / tokens)
        row = {
            "part": p.name,
            "trial_calls": len(calls),
            "trial_problems": len({r["record"] for r in calls}),
            "seconds_per_call": per_call,
            "median_seconds_per_call": statistics.median(secs),
            "tokens_per_call": tokens,
            "full_problems": problems,
            "full_new_tokens": new,
            "full_calls": n_calls,
            "hours": n_calls * per_call / 3600,
        }
        if p.name == "main":
            main_call = per_call
        est.append(row)
    scale = base / main_call if main_call else float("nan")
    print(
        f"trial {trial}: load average {' '.join(load)}; first edition's mean call on AVX512-BF16 "
        f"{base:.2f} s, the trial's main call {main_call if main_call else float('nan'):.2f} s "
        f"(rescale x{scale:.2f})"
    )
    print("| part | trial calls | s per call (mean / median) | tokens per call | full calls | hours (trial) "
          "| hours (rescaled) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for r in est:
        r["hours_rescaled"] = r["hours"] * scale
        print(
            f"| {r['part']} | {r['trial_calls']} | {r['seconds_per_call']:.2f} / "
            f"{r['median_seconds_per_call']:.2f} | {r['tokens_per_call']:.2f} | {r['full_calls']} | "
            f"{r['hours']:.2f} | {r['hours_rescaled']:.2f} |"
        )
    total = math.fsum(r["hours"] for r in est)
    print(f"total: {total:.1f} h (trial), {total * scale:.1f} h (rescaled)")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"loadavg": load, "first_edition_call_s": base, "scale": scale, "parts": est}, indent=1
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
