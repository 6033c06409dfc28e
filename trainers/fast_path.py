"""The fast path (``--torch_compile true``): fixed shapes, the backbone compiled, no host-device sync in the loop.

Where the compiled region begins and ends is decided here, and only here:

- **Fixed shapes** (:func:`fixed_shape_collator`): the collator's views, and the batch keys the model names
  (``model.fixed_width_keys()``: DiffCSE's edit rows), are padded to its widest batch (``data.fixed_shapes``), so
  the compiled networks see one shape instead of a new one every step. A short batch (the epoch's last) runs
  eagerly instead of recompiling.
- **The compiled regions are the backbones** (``model.step_backbones()``: the encoder, the bulk of the step's compute
  and a pure function of its inputs and dropout; ESimCSE's momentum encoder; DiffCSE's generator and discriminator
  where its edit rows have the fixed width and h enters through the inputs) **and the objective** (the contrastive
  loss, ``model.step_functions()``: a few dozen small operations and their backward; its inputs are the step's
  embeddings and ESimCSE's queue): :class:`CompiledBackbone` compiles each once (``torch.compile``; the backbones with
  ``dynamic=False``) and swaps them in for the duration of each training step, so the model's own forward and
  ``compute_loss`` run unchanged around them (ESimCSE's queue and DiffCSE's sampling stay eager; PromptBERT's template
  pass runs the compiled encoder at its own shape) and checkpoints, evaluation and the export see the plain modules
  (evaluation's varying widths never reach the compiled graph). Steps whose shapes are not yet those of the run
  (``model.step_shapes_settled()``: ESimCSE's first steps, while its queue fills and the objective's queue input grows
  by a batch per step) run eagerly, so every graph is compiled, and on a GPU recorded, at its one shape. On one CUDA
  device the mode is ``reduce-overhead`` (CUDA graphs; each step begins with
  ``torch.compiler.cudagraph_mark_step_begin()``; dropout's RNG is graph-safe: torch advances the generator's offset
  on every replay). ``--torch_compile_mode`` picks another mode.
- **Per-row dropout inside the graph**: S-SimCSE's sampled rates and SimCSE++'s dropout-off rows (a plan of tensors
  whose sizes are fixed by the config) are traced as they are; with ``--dropout_masks row_seeded`` the step's seed and
  the pass's first sentence reach the graph as a device tensor (``StepDraws.stage``), from which it computes the
  keyed masks, the same bits as the eager pass.
- **The cached step** (``--cache_chunk_size``, ``trainers/cached_step.py``) runs the compiled backbones chunk by chunk,
  twice (without gradients, then replayed with them): a graph per grad mode and chunk shape (the last chunk may be
  shorter), four at most. Its masks are row-seeded (its default): each chunk's are computed in the graph from the
  staged key (:func:`trainers.keyed_dropout.pass_sentences` stages each chunk's first sentence), so the replay draws
  the first pass's masks by construction. Its mode never has CUDA graphs (:func:`compile_mode`): a graph replayed
  for the next chunk would overwrite the outputs the step still holds (the chunks' embeddings, the replay's
  activations).
- The backbone stays eager where compiling it would break a contract: gradient checkpointing recomputes layers
  outside the step, and a cached step with ``--dropout_masks stream`` replays a chunk's masks by restoring the RNG
  state, which nothing checks a compiled graph's draws to follow. Those runs still get the fixed shapes and the
  sync-free loop.
- **A warm-up that fails falls back to the eager step**: the graphs are compiled in the first full-size steps
  (:data:`WARMUP_STEPS`); each runs after a :class:`StepSnapshot` (RNG states, buffers, gradients), and if it raises
  (a compiler's error, an out-of-memory in a CUDA graph's pool...), the snapshot is restored, the backbones stay eager
  for the rest of the run (a warning with the error; the run summary repeats it) and the step runs again eagerly: a
  single process then trains what the eager run trains. If the eager step fails too, its error is raised. Several
  processes raise the first error (DDP's reducer does not survive a failed backward).
- **No host-device sync** in the loop between logging steps: the Trainer's NaN/inf filter is off
  (``CLTrainingArguments.logging_nan_inf_filter``; :class:`trainers.divergence.DivergenceMonitor` catches a
  non-finite loss on the device), batches are copied to the device asynchronously from pinned memory
  (:func:`asynchronous_batches`), the model's step holds none (PromptBERT's template ids are device buffers).

The fast path changes no result beyond float reordering: ``tests/test_fast_path.py`` checks every method's loss and
gradients against the eager step's, and that padding changes no loss.
"""
from __future__ import annotations

