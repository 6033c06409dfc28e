"""Every objective as a pure function (tensors in, scalar out, no hidden state, no argument parsing), and their
composition, the one objective every method trains (:func:`contrastive_objective`).

- SimCSE's InfoNCE (Gao et al., 2021, Eq. 1 / Eq. 5: :func:`info_nce`), shared by every method; ESimCSE's queue
  joins its negatives (Wu et al., 2022, Eq. 6, ``extra_negatives``).
- SimCSE++'s parts (Xu et al., 2023), which its paper presents as generic, so the config switches them on for any
  method (``models/simcse_pp.py`` is the method with them on): off-dropout negatives (Sec. 3.2, Eq. 3:
  :func:`off_dropout_info_nce`), DCL (Sec. 4.3, Eq. 5: :func:`dcl_loss`), and the ablations, the Table 1 noise study
  (:func:`noise_study_loss`) and BarlowTwins with artificial padding (Eq. 4, Table 2: :func:`barlow_twins_loss`).

Every function takes *raw* (unnormalised) embeddings of shape [N, d] and computes cosine similarity as
``normalize(a) @ normalize(b).T`` (never a broadcast [N, N, d] tensor). Under data parallelism the caller passes
the *gathered* global batch (see ``models.distributed.gather_with_grad``), so the loss is the global-batch loss.
Similarities are computed in float32 even under bf16/fp16 autocast.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .views import ViewEmbeddings


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


# ------------------------------------------------------------------ the composition every method trains
def contrastive_objective(
    config, embeddings: ViewEmbeddings, extra_negatives: torch.Tensor | None = None
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The objective every method trains, composed from the config: SimCSE's InfoNCE (``models.losses.info_nce``;
    with ESimCSE's queue as ``extra_negatives``, Eq. 6), or SimCSE++'s off-dropout loss / Table 1 noise study in its
    place, plus SimCSE++'s DCL and the Table 2 BarlowTwins term when their weights are > 0.

    Args:
        config: a ``ContrastiveConfig``.
        embeddings: the (gathered) :class:`models.views.ViewEmbeddings` of the step. View 0 anchors, view 1
            positives, view 2 (supervised SimCSE) hard negatives.
        extra_negatives: [M, d] embeddings every anchor also contrasts with (ESimCSE's momentum queue), or None.

    Returns ``(loss, metrics)``; metrics always hold ``contrastive_loss``, plus ``dcl_loss`` / ``barlow_loss`` when
    those terms are on.
    """
    z1, z2 = embeddings.views[:, 0], embeddings.views[:, 1]
    hard = embeddings.views[:, 2] if embeddings.num_views > 2 else None
    temperature = config.temperature
    if hard is not None and (config.off_dropout or config.noise_study != "none" or extra_negatives is not None):
        raise ValueError("hard negatives (a third view) combine only with the plain InfoNCE objective")

    if config.noise_study != "none":
        contrastive = noise_study_loss(config, z1, z2, embeddings.sample_means, extra_negatives)
    elif config.off_dropout:
        contrastive = off_dropout_info_nce(z1, z2, embeddings.off_dropout, temperature, config.pos_neg_tradeoff,
                                           form=config.off_dropout_form, queue=extra_negatives)
    elif extra_negatives is not None:
        contrastive = info_nce(z1, z2, temperature, extra_negatives=extra_negatives)
    else:
        contrastive = info_nce(z1, z2, temperature, hard, config.hard_negative_weight)

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


# ------------------------------------------------------------------ SimCSE++ (Xu et al., 2023)
def noise_study_loss(config, z1: torch.Tensor, z2: torch.Tensor, means: torch.Tensor | None,
                     extra_negatives: torch.Tensor | None) -> torch.Tensor:
    """SimCSE++ Table 1: more (+, Gaussian of variance ``noise_variance`` added to the embeddings) or less
    (-, the mean of ``noise_samples`` dropout samples) noise in the positive pair only or the negatives only."""
    study, temperature = config.noise_study, config.temperature
    if study in ("pos_plus", "neg_plus"):
        std = math.sqrt(config.noise_variance)
        noisy1, noisy2 = z1 + std * torch.randn_like(z1), z2 + std * torch.randn_like(z2)
        if study == "pos_plus":
            return decoupled_info_nce(noisy1, noisy2, z1, z2, temperature, extra_negatives=extra_negatives)
        return decoupled_info_nce(z1, z2, noisy1, noisy2, temperature, extra_negatives=extra_negatives)
    mean1, mean2 = means[:, 0], means[:, 1]
    if study == "pos_minus":
        return decoupled_info_nce(mean1, mean2, z1, z2, temperature, extra_negatives=extra_negatives)
    return decoupled_info_nce(z1, z2, mean1, mean2, temperature, extra_negatives=extra_negatives)


