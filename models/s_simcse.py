"""S-SimCSE (Zhang & Lan): sampled sub-networks - the dropout rate itself is random.

SimCSE fixes the dropout rate, so both views are sub-networks of the same expected size. S-SimCSE samples the rate
from a distribution for every dropout operation of every forward pass (Sec. 3.1, "w/o sd": the two views get
independent rates r1, r2) and, on top, separately for each sentence of the batch (Sec. 3.2, Eq. 4, "w/ sd":
sentence-wise dropout masks). ``SSimCSEModel`` is SimCSE with that sampler on:

    p_i ~ pi (per sentence i and dropout operation);  m_i ~ Bernoulli(1 - p_i);  L = InfoNCE(z1, z2)    (Eq. 4)

The sampler is ``models.dropout.sample_dropout_rates`` (and ``rates_from_uniform``, the same distributions from
keyed uniforms); the shared per-row dropout applies it (:class:`models.dropout.RowDropout`, swapped into the backbone
when ``dropout_dist`` is not ``none``, so both views still run in ONE backbone pass, each row with its own rate).
Being a dropout distribution, it is a setting of any method (``--dropout_dist``).

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

from typing import Any, ClassVar

from .base import ContrastiveModel


class SSimCSEModel(ContrastiveModel):
    """SimCSE with sampled dropout rates: uniform [0.05, 0.15] at every dropout operation, per sentence ("w/ sd")."""

    method_defaults: ClassVar[dict[str, Any]] = {"dropout_dist": "uniform", "sentence_wise_dropout": True}


__all__ = ["SSimCSEModel"]
