"""Method-agnostic parts that every method gets by setting config fields (the base model composes them).

SimCSE++ (Xu et al., 2023) presents its two parts as generic ("can be applied to any contrastive learning based
models"); here they switch on for ANY method - SimCSE, ESimCSE, S-SimCSE, DiffCSE - through the config alone:

- ``off_dropout``: negatives from a dropout-free encoding of the anchors (:func:`models.losses.off_dropout_info_nce`),
  with trade-off ``pos_neg_tradeoff`` (m) in ``off_dropout_form`` ``code`` | ``paper``.
- ``dcl_weight`` > 0: + lambda * dimension-wise contrastive loss (:func:`models.losses.dcl_loss`, Eq. 5/6) with
  ``dcl_temp`` and ``dcl_form``.
- SimCSE++'s ablations: the Table 1 noise study (``noise_study``) and BarlowTwins with artificial padding
  (``barlow_weight``, Table 2).

Two pieces:

:class:`ViewLayout` (used by ``ContrastiveModel.embed_views``) adds rows to the ONE backbone pass: a copy of view 0
with dropout off (SimCSE++), K-1 more dropout samples of every view (the "-Noise" study), and tells the per-row
dropout controller (:mod:`models.dropout`) which rows are which view. ``embed_views`` then returns

    [B, V + off + mean, d] = [regular views 0..V-1][dropout-off copy of view 0, if off_dropout][K-sample means of
    views 0..V-1, if noise_study is pos_minus / neg_minus]

:func:`contrastive_objective` (used by ``ContrastiveModel.compute_loss``) splits that tensor again and composes the
loss. A subclass that overrides ``compute_loss`` calls ``super().compute_loss(views, batch)`` (or this function) with
the tensor ``embed_views`` returned, and the parts follow.
"""
from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass
from typing import ContextManager

import torch

from .dropout import RowDropoutController
from .losses import (barlow_twins_loss, dcl_loss, decoupled_info_nce, info_nce, off_dropout_info_nce,
                     queue_info_nce)

MINUS_NOISE = ("pos_minus", "neg_minus")


@dataclass(frozen=True)
class ViewLayout:
    """How the V input views expand into backbone rows and fold back into embeddings.

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
        """The per-row dropout plan for one pass (a no-op without a controller)."""
        if controller is None:
            if self.off_dropout:
                raise RuntimeError("off_dropout needs the per-row dropout modules (models.dropout.install_row_dropout)")
            return nullcontext()
        return controller.plan(*self.row_plan(batch_size, device), num_groups=self.num_rows)

    def reduce(self, z: torch.Tensor) -> torch.Tensor:
        """[B, num_rows, d] -> [B, V (+1 off) (+V means), d]: the K samples of each view become their mean."""
        if self.is_identity:
            return z
        v = self.num_views
        parts = [z[:, : v + int(self.off_dropout)]]
        if self.samples > 1:
            extra = z[:, v + int(self.off_dropout):].unflatten(1, (v, self.samples - 1))
            parts.append((z[:, :v] + extra.sum(2)) / self.samples)
        return torch.cat(parts, dim=1)


@dataclass
class SplitViews:
    """``embed_views``' output split back: regular views [N, V, d], the dropout-off view [N, d], K-sample means
    [N, V, d]."""

    regular: torch.Tensor
    off: torch.Tensor | None = None
    means: torch.Tensor | None = None


def split_views(config, views: torch.Tensor) -> SplitViews:
    """Undo :meth:`ViewLayout.reduce`'s concatenation (the number of regular views is inferred)."""
    off, minus = int(bool(config.off_dropout)), config.noise_study in MINUS_NOISE
    extra = views.size(1) - off
    num_views = extra // 2 if minus else extra
    if num_views < 2 or (minus and extra % 2):
        raise ValueError(f"views of shape {tuple(views.shape)} do not match the config's layout "
                         f"(off_dropout={bool(off)}, noise_study={config.noise_study!r})")
    return SplitViews(regular=views[:, :num_views],
                      off=views[:, num_views] if off else None,
                      means=views[:, num_views + off:] if minus else None)


