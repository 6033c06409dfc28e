"""A CUDA graph's semantics on a CPU, for tests: :class:`OpTape` records every ATen operation a step dispatches and
replays them on the same tensors, as ``torch.cuda.CUDAGraph`` replays the recorded kernels on the same addresses.

What a replay keeps from the capture, as a CUDA graph does: every tensor the capture allocated (its outputs, the
saved activations, the gradients: each operation writes into the tensor it wrote at the capture), every tensor it
read that existed before (the parameters, a static input buffer: read afresh at each replay) and every host value
(a Python number becomes a kernel argument, frozen). What it does not keep: the host's work. Python code, a counter
on the host, ``random``: none of it runs again, so a step that depends on host state replays the captured value,
as on a GPU. Random operations draw from the generator at every replay (a CUDA graph advances its Philox offset).

The capture itself leaves no trace, as a CUDA graph's capture runs nothing: the model's RNG states, buffers and
gradients are restored after it (:class:`trainers.fast_path.StepSnapshot`). An operation that reads a value on the
host (``.item()``, ``bool(tensor)``, ``torch.equal``, boolean-mask indexing: :func:`trainers.host_reads.reads_on_host`)
raises :class:`HostReadInCapture`, as a CUDA graph's capture fails on a synchronisation (the step graph's warm-up
step, under :class:`trainers.host_reads.HostReadRecorder`, finds such a step before its capture).

The simulation sees what goes through the dispatcher: eager operations and ``torch.compile``'s ``aot_eager``
backend; inductor's CPU kernels bypass it (use the ``aot_eager`` backend with it).
"""
from __future__ import annotations

import os
import traceback
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from trainers.fast_path import StepSnapshot
from trainers.host_reads import reads_on_host


DEBUG = bool(os.environ.get("OP_TAPE_DEBUG"))


class HostReadInCapture(RuntimeError):
    """An operation read a tensor's value on the host during a capture (a CUDA graph's capture would fail)."""


def _writes(func: torch._ops.OpOverload) -> bool:
    return any(a.alias_info is not None and a.alias_info.is_write for a in func._schema.arguments)


def _aliases(func: torch._ops.OpOverload) -> bool:
    return any(r.alias_info is not None for r in func._schema.returns)


class _Recorder(TorchDispatchMode):
    @classmethod
    def ignore_compile_internals(cls) -> bool:
        """Let ``torch.compile``'d regions run compiled inside the recording (dynamo skips a frame under any other
        dispatch mode, and the eager backbone reads its padding mask on the host): their operations are recorded as
        the compiled artifact runs them."""
        return True

    def __init__(self, tape: list[tuple[Callable, tuple, dict, Any]]) -> None:
        super().__init__()
        self.tape = tape

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if reads_on_host(func, args, kwargs) is not None:
            if DEBUG:
                traceback.print_stack()
            raise HostReadInCapture(f"{func} reads a tensor's value on the host inside the captured step")
        out = func(*args, **kwargs)
        self.tape.append((func, args, kwargs, out))
        return out


class OpTape:
    """The CPU stand-in for :class:`trainers.step_graph.CUDAGraphBackend` (the same three members).

    Args:
        model: the model whose RNG states, buffers and gradients the capture restores afterwards.
    """

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.tape: list[tuple[Callable, tuple, dict, Any]] = []
        self.replays = 0

    @contextmanager
    def warm_up(self) -> Iterator[None]:
        """The step before the capture (a CUDA graph's runs on the capture stream): nothing to set up here."""
        yield

    @contextmanager
    def capturing(self) -> Iterator[None]:
        """Record the step's operations; afterwards restore what running them changed."""
        snapshot = StepSnapshot.take(self.model)
        try:
            with _Recorder(self.tape):
                yield
        finally:
            snapshot.restore(self.model)

    def replay(self) -> None:
        """Run the recorded operations again, each writing into the tensors it wrote at the capture."""
        with torch.no_grad():
            for func, args, kwargs, captured in self.tape:
                if _aliases(func) and not _writes(func):
                    continue  # a view of a tensor that is itself replayed in place
                fresh = func(*args, **kwargs)
                for old, new in zip(tree_flatten(captured)[0], tree_flatten(fresh)[0]):
                    if isinstance(old, torch.Tensor) and old is not new:
                        old.copy_(new)
        self.replays += 1


__all__ = ["HostReadInCapture", "OpTape"]
