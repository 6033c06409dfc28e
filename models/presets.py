"""``--fidelity {paper,official_code}``: one switch for every place where an author's code differs from its paper.

Without ``--fidelity`` each field keeps its own default: the paper's, except SimCSE++'s two loss forms, where the
printed equations cannot have produced the paper's own tables (``off_dropout_form`` and ``dcl_form`` default to
the code; see :func:`models.losses.off_dropout_info_nce` and :func:`models.losses.dcl_loss`). A preset fills the
fields the user did not set explicitly; explicit flags always win. Fields of other methods are set too and are
inert (ESimCSE's fields do nothing in a SimCSE++ run).

S-SimCSE released no code, and SimCSE/DiffCSE differences are handled by their own modules, so neither appears.
Bugs of the original code that are not paper/code *choices* (the momentum encoder starting from random weights,
DCL dividing by the local batch under DDP) are never reproduced.
"""
from __future__ import annotations

from typing import Any

FIDELITY_PRESETS: dict[str, dict[str, Any]] = {
    "paper": {
        # ESimCSE (Wu et al., 2022)
        "dup_length_rule": "paper",      # Eq. 3: dup_len ~ U{0 .. max(2, int(dup_rate * N))}
        "resample_repetition": True,     # a new repetition each time a sentence is seen
        "queue_through_mlp": False,      # theta_m is an EMA of the whole embedding function (encoder + MLP)
        # SimCSE++ (Xu et al., 2023)
        "off_dropout_form": "paper",     # Eq. 3: m weighs the negative sum
        "dcl_form": "paper",             # Eq. 5: sum over dimensions, no 1/N, unbiased variance
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
    },
}


def fidelity_overrides(fidelity: str | None) -> dict[str, Any]:
    """The config values a preset sets (``None``: none), plus ``fidelity`` itself for the record."""
    if fidelity is None:
        return {}
    if fidelity not in FIDELITY_PRESETS:
        raise ValueError(f"fidelity={fidelity!r}; choose one of {', '.join(FIDELITY_PRESETS)}")
    return {**FIDELITY_PRESETS[fidelity], "fidelity": fidelity}


__all__ = ["FIDELITY_PRESETS", "fidelity_overrides"]
