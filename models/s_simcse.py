"""S-SimCSE (Zhang & Lan): sampled sub-networks - the dropout rate itself is random.

SimCSE fixes the dropout rate, so both views are sub-networks of the same expected size. S-SimCSE samples the rate
from a distribution for every dropout operation of every forward pass (Sec. 3.1, "w/o sd": the two views get
independent rates r1, r2) and, on top, separately for each sentence of the batch (Sec. 3.2, Eq. 4, "w/ sd":
sentence-wise dropout masks). This module is that novelty, the rate sampler
(:func:`sample_dropout_rates`); the mechanism that applies a rate per row is the shared per-row dropout
(:class:`models.dropout.RowDropout`, swapped into the backbone when ``dropout_dist`` is not ``none``, so both views
still run in ONE backbone pass, each row with its own rate), and ``SSimCSEModel`` (``models/simcse.py``) is SimCSE
with this sampler on.

The distribution (``--dropout_dist``, ``--dropout_low``, ``--dropout_high``): the paper names only "e.g. uniform
distribution" and no range, and no code was released. Default: uniform on [0.05, 0.15]. Its mean is 0.1, the rate
SimCSE found best (Gao et al., 2021, Sec. 3 / Table 3: every other rate it tried underperforms the default p = 0.1),
so the expected sub-network size stays SimCSE's and no draw strays far (+-0.05) from the tuned rate, while the two
views' sub-network scales differ, which is the point of the method. ``normal`` (mean
(low+high)/2, std (high-low)/4, clipped to the range) is the alternative. The rate applies to every dropout of the
backbone (embeddings, attention probabilities, both residual-branch dropouts). Default variant: "w/ sd", the
paper's best for BERT-base/large and RoBERTa-base (Table 1).
"""
from __future__ import annotations

import torch

DROPOUT_DISTRIBUTIONS = ("none", "uniform", "normal")


def sample_dropout_rates(distribution: str, low: float, high: float, count: int,
                         device: torch.device | str) -> torch.Tensor:
    """``count`` dropout rates from ``distribution`` (global torch generator of ``device``, which the Trainer
    checkpoints, so a resumed run draws the same rates).

    ``uniform``: U[low, high]. ``normal``: mean (low + high) / 2, standard deviation (high - low) / 4, clipped to
    [low, high].
    """
    if distribution == "uniform":
        return low + (high - low) * torch.rand(count, device=device)
    if distribution == "normal":
        mean, std = (low + high) / 2, (high - low) / 4
        return (mean + std * torch.randn(count, device=device)).clamp(low, high)
    raise ValueError(f"dropout distribution {distribution!r} has no rates to sample; choose uniform or normal")


def rates_from_uniform(distribution: str, low: float, high: float, uniform: torch.Tensor) -> torch.Tensor:
    """The same distributions as :func:`sample_dropout_rates`, from given uniforms in (0, 1) by the inverse CDF
    (``--dropout_masks row_seeded``: the uniforms are keyed by sentence, ``models.row_seeded``). float32 rates."""
    if distribution == "uniform":
        rates = low + (high - low) * uniform
    elif distribution == "normal":
        mean, std = (low + high) / 2, (high - low) / 4
        rates = (mean + std * torch.special.ndtri(uniform)).clamp(low, high)
    else:
        raise ValueError(f"dropout distribution {distribution!r} has no rates to sample; choose uniform or normal")
    return rates.float()


__all__ = ["DROPOUT_DISTRIBUTIONS", "rates_from_uniform", "sample_dropout_rates"]
