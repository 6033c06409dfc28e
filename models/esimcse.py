"""ESimCSE (Wu, Gao, Zang, Han, Wang, Hu; COLING 2022): repetition positives + momentum-contrast negatives.

- Positives (Sec. 3.1): view 0 is the sentence, view 1 the same sentence with ``dup_len`` random sub-words
  repeated (``data.augment.LengthExtender``, applied by the collator on the fly, so a sentence gets a fresh
  repetition every time it is seen). Both views go through the online encoder (with dropout) in one pass.
- Negatives (Sec. 3.2): a momentum encoder ``theta_m <- lambda theta_m + (1 - lambda) theta_e`` (Eq. 5, lambda =
  0.995, after every optimizer step, so once per step under gradient accumulation), run without dropout on view 0;
  its embeddings fill a FIFO queue of ``queue_size`` (2.5 x batch = 160), and every anchor also contrasts with the
  queue as it stood before the current batch was enqueued (Eq. 6, :func:`models.losses.queue_info_nce`).

Decisions (docs/esimcse.md):

- Queue entries and the projector: by default the momentum network is an EMA copy of the whole training-time
  embedding function, encoder *and* MLP (``queue_through_mlp=False``): the paper's theta_m is the moving average of
  "the encoder", whose output the paper defines as [CLS] + MLP. The authors' code instead sends the momentum
  encoder's [CLS] through the *online* MLP (``queue_through_mlp=True``, part of ``--fidelity official_code``).
- Across processes the queue is gathered by default (``gather_queue=True``): every process enqueues the global
  batch, so N processes train exactly the single-process objective of the global batch, as the in-batch negatives
  do. The code keeps a per-process queue (``gather_queue=False``, in ``--fidelity official_code``).
- The momentum encoder is built in ``__init__`` (so checkpoints hold it) and copied from the online encoder in
  :meth:`sync_auxiliary_networks`, after the pretrained weights are loaded (the code's copy started random).

Off-dropout negatives and DCL (SimCSE++) compose with it through the config; with off-dropout the queue joins the
dropout-free negatives.
"""
from __future__ import annotations

from typing import Any, ClassVar

import torch

from .base import ContrastiveModel
from .config import ContrastiveConfig
from .distributed import gather_no_grad
from .momentum import EmbeddingQueue, MomentumEncoder
from .registry import register
from .views import ViewEmbeddings


class ESimCSEModel(ContrastiveModel):
    """ESimCSE with the BERT-base recipe of the paper (dup_rate 0.32, sub-word repetition, lambda 0.995, queue 160,
    tau 0.05, [CLS] + MLP in training only)."""

    method_defaults: ClassVar[dict[str, Any]] = {
        "method": "esimcse", "pooler_type": "cls", "mlp_only_train": True, "temperature": 0.05,
        "dup_rate": 0.32, "dup_type": "subword", "dup_length_rule": "paper", "resample_repetition": True,
        "length_extension": "repetition", "momentum_contrast": True, "momentum": 0.995, "queue_size": 160,
        "queue_through_mlp": False, "gather_queue": True}

    def __init__(self, config: ContrastiveConfig, encoder=None) -> None:
        super().__init__(config, encoder)
        if config.momentum_contrast and config.queue_size > 0:
            self.momentum_encoder = MomentumEncoder(
                self.encoder, None if config.queue_through_mlp else self.projector)
            self.queue = EmbeddingQueue(config.queue_size, config.hidden_size)
        else:
            self.momentum_encoder = None
            self.queue = None

    # --------------------------------------------------------------------------------------------- auxiliary
    def sync_auxiliary_networks(self) -> None:
        if self.momentum_encoder is not None:
            self.momentum_encoder.copy_from(self.encoder, self.projector)

    def on_optimizer_step(self) -> None:
        if self.momentum_encoder is not None:
            self.momentum_encoder.update(self.encoder, self.projector, self.config.momentum)

    @torch.no_grad()
    def momentum_embeddings(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                            token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The momentum encoder's (dropout-free) embeddings of [N, L] inputs, through the momentum MLP or, with
        ``queue_through_mlp``, the online one."""
        pooled = self.encode(input_ids, attention_mask, token_type_ids, encoder=self.momentum_encoder.encoder)
        projector = self.projector if self.config.queue_through_mlp else self.momentum_encoder.projector
        return projector(pooled)

    # --------------------------------------------------------------------------------------------- objective
    def extra_negatives(self) -> torch.Tensor | None:
        if self.queue is None or not self.training:
            return None
        return self.queue.entries()

    def compute_loss(self, embeddings: ViewEmbeddings,
                     batch: dict[str, Any]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Eq. 6 over the queue as it stood, then enqueue the momentum embeddings of this batch's sentences."""
        loss, metrics = super().compute_loss(embeddings, batch)
        if self.queue is not None and self.training:
            metrics["queue_fill"] = self.queue.count.detach().float()
            token_type_ids = batch.get("token_type_ids")
            keys = self.momentum_embeddings(batch["input_ids"][:, 0], batch["attention_mask"][:, 0],
                                            None if token_type_ids is None else token_type_ids[:, 0])
            self.queue.enqueue(gather_no_grad(keys) if self.config.gather_queue else keys)
        return loss, metrics

    # --------------------------------------------------------------------------------------------- data
    def build_collator(self, tokenizer, max_length: int):
        """View 0: the sentence; view 1: the sentence lengthened (repetition, or a Table 5 insertion)."""
        from data.augment import LengthExtender, MaskedLMFiller
        from data.collators import ContrastiveCollator

        config = self.config
        augmenter = None
        if config.length_extension != "none":
            filler = (MaskedLMFiller.from_pretrained(config.insert_mlm_name_or_path, tokenizer)
                      if config.length_extension == "mlm_prediction" else None)
            augmenter = LengthExtender(
                tokenizer, max_length if config.truncate_positive else None, dup_rate=config.dup_rate, dup_type=config.dup_type,
                rule=config.dup_length_rule, mode=config.length_extension, resample=config.resample_repetition,
                filler=filler)
        return ContrastiveCollator(tokenizer, max_length=max_length, view_columns=self.view_columns,
                                   view_augmenters=(None, augmenter))


register("esimcse", ESimCSEModel)

__all__ = ["ESimCSEModel"]
