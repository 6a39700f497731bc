#!/usr/bin/env python
"""Gap to the bound against n, from a study's ``summary.json`` (no per-position rows needed).

    python scripts/gap_vs_n.py docs/results/qwen_coder_humaneval/summary.json

Prints one Markdown row per verifier and temperature with the mean gap (bound of the verifier's own
scheme minus its acceptance, paired per position) and its 95% interval clustered by problem, one column
per n. Each cell is paired within its n; the cells of different n are separate estimates on the same
positions (their difference is not a paired estimate, which needs the per-position rows).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ORDER = ("naive", "rrs", "spectr", "rrs_without_replacement", "greedy", "spechub")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    table = json.loads(Path(argv[0]).read_text())
    gaps = [t for t in table if t["method"].startswith("gap:")]
    ns = sorted({t["n"] for t in gaps})
    temps = sorted({t["T"] for t in gaps})
    names = sorted(
        {t["method"][4:] for t in gaps}, key=lambda v: (ORDER.index(v) if v in ORDER else len(ORDER), v)
    )
    index = {(t["method"][4:], t["T"], t["n"]): t for t in gaps}
    print("| verifier | T | " + " | ".join(f"n = {n}" for n in ns) + " | positions |")
    print("|---|---|" + "---|" * len(ns) + "---|")
    for name in names:
        for T in temps:
            cells, counts = [], set()
            for n in ns:
                t = index.get((name, T, n))
                cells.append("" if t is None else f"{t['mean']:.4f} ± {t['ci95']:.4f}")
                if t is not None:
                    counts.add(f"{t['count']:,}")
            if any(cells):
                print(f"| {name} | {T:g} | " + " | ".join(cells) + f" | {' / '.join(sorted(counts))} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
