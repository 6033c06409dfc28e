"""Cached contrastive steps (GradCache, Gao et al. 2021) for every method, with the SAME dropout in both passes.

A contrastive loss needs every embedding of the (global) batch at once, so the batch a process can train is
bounded by the activations its backbone must hold for backward. A cached step (``--cache_chunk_size N``) never
holds them for more than N sentences:

1. **No-grad pass**: the backbone encodes the batch without a graph
   (:meth:`models.base.ContrastiveModel.encode_views`: pooled rows [n, rows, h]), one chunk of N sentences a pass
   with stream masks, up to :data:`NO_GRAD_PASS_CHUNKS` chunks a pass with row-seeded masks (a pass without a graph
   holds one layer's activations at a time; fewer passes, fewer of a pass's fixed costs); the global RNG state (CPU
   and every CUDA device) is captured at the start of each pass. The first chunk is encoded WITH its graph (kept
   until step 3), unless the method has a per-sentence part whose backward holds activations of its own first
   (DiffCSE) or the backbone recomputes its layers in the backward (gradient checkpointing): the step then holds
   one chunk's activations at a time still, and encodes n + (n - 1) chunks instead of 2n.
2. **Loss on the full set**: the pooled rows of all chunks, concatenated, become a leaf that requires grad; the
   projector (DiffCSE's BatchNorm sees all rows, as uncached) and ``model.contrastive_loss`` (the gather across
   processes, ESimCSE's queue negatives and its once-per-step enqueue, SimCSE++'s off-dropout negatives and DCL,
   hard negatives) run on it exactly as in the uncached step. A method with a per-sentence part
   (``model.sentence_inputs`` / ``model.sentence_loss``: DiffCSE's RTD) draws its inputs once (the generator edit,
   chunk by chunk with row-seeded masks), then that part is computed chunk by chunk from the full set's embeddings
   (the discriminator holds at most N sentences' activations); everything is backpropagated down to the leaf, whose
   gradient is the cache.
3. **Replay**: the kept first chunk's rows are backpropagated with their cached gradient (which frees its
   activations), then each other chunk is encoded again WITH a graph after restoring its captured RNG state, so it
   draws the same dropout masks (and S-SimCSE's sampled rates, SimCSE++'s per-row plan) as in pass 1, and its rows
   are backpropagated with theirs. The RNG state after step 2 is restored at the end, so the next step
   draws what it would have drawn uncached.

This module owns the chunking and the randomness it replays; the model only encodes sentences and computes losses.
Dropout masks: a cached run uses row-seeded masks unless told otherwise (``trainers.methods.resolve_settings``):
every mask and sampled rate is keyed by (the step's seed, drawn once per step by
``trainers.keyed_dropout.keyed_step``; the dropout module; the row's global index, which
``trainers.keyed_dropout.pass_sentences`` gives each chunk; the element), so each chunk draws exactly its rows'
full-batch masks and the cached step IS the uncached step with those masks, for any chunk size
(tests/test_cached_step.py). With ``--dropout_masks stream`` and a single chunk the random draws happen in the
uncached step's order, so the step is the uncached step too; with several chunks each chunk then draws its own
masks (a [n, ...] draw instead of a slice of the [B, ...] draw): the same distribution, and the gradient is exactly
the uncached gradient of the loss at those masks.

Under DDP the replay runs on the wrapped module (so DDP's hooks stay idle) and the gradients are averaged over
processes at the end, as DDP would; the loss's all-gather gives every process the global batch of embeddings, and
its backward returns each process the gradient of its own rows. docs/cached_training.md has the details and limits.
"""
from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Any, Callable, ContextManager

import torch
import torch.distributed as dist

from models.base import ContrastiveModel
from models.distributed import world_size

from .keyed_dropout import StepDraws, keyed_step, pass_sentences, step_draws

logger = logging.getLogger(__name__)
#: Layers whose batch statistics differ between a chunk and the batch.
BATCH_NORMS = (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d, torch.nn.SyncBatchNorm)


