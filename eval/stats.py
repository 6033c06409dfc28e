"""Statistics over seeds: mean, sample standard deviation and a t-distribution confidence interval.

One seed of unsupervised SimCSE-BERT-base moves the 7-task STS average by about 2 points (a 50-seed study found
73.16-76.70, mean 75.11), yet the five papers report single runs (S-SimCSE Table 1 excepted: the top 3 of 7
seeds). :func:`seed_statistics` is what ``python -m eval.results`` prints for a table cell run over several seeds:

    mean = sum(x) / n,    std = sqrt(sum((x - mean)^2) / (n - 1))    (the sample std, ddof = 1),
    95% CI = mean +- t_{0.975, n-1} * std / sqrt(n)                   (Student's t, n - 1 degrees of freedom).

With one seed the standard deviation and the interval are undefined: they are ``None``, never a fake 0.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

CONFIDENCE = 0.95


@dataclass(frozen=True)
class SeedStats:
    """One cell over ``n`` seeds: the mean, and (for n >= 2) the sample std and the confidence interval."""

    n: int
    mean: float
    std: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    confidence: float = CONFIDENCE

    @property
    def has_interval(self) -> bool:
        return self.ci_low is not None and self.ci_high is not None

    def contains(self, value: float | None) -> bool | None:
        """Whether ``value`` (the paper's number) lies inside the interval (bounds included); ``None`` when there
        is no interval (one seed) or no value."""
        if value is None or not self.has_interval:
            return None
        return self.ci_low <= value <= self.ci_high


def t_quantile(probability: float, degrees_of_freedom: int) -> float:
    """Student's t quantile (``scipy.stats.t.ppf``)."""
    from scipy.stats import t

    return float(t.ppf(probability, degrees_of_freedom))


def seed_statistics(values: Sequence[float], confidence: float = CONFIDENCE) -> SeedStats:
    """Mean, sample std (ddof = 1) and the two-sided ``confidence`` t-interval of the mean of ``values``."""
    values = [float(value) for value in values]
    if not values:
        raise ValueError("seed_statistics of no values")
    n, mean = len(values), statistics.fmean(values)
    if n == 1:
        return SeedStats(1, mean, confidence=confidence)
    std = statistics.stdev(values)
    half_width = t_quantile(0.5 + confidence / 2, n - 1) * std / math.sqrt(n)
    return SeedStats(n, mean, std, mean - half_width, mean + half_width, confidence)
