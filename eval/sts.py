"""STS evaluation: SentEval's STS12-16, STS Benchmark and SICK-Relatedness under the unsupervised protocol.

The protocol the papers report (SimCSE, Gao et al., 2021, Sec. 4 and Appendix B; reused unchanged by ESimCSE,
SimCSE++, S-SimCSE and DiffCSE; see REFERENCE.md, "Evaluation protocol"):

- every pair is scored by the cosine similarity of its two sentence embeddings; no regressor is trained, also
  not for STS-B and SICK-R (SentEval's own STSBenchmark/SICKRelatedness tasks train one - the papers do not);
- the metric is Spearman's rank correlation x 100;
- STS12-16 use the **"all"** setting: one Spearman over the concatenation of every subset of a year
  (SimCSE's addition to SentEval, whose STS tasks only report the mean / weighted mean of per-subset
  correlations). Unscored pairs (blank gold line) are dropped first;
- sentences go through SentEval's round trip: the loader splits a line on whitespace and the batcher joins the
  tokens with single spaces, so ``" ".join(line.split())`` is what the encoder sees.

This module needs numpy, scipy and torch; the encoder is duck-typed (anything with :meth:`encode`; one that
also has ``encode_tensor`` is scored on its device).
"""
from __future__ import annotations

import logging
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Protocol, Sequence

import numpy as np
import torch

from eval.senteval_sizes import (SCORED_PAIRS, SENTEVAL_SCORED_PAIRS, check_sizes_default, mismatch_message,
                                  size_mismatch)

logger = logging.getLogger(__name__)

STS_TASKS: tuple[str, ...] = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness")
"""The seven STS tasks, in the papers' column order (STS12 ... STS16, STS-B, SICK-R)."""

STS_YEAR_SUBSETS: dict[str, tuple[str, ...]] = {
    "STS12": ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"),
    "STS13": ("FNWN", "headlines", "OnWN"),  # the licensed "SMT" subset ships without inputs
    "STS14": ("deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"),
    "STS15": ("answers-forums", "answers-students", "belief", "headlines", "images"),
    "STS16": ("answer-answer", "headlines", "plagiarism", "postediting", "question-question"),
}
"""SemEval STS subsets read by SentEval for each year (``STS/STS1x-en-test/STS.{input,gs}.<subset>.txt``)."""

DEV_TASKS: tuple[str, ...] = ("STSBenchmark", "SICKRelatedness")
"""The tasks with a dev split; SimCSE selects checkpoints on STS-B dev (and reports SICK-R dev alongside)."""

DATA_HINT = (
    "set --senteval_dir (or SENTEVAL_DIR) to SentEval's data/downstream folder, the one holding STS/ and SICK/, "
    "or run `bash data/download_senteval.sh`"
)


class SentEvalDataError(ValueError):
    """The SentEval data is missing or malformed; the message names the file (and line) and how to fix it."""


class SupportsEncode(Protocol):
    """What the STS evaluation needs from an encoder (e.g. :class:`eval.encoder.SentenceEncoder`)."""

    def encode(self, sentences: Sequence[str], show_progress: bool = False, desc: str | None = None) -> np.ndarray:
        ...


@dataclass
class STSPairs:
    """Scored sentence pairs of one task and split; ``subset[i]`` names the source file of pair ``i``."""

    sent1: list[str]
    sent2: list[str]
    scores: np.ndarray
    subset: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.scores = np.asarray(self.scores, dtype=np.float64)
        if not self.subset:
            self.subset = [""] * len(self.sent1)
        if not len(self.sent1) == len(self.sent2) == len(self.scores) == len(self.subset):
            raise ValueError(
                f"STSPairs fields differ in length: sent1={len(self.sent1)}, sent2={len(self.sent2)}, "
                f"scores={len(self.scores)}, subset={len(self.subset)}"
            )

    def __len__(self) -> int:
        return len(self.sent1)

    @classmethod
    def concatenate(cls, parts: Sequence[STSPairs]) -> STSPairs:
        """Pool several subsets into one set of pairs (SimCSE's "all" setting)."""
        return cls(
            sent1=[s for p in parts for s in p.sent1],
            sent2=[s for p in parts for s in p.sent2],
            scores=np.concatenate([p.scores for p in parts]) if parts else np.zeros(0),
            subset=[s for p in parts for s in p.subset],
        )


