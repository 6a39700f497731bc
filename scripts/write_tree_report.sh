#!/usr/bin/env bash
# Regenerate docs/results/trees/tables.md (and the run's summary + plots) from the committed rows;
# with the argument trees2, docs/results/trees2/tables.md from the second edition's main part (the
# rows committed so far; its sandwich, new verifiers and bound rules are the tables' last sections).
#   scripts/write_tree_report.sh           # the first edition
#   scripts/write_tree_report.sh trees2    # the second edition's main part
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = trees2 ]; then
    python scripts/tree_rows.py check docs/results/trees2/main
    python scripts/tree_report.py docs/results/trees2/main > docs/results/trees2/tables.md
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