import logging
import random
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

import torch
from torch import nn

from data.fixed_shapes import FixedShapeCollator

from .cached_step import RNGState, capture_rng, pass_sizes, restore_rng
from .errors import UsageError
from .keyed_dropout import step_draws

logger = logging.getLogger(__name__)

#: ``torch.compile``'s modes (``--torch_compile_mode``).
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
#: The first compiled steps of a run on the fast path, in which it compiles its graphs (the first) and, under CUDA
#: graphs, records them (the second: CUDA-graph trees run a new graph once before recording it): each runs guarded
#: by a :class:`StepSnapshot`.
WARMUP_STEPS = 2
#: The modes that capture CUDA graphs.
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")

__all__ = ["COMPILE_MODES", "COMPILE_REGIONS", "CUDA_GRAPH_MODES", "CompiledBackbone", "StepSnapshot", "WARMUP_STEPS",
           "asynchronous_batches", "backbone_compile_refusal", "compile_mode", "compiled_regions", "cuda_graph_refusal",
           "fixed_shape_collator", "recompile_limit", "regions_under", "repeated_layers",
           "typed_checkpointing_flag"]


def fixed_shape_collator(collator: Any, keys: tuple[str, ...] = ()) -> Any:
    """``collator`` with its views, and the further batch ``keys`` (the model's ``fixed_width_keys()``: those whose
    padding changes no result), padded to its ``max_width`` (:mod:`data.fixed_shapes`; each key filled with the
    collator's ``padding_values()``). A collator without ``max_width`` / ``tokenizer`` is returned unchanged."""
    if isinstance(collator, FixedShapeCollator) or not hasattr(collator, "max_width"):
        return collator
    pad_token_id = collator.tokenizer.pad_token_id
    fills = collator.padding_values() if keys else {}
    return FixedShapeCollator(collator, collator.max_width, 0 if pad_token_id is None else int(pad_token_id),
                              {key: fills[key] for key in keys})


def asynchronous_batches(args: Any) -> None:
    """Copy batches to the device without a host sync: pinned host memory and ``non_blocking`` copies (the Trainer's
    ``accelerator_config.non_blocking``; a no-op on a CPU, where nothing is pinned)."""
    if torch.cuda.is_available() and not args.use_cpu:
        args.dataloader_pin_memory = True
        args.accelerator_config.non_blocking = True


def cuda_graph_refusal(cached_step: bool = False, accumulation_steps: int = 1,
                       model_refusal: str | None = None) -> str | None:
    """Why a run must not capture CUDA graphs, or ``None``: the cached step (``cached_step``) calls each graph once
    per chunk and holds every call's outputs, which the next chunk's replay would overwrite; gradient accumulation
    (``accumulation_steps`` > 1) adds each micro-batch's gradients to the last's, which live in the backward graph's
    memory and the next replay overwrites (an H100 raised "accessing tensor output of CUDAGraphs that has been
    overwritten by a subsequent run" for gradients kept across replays: ``tests/test_cuda.py``, 2026-11-27); the
    model's own reason (``model_refusal``: :meth:`models.base.ContrastiveModel.cuda_graph_refusal`)."""
    if cached_step:
        return ("with --cache_chunk_size, CUDA graphs replay one graph per chunk into the same memory, overwriting the "
                "embeddings and activations of the chunks the cached step still holds")
    if accumulation_steps > 1:
        return (f"with --gradient_accumulation_steps {accumulation_steps}, each micro-batch's gradients are added to "
                "the last's, which a CUDA graph keeps in its memory and the next micro-batch's replay overwrites")
    return model_refusal


def compile_mode(requested: str | None, device: torch.device, processes: int, bf16: bool = True,
                 cached_step: bool = False, accumulation_steps: int = 1, model_refusal: str | None = None,
                 step_graph: bool = False) -> str:
    """The ``torch.compile`` mode: ``requested`` (``--torch_compile_mode``) if given, else ``reduce-overhead``
    (CUDA graphs) on one CUDA device training in bf16 autocast (the GPU default, the set-up measured on an H200),
    else ``default``: a CPU; several processes, whose gradient all-reduce runs inside the backward a CUDA graph
    would capture; fp32 training, where the CUDA-graph step failed on an H200 (torch 2.11: "accessing tensor output
    of CUDAGraphs that has been overwritten by a subsequent run" in the backward; docs/benchmarks.md); and a run
    :func:`cuda_graph_refusal` gives a reason for (the cached step, gradient accumulation, the model's own), where a
    requested mode with CUDA graphs is refused with that reason; and a run whose whole step is one CUDA graph
    (``step_graph``: :mod:`trainers.step_graph`, which refuses a requested CUDA-graph mode itself)."""
    refusal = cuda_graph_refusal(cached_step, accumulation_steps, model_refusal)
    if refusal and requested in CUDA_GRAPH_MODES:
        raise UsageError(f"--torch_compile_mode {requested}: {refusal}; leave --torch_compile_mode unset (the fast "
                         "path then compiles without CUDA graphs) or choose max-autotune-no-cudagraphs")
    if requested:
        return requested
    cuda_graphs = device.type == "cuda" and processes == 1 and bf16 and not step_graph
    if cuda_graphs and refusal:
        logger.warning("fast path: no CUDA graphs, because %s", refusal)
    return "reduce-overhead" if cuda_graphs and not refusal else "default"


