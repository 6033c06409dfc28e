"""Presets: named sets of settings, the one table for each. Every name and value is checked against the settings'
declaration (:mod:`models.config`) when this module is imported, so a misspelt preset entry is an error.

``--fidelity {paper,official_code}``: one switch for every place where an author's code differs from its paper.
Without ``--fidelity`` each setting keeps its own default: the paper's, except SimCSE++'s two loss forms, where the
printed equations cannot have produced the paper's own tables (``off_dropout_form`` and ``dcl_form`` default to
the code; see :func:`models.losses.off_dropout_info_nce` and :func:`models.losses.dcl_loss`). A preset fills
the settings the user did not set explicitly; explicit flags always win. Settings of other methods are set too and
are inert (ESimCSE's settings do nothing in a SimCSE++ run). S-SimCSE released no code, so it has no entry.

Bugs of the original code that are not paper/code *choices* (the momentum encoder starting from random weights,
DCL dividing by the local batch under DDP) are never reproduced.

``--task_profile {sts,transfer}`` (``run_diffcse.py``): DiffCSE's two BERT-base recipes, Table 12 (STS: the
defaults) and Table 13 (transfer).
"""
from __future__ import annotations

from typing import Any

from .config import check_settings

FIDELITY_PRESETS: dict[str, dict[str, Any]] = {
    "paper": {
        # ESimCSE (Wu et al., 2022)
        "dup_length_rule": "paper",      # Eq. 3: dup_len ~ U{0 .. max(2, int(dup_rate * N))}
        "resample_repetition": True,     # a new repetition each time a sentence is seen
        "queue_through_mlp": False,      # theta_m is an EMA of the whole embedding function (encoder + MLP)
        # SimCSE++ (Xu et al., 2023)
        "off_dropout_form": "paper",     # Eq. 3: m weighs the negative sum
        "dcl_form": "paper",             # Eq. 5: sum over dimensions, no 1/N, unbiased variance
        # DiffCSE (Chuang et al., 2022)
        "sample_generator": True,        # x'' sampled from the generator
        "generator_dropout": False,      # a fixed generator (eval mode)
        "mask_style": "mask",            # every masked token -> [MASK]
        "generator_all_positions": False,
        "rtd_all_views": False,          # one edited sentence per sentence
        "rtd_include_padding": False,
        "rtd_condition_site": "inputs_embeds",
        # PromptBERT (Jiang et al., 2022)
        "eval_add_period": False,        # the sentence goes into the template as it is (Sec. 4)
    },
    "official_code": {
        # ESimCSE: github.com/caskcsg/ESimCSE
        "dup_length_rule": "code",       # randrange(min(10, int(dup_rate * N)))
        "resample_repetition": False,    # repetition applied once at preprocessing (cached)
        "queue_through_mlp": True,       # momentum [CLS] through the online MLP
        "gather_queue": False,           # per-process queue
        # SimCSE++: github.com/Jiahao004/SimCSE-plus-plus
        "off_dropout_form": "code",      # cross-entropy with positive logit m * s_pos (models_re.py)
        "dcl_form": "code",              # BatchNorm1d(affine=False), / batch size, mean over dimensions
        # DiffCSE: github.com/voidism/DiffCSE (diffcse/models.py, trainers.py)
        "sample_generator": False,       # argmax of the generator
        "generator_dropout": True,       # the generator is a submodule: model.train() switches its dropout on
        "mask_style": "bert",            # 80/10/10 masking
        "generator_all_positions": True,  # the generator's output at every position
        "rtd_all_views": True,           # both dropout views edited
        "rtd_include_padding": True,     # the RTD loss over padding too
        "rtd_condition_site": "embeddings_output",  # h after the embeddings' LayerNorm/dropout
        # PromptBERT: github.com/kongds/Prompt-BERT (evaluation.py, eval_only.sh, prompt_bert/models.py)
        "eval_add_period": True,         # evaluation.py's batcher appends '.' to a sentence not ending in .?"'
        "test_denoising": False,         # eval_only.sh unsup-bert passes no --mask_embedding_sentence_delta
        "dev_denoising": True,           # sentemb_forward (the dev evaluation that picks the checkpoint) denoises
    },
}

#: DiffCSE's recipes: settings plus the learning rate (a training argument, applied by run_diffcse.py).
TASK_PROFILES: dict[str, dict[str, Any]] = {
    "sts": {},                                                                       # Table 12 = the defaults
    "transfer": {"learning_rate": 2e-6, "lambda_weight": 0.05, "masking_ratio": 0.15},  # Table 13
}
TRAINING_KEYS = ("learning_rate",)


def fidelity_overrides(fidelity: str | None) -> dict[str, Any]:
    """The settings a preset sets (``None``: none), plus ``fidelity`` itself for the record."""
    if fidelity is None:
        return {}
    if fidelity not in FIDELITY_PRESETS:
        raise ValueError(f"--fidelity {fidelity!r}: choose one of {', '.join(FIDELITY_PRESETS)}")
    return {**FIDELITY_PRESETS[fidelity], "fidelity": fidelity}


for _name, _preset in FIDELITY_PRESETS.items():
    check_settings(_preset, where=f"FIDELITY_PRESETS[{_name!r}]")
for _name, _profile in TASK_PROFILES.items():
    check_settings({k: v for k, v in _profile.items() if k not in TRAINING_KEYS}, where=f"TASK_PROFILES[{_name!r}]")

__all__ = ["FIDELITY_PRESETS", "TASK_PROFILES", "TRAINING_KEYS", "fidelity_overrides"]
