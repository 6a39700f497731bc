#!/usr/bin/env python
"""Paired comparisons for a study folder (used for docs/results): scheme differences per position.

    python scripts/study_extras.py docs/results/qwen_coder_humaneval > paired_differences.md

The folder is a study folder (``positions.jsonl``) or a committed one (``positions.jsonl.xz``, read
and checked by ``scripts/study_rows.py``).

For each temperature and n, the mean per-position difference between two bounds (with its 95%
interval clustered by prompt, as in the summary) and how often it is positive / negative, plus how
often any verifier exceeds the bound of its own scheme by more than 1e-9 (it never should).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from study_rows import load_rows  # noqa: E402

from mdsd_ot.study import cluster_mean_ci, read_rows, verifier_scheme  # noqa: E402

PAIRS = [
    ("bound:without_replacement", "bound:with_replacement"),
    ("bound:greedy", "bound:with_replacement"),
    ("bound:without_replacement", "bound:greedy"),
]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    folder = Path(argv[0])
    rows = load_rows(folder) if (folder / "positions.jsonl.xz").exists() else read_rows(folder)
    temps = sorted({r["T"] for r in rows})
    ns = sorted(
        {
            int(k.rsplit("@", 1)[1])
            for r in rows
            for k in r
            if k.startswith("bound:") and not k.endswith(":se")
        }
    )
    print("| difference | n | T | mean | 95% CI half-width | positions | > 1e-9 | < -1e-9 |")
    print("|---|---|---|---|---|---|---|---|")
    for a, b in PAIRS:
        for n in ns:
            for T in temps:
                d = [
                    (r[f"{a}@{n}"] - r[f"{b}@{n}"], r["record"])
                    for r in rows
                    if r["T"] == T and r.get(f"{a}@{n}") is not None and r.get(f"{b}@{n}") is not None
                ]
                if not d:
                    continue
                mean, ci = cluster_mean_ci([x for x, _ in d], [g for _, g in d])
                pos = sum(1 for x, _ in d if x > 1e-9)
                neg = sum(1 for x, _ in d if x < -1e-9)
                print(
                    f"| {a.split(':')[1]} - {b.split(':')[1]} | {n} | {T:g} | {mean:.4f} | "
                    f"{ci:.4f} | {len(d)} | {pos} | {neg} |"
                )
    print()
    bad, total = 0, 0
    worst = 0.0
    for r in rows:
        for k, v in r.items():
            if not k.startswith("verifier:") or k.endswith(":se") or v is None:
                continue
            name, n = k[len("verifier:") :].rsplit("@", 1)
            b = r.get(f"bound:{verifier_scheme(name)}@{n}")
            if b is None:
                continue
            total += 1
            slack = 3 * r.get(k + ":se", 0.0) + 1e-9  # Monte Carlo values: 3 standard errors
            if v > b + slack:
                bad += 1
            worst = max(worst, v - b)
    print(
        f"verifier values checked against the bound of their own scheme: {total}; "
        f"above it (beyond 1e-9 or 3 Monte Carlo standard errors): {bad}; "
        f"largest (verifier - bound): {worst:.2e}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