def typed_checkpointing_flag(training_args: Any) -> str | None:
    """Gradient checkpointing's flag as the user typed it, ``None`` when it is off: ``--gradient_checkpointing``
    (this repo's name) or transformers' newer ``--activation_checkpointing``, which ``CLTrainingArguments`` records
    in ``checkpointing_flag`` (plain ``TrainingArguments``: the old name). What the refusals and reasons name."""
    if not (getattr(training_args, "activation_checkpointing", None)
            or getattr(training_args, "gradient_checkpointing", None)):
        return None
    return getattr(training_args, "checkpointing_flag", "--gradient_checkpointing")


def backbone_compile_refusal(checkpointing_flag: str | None, cached_step: bool = False,
                             keyed_masks: bool = True) -> str | None:
    """Why the backbone must stay eager on the fast path, or ``None`` when it can be compiled.
    ``checkpointing_flag``: gradient checkpointing's flag as the user typed it (``--gradient_checkpointing`` or
    ``--activation_checkpointing``), ``None`` when it is off; ``keyed_masks``: the model's dropout masks are
    row-seeded (``trainers.keyed_dropout.step_draws`` finds its draws)."""
    if checkpointing_flag:
        return f"{checkpointing_flag} recomputes its layers outside the step"
    if cached_step and not keyed_masks:
        return ("the cached step replays each chunk's stream dropout masks by restoring the RNG state, which a "
                "compiled graph's draws are not checked to follow (the cached step's default, --dropout_masks "
                "row_seeded, compiles it)")
    return None


#: How much of each backbone the fast path compiles as one region (``--torch_compile_regions``): ``backbone``, the
#: whole network (embeddings, every layer, pooler); ``layers``, each of its repeated transformer layers
#: (:func:`repeated_layers`), the embeddings and pooler eager around them.
COMPILE_REGIONS = ("backbone", "layers")


def repeated_layers(backbone: nn.Module) -> nn.ModuleList | None:
    """The backbone's stack of transformer layers: among its ``nn.ModuleList`` objects of two or more children of one
    class (BERT's and RoBERTa's ``encoder.layer``, DistilBERT's ``transformer.layer``, ...), the one holding the most
    parameters; ``None`` where it has none. Its layers run the same code on the same shapes, so compiled one at a
    time they share one graph: dynamo traces, and inductor lowers, one layer instead of the whole stack."""
    stacks = [module for module in backbone.modules()
              if isinstance(module, nn.ModuleList) and len(module) >= 2 and len({type(child) for child in module}) == 1]
    return max(stacks, key=lambda stack: sum(p.numel() for p in stack.parameters()), default=None)


def compiled_regions(owner: nn.Module, name: str, regions: str) -> list[tuple[nn.Module, str]]:
    """The ``(owner, attribute)`` pairs the fast path compiles for the backbone ``owner.name``: itself, or with
    ``regions`` ``layers`` each of its :func:`repeated_layers` (a layer list's attribute is its index), the backbone
    itself where it has no repeated layers."""
    if regions == "backbone":
        return [(owner, name)]
    backbone = getattr(owner, name)
    layers = repeated_layers(backbone)
    if layers is None:
        logger.warning("fast path: %s (%s) has no stack of repeated layers: compiled whole", name,
                       type(backbone).__name__)
        return [(owner, name)]
    return [(layers, str(index)) for index in range(len(layers))]


