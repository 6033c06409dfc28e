#!/usr/bin/env bash
# ESimCSE (Wu et al., COLING 2022) Table 4: what each half of ESimCSE adds to SimCSE, BERT-base, STS-B dev:
# SimCSE, + word repetition (no momentum contrast), + momentum contrast (no repetition), ESimCSE.
# The paper calls the positive-side change "word repetition" here; Sec. 4.2 says every experiment uses sub-word
# repetition, so these rows do too (Table 5 compares the two).
# Recipes: SimCSE BERT-base (64 / 3e-5) and ESimCSE BERT-base (scripts/common.sh).
# Fidelity: official_code (FIDELITY=paper overrides it): the preset of the code that produced this table's printed
# numbers: the released code (caskcsg/sentemb ESimCSE/: first commit 9ab271b 2022-10-09, at COLING 2022 and 13 months
# after arXiv v1, Sep 2021; its method code unchanged since but for fc7ca0d 2022-10-24, which drops an unused output
# field) runs every row (--momentum 0: no momentum contrast; --dup_type none: no repetition), and its logs are Table
# 3's printed numbers (esimcse_table3.sh).
#     bash scripts/esimcse_table4.sh [--dry_run] [--only REGEX] [--seeds 42,43,44] [--force]
source "$(dirname "${BASH_SOURCE[0]}")/common.sh" "$@"

table esimcse_table4 official_code "ESimCSE Table 4 (STS-B dev, Spearman x 100)"
simcse_recipe bert-base-uncased
row simcse run_unsup.py sts_dev "${RECIPE[@]}"
esimcse_recipe bert-base-uncased
row word_repetition run_unsup.py sts_dev "${RECIPE[@]}" --momentum_contrast false
row momentum_contrast run_unsup.py sts_dev "${RECIPE[@]}" --length_extension none
row esimcse run_unsup.py sts_dev "${RECIPE[@]}"
