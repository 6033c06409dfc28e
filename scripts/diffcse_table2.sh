#!/usr/bin/env bash
# DiffCSE (Chuang et al., NAACL 2022) Table 2, the rows it trains: SimCSE and DiffCSE on BERT-base and
# RoBERTa-base, 7 SentEval transfer tasks (test accuracy, logistic regression on frozen [CLS] embeddings).
# Not scripted: "SimCSE w/ MLM" (SimCSE's auxiliary MLM objective is not implemented here).
# Recipes: DiffCSE's transfer setting, Table 13 (scripts/common.sh diffcse_recipe ... transfer: BERT-base lr 2e-6,
# batch 64; RoBERTa-base lr 3e-6, batch 128; masking ratio 0.15, lambda 0.05, 2 epochs); SimCSE's own recipe per
# encoder. Checkpoints are selected on STS-B dev, as the paper says of all its runs (Appendix A).
# Fidelity: paper (--fidelity paper; see diffcse_table1.sh).
#     bash scripts/diffcse_table2.sh [--dry_run] [--only REGEX] [--seeds 42,43,44] [--force]
source "$(dirname "${BASH_SOURCE[0]}")/common.sh" "$@"

table diffcse_table2 paper "DiffCSE Table 2 (transfer tasks, test accuracy)"
for encoder in bert-base-uncased roberta-base; do
  simcse_recipe "$encoder"
  row "simcse_$encoder" run_unsup.py transfer "${RECIPE[@]}"
  diffcse_recipe "$encoder" transfer
  row "diffcse_$encoder" run_diffcse.py transfer "${RECIPE[@]}"
done
