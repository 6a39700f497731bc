#!/bin/bash
# Full-coverage supplementary run: the without-replacement bound for n = 3, 4 at every position of
# the main study (54 problems, T = 0.3..1.0), with the with-replacement bound for paired differences.
set -u
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 NUMBA_NUM_THREADS=1 OMP_NUM_THREADS=1
MODELS=${MODELS:-${XDG_CACHE_HOME:-$HOME/.cache}/mdsd_ot/models}  # as scripts/prepare_qwen_models.py
OUT=${OUT:-study_out_qwen_wor34_full}
mkdir -p "$OUT"
COMMON="--target $MODELS/qwen2.5-coder-1.5b-instruct --draft $MODELS/qwen2.5-coder-0.5b-instruct \
 --prompts humaneval --max-records 54 --temperatures 0.3,0.5,0.7,0.9,1.0 --n 3,4 \
 --sampling with_replacement,without_replacement --verifiers '' --threads 1 --device cpu --no-progress"
start=$(date +%s)
for i in 0 1; do
  eval python -m mdsd_ot.cli study $COMMON --shard $i/2 --out "$OUT/shard$i" > "$OUT/shard$i.log" 2>&1 &
done
wait
end=$(date +%s)
python -m mdsd_ot.cli merge "$OUT/shard0" "$OUT/shard1" --out "$OUT/merged" \
  --title "Qwen2.5-Coder 1.5B / 0.5B on HumanEval: with vs without replacement, n = 3, 4, every position" > "$OUT/merge.log" 2>&1
echo "wall seconds: $((end-start))" >> "$OUT/merge.log"
