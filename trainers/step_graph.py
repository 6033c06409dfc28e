"""The whole training step as one CUDA graph (``--step_graph``, on by default on one GPU): forward, backward and
gradient clipping captured once and replayed at every later step, so the host launches one graph instead of each
region's kernels.

Why: on an H100 the fast path's SimCSE step (18.5 ms at batch 64) spent most of its time on the host between its
compiled regions: the method's Python around the backbones, the autograd engine, the clipping's 199 tensors
(docs/benchmarks.md), while the issue's plain step under CUDA graphs took 9.9 ms on an H200. Here the CUDA-graph
trees of ``reduce-overhead`` give way to one graph of the step: the compiled backbones and objective (inductor's
kernels, mode ``default``) and everything eager between them are recorded together.

How a run uses it (:class:`StepGraph`, driven by :meth:`trainers.cl_trainer.CLTrainer.training_step`):

1. The fast path's first full-size steps run as usual (the compiled regions' warm-up: their graphs compiled).
2. The next full-size step runs once on the capture stream (a real step: its loss and gradients are the step's),
   then is captured without running (:meth:`StepGraph.capture`): a static copy of the batch as its input, the
   gradients it writes as new tensors in the graph's memory.
3. Every later full-size step copies its batch into the static inputs and replays the graph
   (:meth:`StepGraph.replay`): dropout draws new masks (the generator's offset advances at every replay), the
   gradients are written afresh into the same tensors, which become the parameters' ``.grad`` for the Trainer's
   optimizer step (eager: fused AdamW, a few launches); the loss, the model's metrics and the gradient norm are
   the graph's outputs, read by the trainer before the next replay overwrites them.
4. The epoch's short last batch, and any batch whose tensors differ in shape, run the ordinary step.

What the graph freezes is the host: Python numbers become kernel arguments, host-side counters and ``random`` do not
run at replay. A model whose step would depend on such state says so (``model.step_graph_refusal()``; none does
now: ESimCSE's full queue advances its ring from the position on the device, and the capture waits until the model's
shapes settle, ``model.step_shapes_settled()``, i.e. its queue is full); ``tests/test_step_graph.py`` replays every
method's step on a CPU simulation of a CUDA graph (``tests/op_tape.py``) and finds the eager steps' losses and
gradients exactly.

Row-seeded masks (``--dropout_masks row_seeded``) draw each step's seed on the host: the trainer stages it into the
run's key tensor on the device before the capture and before each replay (``StepDraws.stage``), and every keyed
draw of the step, compiled or eager, reads it there.

When it is on (:func:`step_graph_wanted`): by default wherever the fast path is on and nothing refuses it, i.e. one
GPU training in bf16 (an H100 ran SimCSE's real loop at 5,746 sentences/s with it, 2026-11-27; docs/benchmarks.md).
Where it is refused (:func:`step_graph_refusal`), a run that asks for it stops with the reason: no CUDA device,
several processes, fp16's gradient scaler, gradient accumulation, the cached step with stream masks (its replay
restores the RNG state on the host; with its default row-seeded masks it is captured like any step: every chunk's
passes, the loss and the replay in one graph), gradient checkpointing (its recomputation reads the RNG state on the
host), a compile mode that records CUDA graphs itself. The step before the capture runs under
:class:`trainers.host_reads.HostReadRecorder`: a step that reads a tensor's value on the host (a backbone's own
code may: I-BERT's quantisation modules, a padding check without an attention mask) is not captured, and the warning
names the read and its line. A capture that fails likewise keeps the step it ran (the warm-up run's results); the
run goes on with the fast path's compiled regions, with a warning. Under the default a refusal
only turns the graph off (a warning with the reason on a GPU): the fast path runs the step.
"""
from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

import torch
from torch import nn

from .errors import UsageError
from .host_reads import HostReadRecorder

logger = logging.getLogger(__name__)

__all__ = ["CUDAGraphBackend", "StepGraph", "StepOutputs", "new_backend", "step_graph_refusal", "step_graph_wanted"]


