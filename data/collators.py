"""Batch collators: raw text rows -> token ids of every view, stacked as [batch, views, length].

Tokenisation happens on the fly (the fast tokenizer takes ~1 ms for 64 sentences), so augmentations that act on
token ids (ESimCSE's repetition) are resampled every time a sentence is seen, and padding is dynamic: a batch is
padded to its own longest view, never to ``max_length``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
from transformers import PreTrainedTokenizerBase

from .padding import pad_token_ids

# An augmentation maps the token ids of a batch (each list includes the special tokens) to new token ids.
TokenAugmenter = Callable[[list[list[int]]], list[list[int]]]


def pad_views(
    views: Sequence[Sequence[Sequence[int]]], pad_token_id: int, with_token_type_ids: bool
) -> dict[str, torch.Tensor]:
    """Pad V views of B token-id lists to one length: -> ``input_ids`` / ``attention_mask`` [B, V, L].

    Row ``b * V + v`` of the padded ``[B * V, L]`` batch (:func:`data.padding.pad_token_ids`) is view ``v`` of
    sentence ``b``, so it reshapes to sentence-major ``[B, V, L]``; ``token_type_ids`` (all zeros) when asked.
    """
    num_views, batch_size = len(views), len(views[0])
    rows = [view[b] for b in range(batch_size) for view in views]
    batch = pad_token_ids(rows, pad_token_id, with_token_type_ids=with_token_type_ids)
    return {key: tensor.view(batch_size, num_views, -1) for key, tensor in batch.items()}


@dataclass
class ContrastiveCollator:
    """Builds the views of a contrastive batch from dataset rows.

    Args:
        tokenizer: any fast tokenizer; ``token_type_ids`` are produced only if its ``model_input_names`` has them.
        max_length: truncation length of every view (32 in all five papers).
        view_columns: the row field each view reads: ``("text", "text")`` for unsupervised SimCSE (the same
            sentence twice; tokenised once), ``("sent0", "sent1", "hard_neg")`` for supervised SimCSE.
        view_augmenters: optional per-view token-id augmentation (``None`` = identity), e.g. ESimCSE's word
            repetition on view 1. It receives the views truncated to ``max_length`` and may lengthen them up to
            twice that (ESimCSE's positive is the truncated anchor plus its repetitions, as the released code
            builds it); the batch is padded to its longest row.
    """

    tokenizer: PreTrainedTokenizerBase
    max_length: int = 32
    view_columns: Sequence[str] = ("text", "text")
    view_augmenters: Sequence[TokenAugmenter | None] = field(default_factory=tuple)

    def set_epoch(self, epoch: int, seed: int | None = None) -> None:
        """Forwarded to every augmenter that draws per epoch (ESimCSE's repetition); the trainer calls it."""
        for augment in self.view_augmenters:
            if hasattr(augment, "set_epoch"):
                augment.set_epoch(epoch, seed)

    @property
    def max_width(self) -> int:
        """The widest batch this collator can make: ``max_length``, or what an augmenter makes of it
        (:meth:`width_for`)."""
        return self.width_for(self.max_length)

    def width_for(self, max_length: int) -> int:
        """The widest batch this collator would make with sentences cut to ``max_length`` tokens: ``max_length``,
        or what an augmenter makes of it: its ``longest_output(max_length)`` (ESimCSE's repetition: 41 at its
        defaults, :class:`data.augment.LengthExtender`), else twice that (an augmentation may at most double a
        sentence)."""
        widths = [max_length]
        for augment in self.view_augmenters:
            if augment is not None:
                longest = getattr(augment, "longest_output", None)
                widths.append(longest(max_length) if longest is not None else 2 * max_length)
        return max(widths)

    def tokenize(self, texts: list[str]) -> list[list[int]]:
        """Token ids of ``texts`` (special tokens included), truncated to ``max_length``, unpadded."""
        return self.tokenizer(texts, truncation=True, max_length=self.max_length)["input_ids"]

    @property
    def text_columns(self) -> tuple[str, ...]:
        """The row fields this collator tokenises (each once)."""
        return tuple(dict.fromkeys(self.view_columns))

    def cut_count(self, texts: list[str]) -> int:
        """How many of ``texts`` :meth:`tokenize` cuts: longer than ``max_length`` tokens, special tokens included."""
        kept = self.tokenizer(texts, truncation=True, max_length=self.max_length + 1)["input_ids"]  # one past: cut
        return sum(len(ids) > self.max_length for ids in kept)

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        """Dataset rows -> ``input_ids`` / ``attention_mask`` [B, V, L] (+ ``token_type_ids``), padded per batch."""
        tokenized = {column: self.tokenize([row[column] for row in rows]) for column in dict.fromkeys(self.view_columns)}
        views = []
        for index, column in enumerate(self.view_columns):
            augment = self.view_augmenters[index] if index < len(self.view_augmenters) else None
            ids = tokenized[column]
            views.append(augment([list(x) for x in ids]) if augment is not None else ids)
        for view in views:
            too_long = max(len(ids) for ids in view)
            if too_long > 2 * self.max_length:
                raise ValueError(f"an augmenter produced a sequence of {too_long} tokens, more than twice "
                                 f"max_length={self.max_length}: an augmentation may at most double a sentence")
        return pad_views(views, self.tokenizer.pad_token_id,
                         "token_type_ids" in self.tokenizer.model_input_names)
