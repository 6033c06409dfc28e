#!/usr/bin/env bash
# The one command for a machine with a CUDA GPU: the CUDA tests (tests/test_cuda.py), then the training benchmarks on
# a BERT-base config (random weights), written to bench/results/gpu_<device>.json and .md (bench/gpu_check.py says
# what each step measures). `--dry_run` lists the steps anywhere, CPU included.
#   bash scripts/gpu_check.sh [--dry_run] [--work_dir DIR] [--results_dir DIR] [--skip STEP ...]
#   bash scripts/gpu_check.sh --only STEP ... --deadline_seconds N   # a short lease: those steps in that order, ended
#                                                                   # in N seconds with no run left behind
# Python: $PYTHON, else ./.venv/bin/python (scripts/setup_env.sh; install the CUDA build of torch first, README
# "GPU install"), else python3.
# CSE_WHEELS=DIR: a folder of wheels to install first (pip --no-index --no-deps --target) and put on PYTHONPATH, for a
# machine that cannot reach PyPI and lacks some of requirements.txt (docs/benchmarks.md, "GPU machines without
# internet": e.g. transformers >= 5.20 and datasets where the image has transformers 5.17 and no datasets).
set -euo pipefail
cd "$(dirname "$0")/.."
python_bin=${PYTHON:-}
if [ -z "$python_bin" ]; then
  if [ -x .venv/bin/python ]; then python_bin=.venv/bin/python; else python_bin=python3; fi
fi
if [ -n "${CSE_WHEELS:-}" ]; then
  site=${CSE_WHEELS_TARGET:-/tmp/cse_site}
  "$python_bin" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
    "$CSE_WHEELS"/*.whl
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1} TRANSFORMERS_OFFLINE=${TRANSFORMERS_OFFLINE:-1} TOKENIZERS_PARALLELISM=false
exec "$python_bin" -m bench.gpu_check "$@"
