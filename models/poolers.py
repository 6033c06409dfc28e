"""Sentence poolers: how one vector is read off the backbone's hidden states.

The five poolers of SimCSE (Gao et al., 2021, Sec. 6.3 / Table 6 and the `--pooler` flag of its evaluation):

- ``cls``: the [CLS] (position-0) vector of the last layer. During training the MLP projector sits on top; at
  test time the MLP is kept only when ``mlp_only_train`` is off (supervised SimCSE). For a *plain* Hugging Face
  model, ``cls`` means the model's own ``pooler_output`` (BERT's Linear+Tanh pooler), as in SimCSE's evaluation.
- ``cls_before_pooler``: the [CLS] vector of the last layer, never projected.
- ``avg``: mean of the last layer over non-padding tokens.
- ``avg_first_last``: mean over tokens of the average of the first transformer layer (``hidden_states[1]``; index 0
  is the embedding layer) and the last layer.
- ``avg_top2``: mean over tokens of the average of the last two layers.
"""
from __future__ import annotations

from typing import Literal, Sequence

import torch

PoolerType = Literal["cls", "cls_before_pooler", "avg", "avg_first_last", "avg_top2"]
POOLER_TYPES: tuple[str, ...] = ("cls", "cls_before_pooler", "avg", "avg_first_last", "avg_top2")
#: The poolers that read position 0 alone, which on a causal (decoder-only) backbone sees only the first token.
POSITION_ZERO_POOLERS: tuple[str, ...] = ("cls", "cls_before_pooler")


def needs_hidden_states(pooler_type: str) -> bool:
    """Whether the pooler reads intermediate layers (so the backbone must return ``hidden_states``)."""
    return pooler_type in ("avg_first_last", "avg_top2")


def test_time_pooler(config) -> str:
    """The ``--pooler`` value that reproduces a ``ContrastiveConfig``'s test-time embedding from the plain export
    (``cls``: [CLS] + the MLP in BERT's pooler slot; ``cls_before_pooler``: [CLS] alone)."""
    if config.pooler_type == "cls":
        return "cls" if config.projects_at_test else "cls_before_pooler"
    return config.pooler_type


def _masked_mean(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp_min(1.0)


def pool(
    pooler_type: str,
    attention_mask: torch.Tensor,
    last_hidden_state: torch.Tensor,
    hidden_states: Sequence[torch.Tensor] | None = None,
) -> torch.Tensor:
    """Pool token states [B, L, H] into sentence vectors [B, H].

    ``cls`` and ``cls_before_pooler`` both read position 0 here; whether a projector follows is the caller's
    decision (see :class:`models.base.ContrastiveModel`).
    """
    if pooler_type in POSITION_ZERO_POOLERS:
        return last_hidden_state[:, 0]
    if pooler_type == "avg":
        return _masked_mean(last_hidden_state, attention_mask)
    if pooler_type in ("avg_first_last", "avg_top2"):
        if hidden_states is None:
            raise ValueError(f"pooler {pooler_type!r} needs the backbone's hidden_states (output_hidden_states=True)")
        first, second = (hidden_states[1], hidden_states[-1]) if pooler_type == "avg_first_last" else (
            hidden_states[-2], hidden_states[-1])
        return _masked_mean((first + second) / 2.0, attention_mask)
    raise ValueError(f"unknown pooler {pooler_type!r}; choose one of {', '.join(POOLER_TYPES)}")
