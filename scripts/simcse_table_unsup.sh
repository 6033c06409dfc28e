#!/usr/bin/env bash
# SimCSE (Gao et al., EMNLP 2021) Table 5, unsupervised rows: SimCSE-BERT-base, -BERT-large, -RoBERTa-base,
# -RoBERTa-large on the 7 STS test sets ("all" setting, [CLS] without the MLP).
# Recipe per encoder (scripts/common.sh simcse_recipe): batch 64 / 64 / 512 / 512, lr 3e-5 / 1e-5 / 1e-5 / 3e-5,
# 1 epoch of wiki1m, max length 32, tau 0.05, [CLS] + MLP in training only, best STS-B dev checkpoint (every 125
# steps).
# Fidelity: none (SimCSE has no paper-vs-code switches; --fidelity is not passed).
#     bash scripts/simcse_table_unsup.sh [--dry_run] [--only REGEX] [--seeds 42,43,44] [--force]
source "$(dirname "${BASH_SOURCE[0]}")/common.sh" "$@"

table simcse_table_unsup - "SimCSE Table 5, unsupervised rows (STS test, Spearman x 100)"
for encoder in bert-base-uncased bert-large-uncased roberta-base roberta-large; do
  simcse_recipe "$encoder"
  row "$encoder" run_unsup.py sts "${RECIPE[@]}"
done
