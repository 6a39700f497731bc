#!/usr/bin/env bash
# Regenerate docs/results/trees/tables.md (and the run's summary + plots) from the committed rows.
set -euo pipefail
cd "$(dirname "$0")/.."
python scripts/tree_rows.py check
python scripts/tree_report.py docs/results/trees > docs/results/trees/tables.md
tmp="$(mktemp -d)"
python scripts/tree_rows.py unpack docs/results/trees "$tmp/run" >/dev/null
python -c "import sys; from mdsd_ot.decode import write_report; write_report(sys.argv[1])" "$tmp/run"
cp "$tmp/run"/block_efficiency_vs_*.png docs/results/trees/
rm -rf "$tmp"