# ----------------------------------------------------------------------------------------------- file reading


def resolve_senteval_dir(senteval_dir: str | os.PathLike[str]) -> Path:
    """Return the SentEval ``downstream`` folder; its parent (holding ``downstream/``) is accepted too."""
    root = Path(senteval_dir).expanduser()
    if not root.is_dir():
        raise SentEvalDataError(f"SentEval directory not found: {root}; {DATA_HINT}")
    nested = root / "downstream"
    if not (root / "STS").is_dir() and not (root / "SICK").is_dir() and nested.is_dir():
        return nested
    return root


def _read_lines(path: Path, size_key: str | None = None) -> list[str]:
    """Read a SentEval file as lines, like SentEval's ``io.open(path, encoding='utf8').read().splitlines()``.

    The files are UTF-8 (a BOM is ignored). A file that is not valid UTF-8 (a re-encoded copy) is decoded as
    latin-1, which accepts every byte, and a warning names it. With ``size_key`` (a key of
    :data:`eval.senteval_sizes.SENTEVAL_LINE_COUNTS`), a line count other than SentEval's is an error.
    """
    if not path.is_file():
        raise SentEvalDataError(f"SentEval file not found: {path}; {DATA_HINT}")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        logger.warning("%s is not valid UTF-8; decoding it as latin-1", path)
        text = raw.decode("latin-1")
    lines = text.splitlines()
    expected = size_mismatch(size_key, len(lines)) if size_key is not None else None
    if expected is not None:
        raise SentEvalDataError(mismatch_message(path, len(lines), expected))
    return lines


def _split_row(line: str, path: Path, lineno: int, n_columns: int, *, exact: bool) -> list[str]:
    """Split a line on tabs (no csv quoting: sentences contain quote characters) and check the column count."""
    columns = line.split("\t")
    if len(columns) < n_columns or (exact and len(columns) != n_columns):
        expected = str(n_columns) if exact else f"at least {n_columns}"
        raise SentEvalDataError(
            f"{path}:{lineno}: expected {expected} tab-separated columns, found {len(columns)}; "
            f"the file is corrupted or not in SentEval's format - re-download it (bash data/download_senteval.sh)"
        )
    return columns


_DECIMAL = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
"""A plain decimal number: what float() takes less 'nan', 'inf' and underscores (float('5_0') is 50.0)."""


def _parse_score(text: str, path: Path, lineno: int) -> float:
    """A gold score: any finite decimal number (no range check: your own STS files may use another scale)."""
    score = text.strip()
    if score.lower().lstrip("+-") in ("nan", "inf", "infinity"):
        problem = "is not finite"
    elif not _DECIMAL.fullmatch(score):
        problem = "is not a number"
    elif not math.isfinite(value := float(score)):  # a decimal past float's range: inf
        problem = "is not finite"
    else:
        return value
    raise SentEvalDataError(
        f"{path}:{lineno}: gold score {score!r} {problem}; "
        f"the file is corrupted or not in SentEval's format - re-download it (bash data/download_senteval.sh)"
    )


def _roundtrip(sentence: str) -> str:
    """SentEval's whitespace round trip: ``sentence.split()`` in the loader, ``" ".join`` in the batcher."""
    return " ".join(sentence.split())


# ----------------------------------------------------------------------------------------------- loaders


def _year_folder(task: str, root: Path) -> Path:
    return root / "STS" / f"{task}-en-test"


def _subset_paths(folder: Path, subset: str) -> tuple[Path, Path]:
    """A SemEval subset's two files: the sentence pairs and the gold scores."""
    return folder / f"STS.input.{subset}.txt", folder / f"STS.gs.{subset}.txt"


