"""Row-seeded dropout (``--dropout_masks row_seeded``): the keyed draws, owned by the training step.

With row-seeded masks every dropout mask, sampled dropout rate and sampled generator token is a pure function of

    (the step's seed, the network and kind of draw, the dropout module, the row's index in the global batch, the element)

(``models/row_seeded.py``), so a row gets the same mask whatever else is in its backbone pass. The model only marks
its per-row dropout controllers ``row_seeded`` (``models/dropout.py``); this module installs the draws in them
(:func:`install_keyed_draws`, called by ``trainers.methods`` when it builds a model) and the step drives them:

- :func:`keyed_step`: one seed per training step, drawn from Python's ``random`` (seeded by ``set_seed`` and
  checkpointed by the Trainer, so a resumed run draws the same seeds; a host-side draw, no tensor and no device sync);
  every pass of the step (forward, gradient checkpointing's recomputation in backward, a cached step's chunks and
  replays) keys its masks with it. The step's sentences start at this process's offset in the global batch
  (processes in rank order, as the all-gather concatenates them), so N processes draw one process's masks.
- :func:`pass_sentences`: a pass over some of the step's sentences (a cached step's chunk): its rows' global
  indices start at those sentences (with a staged key, the pass's key is computed from it on the device).
- :meth:`StepDraws.stage`: for a compiled backbone (the fast path, ``trainers/fast_path.py``), the step's seed, the
  pass's first sentence and the seed of each registered stream as a device tensor, which the graph reads as an
  input: its dropout calls compute their seeds from their streams' (:func:`models.row_seeded.call_seed_tensor`),
  rows' ids and masks from it inside the graph, the same bits as
  the eager pass computes from the Python integers (a Python integer read while compiling would be compiled in as a
  constant: a new graph every step). Once staged, the step's eager draws (DiffCSE's sampled tokens, S-SimCSE's
  rates outside a compiled region) read it too, and it is one tensor for the whole run, written in place: a step
  captured as one CUDA graph (``trainers/step_graph.py``) reads each step's key, staged before its replay.
"""
from __future__ import annotations

import random
import weakref
from contextlib import contextmanager
from typing import Iterable, Iterator

import torch
from torch import nn

from models.distributed import rank
from models.dropout import Call, RowDropout, RowDropoutController
from models.row_seeded import (KeepOperands, call_seed_from, call_seed_tensor, inverse_cdf_sample,
                               keyed_keep_mask_from, keyed_uniforms, stream_seed, stream_seed_tensor)


#: Row-id tensors a :class:`StepDraws` keeps at most (a run has a handful of pass layouts: the batch, its chunks, the
#: last short batch).
ROW_IDS_KEPT = 64
#: What :func:`install_keyed_draws` gave each model (``None``: stream masks), so that a step finds it without walking
#: the model's modules (a few hundred; on a GPU the step waits on the host).
_INSTALLED: "weakref.WeakKeyDictionary[nn.Module, StepDraws | None]" = weakref.WeakKeyDictionary()


