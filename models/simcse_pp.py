"""SimCSE++ (Xu, Shao, Chen, Liu; EMNLP 2023): off-dropout negatives + dimension-wise contrastive learning (DCL).

SimCSE++ is SimCSE with two parts switched on, m = 0.9 and lambda = 0.1 (the paper's BERT-base setting):

    L = L_off-dropout(z1, z2, z_off; m) + lambda * L_DCL(z1, z2; tau_DCL = 5)

- Off-dropout sampling (Sec. 3.2, Eq. 3: ``models.losses.off_dropout_info_nce``): a copy of view 0 rides in the
  same backbone pass with dropout rate 0 (``models.views.ViewLayout`` + ``models.dropout.RowDropout``); the negatives
  are similarities between those dropout-free embeddings (they keep their gradient), the positive pair keeps
  dropout. Default form: the authors' code, cross-entropy whose positive logit is m * s+ (``simcse/models_re.py``);
  Eq. 3 as printed (m on the negative sum) with ``--off_dropout_form paper``. Table 5 (m = 0.5 drops STS-B dev from
  83.8 to 68.6) fits the code form: scaling the positive logit by m caps the margin it can reach, while a factor on
  the negative sum only adds log m to them.
- DCL (Sec. 4.3, Eq. 5-6: ``models.losses.dcl_loss``): lambda 0.1, tau_DCL 5, on the code's scale (BatchNorm
  statistics, / batch size, mean over dimensions) by default since those values were tuned on it; the printed form
  with ``--dcl_form paper``. Under DDP it sees the gathered batch.
- Ablations: the Table 1 noise study (``models.losses.noise_study_loss``, ``--noise_study``) and BarlowTwins with
  artificial padding (``models.losses.barlow_twins_loss``, Eq. 4, Table 2, ``--barlow_weight/--barlow_lambda/
  --barlow_pad``).

The paper presents the parts as generic ("can be applied to any contrastive learning based models"), so they are
terms of the shared objective (``models.losses.contrastive_objective``) that the config switches on:
``--off_dropout true`` / ``--dcl_weight 0.1`` work on ESimCSE, S-SimCSE and DiffCSE too (its Table 4 applies them
to DiffCSE). docs/architecture.md lists the lines of each equation.
"""
from __future__ import annotations

from typing import Any, ClassVar

from .base import ContrastiveModel


class SimCSEPlusPlusModel(ContrastiveModel):
    """SimCSE + off-dropout negatives (m = 0.9) + DCL (lambda 0.1, tau_DCL 5): the paper's BERT-base SimCSE++."""

    method_defaults: ClassVar[dict[str, Any]] = {"off_dropout": True, "dcl_weight": 0.1}


__all__ = ["SimCSEPlusPlusModel"]
