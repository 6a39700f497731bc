#!/usr/bin/env bash
# Merge the shard folders written by examples/slurm/decode_array.sh into $OUT/merged (summary
# tables and plots, the same numbers as one process). Missing or unfinished shards are named in a
# warning; resubmit them and merge again. COST_RATIO sets the speedup model's draft/target cost
# ratio (as --cost-ratio does; default: measured from the rows' timings).
#
#   sbatch --dependency=afterany:<JOBID of the array> examples/slurm/decode_merge.sh
#
#SBATCH --job-name=mdsd-decode-merge
#SBATCH --cpus-per-task=1
#SBATCH --mem=8G
#SBATCH --time=00:30:00
#SBATCH --output=slurm-%j-merge.out
set -euo pipefail

OUT=${OUT:-decode_out}
"${PYTHON:-python3}" - "$OUT" "${COST_RATIO:-}" <<'PY'
import sys
from pathlib import Path

from mdsd_ot import _store
from mdsd_ot.decode import write_report
from mdsd_ot.decode.job import merge_shards

out, cost = Path(sys.argv[1]), sys.argv[2]
with _store.one_line_warnings("decode_merge.sh"):
    dest = merge_shards(sorted(out.glob("shard-*")), out / "merged")
    if cost:
        write_report(dest, cost_ratio=float(cost))
print((dest / "summary.md").read_text())
print(f"merged into {dest}")
PY
