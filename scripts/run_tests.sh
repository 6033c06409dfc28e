#!/usr/bin/env bash
# The test command: set up ./.venv from requirements.txt, then run the whole suite (CPU, offline; 6-20 min on 2 cores, README "Tests").
# Real-data tests run when SENTEVAL_DIR points at SentEval's data/downstream folder and skip otherwise. The two-process
# (torchrun, gloo) tests give up after CSE_TORCHRUN_TIMEOUT seconds (default 600; tests/launch.py). The suite runs in
# CSE_TEST_WORKERS pytest-xdist worker processes (default 2, the CI machine's cores; 0: in this process); a worker
# that runs out of tests takes half of the other's remaining ones (--dist worksteal: 8 min 20 s against 9 min 50 s
# with the default --dist load, same VM, 2026-11-28); the two-process training fixtures build their folders once for
# both workers (tests/shared_folders.py).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec .venv/bin/python -m pytest -q -n "${CSE_TEST_WORKERS:-2}" --dist worksteal tests "$@"
