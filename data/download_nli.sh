#!/usr/bin/env bash
# Download supervised SimCSE's training corpus: SNLI+MNLI triplets, CSV with header sent0,sent1,hard_neg.
#
#   bash data/download_nli.sh [TARGET_DIR]     (default TARGET_DIR: the directory of this script, data/)
#
# Skips the download when TARGET_DIR/nli_for_simcse.csv already exists.
set -euo pipefail
source "$(dirname -- "${BASH_SOURCE[0]}")/fetch.sh"
fetch_file_once "https://huggingface.co/datasets/princeton-nlp/datasets-for-simcse/resolve/main/nli_for_simcse.csv" \
  nli_for_simcse.csv "${1:-}" "lines, header included"
