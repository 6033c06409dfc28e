#!/usr/bin/env bash
# S-SimCSE (Zhang & Lan) Table 1: SimCSE, S-SimCSE without and with sentence-wise dropout ("w/o sd", "w/ sd") on
# BERT-base, BERT-large and RoBERTa-base; every row trained with each of seven seeds (42-48 unless --seeds/SEEDS
# says otherwise). The table reports the mean +- std of the top 3 of the seven 7-task STS averages, and their max:
# `python -m eval.results` aggregates results/s_simcse_table1/<row>/seed<S>.json that way, beside the mean and 95%
# confidence interval over all the seeds.
# Recipe: the paper gives none, so SimCSE's per encoder (scripts/common.sh simcse_recipe: batch 64 / 64 / 512, lr
# 3e-5 / 1e-5 / 1e-5); S-SimCSE's dropout rates uniform on [0.05, 0.15], redrawn at every dropout operation
# (models/s_simcse.py; the paper names only "e.g. uniform distribution").
# Fidelity: none (S-SimCSE released no code; --fidelity is not passed).
#     bash scripts/s_simcse_table1.sh [--dry_run] [--only REGEX] [--seeds 42,43] [--force]
source "$(dirname "${BASH_SOURCE[0]}")/common.sh" "$@"
default_seeds "42 43 44 45 46 47 48"

table s_simcse_table1 - "S-SimCSE Table 1 (7-task STS test average, top-3-of-7-seeds mean +- std, and max)"
for encoder in bert-base-uncased bert-large-uncased roberta-base; do
  simcse_recipe "$encoder"
  row "simcse_$encoder" run_unsup.py sts "${RECIPE[@]}"
  set_flag --method s_simcse
  sampled=(--dropout_dist uniform --dropout_low 0.05 --dropout_high 0.15 --dropout_sample_per_op true)
  row "s_simcse_wo_sd_$encoder" run_unsup.py sts "${RECIPE[@]}" "${sampled[@]}" --sentence_wise_dropout false
  row "s_simcse_w_sd_$encoder" run_unsup.py sts "${RECIPE[@]}" "${sampled[@]}" --sentence_wise_dropout true
done
