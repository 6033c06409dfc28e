#!/usr/bin/env bash
# The test suite at the LOW end of every dependency range: ./.venv-lower from requirements.txt with
# constraints-lower.txt (each range's lower bound pinned), then pytest (all of it, ~5 min on 2 cores; or the
# tests/files given, as .ci/run does with a subset). The normal run (scripts/run_tests.sh) tests the newest versions.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-lower CONSTRAINTS=constraints-lower.txt bash scripts/setup_env.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
.venv-lower/bin/python -m pip freeze --disable-pip-version-check | grep -iE "^($(grep -vE '^\s*(#|$)' \
  constraints-lower.txt | cut -d= -f1 | paste -sd'|'))==" | paste -sd' ' | sed 's/^/lower bounds installed: /'
if [ $# -eq 0 ]; then set -- tests; fi
exec .venv-lower/bin/python -m pytest -q "$@"