def decoupled_info_nce(
    pos_a: torch.Tensor,
    pos_b: torch.Tensor,
    neg_a: torch.Tensor,
    neg_b: torch.Tensor,
    temperature: float,
    m: float = 1.0,
    form: str = "code",
    extra_negatives: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""InfoNCE whose positive and negative similarities come from different embeddings (SimCSE++, Xu et al.,
    2023, Eq. 2 / Eq. 3 and the Table 1 noise study), mean over the batch.

    With :math:`s^+_i = \mathrm{sim}(a_i, b_i)/\tau` from ``pos_a``/``pos_b`` and
    :math:`s^-_{ij} = \mathrm{sim}(a'_i, b'_j)/\tau` (:math:`j \ne i`) from ``neg_a``/``neg_b``, plus
    :math:`s^-_{im} = \mathrm{sim}(a'_i, q_m)/\tau` for ``extra_negatives`` :math:`q_m` (a momentum queue):

    - ``form="paper"`` (Eq. 3 as printed, ``m`` weighs the negative sum):

      .. math:: \ell_i = -\log \frac{e^{s^+_i}}{e^{s^+_i} + m \sum_{j \ne i} e^{s^-_{ij}}}

    - ``form="code"`` (what the authors ran: ``Jiahao004/SimCSE-plus-plus``, ``simcse/models_re.py``,
      ``cl_forward``: ``dropout_norm = pos_ratio * sim(z1, z2)``, ``loss = -dropout_norm +
      logsumexp([sim(z0, z0) + eye * log(1e-45), dropout_norm])``): ``m`` scales the positive logit everywhere,
      numerator and normaliser, so the loss is plain cross-entropy whose positive logit is :math:`m s^+_i`:

      .. math:: \ell_i = -m\, s^+_i + \log\Big(e^{m s^+_i} + \sum_{j \ne i} e^{s^-_{ij}}\Big)

      Its gradient w.r.t. :math:`s^+_i` is :math:`-m (1 - p'_i) \le 0` (:math:`p'_i` the softmax share of the
      positive logit): it always pulls the positive pair together. The code masks the diagonal with
      :math:`\log(10^{-45}) \approx -103.3` where this uses :math:`-\infty`; with :math:`|s| \le 1/\tau` the two
      differ by less than :math:`e^{-80}` relative.

    Both are SimCSE's Eq. 1 when ``m = 1`` and the two pairs of inputs are the same tensors.
    """
    if form not in ("code", "paper"):
        raise ValueError(f"form must be 'code' or 'paper', got {form!r}")
    positive = (F.normalize(upcast(pos_a), dim=-1) * F.normalize(upcast(pos_b), dim=-1)).sum(-1) / temperature
    negative = cosine_logits(neg_a, neg_b, temperature)
    eye = torch.eye(negative.size(0), negative.size(1), dtype=torch.bool, device=negative.device)
    negative = negative.masked_fill(eye, float("-inf"))
    if extra_negatives is not None and extra_negatives.numel():
        negative = torch.cat([negative, cosine_logits(neg_a, extra_negatives.detach(), temperature)], dim=1)
    if form == "paper":
        negative = negative + math.log(m)
    else:
        positive = m * positive
    normaliser = torch.logsumexp(torch.cat([positive[:, None], negative], dim=1), dim=1)
    return (normaliser - positive).mean()


def off_dropout_info_nce(
    z1: torch.Tensor,
    z2: torch.Tensor,
    z_off: torch.Tensor,
    temperature: float,
    m: float,
    form: str = "code",
    queue: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""SimCSE++ off-dropout sampling (Xu et al., 2023, Sec. 3.2): the positive pair keeps dropout, the negatives
    are the anchors encoded with dropout *off* (they keep their gradient):

    - ``form="paper"`` (Eq. 3): :math:`\ell_i = -\log \frac{e^{s(z^1_i, z^2_i)}}{e^{s(z^1_i, z^2_i)} +
      m \sum_{j \ne i} e^{s(z_i, z_j)}}`
    - ``form="code"`` (default; what the authors ran, see :func:`decoupled_info_nce`): cross-entropy whose
      positive logit is :math:`m\, s(z^1_i, z^2_i)`, i.e. :math:`\ell_i = -m\, s(z^1_i, z^2_i) +
      \log\big(e^{m\, s(z^1_i, z^2_i)} + \sum_{j \ne i} e^{s(z_i, z_j)}\big)`

    with :math:`s = \cos/\tau` and :math:`z_i` = ``z_off[i]``. The default is the code's form because it is what
    produced the paper's tables. Table 5 (STS-B dev 83.8 at m = 0.9 -> 68.6 at m = 0.5) also fits it better: in
    the printed form m only adds :math:`\log m` to every negative logit (-0.69 at m = 0.5, a mild shift), while
    the code form multiplies the positive logit by m (at :math:`\tau = 0.05` it is at most 20; m = 0.5 caps it at
    10), halving the margin the positive can reach over the negatives. Optional ``queue`` [M, d] entries join the negatives,
    anchored on ``z_off`` too (they are dropout-free as well: ESimCSE's momentum encoder runs without dropout).
    """
    return decoupled_info_nce(z1, z2, z_off, z_off, temperature, m=m, form=form, extra_negatives=queue)


def dcl_loss(
    z1: torch.Tensor, z2: torch.Tensor, temperature: float, form: str = "code", eps: float = 1e-5
) -> torch.Tensor:
    r"""SimCSE++ dimension-wise contrastive learning (Xu et al., 2023, Eq. 5): each of the D dimensions of view 1
    must be more similar to the same dimension of view 2 than to any other dimension, across the batch.

    Every column is standardised over the batch, :math:`\tilde z_{i,c} = (z_{i,c} - \bar z_c)/\sqrt{\sigma_c^2 +
    \epsilon}`, and with :math:`s_{cd} = \sum_i \tilde z^1_{i,c} \tilde z^2_{i,d} / \tau_{DCL}`:

    - ``form="code"`` (default; the authors' BatchNorm1d(affine=False) version): biased variance
      :math:`\sigma_c^2 = \frac1N \sum_i (z_{i,c} - \bar z_c)^2`, the matrix divided by the batch size and the
      loss averaged over dimensions:

      .. math:: \ell_{DCL} = \frac1D \sum_{c=1}^D \Big[-\frac{s_{cc}}{N} + \log \sum_{d=1}^D e^{s_{cd}/N}\Big]

    - ``form="paper"`` (Eq. 5 as printed): unbiased variance (:math:`\frac1{N-1}`), no :math:`1/N`, a sum over
      dimensions:

      .. math:: \ell_{DCL} = \sum_{c=1}^D \Big[-s_{cc} + \log \sum_{d=1}^D e^{s_{cd}}\Big]

    :math:`\tau_{DCL} = 5` and :math:`\lambda = 0.1` were tuned on the code's scale, hence that default. Under
    data parallelism pass the *gathered* views: the statistics and the 1/N are then over the global batch (the
    original code divided by the local batch size).
    """
    if form not in ("code", "paper"):
        raise ValueError(f"form must be 'code' or 'paper', got {form!r}")
    z1, z2 = upcast(z1), upcast(z2)
    unbiased = form == "paper"

    def standardise(z: torch.Tensor) -> torch.Tensor:
        return (z - z.mean(0)) / torch.sqrt(z.var(0, unbiased=unbiased) + eps)

    similarity = standardise(z1).T @ standardise(z2) / temperature
    if form == "code":
        similarity = similarity / z1.size(0)
    labels = torch.arange(similarity.size(0), device=similarity.device)
    return F.cross_entropy(similarity, labels, reduction="mean" if form == "code" else "sum")


def barlow_twins_loss(
    z1: torch.Tensor, z2: torch.Tensor, off_diagonal_weight: float, padding: torch.Tensor | None = None
) -> torch.Tensor:
    r"""BarlowTwins as SimCSE++ Eq. 4 writes it (Xu et al., 2023, Sec. 4.1; Zbontar et al., 2021), with the
    Table 2 option of padding both views with the same M artificial rows (``padding`` [M, d], e.g. standard
    Gaussian samples) to lift the rank bottleneck of the D x D cross-correlation matrix:

    .. math:: \ell_{BT} = \sum_c (1 - C_{cc})^2 + \lambda_{BT} \sum_c \sum_{d \ne c} C_{cd}^2, \qquad
              C_{cd} = \frac{\sum_i z^1_{i,c} z^2_{i,d}}{\sqrt{\sum_i (z^1_{i,c})^2}\sqrt{\sum_i (z^2_{i,d})^2}}

    The printed Eq. 4 has a minus sign before the first sum; minimising that would push :math:`C_{cc}` away from 1,
    so this follows BarlowTwins' own sign.
    """
    z1, z2 = upcast(z1), upcast(z2)
    if padding is not None and padding.numel():
        padding = upcast(padding).to(z1.device)
        z1, z2 = torch.cat([z1, padding]), torch.cat([z2, padding])
    correlation = F.normalize(z1, dim=0).T @ F.normalize(z2, dim=0)
    diagonal = torch.diagonal(correlation)
    off_diagonal = correlation.pow(2).sum() - diagonal.pow(2).sum()
    return (1 - diagonal).pow(2).sum() + off_diagonal_weight * off_diagonal


__all__ = ["barlow_twins_loss", "contrastive_objective", "cosine_logits", "dcl_loss", "decoupled_info_nce", "info_nce",
           "noise_study_loss", "off_dropout_info_nce", "upcast"]
