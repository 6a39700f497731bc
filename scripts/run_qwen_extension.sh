#!/bin/bash
# Extension run of docs/results/qwen_coder_humaneval.md (scripts/run_qwen_extension.py): the n = 1
# optimum and TV(p, q), the conditional-Poisson bound (n = 2 at every position, n = 3, 4 at every
# 10th) and the sequential bound for n = 3, 4 (every 10th), on the positions of the main run.
# Two shards in parallel (one CPU thread each), then a merge. Killed runs resume when restarted.
set -u
cd "$(dirname "$0")/.."
MODELS=${MODELS:-${XDG_CACHE_HOME:-$HOME/.cache}/mdsd_ot/models}  # as scripts/prepare_qwen_models.py
OUT=${OUT:-study_out_qwen_ext}
mkdir -p "$OUT/logs"
export HF_HUB_OFFLINE=1 NUMBA_NUM_THREADS=1 OMP_NUM_THREADS=1
start=$(date +%s)
for i in 0 1; do
  python scripts/run_qwen_extension.py --models "$MODELS" --shard $i/2 --out "$OUT/shard$i" \
    > "$OUT/logs/ext_shard$i.log" 2>&1 &
done
wait
end=$(date +%s)
python -m mdsd_ot.cli merge "$OUT/shard0" "$OUT/shard1" --out "$OUT/merged" \
  --title "Qwen2.5-Coder 1.5B / 0.5B on HumanEval: extension (n = 1, conditional Poisson)" \
  > "$OUT/logs/ext_merge.log" 2>&1
echo "wall seconds: $((end-start)) (started $(date -u -d @$start '+%F %T') UTC)" >> "$OUT/logs/ext_merge.log"
