"""Fixed batch shapes for a compiled training step: a collator whose views are padded to one width.

A compiled step (``trainers/fast_path.py``) specialises on its input shapes; a batch padded to its own longest view
(what every collator does, ``data.collators``) has a new width almost every step, so the step would recompile.
:class:`FixedShapeCollator` wraps any collator of this package and pads the views' keys (``input_ids``,
``attention_mask``, ``token_type_ids``, ``[B, V, L]``) on the right to one width: the collator's ``max_width``, the
widest batch it can make (``max_length``; ESimCSE's lengthened positive: plus the most its repetition adds, 41 of
32 at its defaults; PromptBERT: ``max_length`` plus the longest template). One width means one compiled graph per
pass; a smaller second width would rarely serve, since a batch of 64 almost always holds one sentence long enough to
need the full width.

Padding changes no result: a padded position is masked out of attention and pooling (tests/test_fast_path.py checks
every method's loss). Other keys are padded only where the model says their padding changes nothing
(``extra_fills``, from the model's ``fixed_width_keys()`` and the collator's ``padding_values()``: DiffCSE's ``rtd_*``
edit rows, which its generator and discriminator read; its ``--rtd_include_padding`` loss counts the padding up to
the collator's own width only); the rest are left as the collator made them.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import torch

__all__ = ["FixedShapeCollator", "VIEW_KEYS"]

#: The keys the backbone reads (``[B, V, L]``): the only ones padded.
VIEW_KEYS = ("input_ids", "attention_mask", "token_type_ids")


class FixedShapeCollator:
    """``collator``'s batches with the view keys right-padded to ``width``.

    Args:
        collator: any callable rows -> batch dict; its ``set_epoch`` (per-epoch augmentations) is forwarded.
        width: the width every batch is padded to; a wider batch (none, from this package's collators) is left as is.
        pad_token_id: what fills ``input_ids``; the masks and ``token_type_ids`` are filled with 0.
        extra_fills: further keys to pad to ``width`` (their last dimension), with the value that fills each.
    """

    def __init__(self, collator: Callable[[list[dict[str, Any]]], dict[str, torch.Tensor]], width: int,
                 pad_token_id: int, extra_fills: Mapping[str, int] | None = None) -> None:
        if width < 1:
            raise ValueError(f"width must be positive, got {width}")
        self.collator = collator
        self.width = width
        self.pad_token_id = pad_token_id
        #: What fills each padded key: the views' and ``extra_fills``.
        self.fills = {key: pad_token_id if key == "input_ids" else 0 for key in VIEW_KEYS} | dict(extra_fills or {})

    def set_epoch(self, epoch: int, seed: int | None = None) -> None:
        """Forwarded to the wrapped collator (ESimCSE's per-epoch repetition draws), when it has one."""
        if hasattr(self.collator, "set_epoch"):
            self.collator.set_epoch(epoch, seed)

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        batch = self.collator(rows)
        for key, fill in self.fills.items():
            if key in batch and (extra := self.width - batch[key].size(-1)) > 0:
                batch[key] = torch.nn.functional.pad(batch[key], (0, extra), value=fill)
        return batch
