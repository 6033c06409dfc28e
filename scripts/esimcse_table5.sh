#!/usr/bin/env bash
# ESimCSE (Wu et al., COLING 2022) Table 5: the sentence-length-extension method of the positives, BERT-base with
# momentum contrast, STS-B dev: inserting stop-words, inserting [MASK], inserting a masked LM's top-1 prediction,
# word repetition, sub-word repetition (= ESimCSE).
# Recipe: ESimCSE BERT-base (scripts/common.sh esimcse_recipe); the masked LM of "masked prediction" is
# bert-base-uncased (the encoder's own pretrained checkpoint; the paper does not name one; MLM_NAME overrides it).
# Fidelity: official_code (FIDELITY=paper overrides it): the preset of the code that produced this table's printed
# numbers: the released code (caskcsg/sentemb ESimCSE/: first commit 9ab271b 2022-10-09, at COLING 2022 and 13 months
# after arXiv v1, Sep 2021; its method code unchanged since but for fc7ca0d 2022-10-24, which drops an unused output
# field) runs the word (dup_type word, approximated here: docs/fidelity.md) and sub-word (bpe) rows; its stop-word
# path (add_stop) has its word list commented out, and [MASK] / masked-prediction insertion are not in it, so those
# rows' code is unpublished: they run with the release's method-wide choices (length rule, one draw per sentence, the
# queue through the online MLP), the closest to what the authors ran.
#     bash scripts/esimcse_table5.sh [--dry_run] [--only REGEX] [--seeds 42,43,44] [--force]
source "$(dirname "${BASH_SOURCE[0]}")/common.sh" "$@"
MLM_NAME=${MLM_NAME:-bert-base-uncased}

table esimcse_table5 official_code "ESimCSE Table 5 (STS-B dev, Spearman x 100)"
esimcse_recipe bert-base-uncased
row stopword run_unsup.py sts_dev "${RECIPE[@]}" --length_extension stopword
row mask run_unsup.py sts_dev "${RECIPE[@]}" --length_extension mask
row mlm_prediction run_unsup.py sts_dev "${RECIPE[@]}" --length_extension mlm_prediction \
  --insert_mlm_name_or_path "$MLM_NAME"
set_flag --dup_type word
row word_repetition run_unsup.py sts_dev "${RECIPE[@]}" --length_extension repetition
set_flag --dup_type subword
row subword_repetition run_unsup.py sts_dev "${RECIPE[@]}" --length_extension repetition
