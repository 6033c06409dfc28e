"""Figures for the analyses in :mod:`eval.analysis`, for training runs (:mod:`eval.curves`) and for the spread over
seeds (matplotlib, Agg canvas, PNG).

Each function takes plain numbers and a path, draws one figure and writes it; none touches pyplot's global
state (figures are :class:`matplotlib.figure.Figure` objects rendered by the Agg canvas), so they are safe in
headless runs and in tests.
"""
from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

if TYPE_CHECKING:
    from eval.curves import Curves

PathLike = str | os.PathLike[str]


def _save(fig: Figure, path: PathLike, dpi: int = 110) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi, format="png")
    return path


def plot_align_uniform_scatter(points: Mapping[str, tuple[float, float]], path: PathLike,
                               title: str = "alignment vs. uniformity (lower is better)") -> Path:
    """SimCSE Fig. 2/3-style scatter: x = uniformity, y = alignment, one labelled point per model.

    Args:
        points: model name -> ``(alignment, uniformity)``.
        path: PNG file to write.
    """
    fig = Figure(figsize=(5.0, 4.0))
    ax = fig.add_subplot()
    for name, (align, uniform) in points.items():
        ax.scatter([uniform], [align], s=40)
        ax.annotate(name, (uniform, align), textcoords="offset points", xytext=(5, 4), fontsize=8)
    ax.set_xlabel(r"$\ell_{uniform}$")
    ax.set_ylabel(r"$\ell_{align}$")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.margins(0.2)
    return _save(fig, path)