class CUDAGraphBackend:
    """The step's CUDA graph and its capture stream (:mod:`torch.cuda.graphs`)."""

    def __init__(self, model: nn.Module) -> None:
        self.graph = torch.cuda.CUDAGraph()
        self.stream = torch.cuda.Stream()

    @contextmanager
    def warm_up(self) -> Iterator[None]:
        """Run the step on the capture stream first, as torch's whole-network capture recipe does (state a library
        sets up lazily per stream, cuBLAS's workspace, exists before the capture)."""
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            yield
        torch.cuda.current_stream().wait_stream(self.stream)

    @contextmanager
    def capturing(self) -> Iterator[None]:
        """Record the kernels launched inside (nothing runs). ``thread_local``, as inductor's CUDA-graph trees capture:
        the data loader's pin-memory thread may allocate pinned memory meanwhile, which a ``global`` capture would
        count as an unsafe call of its own."""
        with torch.cuda.graph(self.graph, stream=self.stream, capture_error_mode="thread_local"):
            yield

    def replay(self) -> None:
        self.graph.replay()


#: Builds the graph backend for a model. ``tests/op_tape.py`` puts a CPU simulation of a CUDA graph here.
new_backend: Callable[[nn.Module], Any] = CUDAGraphBackend


@dataclass
class StepOutputs:
    """What one step leaves for the trainer: its loss, the model's metrics, the gradient norm before clipping, and
    each listed parameter's gradient (``None`` for a parameter the step does not reach)."""

    loss: torch.Tensor
    metrics: dict[str, torch.Tensor] | None
    grad_norm: torch.Tensor
    grads: list[torch.Tensor | None]


def step_graph_refusal(device: torch.device, processes: int, accumulation_steps: int, cached_step: bool,
                       keyed_masks: bool, checkpointing_flag: str | None, compile_mode: str | None,
                       model_refusal: str | None, fp16: bool = False) -> str | None:
    """Why a run cannot capture its step as one CUDA graph, or ``None``. ``checkpointing_flag``: gradient
    checkpointing's flag as typed, ``None`` when it is off. (A CPU run is refused unless a test put a simulated graph
    in :data:`new_backend`.)"""
    if device.type != "cuda" and new_backend is CUDAGraphBackend:
        return f"it captures a CUDA graph, and this run trains on {device.type}"
    if processes > 1:
        return "several processes all-reduce their gradients inside the backward (one process only)"
    if fp16:
        return ("--fp16's gradient scaler unscales the gradients before clipping and reads on the host whether they "
                "overflowed, outside the graph's clipping; use --bf16")
    if accumulation_steps > 1:
        return (f"--gradient_accumulation_steps {accumulation_steps} adds each micro-batch's gradients to the last's, "
                "which the graph writes afresh")
    if cached_step and not keyed_masks:
        return ("--cache_chunk_size with --dropout_masks stream replays each chunk's masks by restoring the RNG state, "
                "which a CUDA graph cannot (the cached step's default, row-seeded masks, can)")
    if checkpointing_flag:
        return f"{checkpointing_flag} reads the RNG state on the host to recompute its layers"
    if compile_mode in ("reduce-overhead", "max-autotune"):
        return (f"--torch_compile_mode {compile_mode} records CUDA graphs of its own inside the step's; leave it "
                "unset (the compiled regions then use inductor's default mode)")
    return model_refusal


def step_graph_wanted(requested: bool | None, fast_path: bool, refusal: str | None, on_gpu: bool) -> bool:
    """Whether a run captures its step: ``requested`` (``--step_graph``) ``False``: no; ``True``: yes, where the
    fast path is on and :func:`step_graph_refusal` gives no ``refusal`` (else :class:`UsageError` with the reason
    and the fix); ``None`` (the default): wherever the fast path is on and nothing refuses it, a refusal logged as a
    warning when the run trains on a GPU (``on_gpu``; on a CPU the graph never applies)."""
    if requested is False:
        return False
    if not fast_path:
        if requested:
            raise UsageError("--step_graph true needs the fast path's fixed shapes: add --torch_compile true")
        return False
    if refusal is None:
        return True
    if requested:
        raise UsageError(f"--step_graph true: {refusal}; leave --step_graph false")
    if on_gpu:
        logger.warning("step graph: off, because %s; the fast path runs the step (--step_graph false says so)",
                       refusal)
    return False