def _load_sts_subset(folder: Path, subset: str, check_sizes: bool) -> STSPairs:
    """One SemEval subset: ``STS.input.<subset>.txt`` (``sent1<TAB>sent2``) + ``STS.gs.<subset>.txt`` (scores).

    A blank gold line marks an unscored pair, which SentEval drops (``raw_scores != ''``).
    """
    input_path, gold_path = _subset_paths(folder, subset)
    size_key = f"STS/{folder.name}/{subset}" if check_sizes else None
    inputs, golds = _read_lines(input_path, size_key), _read_lines(gold_path, size_key)
    if len(inputs) != len(golds):
        raise SentEvalDataError(
            f"{input_path} has {len(inputs)} lines but {gold_path} has {len(golds)}: one of them is truncated; "
            f"re-download the data (bash data/download_senteval.sh)"
        )
    sent1, sent2, scores = [], [], []
    for lineno, (line, gold) in enumerate(zip(inputs, golds), start=1):
        first, second = _split_row(line, input_path, lineno, 2, exact=True)
        if not gold.strip():
            continue
        sent1.append(_roundtrip(first))
        sent2.append(_roundtrip(second))
        scores.append(_parse_score(gold, gold_path, lineno))
    _check_scored(gold_path, size_key, len(scores), len(inputs) - len(scores))
    return STSPairs(sent1, sent2, np.asarray(scores), [subset] * len(scores))


def _check_scored(path: Path, size_key: str | None, scored: int, dropped: int) -> None:
    """With the size check (``size_key``), a scored-pair count other than SentEval's is an error: a blanked line
    keeps the line count. Without it, the pairs dropped for a blank line or gold score are logged."""
    expected = size_mismatch(size_key, scored, SENTEVAL_SCORED_PAIRS) if size_key is not None else None
    if expected is not None:
        raise SentEvalDataError(mismatch_message(path, scored, expected, SCORED_PAIRS))
    if size_key is None and dropped:
        logger.info("%s: dropped %d pair(s) with a blank line or gold score (as SentEval does); %d scored",
                    path, dropped, scored)


def _load_sts_year(task: str, root: Path, check_sizes: bool) -> STSPairs:
    """STS12-16 test: every subset of the year, concatenated (the "all" setting)."""
    folder = _year_folder(task, root)
    return STSPairs.concatenate([_load_sts_subset(folder, subset, check_sizes) for subset in STS_YEAR_SUBSETS[task]])


@dataclass(frozen=True)
class _TableFormat:
    """A tab-separated file with one scored pair a row (STS-B, SICK): where the score and sentences sit."""

    folder: str
    files: Mapping[str, str]
    score_column: int
    sentence_columns: tuple[int, int]
    header: bool
    header_names: str = ""  # the header row's columns, for the warning of a file without it


def _holds_scored_pair(line: str, fmt: _TableFormat, n_columns: int) -> bool:
    """Whether ``line`` is a row of ``fmt``'s pairs (its columns, its score a decimal), not a header."""
    columns = line.strip().split("\t")
    return len(columns) >= n_columns and bool(_DECIMAL.fullmatch(columns[fmt.score_column].strip()))


_TABLES: dict[str, _TableFormat] = {
    # SentEval's STSBenchmarkEval: text = line.strip().split('\t'); X_A = text[5], X_B = text[6], y = text[4]
    "STSBenchmark": _TableFormat(
        "STS/STSBenchmark", {"train": "sts-train.csv", "dev": "sts-dev.csv", "test": "sts-test.csv"}, 4, (5, 6), False
    ),
    # SentEval's SICKRelatednessEval: header skipped; X_A = text[1], X_B = text[2], y = text[3]; "trial" is dev
    "SICKRelatedness": _TableFormat(
        "SICK", {"train": "SICK_train.txt", "dev": "SICK_trial.txt", "test": "SICK_test_annotated.txt"}, 3, (1, 2),
        True, "pair_ID, sentence_A, sentence_B, relatedness_score, entailment_judgment"
    ),
}


def _table_path(task: str, root: Path, split: str) -> Path:
    """The file of an STS-B / SICK-R split (``ValueError`` for a split the task does not have)."""
    fmt = _TABLES[task]
    if split not in fmt.files:
        raise ValueError(f"{task} has splits {', '.join(fmt.files)}, not {split!r}")
    return root / fmt.folder / fmt.files[split]


