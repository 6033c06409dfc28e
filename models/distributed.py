"""Cross-process gathering of embeddings so that N processes train the objective of one process with the global
batch (SimCSE's in-batch negatives must span the *global* batch).

``torch.distributed.nn.all_gather`` is differentiable: its backward sums every process's gradient for a slice
back onto the process that produced it. With every process computing the loss of the whole gathered batch, and
DDP averaging gradients over the N processes, each parameter receives exactly the single-process global-batch
gradient (``tests/test_ddp.py`` checks this with two gloo processes).
"""
from __future__ import annotations

import torch
import torch.distributed as dist


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def gather_with_grad(tensor: torch.Tensor) -> torch.Tensor:
    """Concatenate ``tensor`` [n, ...] from every process along dim 0 (rank order); gradients flow back."""
    if world_size() == 1:
        return tensor
    import torch.distributed.nn  # noqa: F401  (registers the differentiable collectives)

    return torch.cat(torch.distributed.nn.all_gather(tensor.contiguous()), dim=0)


@torch.no_grad()
def gather_no_grad(tensor: torch.Tensor) -> torch.Tensor:
    """Like :func:`gather_with_grad` for tensors that need no gradient (queues, statistics)."""
    if world_size() == 1:
        return tensor
    parts = [torch.empty_like(tensor) for _ in range(world_size())]
    dist.all_gather(parts, tensor.contiguous())
    return torch.cat(parts, dim=0)
