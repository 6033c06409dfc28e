#!/usr/bin/env bash
# ESimCSE (Wu et al., COLING 2022) Table 9: the repetition rate dup_rate from 0.08 to 0.36 (step 0.04), BERT-base,
# STS-B dev.
# Recipe: ESimCSE BERT-base (scripts/common.sh esimcse_recipe) with the row's dup_rate.
# Fidelity: official_code (FIDELITY=paper overrides it): the preset of the code that produced this table's printed
# numbers: the released code (caskcsg/sentemb ESimCSE/: first commit 9ab271b 2022-10-09, at COLING 2022 and 13 months
# after arXiv v1, Sep 2021; its method code unchanged since but for fc7ca0d 2022-10-24, which drops an unused output
# field) runs every row (--dup_rate; its run.sh picks Table 9's optimum 0.32), and its logs are Table 3's printed
# numbers (esimcse_table3.sh).
#     bash scripts/esimcse_table9.sh [--dry_run] [--only REGEX] [--seeds 42,43,44] [--force]
source "$(dirname "${BASH_SOURCE[0]}")/common.sh" "$@"

table esimcse_table9 official_code "ESimCSE Table 9 (STS-B dev, Spearman x 100)"
esimcse_recipe bert-base-uncased
for rate in 0.08 0.12 0.16 0.20 0.24 0.28 0.32 0.36; do
  set_flag --dup_rate "$rate"
  row "dup_rate_$rate" run_unsup.py sts_dev "${RECIPE[@]}"
done
