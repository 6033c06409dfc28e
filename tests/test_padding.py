"""data/padding.py: the one batch-padding helper, against hand-written tensors (values, dtype, shape)."""
from __future__ import annotations

import pytest
import torch

from data.collators import pad_views
from data.padding import pad_rows, pad_token_ids

ROWS = [[101, 7, 8, 102], [101, 102], [101, 9, 102]]


def test_pad_token_ids_pads_to_the_longest_row() -> None:
    batch = pad_token_ids(ROWS, 0)
    assert list(batch) == ["input_ids", "attention_mask"]
    expected_ids = torch.tensor([[101, 7, 8, 102],
                                 [101, 102, 0, 0],
                                 [101, 9, 102, 0]], dtype=torch.long)
    expected_mask = torch.tensor([[1, 1, 1, 1],
                                  [1, 1, 0, 0],
                                  [1, 1, 1, 0]], dtype=torch.long)
    for tensor, expected in ((batch["input_ids"], expected_ids), (batch["attention_mask"], expected_mask)):
        assert tensor.dtype == torch.long and tensor.shape == (3, 4)
        assert torch.equal(tensor, expected)


def test_pad_token_ids_with_token_type_ids_and_another_pad_id() -> None:
    batch = pad_token_ids([[5, 6], [5]], 1, with_token_type_ids=True)
    assert list(batch) == ["input_ids", "attention_mask", "token_type_ids"]
    assert torch.equal(batch["input_ids"], torch.tensor([[5, 6], [5, 1]]))
    assert torch.equal(batch["token_type_ids"], torch.zeros(2, 2, dtype=torch.long))


def test_pad_rows_sides_length_and_dtype() -> None:
    assert torch.equal(pad_rows([[1, 2, 3], [4]], 9, side="left"), torch.tensor([[1, 2, 3], [9, 9, 4]]))
    assert torch.equal(pad_rows([[1], [2, 3]], 0, length=4), torch.tensor([[1, 0, 0, 0], [2, 3, 0, 0]]))
    fill = pad_rows([[True], [False, True]], False, dtype=torch.bool)
    assert fill.dtype == torch.bool and torch.equal(fill, torch.tensor([[True, False], [False, True]]))
    with pytest.raises(ValueError, match="side"):
        pad_rows([[1]], 0, side="middle")  # type: ignore[arg-type]


def test_pad_views_is_sentence_major() -> None:
    anchors, positives = [[101, 7, 102], [101, 102]], [[101, 7, 7, 102], [101, 102]]
    batch = pad_views([anchors, positives], 0, with_token_type_ids=False)
    expected = torch.tensor([[[101, 7, 102, 0], [101, 7, 7, 102]],
                             [[101, 102, 0, 0], [101, 102, 0, 0]]], dtype=torch.long)
    assert batch["input_ids"].shape == (2, 2, 4) and torch.equal(batch["input_ids"], expected)
    assert torch.equal(batch["attention_mask"], (expected != 0).long())
