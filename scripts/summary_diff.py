#!/usr/bin/env python
"""Compare two study summaries (``summary.json``): the cells that changed most between two runs.

    git show 5de68c1:docs/results/qwen_coder_humaneval/summary.json > old_summary.json  # earlier run
    python scripts/summary_diff.py old_summary.json docs/results/qwen_coder_humaneval/summary.json

Cells are (method, n, T). Prints, as Markdown: how many cells each summary has and how many they
share, the cells present in only one, how many shared cells have the same position count, the largest
absolute differences of the mean and of the 95% half-width, and the cells with the largest mean
differences (with their half-widths, so that a difference can be set against the sampling error).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _cells(path):
    return {(t["method"], t["n"], t["T"]): t for t in json.loads(Path(path).read_text())}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    old, new = _cells(argv[0]), _cells(argv[1])
    top = int(argv[2]) if len(argv) > 2 else 10
    shared = sorted(set(old) & set(new))
    only_old = sorted(set(old) - set(new))
    only_new = sorted(set(new) - set(old))
    same_count = sum(old[k]["count"] == new[k]["count"] for k in shared)
    print(
        f"Cells (method, n, T): {len(old)} before, {len(new)} now, {len(shared)} in both; "
        f"{same_count} of them with the same number of positions.\n"
    )
    if only_old:
        print("Only before: " + ", ".join(f"{m}@{n} T={T:g}" for m, n, T in only_old) + "\n")
    if only_new:
        print("Only now: " + ", ".join(f"{m}@{n} T={T:g}" for m, n, T in only_new) + "\n")
    dm = {k: new[k]["mean"] - old[k]["mean"] for k in shared}
    dc = {k: new[k]["ci95"] - old[k]["ci95"] for k in shared}
    km = max(shared, key=lambda k: abs(dm[k]))
    kc = max(shared, key=lambda k: abs(dc[k]))
    print(
        f"Largest |mean now − mean before|: {abs(dm[km]):.2e} ({km[0]}, n = {km[1]}, T = {km[2]:g}); "
        f"largest |half-width now − before|: {abs(dc[kc]):.2e} ({kc[0]}, n = {kc[1]}, "
        f"T = {kc[2]:g}).\n"
    )
    exact = sum(dm[k] == 0 for k in shared)
    small = sum(abs(dm[k]) <= 1e-12 for k in shared)
    print(f"Means identical in {exact} cells and within 1e-12 in {small} of {len(shared)}.\n")
    print("| method | n | T | before | now | now − before | positions before / now |")
    print("|---|---|---|---|---|---|---|")
    for k in sorted(shared, key=lambda k: -abs(dm[k]))[:top]:
        o, w = old[k], new[k]
        print(
            f"| {k[0]} | {k[1]} | {k[2]:g} | {o['mean']:.6f} ± {o['ci95']:.6f} | "
            f"{w['mean']:.6f} ± {w['ci95']:.6f} | {dm[k]:+.2e} | {o['count']:,} / {w['count']:,} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