class StepDraws:
    """The keyed draws of one model (:class:`models.dropout.KeyedDraws`): the running step's seed and the sentences
    of the running pass (``first`` global index, ``count``); a pass of r rows per sentence has rows
    ``first * r ..``."""

    def __init__(self) -> None:
        self.seed: int | None = None
        self.first = 0
        self.count: int | None = None
        #: The rows' ids of each pass layout (rows, device, first row), made once and kept across steps (they do not
        #: depend on the seed): every dropout call and draw of a pass reads them, and a tensor made per call is a few
        #: host launches each on a GPU, where the step is bound by them.
        self._row_ids: dict[tuple, torch.Tensor] = {}
        #: ``[step seed, first sentence, the stream seed of each registered stream...]`` (int64, on the step's
        #: device) while a compiled backbone runs the step (:meth:`stage`); ``None`` otherwise.
        self.pass_key: torch.Tensor | None = None
        #: The device tensor :meth:`stage` writes each key into, one per device for the whole run.
        self._staged: dict[torch.device, torch.Tensor] = {}
        #: The streams the controllers registered (:meth:`add_streams`), each with its slot in a staged key after
        #: the step's seed and the first sentence.
        self._stream_slots: dict[int, int] = {}

    def add_streams(self, streams: Iterable[int]) -> None:
        """Register ``streams`` (a controller's :meth:`models.dropout.RowDropoutController.keyed_streams`): a staged
        key carries their :func:`models.row_seeded.stream_seed`. Once a key has been staged its size stays (a
        captured CUDA graph reads that tensor), so a stream first registered later gets no slot: its draws derive
        its seed from the staged step seed (:meth:`_seed`), the same bits."""
        for stream in streams:
            if stream not in self._stream_slots and not self._staged:
                self._stream_slots[stream] = len(self._stream_slots)

    def stage(self, device: torch.device) -> None:
        """Put the step's seed and the running pass's first sentence on ``device`` for a compiled backbone (the fast
        path calls this when a step begins; :func:`pass_sentences` derives each pass's key from it): one
        asynchronous copy from pinned memory on a GPU into the run's key tensor, no host sync. The key carries the
        registered streams' seeds too, computed here on the host (a few integer hashes per step), so that a graph's
        dropout call mixes only its own index into its stream's seed instead of deriving that seed from the step's
        (two fewer ``mix32`` in every call: fewer operations to trace, 20 % of the tiny backbone's graph)."""
        key = torch.tensor([self.seed, self.first, *(stream_seed(self.seed, stream) for stream in self._stream_slots)],
                           dtype=torch.int64)
        if device.type == "cuda":
            key = key.pin_memory()
        if device not in self._staged:
            self._staged[device] = torch.empty(key.numel(), dtype=torch.int64, device=device)
        self.pass_key = self._staged[device]
        self.pass_key.copy_(key, non_blocking=True)

    def row_ids(self, rows: int, device: torch.device) -> torch.Tensor:
        compiling = torch.compiler.is_compiling()
        if (self.pass_key is None) if compiling else (self.seed is None or self.count is None):
            raise RuntimeError(
                "row-seeded dropout (--dropout_masks row_seeded) ran outside a training step: wrap the pass in "
                "`with trainers.keyed_dropout.keyed_step(model, batch_size):` (the Trainer's step and the cached step "
                "do), so that every pass of the step uses the step's seed; a compiled backbone also needs "
                "`draws.stage(device)` (trainers.fast_path.CompiledBackbone.step does)")
        if rows % self.count:
            raise RuntimeError(f"a pass of {rows} rows over {self.count} sentences: rows are not sentence-major")
        if self.pass_key is not None:  # staged: the first sentence is read on the device (in a graph: an input)
            return torch.arange(rows, device=device) + self.pass_key[1] * (rows // self.count)
        key = (rows, str(device), self.first * (rows // self.count))
        if key not in self._row_ids:
            if len(self._row_ids) >= ROW_IDS_KEPT:
                self._row_ids.clear()
            self._row_ids[key] = torch.arange(rows, device=device) + key[2]
        return self._row_ids[key]

    def _seed(self, stream: int, call: Call) -> int | torch.Tensor:
        """The seed of one draw: a Python integer, or once the key is staged a 0-d tensor read from it: its stream's
        seed from the key's slot (a registered stream; any other from the step's seed, the same bits), the call's
        index mixed in (:func:`models.row_seeded.call_seed_tensor`)."""
        if self.pass_key is not None:
            slot = self._stream_slots.get(stream)
            seed = stream_seed_tensor(self.pass_key[0], stream) if slot is None else self.pass_key[2 + slot]
            return call_seed_tensor(seed, call)
        return call_seed_from(stream_seed(self.seed, stream), call)

    def uniforms(self, stream: int, call: Call, keys: torch.Tensor, per_key: int) -> torch.Tensor:
        return keyed_uniforms(self._seed(stream, call), keys, per_key)

    def operands(self, row_ids: torch.Tensor, rates: torch.Tensor) -> KeepOperands:
        return KeepOperands(row_ids, rates)

    def keep_mask(self, stream: int, call: Call, operands: KeepOperands, shape: torch.Size) -> torch.Tensor:
        return keyed_keep_mask_from(self._seed(stream, call), operands, shape)

    def categorical(self, probabilities: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
        return inverse_cdf_sample(probabilities, uniforms)


def keyed_controllers(model: nn.Module) -> list[RowDropoutController]:
    """The ``row_seeded`` per-row dropout controllers of ``model``'s networks, each once."""
    found: dict[int, RowDropoutController] = {}
    for module in model.modules():
        if isinstance(module, RowDropout) and module.controller.row_seeded:
            found.setdefault(id(module.controller), module.controller)
    return list(found.values())


def install_keyed_draws(model: nn.Module) -> StepDraws | None:
    """Give every ``row_seeded`` controller of ``model`` one shared :class:`StepDraws`; ``None`` (nothing to do)
    with stream masks."""
    controllers = keyed_controllers(model)
    draws = StepDraws() if controllers else None
    for controller in controllers:
        controller.use_draws(draws)
    _INSTALLED[model] = draws
    return draws


def step_draws(model: nn.Module) -> StepDraws | None:
    """The draws :func:`install_keyed_draws` gave ``model`` (``None`` with stream masks): remembered from the install,
    else found in its controllers."""
    if model in _INSTALLED:
        return _INSTALLED[model]
    return next((controller.draws for controller in keyed_controllers(model)), None)


@contextmanager
def keyed_step(model: nn.Module, batch_size: int) -> Iterator[StepDraws | None]:
    """One training step of ``model`` on ``batch_size`` sentences of this process: with row-seeded masks, a fresh
    seed and the process's sentences for every pass inside the block. Re-entrant (an inner block keeps the step);
    a no-op with stream masks."""
    draws = step_draws(model)
    if draws is None or draws.seed is not None:
        yield draws
        return
    draws.seed, draws.first, draws.count = random.getrandbits(62), rank() * batch_size, batch_size
    try:
        yield draws
    finally:
        draws.seed, draws.first, draws.count, draws.pass_key = None, 0, None, None


@contextmanager
def pass_sentences(draws: StepDraws | None, start: int, end: int) -> Iterator[None]:
    """Within the block, passes hold the step's sentences ``start:end`` (indices within this process's batch)."""
    if draws is None:
        yield
        return
    first, count, staged = draws.first, draws.count, draws.pass_key
    draws.first, draws.count = first + start, end - start
    if staged is not None:  # the pass's key from the staged one, on the device (no host copy: a CUDA graph replays it)
        draws.pass_key = torch.cat((staged[:1], staged[1:2] + start, staged[2:]))
    try:
        yield
    finally:
        draws.first, draws.count, draws.pass_key = first, count, staged


__all__ = ["StepDraws", "install_keyed_draws", "keyed_controllers", "keyed_step", "pass_sentences", "step_draws"]
