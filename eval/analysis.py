"""Analyses of an embedding space, as the five papers report them.

- Alignment and uniformity (Wang & Isola, 2020), SimCSE Sec. 5 / Fig. 2 and Sec. 7 / Fig. 3, DiffCSE Table 11:
  ``align = E_(x,y)~pos ||f(x) - f(y)||^2`` and ``uniform = log E_(x,y)~data exp(-2 ||f(x) - f(y)||^2)`` on
  L2-normalised embeddings. Positive pairs: STS-B pairs with gold score > 4 (SimCSE's footnote 3); data: the
  STS-B sentences. Split: **test** by default (DiffCSE Table 11 measures on STS-B test; SimCSE says "all STS-B
  sentences" without a split) - ``split="all"`` pools train, dev and test.
- Retrieval (DiffCSE Sec. 6.2, Table 10): the STS-B test sentences are the corpus, the pairs with gold score 5
  the queries; for each pair one sentence retrieves the other by cosine; recall@1/5/10.
- Cosine distribution by human rating (DiffCSE Sec. 6.3, Fig. 2): STS-B test pairs in gold-score buckets
  [0,1), [1,2), [2,3), [3,4), [4,5].
- Length-difference bias (ESimCSE Sec. 1 Table 1 and Sec. 5.4 Table 7): the seven STS test sets, each split by
  ``|len(s1) - len(s2)| <= 3`` words; per group, the mean ``|cos - gold_normalised|`` x 100.
- Nearest neighbours of a query (SimCSE++ Appendix B, Table 7; DiffCSE Table 9): top-k STS-B test sentences.

Every ``run_*`` function encodes what it needs, writes a PNG (and the same numbers as JSON) into ``out_dir`` and
returns a JSON-serialisable dict under one top-level key (the CLI merges the dicts of several analyses).
``python -m eval.analysis scatter ...`` draws the alignment/uniformity scatter of several checkpoints.
"""
from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from eval.plots import (
    plot_align_uniform_scatter,
    plot_cosine_by_bucket,
    plot_distance_histograms,
    plot_length_bias,
    plot_neighbours,
    plot_recall_curve,
)
from eval.sts import STS_TASKS, STSPairs, SupportsEncode, load_sts

__all__ = [
    "alignment", "uniformity", "retrieval_ranks", "recall_at_k", "bucket_members", "cosine_by_bucket",
    "normalise_gold", "length_bias", "nearest_neighbours", "run_align_uniform", "run_retrieval",
    "run_cosine_distribution", "run_length_bias", "run_nearest_neighbours", "plot_align_uniform_scatter",
    "align_uniform_points",
]

PathLike = str | os.PathLike[str]

SCORE_BUCKETS: tuple[float, ...] = (0.0, 1.0, 2.0, 3.0, 4.0, 5.0)
"""DiffCSE Fig. 2's five human-rating groups; the last bucket includes 5.0."""

LENGTH_THRESHOLD = 3
"""ESimCSE's split: length difference ``<= 3`` vs ``> 3`` words."""

RECALL_KS: tuple[int, ...] = (1, 5, 10)


# ----------------------------------------------------------------------------------------------- metrics


