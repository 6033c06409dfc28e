"""The methods whose model IS SimCSE's (one pass, InfoNCE), configured differently: their novelty lives elsewhere.

- SimCSE (Gao, Yao, Chen; EMNLP 2021), unsupervised (Sec. 3): the same sentence is encoded twice in one pass with
  independent dropout masks; the two outputs are positives (Eq. 1). Every default of ``models.config`` is this
  recipe, so its class sets nothing.
- Supervised SimCSE (Sec. 4): NLI entailment pairs are positives and contradictions hard negatives (Eq. 5); the MLP
  is kept at test time.
- SimCSE++ (Xu et al., 2023): SimCSE with off-dropout negatives (m = 0.9) and DCL (lambda 0.1, tau_DCL 5) on: the
  parts are in ``models/simcse_pp.py`` (and apply to any method by config).
- S-SimCSE (Zhang & Lan): SimCSE with sampled dropout rates (uniform [0.05, 0.15], redrawn at every dropout
  operation, per sentence: "w/ sd"): the rate sampler is in ``models/s_simcse.py``, the per-row dropout that applies
  it in ``models/dropout.py``.

``method_defaults`` hold only what differs from the declared defaults (``models.config``).
"""
from __future__ import annotations

from typing import Any, ClassVar

from .base import ContrastiveModel


class SimCSEModel(ContrastiveModel):
    """Unsupervised SimCSE: [CLS] + MLP in training only (``cls`` + ``mlp_only_train``), tau 0.05."""


class SupervisedSimCSEModel(ContrastiveModel):
    """Supervised SimCSE on (premise, entailment, contradiction) triples; the MLP is kept at test time."""

    method_defaults: ClassVar[dict[str, Any]] = {"mlp_only_train": False}
    view_columns: ClassVar[tuple[str, ...]] = ("sent0", "sent1", "hard_neg")


class SimCSEPlusPlusModel(ContrastiveModel):
    """SimCSE + off-dropout negatives + DCL: the paper's BERT-base SimCSE++ (``models/simcse_pp.py``)."""

    method_defaults: ClassVar[dict[str, Any]] = {"off_dropout": True, "dcl_weight": 0.1}


class SSimCSEModel(ContrastiveModel):
    """SimCSE with sampled dropout rates: uniform [0.05, 0.15] at every dropout operation, per sentence
    (``models/s_simcse.py``)."""

    method_defaults: ClassVar[dict[str, Any]] = {"dropout_dist": "uniform", "sentence_wise_dropout": True}


__all__ = ["SSimCSEModel", "SimCSEModel", "SimCSEPlusPlusModel", "SupervisedSimCSEModel"]
