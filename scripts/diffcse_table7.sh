#!/usr/bin/env bash
# DiffCSE (Chuang et al., NAACL 2022) Table 7: the masking ratio of the generator's input, 15% to 50%, BERT-base,
# STS-B dev.
# Recipe: DiffCSE BERT-base STS (Table 12; scripts/common.sh diffcse_recipe) with the row's masking ratio.
# Fidelity: official_code (FIDELITY=paper overrides it): the preset of the code that produced this table's printed
# numbers: the released code (voidism/DiffCSE: first commit 5f069da 2022-04-12, 9 days before arXiv 2204.10298 and
# before NAACL 2022; diffcse/models.py changed since only by 881da0e 2022-04-17, a renaming) ran argmax replacements
# at every position, 80/10/10 masking and both views edited, and its README gives the hardware used "for the results
# in our paper"; its --masking_ratio flag runs every row.
#     bash scripts/diffcse_table7.sh [--dry_run] [--only REGEX] [--seeds 42,43,44] [--force]
source "$(dirname "${BASH_SOURCE[0]}")/common.sh" "$@"

table diffcse_table7 official_code "DiffCSE Table 7 (STS-B dev, Spearman x 100)"
diffcse_recipe bert-base-uncased sts
for ratio in 0.15 0.20 0.25 0.30 0.40 0.50; do
  set_flag --masking_ratio "$ratio"
  row "masking_ratio_$ratio" run_diffcse.py sts_dev "${RECIPE[@]}"
done