def regions_under(mode: str, regions: str | None, step_graph: bool = False) -> str:
    """``regions`` (``--torch_compile_regions``) as the compile ``mode`` allows: a mode that records CUDA-graph trees
    (``reduce-overhead``, ``max-autotune``) gets the whole backbone (logged), since its trees are recorded region by
    region and the layers' would leave the step's eager work between them; the step graph's mode (``default``, the
    whole step one CUDA graph) and a CPU's take the layers. Unset (``None``): the layers under the step graph
    (``step_graph``; on an H100 SimCSE's compile warm-up 37.9 -> 16.8 s for a steady rate 2.4 % lower, a wiki1m epoch
    4.1 -> 3.8 min: docs/benchmarks.md), the whole backbone elsewhere."""
    if regions is None:
        return "layers" if step_graph and mode not in CUDA_GRAPH_MODES else "backbone"
    if regions == "layers" and mode in CUDA_GRAPH_MODES:
        logger.warning("fast path: --torch_compile_regions layers needs a mode without CUDA-graph trees (the step "
                       "graph's, or --torch_compile_mode default), not %s: the whole backbone is compiled", mode)
        return "backbone"
    return regions


def recompile_limit(regions: int, batch_size: int, chunk_size: int | None) -> int:
    """The graphs one compiled function may need in a run: every compiled region of the step's backbones (the HF
    models' forwards share one code object, and so do a stack's layers; dynamo's ``recompile_limit`` counts a code
    object's graphs, all modules together; a layer that held a constant of its own would get a graph of its own: a
    row-dropout module's call number is a tensor input in a graph for that reason) at each grad mode and pass shape,
    plus one (PromptBERT's template pass at its own shape). The uncached step's backbones run once per step with
    gradients (a graph each); the cached step's run with gradients at the chunk's size and the last chunk's if
    shorter, and without them at those sizes and at each size of its passes of several chunks
    (:func:`trainers.cached_step.pass_sizes`), which the limit allows. Past the limit dynamo runs a function eagerly
    (with a warning only), which would leave a cached step's backbones eager."""
    if chunk_size is None:
        return regions * 2
    with_graph, without = pass_sizes(batch_size, chunk_size)
    return regions * (len(with_graph) + len(without) + 1)


