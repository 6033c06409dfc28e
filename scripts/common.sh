# shellcheck shell=bash
# Shared helpers of the paper-table scripts (scripts/<paper>_table<N>.sh). Sourced, never run:
#
#     source "$(dirname "${BASH_SOURCE[0]}")/common.sh" "$@"
#
# Every table script reads top to bottom as: its paper's hyperparameters per encoder, then one `row` call per row
# of the paper's table. A row, once per seed S of the seed list, trains one model (`accelerate launch run_unsup.py
# ... --seed S` or `run_diffcse.py ...`) into $OUTPUT_ROOT/<table>/<row>/seed<S> and evaluates its export with
# `python -m eval ... --output_json $RESULTS_DIR/<table>/<row>/seed<S>.json`, which `python -m eval.results` renders
# beside the paper's numbers (results/paper_numbers.json -> docs/results.md): the mean +- std over the seeds and a
# 95% confidence interval that says whether the paper's number is within our seed noise (docs/seeds.md).
#
# Options (any script):
#   --dry_run | DRY_RUN=1        print every command (one a line, "+ " then the shell-quoted command), run nothing
#   --only REGEX | ONLY=REGEX    only the rows whose name matches REGEX (bash =~)
#   --seeds 42,43,44 | SEEDS="42 43 44"   run every row once per seed (commas or spaces; default: 42, or the
#                                script's own default: S-SimCSE Table 1 runs seeds 42-48 as its paper did)
#   --force | FORCE=1            re-run seeds whose results JSON already exists (default: skip them), replacing
#                                their previous training run (--overwrite_output_dir)
#   --help
# Environment:
#   RESULTS_DIR=results  OUTPUT_ROOT=outputs/tables   where results JSON and checkpoints go
#   TRAIN_FILE=data/wiki1m_for_simcse.txt  NLI_FILE=data/nli_for_simcse.csv   (bash data/download_*.sh)
#   SENTEVAL_DIR=data/senteval/downstream  SentEval data (bash data/download_senteval.sh)
#   NUM_PROCESSES=1              GPUs; the per-device batch is the paper's global batch / NUM_PROCESSES
#   LAUNCH="accelerate launch"   the launcher (--num_processes is added when NUM_PROCESSES > 1)
#   FIDELITY=paper|official_code overrides a script's --fidelity preset (each script's header says which preset
#                                it runs by default and why: the one whose code produced the table's printed numbers;
#                                docs/fidelity.md "Table scripts"). The preset is recorded in every results JSON.
#   EXTRA_TRAIN_ARGS="..."       appended to every training command (e.g. "--max_train_samples 1000")

set -euo pipefail

CSE_REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$CSE_REPO_ROOT"

DRY_RUN=${DRY_RUN:-0}
ONLY=${ONLY:-}
FORCE=${FORCE:-0}
RESULTS_DIR=${RESULTS_DIR:-results}
OUTPUT_ROOT=${OUTPUT_ROOT:-outputs/tables}
TRAIN_FILE=${TRAIN_FILE:-data/wiki1m_for_simcse.txt}
NLI_FILE=${NLI_FILE:-data/nli_for_simcse.csv}
NUM_PROCESSES=${NUM_PROCESSES:-1}
SEEDS=${SEEDS:-}
SEEDS_GIVEN=0
[ -z "$SEEDS" ] || SEEDS_GIVEN=1
EXTRA_TRAIN_ARGS=${EXTRA_TRAIN_ARGS:-}
read -r -a CSE_LAUNCH <<< "${LAUNCH:-accelerate launch}"
read -r -a CSE_EXTRA_TRAIN <<< "$EXTRA_TRAIN_ARGS"

# cse_usage: the calling script's header comment, then the common options.
cse_usage() {
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
  echo
  echo "Options: --dry_run (or DRY_RUN=1), --only REGEX, --seeds 42,43,44 (or SEEDS=\"42 43 44\"), --force;"
  echo "environment: see scripts/common.sh"
}

