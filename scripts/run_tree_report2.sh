#!/usr/bin/env bash
# The tree report's second edition (docs/results/trees.md): the runs, one folder per part under $RUNS.
#
#   scripts/run_tree_report2.sh PART [extra mdsd-ot decode arguments]
#
# PART:
#   main              the first edition's union run again (164 HumanEval problems, T = 0.3 / 0.7 / 1.0,
#                     five shapes x four schemes, 16 new tokens, traversal driving the [4,2,2,1] i.i.d.
#                     tree) with every verifier the registry has now (lookahead, gbv in the K x L cells
#                     once merged) and the certified bound column ($BOUND_ARGS)
#   driven-rrs        [4,2,2,1] i.i.d. decoded by rrs on its own          } first $SUBSET problems,
#   driven-optimal    [4,2,2,1] i.i.d. decoded by node-wise optimal        } T = 0.3 / 0.7 / 1.0,
#   driven-lookahead  [4,2,2,1] i.i.d. decoded by lookahead               } 16 new tokens; every
#   driven-traversal  [4,2,2,1] i.i.d. decoded by traversal (same config)  } valid verifier evaluated
#   driven-block      1x4 i.i.d. chains decoded by block verification      } at the driver's positions
#   chat              MT-Bench's 80 first turns as chat prompts (scripts/prepare_chat_prompts.py), the
#                     main cells, $CHAT_TOKENS (64) new tokens at $CHAT_TEMPERATURES (0.7,1.0)
#   cost              two-thread wall-time forward costs on this machine, the baseline of real decoding's
#                     speedup (scripts/tree_cost.py measure --threads 2 --basis wall; $RUNS/cost_wall2.json;
#                     scripts/tree_driven.py --cost), best run while the machine is otherwise idle
#   all               every part above in turn (each resumes where it stopped)
#   trial             every part on $TRIAL_RECORDS problems and $TRIAL_TOKENS tokens in a scratch
#                     folder, then the wall-time estimate of each full part (scripts/tree_trials.py)
#
# Resumable: rerun the same command; a later session first unpacks the committed rows of a part:
#   python scripts/tree_rows.py unpack docs/results/trees2/<part> "$RUNS/<part>"
# and commits them every 30 minutes while it runs:
#   python scripts/tree_rows.py export "$RUNS/<part>" docs/results/trees2/<part>
# Background-safe: run it with nohup (nohup scripts/run_tree_report2.sh all > trees2.log 2>&1 &); a
# part's folder is locked (flock) so that a second copy refuses instead of writing the same rows.
# Models: python scripts/prepare_qwen_models.py ($MODELS). Chat prompts:
# python scripts/prepare_chat_prompts.py ($PROMPTS/mtbench.jsonl).
#
# Variables: RUNS, MODELS, PROMPTS, SUBSET (64), CHAT_TOKENS (64), CHAT_TEMPERATURES (0.7,1.0),
# VERIFIERS (comma list; default every valid verifier of the registry, so the columns merged later are
# picked up), BOUND_ARGS (the decoder's flag of the certified per-call bound, e.g. BOUND_ARGS=--bound
# once that column exists), FORCE=1 (run without native bfloat16), TRIAL_RECORDS (2), TRIAL_TOKENS (8).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/mdsd_ot"
MODELS="${MODELS:-$CACHE/models}"
PROMPTS="${PROMPTS:-$CACHE/prompts}"
RUNS="${RUNS:-$CACHE/runs/trees2}"
SUBSET="${SUBSET:-64}"
CHAT_TOKENS="${CHAT_TOKENS:-64}"
TEMPERATURES=0.3,0.7,1.0  # the first edition's, for main and the driven parts
CHAT_TEMPERATURES="${CHAT_TEMPERATURES:-0.7,1.0}"  # two thirds of three temperatures' time (hours)
BOUND_ARGS="${BOUND_ARGS:-}"
part="${1:-}"
[ -n "$part" ] || { sed -n '2,37p' "$0"; exit 2; }
shift

if [ "${FORCE:-0}" != 1 ]; then  # the rows are bfloat16 (the first edition's identity): refuse elsewhere
    python - <<'PY' || exit 2
import sys
from mdsd_ot.backends.torch import cpu_matmul_slowdown
from mdsd_ot.runs.inputs import SLOW_DTYPE_RATIO
slow = cpu_matmul_slowdown("bfloat16")
if slow > SLOW_DTYPE_RATIO:
    sys.exit(f"run_tree_report2.sh: bfloat16 matmuls are {slow:.0f}x slower than float32 on this CPU "
             "(no AVX512-BF16/AMX); resume on a machine that has them, or set FORCE=1")
