#!/usr/bin/env bash
# Create ./.venv and install requirements.txt into it (skipped when requirements.txt is unchanged since the last
# install). Used by scripts/quickstart.sh, scripts/run_tests.sh and .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
python_bin=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python_bin" -m venv .venv
stamp=.venv/.requirements.sha256
wanted=$(sha256sum requirements.txt | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
  echo "$wanted" > "$stamp"
fi