while [ $# -gt 0 ]; do
  case "$1" in
    --dry_run|--dry-run) DRY_RUN=1 ;;
    --only) ONLY=${2:?--only needs a REGEX}; shift ;;
    --seeds) SEEDS=${2:?--seeds needs a list, e.g. --seeds 42,43,44}; SEEDS_GIVEN=1; shift ;;
    --force) FORCE=1 ;;
    -h|--help) cse_usage; exit 0 ;;
    *) echo "unknown option: $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

# ------------------------------------------------------------------------------------------------ seeds

# set_seeds LIST: SEEDS = LIST (commas or spaces) after checking every seed is a non-negative integer, once.
set_seeds() {
  local seed seen=" " list
  read -r -a list <<< "${1//,/ }"
  if [ ${#list[@]} -eq 0 ]; then
    echo "no seeds given: use e.g. --seeds 42,43,44 or SEEDS=\"42 43 44\"" >&2
    exit 2
  fi
  for seed in "${list[@]}"; do
    if ! [[ $seed =~ ^[0-9]+$ ]]; then
      echo "seed '$seed' is not a non-negative integer: use e.g. --seeds 42,43,44 or SEEDS=\"42 43 44\"" >&2
      exit 2
    fi
    if [[ $seen == *" $seed "* ]]; then
      echo "seed $seed is listed twice in '$1': each seed writes one results file, list it once" >&2
      exit 2
    fi
    seen+="$seed "
  done
  SEEDS="${list[*]}"
}

# default_seeds LIST: a script's own seed list (S-SimCSE Table 1: the paper's seven seeds), used unless
# --seeds/SEEDS chose one.
default_seeds() {
  if [ "$SEEDS_GIVEN" != 1 ]; then
    set_seeds "$1"
  fi
}

set_seeds "${SEEDS:-42}"

# ------------------------------------------------------------------------------------------------ primitives

# run CMD [ARGS...]: print the command (shell-quoted, prefixed "+ ") and execute it unless this is a dry run.
run() {
  local quoted
  printf -v quoted '%q ' "$@"
  echo "+ ${quoted% }"
  if [ "$DRY_RUN" != 1 ]; then
    "$@"
  fi
}

# note TEXT: a comment line in the output (dry runs too), e.g. the table and fidelity a script reproduces.
note() { echo "# $*"; }

# table NAME FIDELITY DESCRIPTION: start a table (results go to $RESULTS_DIR/NAME/); FIDELITY is the
# --fidelity preset its methods run under by default, the one whose code produced the table's printed numbers
# ($FIDELITY overrides it), or "-" for methods without one (SimCSE, S-SimCSE), which $FIDELITY leaves alone.
table() {
  TABLE=$1
  TABLE_FIDELITY=$2
  if [ "$2" != "-" ]; then
    TABLE_FIDELITY=${FIDELITY:-$2}
  fi
  case "$TABLE_FIDELITY" in
    -|paper|official_code) ;;
    *) echo "FIDELITY=$TABLE_FIDELITY: choose paper or official_code (or unset it for the script's default)" >&2
       exit 2 ;;
  esac
  note "$TABLE: $3"
  note "fidelity: $TABLE_FIDELITY; seeds: $SEEDS; results: $RESULTS_DIR/$TABLE/<row>/seed<S>.json; checkpoints: $OUTPUT_ROOT/$TABLE/<row>/seed<S>"
}

# fidelity_args: the --fidelity flag of the current table (none for "-").
fidelity_args() {
  FIDELITY_ARGS=()
  if [ "$TABLE_FIDELITY" != "-" ]; then
    FIDELITY_ARGS=(--fidelity "$TABLE_FIDELITY")
  fi
}

# batch_args GLOBAL_BATCH: the per-device batch for NUM_PROCESSES processes (the papers' batches are global).
batch_args() {
  local global=$1
  if [ $((global % NUM_PROCESSES)) -ne 0 ]; then
    echo "batch $global is not divisible by NUM_PROCESSES=$NUM_PROCESSES" >&2
    exit 2
  fi
  BATCH_ARGS=(--per_device_train_batch_size $((global / NUM_PROCESSES)))
}

