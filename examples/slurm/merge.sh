#!/usr/bin/env bash
# Merge the shard folders written by examples/slurm/study_array.sh into $OUT/merged (summary
# tables and plots, the same numbers as one process). Missing or unfinished shards are named in a
# warning; resubmit them and merge again.
#
#   sbatch --dependency=afterany:<JOBID of the array> examples/slurm/merge.sh
#
#SBATCH --job-name=mdsd-merge
#SBATCH --cpus-per-task=1
#SBATCH --mem=8G
#SBATCH --time=00:30:00
#SBATCH --output=slurm-%j-merge.out
set -euo pipefail

OUT=${OUT:-study_out}
mdsd-ot merge "$OUT"/shard-* --out "$OUT/merged" --title "mdsd_ot study"