def _load_table(task: str, root: Path, split: str, check_sizes: bool) -> STSPairs:
    """STS-B / SICK-R: one pair a row; extra trailing columns are ignored, as SentEval indexes the columns."""
    fmt = _TABLES[task]
    path = _table_path(task, root, split)
    n_columns = max(fmt.score_column, *fmt.sentence_columns) + 1
    first_row = 2 if fmt.header else 1
    sent1, sent2, scores = [], [], []
    size_key = f"{fmt.folder}/{fmt.files[split]}" if check_sizes else None
    lines = _read_lines(path, size_key)
    if fmt.header and size_key is None and lines and _holds_scored_pair(lines[0], fmt, n_columns):
        logger.warning("%s: line 1 holds a scored pair, not %s's header, and is skipped as the header, as SentEval "
                       "does: put the header line (%s; tab-separated) first to score every pair", path, task,
                       fmt.header_names)
    rows = lines[first_row - 1:]
    for lineno, line in enumerate(rows, start=first_row):
        if not line.strip():
            continue
        columns = _split_row(line.strip(), path, lineno, n_columns, exact=False)
        sent1.append(_roundtrip(columns[fmt.sentence_columns[0]]))
        sent2.append(_roundtrip(columns[fmt.sentence_columns[1]]))
        scores.append(_parse_score(columns[fmt.score_column], path, lineno))
    _check_scored(path, size_key, len(scores), len(rows) - len(scores))
    if not scores:
        raise SentEvalDataError(f"{path}: no scored pairs found (empty or truncated file); {DATA_HINT}")
    return STSPairs(sent1, sent2, np.asarray(scores), [path.stem] * len(scores))


def load_sts(task: str, senteval_dir: str | os.PathLike[str], split: str = "test",
             check_sizes: bool | None = None) -> STSPairs:
    """Load one STS task in SentEval's format.

    Args:
        task: one of :data:`STS_TASKS`.
        senteval_dir: SentEval's ``data/downstream`` folder (or its parent).
        split: ``"test"`` for every task; STS-B and SICK-R also have ``"train"`` and ``"dev"``.
        check_sizes: every file must have SentEval's line count and scored-pair count (:mod:`eval.senteval_sizes`);
            ``False`` for your own STS-format files (pairs dropped for a blank line or gold score are then logged).
            Default: on unless ``SENTEVAL_CHECK_SIZES=0``.

    Expected test-split pair counts on the real data: STS12 3108, STS13 1500, STS14 3750, STS15 3000,
    STS16 1186, STS-B 1379, SICK-R 4927; dev: STS-B 1500, SICK-R 500.

    The parsed pairs are cached per file (path, modification time, size, inode): a second call with unchanged
    files reads nothing and returns the same :class:`STSPairs` object, which callers must not modify.

    Raises:
        SentEvalDataError: missing or malformed data (the message names the file, the line and the fix).
        ValueError: unknown task, or a split the task does not have.
    """
    check = check_sizes_default() if check_sizes is None else check_sizes
    if task in STS_YEAR_SUBSETS:
        if split != "test":
            raise ValueError(f"{task} has only a test split (dev-time evaluation uses {' and '.join(DEV_TASKS)})")
    elif task not in _TABLES:
        raise ValueError(f"unknown STS task {task!r}; choose from {', '.join(STS_TASKS)}")
    root = resolve_senteval_dir(senteval_dir)
    stamps = _file_stamps(_task_files(task, root, split))
    key = (task, split, check, str(root.absolute()))
    cached = _PAIRS_CACHE.get(key)
    if cached is not None and stamps is not None and cached[0] == stamps:
        return cached[1]
    pairs = _load_sts_year(task, root, check) if task in STS_YEAR_SUBSETS else _load_table(task, root, split, check)
    if stamps is not None:
        _PAIRS_CACHE[key] = (stamps, pairs)
    return pairs


_FileStamp = tuple[str, int, int, int]
_PAIRS_CACHE: dict[tuple[str, str, bool, str], tuple[tuple[_FileStamp, ...], STSPairs]] = {}
"""The pairs :func:`load_sts` parsed, by (task, split, size check, folder), with the stamps of the files they came
from: a training run's dev evaluations (and the pre-flight check before them) read and parse each file once."""


def _task_files(task: str, root: Path, split: str) -> list[Path]:
    """Every file :func:`load_sts` reads for ``task``'s ``split``."""
    if task in STS_YEAR_SUBSETS:
        folder = _year_folder(task, root)
        return [path for subset in STS_YEAR_SUBSETS[task] for path in _subset_paths(folder, subset)]
    return [_table_path(task, root, split)]


def _file_stamps(paths: Sequence[Path]) -> tuple[_FileStamp, ...] | None:
    """(absolute path, mtime in ns, size, inode) of each file: a changed or replaced file changes its stamp; ``None``
    when one cannot be read (nothing is cached, and the loader reports the missing file)."""
    stamps = []
    for path in paths:
        try:
            stat = path.stat()
        except OSError:
            return None
        stamps.append((str(path.absolute()), stat.st_mtime_ns, stat.st_size, stat.st_ino))
    return tuple(stamps)


