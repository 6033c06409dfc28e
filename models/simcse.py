"""SimCSE (Gao, Yao, Chen; EMNLP 2021): dropout is the augmentation.

- Unsupervised (Sec. 3): the same sentence is encoded twice in one pass with independent dropout masks; the two
  outputs are positives and the other sentences of the batch negatives:

      l_i = -log( e^{sim(h_i, h_i^+)/tau} / sum_j e^{sim(h_i, h_j^+)/tau} )                        (Eq. 1)

- Supervised (Sec. 4): NLI entailment pairs are positives and contradictions hard negatives (Eq. 5); the MLP is kept
  at test time.

Both are the shared InfoNCE, ``models.losses.info_nce`` (the base's objective, ``ContrastiveModel.compute_loss``,
with no other part switched on). Every default of ``models.config`` is the unsupervised recipe ([CLS] + MLP in
training only, tau 0.05, dropout 0.1), so ``SimCSEModel`` sets nothing; ``method_defaults`` hold only what differs.
"""
from __future__ import annotations

from typing import Any, ClassVar

from .base import ContrastiveModel


class SimCSEModel(ContrastiveModel):
    """Unsupervised SimCSE: [CLS] + MLP in training only (``cls`` + ``mlp_only_train``), tau 0.05, Eq. 1."""


class SupervisedSimCSEModel(ContrastiveModel):
    """Supervised SimCSE on (premise, entailment, contradiction) triples (Eq. 5); the MLP is kept at test time. On a
    corpus of pairs (``sent0,sent1``: the official code's two-column CSV, the paper's Table 4 rows without hard
    negatives) the views are the pair and the objective Eq. 1 with ``sent1`` as the positive."""

    method_defaults: ClassVar[dict[str, Any]] = {"mlp_only_train": False}
    view_columns: ClassVar[tuple[str, ...]] = ("sent0", "sent1", "hard_neg")
    optional_view_columns: ClassVar[tuple[str, ...]] = ("hard_neg",)


__all__ = ["SimCSEModel", "SupervisedSimCSEModel"]
