#!/usr/bin/env bash
# DiffCSE (Chuang et al., NAACL 2022) Table 5: DiffCSE and SimCSE with and without the BatchNorm projector,
# BERT-base, STS-B dev and the transfer tasks' average dev accuracy.
# Recipes: DiffCSE BERT-base STS (Table 12; scripts/common.sh diffcse_recipe), SimCSE BERT-base (64 / 3e-5);
# "w/o BatchNorm" = SimCSE's Linear+Tanh MLP.
# Fidelity: official_code (FIDELITY=paper overrides it): the preset of the code that produced this table's printed
# numbers: the released code (voidism/DiffCSE: first commit 5f069da 2022-04-12, 9 days before arXiv 2204.10298 and
# before NAACL 2022; diffcse/models.py changed since only by 881da0e 2022-04-17, a renaming) ran argmax replacements
# at every position, 80/10/10 masking and both views edited, and its README gives the hardware used "for the results
# in our paper"; its --batchnorm flag runs every row.
#     bash scripts/diffcse_table5.sh [--dry_run] [--only REGEX] [--seeds 42,43,44] [--force]
source "$(dirname "${BASH_SOURCE[0]}")/common.sh" "$@"

table diffcse_table5 official_code "DiffCSE Table 5 (STS-B dev, transfer dev average)"
diffcse_recipe bert-base-uncased sts
row diffcse_batchnorm run_diffcse.py dev_transfer "${RECIPE[@]}"
set_flag --batchnorm false
row diffcse_no_batchnorm run_diffcse.py dev_transfer "${RECIPE[@]}"
simcse_recipe bert-base-uncased
row simcse_batchnorm run_unsup.py dev_transfer "${RECIPE[@]}" --projector batchnorm
row simcse_no_batchnorm run_unsup.py dev_transfer "${RECIPE[@]}" --projector mlp