class CompiledBackbone:
    """The model's step backbones (``model.step_backbones()``: its encoder; ESimCSE's momentum encoder too) and step
    functions (``model.step_functions()``: its objective) compiled once, swapped in for each full-size training step
    (:meth:`step`).

    Args:
        model: the unwrapped :class:`models.base.ContrastiveModel`.
        mode: the ``torch.compile`` mode (:func:`compile_mode`).
        batch_size: the per-device batch size the graph is specialised to; another size (the epoch's short last
            batch) runs eagerly.
        backend: the ``torch.compile`` backend (``inductor``; tests may pass ``aot_eager``).
        chunk_size: the cached step's sentences per pass (``--cache_chunk_size``), whose graphs
            :func:`recompile_limit` makes room for; ``None``: the uncached step.
        regions: what of each backbone is compiled (``--torch_compile_regions``, :data:`COMPILE_REGIONS`): the
            whole backbone, or each of its repeated layers (:func:`compiled_regions`).
    """

    def __init__(self, model: nn.Module, mode: str, batch_size: int, backend: str = "inductor",
                 chunk_size: int | None = None, regions: str = "backbone") -> None:
        self.model = model
        self.batch_size = batch_size
        self.mode = mode
        options = {} if mode == "default" else {"mode": mode}
        self.regions = regions
        backbone_regions = [region for owner, name in model.step_backbones()
                            for region in compiled_regions(owner, name, regions)]
        limit = recompile_limit(len(backbone_regions), batch_size, chunk_size)
        if limit > torch._dynamo.config.recompile_limit:
            logger.info("fast path: dynamo's recompile limit raised from %d to %d graphs per function (the cached "
                        "step's passes, the layers)", torch._dynamo.config.recompile_limit, limit)
            torch._dynamo.config.recompile_limit = limit
        # Backbones see one input shape (the fixed width; the short last batch runs eagerly): dynamic=False. The
        # functions' inputs are settled too before the first compiled step (ESimCSE's queue full:
        # ``runs_compiled``); dynamic=None all the same, so that a size that changes anyway becomes symbolic at its
        # first recompile rather than a graph per size up to dynamo's limit of 8.
        compiled = [(owner, name, False) for owner, name in backbone_regions]
        compiled += [(owner, name, None) for owner, name in model.step_functions()]
        #: (owner, attribute, the eager module or function, its compiled twin) for every region.
        self.slots = [(owner, name, getattr(owner, name),
                       torch.compile(getattr(owner, name), backend=backend, dynamic=dynamic, fullgraph=False,
                                     **options))
                      for owner, name, dynamic in compiled]
        self.eager, self.compiled = self.slots[0][2], self.slots[0][3]  # the encoder's (or its first layer's)
        self.cuda_graphs = mode == "reduce-overhead" and backend == "inductor"
        self.seen_shapes: set[tuple[int, ...]] = set()
        self.warmup_seconds = 0.0  # host time of the steps that compiled a new shape (compile + first run)
        self.compiled_steps = 0
        self.eager_steps = 0
        #: Why the backbones run eagerly for the rest of the run (a warm-up step failed: :meth:`give_up`), or ``None``.
        self.failure: str | None = None

    def runs_compiled(self, input_ids: torch.Tensor) -> bool:
        """Whether the step of ``input_ids`` runs the compiled regions: a full-size batch, no failed warm-up, and
        the model's shapes settled (``model.step_shapes_settled()``: ESimCSE's queue full)."""
        return (self.failure is None and input_ids.size(0) == self.batch_size
                and self.model.step_shapes_settled())

    def warming_up(self, input_ids: torch.Tensor) -> bool:
        """Whether the step of ``input_ids`` is a warm-up step (:data:`WARMUP_STEPS`), which may compile a graph."""
        return self.compiled_steps < WARMUP_STEPS and self.runs_compiled(input_ids)

    def give_up(self, error: BaseException, step: int) -> None:
        """A warm-up step failed with ``error``: the backbones run eagerly from now on, and a warning says why."""
        cause = getattr(error, "inner_exception", None) or error  # a compiler's error wrapped by dynamo
        message = (str(cause).strip().splitlines() or [""])[0][:300]
        wrapped = f"{type(cause).__name__} in " if cause is not error else ""
        self.failure = f"{wrapped}{type(error).__name__} at step {step}: {message}"
        logger.warning("fast path: the compiled step failed (%s); the snapshot taken before it is restored and the "
                       "run goes on with the eager step (the same results; --torch_compile false skips the attempt)",
                       self.failure)

    @contextmanager
    def step(self, input_ids: torch.Tensor) -> Iterator[None]:
        """One training step (forward and backward) with the compiled backbones in place of the eager ones;
        eagerly when the batch is not ``batch_size`` sentences, after a failed warm-up (:attr:`failure`), or while
        the model's shapes are not settled (:meth:`runs_compiled`)."""
        if not self.runs_compiled(input_ids):
            self.eager_steps += 1
            yield
            return
        shape = tuple(input_ids.shape)
        new_shape = shape not in self.seen_shapes
        started = time.perf_counter()
        draws = step_draws(self.model)
        if draws is not None and draws.seed is not None and draws.pass_key is None:
            draws.stage(input_ids.device)  # row-seeded masks: the step's key, an input of the graph (staged once)
        if self.cuda_graphs:
            torch.compiler.cudagraph_mark_step_begin()
        for owner, name, _, compiled in self.slots:
            setattr(owner, name, compiled)
        try:
            yield
        finally:
            for owner, name, eager, _ in self.slots:
                setattr(owner, name, eager)
        self.compiled_steps += 1
        if new_shape:
            self.seen_shapes.add(shape)
            self.warmup_seconds += time.perf_counter() - started
            logger.info("fast path: compiled %d region(s) (%s; %s) for batches of shape %s in %.1f s",
                        len(self.slots), self.mode, self.regions, list(shape), time.perf_counter() - started)


@dataclass
class StepSnapshot:
    """What a training step changes before its optimizer step, taken before a fast-path warm-up step
    (:data:`WARMUP_STEPS`) so that a failed one leaves no trace: the RNG states (torch's CPU and CUDA generators;
    Python's ``random``, which draws the row-seeded steps' seeds), the model's buffers (ESimCSE's queue, BatchNorm
    statistics) and its parameters' gradients."""

    rng: RNGState
    python_random: Any
    buffers: dict[str, torch.Tensor]
    grads: list[torch.Tensor | None]

    @classmethod
    def take(cls, model: nn.Module) -> "StepSnapshot":
        with torch.no_grad():
            return cls(capture_rng(), random.getstate(),
                       {name: buffer.clone() for name, buffer in model.named_buffers()},
                       [None if p.grad is None else p.grad.clone() for p in model.parameters()])

    def restore(self, model: nn.Module) -> None:
        restore_rng(self.rng)
        random.setstate(self.python_random)
        with torch.no_grad():
            for name, buffer in model.named_buffers():
                buffer.copy_(self.buffers[name])
        for param, grad in zip(model.parameters(), self.grads):
            param.grad = grad
