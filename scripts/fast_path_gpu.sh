#!/usr/bin/env bash
# The fast path on one CUDA GPU (issue 32): its CUDA tests, then the real loop (bench/real_loop.py: run_unsup.py
# itself, BERT-base shape, random weights, batch 64, max length 32) eager and on the fast path. Results:
# $RESULTS_DIR/real_loop_<method>_<eager|fast>.json and the lines printed. About 4 min on an H100 with STEPS=1000
# (SimCSE eager ~75 s, SimCSE fast ~60-90 s of which compile ~40 s, PromptBERT fast ~90 s).
#   STEPS=1000 RESULTS_DIR=bench/results SENTEVAL_DIR=... bash scripts/fast_path_gpu.sh [tests|loop|all]
set -uo pipefail
cd "$(dirname "$0")/.."
python_bin=${PYTHON:-python}  # the CUDA build's python (README, "GPU install")
export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1} TRANSFORMERS_OFFLINE=${TRANSFORMERS_OFFLINE:-1} TOKENIZERS_PARALLELISM=false
steps=${STEPS:-1000}
results=${RESULTS_DIR:-bench/results}
what=${1:-all}
mkdir -p "$results"
status=0
if [ "$what" = tests ] || [ "$what" = all ]; then
  "$python_bin" -m pytest -q -p no:cacheprovider tests/test_cuda.py \
    -k "fast_path or dropout_draws or never_waits" || status=1
fi
if [ "$what" = loop ] || [ "$what" = all ]; then
  for run in "simcse false" "simcse true" "promptbert true" ${EXTRA_RUNS:-}; do
    set -- $run
    name=$([ "$2" = true ] && echo fast || echo eager)
    "$python_bin" -m bench.real_loop --method "$1" --fast_path "$2" --steps "$steps" \
      --output_json "$results/real_loop_${1}_${name}.json" || status=1
  done
fi
exit $status