# launcher: LAUNCHER = $LAUNCH (+ --num_processes when NUM_PROCESSES > 1).
launcher() {
  LAUNCHER=("${CSE_LAUNCH[@]}")
  if [ "$NUM_PROCESSES" -gt 1 ]; then
    LAUNCHER+=(--num_processes "$NUM_PROCESSES")
  fi
}

# set_flag FLAG VALUE: set FLAG to VALUE in the array RECIPE (replacing its value, or appending FLAG VALUE), so a
# row that varies one hyperparameter of a recipe prints it once.
set_flag() {
  local flag=$1 value=$2 i
  for ((i = 0; i < ${#RECIPE[@]}; i++)); do
    if [ "${RECIPE[$i]}" = "$flag" ]; then
      RECIPE[i + 1]=$value
      return 0
    fi
  done
  RECIPE+=("$flag" "$value")
}

# ------------------------------------------------------------------------------------------------ recipes
# Each *_recipe function sets the array RECIPE to a paper's flags for one encoder; scripts append a row's own flags.
# Every hyperparameter is written out even where it equals run_unsup.py's / run_diffcse.py's default, so a script
# shows the recipe it reproduces and does not drift when a default changes.

# SimCSE (Gao et al., 2021), unsupervised, per encoder: global batch / learning rate (SimCSE Appendix A, as the
# released run scripts ship them: REFERENCE.md "Training recipes"; BERT-base 64 / 3e-5 is also in the paper's
# Sec. 3 text). 1 epoch, max length 32, tau 0.05, [CLS] + MLP in training only, STS-B dev every 125 steps.
declare -A SIMCSE_UNSUP_BATCH=([bert-base-uncased]=64 [bert-large-uncased]=64 [roberta-base]=512 [roberta-large]=512)
declare -A SIMCSE_UNSUP_LR=([bert-base-uncased]=3e-5 [bert-large-uncased]=1e-5 [roberta-base]=1e-5 [roberta-large]=3e-5)
# Supervised SimCSE (SimCSE Sec. 4): batch 512, 3 epochs, lr 5e-5 for base encoders (REFERENCE.md), 1e-5 for large
# ones (SimCSE Appendix A, whose table did not survive in this copy of the paper: the released run scripts' value).
declare -A SIMCSE_SUP_LR=([bert-base-uncased]=5e-5 [bert-large-uncased]=1e-5 [roberta-base]=5e-5 [roberta-large]=1e-5)

# simcse_recipe ENCODER: unsupervised SimCSE.
simcse_recipe() {
  local encoder=$1
  batch_args "${SIMCSE_UNSUP_BATCH[$encoder]}"
  RECIPE=(--method simcse --model_name_or_path "$encoder" --learning_rate "${SIMCSE_UNSUP_LR[$encoder]}"
          "${BATCH_ARGS[@]}" --num_train_epochs 1 --max_seq_length 32 --temp 0.05 --eval_steps 125)
}

# sup_simcse_recipe ENCODER: supervised SimCSE on NLI triples (the MLP is kept at test time).
sup_simcse_recipe() {
  local encoder=$1
  batch_args 512
  RECIPE=(--method sup_simcse --model_name_or_path "$encoder" --learning_rate "${SIMCSE_SUP_LR[$encoder]}"
          "${BATCH_ARGS[@]}" --num_train_epochs 3 --max_seq_length 32 --temp 0.05 --eval_steps 125)
}

# ESimCSE (Wu et al., 2022), Sec. 4.2: batch 64, 1 epoch, lr 3e-5 for BERT-base and 1e-5 for the others, momentum
# 0.995, sub-word repetition, dropout 0.1 for base and 0.15 for large encoders. dup_rate 0.32 and queue 160 (2.5 x
# batch) are the paper's BERT-base choices (Tables 9, 10); the paper gives no per-encoder values for the others, so
# those are the released run scripts' (REFERENCE.md): RoBERTa-base dup_rate 0.30; RoBERTa-large 0.28 and queue 128.
# The released scripts use dropout 0.1 for BERT-large (0.15 for RoBERTa-large): that is taken under
# FIDELITY=official_code.
declare -A ESIMCSE_LR=([bert-base-uncased]=3e-5 [bert-large-uncased]=1e-5 [roberta-base]=1e-5 [roberta-large]=1e-5)
declare -A ESIMCSE_DUP_RATE=([bert-base-uncased]=0.32 [bert-large-uncased]=0.32 [roberta-base]=0.30 [roberta-large]=0.28)
declare -A ESIMCSE_QUEUE=([bert-base-uncased]=160 [bert-large-uncased]=160 [roberta-base]=160 [roberta-large]=128)
declare -A ESIMCSE_DROPOUT=([bert-base-uncased]=0.1 [bert-large-uncased]=0.15 [roberta-base]=0.1 [roberta-large]=0.15)
declare -A ESIMCSE_CODE_DROPOUT=([bert-base-uncased]=0.1 [bert-large-uncased]=0.1 [roberta-base]=0.1 [roberta-large]=0.15)

# dropout_args RATE: a fixed dropout rate other than the backbones' 0.1. There is no flag for the backbone's own
# rate, so it goes through the per-row dropout of models/dropout.py with a degenerate distribution (uniform on
# [RATE, RATE] = RATE at every dropout of the backbone: embeddings, attention probabilities, residual branches).
dropout_args() {
  DROPOUT_ARGS=()
  if [ "$1" != 0.1 ]; then
    DROPOUT_ARGS=(--dropout_dist uniform --dropout_low "$1" --dropout_high "$1")
  fi
}

# esimcse_recipe ENCODER: ESimCSE.
esimcse_recipe() {
  local encoder=$1 dropout
  dropout=${ESIMCSE_DROPOUT[$encoder]}
  if [ "$TABLE_FIDELITY" = official_code ]; then
    dropout=${ESIMCSE_CODE_DROPOUT[$encoder]}
  fi
  batch_args 64
  dropout_args "$dropout"
  RECIPE=(--method esimcse --model_name_or_path "$encoder" --learning_rate "${ESIMCSE_LR[$encoder]}"
          "${BATCH_ARGS[@]}" --num_train_epochs 1 --max_seq_length 32 --temp 0.05 --eval_steps 125
          --dup_rate "${ESIMCSE_DUP_RATE[$encoder]}" --dup_type subword --momentum 0.995
          --queue_size "${ESIMCSE_QUEUE[$encoder]}" "${DROPOUT_ARGS[@]}")
}

# SimCSE++ (Xu et al., 2023), Sec. 5.1: batch 64, length 32, 1 epoch, lr 3e-5 (base) / 8e-6 (large), tau 0.05,
# m = 0.9, DCL lambda 0.1 and tau_DCL 5.
declare -A SIMCSE_PP_LR=([base]=3e-5 [large]=8e-6)

# simcse_pp_recipe ENCODER SIZE METHOD: METHOD (simcse | simcse_pp) with SimCSE++'s training settings for a
# SIZE (base | large) encoder; the SimCSE++ hyperparameters are written out for simcse_pp.
simcse_pp_recipe() {
  local encoder=$1 size=$2 method=$3
  batch_args 64
  RECIPE=(--method "$method" --model_name_or_path "$encoder" --learning_rate "${SIMCSE_PP_LR[$size]}"
          "${BATCH_ARGS[@]}" --num_train_epochs 1 --max_seq_length 32 --temp 0.05 --eval_steps 125)
  if [ "$method" = simcse_pp ]; then
    RECIPE+=(--off_dropout true --pos_neg_tradeoff 0.9 --dcl_weight 0.1 --dcl_temp 5)
  fi
}

# DiffCSE (Chuang et al., 2022), Appendix A: Table 12 (STS) and Table 13 (transfer) per encoder; 2 epochs,
# tau 0.05, BatchNorm projector, STS-B dev every 125 steps. The generator shares the encoder's vocabulary:
# DistilBERT for BERT, DistilRoBERTa for RoBERTa (Sec. 4.1).
declare -A DIFFCSE_GENERATOR=([bert-base-uncased]=distilbert-base-uncased [roberta-base]=distilroberta-base)
declare -A DIFFCSE_LR=([sts:bert-base-uncased]=7e-6 [sts:roberta-base]=1e-5
                       [transfer:bert-base-uncased]=2e-6 [transfer:roberta-base]=3e-6)
declare -A DIFFCSE_MASK=([sts:bert-base-uncased]=0.30 [sts:roberta-base]=0.20
                         [transfer:bert-base-uncased]=0.15 [transfer:roberta-base]=0.15)
declare -A DIFFCSE_LAMBDA=([sts:bert-base-uncased]=0.005 [sts:roberta-base]=0.005
                           [transfer:bert-base-uncased]=0.05 [transfer:roberta-base]=0.05)
declare -A DIFFCSE_BATCH=([sts:bert-base-uncased]=64 [sts:roberta-base]=64
                          [transfer:bert-base-uncased]=64 [transfer:roberta-base]=128)

# diffcse_recipe ENCODER PROFILE: DiffCSE with PROFILE's (sts | transfer) hyperparameters for ENCODER.
diffcse_recipe() {
  local encoder=$1 profile=$2 key="$2:$1"
  batch_args "${DIFFCSE_BATCH[$key]}"
  RECIPE=(--model_name_or_path "$encoder" --generator_name "${DIFFCSE_GENERATOR[$encoder]}" --task_profile "$profile"
          --learning_rate "${DIFFCSE_LR[$key]}" --masking_ratio "${DIFFCSE_MASK[$key]}"
          --lambda_weight "${DIFFCSE_LAMBDA[$key]}" "${BATCH_ARGS[@]}" --num_train_epochs 2 --max_seq_length 32
          --temp 0.05 --batchnorm true --eval_steps 125)
}

# PromptBERT (Jiang et al., 2022), unsupervised, as the official run.sh runs it (unsup-bert / unsup-roberta): batch
# 256, 1 epoch, lr 1e-5, max length 32, tau 0.05, MLP in training only, STS-B dev every 125 steps, template
# denoising, two templates (BERT: 'of' / ':' and double quotes; RoBERTa: 'This' / 'The' and single quotes).
declare -A PROMPTBERT_TEMPLATE=([bert-base-uncased]='*cls*_This_sentence_of_"*sent_0*"_means*mask*.*sep+*'
                                [roberta-base]="*cls*_This_sentence_:_'_*sent_0*_'_means*mask*.*sep+*")
declare -A PROMPTBERT_TEMPLATE2=([bert-base-uncased]='*cls*_This_sentence_:_"*sent_0*"_means*mask*.*sep+*'
                                 [roberta-base]="*cls*_The_sentence_:_'_*sent_0*_'_means*mask*.*sep+*")
# promptbert_recipe ENCODER: unsupervised PromptBERT.
promptbert_recipe() {
  local encoder=$1
  batch_args 256
  RECIPE=(--method promptbert --model_name_or_path "$encoder" --learning_rate 1e-5 "${BATCH_ARGS[@]}"
          --num_train_epochs 1 --max_seq_length 32 --temp 0.05 --eval_steps 125 --mlp_only_train true
          --prompt_template "${PROMPTBERT_TEMPLATE[$encoder]}"
          --prompt_template_positive "${PROMPTBERT_TEMPLATE2[$encoder]}" --template_denoising true)
}
# ------------------------------------------------------------------------------------------------ rows

# row_selected ROW: whether --only/ONLY selects ROW.
row_selected() {
  [ -z "$ONLY" ] || [[ $1 =~ $ONLY ]]
}

# train SCRIPT OUT_DIR [FLAGS...]: `accelerate launch SCRIPT --output_dir OUT_DIR --train_file ... FLAGS`.
# run_unsup.py flags: command_line/arguments.py; run_diffcse.py flags: command_line/diffcse_arguments.py.
train() {
  local script=$1 out=$2
  shift 2
  launcher
  local overwrite=()
  if [ "$FORCE" = 1 ]; then
    overwrite=(--overwrite_output_dir)  # --force re-runs a row: replace its previous run (refused otherwise)
  fi
  run "${LAUNCHER[@]}" "$script" --output_dir "$out" --train_file "$TRAIN_FILE" "$@" "${overwrite[@]}" \
    "${CSE_EXTRA_TRAIN[@]}"
}

# evaluate RUN_DIR OUT_JSON EVAL: the evaluation of one trained row (python -m eval, eval/cli.py) of its export
# RUN_DIR/export/hf; --training_run RUN_DIR records in OUT_JSON the row's --fidelity preset, its training command line
# and the settings they resolved to (RUN_DIR/run_arguments.json; eval/provenance.py). EVAL is one of:
#   sts            7 STS test sets, [CLS] without the MLP (unsupervised methods; the papers' main tables)
#   sts_own        7 STS test sets with the export's own embedding, no --pooler (PromptBERT: the [MASK] state in
#                  the template its config.json states)
#   sts_sup        7 STS test sets, [CLS] with the MLP (supervised SimCSE keeps it at test time)
#   sts_dev        STS-B dev (+ SICK-R dev) of the best checkpoint (the ablation tables)
#   dev_transfer   STS-B dev + the 7 transfer tasks' dev accuracies (DiffCSE's ablation tables)
#   transfer       the 7 transfer tasks, test (SentEval's "test" classifier settings)
evaluate() {
  local run_dir=$1 model=$1/export/hf out=$2 kind=$3 mode task_set pooler=cls_before_pooler
  case "$kind" in
    sts) mode=test; task_set=sts ;;
    sts_sup) mode=test; task_set=sts; pooler=cls ;;
    sts_own) mode=test; task_set=sts; pooler= ;;
    sts_dev) mode=dev; task_set=sts ;;
    dev_transfer) mode=dev; task_set=full ;;
    transfer) mode=test; task_set=transfer ;;
    *) echo "unknown evaluation kind: $kind" >&2; exit 2 ;;
  esac
  local pooler_args=()
  [ -z "$pooler" ] || pooler_args=(--pooler "$pooler")
  run python -m eval --model_name_or_path "$model" "${pooler_args[@]}" --mode "$mode" --task_set "$task_set" \
    --output_json "$out" --training_run "$run_dir"
}