# ----------------------------------------------------------------------------------------------- metrics


def unit_rows(embeddings: torch.Tensor) -> torch.Tensor:
    """Each row of ``embeddings`` L2-normalised, in float64 (a zero row stays zero), where the rows are."""
    rows = embeddings.to(torch.float64)
    return rows / rows.norm(dim=1, keepdim=True).clamp_min(1e-12)


def cosine_scores(e1: np.ndarray, e2: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity of two [n, d] arrays: L2-normalise each row, then a row-wise dot product."""
    a, b = (unit_rows(torch.as_tensor(np.asarray(e))) for e in (e1, e2))
    return (a * b).sum(dim=1).numpy()


def nan_spearman_note(pairs: str) -> str:
    """What a nan score means, said under one (``pairs``: whose similarities were constant, e.g. ``dev pair``)."""
    return (f"the model gives every {pairs} the same cosine similarity (or a non-finite one), so Spearman's "
            f"correlation is undefined: its embeddings do not tell the sentences apart.")


def spearman_all(pred: np.ndarray, gold: np.ndarray) -> float:
    """Spearman's rho x 100 over all pairs at once (ties get average ranks, as ``scipy.stats.spearmanr``).

    Called on the concatenation of a year's subsets this is SimCSE's "all" aggregation - not the mean of
    per-subset correlations. Undefined (nan) where either side is constant, returned without scipy's
    ConstantInputWarning: a training run's summary and ``python -m eval`` say what a nan score means
    (:func:`nan_spearman_note`). scipy.stats is imported at the first call: it took 1.1 s of the training scripts'
    8.4 s of imports (2-core AMD EPYC), before ``--help``, an argument error or a run without evaluation.
    """
    from scipy.stats import spearmanr  # imported here: a training script needs it only once it evaluates

    if np.ptp(pred) == 0 or np.ptp(gold) == 0:
        return float("nan")
    return float(spearmanr(pred, gold).statistic * 100.0)


# ----------------------------------------------------------------------------------------------- evaluation


def distinct_sentences(pairs: Mapping[str, STSPairs]) -> list[str]:
    """Every distinct sentence of the tasks' pairs, in first-seen order: what an STS evaluation encodes."""
    return list(dict.fromkeys(s for p in pairs.values() for s in (*p.sent1, *p.sent2)))


@dataclass(frozen=True)
class _ScoringPlan:
    """What scoring a set of tasks needs besides the embeddings, worked out once per set of loaded pairs: every
    distinct sentence (first-seen order: what is encoded) and the rows of each pair's two sentences among them, all
    tasks' pairs one after another (task ``k``'s from ``ends[k - 1]`` to ``ends[k]``)."""

    pairs: Mapping[str, STSPairs]
    sentences: list[str]
    first: torch.Tensor
    second: torch.Tensor
    ends: list[int]
    _on_device: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)

    @classmethod
    def build(cls, pairs: Mapping[str, STSPairs]) -> _ScoringPlan:
        sentences = distinct_sentences(pairs)
        row = {sentence: i for i, sentence in enumerate(sentences)}
        first, second = (torch.tensor([row[s] for p in pairs.values() for s in getattr(p, side)], dtype=torch.long)
                         for side in ("sent1", "sent2"))
        return cls(dict(pairs), sentences, first, second, np.cumsum([len(p) for p in pairs.values()]).tolist())

    def serves(self, pairs: Mapping[str, STSPairs]) -> bool:
        """Whether this plan was built for exactly these pair objects (:func:`load_sts` returns the cached ones)."""
        return list(self.pairs) == list(pairs) and all(self.pairs[task] is pairs[task] for task in pairs)

    def rows_on(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """:attr:`first` and :attr:`second` on ``device`` (copied there once)."""
        if device not in self._on_device:
            self._on_device[device] = (self.first.to(device), self.second.to(device))
        return self._on_device[device]


_last_plan: _ScoringPlan | None = None
"""The last evaluation's plan: a training run's dev evaluations build it once."""


def _scoring_plan(pairs: Mapping[str, STSPairs], split: str) -> _ScoringPlan:
    global _last_plan
    if _last_plan is None or not _last_plan.serves(pairs):
        for task, p in pairs.items():
            logger.info("%s (%s): %d pairs", task, split, len(p))
        _last_plan = _ScoringPlan.build(pairs)
    return _last_plan


def _embed(encoder: SupportsEncode, sentences: list[str], show_progress: bool, desc: str) -> torch.Tensor:
    """The sentences' embeddings as a tensor: where the encoder computed them when it offers ``encode_tensor``
    (:meth:`eval.encoder.SentenceEncoder.encode_tensor`: on the device, not copied), else its ``encode`` array."""
    encode_tensor = getattr(encoder, "encode_tensor", None)
    if encode_tensor is not None:
        return encode_tensor(sentences, show_progress=show_progress, desc=desc)
    return torch.as_tensor(np.asarray(encoder.encode(sentences, show_progress=show_progress, desc=desc)))


def _cosine_by_task(encoder: SupportsEncode, plan: _ScoringPlan, show_progress: bool, desc: str
                    ) -> dict[str, np.ndarray]:
    """Encode every distinct sentence of every task in one call, then score every task's pairs where the
    embeddings are (each embedding normalised once, the pairs' rows gathered; :func:`cosine_scores`' arithmetic)
    and copy the cosines to the host at once: the embeddings never leave the device."""
    embeddings = _embed(encoder, plan.sentences, show_progress, desc)
    first, second = plan.rows_on(embeddings.device)
    with torch.inference_mode():
        unit = unit_rows(embeddings)
        cosines = (unit[first] * unit[second]).sum(dim=1).cpu().numpy()
    return dict(zip(plan.pairs, np.split(cosines, plan.ends[:-1])))


def evaluate_sts(
    encoder: SupportsEncode,
    senteval_dir: str | os.PathLike[str],
    tasks: Sequence[str] = STS_TASKS,
    split: str = "test",
    show_progress: bool = True,
    check_sizes: bool | None = None,
) -> dict[str, float]:
    """Cosine-Spearman x 100 of each task (STS12-16 in the "all" setting) plus ``"avg"``, their mean.

    All sentences of all requested tasks are encoded in a single :meth:`encode` call, each distinct sentence once.
    ``check_sizes``: see :func:`load_sts`. Repeated evaluations of unchanged files (a training run's dev
    evaluations) parse nothing and reuse the sentence list and pair rows (:class:`_ScoringPlan`).
    """
    tasks = tuple(tasks)
    if not tasks:
        raise ValueError("evaluate_sts needs at least one task")
    pairs = {task: load_sts(task, senteval_dir, split, check_sizes) for task in tasks}
    predictions = _cosine_by_task(encoder, _scoring_plan(pairs, split), show_progress, desc=f"STS {split}")
    results = {task: spearman_all(predictions[task], pairs[task].scores) for task in tasks}
    results["avg"] = float(np.mean([results[task] for task in tasks]))
    return results


def table_average(results: Mapping[str, float], tasks: Sequence[str]) -> float:
    """The "Avg." of the printed STS table as SimCSE's ``evaluation.py`` computes it: the mean of the tasks' scores
    as the table shows them, each rounded to 2 decimals (``"%.2f"``), so that the printed row adds up (the mean of
    the unrounded scores, :func:`evaluate_sts`'s ``avg``, differs from it by 0.01 in about 8 % of rows). NaN where a
    task's score is NaN, as there."""
    return float(np.mean([round(results[task], 2) for task in tasks]))


#: What :func:`evaluate_sts_dev` reports (the training's dev evaluation; ``--metric_for_best_model`` picks one).
DEV_METRICS: tuple[str, ...] = ("stsb_spearman", "sickr_spearman", "avg_sts")


def evaluate_sts_dev(
    encoder: SupportsEncode, senteval_dir: str | os.PathLike[str], show_progress: bool = False,
    check_sizes: bool | None = None,
) -> dict[str, float]:
    """In-training evaluation: STS-B dev and SICK-R dev only (about 4k sentences, not the ~37k of all STS).

    Returns ``{"stsb_spearman", "sickr_spearman", "avg_sts"}``, all Spearman x 100.
    """
    results = evaluate_sts(encoder, senteval_dir, tasks=DEV_TASKS, split="dev", show_progress=show_progress,
                           check_sizes=check_sizes)
    return dict(zip(DEV_METRICS, (results["STSBenchmark"], results["SICKRelatedness"], results["avg"])))
