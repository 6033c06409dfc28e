#!/usr/bin/env bash
# ESimCSE (Wu et al., COLING 2022) Table 10: the momentum-contrast queue size, 1 / 1.5 / 2 / 2.5 / 3 x the batch
# size (64), BERT-base, STS-B dev.
# Recipe: ESimCSE BERT-base (scripts/common.sh esimcse_recipe) with the row's queue size.
# Fidelity: official_code (FIDELITY=paper overrides it): the preset of the code that produced this table's printed
# numbers: the released code (caskcsg/sentemb ESimCSE/: first commit 9ab271b 2022-10-09, at COLING 2022 and 13 months
# after arXiv v1, Sep 2021; its method code unchanged since but for fc7ca0d 2022-10-24, which drops an unused output
# field) runs every row (--neg_size; its run.sh picks Table 10's optimum 160), and its logs are Table 3's printed
# numbers (esimcse_table3.sh).
#     bash scripts/esimcse_table10.sh [--dry_run] [--only REGEX] [--seeds 42,43,44] [--force]
source "$(dirname "${BASH_SOURCE[0]}")/common.sh" "$@"

table esimcse_table10 official_code "ESimCSE Table 10 (STS-B dev, Spearman x 100)"
esimcse_recipe bert-base-uncased
for size in 64 96 128 160 192; do
  set_flag --queue_size "$size"
  row "queue_$size" run_unsup.py sts_dev "${RECIPE[@]}"
done
