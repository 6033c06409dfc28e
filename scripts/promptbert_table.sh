#!/usr/bin/env bash
# PromptBERT (Jiang et al., EMNLP 2022), the main table of unsupervised results on the 7 STS test sets: the
# unsup-PromptBERT (BERT-base) and unsup-PromptRoBERTa (RoBERTa-base) rows (the official README gives them as
# 78.54 and 79.15 average, mean of 5 seeds: results/paper_numbers.json).
# Recipe (scripts/common.sh promptbert_recipe, the official run.sh unsup-bert / unsup-roberta): batch 256, 1 epoch,
# lr 1e-5, max length 32, tau 0.05, MLP in training only, template denoising, view 0 / view 1 in two different
# templates (BERT: This sentence of / : "[X]" means [MASK].; RoBERTa: This / The sentence : '[X]' means [MASK].).
# Fidelity: official_code (FIDELITY=paper overrides it): the preset of the code that produced these numbers. The
# official README gives them with `./run.sh unsup-bert|unsup-roberta $SEED` and `eval_only.sh`; the training code
# (prompt_bert/models.py 2022-01-18, train.py 2022-02-06, run.sh 2022-03-03) was last changed before the 5-seed
# numbers were published (fbc6f60, 2022-10-27, EMNLP 2022), and evaluation.py after them only in its test-time
# denoising (093e343, 2023-01-14), which these rows do not use. That code's evaluation appends '.' to a test sentence,
# does not denoise at test time and denoises the dev evaluation that picks the checkpoint (docs/fidelity.md).
# Evaluation: the export's own embedding (sts_own: the template from its config.json), never a --pooler.
#     bash scripts/promptbert_table.sh [--dry_run] [--only REGEX] [--seeds 42,43,44] [--force]
source "$(dirname "${BASH_SOURCE[0]}")/common.sh" "$@"

table promptbert_table official_code "PromptBERT unsupervised, 7 STS test sets (Spearman x 100)"
for encoder in bert-base-uncased roberta-base; do
  promptbert_recipe "$encoder"
  row "$encoder" run_unsup.py sts_own "${RECIPE[@]}"
done