class StepGraph:
    """One training step, captured (:meth:`capture`) and replayed (:meth:`replay`).

    Args:
        model: the unwrapped model (the backend restores its state after a simulated capture).
        parameters: the parameters whose gradients the step writes, in the order :class:`StepOutputs` lists them.
    """

    def __init__(self, model: nn.Module, parameters: list[nn.Parameter]) -> None:
        self.model = model
        self.parameters = parameters
        self.backend: Any = None
        self.static_inputs: dict[str, Any] | None = None
        self.outputs: StepOutputs | None = None
        self.replays = 0
        #: Why the run goes on without the graph (its warm-up step read the host, or its capture failed), or ``None``.
        self.failure: str | None = None

    @property
    def captured(self) -> bool:
        return self.outputs is not None

    def fits(self, inputs: Mapping[str, Any]) -> bool:
        """Whether ``inputs`` can be copied into the static inputs: the same keys, tensors of the same shapes and
        dtypes, the same other values."""
        static = self.static_inputs
        if static is None or static.keys() != inputs.keys():
            return False
        for key, value in inputs.items():
            held = static[key]
            if isinstance(value, torch.Tensor):
                if not (isinstance(held, torch.Tensor) and held.shape == value.shape and held.dtype == value.dtype
                        and held.device == value.device):
                    return False
            elif held is not value and held != value:
                return False
        return True

    def capture(self, inputs: Mapping[str, Any], body: Callable[[Mapping[str, Any]], StepOutputs]) -> StepOutputs:
        """Run the step of ``inputs`` once (``body``: forward, backward, clipping) and capture it. Returns the run's
        outputs (this step's); the parameters hold its gradients. A step whose run read a tensor on the host
        (:class:`trainers.host_reads.HostReadRecorder`) is not captured, and a capture that fails is given up: either
        is logged and leaves the run on its ordinary step (:attr:`failure`)."""
        self.backend = new_backend(self.model)
        recorder = HostReadRecorder()
        with self.backend.warm_up(), recorder:
            ran = body(inputs)
        if recorder.reads:  # a capture would fail at that read (on a GPU, with the stream's state undefined)
            self.give_up(f"the step reads a tensor's value on the host ({recorder.reads[0]}), which a CUDA graph "
                         "cannot capture")
            return ran
        self.static_inputs = {key: value.clone() if isinstance(value, torch.Tensor) else value
                              for key, value in inputs.items()}
        for param in self.parameters:
            param.grad = None  # the captured backward writes new gradient tensors, in the graph's memory
        try:
            with self.backend.capturing():
                self.outputs = body(self.static_inputs)
        except Exception as error:  # noqa: BLE001 - the step already ran; the run goes on without the graph
            first_line = (str(error).strip().splitlines() or [""])[0][:300]
            self.give_up(f"its capture failed ({type(error).__name__}: {first_line})")
        finally:
            for param, grad in zip(self.parameters, ran.grads):
                param.grad = grad
        if self.outputs is not None:
            logger.info("step graph: the training step is captured (%d parameters' gradients); later full-size steps "
                        "replay it", sum(grad is not None for grad in self.outputs.grads))
        return ran

    def give_up(self, reason: str) -> None:
        """Go on without the graph (:attr:`failure`: ``reason``, why), with a warning."""
        self.outputs, self.static_inputs, self.backend = None, None, None
        self.failure = reason
        logger.warning("step graph: not used, because %s; the step it ran counts, and the run goes on with the fast "
                       "path's compiled regions (--step_graph false skips the attempt)", reason)

    def replay(self, inputs: Mapping[str, Any]) -> StepOutputs:
        """The step of ``inputs`` (which :meth:`fits`) by replaying the graph; the parameters' ``.grad`` are the
        graph's gradients afterwards."""
        assert self.outputs is not None and self.static_inputs is not None
        for key, value in inputs.items():
            if isinstance(value, torch.Tensor):
                self.static_inputs[key].copy_(value, non_blocking=True)
        self.backend.replay()
        for param, grad in zip(self.parameters, self.outputs.grads):
            param.grad = grad
        self.replays += 1
        return self.outputs
