#!/usr/bin/env bash
# The authors' released checkpoints of the five papers, evaluated with this repo's `python -m eval` and printed
# beside the numbers their repositories publish (results/released_checkpoints.json; docs/released.md): SimCSE's 8
# (princeton-nlp/*), ESimCSE's 4 (ffgcc/*), DiffCSE's 4 (voidism/*), each with the pooler it needs. SimCSE++ and
# S-SimCSE released none.
# THE FIRST THING TO RUN ON A NEW MACHINE WITH INTERNET: when our evaluation reproduces the authors' numbers on
# their own models, a gap between our training runs and a paper is in the training, not in the evaluation.
#     bash scripts/check_released.sh [--dry_run] [--only REGEX] [--force]
# Per checkpoint: python -m eval --model_name_or_path <id> --pooler <pooler> --mode test --task_set <sts|transfer>
# --output_json $RESULTS_DIR/released/<owner>__<name>.json (skipped when it exists, unless --force); then
# `python -m eval.released compare`, which prints ours, published and the differences and exits 1 when a checkpoint
# differs by more than 0.10 on any number.
# Environment: RESULTS_DIR, SENTEVAL_DIR (scripts/common.sh); RELEASED_ROOT=DIR reads <owner>/<name> under DIR
# instead of the hub (local copies; what the tests use); PYTHON=python.
# Fidelity: none (evaluation only; no training).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh" "$@"
RELEASED_ROOT=${RELEASED_ROOT:-}
PYTHON=${PYTHON:-python}
out_dir=$RESULTS_DIR/released

only_args=()
[ -z "$ONLY" ] || only_args=(--only "$ONLY")
entries=$("$PYTHON" -m eval.released "${only_args[@]}" list)
note "released checkpoints (results/released_checkpoints.json): ours -> $out_dir/"
if [ -n "$RELEASED_ROOT" ]; then
  note "models read from $RELEASED_ROOT/<owner>/<name>"
elif [ "$DRY_RUN" != 1 ]; then
  "$PYTHON" -m eval.released "${only_args[@]}" check_hub  # stops here, saying why, when they cannot be fetched
fi
while IFS=$'\t' read -r id pooler task_set result_name; do
  model=$id
  [ -z "$RELEASED_ROOT" ] || model=$RELEASED_ROOT/$id
  result=$out_dir/$result_name
  if [ "$FORCE" != 1 ] && [ -f "$result" ]; then
    note "$id: $result exists, skipped (--force re-runs it)"
    continue
  fi
  run "$PYTHON" -m eval --model_name_or_path "$model" --pooler "$pooler" --mode test --task_set "$task_set" \
    --output_json "$result"
done <<< "$entries"
run "$PYTHON" -m eval.released "${only_args[@]}" compare --results_dir "$out_dir"