def l2_normalise(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (float64); zero rows stay zero."""
    x = np.asarray(x, dtype=np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def alignment(x: np.ndarray, y: np.ndarray, alpha: float = 2.0) -> float:
    """Wang & Isola's ``l_align = mean_i ||f(x_i) - f(y_i)||^alpha`` over positive pairs, rows L2-normalised."""
    return float(np.mean(np.linalg.norm(l2_normalise(x) - l2_normalise(y), axis=1) ** alpha))


def _upper_sq_distances(x: np.ndarray, start: int, stop: int) -> np.ndarray:
    """``||x_i - x_j||^2 = 2 - 2 cos`` for rows ``start <= i < stop`` and every ``j > i`` (x normalised)."""
    block = np.clip(2.0 - 2.0 * x[start:stop] @ x.T, 0.0, 4.0)
    upper = np.arange(x.shape[0])[None, :] > np.arange(start, stop)[:, None]
    return block[upper]


def pairwise_sq_distances(x: np.ndarray, block: int = 1024) -> np.ndarray:
    """All ``n (n - 1) / 2`` squared distances between distinct rows of L2-normalised ``x`` (i < j)."""
    x = l2_normalise(x)
    return np.concatenate([_upper_sq_distances(x, s, min(s + block, len(x))) for s in range(0, len(x), block)]
                          or [np.zeros(0)])


def uniformity(x: np.ndarray, t: float = 2.0, block: int = 1024) -> float:
    """Wang & Isola's ``l_uniform = log mean_{i<j} exp(-t ||f(x_i) - f(x_j)||^2)``, rows L2-normalised.

    Computed block by block with a running log-sum-exp (memory ``O(block * n)``).
    """
    x = l2_normalise(x)
    n = len(x)
    if n < 2:
        raise ValueError("uniformity needs at least two embeddings")
    total = -np.inf
    for start in range(0, n, block):
        exponents = -t * _upper_sq_distances(x, start, min(start + block, n))
        if exponents.size:
            total = np.logaddexp(total, np.logaddexp.reduce(exponents))
    return float(total - np.log(n * (n - 1) / 2))


def cosine_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarity of every row of ``a`` with every row of ``b`` (normalise, then one matmul)."""
    return l2_normalise(a) @ l2_normalise(b).T


def retrieval_ranks(embeddings: np.ndarray, queries: Sequence[int], targets: Sequence[int]) -> np.ndarray:
    """Rank of each target among all pool rows except its query, ordered by cosine to the query.

    Rank = 1 + the number of other rows (neither the query nor the target) whose cosine is **>=** the target's:
    ties count against the target, so a collapsed encoder (all embeddings equal) gets the worst rank, not the best.
    """
    queries, targets = np.asarray(queries), np.asarray(targets)
    sims = cosine_matrix(embeddings[queries], embeddings)
    target_sims = sims[np.arange(len(queries)), targets]
    at_least = (sims >= target_sims[:, None]).sum(axis=1)  # counts the target itself ...
    query_too = sims[np.arange(len(queries)), queries] >= target_sims  # ... and the query when it ties or beats it
    return at_least - query_too.astype(int)


def recall_at_k(ranks: np.ndarray, ks: Sequence[int] = RECALL_KS) -> dict[str, float]:
    """``{"R@k": percent of queries whose target rank <= k}``."""
    ranks = np.asarray(ranks)
    return {f"R@{k}": float(100.0 * np.mean(ranks <= k)) if len(ranks) else float("nan") for k in ks}


def bucket_members(values: np.ndarray, gold: np.ndarray,
                   edges: Sequence[float] = SCORE_BUCKETS) -> dict[str, np.ndarray]:
    """``values`` grouped by gold bucket ``[lo, hi)``, labelled ``"lo-hi"``; the last bucket includes ``hi``."""
    values, gold = np.asarray(values, dtype=np.float64), np.asarray(gold, dtype=np.float64)
    groups = {}
    for i, (lo, hi) in enumerate(zip(edges[:-1], edges[1:])):
        upper = gold <= hi if i == len(edges) - 2 else gold < hi
        groups[f"{lo:g}-{hi:g}"] = values[(gold >= lo) & upper]
    return groups


def cosine_by_bucket(cosines: np.ndarray, gold: np.ndarray,
                     edges: Sequence[float] = SCORE_BUCKETS) -> dict[str, dict[str, float]]:
    """Count, mean and population std (``ddof=0``) of the cosines in each gold bucket (DiffCSE Fig. 2)."""
    return {
        label: {
            "n": int(len(members)),
            "mean": float(members.mean()) if len(members) else float("nan"),
            "std": float(members.std()) if len(members) else float("nan"),
        }
        for label, members in bucket_members(cosines, gold, edges).items()
    }


def normalise_gold(task: str, scores: np.ndarray) -> np.ndarray:
    """Gold scores mapped to [0, 1]: STS12-16 and STS-B are 0..5 (``s / 5``), SICK-R is 1..5 (``(s - 1) / 4``)."""
    scores = np.asarray(scores, dtype=np.float64)
    return (scores - 1.0) / 4.0 if task == "SICKRelatedness" else scores / 5.0


def word_count(sentence: str) -> int:
    """Words after SentEval's tokenisation (whitespace split)."""
    return len(sentence.split())


def length_bias(sent1: Sequence[str], sent2: Sequence[str], cosines: np.ndarray, gold01: np.ndarray,
                threshold: int = LENGTH_THRESHOLD) -> dict[str, float]:
    """ESimCSE Table 7 for one task: mean ``|cos - gold|`` x 100 for pairs with ``|len1 - len2| <= threshold``
    (``"le"``) and ``> threshold`` (``"gt"``), their counts, and ``gap = le - gt``."""
    diffs = np.abs(np.array([word_count(a) for a in sent1]) - np.array([word_count(b) for b in sent2]))
    errors = 100.0 * np.abs(np.asarray(cosines, dtype=np.float64) - np.asarray(gold01, dtype=np.float64))
    close = diffs <= threshold
    le = float(errors[close].mean()) if close.any() else float("nan")
    gt = float(errors[~close].mean()) if (~close).any() else float("nan")
    return {"le": le, "gt": gt, "gap": le - gt, "n_le": int(close.sum()), "n_gt": int((~close).sum())}


def nearest_neighbours(query: np.ndarray, pool: np.ndarray, sentences: Sequence[str], k: int = 5,
                       exclude: Sequence[str] = ()) -> list[tuple[str, float]]:
    """The ``k`` pool sentences most cosine-similar to ``query`` (a ``[d]`` vector), skipping ``exclude``."""
    sims = cosine_matrix(np.asarray(query)[None, :], pool)[0]
    skip = set(exclude)
    order = [i for i in np.argsort(-sims, kind="stable") if sentences[i] not in skip]
    return [(sentences[i], float(sims[i])) for i in order[:k]]


# ----------------------------------------------------------------------------------------------- data


def load_stsb(senteval_dir: PathLike, split: str = "test") -> STSPairs:
    """STS-B pairs of one split, or of ``"all"`` three (train + dev + test)."""
    if split == "all":
        return STSPairs.concatenate([load_sts("STSBenchmark", senteval_dir, s) for s in ("train", "dev", "test")])
    return load_sts("STSBenchmark", senteval_dir, split)


def distinct_sentences(pairs: STSPairs) -> list[str]:
    """The distinct sentences of a pair set, in first-appearance order (sent1 then sent2 of each pair)."""
    return list(dict.fromkeys(s for a, b in zip(pairs.sent1, pairs.sent2) for s in (a, b)))


class _Encoded:
    """Embeddings of a sentence list with a sentence -> row map (one ``encode`` call)."""

    def __init__(self, encoder: SupportsEncode, sentences: Sequence[str], desc: str) -> None:
        self.sentences = list(sentences)
        self.row = {s: i for i, s in enumerate(self.sentences)}
        self.embeddings = np.asarray(encoder.encode(self.sentences, show_progress=True, desc=desc))

    def rows(self, sentences: Sequence[str]) -> np.ndarray:
        return np.asarray([self.row[s] for s in sentences], dtype=np.int64)

    def of(self, sentences: Sequence[str]) -> np.ndarray:
        return self.embeddings[self.rows(sentences)]


def _pair_cosines(encoded: _Encoded, pairs: STSPairs) -> np.ndarray:
    return np.einsum("ij,ij->i", l2_normalise(encoded.of(pairs.sent1)), l2_normalise(encoded.of(pairs.sent2)))


def _write_json(out_dir: PathLike, stem: str, result: Mapping[str, Any]) -> None:
    path = Path(out_dir) / f"{stem}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


# ----------------------------------------------------------------------------------------------- runs


def align_uniform_numbers(encoder: SupportsEncode, senteval_dir: PathLike, split: str = "test",
                          threshold: float = 4.0) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
    """Alignment over STS-B pairs scored > ``threshold``, uniformity over the distinct STS-B sentences.

    Returns the numbers, the positive pairs' squared distances and the sentence embeddings (for plotting).
    """
    pairs = load_stsb(senteval_dir, split)
    encoded = _Encoded(encoder, distinct_sentences(pairs), f"STS-B {split} (align/uniform)")
    positive = pairs.scores > threshold
    x = encoded.of([s for s, p in zip(pairs.sent1, positive) if p])
    y = encoded.of([s for s, p in zip(pairs.sent2, positive) if p])
    numbers = {
        "alignment": alignment(x, y),
        "uniformity": uniformity(encoded.embeddings),
        "n_positive_pairs": int(positive.sum()),
        "n_sentences": len(encoded.sentences),
        "split": split,
    }
    return numbers, np.sum((l2_normalise(x) - l2_normalise(y)) ** 2, axis=1), encoded.embeddings


def run_align_uniform(encoder: SupportsEncode, senteval_dir: PathLike, out_dir: PathLike,
                      split: str = "test", max_plot_sentences: int = 3000) -> dict[str, Any]:
    """Alignment and uniformity on STS-B (SimCSE Sec. 5, DiffCSE Table 11); plot: distance histograms.

    The histogram of random pairs uses all pairs of at most ``max_plot_sentences`` sentences (a seeded sample
    beyond that); the numbers always use every sentence.
    """
    numbers, positive_sq, embeddings = align_uniform_numbers(encoder, senteval_dir, split)
    if len(embeddings) > max_plot_sentences:
        embeddings = embeddings[np.random.default_rng(0).choice(len(embeddings), max_plot_sentences, replace=False)]
    title = (f"STS-B {split}: align {numbers['alignment']:.3f} (pairs with score > 4), "
             f"uniform {numbers['uniformity']:.3f}")
    path = Path(out_dir) / "align_uniform.png"
    numbers["plot"] = str(plot_distance_histograms(positive_sq, pairwise_sq_distances(embeddings), path, title))
    _write_json(out_dir, "align_uniform", numbers)
    return {"align_uniform": numbers}


def retrieval_queries(pairs: STSPairs, score: float = 5.0) -> list[tuple[str, str]]:
    """The (sent1, sent2) of pairs with gold == ``score`` whose two sides differ (identical sides are trivial)."""
    return [(a, b) for a, b, s in zip(pairs.sent1, pairs.sent2, pairs.scores) if s == score and a != b]


def run_retrieval(encoder: SupportsEncode, senteval_dir: PathLike, out_dir: PathLike) -> dict[str, Any]:
    """DiffCSE Table 10: recall@1/5/10 of retrieving a score-5 pair's partner among the STS-B test sentences.

    Corpus: the **distinct** STS-B test sentences (2551 on the real data; DiffCSE's "2758" counts both sides of
    the 1379 pairs, duplicates included - a duplicate of the query would otherwise outrank every partner).
    Queries: the 97 pairs with gold 5.0; ``sent1 -> sent2`` is DiffCSE's direction ("we use one sentence to
    retrieve the other"), ``sent2 -> sent1`` is reported too. Ties count against the target.
    """
    pairs = load_stsb(senteval_dir, "test")
    encoded = _Encoded(encoder, distinct_sentences(pairs), "STS-B test (retrieval)")
    queries = retrieval_queries(pairs)
    first, second = encoded.rows([a for a, _ in queries]), encoded.rows([b for _, b in queries])
    ranks = {"sent1->sent2": retrieval_ranks(encoded.embeddings, first, second),
             "sent2->sent1": retrieval_ranks(encoded.embeddings, second, first)}
    result: dict[str, Any] = {
        "n_queries": len(queries), "pool_size": len(encoded.sentences),
        **{direction: recall_at_k(r) for direction, r in ranks.items()},
        "mean_rank": {direction: float(np.mean(r)) if len(r) else float("nan") for direction, r in ranks.items()},
    }
    result["plot"] = str(plot_recall_curve(ranks, Path(out_dir) / "retrieval.png"))
    _write_json(out_dir, "retrieval", result)
    return {"retrieval": result}


def run_cosine_distribution(encoder: SupportsEncode, senteval_dir: PathLike, out_dir: PathLike) -> dict[str, Any]:
    """DiffCSE Fig. 2: cosine similarities of STS-B test pairs grouped by gold score; plot: violins."""
    pairs = load_stsb(senteval_dir, "test")
    encoded = _Encoded(encoder, distinct_sentences(pairs), "STS-B test (cosine distribution)")
    cosines = _pair_cosines(encoded, pairs)
    groups = bucket_members(cosines, pairs.scores)
    result: dict[str, Any] = {"buckets": cosine_by_bucket(cosines, pairs.scores)}
    path = Path(out_dir) / "cosine_distribution.png"
    result["plot"] = str(plot_cosine_by_bucket(list(groups.values()), list(groups), path))
    _write_json(out_dir, "cosine_distribution", result)
    return {"cosine_distribution": result}


def run_length_bias(encoder: SupportsEncode, senteval_dir: PathLike, out_dir: PathLike) -> dict[str, Any]:
    """ESimCSE Tables 1 and 7 on the seven STS test sets (all sentences encoded in one call)."""
    tasks = {task: load_sts(task, senteval_dir, "test") for task in STS_TASKS}
    sentences = list(dict.fromkeys(s for p in tasks.values() for s in (*p.sent1, *p.sent2)))
    encoded = _Encoded(encoder, sentences, "STS test sets (length bias)")
    table = {task: length_bias(p.sent1, p.sent2, _pair_cosines(encoded, p), normalise_gold(task, p.scores))
             for task, p in tasks.items()}
    table["avg"] = {key: float(np.mean([row[key] for row in table.values()])) for key in ("le", "gt", "gap")}
    result: dict[str, Any] = {"by_task": table, "threshold": LENGTH_THRESHOLD}
    result["plot"] = str(plot_length_bias(table, Path(out_dir) / "length_bias.png"))
    _write_json(out_dir, "length_bias", result)
    return {"length_bias": result}


def _slug(text: str, width: int = 40) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:width] or "query"


