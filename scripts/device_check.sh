#!/usr/bin/env bash
# The accelerator checks in one command (scripts/device_check.py): torch backend and evaluation plan
# on CUDA against the CPU, the decoder on CUDA with a tiny random model, one decoder call's cost with
# random models of the real 1.5B / 0.5B architectures. Results go to ${OUT:-.}/device_results.json.
# Needs torch (CUDA build), numba, numpy, scipy, transformers; no network, no model weights.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-.}/device_results.json"
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" timeout 290 python scripts/device_check.py --out "$out" "$@"
status=$?
echo "device_check exit status $status; results in $out"
exit $status
