#!/usr/bin/env bash
# The fast path on one CUDA GPU (issue 32): its CUDA tests, then the real loop (bench/real_loop.py: run_unsup.py
# itself, BERT-base shape, random weights, batch 64, max length 32, dev evaluation every 125 steps when SENTEVAL_DIR
# is set) eager and on the fast path. Results: $RESULTS_DIR/real_loop_<method>_<eager|fast>.json and one line each.
#   SENTEVAL_DIR=... bash scripts/fast_path_gpu.sh [tests|loop|all]      (PYTHON=... picks the interpreter)
# Expected on an H100 (estimates, not yet measured): tests ~2-3 min (each compiles a tiny model); loop: SimCSE eager
# 500 steps ~50 s, SimCSE fast 1,000 steps ~60-90 s (compile ~40-60 s of it), PromptBERT fast 500 steps ~2-3 min
# (3 graphs: the sentence pass and each template's pass).
set -uo pipefail
cd "$(dirname "$0")/.."
python_bin=${PYTHON:-python}  # the CUDA build's python (README, "GPU install")
export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1} TRANSFORMERS_OFFLINE=${TRANSFORMERS_OFFLINE:-1} TOKENIZERS_PARALLELISM=false
results=${RESULTS_DIR:-bench/results}
what=${1:-all}
mkdir -p "$results"
status=0
if [ "$what" = tests ] || [ "$what" = all ]; then
  "$python_bin" -m pytest -q -p no:cacheprovider tests/test_cuda.py \
    -k "fast_path or dropout_draws or never_waits" || status=1
fi
if [ "$what" = loop ] || [ "$what" = all ]; then
  # method, fast path, steps
  for run in "simcse false 500" "simcse true 1000" "promptbert true 500" ${EXTRA_RUNS:-}; do
    set -- $run
    name=$([ "$2" = true ] && echo fast || echo eager)
    "$python_bin" -m bench.real_loop --method "$1" --fast_path "$2" --steps "$3" \
      --output_json "$results/real_loop_${1}_${name}.json" || status=1
  done
fi
exit $status