def plot_distance_histograms(positive_sq: np.ndarray, random_sq: np.ndarray, path: PathLike,
                             title: str) -> Path:
    """Squared distances of positive pairs vs. random pairs of normalised embeddings (Wang & Isola, 2020)."""
    fig = Figure(figsize=(5.5, 3.6))
    ax = fig.add_subplot()
    bins = np.linspace(0.0, 4.0, 41)
    ax.hist(random_sq, bins=bins, density=True, alpha=0.55, label=f"random pairs (n={len(random_sq)})")
    ax.hist(positive_sq, bins=bins, density=True, alpha=0.55, label=f"positive pairs (n={len(positive_sq)})")
    ax.set_xlabel(r"$\|f(x) - f(y)\|^2$")
    ax.set_ylabel("density")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_cosine_by_bucket(groups: Sequence[np.ndarray], labels: Sequence[str], path: PathLike,
                          title: str = "STS-B test: cosine similarity by human rating") -> Path:
    """DiffCSE Fig. 2: one horizontal violin (with the mean marked) per gold-score bucket."""
    fig = Figure(figsize=(6.0, 3.8))
    ax = fig.add_subplot()
    positions = np.arange(1, len(groups) + 1)
    filled = [i for i, g in enumerate(groups) if len(g) > 1]
    if filled:
        ax.violinplot([groups[i] for i in filled], positions=positions[filled], orientation="horizontal",
                      showmeans=True, showextrema=False, widths=0.8)
    ax.set_yticks(positions, [f"{label}\n(n={len(g)})" for label, g in zip(labels, groups)], fontsize=8)
    ax.set_xlabel("cosine similarity")
    ax.set_ylabel("gold score")
    ax.set_title(title, fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    return _save(fig, path)


def plot_recall_curve(ranks: Mapping[str, np.ndarray], path: PathLike, max_k: int = 20,
                      title: str = "STS-B test retrieval (score-5 pairs)") -> Path:
    """Recall@k for k = 1..max_k, one line per query direction (DiffCSE Table 10 reads k = 1, 5, 10)."""
    fig = Figure(figsize=(5.0, 3.6))
    ax = fig.add_subplot()
    ks = np.arange(1, max_k + 1)
    for name, r in ranks.items():
        ax.plot(ks, [100.0 * np.mean(np.asarray(r) <= k) for k in ks], marker="o", markersize=3, label=name)
    for k in (1, 5, 10):
        ax.axvline(k, color="grey", lw=0.5, ls=":")
    ax.set_xticks([1, *range(5, max_k + 1, 5)])
    ax.set_xlabel("k")
    ax.set_ylabel("recall@k (%)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _save(fig, path)


_SHORT_NAMES = {"STSBenchmark": "STS-B", "SICKRelatedness": "SICK-R"}


def plot_length_bias(table: Mapping[str, Mapping[str, float]], path: PathLike, threshold: int = 3,
                     title: str = "|cosine - normalised gold| x 100 by length difference") -> Path:
    """ESimCSE Table 7 as grouped bars: per task, the mean error for ``<= threshold`` and ``> threshold``."""
    tasks = list(table)
    x = np.arange(len(tasks))
    fig = Figure(figsize=(7.5, 3.6))
    ax = fig.add_subplot()
    for offset, key, label in ((-0.2, "le", f"length diff <= {threshold}"), (0.2, "gt", f"length diff > {threshold}")):
        ax.bar(x + offset, [table[t][key] for t in tasks], width=0.4, label=label)
    ax.set_xticks(x, [_SHORT_NAMES.get(t, t) for t in tasks], fontsize=8)
    ax.set_ylabel("mean |cos - gold|  x 100")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def plot_neighbours(query: str, neighbours: Sequence[tuple[str, float]], path: PathLike, width: int = 70) -> Path:
    """SimCSE++ Table 7 / DiffCSE Table 9 as a bar chart: the top-k sentences and their cosine to the query."""
    fig = Figure(figsize=(8.0, 1.2 + 0.55 * max(len(neighbours), 1)))
    ax = fig.add_subplot()
    labels = [f"{i}) " + textwrap.shorten(s, width=width, placeholder=" ...") for i, (s, _) in
              enumerate(neighbours, start=1)]
    scores = [score for _, score in neighbours]
    y = np.arange(len(neighbours))[::-1]
    ax.barh(y, scores, color="tab:blue", alpha=0.6)
    for yi, label, score in zip(y, labels, scores):
        ax.text(0.01, yi, f"{label}   ({score:.3f})", va="center", fontsize=8, transform=ax.get_yaxis_transform())
    ax.set_yticks([])
    ax.set_xlim(min([0.0, *scores]), 1.0)
    ax.set_xlabel("cosine similarity")
    ax.set_title("query: " + textwrap.shorten(query, width=width, placeholder=" ..."), fontsize=9)
    return _save(fig, path)


# ----------------------------------------------------------------------------------------------- training runs


def _use_log_scale(values: Sequence[float]) -> bool:
    """Log y-axis for a positive series spanning more than 20x (contrastive losses fall from ~1 to ~0.001)."""
    return bool(values) and min(values) > 0 and max(values) / min(values) > 20


def plot_training_curves(runs: Mapping[str, Curves], path: PathLike, title: str) -> Path:
    """A run's (or several seeds') curves, one panel each: the training loss, every logged per-method term
    (contrastive / DCL / Barlow / RTD losses, RTD accuracies, queue fill, ...), and STS-B dev Spearman x 100 over
    steps with the best checkpoint starred (the papers select it on STS-B dev every 125 steps; SimCSE App. A).

    Args:
        runs: label (a run or a seed) -> :class:`eval.curves.Curves`; one colour per label.
        path: PNG file to write.
        title: the figure's title (a second line may say where the history came from).
    """
    terms = sorted({name for curves in runs.values() for name in curves.terms})
    same = sorted({name for curves in runs.values() for name in curves.same_as_loss})
    panels = ["loss", "dev", *terms]
    columns = min(3, len(panels))
    rows = -(-len(panels) // columns)
    fig = Figure(figsize=(4.3 * columns, 2.9 * rows + 0.5))
    colours = [f"C{i % 10}" for i in range(len(runs))]
    for index, panel in enumerate(panels):
        ax = fig.add_subplot(rows, columns, index + 1)
        values: list[float] = []
        for (label, curves), colour in zip(runs.items(), colours):
            series = (curves.loss if panel == "loss" else curves.dev if panel == "dev" else curves.terms.get(panel, []))
            if not series:
                continue
            steps, ys = zip(*series)
            values += ys
            if panel != "dev":
                ax.plot(steps, ys, color=colour, lw=1.2, label=label)
                continue
            best = "" if curves.best is None else f"best {curves.best[1]:.2f} @ {curves.best[0]}"
            ax.plot(steps, ys, color=colour, lw=1.2, marker="o", markersize=3,
                    label=f"{label}: {best}" if best else label)
            if steps[0] == 0:  # STS-B dev of the model before training
                ax.plot([0], [ys[0]], marker="o", markersize=6, markerfacecolor="white", color=colour, linestyle="none")
            if curves.best is not None:
                ax.plot(*curves.best, marker="*", markersize=13, color=colour, markeredgecolor="black", linestyle="none")
                if len(runs) == 1:  # several runs: the legend says it
                    ax.annotate(best, curves.best, textcoords="offset points", xytext=(-4, -13), ha="right", fontsize=7)
        if panel == "loss":
            ax.set_title("training loss" + (f" (= {', '.join(same)})" if same else ""), fontsize=9)
        elif panel == "dev":
            ax.set_title("STS-B dev Spearman x 100 (o = before training, * = best)", fontsize=9)
        else:
            ax.set_title(panel, fontsize=9)
        if panel != "dev" and _use_log_scale(values):
            ax.set_yscale("log")
        if not values:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes, color="grey")
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        if len(runs) > 1 and panel == "dev":
            ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(title, fontsize=10)
    return _save(fig, path)


def plot_seed_spread(groups: Mapping[str, Mapping[int, float]], path: PathLike, ylabel: str,
                     title: str = "spread over seeds") -> Path:
    """Per group (method), each seed's score as a dot and, with two or more seeds, the mean with its 95%
    t-interval (:func:`eval.stats.seed_statistics`); one seed is marked n=1, with no interval.

    Args:
        groups: group label -> {seed: score}.
        path: PNG file to write.
        ylabel: what the score is.
    """
    from eval.stats import seed_statistics

    fig = Figure(figsize=(1.4 * max(len(groups), 3) + 1.5, 4.0))
    ax = fig.add_subplot()
    for x, (label, by_seed) in enumerate(groups.items()):
        seeds = sorted(by_seed)
        scores = [by_seed[seed] for seed in seeds]
        offsets = np.linspace(-0.12, 0.12, len(scores)) if len(scores) > 1 else np.zeros(1)
        ax.scatter(x + offsets, scores, s=22, color=f"C{x % 10}", alpha=0.8, zorder=3)
        for offset, seed, score in zip(offsets, seeds, scores):
            ax.annotate(str(seed), (x + offset, score), textcoords="offset points", xytext=(4, 0), fontsize=6,
                        color="grey", va="center")
        stats = seed_statistics(scores)
        if stats.has_interval:
            ax.errorbar([x + 0.3], [stats.mean], yerr=[[stats.mean - stats.ci_low], [stats.ci_high - stats.mean]],
                        fmt="s", color="black", markersize=5, capsize=4, zorder=4)
            text = f"n={stats.n}\n{stats.mean:.2f} ± {stats.std:.2f}\nCI [{stats.ci_low:.2f}, {stats.ci_high:.2f}]"
        else:
            text = f"n={stats.n}\n{stats.mean:.2f}\n(no CI)"
        ax.annotate(text, (x, 0), xycoords=("data", "axes fraction"), xytext=(0, 4), textcoords="offset points",
                    ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(groups)), list(groups), fontsize=8)
    ax.set_xlim(-0.6, len(groups) - 0.4)
    low, high = ax.get_ylim()
    ax.set_ylim(low - 0.35 * (high - low), high)  # room for the n / mean / CI labels under the dots
    ax.set_ylabel(ylabel)
    ax.set_title(title + "\ndots: seeds; square and bar: mean and 95% t-interval", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)
