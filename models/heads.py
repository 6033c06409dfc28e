"""Projection heads that sit between the pooled sentence vector and the contrastive loss."""
from __future__ import annotations

from torch import nn


class MLPProjector(nn.Sequential):
    """SimCSE's MLP over [CLS]: ``tanh(W h + b)`` with W: h x h (Gao et al., 2021, Sec. 3 / Sec. 6.3)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__(nn.Linear(hidden_size, hidden_size), nn.Tanh())


class BatchNormProjector(nn.Sequential):
    """DiffCSE's projector (Chuang et al., 2022, Sec. 4 / Table 5): Linear(h, 2h, no bias) -> BN -> ReLU ->
    Linear(2h, h, no bias) -> BN(affine=False), as in the SimSiam-style heads the paper cites."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__(
            nn.Linear(hidden_size, 2 * hidden_size, bias=False),
            nn.BatchNorm1d(2 * hidden_size),
            nn.ReLU(),
            nn.Linear(2 * hidden_size, hidden_size, bias=False),
            nn.BatchNorm1d(hidden_size, affine=False),
        )


def build_projector(kind: str, hidden_size: int) -> nn.Module:
    """``mlp`` | ``batchnorm`` | ``none`` (identity)."""
    builders = {"mlp": MLPProjector, "batchnorm": BatchNormProjector, "none": lambda _h: nn.Identity()}
    if kind not in builders:
        raise ValueError(f"unknown projector {kind!r}; choose one of {', '.join(builders)}")
    return builders[kind](hidden_size)
