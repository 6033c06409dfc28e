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

Where the randomness comes from (``--dropout_masks``, ``models.config``):

- ``stream`` (default, what the papers' code does): the global torch generator (which the Trainer checkpoints, so
  resumed runs draw the same rates and masks); ``install_row_dropout`` is then only used when rates differ per row.
- ``row_seeded``: every mask and sampled rate is a function of (the step's seed, the dropout module, the row's
  global index, the element) (``models.row_seeded``), so a row gets the same mask whatever else is in the pass: a cached
  step's chunks (``trainers/cached_step.py``) draw exactly the uncached step's masks. The step's seed comes from
  Python's ``random`` once per step (:meth:`models.base.ContrastiveModel.dropout_step`); plans carry the rows'
  global indices.
"""
from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass
from typing import ContextManager, Iterator

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, eager_mask

from .config import check_settings
from .row_seeded import call_seed, keyed_keep_mask, keyed_uniform, keyed_uniforms
from .s_simcse import rates_from_uniform, sample_dropout_rates

logger = logging.getLogger(__name__)

ROW_DROPOUT_ATTENTION = "cse_row_dropout"
#: Kinds of keyed draws of one controller (with ``row_seeded`` masks): masks, per-module rates, per-pass rates, and
#: uniforms a network's caller draws for its rows (DiffCSE's generator sampling).
_MASKS, _RATES, _PASS_RATES, _UNIFORMS = range(4)


@dataclass
class _Plan:
    """The per-row plan of one backbone pass (see :meth:`RowDropoutController.plan`)."""

    groups: torch.Tensor
    num_groups: int
    off: torch.Tensor | None
    row_ids: torch.Tensor | None
    step_seed: int | None
    pass_rates: torch.Tensor | None = None


class RowDropoutController:
    """Decides the dropout rate of every row of the current backbone pass. Shared by all :class:`RowDropout`
    modules of one backbone.

    Args:
        distribution: ``none`` (each module's own ``p``), ``uniform`` on ``[low, high]``, or ``normal`` with mean
            ``(low + high) / 2`` and standard deviation ``(high - low) / 4``, clipped to ``[low, high]``.
        sentence_wise: one draw per row (S-SimCSE "w/ sd") instead of one per forward pass / view ("w/o sd").
        per_op: draw again at every dropout operation (the paper: "for each of the dropout operations in each
            of the forward process"); ``False`` draws once per pass and reuses it in every layer.
        masks: ``stream`` (the global generator) or ``row_seeded`` (keyed by step, dropout module, row and element;
            see the module docstring).
        stream: keeps the keyed draws of two networks of one model apart (DiffCSE's encoder 0, discriminator 1).
    """

    def __init__(self, distribution: str = "none", low: float = 0.05, high: float = 0.15,
                 sentence_wise: bool = False, per_op: bool = True, masks: str = "stream", stream: int = 0) -> None:
        check_settings({"dropout_dist": distribution, "dropout_low": low, "dropout_high": high,
                        "dropout_masks": masks}, where="RowDropoutController")
        if low > high:
            raise ValueError(f"need --dropout_low <= --dropout_high, got {low}, {high}")
        self.distribution, self.low, self.high = distribution, low, high
        self.sentence_wise, self.per_op = sentence_wise, per_op
        self.row_seeded, self.stream = masks == "row_seeded", stream
        #: The current training step's seed (row_seeded masks), set by ContrastiveModel.dropout_step.
        self.step_seed: int | None = None
        self._plan: _Plan | None = None
        #: row_seeded: the last pass's plan, for gradient checkpointing's recomputation during backward.
        self._last_plan: _Plan | None = None
        #: The rates of the last dropout call of a planned pass, [rows] (for inspection and tests).
        self.last_rates: torch.Tensor | None = None

    # -------------------------------------------------------------------------------------------- sampling
    def sample(self, count: int, device: torch.device | str) -> torch.Tensor:
        """``count`` rates from the distribution (S-SimCSE's sampler, :func:`models.s_simcse.sample_dropout_rates`)."""
        return sample_dropout_rates(self.distribution, self.low, self.high, count, device)

    def _draw(self, plan: _Plan, device: torch.device, kind: int, call: int) -> torch.Tensor:
        """Rates for the planned rows: one per row (``sentence_wise``) or one per group, broadcast to its rows."""
        groups = plan.groups.to(device)
        if self.row_seeded:
            keys = plan.row_ids.to(device) if self.sentence_wise else torch.arange(plan.num_groups, device=device)
            rates = rates_from_uniform(self.distribution, self.low, self.high,
                                       keyed_uniform(self._seed(plan, kind, call), keys))
        else:
            rates = self.sample(groups.numel() if self.sentence_wise else plan.num_groups, device)
        return rates if self.sentence_wise else rates[groups]

    def _seed(self, plan: _Plan, kind: int, call: int) -> int:
        if plan.step_seed is None:
            raise RuntimeError(
                "row-seeded dropout (--dropout_masks row_seeded) ran outside a training step: wrap the pass in "
                "`with model.dropout_step():` (ContrastiveModel.forward and the cached step do), so that every "
                "chunk of the step uses the step's seed")
        return call_seed(plan.step_seed, 4 * self.stream + kind, call)

    @contextmanager
    def seeded_step(self, seed: int) -> Iterator[None]:
        """Within the block, row-seeded draws use ``seed`` (one training step)."""
        self.step_seed = seed
        try:
            yield
        finally:
            self.step_seed = None

    # -------------------------------------------------------------------------------------------- planning
    @contextmanager
    def plan(self, groups: torch.Tensor, off: torch.Tensor | None = None,
             num_groups: int | None = None, row_ids: torch.Tensor | None = None) -> Iterator[None]:
        """Within the block, the backbone's rows follow this plan.

        Args:
            groups: [rows] long; rows with the same value are one forward pass (one view) and share a draw unless
                ``sentence_wise``.
            off: [rows] bool; rows with dropout off (rate 0), e.g. SimCSE++'s negatives; ``None`` when no row is
                off.
            num_groups: how many distinct values ``groups`` holds (``max + 1``); give it, as training does, so that
                the plan never reads the tensors' values on the host (a host-device sync).
            row_ids: [rows] long, each row's index in the step's global batch (needed by ``row_seeded`` masks: a
                chunk of the batch passes its own rows' indices).
        """
        if self.row_seeded and row_ids is None:
            raise ValueError("row-seeded dropout needs the rows' global indices (plan(..., row_ids=...))")
        self._plan = _Plan(groups, int(groups.max()) + 1 if num_groups is None else num_groups, off, row_ids,
                           self.step_seed)
        try:
            yield
        finally:
            if self.row_seeded:  # keyed masks can be re-made after the block: for a recomputation in backward
                self._last_plan = self._plan
            self._plan = None

    def plan_rows(self, rows: int, first_row: int, device: torch.device) -> ContextManager[None]:
        """:meth:`plan` for ``rows`` rows of one pass at the modules' own rate, whose global indices start at
        ``first_row`` (a network that sees one row per sentence or edited sentence: DiffCSE's discriminator and
        generator)."""
        return self.plan(torch.zeros(rows, dtype=torch.long, device=device), num_groups=1,
                         row_ids=torch.arange(rows, device=device) + first_row)

    def row_uniforms(self, row_numel: int) -> torch.Tensor:
        """Row-seeded uniforms in (0, 1), float64 [rows, row_numel], for the planned rows (keyed by the step, this
        controller's stream and the rows' global indices, like its masks): randomness a caller draws per row
        (DiffCSE's generator sampling) that a chunk of the rows reproduces exactly."""
        plan = self._plan
        if plan is None or not self.row_seeded:
            raise RuntimeError("row_uniforms needs a row-seeded controller inside a plan")
        return keyed_uniforms(self._seed(plan, _UNIFORMS, 0), plan.row_ids, row_numel)

    def _active_plan(self) -> _Plan | None:
        """The plan of the running pass; with row-seeded masks, during backward (gradient checkpointing recomputing
        a layer, after the pass's block has ended), the last pass's plan. Each step's graph holds one planned pass
        of this backbone at a time (the uncached step makes one; a cached step backpropagates each replayed chunk
        before encoding the next), so that is the pass being recomputed; its keyed masks come out the same."""
        if self._plan is None and self.row_seeded and torch._C._current_autograd_node() is not None:
            return self._last_plan
        return self._plan

    def rates(self, rows: int, default: float, device: torch.device, call: int = 0) -> torch.Tensor | None:
        """The per-row rates at dropout module number ``call`` (row-seeded keys; stream rates ignore it), or
        ``None`` for plain dropout at ``default`` (no plan, or a stream plan that changes nothing)."""
        plan = self._active_plan()
        if plan is None:
            return None
        if rows != plan.groups.numel():
            raise RuntimeError(f"row dropout planned for {plan.groups.numel()} rows but a dropout call has {rows}: "
                               "its input's first dimension is not the batch")
        if self.distribution == "none":
            if plan.off is None and not self.row_seeded:
                return None
            rates = torch.full((rows,), float(default), device=device)
        elif self.per_op:
            rates = self._draw(plan, device, _RATES, call)
        else:  # one draw per pass, at its first dropout call
            if plan.pass_rates is None:
                plan.pass_rates = self._draw(plan, device, _PASS_RATES, 0)
            rates = plan.pass_rates.to(device)
        if plan.off is not None:
            rates = rates.masked_fill(plan.off.to(device), 0.0)
        self.last_rates = rates.detach()
        return rates

    def dropout(self, x: torch.Tensor, p: float, index: int = 0) -> torch.Tensor:
        """What :class:`RowDropout` number ``index`` of the backbone (default rate ``p``) returns in training mode:
        plain dropout without a plan (stream masks), else each row at its planned rate with stream masks or masks
        keyed by (step, ``index``, row, element)."""
        plan = self._active_plan()
        if plan is None:
            if self.row_seeded:
                raise RuntimeError(
                    "row-seeded dropout (--dropout_masks row_seeded) ran without a per-row plan: the pass did not "
                    "go through ContrastiveModel.encode_views (or DiffCSE's discriminate), which give each row its "
                    "global index")
            return F.dropout(x, p, training=True)
        rates = self.rates(x.size(0), p, x.device, index)
        if rates is None:
            return F.dropout(x, p, training=True)
        keep = (1.0 - rates).to(x.dtype).view(-1, *([1] * (x.dim() - 1)))
        if self.row_seeded:
            mask = keyed_keep_mask(self._seed(plan, _MASKS, index), plan.row_ids.to(x.device), x.shape, rates)
        else:
            mask = torch.rand_like(x) < keep
        return x * mask / keep


class RowDropout(nn.Module):
    """``nn.Dropout`` whose rate can differ per row (dimension 0) of its input, as its controller plans.

    Row ``i`` keeps each element with probability ``1 - r_i`` and scales kept ones by ``1 / (1 - r_i)`` (inverted
    dropout, as ``nn.Dropout``); ``r_i = 0`` is the identity for that row. ``p`` stays the module's default rate
    (transformers reads ``module.dropout.p``).
    """

    def __init__(self, p: float, controller: RowDropoutController, index: int = 0) -> None:
        super().__init__()
        self.p = float(p)
        self.controller = controller
        #: Its position among the backbone's dropout modules (what keys its row-seeded masks).
        self.index = index

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.controller.dropout(x, self.p, self.index) if self.training else x

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
    """Whether a :class:`ContrastiveConfig` asks for per-row dropout (S-SimCSE sampling, SimCSE++ off rows, or
    row-seeded masks)."""
    return config.dropout_dist != "none" or bool(config.off_dropout) or config.dropout_masks == "row_seeded"


def controller_for(config) -> RowDropoutController:
    return RowDropoutController(config.dropout_dist, config.dropout_low, config.dropout_high,
                                sentence_wise=config.sentence_wise_dropout, per_op=config.dropout_sample_per_op,
                                masks=config.dropout_masks)


def install_row_dropout(encoder: nn.Module, controller: RowDropoutController) -> int:
    """Replace every ``nn.Dropout`` in ``encoder`` by a :class:`RowDropout` of the same ``p`` driven by
    ``controller`` and route attention through :func:`row_dropout_attention`. Returns how many were replaced."""
    targets = [(name, module) for name, module in encoder.named_modules() if isinstance(module, nn.Dropout)]
    for index, (name, module) in enumerate(targets):
        parent_name, _, child = name.rpartition(".")
        parent = encoder.get_submodule(parent_name) if parent_name else encoder
        setattr(parent, child, RowDropout(module.p, controller, index=index))
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
