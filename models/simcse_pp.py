"""SimCSE++ (Xu, Shao, Chen, Liu; EMNLP 2023): off-dropout negatives + dimension-wise contrastive learning (DCL).

The two parts are method-agnostic and live in the shared base (:mod:`models.parts`, :mod:`models.dropout`), so
they switch on for ANY method by config: ``--off_dropout true`` and ``--dcl_weight 0.1`` on ESimCSE, S-SimCSE or
DiffCSE give "+SimCSE++" (the paper's Table 4 applies them to DiffCSE). This class is SimCSE with both on:

- Off-dropout sampling (Sec. 3.2): a copy of view 0 rides in the same backbone pass with dropout rate 0
  (:class:`models.dropout.RowDropout`); the negatives are similarities between those dropout-free embeddings (they
  keep their gradient), the positive pair keeps dropout, trade-off m = 0.9
  (:func:`models.losses.off_dropout_info_nce`). Default form: the authors' code, cross-entropy whose positive
  logit is m * s+ (``simcse/models_re.py``); Eq. 3 as printed (m on the negative sum) with
  ``--off_dropout_form paper``. Table 5 (m = 0.5 drops STS-B dev from 83.8 to 68.6) fits the code form: scaling
  the positive logit by m caps the margin it can reach, while a factor on the negative sum only adds log m to them.
- DCL (Sec. 4.3, Eq. 5-6): ``+ lambda * dcl_loss(z1, z2, tau_DCL)``, lambda 0.1, tau_DCL 5, on the code's scale
  (BatchNorm statistics, / batch size, mean over dimensions) by default since those values were tuned on it; the
  printed form with ``--dcl_form paper``. Under DDP it sees the gathered batch.

Ablations (flags, docs/simcse_pp.md): ``--noise_study {pos_plus,pos_minus,neg_plus,neg_minus}`` (Table 1) and
``--barlow_weight/--barlow_lambda/--barlow_pad`` (Table 2).
"""
from __future__ import annotations

from typing import Any, ClassVar

from .base import ContrastiveModel
from .registry import register


class SimCSEPlusPlusModel(ContrastiveModel):
    """Unsupervised SimCSE + off-dropout negatives (m = 0.9) + DCL (lambda 0.1, tau_DCL 5): the paper's BERT-base
    SimCSE++."""

    method_defaults: ClassVar[dict[str, Any]] = {
        "method": "simcse_pp", "pooler_type": "cls", "mlp_only_train": True, "temperature": 0.05,
        "off_dropout": True, "pos_neg_tradeoff": 0.9, "off_dropout_form": "code",
        "dcl_weight": 0.1, "dcl_temp": 5.0, "dcl_form": "code"}


register("simcse_pp", SimCSEPlusPlusModel)

__all__ = ["SimCSEPlusPlusModel"]
