#!/usr/bin/env bash
# ESimCSE (Wu et al., COLING 2022) Table 3: ESimCSE-BERT-base, -BERT-large, -RoBERTa-base, -RoBERTa-large on the
# 7 STS test sets; the SimCSE rows of the table are scripts/simcse_table_unsup.sh.
# Recipe (scripts/common.sh esimcse_recipe): batch 64, 1 epoch, lr 3e-5 (BERT-base) / 1e-5, momentum 0.995,
# sub-word repetition with dup_rate 0.32 / 0.32 / 0.30 / 0.28, queue 160 / 160 / 160 / 128, dropout 0.1 (base) /
# 0.15 (large).
# Fidelity: official_code (FIDELITY=paper overrides it): the preset of the code that produced this table's printed
# numbers: the released code (caskcsg/sentemb ESimCSE/: first commit 9ab271b 2022-10-09, at COLING 2022 and 13 months
# after arXiv v1, Sep 2021; its method code unchanged since but for fc7ca0d 2022-10-24, which drops an unused output
# field) ships run.sh and logs/<encoder>.log whose 7 STS scores are exactly this table's (78.27 / 79.31 / 77.44 /
# 79.45), dropout 0.1 for BERT-large included.
#     bash scripts/esimcse_table3.sh [--dry_run] [--only REGEX] [--seeds 42,43,44] [--force]
source "$(dirname "${BASH_SOURCE[0]}")/common.sh" "$@"

table esimcse_table3 official_code "ESimCSE Table 3 (STS test, Spearman x 100)"
for encoder in bert-base-uncased bert-large-uncased roberta-base roberta-large; do
  esimcse_recipe "$encoder"
  row "$encoder" run_unsup.py sts "${RECIPE[@]}"
done
