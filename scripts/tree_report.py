#!/usr/bin/env python
"""Tables of the tree-decoding report (docs/results/trees.md) from the committed rows.

    python scripts/tree_report.py docs/results/trees > docs/results/trees/tables.md

Sections: tokens per target call of every (temperature, shape, scheme, verifier) with intervals
clustered by problem; paired differences on the same calls (block vs token-level RRS on the chain,
traversal vs the scheme's node-wise verifier on trees, without vs with replacement, greedy vs i.i.d.);
the speedup model at the measured draft/target cost ratio. Every number comes from the rows
(``scripts/tree_rows.py`` verifies them against SHA256SUMS first).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from study_rows import load_rows  # noqa: E402

from mdsd_ot.decode.report import format_table, measured_cost_ratio, summarize  # noqa: E402
from mdsd_ot.intervals import cluster_mean_ci, interval_note  # noqa: E402
from mdsd_ot.trees import parse_shape  # noqa: E402

#: The scheme's own node-wise verifier, the baseline traversal is compared with.
NODE_WISE = {"with_replacement": "rrs", "without_replacement": "rrs_without_replacement", "top_n": "naive",
             "greedy": "greedy"}  # fmt: skip


def _fmt(mean, ci):
    return f"{mean:+.3f} ± {ci:.3f}" if ci == ci else f"{mean:+.3f}"


def paired(rows, left, right):
    """Mean of left - right over the calls where both exist, clustered by problem.

    ``left`` / ``right``: ``(tree, scheme, key)``; the two values of one call come from the rows of
    the same (record, T, call)."""
    index = {}
    for r in rows:
        index[(r["record"], r["T"], r["call"], r["tree"], r["scheme"])] = r
    out = {}
    for (rec, T, call, tree, scheme), r in index.items():
        if (tree, scheme) != left[:2]:
            continue
        other = index.get((rec, T, call, right[0], right[1]))
        if other is None or r.get(left[2]) is None or other.get(right[2]) is None:
            continue
        out.setdefault(T, []).append((r[left[2]] - other[right[2]], rec))
    return {
        T: cluster_mean_ci([d for d, _ in v], [g for _, g in v]) + (len(v),) for T, v in sorted(out.items())
    }


def comparisons(rows):
    trees = sorted({r["tree"] for r in rows}, key=lambda t: parse_shape(t).size)
    schemes = sorted({r["scheme"] for r in rows})
    temps = sorted({r["T"] for r in rows})
    lines = ["| comparison (same calls) | " + " | ".join(f"T={T:g}" for T in temps) + " |",
             "|---|" + "---|" * len(temps)]  # fmt: skip

    def add(label, left, right):
        res = paired(rows, left, right)
        if res:
            lines.append(
                f"| {label} | " + " | ".join(_fmt(*res[T][:2]) if T in res else "" for T in temps) + " |"
            )

    for tree in trees:
        if parse_shape(tree).is_chains and parse_shape(tree).branching[0] == 1:
            for s in ("with_replacement",):
                add(f"{tree} {s}: block - rrs", (tree, s, "exact:block"), (tree, s, "exact:rrs"))
    for tree in trees:
        for s in schemes:
            base = NODE_WISE.get(s)
            if base:
                add(
                    f"{tree} {s}: traversal - {base}",
                    (tree, s, "exact:traversal"),
                    (tree, s, f"exact:{base}"),
                )
    for tree in trees:
        add(
            f"{tree}: without - with replacement (traversal)",
            (tree, "without_replacement", "exact:traversal"),
            (tree, "with_replacement", "exact:traversal"),
        )
        add(
            f"{tree}: greedy - with replacement (traversal)",
            (tree, "greedy", "exact:traversal"),
            (tree, "with_replacement", "exact:traversal"),
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    folder = Path(argv[0] if argv else "docs/results/trees")
    rows = load_rows(folder)
    table = summarize(rows)
    calls = sum(1 for r in rows if "emitted" in r)
    problems = len({r["record"] for r in rows})
    c = measured_cost_ratio(rows)
    print(
        f"{len(rows)} rows, {calls} target calls, {problems} problems. " + interval_note(problems, "problem")
    )
    print()
    print("## Tokens per target call\n")
    print(format_table(table))
    print()
    print("## Paired differences (tokens per call, same calls)\n")
    print(comparisons(rows))
    print()
    print(f"## Speedup model at the measured cost ratio c = {c:.3f}\n")
    print(
        format_table(
            [dict(t, mean=t["speedup"], ci95=float("nan")) for t in table if t["speedup"] is not None]
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
