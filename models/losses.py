"""Contrastive objectives as pure functions: tensors in, scalar out, no hidden state, no argument parsing.

Every function takes *raw* (unnormalised) embeddings of shape [N, d] and computes cosine similarity as
``normalize(a) @ normalize(b).T`` (never a broadcast [N, N, d] tensor). Under data parallelism the caller passes
the *gathered* global batch (see ``models.distributed.gather_with_grad``), so the loss is the global-batch loss.
Similarities are computed in float32 even under bf16/fp16 autocast.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def upcast(t: torch.Tensor) -> torch.Tensor:
    """bf16/fp16 -> float32 (float64 stays float64): similarities and softmax are computed in full precision."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


def cosine_logits(a: torch.Tensor, b: torch.Tensor, temperature: float) -> torch.Tensor:
    """``cos(a_i, b_j) / temperature`` for all i, j: [N, d] x [M, d] -> [N, M] (at least float32)."""
    a = F.normalize(upcast(a), dim=-1)
    b = F.normalize(upcast(b), dim=-1)
    return a @ b.T / temperature


def info_nce(
    z1: torch.Tensor,
    z2: torch.Tensor,
    temperature: float,
    hard_negatives: torch.Tensor | None = None,
    hard_negative_weight: float = 0.0,
    extra_negatives: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""In-batch InfoNCE of SimCSE (Gao et al., 2021), mean over the batch; the one InfoNCE every method shares.

    Unsupervised, Eq. 1, for anchors :math:`h_i = z1_i` and positives :math:`h_i^+ = z2_i`:

    .. math:: \ell_i = -\log \frac{e^{\mathrm{sim}(h_i, h_i^+)/\tau}}{\sum_{j=1}^N e^{\mathrm{sim}(h_i, h_j^+)/\tau}}

    Supervised, Eq. 5, with hard negatives :math:`h_j^- =` ``hard_negatives[j]`` joining the denominator:

    .. math:: \ell_i = -\log \frac{e^{\mathrm{sim}(h_i, h_i^+)/\tau}}
              {\sum_j \left(e^{\mathrm{sim}(h_i, h_j^+)/\tau} + \alpha^{[i=j]} e^{\mathrm{sim}(h_i, h_j^-)/\tau}\right)}

    where the anchor's *own* hard negative is weighted by :math:`\alpha = e^{w}`, ``w = hard_negative_weight``
    (SimCSE Appendix, Table D.1: the code adds ``w`` to that logit; ``w = 0`` is the paper's default).

    ESimCSE, Eq. 6 (Wu et al., 2022), with ``extra_negatives`` :math:`h_m` (its momentum queue, no gradient) joining
    every anchor's denominator:

    .. math:: \ell_i = -\log \frac{e^{\mathrm{sim}(h_i, h_i^+)/\tau}}
              {\sum_{j=1}^N e^{\mathrm{sim}(h_i, h_j^+)/\tau} + \sum_{m=1}^M e^{\mathrm{sim}(h_i, h_m)/\tau}}

    Args:
        z1: anchors, [N, d]. z2: positives, [N, d] (row i is the positive of anchor i).
        temperature: :math:`\tau` (0.05 in the paper).
        hard_negatives: optional [N, d]; row i is anchor i's hard negative (NLI contradiction).
        hard_negative_weight: ``w`` above.
        extra_negatives: optional [M, d] (detached here); ``None`` or M = 0 is Eq. 1.
    """
    logits = cosine_logits(z1, z2, temperature)
    if hard_negatives is not None:
        hard_logits = cosine_logits(z1, hard_negatives, temperature)
        hard_logits = hard_logits + hard_negative_weight * torch.eye(
            hard_logits.size(0), hard_logits.size(1), device=hard_logits.device)
        logits = torch.cat([logits, hard_logits], dim=1)
    if extra_negatives is not None and extra_negatives.numel():
        logits = torch.cat([logits, cosine_logits(z1, extra_negatives.detach(), temperature)], dim=1)
    labels = torch.arange(logits.size(0), device=logits.device)
    return F.cross_entropy(logits, labels)


__all__ = ["cosine_logits", "info_nce", "upcast"]