# row NAME SCRIPT EVAL [FLAGS...]: for each seed S in $SEEDS, train one row of the current table with SCRIPT
# (run_unsup.py | run_diffcse.py), FLAGS and --seed S into $OUTPUT_ROOT/<table>/NAME/seed<S>, then evaluate it (EVAL:
# see `evaluate`) into $RESULTS_DIR/<table>/NAME/seed<S>.json. The table's --fidelity is added to every row.
# Skipped when not selected by --only; a seed already done is skipped (unless --force).
row() {
  local name=$1 script=$2 kind=$3 seed
  shift 3
  row_selected "$name" || return 0
  for seed in $SEEDS; do
    run_seed "$name" "$seed" "$script" "$kind" "$@"
  done
}

# run_seed NAME SEED SCRIPT EVAL [FLAGS...]: one seed of `row`.
run_seed() {
  local name=$1 seed=$2 script=$3 kind=$4 out result
  shift 4
  out=$OUTPUT_ROOT/$TABLE/$name/seed$seed
  result=$RESULTS_DIR/$TABLE/$name/seed$seed.json
  if [ "$FORCE" != 1 ] && [ -f "$result" ]; then
    note "$name seed $seed: $result exists, skipped (--force re-runs it)"
    return 0
  fi
  fidelity_args
  note "row $name, seed $seed"
  train "$script" "$out" --seed "$seed" "$@" "${FIDELITY_ARGS[@]}"
  evaluate "$out" "$result" "$kind"
}
