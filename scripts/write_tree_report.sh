#!/usr/bin/env bash
# Regenerate docs/results/trees/tables.md (and the run's summary + plots) from the committed rows;
# with the argument trees2, docs/results/trees2/tables.md from the second edition's main part (the
# rows committed so far; its sandwich, new verifiers and bound rules are the tables' last sections,
# then every committed driven part against the main part's driver positions; the chat part's rows
# committed so far into docs/results/trees2/chat_tables.md).
#   scripts/write_tree_report.sh           # the first edition
#   scripts/write_tree_report.sh trees2    # the second edition's main part
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = trees2 ]; then
    python scripts/tree_rows.py check docs/results/trees2/main
    python scripts/tree_report.py docs/results/trees2/main > docs/results/trees2/tables.md
    if [ -d docs/results/trees2/chat ]; then  # MT-Bench first turns, 64 new tokens: the same tables
        python scripts/tree_rows.py check docs/results/trees2/chat
        python scripts/tree_report.py docs/results/trees2/chat > docs/results/trees2/chat_tables.md
    fi
    driven=(docs/results/trees2/driven-*/)
    if [ -d "${driven[0]}" ]; then  # each verifier decoded on its own, against the driver's positions
        for d in "${driven[@]}"; do python scripts/tree_rows.py check "$d"; done
        cost=docs/results/trees2/cost_wall2.json
        # each driver's verification per call, CPU ms on fresh [4,2,2,1] trees / 1x4 chains at full V
        # (mean of 16; docs/performance.md#the-lookahead-verifier-benchmarksbench_lookaheadpy)
        verify=rrs=4,optimal=49,traversal=4,lookahead=177,block=3
        { printf '\n## Each verifier decoded on its own (scripts/tree_driven.py)\n\n'
          python scripts/tree_driven.py "${driven[@]}" --main docs/results/trees2/main --cost "$cost" \
              --verify-ms "$verify"
        } >> docs/results/trees2/tables.md
    fi
    exit 0
fi
[ $# -eq 0 ] || { echo "write_tree_report.sh: unknown argument '$1' (none: the first edition; trees2: the second)" >&2; exit 2; }
python scripts/tree_rows.py check
python scripts/tree_report.py docs/results/trees > docs/results/trees/tables.md
tmp="$(mktemp -d)"
python scripts/tree_rows.py unpack docs/results/trees "$tmp/run" >/dev/null
python -c "import sys; from mdsd_ot.decode import write_report; write_report(sys.argv[1])" "$tmp/run"
cp "$tmp/run"/block_efficiency_vs_*.png docs/results/trees/
rm -rf "$tmp"