def contrastive_objective(
    config, views: torch.Tensor, extra_negatives: torch.Tensor | None = None
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The contrastive loss every method shares, composed from the config.

    Args:
        config: a ``ContrastiveConfig``.
        views: the (gathered) output of ``embed_views``, [N, V', d] in :class:`ViewLayout`'s order. View 0 anchors,
            view 1 positives, view 2 (supervised SimCSE) hard negatives.
        extra_negatives: [M, d] embeddings every anchor also contrasts with (ESimCSE's momentum queue), or None.

    Returns ``(loss, metrics)``; metrics always hold ``contrastive_loss``, plus ``dcl_loss`` / ``barlow_loss`` when
    those terms are on.
    """
    split = split_views(config, views)
    z1, z2 = split.regular[:, 0], split.regular[:, 1]
    hard = split.regular[:, 2] if split.regular.size(1) > 2 else None
    tau = config.temperature
    if hard is not None and (config.off_dropout or config.noise_study != "none" or extra_negatives is not None):
        raise ValueError("hard negatives (a third view) combine only with the plain InfoNCE objective")

    if config.noise_study != "none":
        contrastive = noise_study_loss(config, z1, z2, split.means, extra_negatives)
    elif config.off_dropout:
        contrastive = off_dropout_info_nce(z1, z2, split.off, tau, config.pos_neg_tradeoff,
                                           form=config.off_dropout_form, queue=extra_negatives)
    elif extra_negatives is not None:
        contrastive = queue_info_nce(z1, z2, extra_negatives, tau)
    else:
        contrastive = info_nce(z1, z2, tau, hard, config.hard_negative_weight)

    loss, metrics = contrastive, {"contrastive_loss": contrastive.detach()}
    if config.dcl_weight > 0:
        dcl = dcl_loss(z1, z2, config.dcl_temp, form=config.dcl_form)
        loss = loss + config.dcl_weight * dcl
        metrics["dcl_loss"] = dcl.detach()
    if config.barlow_weight > 0:
        padding = torch.randn(config.barlow_pad, z1.size(-1), device=z1.device) if config.barlow_pad else None
        barlow = barlow_twins_loss(z1, z2, config.barlow_lambda, padding)
        loss = loss + config.barlow_weight * barlow
        metrics["barlow_loss"] = barlow.detach()
    return loss, metrics


def noise_study_loss(config, z1: torch.Tensor, z2: torch.Tensor, means: torch.Tensor | None,
                     extra_negatives: torch.Tensor | None) -> torch.Tensor:
    """SimCSE++ Table 1: more (+, Gaussian of variance ``noise_variance`` added to the embeddings) or less
    (-, the mean of ``noise_samples`` dropout samples) noise in the positive pair only or the negatives only."""
    study, tau = config.noise_study, config.temperature
    if study in ("pos_plus", "neg_plus"):
        std = math.sqrt(config.noise_variance)
        noisy1, noisy2 = z1 + std * torch.randn_like(z1), z2 + std * torch.randn_like(z2)
        if study == "pos_plus":
            return decoupled_info_nce(noisy1, noisy2, z1, z2, tau, extra_negatives=extra_negatives)
        return decoupled_info_nce(z1, z2, noisy1, noisy2, tau, extra_negatives=extra_negatives)
    mean1, mean2 = means[:, 0], means[:, 1]
    if study == "pos_minus":
        return decoupled_info_nce(mean1, mean2, z1, z2, tau, extra_negatives=extra_negatives)
    return decoupled_info_nce(z1, z2, mean1, mean2, tau, extra_negatives=extra_negatives)


__all__ = ["SplitViews", "ViewLayout", "contrastive_objective", "noise_study_loss", "split_views"]
