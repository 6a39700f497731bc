#!/usr/bin/env bash
# One mdsd_ot tree-decoding run split over a Slurm job array: array task i decodes shard i/N of the
# prompts in its own folder $OUT/shard-i; examples/slurm/decode_merge.sh then merges the folders
# (README: Scaling out).
#
#   sbatch examples/slurm/decode_array.sh                    # N = 8 tasks, one GPU each
#   sbatch --dependency=afterany:<JOBID> examples/slurm/decode_merge.sh
#
# A task that fails, times out or is preempted resumes its own folder when it runs again
# (--requeue, or resubmit the task ids that failed). When resubmitting only some ids, pass the
# number of shards explicitly, since SLURM_ARRAY_TASK_COUNT then counts the resubmitted ids only:
#   sbatch --array=3,5 --export=ALL,SHARDS=8 examples/slurm/decode_array.sh
# (a wrong N is refused anyway: each folder records its shard i/N).
#
#SBATCH --job-name=mdsd-decode
#SBATCH --array=0-7
#SBATCH --gres=gpu:1
#SBATCH --cpus-per-task=4
#SBATCH --mem=32G
#SBATCH --time=04:00:00
#SBATCH --requeue
#SBATCH --output=slurm-%A_%a.out
set -euo pipefail

TARGET=${TARGET:-${MODELS:?set MODELS (folder of the model folders) or TARGET and DRAFT}/qwen2.5-coder-1.5b-instruct}
DRAFT=${DRAFT:-$MODELS/qwen2.5-coder-0.5b-instruct}
OUT=${OUT:-decode_out}
# the run's parameters: the same for every task (a task with other ones is refused by its folder);
# the tree shapes apart, since they are separated by spaces
TREES=${TREES:-1x4 2x4 4x4 4x3 4,2,2,1}
read -r -a DECODE <<< "${DECODE_ARGS:---prompts humaneval --temperatures 0.3,0.7,1.0 --sampling with_replacement,top_n --max-new-tokens 64 --device auto}"
N=${SHARDS:-${SLURM_ARRAY_TASK_COUNT:?run as a Slurm array task, or set SLURM_ARRAY_TASK_COUNT}}
i=${SLURM_ARRAY_TASK_ID:?run as a Slurm array task, or set SLURM_ARRAY_TASK_ID}

export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1}
mdsd-ot decode --target "$TARGET" --draft "$DRAFT" --trees "$TREES" "${DECODE[@]}" \
    --threads "${SLURM_CPUS_PER_TASK:-1}" --shard "$i/$N" --out "$OUT/shard-$i" --no-progress
