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
# The committed rows are bfloat16 (the run's identity). On a CPU without native bfloat16 matmuls
# (no AVX512-BF16/AMX, e.g. AVX2 machines) they run ~36x slower than float32 and the run would take
# days: refuse, unless FORCE=1. A float32 run must go to another folder (another identity):
#   RUN=<new folder> scripts/run_tree_report.sh --dtype float32
if [ "${FORCE:-0}" != 1 ] && [[ " $* " != *" --dtype float32 "* ]]; then
    python - <<'PY' || exit 2
import sys
from mdsd_ot.backends.torch import cpu_matmul_slowdown
from mdsd_ot.runs.inputs import SLOW_DTYPE_RATIO
slow = cpu_matmul_slowdown("bfloat16")
if slow > SLOW_DTYPE_RATIO:
    sys.exit(f"run_tree_report.sh: bfloat16 matmuls are {slow:.0f}x slower than float32 on this CPU "
             "(no AVX512-BF16/AMX); resume on a machine that has them, set FORCE=1, or start a "
             "float32 run in another folder: RUN=<folder> scripts/run_tree_report.sh --dtype float32")
PY
fi
HF_HUB_OFFLINE=1 exec mdsd-ot decode \
    --target "$MODELS/qwen2.5-coder-1.5b-instruct" --draft "$MODELS/qwen2.5-coder-0.5b-instruct" \
    --prompts humaneval --temperatures 0.3,0.7,1.0 --trees "1x4 2x4 4x4 4x3 4,2,2,1" \
    --sampling with_replacement,without_replacement,greedy,top_n \
    --drive "4,2,2,1/with_replacement" --driver traversal \
    --max-new-tokens 16 --dtype bfloat16 --threads 2 --out "$RUN" "$@"
