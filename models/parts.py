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
import torch

from .losses import (barlow_twins_loss, dcl_loss, decoupled_info_nce, info_nce, off_dropout_info_nce,
                     queue_info_nce)
from .views import ViewEmbeddings

def contrastive_objective(
    config, embeddings: ViewEmbeddings, extra_negatives: torch.Tensor | None = None
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
    z1, z2 = embeddings.views[:, 0], embeddings.views[:, 1]
    hard = embeddings.views[:, 2] if embeddings.num_views > 2 else None
    tau = config.temperature
    if hard is not None and (config.off_dropout or config.noise_study != "none" or extra_negatives is not None):
        raise ValueError("hard negatives (a third view) combine only with the plain InfoNCE objective")

    if config.noise_study != "none":
        contrastive = noise_study_loss(config, z1, z2, embeddings.sample_means, extra_negatives)
    elif config.off_dropout:
        contrastive = off_dropout_info_nce(z1, z2, embeddings.off_dropout, tau, config.pos_neg_tradeoff,
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


__all__ = ["contrastive_objective", "noise_study_loss"]
