"""Fixed batch shapes for a compiled training step: a collator whose views are padded to a few widths.

A compiled step (``trainers/fast_path.py``) specialises on its input shapes; a batch padded to its own longest view
(what every collator does, ``data.collators``) has a new width almost every step, so the step would recompile.
:class:`FixedShapeCollator` wraps any collator of this package and pads the views' keys (``input_ids``,
``attention_mask``, ``token_type_ids``, ``[B, V, L]``) on the right to the smallest of a few widths
(:func:`bucket_widths`: multiples of ``max_length`` up to the collator's ``max_width``), so a run compiles one step
per width (one for SimCSE at ``max_length``; two for ESimCSE's lengthened positives, PromptBERT's templated views).

Padding changes no result: a padded position is masked out of attention and pooling (tests/test_fast_path.py checks
every method's loss). Other keys (DiffCSE's ``rtd_*`` edit rows, which its eager discriminator reads and whose
padding its ``--fidelity official_code`` loss counts) are left as the collator made them.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

__all__ = ["FixedShapeCollator", "VIEW_KEYS", "bucket_widths"]

#: The keys the backbone reads (``[B, V, L]``): the only ones padded.
VIEW_KEYS = ("input_ids", "attention_mask", "token_type_ids")


def bucket_widths(max_length: int, max_width: int) -> tuple[int, ...]:
    """The widths a batch is padded to: ``max_length``, its multiples below ``max_width``, and ``max_width``.

    >>> bucket_widths(32, 32), bucket_widths(32, 64), bucket_widths(32, 46)
    ((32,), (32, 64), (32, 46))
    """
    if max_length < 1 or max_width < 1:
        raise ValueError(f"max_length and max_width must be positive, got {max_length} and {max_width}")
    return tuple(sorted({*range(max_length, max_width, max_length), max_width}))


class FixedShapeCollator:
    """``collator``'s batches with the view keys right-padded to the smallest of ``widths`` that holds them.

    Args:
        collator: any callable rows -> batch dict; its ``set_epoch`` (per-epoch augmentations) is forwarded.
        widths: the allowed widths, ascending (:func:`bucket_widths`); a batch wider than all is left as it is.
        pad_token_id: what fills ``input_ids``; the masks and ``token_type_ids`` are filled with 0.
    """

    def __init__(self, collator: Callable[[list[dict[str, Any]]], dict[str, torch.Tensor]], widths: tuple[int, ...],
                 pad_token_id: int) -> None:
        self.collator = collator
        self.widths = tuple(sorted(widths))
        self.pad_token_id = pad_token_id

    def set_epoch(self, epoch: int, seed: int | None = None) -> None:
        """Forwarded to the wrapped collator (ESimCSE's per-epoch repetition draws), when it has one."""
        if hasattr(self.collator, "set_epoch"):
            self.collator.set_epoch(epoch, seed)

    def width_for(self, width: int) -> int:
        """The smallest allowed width >= ``width`` (``width`` itself when none is)."""
        return next((w for w in self.widths if w >= width), width)

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        batch = self.collator(rows)
        extra = self.width_for(batch["input_ids"].size(-1)) - batch["input_ids"].size(-1)
        if extra:
            for key in VIEW_KEYS:
                if key in batch:
                    fill = self.pad_token_id if key == "input_ids" else 0
                    batch[key] = torch.nn.functional.pad(batch[key], (0, extra), value=fill)
        return batch
