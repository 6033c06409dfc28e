"""ESimCSE (Wu, Gao, Zang, Han, Wang, Hu; COLING 2022): repetition positives + momentum-contrast negatives.

- Positives (Sec. 3.1): view 0 is the sentence, view 1 the same sentence with ``dup_len`` random sub-words
  repeated (``data.augment.LengthExtender``, applied by the collator on the fly, so a sentence gets a fresh
  repetition every time it is seen; the collator is made by ``trainers.methods.esimcse_collator``). Both views go through the online encoder (with dropout) in one pass.
- Negatives (Sec. 3.2): a momentum encoder ``theta_m <- lambda theta_m + (1 - lambda) theta_e`` (Eq. 5, lambda =
  0.995, after every optimizer step, so once per step under gradient accumulation), run without dropout on view 0;
  its embeddings fill a FIFO queue of ``queue_size`` (2.5 x batch = 160), and every anchor also contrasts with the
  queue as it stood before the current batch was enqueued (Eq. 6: the shared :func:`models.losses.info_nce` with the
  queue as ``extra_negatives``). Both networks are below: :class:`MomentumEncoder` and :class:`EmbeddingQueue`.

Decisions (docs/esimcse.md):

- Queue entries and the projector: by default the momentum network is an EMA copy of the whole training-time
  embedding function, encoder *and* MLP (``queue_through_mlp=False``): the paper's theta_m is the moving average of
  "the encoder", whose output the paper defines as [CLS] + MLP. The authors' code instead sends the momentum
  encoder's [CLS] through the *online* MLP (``queue_through_mlp=True``, part of ``--fidelity official_code``).
- Across processes the queue is gathered by default (``gather_queue=True``): every process enqueues the global
  batch, so N processes train exactly the single-process objective of the global batch, as the in-batch negatives
  do. The code keeps a per-process queue (``gather_queue=False``, in ``--fidelity official_code``).
- The momentum encoder is built in ``__init__`` (so checkpoints hold it) and copied from the online encoder in
  :meth:`sync_auxiliary_networks`, after the pretrained weights are loaded (the code's copy started random).

Off-dropout negatives and DCL (SimCSE++) compose with it through the config; with off-dropout the queue joins the
dropout-free negatives.
"""
from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from .base import ContrastiveModel
from .config import ContrastiveConfig
from .distributed import gather_no_grad
from .module_lists import ModelLists, model_lists
from .views import ViewEmbeddings


# ------------------------------------------------------------------------------------ momentum contrast (Sec. 3.2)
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
        #: the parameter pairs of :meth:`_pairs`, and the module lists they were matched from
        self._param_pairs: list[tuple[nn.Parameter, nn.Parameter]] = []
        self._pairs_of: list[ModelLists] = []

    def train(self, mode: bool = True) -> "MomentumEncoder":
        """Always eval: ``model.train()`` must not switch the momentum encoder's dropout on."""
        return super().train(False)

    def _networks(self, encoder: nn.Module, projector: nn.Module | None) -> list[tuple[nn.Module, nn.Module]]:
        """(momentum network, online network) pairs: the encoder, and the projector when the EMA holds one."""
        return [(self.encoder, encoder)] + ([(self.projector, projector)] if self.projector is not None else [])

    def _pairs(self, encoder: nn.Module, projector: nn.Module | None):
        """(momentum, online) parameter pairs and buffer pairs, matched by name. The parameter pairs are kept while
        each network's module lists stay the same (:func:`models.module_lists.model_lists`: a parameter or module
        added or replaced since makes new lists, and so new pairs): Eq. 5 runs every step, and walking both networks
        by name each time was the ESimCSE step's largest host cost after the backbones (``bench/trainer_host.py``).
        Buffers are paired afresh from the listed modules at each call (a flat pass: ``.to()`` replaces buffers
        without touching the lists)."""
        networks = self._networks(encoder, projector)
        lists = [(model_lists(target), model_lists(source)) for target, source in networks]
        kept_lists = [kept for pair in lists for kept in pair]  # held, so that no new list reuses an identity
        if kept_lists != self._pairs_of:  # ModelLists compare by identity
            params = []
            for target, source in networks:
                own, other = dict(target.named_parameters()), dict(source.named_parameters())
                if own.keys() != other.keys():
                    raise RuntimeError("momentum encoder and online encoder have different parameters: "
                                       f"{sorted(own.keys() ^ other.keys())[:5]}")
                if [name for name, _ in target.named_modules()] != [name for name, _ in source.named_modules()]:
                    raise RuntimeError("momentum encoder and online encoder have different modules")
                params += [(own[name], other[name]) for name in own]
            self._param_pairs, self._pairs_of = params, kept_lists
        buffers = [(own, other) for target_lists, source_lists in lists
                   for target, source in zip(target_lists.modules, source_lists.modules)
                   for name, own in target._buffers.items()
                   if own is not None and (other := source._buffers.get(name)) is not None]
        return self._param_pairs, buffers

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
        sources = [s if s.dtype == t.dtype else s.to(t.dtype) for t, s in params]
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

    Once the queue is full (the count never changes again), reads and writes index the ring from the ``ptr`` buffer
    on the device instead of the host's copy: the same entries in the same order, and a step captured as one CUDA
    graph (``trainers/step_graph.py``) advances the ring at every replay, where a host copy would stay at the
    captured step's slots. The host's copy of ``ptr`` then only follows eager steps (nothing reads it while full).
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

    def full(self) -> bool:
        return self.host_state()[1] >= self.size

    def ring_slots(self, first: int, n: int) -> torch.Tensor:
        """The ring's slots ``ptr + first, ..., ptr + first + n - 1`` (mod size), from ``ptr`` on the device."""
        offsets = torch.arange(first, first + n, device=self.ptr.device)
        return torch.remainder(self.ptr + offsets, self.size)

    def entries(self) -> torch.Tensor:
        """The queued embeddings, oldest first: [count, dim] (a copy)."""
        ptr, count = self.host_state()
        if count < self.size:
            return self.embeddings[:count].clone()
        return self.embeddings.index_select(0, self.ring_slots(0, self.size))  # the oldest sits at ptr

    @torch.no_grad()
    def enqueue(self, batch: torch.Tensor) -> None:
        """Append ``batch`` [n, dim] (in order); when full, the oldest entries leave first."""
        batch = batch.detach()[-self.size:].to(self.embeddings.dtype)
        (ptr, count), n = self.host_state(), batch.size(0)
        if count >= self.size:  # full: the ring advances on the device
            self.embeddings.index_copy_(0, self.ring_slots(0, n), batch)
            self.ptr.copy_(torch.remainder(self.ptr + n, self.size))
            self._host_ptr = (ptr + n) % self.size
            self._host_key = self._buffers_key()
            return
        head = min(n, self.size - ptr)  # slots up to the end of the ring, then wrap around to slot 0
        self.embeddings[ptr:ptr + head] = batch[:head]
        self.embeddings[:n - head] = batch[head:]
        self._host_ptr, self._host_count = (ptr + n) % self.size, min(count + n, self.size)
        self.ptr.fill_(self._host_ptr)
        self.count.fill_(self._host_count)
        self._host_key = self._buffers_key()

    def extra_repr(self) -> str:
        return f"size={self.size}, dim={self.embeddings.size(1)}"


