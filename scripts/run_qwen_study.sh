#!/bin/bash
# The real study of docs/results/qwen_coder_humaneval.md: Qwen2.5-Coder 1.5B (target) / 0.5B (draft)
# on the first 54 HumanEval problems (prompt + canonical solution, teacher forcing), full vocabulary.
# Prerequisite: python scripts/prepare_qwen_models.py   (into $MODELS or the user cache; checks the
# GGUF sha256; --help states where the quantized models come from)
# Two shards in parallel (one CPU thread each), then a merge. Killed runs resume when restarted.
set -u
MODELS=${MODELS:-${XDG_CACHE_HOME:-$HOME/.cache}/mdsd_ot/models}  # as scripts/prepare_qwen_models.py
OUT=${OUT:-study_out_qwen}
LOGS=${LOGS:-$OUT/logs}
mkdir -p "$LOGS"
export HF_HUB_OFFLINE=1 NUMBA_NUM_THREADS=1 OMP_NUM_THREADS=1
COMMON="--target $MODELS/qwen2.5-coder-1.5b-instruct --draft $MODELS/qwen2.5-coder-0.5b-instruct \
 --prompts humaneval --max-records 54 --temperatures 0.3,0.5,0.7,0.9,1.0 --n 2,3,4 \
 --every bound:without_replacement@3=0,bound:without_replacement@4=0,verifier:rrs_without_replacement=5,verifier:rrs_without_replacement@3=10,verifier:rrs_without_replacement@4=10 \
 --mc-samples 2000 --threads 1 --device cpu"
start=$(date +%s)
for i in 0 1; do
  python -m mdsd_ot.cli study $COMMON --shard $i/2 --out "$OUT/shard$i" > "$LOGS/study_shard$i.log" 2>&1 &
done
wait
end=$(date +%s)
python -m mdsd_ot.cli merge "$OUT/shard0" "$OUT/shard1" --out "$OUT/merged" \
  --title "Qwen2.5-Coder 1.5B / 0.5B on HumanEval" > "$LOGS/study_merge.log" 2>&1
echo "wall seconds: $((end-start))" >> "$LOGS/study_merge.log"

# Supplementary run (SUPPLEMENTARY=1 only; superseded by scripts/run_qwen_wor34_full.sh, not rerun
# for the regenerated report): the without-replacement bound for n = 3, 4 at T = 0.7, 1.0, first 8
# positions of the first 24 problems, 15 minutes at most per shard.
[ "${SUPPLEMENTARY:-0}" = 1 ] || exit 0
SUPP="--target $MODELS/qwen2.5-coder-1.5b-instruct --draft $MODELS/qwen2.5-coder-0.5b-instruct \
 --prompts humaneval --max-records 24 --max-positions-per-record 8 --temperatures 0.7,1.0 --n 3,4 \
 --sampling with_replacement,without_replacement --verifiers rrs,spectr,rrs_without_replacement \
 --mc-samples 2000 --threads 1 --device cpu"
for i in 0 1; do
  timeout 900 python -m mdsd_ot.cli study $SUPP --shard $i/2 --out "${OUT}_wor34/shard$i" > "$LOGS/wor34_shard$i.log" 2>&1 &
done
wait
python -m mdsd_ot.cli merge "${OUT}_wor34/shard0" "${OUT}_wor34/shard1" --out "${OUT}_wor34/merged" \
  --title "Qwen2.5-Coder 1.5B / 0.5B on HumanEval: without replacement, n = 3, 4" > "$LOGS/wor34_merge.log" 2>&1
