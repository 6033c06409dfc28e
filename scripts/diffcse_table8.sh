#!/usr/bin/env bash
# DiffCSE (Chuang et al., NAACL 2022) Table 8: the weight lambda of the RTD loss, 0 (SimCSE with DiffCSE's
# BatchNorm projector) to 0.1, BERT-base, STS-B dev.
# Recipe: DiffCSE BERT-base STS (Table 12; scripts/common.sh diffcse_recipe) with the row's lambda.
# Fidelity: official_code (FIDELITY=paper overrides it): the preset of the code that produced this table's printed
# numbers: the released code (voidism/DiffCSE: first commit 5f069da 2022-04-12, 9 days before arXiv 2204.10298 and
# before NAACL 2022; diffcse/models.py changed since only by 881da0e 2022-04-17, a renaming) ran argmax replacements
# at every position, 80/10/10 masking and both views edited, and its README gives the hardware used "for the results
# in our paper"; its --lambda_weight flag runs every row.
#     bash scripts/diffcse_table8.sh [--dry_run] [--only REGEX] [--seeds 42,43,44] [--force]
source "$(dirname "${BASH_SOURCE[0]}")/common.sh" "$@"

table diffcse_table8 official_code "DiffCSE Table 8 (STS-B dev, Spearman x 100)"
diffcse_recipe bert-base-uncased sts
for weight in 0 0.0001 0.0005 0.001 0.005 0.01 0.05 0.1; do
  set_flag --lambda_weight "$weight"
  row "lambda_$weight" run_diffcse.py sts_dev "${RECIPE[@]}"
done
