#!/usr/bin/env bash
# SimCSE (Gao et al., EMNLP 2021) Table 5, supervised rows: SimCSE-BERT-base, -BERT-large, -RoBERTa-base,
# -RoBERTa-large trained on NLI (entailment pairs as positives, contradictions as hard negatives), 7 STS test sets
# with [CLS] + MLP (supervised SimCSE keeps the MLP at test time).
# Recipe (scripts/common.sh sup_simcse_recipe): batch 512, 3 epochs, lr 5e-5 (base) / 1e-5 (large), max length 32,
# tau 0.05, best STS-B dev checkpoint (every 125 steps). Data: NLI_FILE (bash data/download_nli.sh).
# Fidelity: none (SimCSE has no paper-vs-code switches; --fidelity is not passed).
#     bash scripts/simcse_table_sup.sh [--dry_run] [--only REGEX] [--seeds 42,43,44] [--force]
source "$(dirname "${BASH_SOURCE[0]}")/common.sh" "$@"
TRAIN_FILE=$NLI_FILE

table simcse_table_sup - "SimCSE Table 5, supervised rows (STS test, Spearman x 100)"
for encoder in bert-base-uncased bert-large-uncased roberta-base roberta-large; do
  sup_simcse_recipe "$encoder"
  row "$encoder" run_unsup.py sts_sup "${RECIPE[@]}"
done
