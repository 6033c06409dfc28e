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
- ``row_seeded``: every mask, sampled rate and sampled token is keyed by (the step, the network, the dropout module,
  the row's index in the global batch, the element), so a row gets the same mask whatever else is in the pass. The
  model only marks its controllers ``row_seeded``; the keyed draws (:class:`KeyedDraws`: the step's seed and where
  the pass's sentences sit in the global batch) are installed and driven by the training step
  (``trainers/keyed_dropout.py``), which owns that randomness.

S-SimCSE's rate distributions (Zhang & Lan, Sec. 3.1-3.2; ``--dropout_dist``) are :func:`sample_dropout_rates` and
:func:`rates_from_uniform` (the same distributions from given uniforms, by the inverse CDF).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterable, Iterator, Protocol, TypeVar

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, eager_mask

from .config import check_settings


ROW_DROPOUT_ATTENTION = "cse_row_dropout"
#: Kinds of keyed draws of one controller (with ``row_seeded`` masks): masks, per-module rates, per-pass rates, and
#: uniforms a network's caller draws for its rows (DiffCSE's generator sampling).
MASKS, RATES, PASS_RATES, UNIFORMS = range(4)
#: Added to a controller's network stream for rows with explicit keys (:meth:`RowDropoutController.plan`'s
#: ``row_keys``), so they never draw a sentence row's masks.
KEYED_ROWS_STREAM = 64
#: A dropout module's number (what keys its masks): a Python int eagerly, a 0-d int64 tensor inside a compiled graph
#: (:class:`RowDropout`'s ``call``; the draws then read a staged key, ``trainers.keyed_dropout``).
Call = int | torch.Tensor


# ------------------------------------------------------------------------------------------------ S-SimCSE's rates
def sample_dropout_rates(distribution: str, low: float, high: float, count: int,
                         device: torch.device | str) -> torch.Tensor:
    """S-SimCSE: ``count`` dropout rates from ``distribution`` (global torch generator of ``device``, which the
    Trainer checkpoints, so a resumed run draws the same rates).

    ``uniform``: U[low, high]. ``normal``: mean (low + high) / 2, standard deviation (high - low) / 4, clipped to
    [low, high].
    """
    if distribution == "uniform":
        return low + (high - low) * torch.rand(count, device=device)
    if distribution == "normal":
        mean, std = (low + high) / 2, (high - low) / 4
        return (mean + std * torch.randn(count, device=device)).clamp(low, high)
    raise ValueError(f"dropout distribution {distribution!r} has no rates to sample; choose uniform or normal")


def rates_from_uniform(distribution: str, low: float, high: float, uniform: torch.Tensor) -> torch.Tensor:
    """The same distributions as :func:`sample_dropout_rates`, from given uniforms in (0, 1) by the inverse CDF
    (``--dropout_masks row_seeded``: the uniforms are keyed by sentence). float32 rates."""
    if distribution == "uniform":
        rates = low + (high - low) * uniform
    elif distribution == "normal":
        mean, std = (low + high) / 2, (high - low) / 4
        rates = (mean + std * torch.special.ndtri(uniform)).clamp(low, high)
    else:
        raise ValueError(f"dropout distribution {distribution!r} has no rates to sample; choose uniform or normal")
    return rates.float()


# ------------------------------------------------------------------------------------------------ keyed draws
class KeyedDraws(Protocol):
    """What a training step installs in ``row_seeded`` controllers (``trainers.keyed_dropout.StepDraws``): random
    numbers keyed by (the step, ``stream`` = 4 x network + kind, ``call``, the row's global index, the element)."""

    def add_streams(self, streams: Iterable[int]) -> None:
        """Streams a controller draws from (:meth:`RowDropoutController.keyed_streams`), registered when it gets the
        draws, before any step: a staged key carries their seeds (``trainers.keyed_dropout.StepDraws.stage``)."""

    def row_ids(self, rows: int, device: torch.device) -> torch.Tensor:
        """The global indices of a pass's ``rows`` rows (sentence-major)."""

    def uniforms(self, stream: int, call: Call, keys: torch.Tensor, per_key: int) -> torch.Tensor:
        """float64 numbers in (0, 1), [len(keys), per_key]."""

    def operands(self, row_ids: torch.Tensor, rates: torch.Tensor) -> Any:
        """The keep-masks' per-row operands of a pass's rows (their ids and ``rates``), made once and shared by the
        pass's dropout calls (``trainers.keyed_dropout``: :class:`models.row_seeded.KeepOperands`)."""

    def keep_mask(self, stream: int, call: Call, operands: Any, shape: torch.Size) -> torch.Tensor:
        """A dropout keep-mask of ``shape`` whose rows are those of ``operands`` (:meth:`operands`), each kept with
        probability ``1 - rate``."""

    def categorical(self, probabilities: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
        """One category per row of ``probabilities`` [..., K] from ``uniforms`` [...] (the inverse CDF)."""


@dataclass
class _Plan:
    """The per-row plan of one backbone pass (see :meth:`RowDropoutController.plan`)."""

    groups: torch.Tensor
    num_groups: int
    off: torch.Tensor | None
    pass_rates: torch.Tensor | None = None
    #: Rows keyed by these ids (in their own key space) instead of by their sentences (a pass that is not over the
    #: step's sentences: PromptBERT's template-only rows, keyed by the sentence length they stand for).
    row_keys: torch.Tensor | None = None
    #: What the pass's dropout calls share, made at the first call that needs it (:meth:`RowDropoutController.
    #: _memo`): the rows' rates at a default rate, their keep-mask operands, their ``1 - rate`` per dtype.
    memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)  # a new plan (replace) starts empty


_T = TypeVar("_T")


class RowDropoutController:
    """Decides the dropout rate of every row of the current backbone pass. Shared by all :class:`RowDropout`
    modules of one backbone.

    Args:
        distribution: ``none`` (each module's own ``p``), ``uniform`` on ``[low, high]``, or ``normal`` with mean
            ``(low + high) / 2`` and standard deviation ``(high - low) / 4``, clipped to ``[low, high]``.
        sentence_wise: one draw per row (S-SimCSE "w/ sd") instead of one per forward pass / view ("w/o sd").
        per_op: draw again at every dropout operation (the paper: "for each of the dropout operations in each
            of the forward process"); ``False`` draws once per pass and reuses it in every layer.
        masks: ``stream`` (the global generator) or ``row_seeded`` (keyed draws a training step installs with
            :meth:`use_draws`; see the module docstring).
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
        #: row_seeded: the keyed draws of the running training step (installed by the step, :meth:`use_draws`).
        self.draws: KeyedDraws | None = None
        self._plan: _Plan | None = None
        #: row_seeded: the last pass's plan, for gradient checkpointing's recomputation during backward.
        self._last_plan: _Plan | None = None
        #: The rates of the last dropout call of a planned eager pass, [rows] (for inspection and tests; a compiled
        #: backbone's graph does not set it, which would make every call's rates an output of the graph).
        self.last_rates: torch.Tensor | None = None

    def use_draws(self, draws: KeyedDraws) -> None:
        """Install the keyed draws of ``row_seeded`` masks (``trainers.keyed_dropout`` does, for every controller)."""
        if not self.row_seeded:
            raise ValueError("keyed draws are for --dropout_masks row_seeded controllers")
        draws.add_streams(self.keyed_streams())
        self.draws = draws

    def keyed_stream(self, kind: int, keyed_rows: bool = False) -> int:
        """The stream of this controller's keyed draws of ``kind`` (``4 x network + kind``): its network's, or for
        the masks of rows with explicit keys the network's :data:`KEYED_ROWS_STREAM` twin."""
        return 4 * (self.stream + (KEYED_ROWS_STREAM if keyed_rows else 0)) + kind

    def keyed_streams(self) -> tuple[int, ...]:
        """Every stream this controller's keyed draws use: each kind of draw of its network, and the masks of rows
        with explicit keys."""
        return (*(self.keyed_stream(kind) for kind in (MASKS, RATES, PASS_RATES, UNIFORMS)),
                self.keyed_stream(MASKS, keyed_rows=True))

    def _keyed(self) -> KeyedDraws:
        if self.draws is None:
            raise RuntimeError(
                "row-seeded dropout (--dropout_masks row_seeded) has no keyed draws: build the model with "
                "trainers.methods (which installs them) and run the pass inside a training step "
                "(trainers.keyed_dropout.keyed_step; the Trainer's step and the cached step do)")
        return self.draws

    # -------------------------------------------------------------------------------------------- sampling
    def sample(self, count: int, device: torch.device | str) -> torch.Tensor:
        """``count`` rates from the distribution (S-SimCSE's sampler, :func:`sample_dropout_rates`)."""
        return sample_dropout_rates(self.distribution, self.low, self.high, count, device)

    def _draw(self, plan: _Plan, device: torch.device, kind: int, call: Call) -> torch.Tensor:
        """Rates for the planned rows: one per row (``sentence_wise``) or one per group, broadcast to its rows."""
        groups = plan.groups.to(device)
        if self.row_seeded:
            draws = self._keyed()
            if not self.sentence_wise:
                keys = torch.arange(plan.num_groups, device=device)
            else:
                keys = draws.row_ids(groups.numel(), device) if plan.row_keys is None else plan.row_keys.to(device)
            uniform = draws.uniforms(self.keyed_stream(kind), call, keys, 1).squeeze(1)
            rates = rates_from_uniform(self.distribution, self.low, self.high, uniform)
        else:
            rates = self.sample(groups.numel() if self.sentence_wise else plan.num_groups, device)
        return rates if self.sentence_wise else rates[groups]

    def categorical(self, probabilities: torch.Tensor) -> torch.Tensor:
        """One category per position of ``probabilities`` [rows, L, K] of a pass of this controller's network,
        from keyed uniforms (one per row and position; DiffCSE's generator sampling with row-seeded masks), so a
        part of the rows draws what the full pass draws."""
        draws = self._keyed()
        row_ids = draws.row_ids(probabilities.size(0), probabilities.device)
        return draws.categorical(probabilities, draws.uniforms(self.keyed_stream(UNIFORMS), 0, row_ids,
                                                               probabilities.size(1)))

    # -------------------------------------------------------------------------------------------- planning
    @contextmanager
    def plan(self, groups: torch.Tensor, off: torch.Tensor | None = None,
             num_groups: int | None = None, row_keys: torch.Tensor | None = None) -> Iterator[None]:
        """Within the block, the backbone's rows follow this plan.

        Args:
            groups: [rows] long; rows with the same value are one forward pass (one view) and share a draw unless
                ``sentence_wise``.
            off: [rows] bool; rows with dropout off (rate 0), e.g. SimCSE++'s negatives; ``None`` when no row is
                off.
            num_groups: how many distinct values ``groups`` holds (``max + 1``); give it, as training does, so that
                the plan never reads the tensors' values on the host (a host-device sync).
            row_keys: [rows] long; with row-seeded masks, key the rows by these ids (in their own stream,
                :data:`KEYED_ROWS_STREAM`) instead of by the step's sentences: a pass that is not over sentences
                (PromptBERT's template-only rows). Such a pass is not remembered for a recomputation in backward.
        """
        self._plan = _Plan(groups, int(groups.max()) + 1 if num_groups is None else num_groups, off,
                           row_keys=row_keys)
        try:
            yield
        finally:
            if self.row_seeded and row_keys is None:  # keyed masks can be re-made after the block: for a
                self._last_plan = self._plan          # recomputation in backward
            self._plan = None

    def _active_plan(self, rows: int, device: torch.device) -> _Plan | None:
        """The plan of the running pass. With row-seeded masks, outside a plan block: the last pass's plan (gradient
        checkpointing recomputing a layer during backward: each step's graph holds one planned pass of this backbone
        at a time, so that is the pass being recomputed, and its keyed masks come out the same), or, for a network
        that is never planned (DiffCSE's discriminator and generator), every row at the modules' own rate."""
        if self._plan is not None or not self.row_seeded:
            return self._plan
        if self._last_plan is not None:
            return self._last_plan
        return _Plan(torch.zeros(rows, dtype=torch.long, device=device), 1, None)

    def rates(self, rows: int, default: float, device: torch.device, call: Call = 0) -> torch.Tensor | None:
        """The per-row rates at dropout module number ``call`` (row-seeded keys; stream rates ignore it), or
        ``None`` for plain dropout at ``default`` (no plan, or a stream plan that changes nothing)."""
        plan = self._active_plan(rows, device)
        if plan is None:
            return None
        if rows != plan.groups.numel():
            raise RuntimeError(f"row dropout planned for {plan.groups.numel()} rows but a dropout call has {rows}: "
                               "its input's first dimension is not the batch")
        if self.distribution == "none" and plan.off is None and not self.row_seeded:
            return None
        rates = self._memo(plan, self._rates_key(default, device),
                           lambda: self._planned_rates(plan, rows, default, device, call))
        if not torch.compiler.is_compiling():
            self.last_rates = rates
        return rates

    def _rates_key(self, default: float, device: torch.device) -> Hashable | None:
        """What a pass's rates depend on beyond its plan: the module's default rate (``none``), nothing (one draw per
        pass); ``None`` for rates drawn again at every dropout call (``per_op``), which are not shared."""
        if self.distribution == "none":
            return ("rates", float(default), str(device))
        return None if self.per_op else ("pass rates", str(device))

    @staticmethod
    def _memo(plan: _Plan, key: Hashable | None, make: Callable[[], _T]) -> _T:
        """``plan.memo[key]``, made by ``make`` at the pass's first call that asks (``key`` ``None``: made every
        time). A pass's dropout calls (37 in bert-base) share what does not change between them, so a call launches
        only its mask and its product: on a GPU the step is bound by the host launching kernels. Inside a compiled
        graph it is made again at every call (the compiler computes it once), so that no compiled region depends on
        what an earlier one kept: the layers of a stack, compiled one at a time, then share one graph."""
        if key is None or torch.compiler.is_compiling():
            return make()
        if key not in plan.memo:
            plan.memo[key] = make()
        return plan.memo[key]

    def _planned_rates(self, plan: _Plan, rows: int, default: float, device: torch.device,
                       call: Call) -> torch.Tensor:
        """The rates of a dropout call of the pass ``plan``: the default, or drawn (per call or per pass), with the
        plan's rows that are off at 0."""
        if self.distribution == "none":
            rates = torch.full((rows,), float(default), device=device)
        elif self.per_op:
            rates = self._draw(plan, device, RATES, call)
        else:  # one draw per pass, at its first dropout call
            if plan.pass_rates is None:
                plan.pass_rates = self._draw(plan, device, PASS_RATES, 0)
            rates = plan.pass_rates.to(device)
        if plan.off is not None:
            rates = rates.masked_fill(plan.off.to(device), 0.0)
        return rates.detach()

    def dropout(self, x: torch.Tensor, p: float, index: Call = 0) -> torch.Tensor:
        """What :class:`RowDropout` number ``index`` of the backbone (default rate ``p``) returns in training mode:
        plain dropout without a plan (stream masks), else each row at its planned rate with stream masks or masks
        keyed by (step, ``index``, row, element)."""
        rates = self.rates(x.size(0), p, x.device, index)
        if rates is None:
            return F.dropout(x, p, training=True)
        plan = self._active_plan(x.size(0), x.device)
        rates_key = self._rates_key(p, x.device)
        keep = self._memo(plan, None if rates_key is None else ("keep", rates_key, x.dtype, x.dim()),
                          lambda: (1.0 - rates).to(x.dtype).view(-1, *([1] * (x.dim() - 1))))
        if self.row_seeded:
            mask = self._keyed_mask(plan, rates, rates_key, index, x)
        else:
            mask = torch.rand_like(x) < keep
        return x * mask / keep

    def _keyed_mask(self, plan: _Plan, rates: torch.Tensor, rates_key: Hashable | None, index: int,
                    x: torch.Tensor) -> torch.Tensor:
        """The keyed keep-mask of dropout module ``index`` for ``x``: rows keyed by the step's sentences (their
        global indices, in the draws' current pass) or by the plan's ``row_keys``; its operands (the rows' ids and
        thresholds) made once per pass and rates (:meth:`_memo`), the mask itself one call."""
        draws = self._keyed()
        if plan.row_keys is None:
            stream, row_ids = self.keyed_stream(MASKS), draws.row_ids(x.size(0), x.device)
        else:
            stream = self.keyed_stream(MASKS, keyed_rows=True)
            row_ids = self._memo(plan, ("row keys", str(x.device)), lambda: plan.row_keys.to(x.device))
        if rates_key is None:
            operands = draws.operands(row_ids, rates)
        else:  # the rows' ids are the draws' (one tensor per pass of the step, kept): made again if they change
            key = ("operands", rates_key, row_ids.size(0), str(x.device))
            held = None if torch.compiler.is_compiling() else plan.memo.get(key)  # in a graph: as in _memo
            if held is None or held[0] is not row_ids:
                plan.memo[key] = held = (row_ids, draws.operands(row_ids, rates))
            operands = held[1]
        return draws.keep_mask(stream, index, operands, x.shape)


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
        #: The same number as a 0-d tensor, what a compiled graph reads: an input of the graph, not a constant
        #: compiled into it, so the layers of a stack compiled one at a time share one graph instead of one each.
        self.register_buffer("call", torch.tensor(index, dtype=torch.int64), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return x
        return self.controller.dropout(x, self.p, self.call if torch.compiler.is_compiling() else self.index)

    def extra_repr(self) -> str:
        return f"p={self.p}, per-row rates"


#: Where an attention module keeps the dropout of its probabilities, most specific first: ALBERT's
#: ``attention_dropout``, GPT-2's ``attn_dropout``, BERT's ``dropout`` (ALBERT and GPT-2 keep the dropout of their
#: output beside it, under another name); a module that keeps a bare rate there (ModernBERT's ``attention_dropout``
#: float) gets a :class:`RowDropout` of that rate under ``ADDED_PROBABILITY_DROPOUT`` (:func:`install_row_dropout`).
ADDED_PROBABILITY_DROPOUT = "probability_row_dropout"
PROBABILITY_DROPOUT_NAMES = (ADDED_PROBABILITY_DROPOUT, "attention_dropout", "attn_dropout", "dropout")


def probability_dropout(module: nn.Module) -> RowDropout | None:
    """The :class:`RowDropout` that drops ``module``'s attention probabilities (:data:`PROBABILITY_DROPOUT_NAMES`), or
    ``None``. transformers' attention interface hands the attention function only its rate: read from another
    attribute than ``dropout`` (ALBERT, GPT-2, ModernBERT), that dropout was drawn from the stream at one rate, so
    row-seeded masks, S-SimCSE's sampled rates and SimCSE++'s dropout-off rows missed the attention probabilities."""
    for name in PROBABILITY_DROPOUT_NAMES:
        candidate = getattr(module, name, None)
        if isinstance(candidate, RowDropout):
            return candidate
    return None


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
    row_dropout = probability_dropout(module)
    if row_dropout is not None:
        weights = row_dropout(weights)
    elif module.training and dropout > 0:
        if any(isinstance(child, RowDropout) for child in module.children()):  # planned, but not this dropout
            raise RuntimeError(f"{type(module).__name__} asks for attention dropout {dropout} but keeps no dropout "
                               f"module under {', '.join(PROBABILITY_DROPOUT_NAMES)}: per-row dropout cannot plan it")
        weights = F.dropout(weights, p=dropout, training=True)  # a network without a plan (sharing the config)
    output = torch.matmul(weights, value).transpose(1, 2).contiguous()
    return output, weights


AttentionInterface.register(ROW_DROPOUT_ATTENTION, row_dropout_attention)
AttentionMaskInterface.register(ROW_DROPOUT_ATTENTION, eager_mask)


def row_dropout_reasons(config) -> list[str]:
    """What in a :class:`ContrastiveConfig` asks for per-row dropout, as the flags that do (S-SimCSE's sampled
    rates, SimCSE++'s dropout-off rows, row-seeded masks); empty: none."""
    reasons = []
    if config.dropout_dist != "none":
        reasons.append(f"S-SimCSE's sampled rates (--dropout_dist {config.dropout_dist})")
    if config.off_dropout:
        reasons.append("SimCSE++'s dropout-off negatives (--off_dropout)")
    if config.dropout_masks == "row_seeded":
        reasons.append("row-seeded masks (--dropout_masks row_seeded, --cache_chunk_size's default)")
    return reasons


def needs_row_dropout(config) -> bool:
    """Whether a :class:`ContrastiveConfig` asks for per-row dropout (:func:`row_dropout_reasons`)."""
    return bool(row_dropout_reasons(config))


def config_dropout_rates(config: Any, heads: bool = False) -> dict[str, float]:
    """A backbone config's dropout rates by setting name (``hidden_dropout_prob``, ModernBERT's ``mlp_dropout``...);
    a task head's (``classifier_*``, ``summary_*``) only with ``heads``."""
    return {key: value for key, value in config.to_dict().items() if "dropout" in key and isinstance(value, float)
            and (heads or not key.startswith(("classifier", "summary")))}


def applies_dropout(encoder: nn.Module, sampled_rates: bool = False) -> bool:
    """Whether a training-mode pass of ``encoder`` is noised by any dropout: an ``nn.Dropout`` with ``p > 0``, or a
    :class:`RowDropout` whose rate is ``p > 0`` or drawn per pass (``sampled_rates``: S-SimCSE's distributions, which
    replace ``p``). ``False`` for a backbone whose config sets every rate to 0 (ModernBERT's)."""
    return any(isinstance(module, RowDropout) and (module.p > 0 or sampled_rates)
               or isinstance(module, nn.Dropout) and module.p > 0 for module in encoder.modules())


def controller_for(config) -> RowDropoutController:
    return RowDropoutController(config.dropout_dist, config.dropout_low, config.dropout_high,
                                sentence_wise=config.sentence_wise_dropout, per_op=config.dropout_sample_per_op,
                                masks=config.dropout_masks)


def install_row_dropout(encoder: nn.Module, controller: RowDropoutController) -> int:
    """Replace every ``nn.Dropout`` in ``encoder`` by a :class:`RowDropout` of the same ``p`` driven by
    ``controller`` and route attention through :func:`row_dropout_attention`; an attention module that keeps a bare
    rate for its probabilities gets a :class:`RowDropout` of it (:data:`ADDED_PROBABILITY_DROPOUT`). Returns how
    many were replaced."""
    targets = [(name, module) for name, module in encoder.named_modules() if isinstance(module, nn.Dropout)]
    for index, (name, module) in enumerate(targets):
        parent_name, _, child = name.rpartition(".")
        parent = encoder.get_submodule(parent_name) if parent_name else encoder
        setattr(parent, child, RowDropout(module.p, controller, index=index))
    # a bare rate of the attention probabilities (ModernBERT's): its own module, numbered after the replaced ones (a
    # rate of 0 stays without, as ModernBERT's output dropout does)
    bare_rates = [module for module in encoder.modules()
                  if isinstance(rate := getattr(module, "attention_dropout", None), float) and rate > 0]
    for index, module in enumerate(bare_rates, start=len(targets)):
        module.add_module(ADDED_PROBABILITY_DROPOUT, RowDropout(module.attention_dropout, controller, index=index))
    config = getattr(encoder, "config", None)
    if config is not None and getattr(config, "_attn_implementation", None) != ROW_DROPOUT_ATTENTION:
        # a backbone without transformers' AttentionInterface (DeBERTa-v2, MPNet, BigBird, Longformer) keeps its own
        # attention (asked to switch, transformers would only log that it cannot): the per-row plan reaches its
        # probabilities only through a dropout module, which the training scripts check (eval.backbone.draws_outside:
        # a draw outside the modules is refused)
        if hasattr(encoder, "set_attn_implementation") and getattr(encoder, "_can_set_attn_implementation",
                                                                       lambda: True)():
            encoder.set_attn_implementation(ROW_DROPOUT_ATTENTION)
    return len(targets)


__all__ = ["ADDED_PROBABILITY_DROPOUT", "Call", "KEYED_ROWS_STREAM", "KeyedDraws", "MASKS", "PASS_RATES",
           "PROBABILITY_DROPOUT_NAMES", "RATES", "ROW_DROPOUT_ATTENTION", "RowDropout", "RowDropoutController",
           "UNIFORMS", "applies_dropout", "config_dropout_rates", "controller_for", "install_row_dropout",
           "needs_row_dropout", "probability_dropout", "rates_from_uniform", "row_dropout_attention",
           "row_dropout_reasons", "sample_dropout_rates"]
