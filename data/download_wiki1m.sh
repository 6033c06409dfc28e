#!/usr/bin/env bash
# Download unsupervised SimCSE's training corpus: 10^6 sentences of English Wikipedia, one per line (~120 MB).
#
#   bash data/download_wiki1m.sh [TARGET_DIR]     (default TARGET_DIR: the directory of this script, data/)
#
# Skips the download when TARGET_DIR/wiki1m_for_simcse.txt already exists. Without network access, build the
# offline stand-in corpus instead: python -m data.standin
set -euo pipefail
source "$(dirname -- "${BASH_SOURCE[0]}")/fetch.sh"
fetch_file_once "https://huggingface.co/datasets/princeton-nlp/datasets-for-simcse/resolve/main/wiki1m_for_simcse.txt" \
  wiki1m_for_simcse.txt "${1:-}" lines