# ------------------------------------------------------------------------------------------------ RNG
@dataclass
class RNGState:
    """The global CPU generator's state and, when CUDA is in use, every CUDA device's."""

    cpu: torch.Tensor
    cuda: list[torch.Tensor] | None


def capture_rng() -> RNGState:
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    return RNGState(torch.get_rng_state(), cuda)


def _no_rng_state() -> None:
    return None


def restore_rng(state: RNGState | None) -> None:
    """Restore ``state`` (``None``: nothing was captured, row-seeded masks)."""
    if state is None:
        return
    torch.set_rng_state(state.cpu)
    if state.cuda is not None:
        torch.cuda.set_rng_state_all(state.cuda)


# ------------------------------------------------------------------------------------------------ chunking
def chunk_bounds(batch_size: int, chunk_size: int) -> list[tuple[int, int]]:
    """``[(0, n), (n, 2n), ...]`` covering ``batch_size`` sentences (the last chunk may be shorter)."""
    if chunk_size < 1:
        raise ValueError(f"cache_chunk_size must be >= 1, got {chunk_size}")
    return [(start, min(start + chunk_size, batch_size)) for start in range(0, batch_size, chunk_size)]


#: Chunks one pass without a graph encodes at once under row-seeded masks (step 1, and the values of DiffCSE's
#: discriminator): such a pass holds one layer's activations at a time, not a chunk's graph through every layer, so 4
#: chunks of it stay well below one chunk with its graph (measured on a CPU: docs/benchmarks.md, "The cached step's
#: passes without a graph take up to 4 chunks"), while each pass saved is a pass's fixed cost (its launches, its weight
#: casts) saved on the GPU. Stream masks keep one pass per chunk: the replay restores each chunk's RNG state from before
#: its own pass. DiffCSE's generator edit keeps one chunk a pass too: its logits over the vocabulary (30,522 floats a
#: token for BERT's) are the largest tensor of its step.
NO_GRAD_PASS_CHUNKS = 4


def no_grad_bounds(bounds: list[tuple[int, int]], row_seeded: bool) -> list[tuple[int, int]]:
    """The passes without a graph over the chunks ``bounds``: up to :data:`NO_GRAD_PASS_CHUNKS` consecutive chunks a
    pass with row-seeded masks (keyed by the rows' global indices, so a pass of several chunks draws each chunk's
    masks), one chunk a pass with stream masks."""
    if not row_seeded:
        return list(bounds)
    groups = (bounds[i:i + NO_GRAD_PASS_CHUNKS] for i in range(0, len(bounds), NO_GRAD_PASS_CHUNKS))
    return [(group[0][0], group[-1][1]) for group in groups]


def pass_sizes(batch_size: int, chunk_size: int) -> tuple[set[int], set[int]]:
    """The sentence counts of a row-seeded cached step's backbone passes: with a graph (each chunk) and without one
    (:func:`no_grad_bounds` after a kept first chunk, or over every chunk: DiffCSE's encoder and discriminator; each
    chunk: DiffCSE's generator edit). The fast path's recompile limit makes room for a graph at each
    (:func:`trainers.fast_path.recompile_limit`)."""
    bounds = chunk_bounds(batch_size, chunk_size)
    with_graph = {end - start for start, end in bounds}
    grouped = {end - start for rest in (bounds[1:], bounds) for start, end in no_grad_bounds(rest, True)}
    return with_graph, with_graph | grouped


def states_by_chunk(bounds: list[tuple[int, int]], passes: list[tuple[int, int]],
                    states: list[RNGState | None]) -> list[RNGState | None]:
    """Each chunk's RNG state: the state captured before the pass (``passes``, ``states``) that encoded it."""
    return [next(state for (first, last), state in zip(passes, states) if first <= start < last)
            for start, _ in bounds]


def slice_rows(batch: dict[str, Any], start: int, end: int, batch_size: int) -> dict[str, Any]:
    """Sentences ``start:end`` of every tensor of ``batch`` whose first dimension is a multiple r of the batch size
    (r rows per sentence, sentence-major: the views' [B, V, L] tensors have r = 1, DiffCSE's ``rtd_*`` rows
    r = ``rtd_views``); anything else is passed through."""
    out = {}
    for key, value in batch.items():
        if torch.is_tensor(value) and value.dim() > 0 and value.size(0) % batch_size == 0:
            per_sentence = value.size(0) // batch_size
            value = value[start * per_sentence:end * per_sentence]
        out[key] = value
    return out


