#!/usr/bin/env bash
# DiffCSE (Chuang et al., NAACL 2022) Table 2, the rows it trains: SimCSE and DiffCSE on BERT-base and
# RoBERTa-base, 7 SentEval transfer tasks (test accuracy, logistic regression on frozen [CLS] embeddings).
# Not scripted: "SimCSE w/ MLM" (SimCSE's auxiliary MLM objective is not implemented here).
# Recipes: DiffCSE's transfer setting, Table 13 (scripts/common.sh diffcse_recipe ... transfer: BERT-base lr 2e-6,
# batch 64; RoBERTa-base lr 3e-6, batch 128; masking ratio 0.15, lambda 0.05, 2 epochs); SimCSE's own recipe per
# encoder. Checkpoints are selected on STS-B dev, as the paper says of all its runs (Appendix A).
# Fidelity: official_code (FIDELITY=paper overrides it): the preset of the code that produced this table's printed
# numbers: the released code (voidism/DiffCSE: first commit 5f069da 2022-04-12, 9 days before arXiv 2204.10298 and
# before NAACL 2022; diffcse/models.py changed since only by 881da0e 2022-04-17, a renaming) ran argmax replacements
# at every position, 80/10/10 masking and both views edited, and its README gives the hardware used "for the results
# in our paper"; its flags run Table 13's transfer recipe.
#     bash scripts/diffcse_table2.sh [--dry_run] [--only REGEX] [--seeds 42,43,44] [--force]
source "$(dirname "${BASH_SOURCE[0]}")/common.sh" "$@"

table diffcse_table2 official_code "DiffCSE Table 2 (transfer tasks, test accuracy)"
for encoder in bert-base-uncased roberta-base; do
  simcse_recipe "$encoder"
  row "simcse_$encoder" run_unsup.py transfer "${RECIPE[@]}"
  diffcse_recipe "$encoder" transfer
  row "diffcse_$encoder" run_diffcse.py transfer "${RECIPE[@]}"
done
