"""Paired differences of the full-coverage n = 3, 4 run: without - with replacement and
without replacement - greedy (greedy from the main run), with 95% intervals clustered by problem.

Usage: python scripts/paired_wor34.py WOR34_MERGED/positions.jsonl MAIN_MERGED/positions.jsonl

The interval is the one of every study summary (``mdsd_ot.study.cluster_mean_ci``, with the
small-sample factor g / (g - 1) for g problems). The table committed in docs/results was printed by an
earlier version of this script that left that factor out (intervals narrower by sqrt(53/54), 0.9%).
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mdsd_ot.study import cluster_mean_ci  # noqa: E402


def main(wor34_path, main_path):
    rows = [json.loads(line) for line in open(wor34_path)]
    main_rows = {}
    for line in open(main_path):
        r = json.loads(line)
        main_rows[(r["record"], r["pos"], r["T"])] = r
    temps = sorted({r["T"] for r in rows})
    print("| difference of bounds | n | " + " | ".join(f"T={t:g}" for t in temps) + " |")
    print("|---|---|" + "---|" * len(temps))
    for n in (3, 4):
        for label, other in (("without − with", None), ("without − greedy", "greedy")):
            cells, counts = [], []
            for T in temps:
                sel = [r for r in rows if r["T"] == T]
                if other is None:
                    d = [r[f"bound:without_replacement@{n}"] - r[f"bound:with_replacement@{n}"] for r in sel]
                else:
                    d = [
                        r[f"bound:without_replacement@{n}"]
                        - main_rows[(r["record"], r["pos"], T)][f"bound:greedy@{n}"]
                        for r in sel
                    ]
                m, c = cluster_mean_ci(d, [r["record"] for r in sel])
                cells.append(f"{m:+.4f} ± {c:.4f}")
                counts.append(f"{sum(x > 1e-12 for x in d):,} / {sum(x < -1e-12 for x in d):,}")
            print(f"| {label} | {n} | " + " | ".join(cells) + " |")
            print(f"| positions higher / lower | {n} | " + " | ".join(counts) + " |")


if __name__ == "__main__":
    main(*sys.argv[1:3])