def run_nearest_neighbours(encoder: SupportsEncode, senteval_dir: PathLike, query: str, out_dir: PathLike,
                           k: int = 5) -> dict[str, Any]:
    """SimCSE++ Table 7 / DiffCSE Table 9: the ``k`` distinct STS-B test sentences nearest to ``query``.

    The query itself (after SentEval's whitespace normalisation) is excluded from the results.
    """
    pairs = load_stsb(senteval_dir, "test")
    query = " ".join(query.split())
    encoded = _Encoded(encoder, [*distinct_sentences(pairs), query], "STS-B test (neighbours)")
    pool = encoded.embeddings[:-1]
    neighbours = nearest_neighbours(encoded.embeddings[-1], pool, encoded.sentences[:-1], k, exclude=(query,))
    result: dict[str, Any] = {"query": query, "neighbours": [[s, score] for s, score in neighbours]}
    path = Path(out_dir) / f"nearest_neighbours_{_slug(query)}.png"
    result["plot"] = str(plot_neighbours(query, neighbours, path))
    _write_json(out_dir, path.stem, result)
    return {"nearest_neighbours": result}


# ----------------------------------------------------------------------------------------------- several models


def align_uniform_points(models: Mapping[str, SupportsEncode], senteval_dir: PathLike,
                         split: str = "test") -> dict[str, tuple[float, float]]:
    """``name -> (alignment, uniformity)`` for several encoders (the input of the scatter plot)."""
    points = {}
    for name, encoder in models.items():
        numbers, _, _ = align_uniform_numbers(encoder, senteval_dir, split)
        points[name] = (numbers["alignment"], numbers["uniformity"])
    return points


