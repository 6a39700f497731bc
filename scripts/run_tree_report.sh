#!/usr/bin/env bash
# The tree-decoding report's run (docs/results/trees.md): Qwen2.5-Coder 1.5B target / 0.5B draft, all
# 164 HumanEval problems, T = 0.3 / 0.7 / 1.0, five shapes x four schemes from one union forest per
# call, bfloat16 forwards, decoding driven by traversal verification of the [4,2,2,1] i.i.d. tree.
# Resumable: rerun the same command; a later session first unpacks the committed rows:
#   python scripts/tree_rows.py unpack docs/results/trees "$RUN"
# Models: python scripts/prepare_qwen_models.py (folders under $MODELS).
set -euo pipefail
cd "$(dirname "$0")/.."
MODELS="${MODELS:-${XDG_CACHE_HOME:-$HOME/.cache}/mdsd_ot/models}"
RUN="${RUN:-${XDG_CACHE_HOME:-$HOME/.cache}/mdsd_ot/runs/trees}"
HF_HUB_OFFLINE=1 exec mdsd-ot decode \
    --target "$MODELS/qwen2.5-coder-1.5b-instruct" --draft "$MODELS/qwen2.5-coder-0.5b-instruct" \
    --prompts humaneval --temperatures 0.3,0.7,1.0 --trees "1x4 2x4 4x4 4x3 4,2,2,1" \
    --schemes with_replacement,without_replacement,greedy,top_n \
    --drive "4,2,2,1/with_replacement" --driver traversal \
    --max-new-tokens 16 --dtype bfloat16 --threads 2 --out "$RUN" "$@"
