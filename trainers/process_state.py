"""Each process's own state when several train together: ESimCSE's per-process queue (``--gather_queue false``,
the authors' code's queue, which each process fills with its own momentum keys).

Two things of a multi-process run keep only rank 0's copy of a buffer: DDP, which broadcasts every buffer from rank 0
at every forward (``broadcast_buffers``, the Trainer's default), so every process trained with rank 0's queue; and a
checkpoint, which holds rank 0's model alone, so a resume gave every process rank 0's queue. For the buffers a model
names (``ContrastiveModel.process_local_buffers``) the trainer leaves them out of DDP's broadcasts
(``trainers.trainer_adapter.exclude_from_ddp``), every process writes its own into each checkpoint
(:func:`save_process_state`: ``process_state_<rank>.safetensors``), and a resume loads each process's back
(:func:`load_process_state`).

The other way round, what must be one value on every process is taken from the first (:func:`first_process_values`):
the dev scores that pick the best checkpoint, which a test-time embedding reading process-local state (BatchNorm's
running statistics) makes differ between processes.
"""
from __future__ import annotations

from pathlib import Path

from safetensors.torch import load_file, save_file
from torch import nn


def process_state_file(rank: int) -> str:
    """The checkpoint file holding process ``rank``'s own buffers."""
    return f"process_state_{rank}.safetensors"


def process_state_files(model: nn.Module, processes: int) -> list[str]:
    """The files a resume of ``model`` by ``processes`` processes loads besides the Trainer's: one per process
    where the model has process-local buffers and several processes train, else none."""
    if processes <= 1 or not model.process_local_buffers():
        return []
    return [process_state_file(rank) for rank in range(processes)]


def save_process_state(model: nn.Module, folder: str | Path, rank: int) -> None:
    """Write this process's process-local buffers into the checkpoint ``folder``."""
    tensors = {name: model.get_buffer(name).detach().cpu().contiguous() for name in model.process_local_buffers()}
    save_file(tensors, str(Path(folder) / process_state_file(rank)))


def load_process_state(model: nn.Module, folder: str | Path, rank: int) -> bool:
    """Copy this process's buffers from the checkpoint ``folder`` into ``model`` (in place: the buffers keep their
    identity and device; ESimCSE's queue sees the change by their version counters). ``False`` where the checkpoint
    holds none (written before they were kept): the weights' copy (rank 0's) stays."""
    path = Path(folder) / process_state_file(rank)
    if not path.is_file():
        return False
    saved = load_file(str(path))
    for name in model.process_local_buffers():
        model.get_buffer(name).copy_(saved[name])
    return True


def first_process_values(values: dict[str, float], processes: int) -> dict[str, float]:
    """``values`` as the first process computed them, on every process (one broadcast of the small dict; ``values``
    itself with one process)."""
    if processes <= 1:
        return values
    from accelerate.utils import broadcast_object_list

    return broadcast_object_list([values], from_process=0)[0]
