#!/usr/bin/env bash
# Create ./.venv and install requirements.txt into it (skipped when requirements.txt is unchanged since the last
# install). Used by scripts/quickstart.sh, scripts/run_tests.sh and .ci/run.
# VENV=.venv-lower CONSTRAINTS=constraints-lower.txt: another folder, with the constraints file applied (the low end
# of every range; scripts/run_tests_lower.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
python_bin=${PYTHON:-python3}
venv=${VENV:-.venv}
constraints=${CONSTRAINTS:-}
[ -x "$venv/bin/python" ] || "$python_bin" -m venv "$venv"
stamp=$venv/.requirements.sha256
wanted=$(cat requirements.txt ${constraints:+"$constraints"} | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r requirements.txt \
    ${constraints:+-c "$constraints"}
  echo "$wanted" > "$stamp"
fi
