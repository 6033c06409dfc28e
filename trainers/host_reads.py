"""Operations that read a tensor's value on the host, recorded while a step runs (:class:`HostReadRecorder`).

On a GPU each of them waits for the device (a host-device synchronisation), and inside a CUDA graph's capture it
cannot run at all: the capture fails. A backbone's modeling code may hold one that training never needed to know
about (I-BERT's quantisation modules assert on ``x_max.isnan().sum()`` at every forward; DeBERTa-v2 and 31 other
model types check ``input_ids`` for padding when they are called without an attention mask, as PromptBERT's
template pass calls them). The step graph runs its warm-up step under the recorder and captures only a step that
read nothing (``trainers/step_graph.py``); the first read is named by the line of code outside torch that made it.

What counts (:func:`reads_on_host`): an operation that returns a host value computed from a tensor
(``aten::_local_scalar_dense``: ``.item()``, ``bool(t)``, ``if t.any():``; ``aten::equal``, ``aten::is_nonzero``),
one whose output's shape depends on the values (``nonzero``, ``masked_select``, ``unique``), boolean-mask indexing
(``t[mask]``, ``t[mask] = v``: ``nonzero`` inside the kernel), and a copy from an accelerator into host memory.
"""
from __future__ import annotations

import os
import traceback
from typing import NamedTuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode

#: Operations whose output's shape depends on their input's values (the host waits for the values to size it).
DATA_DEPENDENT_SHAPES: frozenset[str] = frozenset({
    "aten::nonzero", "aten::nonzero_static", "aten::masked_select", "aten::_unique", "aten::_unique2",
    "aten::unique_dim", "aten::unique_consecutive",
})
#: Indexing operations that read a boolean index's values on the host (``t[mask]``, ``t[mask] = v``).
MASK_INDEXING: frozenset[str] = frozenset({"aten::index", "aten::index_put", "aten::index_put_",
                                           "aten::_index_put_impl_"})
#: Operations that return a host value from a tensor's metadata alone (no wait for the device).
METADATA: frozenset[str] = frozenset({"aten::is_same_size", "aten::sym_size", "aten::sym_stride", "aten::sym_numel",
                                      "aten::sym_storage_offset"})
#: Copies, which read on the host when they bring an accelerator's tensor into host memory.
COPIES: frozenset[str] = frozenset({"aten::_to_copy", "aten::copy_"})

_TORCH_ROOT = os.path.dirname(torch.__file__) + os.sep
_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


class HostRead(NamedTuple):
    """One host read: the operation (``aten::_local_scalar_dense``, ``aten::index with a boolean mask``...) and
    the line of code outside torch that made it (``path:line in function``; the path from its package's folder)."""

    operation: str
    where: str

    def __str__(self) -> str:
        return f"{self.operation} at {self.where}"


def reads_on_host(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> str | None:
    """The kind of host read ``func`` called on ``args`` / ``kwargs`` is (its name, or its name ``with a boolean
    mask``), or ``None`` (module docstring)."""
    schema = func._schema
    name = schema.name
    if name in DATA_DEPENDENT_SHAPES:
        return name
    if name in MASK_INDEXING:
        indices = args[1] if len(args) > 1 else ()
        if any(isinstance(index, torch.Tensor) and index.dtype == torch.bool for index in indices or ()):
            return f"{name} with a boolean mask"
        return None
    if name in COPIES:
        return name if _into_host_memory(name, args, kwargs) else None
    if name not in METADATA and (any("Tensor" in str(argument.type) for argument in schema.arguments)
            and any("Tensor" not in str(result.type) for result in schema.returns)):
        return name  # a host value from a tensor (aten::promote_types, from dtypes alone, takes no tensor)
    return None


def _into_host_memory(name: str, args: tuple, kwargs: dict) -> bool:
    source = args[1] if name == "aten::copy_" else args[0]
    if not isinstance(source, torch.Tensor) or source.device.type == "cpu":
        return False
    if name == "aten::copy_":
        return args[0].device.type == "cpu"
    device = kwargs.get("device")
    return device is not None and torch.device(device).type == "cpu"


def calling_line() -> str:
    """The innermost frame of the running stack outside torch and this module, as ``path:line in function``."""
    for frame in reversed(traceback.extract_stack()):
        if frame.filename.startswith(_TORCH_ROOT) or frame.filename == __file__:
            continue
        return f"{_short_path(frame.filename)}:{frame.lineno} in {frame.name}"
    return "an unknown line"


def _short_path(path: str) -> str:
    """``.../site-packages/transformers/models/x.py`` -> ``transformers/models/x.py``; this repository's files
    relative to its root."""
    marker = os.sep + "site-packages" + os.sep
    if marker in path:
        return path.split(marker, 1)[1]
    return path[len(_REPO_ROOT):] if path.startswith(_REPO_ROOT) else path


class HostReadRecorder(TorchDispatchMode):
    """Records every host read (:func:`reads_on_host`) dispatched while it is entered, in :attr:`reads`; changes
    nothing else. Compiled regions run compiled inside it (:meth:`ignore_compile_internals`): a graph's kernels
    read nothing on the host, and what runs eagerly between them is dispatched here."""

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[HostRead] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        kind = reads_on_host(func, args, kwargs)
        if kind is not None:
            self.reads.append(HostRead(kind, calling_line()))
        return func(*args, **kwargs)


__all__ = ["HostRead", "HostReadRecorder", "calling_line", "reads_on_host"]
