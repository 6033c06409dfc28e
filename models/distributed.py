"""Cross-process gathering of embeddings so that N processes train the objective of one process with the global
batch (SimCSE's in-batch negatives must span the *global* batch).

:func:`gather_with_grad` is differentiable (:class:`GatherWithGrad`): its backward sums every process's gradient
for a slice back onto the process that produced it. With every process computing the loss of the whole gathered
batch, and DDP averaging gradients over the N processes, each parameter receives exactly the single-process
global-batch gradient (``tests/test_ddp.py`` checks this with two gloo processes). It is this module's own autograd
function, as torch's ``torch.distributed.nn.all_gather`` (the same forward and backward) is deprecated in torch
2.13, which warned so on every process of every multi-process run.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def processes_phrase(count: int) -> str:
    """``1 process`` / ``4 processes``."""
    return f"{count} process{'es' if count != 1 else ''}"


def rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


class GatherWithGrad(torch.autograd.Function):
    """All-gather along dim 0; the backward gives each process the sum, over every process, of the gradient of its
    own rows (every process's loss reads the whole gathered batch): an all-reduce of the gradient, then the rows
    this process contributed."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor) -> torch.Tensor:
        ctx.rows = tensor.size(0)
        parts = [torch.empty_like(tensor) for _ in range(world_size())]
        dist.all_gather(parts, tensor)
        return torch.cat(parts, dim=0)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        summed = grad.contiguous().clone()  # all_reduce works in place; the incoming gradient is not ours
        dist.all_reduce(summed)
        start = rank() * ctx.rows
        return summed[start:start + ctx.rows]


def gather_with_grad(tensor: torch.Tensor) -> torch.Tensor:
    """Concatenate ``tensor`` [n, ...] from every process along dim 0 (rank order); gradients flow back
    (:class:`GatherWithGrad`)."""
    if world_size() == 1:
        return tensor
    return GatherWithGrad.apply(tensor.contiguous())


@torch.no_grad()
def gather_no_grad(tensor: torch.Tensor) -> torch.Tensor:
    """Like :func:`gather_with_grad` for tensors that need no gradient (queues, statistics)."""
    if world_size() == 1:
        return tensor
    parts = [torch.empty_like(tensor) for _ in range(world_size())]
    dist.all_gather(parts, tensor.contiguous())
    return torch.cat(parts, dim=0)
