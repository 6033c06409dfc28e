"""Padding of token-id rows to one rectangular tensor: the one place a batch is padded by hand.

Every collator (``data.collators``, ``data.diffcse_collator``), the masked-LM filler of ``data.augment`` and the
evaluation encoder (``eval.encoder``) pad their batches here:

- :func:`pad_rows`: rows of ints (or bools) -> one ``[N, L]`` tensor, each row filled with ``pad_value`` up to the
  longest row (or a given length), on the right or on the left.
- :func:`pad_token_ids`: rows of token ids -> ``input_ids`` (filled with the pad id), ``attention_mask`` (1 on a
  token, 0 on padding) and, when asked, all-zero ``token_type_ids``, each ``[N, L]`` ``torch.long``.
"""
from __future__ import annotations

from typing import Literal, Sequence

import torch

__all__ = ["pad_rows", "pad_token_ids"]


def pad_rows(
    rows: Sequence[Sequence[int]],
    pad_value: int,
    *,
    length: int | None = None,
    side: Literal["right", "left"] = "right",
    dtype: torch.dtype = torch.long,
) -> torch.Tensor:
    """Pad ``rows`` to one length and stack them: -> ``Tensor[len(rows), length]`` of ``dtype``.

    Args:
        rows: the rows (lists of ints, or of bools with ``dtype=torch.bool``); at least one.
        pad_value: what fills a row up (a pad token id, 0 for masks and labels, ``False`` for bool masks).
        length: the common length; ``None`` (default) = the longest row. A row longer than ``length`` is an error.
        side: ``"right"`` (default) puts the padding after a row's values, ``"left"`` before them.
        dtype: the tensor's dtype (``torch.long`` by default).

    >>> pad_rows([[5, 6, 7], [8]], 0)
    tensor([[5, 6, 7],
            [8, 0, 0]])
    """
    if side not in ("right", "left"):
        raise ValueError(f"side={side!r}; choose 'right' or 'left'")
    width = max(len(row) for row in rows) if length is None else length
    if side == "left":
        padded = [[pad_value] * (width - len(row)) + list(row) for row in rows]
    else:
        padded = [list(row) + [pad_value] * (width - len(row)) for row in rows]
    return torch.tensor(padded, dtype=dtype)


def pad_token_ids(
    rows: Sequence[Sequence[int]], pad_token_id: int, *, with_token_type_ids: bool = False
) -> dict[str, torch.Tensor]:
    """Pad token-id rows on the right to the longest row: -> ``input_ids`` / ``attention_mask`` ``[N, L]``.

    Args:
        rows: the token ids of each sequence (special tokens included); at least one row.
        pad_token_id: the id that fills ``input_ids`` after a row's tokens.
        with_token_type_ids: also return ``token_type_ids``, all zeros (one segment), shaped like ``input_ids``.

    Every tensor is ``torch.long``; ``attention_mask`` is 1 on a row's tokens and 0 on its padding.

    >>> pad_token_ids([[101, 7, 102], [101, 102]], 0)
    {'input_ids': tensor([[101,   7, 102],
            [101, 102,   0]]), 'attention_mask': tensor([[1, 1, 1],
            [1, 1, 0]])}
    """
    input_ids = pad_rows(rows, pad_token_id)
    batch = {"input_ids": input_ids, "attention_mask": pad_rows([[1] * len(row) for row in rows], 0)}
    if with_token_type_ids:
        batch["token_type_ids"] = torch.zeros_like(input_ids)
    return batch
