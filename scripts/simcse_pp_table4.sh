#!/usr/bin/env bash
# SimCSE++ (Xu et al., EMNLP 2023) Table 4, block 3: SimCSE++ on a non-SimCSE framework. DiffCSE-BERT-base as
# the released code trains it ("DiffCSE (reproduced)", footnote 1), and the same with SimCSE++'s off-dropout
# negatives and DCL on top; 7 STS test sets.
# Not scripted: blocks 1-2 (BERT-flow / whitening post-processing, and DCL as a stand-alone objective on averaged
# first-last BERT embeddings) need post-processing methods and a DCL-only objective this repo does not implement.
# Recipe: DiffCSE's BERT-base STS recipe (Table 12 of DiffCSE; scripts/common.sh diffcse_recipe) + m 0.9, DCL
# lambda 0.1, tau_DCL 5.
# Fidelity: official_code (FIDELITY=paper overrides it): the preset of the code that produced this table's printed
# numbers: the released code (Jiahao004/SimCSE-plus-plus: first commit 2022-08-31, loss code last changed c171daa
# 2022-12-23, both before the paper, arXiv / EMNLP Oct 2023; the README makes no reproduction claim) is the only code,
# and the paper's tuned m, lambda and tau_DCL fit its loss forms (Table 5); the paper's footnote 1 says DiffCSE was
# run with its official code (the DiffCSE presets: docs/fidelity.md).
#     bash scripts/simcse_pp_table4.sh [--dry_run] [--only REGEX] [--seeds 42,43,44] [--force]
source "$(dirname "${BASH_SOURCE[0]}")/common.sh" "$@"

table simcse_pp_table4 official_code "SimCSE++ Table 4, block 3 (STS test, Spearman x 100)"
diffcse_recipe bert-base-uncased sts
row diffcse_reproduced run_diffcse.py sts "${RECIPE[@]}"
row diffcse_simcse_pp run_diffcse.py sts "${RECIPE[@]}" --off_dropout true --pos_neg_tradeoff 0.9 --dcl_weight 0.1 \
  --dcl_temp 5
