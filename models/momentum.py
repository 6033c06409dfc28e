"""ESimCSE's momentum contrast (Wu et al., 2022, Sec. 3.2): an EMA copy of the encoder and a queue of its
embeddings. Both are submodules of the model, so their weights and buffers are in every checkpoint and a run
resumed from a Trainer checkpoint continues with exactly the same momentum weights and queue.

- :class:`MomentumEncoder`: ``theta_m <- lambda * theta_m + (1 - lambda) * theta_e`` (Eq. 5) over the encoder (and,
  optionally, the projector); never trained (``requires_grad=False``, so the optimizer never sees it), always in
  eval mode (dropout off, as the paper says: "we turn off dropout when using the momentum encoder").
- :class:`EmbeddingQueue`: a first-in-first-out ring buffer of the last ``size`` embeddings, oldest out first.
"""
from __future__ import annotations

import copy

import torch
from torch import nn


class MomentumEncoder(nn.Module):
    """An EMA copy of ``encoder`` (+ ``projector`` when given).

    Built in the model's ``__init__`` so checkpoints hold it; the model's ``sync_auxiliary_networks`` calls
    :meth:`copy_from` once the pretrained weights are in place (the original code built it before loading, so it
    started from random weights).
    """

    def __init__(self, encoder: nn.Module, projector: nn.Module | None = None) -> None:
        super().__init__()
        self.encoder = copy.deepcopy(encoder)
        self.projector = copy.deepcopy(projector) if projector is not None else None
        self.requires_grad_(False)
        super().train(False)

    def train(self, mode: bool = True) -> "MomentumEncoder":
        """Always eval: ``model.train()`` must not switch the momentum encoder's dropout on."""
        return super().train(False)

    def _pairs(self, encoder: nn.Module, projector: nn.Module | None):
        sources = [encoder] + ([projector] if self.projector is not None else [])
        targets = [self.encoder] + ([self.projector] if self.projector is not None else [])
        params, buffers = [], []
        for source, target in zip(sources, targets):
            own, other = dict(target.named_parameters()), dict(source.named_parameters())
            if own.keys() != other.keys():
                raise RuntimeError("momentum encoder and online encoder have different parameters: "
                                   f"{sorted(own.keys() ^ other.keys())[:5]}")
            params += [(own[name], other[name]) for name in own]
            own_b, other_b = dict(target.named_buffers()), dict(source.named_buffers())
            buffers += [(own_b[name], other_b[name]) for name in own_b if name in other_b]
        return params, buffers

    @torch.no_grad()
    def copy_from(self, encoder: nn.Module, projector: nn.Module | None = None) -> None:
        """theta_m <- theta_e (parameters and buffers)."""
        params, buffers = self._pairs(encoder, projector)
        for target, source in params + buffers:
            target.copy_(source)

    @torch.no_grad()
    def update(self, encoder: nn.Module, projector: nn.Module | None, momentum: float) -> None:
        """Eq. 5: theta_m <- momentum * theta_m + (1 - momentum) * theta_e; buffers are copied."""
        params, buffers = self._pairs(encoder, projector)
        targets = [t for t, _ in params]
        sources = [s.detach().to(t.dtype) for t, s in params]
        torch._foreach_mul_(targets, momentum)
        torch._foreach_add_(targets, sources, alpha=1.0 - momentum)
        for target, source in buffers:
            target.copy_(source)


class EmbeddingQueue(nn.Module):
    """FIFO queue of the last ``size`` embeddings (persistent buffers: ``embeddings`` [size, dim] as a ring,
    ``ptr`` the next slot to write, ``count`` how many slots hold an embedding).

    ``ptr`` and ``count`` are buffers so that checkpoints hold them, but the step reads Python copies of them: reading
    the buffers would synchronise the host with the device at every step. The copies are refreshed from the buffers
    only when something other than :meth:`enqueue` changed those (a checkpoint load, a move to another device),
    which the buffers' identities and in-place version counters (host-side metadata) tell without a sync.
    """

    def __init__(self, size: int, dim: int) -> None:
        super().__init__()
        if size < 1:
            raise ValueError(f"queue size must be >= 1, got {size}")
        self.size = size
        self.register_buffer("embeddings", torch.zeros(size, dim))
        self.register_buffer("ptr", torch.zeros((), dtype=torch.long))
        self.register_buffer("count", torch.zeros((), dtype=torch.long))
        self._host_ptr = self._host_count = 0
        self._host_key = self._buffers_key()

    def _buffers_key(self) -> tuple[int, ...]:
        return id(self.ptr), self.ptr._version, id(self.count), self.count._version

    def host_state(self) -> tuple[int, int]:
        """``(ptr, count)`` as Python ints (reads the buffers only after an outside change; see the class doc)."""
        if self._host_key != self._buffers_key():
            self._host_ptr, self._host_count = int(self.ptr), int(self.count)
            self._host_key = self._buffers_key()
        return self._host_ptr, self._host_count

    def entries(self) -> torch.Tensor:
        """The queued embeddings, oldest first: [count, dim] (a copy)."""
        ptr, count = self.host_state()
        if count < self.size:
            return self.embeddings[:count].clone()
        return torch.cat([self.embeddings[ptr:], self.embeddings[:ptr]])

    @torch.no_grad()
    def enqueue(self, batch: torch.Tensor) -> None:
        """Append ``batch`` [n, dim] (in order); when full, the oldest entries leave first."""
        batch = batch.detach()[-self.size:].to(self.embeddings.dtype)
        (ptr, count), n = self.host_state(), batch.size(0)
        head = min(n, self.size - ptr)  # slots up to the end of the ring, then wrap around to slot 0
        self.embeddings[ptr:ptr + head] = batch[:head]
        self.embeddings[:n - head] = batch[head:]
        self._host_ptr, self._host_count = (ptr + n) % self.size, min(count + n, self.size)
        self.ptr.fill_(self._host_ptr)
        self.count.fill_(self._host_count)
        self._host_key = self._buffers_key()

    def extra_repr(self) -> str:
        return f"size={self.size}, dim={self.embeddings.size(1)}"


__all__ = ["EmbeddingQueue", "MomentumEncoder"]