def _per_model(values: Sequence[str] | None, default: Sequence[str | None], flag: str, n: int) -> list:
    values = list(values) if values else list(default)
    if len(values) != n:
        raise SystemExit(f"error: {flag} needs one value per --models entry ({n}), got {len(values)}")
    return values


def _scatter_main(args: argparse.Namespace) -> None:
    from eval.loading import load_encoder

    n = len(args.models)
    names = _per_model(args.names, [Path(m).name for m in args.models], "--names", n)
    poolers = _per_model(args.poolers, [args.pooler] * n, "--poolers", n)
    points = {}
    for name, model, pooler in zip(names, args.models, poolers):  # one encoder in memory at a time
        encoder = load_encoder(model, pooler, device=args.device)
        points.update(align_uniform_points({name: encoder}, args.senteval_dir, args.split))
    plot_align_uniform_scatter(points, args.out)
    print(json.dumps({name: {"alignment": a, "uniformity": u} for name, (a, u) in points.items()}, indent=2))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m eval.analysis", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    scatter = sub.add_parser("scatter", help="alignment/uniformity scatter of several checkpoints (SimCSE Fig. 3)")
    scatter.add_argument("--models", nargs="+", required=True, help="model folders or hub names")
    scatter.add_argument("--names", nargs="+", default=None, help="labels (default: folder names)")
    scatter.add_argument("--pooler", default=None, help="pooler for every model (see eval.loading)")
    scatter.add_argument("--poolers", nargs="+", default=None, help="one pooler per model (overrides --pooler)")
    scatter.add_argument("--senteval_dir", default=os.environ.get("SENTEVAL_DIR", "data/senteval"))
    scatter.add_argument("--split", default="test", choices=("train", "dev", "test", "all"))
    scatter.add_argument("--device", default=None)
    scatter.add_argument("--out", type=Path, required=True, help="PNG to write")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.command == "scatter":
        _scatter_main(args)


if __name__ == "__main__":
    main()
