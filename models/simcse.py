"""SimCSE (Gao, Yao, Chen; EMNLP 2021): dropout noise as the only augmentation.

Unsupervised (Sec. 3): the same sentence is encoded twice in one pass with independent dropout masks; the two
outputs are positives (Eq. 1). Supervised (Sec. 4): NLI entailment pairs are positives and contradictions hard
negatives (Eq. 5); the MLP is kept at test time. Both are the shared base with method defaults only: the base
*is* SimCSE's objective, so nothing is overridden here.
"""
from __future__ import annotations

from typing import Any, ClassVar

from .base import ContrastiveModel


class SimCSEModel(ContrastiveModel):
    """Unsupervised SimCSE: [CLS] + MLP in training only (``cls`` + ``mlp_only_train``), tau 0.05."""

    method_defaults: ClassVar[dict[str, Any]] = {
        "method": "simcse", "pooler_type": "cls", "mlp_only_train": True, "temperature": 0.05}


class SupervisedSimCSEModel(ContrastiveModel):
    """Supervised SimCSE on (premise, entailment, contradiction) triples; the MLP is kept at test time."""

    method_defaults: ClassVar[dict[str, Any]] = {
        "method": "sup_simcse", "pooler_type": "cls", "mlp_only_train": False, "temperature": 0.05,
        "hard_negative_weight": 0.0}
    view_columns: ClassVar[tuple[str, ...]] = ("sent0", "sent1", "hard_neg")
