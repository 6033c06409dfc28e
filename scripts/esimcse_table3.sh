#!/usr/bin/env bash
# ESimCSE (Wu et al., COLING 2022) Table 3: ESimCSE-BERT-base, -BERT-large, -RoBERTa-base, -RoBERTa-large on the
# 7 STS test sets; the SimCSE rows of the table are scripts/simcse_table_unsup.sh.
# Recipe (scripts/common.sh esimcse_recipe): batch 64, 1 epoch, lr 3e-5 (BERT-base) / 1e-5, momentum 0.995,
# sub-word repetition with dup_rate 0.32 / 0.32 / 0.30 / 0.28, queue 160 / 160 / 160 / 128, dropout 0.1 (base) /
# 0.15 (large).
# Fidelity: paper (--fidelity paper: the paper's repetition-length rule, a new repetition every epoch, the
# momentum encoder as an EMA of encoder + MLP). FIDELITY=official_code gives the released code's choices,
# including its dropout 0.1 for BERT-large.
#     bash scripts/esimcse_table3.sh [--dry_run] [--only REGEX] [--seeds 42,43,44] [--force]
source "$(dirname "${BASH_SOURCE[0]}")/common.sh" "$@"

table esimcse_table3 paper "ESimCSE Table 3 (STS test, Spearman x 100)"
for encoder in bert-base-uncased bert-large-uncased roberta-base roberta-large; do
  esimcse_recipe "$encoder"
  row "$encoder" run_unsup.py sts "${RECIPE[@]}"
done
