#!/usr/bin/env bash
# ESimCSE (Wu et al., COLING 2022) Table 10: the momentum-contrast queue size, 1 / 1.5 / 2 / 2.5 / 3 x the batch
# size (64), BERT-base, STS-B dev.
# Recipe: ESimCSE BERT-base (scripts/common.sh esimcse_recipe) with the row's queue size.
# Fidelity: paper (--fidelity paper).
#     bash scripts/esimcse_table10.sh [--dry_run] [--only REGEX] [--seeds 42,43,44] [--force]
source "$(dirname "${BASH_SOURCE[0]}")/common.sh" "$@"

table esimcse_table10 paper "ESimCSE Table 10 (STS-B dev, Spearman x 100)"
esimcse_recipe bert-base-uncased
for size in 64 96 128 160 192; do
  set_flag --queue_size "$size"
  row "queue_$size" run_unsup.py sts_dev "${RECIPE[@]}"
done
