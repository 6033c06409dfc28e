"""The rows of the ONE backbone pass, and the named embeddings that come out of it.

A training step encodes all views of all sentences in a single backbone call (SimCSE Sec. 3: the two dropout views
of a sentence are two rows of one batch). Config-driven extra rows ride in the same pass:

- SimCSE++ (``off_dropout``): a copy of view 0 with dropout off (its negatives, Sec. 3.2);
- SimCSE++'s noise study, "-" variants (``noise_study`` ``pos_minus`` / ``neg_minus``, Table 1): ``samples - 1``
  further dropout samples of every view, averaged.

:class:`ViewLayout` expands the ``[B, V, L]`` input into those rows, tells the per-row dropout controller which row
is which view, and folds the output back into a :class:`ViewEmbeddings`: named fields, so nothing downstream has to
guess the layout from a tensor's width.
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, fields, replace
from typing import Callable, ContextManager

import torch

from .dropout import RowDropoutController

MINUS_NOISE = ("pos_minus", "neg_minus")


@dataclass
class ViewEmbeddings:
    """What :meth:`models.base.ContrastiveModel.embed_views` returns.

    Attributes:
        views: projected regular views [B, V, d]: view 0 anchors, view 1 positives, view 2 (supervised SimCSE) hard
            negatives.
        pooled: the same views before the projector [B, V, h] (DiffCSE conditions on it with
            ``condition_before_projector``).
        off_dropout: the dropout-off encoding of view 0 [B, d] (SimCSE++), else ``None``.
        sample_means: the mean of ``noise_samples`` dropout samples of every view [B, V, d] (SimCSE++ Table 1, "-"
            noise), else ``None``.
    """

    views: torch.Tensor
    pooled: torch.Tensor | None = None
    off_dropout: torch.Tensor | None = None
    sample_means: torch.Tensor | None = None

    @property
    def num_views(self) -> int:
        return self.views.size(1)

    def map(self, function: Callable[[torch.Tensor], torch.Tensor]) -> "ViewEmbeddings":
        """The same structure with ``function`` applied to every tensor (e.g. the all-gather across processes)."""
        return replace(self, **{f.name: function(getattr(self, f.name)) for f in fields(self)
                                if getattr(self, f.name) is not None})


@dataclass(frozen=True)
class ViewLayout:
    """How the V input views expand into backbone rows and fold back into :class:`ViewEmbeddings`.

    Expanded views (dimension 1 of the backbone input): ``[v_0 .. v_{V-1}]``, then ``v_0`` with dropout off (if
    ``off_dropout``), then ``samples - 1`` further copies of every view (``[v_0 x (K-1), v_1 x (K-1), ...]``).
    """

    num_views: int
    off_dropout: bool = False
    samples: int = 1

    @classmethod
    def from_config(cls, config, num_views: int) -> "ViewLayout":
        samples = config.noise_samples if config.noise_study in MINUS_NOISE else 1
        return cls(num_views=num_views, off_dropout=bool(config.off_dropout), samples=samples)

    @property
    def is_identity(self) -> bool:
        return not self.off_dropout and self.samples == 1

    @property
    def num_rows(self) -> int:
        """Expanded views per sentence."""
        return self.num_views * self.samples + int(self.off_dropout)

    def expand(self, t: torch.Tensor | None) -> torch.Tensor | None:
        """[B, V, L] -> [B, num_rows, L]."""
        if t is None or self.is_identity:
            return t
        parts = [t]
        if self.off_dropout:
            parts.append(t[:, :1])
        if self.samples > 1:
            parts.append(t.repeat_interleave(self.samples - 1, dim=1))
        return torch.cat(parts, dim=1)

    def row_plan(self, batch_size: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
        """For the flattened [B * num_rows] rows: the forward pass (expanded view index) of each row, and which
        rows run with dropout off (``None`` when none do; decided from the config, so no device sync)."""
        views = torch.arange(self.num_rows, device=device).repeat(batch_size)
        off = views == self.num_views if self.off_dropout else None
        return views, off

    def dropout_plan(self, controller: RowDropoutController | None, batch_size: int,
                     device: torch.device) -> ContextManager:
        """The per-row dropout plan for one pass over ``batch_size`` sentences (a no-op without a controller)."""
        if controller is None:
            if self.off_dropout:
                raise RuntimeError("off_dropout needs the per-row dropout modules (models.dropout.install_row_dropout)")
            return nullcontext()
        return controller.plan(*self.row_plan(batch_size, device), num_groups=self.num_rows)

    def fold(self, projected: torch.Tensor, pooled: torch.Tensor) -> ViewEmbeddings:
        """[B, num_rows, d] projected and [B, num_rows, h] pooled rows -> :class:`ViewEmbeddings` (the K samples of
        each view become their mean)."""
        v = self.num_views
        off = projected[:, v] if self.off_dropout else None
        means = None
        if self.samples > 1:
            extra = projected[:, v + int(self.off_dropout):].unflatten(1, (v, self.samples - 1))
            means = (projected[:, :v] + extra.sum(2)) / self.samples
        return ViewEmbeddings(views=projected[:, :v], pooled=pooled[:, :v], off_dropout=off, sample_means=means)


__all__ = ["MINUS_NOISE", "ViewEmbeddings", "ViewLayout"]
