"""The fast path (``--torch_compile true``): fixed shapes, the backbone compiled, no host-device sync in the loop.

Where the compiled region begins and ends is decided here, and only here:

- **Fixed shapes** (:func:`fixed_shape_collator`): the collator's views, and the batch keys the model names
  (``model.fixed_width_keys()``: DiffCSE's edit rows), are padded to its widest batch (``data.fixed_shapes``), so
  the compiled networks see one shape instead of a new one every step. A short batch (the epoch's last) runs
  eagerly instead of recompiling.
- **The compiled regions are the backbones** (``model.step_backbones()``: the encoder, the bulk of the step's compute
  and a pure function of its inputs and dropout; ESimCSE's momentum encoder; DiffCSE's generator and discriminator
  where its edit rows have the fixed width and h enters through the inputs) **and the objective** (the
  contrastive loss, ``model.step_functions()``: a few dozen small operations and their backward; its inputs are the
  step's embeddings and ESimCSE's queue, whose size grows to its capacity in the first steps: compiled with that
  size symbolic, one graph): :class:`CompiledBackbone` compiles each once (``torch.compile``; the backbones with
  ``dynamic=False``) and swaps them in for the duration of each training step, so the model's own forward and
  ``compute_loss`` run unchanged around them (ESimCSE's queue and DiffCSE's sampling stay eager; PromptBERT's
  template pass runs the compiled encoder at its own shape) and checkpoints, evaluation and the export
  see the plain modules (evaluation's varying widths never reach the compiled graph). On one CUDA device the mode is
  ``reduce-overhead`` (CUDA graphs; each step begins with ``torch.compiler.cudagraph_mark_step_begin()``; dropout's
  RNG is graph-safe: torch advances the generator's offset on every replay). ``--torch_compile_mode`` picks another
  mode.
- **Per-row dropout inside the graph**: S-SimCSE's sampled rates and SimCSE++'s dropout-off rows (a plan of tensors
  whose sizes are fixed by the config) are traced as they are; with ``--dropout_masks row_seeded`` the step's seed and
  the pass's first sentence reach the graph as a device tensor (``StepDraws.stage``), from which it computes the
  keyed masks, the same bits as the eager pass.
- The backbone stays eager where compiling it would break a contract: gradient checkpointing recomputes layers
  outside the step, and the cached step (``trainers/cached_step.py``) runs it chunk by chunk, twice (without gradients,
  then replayed with them), at shapes of its own. Those runs still get the fixed shapes and the sync-free loop.
- **No host-device sync** in the loop between logging steps: the Trainer's NaN/inf filter is off
  (``CLTrainingArguments.logging_nan_inf_filter``; :class:`trainers.divergence.DivergenceMonitor` catches a
  non-finite loss on the device), batches are copied to the device asynchronously from pinned memory
  (:func:`asynchronous_batches`), the model's step holds none (PromptBERT's template ids are device buffers).

The fast path changes no result beyond float reordering: ``tests/test_fast_path.py`` checks every method's loss and
gradients against the eager step's, and that padding changes no loss.
"""
from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from typing import Any, Iterator

import torch
from torch import nn

from data.fixed_shapes import FixedShapeCollator

from .keyed_dropout import step_draws

logger = logging.getLogger(__name__)

#: ``torch.compile``'s modes (``--torch_compile_mode``).
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")

__all__ = ["COMPILE_MODES", "CompiledBackbone", "asynchronous_batches", "backbone_compile_refusal", "compile_mode",
           "fixed_shape_collator"]


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


def compile_mode(requested: str | None, device: torch.device, processes: int, bf16: bool = True) -> str:
    """The ``torch.compile`` mode: ``requested`` (``--torch_compile_mode``) if given, else ``reduce-overhead``
    (CUDA graphs) on one CUDA device training in bf16 autocast (the GPU default, the set-up measured on an H200),
    else ``default``: a CPU; several processes, whose gradient all-reduce runs inside the backward a CUDA graph
    would capture; fp32 training, where the CUDA-graph step failed on an H200 (torch 2.11: "accessing tensor output
    of CUDAGraphs that has been overwritten by a subsequent run" in the backward; docs/benchmarks.md)."""
    if requested:
        return requested
    return "reduce-overhead" if device.type == "cuda" and processes == 1 and bf16 else "default"


def backbone_compile_refusal(gradient_checkpointing: bool, cached_step: bool = False) -> str | None:
    """Why the backbone must stay eager on the fast path, or ``None`` when it can be compiled."""
    if cached_step:
        return ("the cached step runs it chunk by chunk, without gradients and again with them, at shapes other than "
                "the step's")
    if gradient_checkpointing:
        return "--gradient_checkpointing recomputes its layers outside the step"
    return None


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
    """

    def __init__(self, model: nn.Module, mode: str, batch_size: int, backend: str = "inductor") -> None:
        self.model = model
        self.batch_size = batch_size
        self.mode = mode
        options = {} if mode == "default" else {"mode": mode}
        # Backbones see one input shape (the fixed width; the short last batch runs eagerly): dynamic=False. The
        # functions' inputs can grow in the first steps (ESimCSE's queue, up to its capacity: a size per step while
        # it fills): dynamic=None, so a size that changes becomes symbolic at its first recompile (one graph for all
        # the sizes, each size still its own CUDA graph), never a recompile per size past dynamo's limit of 8.
        regions = [(owner, name, False) for owner, name in model.step_backbones()]
        regions += [(owner, name, None) for owner, name in model.step_functions()]
        #: (owner, attribute, the eager module or function, its compiled twin) for every region.
        self.slots = [(owner, name, getattr(owner, name),
                       torch.compile(getattr(owner, name), backend=backend, dynamic=dynamic, fullgraph=False,
                                     **options))
                      for owner, name, dynamic in regions]
        self.eager, self.compiled = self.slots[0][2], self.slots[0][3]  # the encoder's
        self.cuda_graphs = mode == "reduce-overhead" and backend == "inductor"
        self.seen_shapes: set[tuple[int, ...]] = set()
        self.warmup_seconds = 0.0  # host time of the steps that compiled a new shape (compile + first run)
        self.compiled_steps = 0
        self.eager_steps = 0

    @contextmanager
    def step(self, input_ids: torch.Tensor) -> Iterator[None]:
        """One training step (forward and backward) with the compiled backbones in place of the eager ones;
        eagerly when the batch is not ``batch_size`` sentences."""
        if input_ids.size(0) != self.batch_size:
            self.eager_steps += 1
            yield
            return
        shape = tuple(input_ids.shape)
        new_shape = shape not in self.seen_shapes
        started = time.perf_counter()
        draws = step_draws(self.model)
        if draws is not None and draws.seed is not None:  # row-seeded masks: the step's key, an input of the graph
            draws.stage(input_ids.device)
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
            logger.info("fast path: compiled %d backbone(s) (%s) for batches of shape %s in %.1f s", len(self.slots),
                        self.mode, list(shape), time.perf_counter() - started)