PY
fi
for m in qwen2.5-coder-1.5b-instruct qwen2.5-coder-0.5b-instruct; do
    [ -f "$MODELS/$m/config.json" ] || { echo "run_tree_report2.sh: $MODELS/$m missing: python scripts/prepare_qwen_models.py" >&2; exit 2; }
done

COMMON=(--target "$MODELS/qwen2.5-coder-1.5b-instruct" --draft "$MODELS/qwen2.5-coder-0.5b-instruct"
        --dtype bfloat16 --threads 2 --no-progress)
[ -n "${VERIFIERS:-}" ] && COMMON+=(--verifiers "$VERIFIERS")
MAIN_CELLS=(--trees "1x4 2x4 4x4 4x3 4,2,2,1" --sampling with_replacement,without_replacement,greedy,top_n
            --drive "4,2,2,1/with_replacement" --driver traversal)

decode() {  # decode FOLDER TEMPERATURES ARGS...: one part, locked, resumable
    local out="$1" temps="$2"; shift 2
    mkdir -p "$(dirname "$out")"
    echo "== $(date -u '+%F %T') $out" >&2
    # shellcheck disable=SC2086  # BOUND_ARGS holds zero or more flags
    flock -n -E 75 "$out.lock" python -m mdsd_ot.cli decode "${COMMON[@]}" --temperatures "$temps" "$@" $BOUND_ARGS --out "$out" \
        || { rc=$?; if [ $rc = 75 ]; then echo "run_tree_report2.sh: another run holds $out.lock" >&2
             else echo "run_tree_report2.sh: $out stopped (rc $rc); rerun to resume" >&2; fi; return $rc; }
}

run_part() {  # run_part PART ROOT [extra args]: the part's decode into ROOT/PART
    local p="$1" root="$2"; shift 2
    case "$p" in
        main) decode "$root/main" "$TEMPERATURES" --prompts humaneval "${MAIN_CELLS[@]}" --max-new-tokens 16 "$@" ;;
        driven-rrs|driven-optimal|driven-lookahead|driven-traversal)
            decode "$root/$p" "$TEMPERATURES" --prompts humaneval --trees "4,2,2,1" --sampling with_replacement \
                --drive "4,2,2,1/with_replacement" --driver "${p#driven-}" --max-new-tokens 16 \
                --max-records "$SUBSET" "$@" ;;
        driven-block)
            decode "$root/$p" "$TEMPERATURES" --prompts humaneval --trees 1x4 --sampling with_replacement \
                --drive "1x4/with_replacement" --driver block --max-new-tokens 16 --max-records "$SUBSET" "$@" ;;
        chat)
            [ -f "$PROMPTS/mtbench.jsonl" ] || { echo "run_tree_report2.sh: $PROMPTS/mtbench.jsonl missing: python scripts/prepare_chat_prompts.py" >&2; return 2; }
            decode "$root/chat" "$CHAT_TEMPERATURES" --prompts "$PROMPTS/mtbench.jsonl" "${MAIN_CELLS[@]}" \
                --max-new-tokens "$CHAT_TOKENS" "$@" ;;
        cost) python scripts/tree_cost.py measure --threads 2 --basis wall --models "$MODELS" \
                --out "$root/cost_wall2.json" ;;  # the decode arguments do not apply
        *) echo "run_tree_report2.sh: unknown part '$p'" >&2; return 2 ;;
    esac
}

PARTS=(main driven-rrs driven-optimal driven-lookahead driven-traversal driven-block chat)
case "$part" in
    all) for p in "${PARTS[@]}" cost; do run_part "$p" "$RUNS" "$@"; done ;;
    trial)
        trial="${TRIAL_DIR:-$RUNS/trial}"
        for p in "${PARTS[@]}"; do
            run_part "$p" "$trial" --max-records "${TRIAL_RECORDS:-2}" --max-new-tokens "${TRIAL_TOKENS:-8}" "$@" \
                || echo "trial of $p failed (see above)" >&2
        done
        python scripts/tree_trials.py "$trial" --subset "$SUBSET" --chat-tokens "$CHAT_TOKENS" ;;
    *) run_part "$part" "$RUNS" "$@" ;;
esac