class ESimCSEModel(ContrastiveModel):
    """ESimCSE with the BERT-base recipe of the paper (dup_rate 0.32, sub-word repetition, lambda 0.995, queue 160,
    tau 0.05, [CLS] + MLP in training only)."""

    # Every ESimCSE setting's default (models/config.py) is the paper's BERT-base value: nothing to override.

    def __init__(self, config: ContrastiveConfig, encoder=None) -> None:
        super().__init__(config, encoder)
        if config.momentum_contrast and config.queue_size > 0:
            self.momentum_encoder = MomentumEncoder(
                self.encoder, None if config.queue_through_mlp else self.projector)
            self.queue = EmbeddingQueue(config.queue_size, config.hidden_size)
        else:
            self.momentum_encoder = None
            self.queue = None

    # --------------------------------------------------------------------------------------------- auxiliary
    def process_local_buffers(self) -> list[str]:
        """A per-process queue's buffers (``gather_queue=False``: each process enqueues its own keys, as the code's
        queue); a gathered queue is the same on every process."""
        if self.queue is None or self.config.gather_queue:
            return []
        return [f"queue.{name}" for name, _ in self.queue.named_buffers()]

    def process_split_notes(self) -> list[str]:
        """The base's, and a per-process queue (``gather_queue=False``: each process's own keys)."""
        return super().process_split_notes() + (
            [] if self.queue is None or self.config.gather_queue else
            ["the queue of negatives (each process's own: --gather_queue false)"])

    def sync_auxiliary_networks(self) -> None:
        if self.momentum_encoder is not None:
            self.momentum_encoder.copy_from(self.encoder, self.projector)

    def on_optimizer_step(self) -> None:
        if self.momentum_encoder is not None:
            self.momentum_encoder.update(self.encoder, self.projector, self.config.momentum)

    def step_shapes_settled(self) -> bool:
        """Once the queue is full: while it fills (0, 64, 128 of 160 entries in the first three steps of 64) the
        objective's queue input has a new shape every step, so those steps run eagerly and the fast path compiles
        (and on a GPU records) one objective graph at the full queue's shape. The count is the host's copy: no sync."""
        return self.queue is None or not self.training or self.queue.full()

    def step_backbones(self) -> list[tuple[nn.Module, str]]:
        """The online encoder and the momentum encoder's backbone (a no-grad, dropout-free pass over view 0 every
        step; its weights change in place, by the EMA of Eq. 5, so a compiled graph reads the current ones)."""
        momentum = [] if self.momentum_encoder is None else [(self.momentum_encoder, "encoder")]
        return super().step_backbones() + momentum

    @torch.no_grad()
    def momentum_embeddings(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                            token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The momentum encoder's (dropout-free) embeddings of [N, L] inputs, through the momentum MLP or, with
        ``queue_through_mlp``, the online one."""
        pooled = self.encode(input_ids, attention_mask, token_type_ids, encoder=self.momentum_encoder.encoder)
        projector = self.projector if self.config.queue_through_mlp else self.momentum_encoder.projector
        return projector(pooled)

    # --------------------------------------------------------------------------------------------- objective
    def extra_negatives(self) -> torch.Tensor | None:
        if self.queue is None or not self.training:
            return None
        return self.queue.entries()

    def contrastive_loss(self, embeddings: ViewEmbeddings,
                         batch: dict[str, Any]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Eq. 6 over the queue as it stood, then enqueue the momentum embeddings of this batch's sentences."""
        loss, metrics = super().contrastive_loss(embeddings, batch)
        if self.queue is not None and self.training:
            metrics["queue_fill"] = self.queue.count.detach().float()
            token_type_ids = batch.get("token_type_ids")
            keys = self.momentum_embeddings(batch["input_ids"][:, 0], batch["attention_mask"][:, 0],
                                            None if token_type_ids is None else token_type_ids[:, 0])
            self.queue.enqueue(gather_no_grad(keys) if self.config.gather_queue else keys)
        return loss, metrics


__all__ = ["ESimCSEModel", "EmbeddingQueue", "MomentumEncoder"]