def _encoder_inputs(batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    return batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids")


# ------------------------------------------------------------------------------------------------ the step
def cached_forward_backward(
    model,
    batch: dict[str, Any],
    chunk_size: int,
    *,
    loss_scale: float = 1.0,
    autocast: Callable[[], ContextManager] = contextlib.nullcontext,
    average_gradients_over: int = 1,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """One cached training step of ``model`` (a :class:`models.base.ContrastiveModel`, not a DDP wrapper) on
    ``batch`` (the model's forward inputs): accumulates ``loss_scale`` x the gradient of the step's loss into the
    parameters' ``.grad`` and returns ``(loss, metrics)``, both detached and unscaled, as ``model(**batch)`` would.
    :func:`cached_loss`, then its backward, in one step (:func:`trainers.keyed_dropout.keyed_step`)."""
    with keyed_step(model, batch["input_ids"].size(0)):
        loss, metrics = cached_loss(model, batch, chunk_size, autocast=autocast,
                                    average_gradients_over=average_gradients_over)
        (loss * loss_scale).backward()
    return loss.detach(), metrics


def cached_loss(
    model,
    batch: dict[str, Any],
    chunk_size: int,
    *,
    autocast: Callable[[], ContextManager] = contextlib.nullcontext,
    average_gradients_over: int = 1,
    rng_states: bool = True,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The cached step as a loss: steps 1 and 2's forward (:mod:`trainers.cached_step`) now; backpropagating the
    returned loss (a leaf, so the caller's backward scales it as it scales any loss: the Trainer's gradient
    accumulation) runs step 2's backward and step 3, the replay, with that scale. Call it inside the step's
    :func:`trainers.keyed_dropout.keyed_step` (the Trainer's ``training_step`` is), which must also hold the backward.

    Args:
        chunk_size: sentences per backbone pass with a graph (all views of a sentence stay in one pass).
        autocast: a context manager factory around every forward part (the Trainer's mixed precision).
        average_gradients_over: the process count to average gradients over at the end (DDP's reduction, for a
            module used outside its wrapper's forward); 1: no reduction.
        rng_states: capture each pass's global RNG state and restore it for the replay of its chunks (the guard for
            anything a pass draws from the global generators: exact with stream masks, one chunk a pass; with
            row-seeded masks a pass of several chunks has one state, and no pass draws from the global generators:
            every method's cached step is the uncached step, tests/test_cached_step.py). ``False``: a step captured
            as one CUDA graph (``trainers/step_graph.py``), which can neither read nor set them; row-seeded masks
            only, whose draws are keyed.
    """
    check_cacheable(model)
    input_ids = batch["input_ids"]
    if input_ids.dim() != 3:
        raise ValueError(f"a cached step expects input_ids [batch, views, length], got {tuple(input_ids.shape)}")
    draws = step_draws(model)
    batch_size = input_ids.size(0)
    bounds = chunk_bounds(batch_size, chunk_size)

    def encode(start: int, end: int) -> torch.Tensor:
        with autocast():
            return model.encode_views(*_encoder_inputs(slice_rows(batch, start, end, batch_size)))

    def sentence_part(start: int, end: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        with autocast():
            return model.sentence_loss(embeddings.map(lambda t: t[start:end]),
                                       slice_rows(inputs, start, end, batch_size), batch)

    if not rng_states and draws is None:
        raise ValueError("a cached step with stream masks replays its chunks' masks from their RNG states: "
                         "rng_states=False needs row-seeded masks")
    rng_state = capture_rng if rng_states else _no_rng_state

    # 1. the no-grad pass, one RNG state per pass (several chunks a pass with row-seeded masks: no_grad_bounds); the
    # first chunk with its graph where it can be kept for the replay, which then starts from it instead of encoding
    # it again
    keep_first = keeps_first_chunk(model)
    kept = bounds[:1] if keep_first else []
    passes = kept + no_grad_bounds(bounds[len(kept):], draws is not None)
    states, encoded = [], []
    for start, end in passes:
        with_graph = keep_first and start == 0
        states.append(None if with_graph else rng_state())  # a kept chunk is not replayed
        with torch.set_grad_enabled(with_graph), pass_sentences(draws, start, end):
            encoded.append(encode(start, end))
    states = states_by_chunk(bounds, passes, states)
    graphs = {0: encoded[0]} if keep_first else {}  # a chunk's first sentence -> its rows, with their graph
    cache = torch.cat([rows.detach() for rows in encoded]).requires_grad_(True)
    del encoded

    # 2. the loss on the full set, with its graph down to the cache; a per-sentence part chunk by chunk, its value
    # now (no graph, one RNG state per pass) and its graph chunk by chunk in the backward
    with autocast():
        embeddings = model.project_views(cache, batch["attention_mask"])
        loss, metrics = model.contrastive_loss(embeddings, batch)
        inputs = sentence_inputs(model, batch, bounds, draws)
    total = loss.detach()
    part_states = []
    if inputs is not None:
        sums: dict[str, torch.Tensor] = {}
        part_passes = no_grad_bounds(bounds, draws is not None)
        with torch.no_grad():
            for start, end in part_passes:
                part_states.append(rng_state())
                with pass_sentences(draws, start, end):
                    part, statistics = sentence_part(start, end)
                total = total + part.detach()
                for name, value in statistics.items():
                    sums[name] = sums[name] + value if name in sums else value
        part_states = states_by_chunk(bounds, part_passes, part_states)
        metrics = {**metrics, **model.sentence_metrics(sums)}
    after = rng_state()

    def backward(scale: torch.Tensor) -> None:
        """Step 2's backward (the per-sentence part chunk by chunk, replayed on its RNG states, then the full-set
        loss) and step 3, scaled by the gradient the caller's backward gives the step's loss. It runs inside that
        backward, where autograd has switched gradients off: they are switched on for these nested passes."""
        with torch.enable_grad():
            replay(scale)
        if average_gradients_over > 1:
            average_gradients(model, average_gradients_over)

    def replay(scale: torch.Tensor) -> None:
        try:
            for (start, end), state in zip(bounds, part_states):
                restore_rng(state)
                with pass_sentences(draws, start, end):
                    part, _ = sentence_part(start, end)
                    (part * scale).backward(retain_graph=True)  # the full set's graph serves every part and the loss
                del part  # its own graph (the discriminator's activations), retained by that backward: freed now
            (loss * scale).backward()
            cached_gradient = cache.grad if cache.grad is not None else torch.zeros_like(cache)
            for (start, end), state in zip(bounds, states):  # 3. the replay: same chunks, RNG states, cached gradients
                with pass_sentences(draws, start, end):  # also for the kept chunk: a checkpointed layer recomputes
                    rows = graphs.pop(start, None)
                    if rows is None:
                        restore_rng(state)
                        rows = encode(start, end)
                    torch.autograd.backward(rows, grad_tensors=cached_gradient[start:end].to(rows.dtype))
        finally:
            restore_rng(after)

    step_loss = total.detach().requires_grad_(True)
    step_loss.register_hook(lambda grad: backward(grad))
    return step_loss, metrics


def keeps_first_chunk(model) -> bool:
    """Whether the cached step encodes its first chunk once, keeping its graph for the replay. Not for a method with a
    per-sentence part (``sentence_inputs`` / ``sentence_loss``, DiffCSE's RTD; or a model that is no
    :class:`models.base.ContrastiveModel`), whose chunks hold activations of their own in the backward before the
    replay (the discriminator's), beside which the kept chunk's would make two; nor under gradient checkpointing,
    whose recomputed layers find their keyed masks' plan as the backbone's last pass
    (``models.dropout.RowDropoutController._active_plan``), which the kept chunk no longer is when it is
    recomputed."""
    if not isinstance(model, ContrastiveModel) or type(model).sentence_inputs is not ContrastiveModel.sentence_inputs:
        return False
    return not any(getattr(module, "gradient_checkpointing", False) is True for module in model.modules())


def sentence_inputs(model, batch: dict[str, Any], bounds: list[tuple[int, int]],
                    draws: StepDraws | None) -> dict[str, torch.Tensor] | None:
    """The model's per-sentence inputs (DiffCSE's generator edit), drawn once: chunk by chunk with row-seeded masks
    (keyed draws make each chunk's the full pass's, and the generator never holds more than a chunk), in one pass
    with stream masks (whose draws a split would change)."""
    if draws is None:
        return model.sentence_inputs(batch)
    parts = []
    for start, end in bounds:
        with pass_sentences(draws, start, end):
            parts.append(model.sentence_inputs(slice_rows(batch, start, end, batch["input_ids"].size(0))))
    if parts[0] is None:
        return None
    return {name: torch.cat([part[name] for part in parts]) for name in parts[0]}


def check_cacheable(model) -> None:
    """Refuse what a chunked replay cannot reproduce exactly."""
    for name in ("encode_views", "project_views", "contrastive_loss", "sentence_inputs"):
        if not hasattr(model, name):
            raise TypeError(f"{type(model).__name__} has no {name}(): a cached step needs a ContrastiveModel "
                            "(pass the module, not a DDP wrapper)")
    encoder = getattr(model, "encoder", None)
    if encoder is not None:
        batch_norms = [n for n, m in encoder.named_modules() if isinstance(m, BATCH_NORMS)]
        if batch_norms and model.training:
            raise ValueError(f"the backbone has BatchNorm layers ({batch_norms[0]}, ...): their batch statistics "
                             "differ between chunks and the full batch, so a cached step would not be the uncached "
                             "step; train without --cache_chunk_size")


@torch.no_grad()
def average_gradients(model, processes: int) -> None:
    """Average every trainable parameter's ``.grad`` over the processes (what DDP's reducer does), one flat
    all-reduce per dtype; a parameter without a gradient contributes zeros (and keeps ``None`` if all do)."""
    params = [p for p in model.parameters() if p.requires_grad]
    present = torch.tensor([p.grad is not None for p in params], dtype=torch.int32,
                           device=params[0].device if params else None)
    dist.all_reduce(present, op=dist.ReduceOp.MAX)
    by_dtype: dict[torch.dtype, list[torch.nn.Parameter]] = {}
    for param, used in zip(params, present.tolist()):
        if used:
            if param.grad is None:
                param.grad = torch.zeros_like(param)
            by_dtype.setdefault(param.grad.dtype, []).append(param)
    for group in by_dtype.values():
        flat = torch.cat([p.grad.reshape(-1) for p in group])
        dist.all_reduce(flat)
        flat /= processes
        offset = 0
        for param in group:
            count = param.grad.numel()
            param.grad.copy_(flat[offset:offset + count].view_as(param.grad))
            offset += count


# ------------------------------------------------------------------------------------------------ the Trainer
def refuse_unsupported(trainer) -> None:
    """Set-ups whose backward the cached step does not reproduce: refused with the reason."""
    from accelerate.utils import DistributedType

    args = trainer.args
    problems = []
    if args.fp16:
        problems.append("--fp16 (its gradient scaler): use --bf16, which needs no loss scaling")
    if trainer.accelerator.distributed_type not in (DistributedType.NO, DistributedType.MULTI_CPU,
                                                    DistributedType.MULTI_GPU):
        problems.append(f"{trainer.accelerator.distributed_type} (DeepSpeed/FSDP shard or wrap the backward)")
    if str(getattr(args.optim, "value", args.optim)).lower() in ("lomo", "adalomo"):
        problems.append("LOMO optimizers (they update inside backward)")
    if problems:
        raise ValueError("--cache_chunk_size does not support " + "; ".join(problems))


__all__ = ["RNGState", "average_gradients", "cached_forward_backward", "cached_loss", "capture_rng",
           "check_cacheable", "chunk_bounds", "keeps_first_chunk", "refuse_unsupported", "restore_rng",
           "sentence_inputs", "slice_rows"]
