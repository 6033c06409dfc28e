"""Dropout with a rate per row of the batch, swapped into a loaded backbone (no transformers source patching).

Two methods need dropout that differs between the rows of ONE backbone pass:

- S-SimCSE (Zhang & Lan): each dropout operation draws its rate from a distribution, separately for each forward
  pass ("w/o sd": the two views of SimCSE are two forward passes, so each view's rows share a draw) or separately
  for each sentence ("w/ sd", sentence-wise dropout masks, Eq. 4: ``p ~ pi; m ~ Bernoulli(p)`` per sentence).
- SimCSE++ (Xu et al., 2023): the off-dropout negatives are the anchors encoded with dropout *off*; with a rate
  of 0 for those rows they ride in the same pass as the two dropout views.

:func:`install_row_dropout` replaces every ``nn.Dropout`` of the backbone by :class:`RowDropout` (same ``p``, so
the module still reads as the backbone's own dropout) and switches the backbone to the attention function
registered here, which applies the attention-probability dropout through the module's ``dropout`` attribute
(transformers' own kernels take a single float rate). Outside a :meth:`RowDropoutController.plan` block, and
for rows the plan leaves at their default, a :class:`RowDropout` is plain dropout with its ``p``; in eval mode it
is the identity, so test-time embeddings are unchanged.

Randomness comes from the global torch generator (which the Trainer checkpoints), so resumed runs draw the same
rates and masks.
"""
from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, eager_mask

from .config import check_settings
from .s_simcse import sample_dropout_rates

logger = logging.getLogger(__name__)

ROW_DROPOUT_ATTENTION = "cse_row_dropout"


class RowDropoutController:
    """Decides the dropout rate of every row of the current backbone pass. Shared by all :class:`RowDropout`
    modules of one backbone.

    Args:
        distribution: ``none`` (each module's own ``p``), ``uniform`` on ``[low, high]``, or ``normal`` with mean
            ``(low + high) / 2`` and standard deviation ``(high - low) / 4``, clipped to ``[low, high]``.
        sentence_wise: one draw per row (S-SimCSE "w/ sd") instead of one per forward pass / view ("w/o sd").
        per_op: draw again at every dropout operation (the paper: "for each of the dropout operations in each
            of the forward process"); ``False`` draws once per pass and reuses it in every layer.
    """

    def __init__(self, distribution: str = "none", low: float = 0.05, high: float = 0.15,
                 sentence_wise: bool = False, per_op: bool = True) -> None:
        check_settings({"dropout_dist": distribution, "dropout_low": low, "dropout_high": high},
                       where="RowDropoutController")
        if low > high:
            raise ValueError(f"need --dropout_low <= --dropout_high, got {low}, {high}")
        self.distribution, self.low, self.high = distribution, low, high
        self.sentence_wise, self.per_op = sentence_wise, per_op
        self._groups: torch.Tensor | None = None
        self._num_groups = 0
        self._off: torch.Tensor | None = None
        self._pass_rates: torch.Tensor | None = None
        #: The rates of the last dropout call of a planned pass, [rows] (for inspection and tests).
        self.last_rates: torch.Tensor | None = None

    # -------------------------------------------------------------------------------------------- sampling
    def sample(self, count: int, device: torch.device | str) -> torch.Tensor:
        """``count`` rates from the distribution (S-SimCSE's sampler, :func:`models.s_simcse.sample_dropout_rates`)."""
        return sample_dropout_rates(self.distribution, self.low, self.high, count, device)

    def _draw(self, device: torch.device) -> torch.Tensor:
        groups = self._groups.to(device)
        if self.sentence_wise:
            return self.sample(groups.numel(), device)
        return self.sample(self._num_groups, device)[groups]

    # -------------------------------------------------------------------------------------------- planning
    @contextmanager
    def plan(self, groups: torch.Tensor, off: torch.Tensor | None = None,
             num_groups: int | None = None) -> Iterator[None]:
        """Within the block, the backbone's rows follow this plan.

        Args:
            groups: [rows] long; rows with the same value are one forward pass (one view) and share a draw unless
                ``sentence_wise``.
            off: [rows] bool; rows with dropout off (rate 0), e.g. SimCSE++'s negatives; ``None`` when no row is
                off.
            num_groups: how many distinct values ``groups`` holds (``max + 1``); give it, as training does, so that
                the plan never reads the tensors' values on the host (a host-device sync).
        """
        self._groups = groups
        self._num_groups = int(groups.max()) + 1 if num_groups is None else num_groups
        self._off = off
        self._pass_rates = None
        if self.distribution != "none" and not self.per_op:
            self._pass_rates = self._draw(groups.device)
        try:
            yield
        finally:
            self._groups = self._off = self._pass_rates = None

    def rates(self, rows: int, default: float, device: torch.device) -> torch.Tensor | None:
        """The per-row rates for one dropout call, or ``None`` for plain dropout at ``default`` (no plan, or a plan
        that changes nothing)."""
        if self._groups is None:
            return None
        if rows != self._groups.numel():
            raise RuntimeError(f"row dropout planned for {self._groups.numel()} rows but a dropout call has {rows}: "
                               "its input's first dimension is not the batch")
        if self.distribution == "none":
            if self._off is None:
                return None
            rates = torch.full((rows,), float(default), device=device)
        else:
            rates = self._pass_rates.to(device) if self._pass_rates is not None else self._draw(device)
        if self._off is not None:
            rates = rates.masked_fill(self._off.to(device), 0.0)
        self.last_rates = rates.detach()
        return rates


class RowDropout(nn.Module):
    """``nn.Dropout`` whose rate can differ per row (dimension 0) of its input, as its controller plans.

    Row ``i`` keeps each element with probability ``1 - r_i`` and scales kept ones by ``1 / (1 - r_i)`` (inverted
    dropout, as ``nn.Dropout``); ``r_i = 0`` is the identity for that row. ``p`` stays the module's default rate
    (transformers reads ``module.dropout.p``).
    """

    def __init__(self, p: float, controller: RowDropoutController) -> None:
        super().__init__()
        self.p = float(p)
        self.controller = controller

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return x
        rates = self.controller.rates(x.size(0), self.p, x.device)
        if rates is None:
            return F.dropout(x, self.p, training=True)
        keep = (1.0 - rates).to(x.dtype).view(-1, *([1] * (x.dim() - 1)))
        mask = torch.rand_like(x) < keep
        return x * mask / keep

    def extra_repr(self) -> str:
        return f"p={self.p}, per-row rates"


def row_dropout_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eager scaled dot-product attention whose probability dropout goes through ``module.dropout`` when that is
    a :class:`RowDropout` (registered in transformers' ``AttentionInterface`` as ``cse_row_dropout``)."""
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            weights = weights.masked_fill(~attention_mask, torch.finfo(weights.dtype).min)
        else:
            weights = weights + attention_mask[:, :, :, : key.shape[-2]]
    weights = F.softmax(weights, dim=-1, dtype=torch.float32).to(query.dtype)
    row_dropout = getattr(module, "dropout", None)
    if isinstance(row_dropout, RowDropout):
        weights = row_dropout(weights)
    elif module.training and dropout > 0:
        weights = F.dropout(weights, p=dropout, training=True)
    output = torch.matmul(weights, value).transpose(1, 2).contiguous()
    return output, weights


AttentionInterface.register(ROW_DROPOUT_ATTENTION, row_dropout_attention)
AttentionMaskInterface.register(ROW_DROPOUT_ATTENTION, eager_mask)


def needs_row_dropout(config) -> bool:
    """Whether a :class:`ContrastiveConfig` asks for per-row dropout (S-SimCSE sampling or SimCSE++ off rows)."""
    return config.dropout_dist != "none" or bool(config.off_dropout)


def controller_for(config) -> RowDropoutController:
    return RowDropoutController(config.dropout_dist, config.dropout_low, config.dropout_high,
                                sentence_wise=config.sentence_wise_dropout, per_op=config.dropout_sample_per_op)


def install_row_dropout(encoder: nn.Module, controller: RowDropoutController) -> int:
    """Replace every ``nn.Dropout`` in ``encoder`` by a :class:`RowDropout` of the same ``p`` driven by
    ``controller`` and route attention through :func:`row_dropout_attention`. Returns how many were replaced."""
    targets = [(name, module) for name, module in encoder.named_modules() if isinstance(module, nn.Dropout)]
    for name, module in targets:
        parent_name, _, child = name.rpartition(".")
        parent = encoder.get_submodule(parent_name) if parent_name else encoder
        setattr(parent, child, RowDropout(module.p, controller))
    config = getattr(encoder, "config", None)
    if config is not None and getattr(config, "_attn_implementation", None) != ROW_DROPOUT_ATTENTION:
        if hasattr(encoder, "set_attn_implementation"):
            encoder.set_attn_implementation(ROW_DROPOUT_ATTENTION)
        if getattr(config, "_attn_implementation", None) != ROW_DROPOUT_ATTENTION:
            logger.warning("%s does not use transformers' AttentionInterface; its attention dropout only follows "
                           "the per-row plan if it calls its `dropout` module", type(encoder).__name__)
    return len(targets)


__all__ = ["ROW_DROPOUT_ATTENTION", "RowDropout", "RowDropoutController", "controller_for",
           "install_row_dropout", "needs_row_dropout", "row_dropout_attention"]
