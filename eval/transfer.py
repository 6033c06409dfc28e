"""SentEval transfer tasks: MR, CR, SUBJ, MPQA, SST-2, TREC, MRPC with a logistic regression on frozen embeddings.

The protocol of SentEval (Conneau & Kiela, 2018) as SimCSE (Gao et al., 2021, Appendix E) runs it and ESimCSE
(Table 11) and DiffCSE (Table 2 test accuracies; Tables 3-6 dev accuracies) report it (REFERENCE.md, "Evaluation
protocol"):

- MR, CR, SUBJ, MPQA (``BinaryClassifierEval``): nested stratified k-fold. The outer folds give the test
  accuracy; inside each outer training set a k-fold cross-validation picks the L2 penalty from 1e-5..1e-2; the
  reported test accuracy is the mean over outer folds, the dev accuracy the mean of the per-fold best CV scores.
- TREC, MRPC (``KFoldClassifier``): k-fold cross-validation on the training set picks the penalty; a classifier
  trained on the whole training set (5% held out for early stopping) is scored on the test set. MRPC's
  features are ``np.c_[|u - v|, u * v]``; its F1 is that of the positive (paraphrase) class.
- SST-2 (``SplitClassifier``): the penalty with the best dev accuracy; its classifier scores the test set.
  (SentEval refits with the chosen penalty and the same seed, which reproduces the same model: we reuse it.)
- Folds are ``StratifiedKFold(k, shuffle=True, random_state=seed)`` over the rows in SentEval's order: each split
  sorted by (token count, label) - MRPC by (count of A, count of B, label) - as SentEval sorts before encoding.
  With the same seed our folds are SentEval's folds. (SentEval hard-codes 1111 for the nested k-fold; ``seed``
  replaces it - the default is 1111.)
- Accuracies are rounded as SentEval rounds them: ``round(100 * acc, 2)`` per fold / per grid point.

Modes (SimCSE's ``evaluation.py``): ``"test"`` = 10 folds, Adam, batch 64, tenacity 5, epoch size 4;
``"fasttest"`` = 5 folds, RMSprop, batch 128, tenacity 3, epoch size 2; ``"dev"`` = fasttest settings, but the
dev accuracies are what is reported (what SimCSE's trainer logs with ``--eval_transfer``). The classifier is
:mod:`eval.classifier`.

Data files (one sentence a line; SentEval's ``io.open`` encodings): ``MR/rt-polarity.{pos,neg}``,
``CR/custrev.{pos,neg}``, ``SUBJ/subj.{objective,subjective}``, ``MPQA/mpqa.{pos,neg}`` (latin-1; blank lines are
kept as empty sentences, as SentEval keeps them: CR has 3775 rows, MPQA 10606);
``SST/binary/sentiment-{train,dev,test}`` (utf-8, ``sentence<TAB>label``); ``TREC/{train_5500,TREC_10}.label``
(latin-1, ``COARSE:fine question``); ``MRPC/msr_paraphrase_{train,test}.txt`` (utf-8, header, label column 0,
sentences columns 3 and 4). In these three, blank lines carry no label and are skipped (SentEval would crash on
them); any other line that does not parse is an error naming the file and line. Row counts are checked against
SentEval's release (``check_sizes``) to catch truncated downloads.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np
from sklearn.metrics import f1_score
from sklearn.model_selection import StratifiedKFold
from tqdm.auto import tqdm

from eval.classifier import (
    SENTEVAL_CONFIGS,
    FitSpec,
    Fitter,
    FittedModel,
    SentEvalLogReg,
    SklearnLogReg,
    accuracy,
)
from eval.sts import DATA_HINT, SentEvalDataError, SupportsEncode, resolve_senteval_dir

logger = logging.getLogger(__name__)

TRANSFER_TASKS: tuple[str, ...] = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")
"""The seven transfer tasks, in the papers' column order."""

MODES: tuple[str, ...] = ("dev", "fasttest", "test")

_REDOWNLOAD = "the file is corrupted or truncated - re-download it (bash data/download_senteval.sh)"


# ----------------------------------------------------------------------------------------------- data


@dataclass
class Split:
    """Labelled rows of one split: ``columns`` holds one sentence list (two for MRPC's pairs)."""

    columns: tuple[list[str], ...]
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)


@dataclass
class TransferTask:
    """A task's splits and protocol: ``"nested"`` (split ``all``), ``"kfold"`` (train/test) or ``"split"``."""

    name: str
    protocol: str
    nclasses: int
    splits: dict[str, Split]


@dataclass(frozen=True)
class _FileSpec:
    path: str
    encoding: str
    rows: int


_BINARY_FILES: dict[str, tuple[_FileSpec, _FileSpec]] = {
    # (label-1 file, label-0 file), SentEval's order: samples = first + second
    "MR": (_FileSpec("MR/rt-polarity.pos", "latin-1", 5331), _FileSpec("MR/rt-polarity.neg", "latin-1", 5331)),
    "CR": (_FileSpec("CR/custrev.pos", "latin-1", 2407), _FileSpec("CR/custrev.neg", "latin-1", 1368)),
    "SUBJ": (
        _FileSpec("SUBJ/subj.objective", "latin-1", 5000),
        _FileSpec("SUBJ/subj.subjective", "latin-1", 5000),
    ),
    "MPQA": (_FileSpec("MPQA/mpqa.pos", "latin-1", 3312), _FileSpec("MPQA/mpqa.neg", "latin-1", 7294)),
}
_SST_FILES = {s: _FileSpec(f"SST/binary/sentiment-{s}", "utf-8", n) for s, n in
              (("train", 67349), ("dev", 872), ("test", 1821))}
_TREC_FILES = {"train": _FileSpec("TREC/train_5500.label", "latin-1", 5452),
               "test": _FileSpec("TREC/TREC_10.label", "latin-1", 500)}
_MRPC_FILES = {"train": _FileSpec("MRPC/msr_paraphrase_train.txt", "utf-8", 4076),
               "test": _FileSpec("MRPC/msr_paraphrase_test.txt", "utf-8", 1725)}
TREC_CLASSES: tuple[str, ...] = ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM")


def senteval_tokens(sentence: str) -> list[str]:
    """SentEval's tokenisation: split on whitespace (the batcher joins the tokens back with single spaces)."""
    return sentence.split()


def _read_lines(root: Path, spec: _FileSpec, splitlines: bool) -> tuple[Path, list[str]]:
    """A SentEval file's lines, split as SentEval splits them.

    ``splitlines=True``: ``f.read().splitlines()`` (the binary tasks); otherwise ``for line in f`` in text mode,
    which breaks lines only at ``\n``, ``\r\n`` and ``\r`` (SST, TREC, MRPC).
    """
    path = root / spec.path
    if not path.is_file():
        raise SentEvalDataError(f"SentEval file not found: {path}; {DATA_HINT}")
    raw = path.read_bytes()
    try:
        text = raw.decode(spec.encoding)
    except UnicodeDecodeError as err:
        lineno = raw[: err.start].count(b"\n") + 1
        raise SentEvalDataError(f"{path}:{lineno}: not valid {spec.encoding}; {_REDOWNLOAD}") from None
    if splitlines:
        return path, text.splitlines()
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return path, lines[:-1] if lines and lines[-1] == "" else lines


def _check_size(path: Path, n_rows: int, spec: _FileSpec, check_sizes: bool) -> None:
    """Reject a row count other than SentEval's release (a truncated or modified file)."""
    if check_sizes and n_rows != spec.rows:
        raise SentEvalDataError(
            f"{path}: {n_rows} rows, SentEval's release has {spec.rows}; {_REDOWNLOAD} "
            f"(pass check_sizes=False for a modified copy)"
        )


def _senteval_order(columns: tuple[list[str], ...], labels: list[int]) -> Split:
    """Sort rows by (token count of each column, label), stably, as SentEval sorts before encoding."""
    def key(i: int) -> tuple[int, ...]:
        return (*(len(senteval_tokens(col[i])) for col in columns), labels[i])

    order = sorted(range(len(labels)), key=key)
    return Split(
        columns=tuple([col[i] for i in order] for col in columns),
        labels=np.asarray([labels[i] for i in order], dtype=np.int64),
    )


def _joined(text: str) -> str:
    return " ".join(senteval_tokens(text))


def _malformed(path: Path, lineno: int, what: str) -> SentEvalDataError:
    return SentEvalDataError(f"{path}:{lineno}: {what}; {_REDOWNLOAD}")


def _load_binary(name: str, root: Path, check_sizes: bool) -> TransferTask:
    sentences: list[str] = []
    labels: list[int] = []
    for label, spec in zip((1, 0), _BINARY_FILES[name]):
        path, lines = _read_lines(root, spec, splitlines=True)
        _check_size(path, len(lines), spec, check_sizes)
        sentences += [_joined(line) for line in lines]
        labels += [label] * len(lines)
    return TransferTask(name, "nested", 2, {"all": _senteval_order((sentences,), labels)})


def _parse_sst_line(path: Path, lineno: int, line: str) -> tuple[str, int]:
    fields = line.strip().split("\t")
    if len(fields) != 2 or fields[1] not in ("0", "1"):
        raise _malformed(path, lineno, f"expected 'sentence<TAB>0|1', found {line[:80]!r}")
    return _joined(fields[0]), int(fields[1])


def _parse_trec_line(path: Path, lineno: int, line: str) -> tuple[str, int]:
    target, _, rest = line.strip().partition(":")
    fine_and_question = rest.split(" ", 1)
    if target not in TREC_CLASSES or len(fine_and_question) != 2:
        raise _malformed(path, lineno, f"expected 'COARSE:fine question' with COARSE in {TREC_CLASSES}, "
                                       f"found {line[:80]!r}")
    return _joined(fine_and_question[1]), TREC_CLASSES.index(target)


def _parse_mrpc_line(path: Path, lineno: int, line: str) -> tuple[str, str, int]:
    fields = line.strip().split("\t")
    if len(fields) < 5 or fields[0] not in ("0", "1"):
        raise _malformed(path, lineno, f"expected 'Quality<TAB>#1 ID<TAB>#2 ID<TAB>#1 String<TAB>#2 String' with "
                                       f"Quality 0|1, found {len(fields)} fields")
    return _joined(fields[3]), _joined(fields[4]), int(fields[0])


def _load_rows(
    root: Path, spec: _FileSpec, parse: Callable[[Path, int, str], tuple[object, ...]], check_sizes: bool,
    header: bool = False,
) -> Split:
    """Parse every non-blank row of a labelled file (last field = label), rows in SentEval's order."""
    path, lines = _read_lines(root, spec, splitlines=False)
    if header and (not lines or not lines[0].lstrip("\ufeff").startswith("Quality")):
        raise _malformed(path, 1, "missing the 'Quality ...' header line")
    first = 2 if header else 1
    rows = [parse(path, lineno, line) for lineno, line in enumerate(lines[first - 1:], start=first) if line.strip()]
    _check_size(path, len(rows), spec, check_sizes)
    if not rows:
        raise SentEvalDataError(f"{path}: no rows; {_REDOWNLOAD}")
    *columns, labels = zip(*rows)
    return _senteval_order(tuple(list(c) for c in columns), list(labels))


def load_transfer_task(name: str, senteval_dir: str | os.PathLike[str], check_sizes: bool = True) -> TransferTask:
    """Read one transfer task from SentEval's ``data/downstream`` folder, rows in SentEval's order.

    Raises:
        SentEvalDataError: a missing file, a malformed line (file and line named) or, with ``check_sizes``, a row
            count other than SentEval's release (a truncated download).
        ValueError: an unknown task name.
    """
    root = resolve_senteval_dir(senteval_dir)
    if name in _BINARY_FILES:
        return _load_binary(name, root, check_sizes)
    if name == "SST2":
        splits = {s: _load_rows(root, f, _parse_sst_line, check_sizes) for s, f in _SST_FILES.items()}
        return TransferTask(name, "split", 2, splits)
    if name == "TREC":
        splits = {s: _load_rows(root, f, _parse_trec_line, check_sizes) for s, f in _TREC_FILES.items()}
        return TransferTask(name, "kfold", len(TREC_CLASSES), splits)
    if name == "MRPC":
        splits = {s: _load_rows(root, f, _parse_mrpc_line, check_sizes, header=True) for s, f in _MRPC_FILES.items()}
        return TransferTask(name, "kfold", 2, splits)
    raise ValueError(f"unknown transfer task {name!r}; choose from {', '.join(TRANSFER_TASKS)}")


# ----------------------------------------------------------------------------------------------- features


def pair_features(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """SentEval's MRPC features ``np.c_[|u - v|, u * v]`` ([n, 2d])."""
    return np.concatenate([np.abs(u - v), u * v], axis=1)


def embed_task(encoder: SupportsEncode, task: TransferTask, show_progress: bool = False) -> dict[str, np.ndarray]:
    """Features of every split from one ``encode`` call over all of the task's sentences."""
    sentences = list(dict.fromkeys(s for split in task.splits.values() for col in split.columns for s in col))
    row = {s: i for i, s in enumerate(sentences)}
    embeddings = np.asarray(encoder.encode(sentences, show_progress=show_progress, desc=f"encode {task.name}"))
    features = {}
    for name, split in task.splits.items():
        columns = [embeddings[[row[s] for s in col]] for col in split.columns]
        features[name] = columns[0] if len(columns) == 1 else pair_features(*columns)
    return features


# ----------------------------------------------------------------------------------------------- protocols


@dataclass
class TaskResult:
    """Dev and test accuracy (percent, 2 decimals); ``f1`` for MRPC; ``test``/``f1`` are None in dev mode.

    ``fold_tests`` holds the nested k-fold's per-outer-fold test accuracies (their spread is the fold noise).
    """

    dev: float
    test: float | None = None
    f1: float | None = None
    fold_tests: list[float] = field(default_factory=list)


def stratified_folds(y: np.ndarray, k: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """SentEval's folds: ``StratifiedKFold(k, shuffle=True, random_state=seed)`` over the rows in given order."""
    splitter = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
    return list(splitter.split(np.zeros((len(y), 1)), y))


def _percent(value: float) -> float:
    return round(100.0 * float(value), 2)


def _grid_scores(models: Sequence[FittedModel], n_grid: int) -> np.ndarray:
    """``round(100 * mean validation accuracy, 2)`` per grid point; ``models`` are grid-major."""
    acc = np.asarray([m.val_accuracy for m in models]).reshape(n_grid, -1)
    return np.round(100.0 * acc.mean(axis=1), 2)


def nested_kfold(
    X: np.ndarray, y: np.ndarray, nclasses: int, fitter: Fitter, k: int, seed: int, with_test: bool = True,
    progress: Callable[[], None] = lambda: None,
) -> TaskResult:
    """SentEval's ``InnerKFoldClassifier`` (MR, CR, SUBJ, MPQA): outer folds for test, inner folds pick L2."""
    grid = fitter.grid("nested")
    dev_scores, final_specs, outer_test = [], [], []
    for train_idx, test_idx in stratified_folds(y, k, seed):
        inner = stratified_folds(y[train_idx], k, seed)
        specs = [FitSpec(train_idx[tr], train_idx[va], reg) for reg in grid for tr, va in inner]
        scores = _grid_scores(fitter.fit(X, y, specs, nclasses), len(grid))
        best = int(np.argmax(scores))
        dev_scores.append(scores[best])
        final_specs.append(FitSpec(train_idx, None, grid[best]))
        outer_test.append(test_idx)
        progress()
    dev = round(float(np.mean(dev_scores)), 2)
    if not with_test:
        return TaskResult(dev=dev)
    finals = fitter.fit(X, y, final_specs, nclasses)
    test = [_percent(accuracy(m, X[idx], y[idx])) for m, idx in zip(finals, outer_test)]
    return TaskResult(dev=dev, test=round(float(np.mean(test)), 2), fold_tests=test)


def kfold_then_test(
    train: tuple[np.ndarray, np.ndarray], test: tuple[np.ndarray, np.ndarray], nclasses: int, fitter: Fitter,
    k: int, seed: int, with_test: bool = True, f1: bool = False,
) -> TaskResult:
    """SentEval's ``KFoldClassifier`` (TREC, MRPC): k-fold CV on train picks L2, then train on all, score test."""
    (X, y), (X_test, y_test) = train, test
    grid = fitter.grid("kfold")
    folds = stratified_folds(y, k, seed)
    specs = [FitSpec(tr, va, reg) for reg in grid for tr, va in folds]
    scores = _grid_scores(fitter.fit(X, y, specs, nclasses), len(grid))
    best = int(np.argmax(scores))
    result = TaskResult(dev=float(scores[best]))
    if with_test:
        (model,) = fitter.fit(X, y, [FitSpec(np.arange(len(y)), None, grid[best])], nclasses)
        predictions = model.predict(X_test)
        result.test = _percent(np.mean(predictions == y_test))
        result.f1 = _percent(f1_score(y_test, predictions)) if f1 else None
    return result


def train_dev_test(
    splits: Mapping[str, tuple[np.ndarray, np.ndarray]], nclasses: int, fitter: Fitter, with_test: bool = True
) -> TaskResult:
    """SentEval's ``SplitClassifier`` (SST-2): the L2 with the best dev accuracy; its model scores test."""
    (X_train, y_train), (X_dev, y_dev) = splits["train"], splits["dev"]
    X = np.concatenate([X_train, X_dev])
    y = np.concatenate([y_train, y_dev])
    train_idx, dev_idx = np.arange(len(y_train)), np.arange(len(y_train), len(y))
    grid = fitter.grid("split")
    models = fitter.fit(X, y, [FitSpec(train_idx, dev_idx, reg) for reg in grid], nclasses)
    scores = _grid_scores(models, len(grid))
    best = int(np.argmax(scores))
    result = TaskResult(dev=float(scores[best]))
    if with_test:
        X_test, y_test = splits["test"]
        result.test = _percent(accuracy(models[best], X_test, y_test))
    return result


def run_task(
    task: TransferTask, features: Mapping[str, np.ndarray], fitter: Fitter, k: int, seed: int,
    with_test: bool = True, show_progress: bool = False,
) -> TaskResult:
    """Apply the task's protocol to precomputed features."""
    labelled = {name: (features[name], split.labels) for name, split in task.splits.items()}
    if task.protocol == "nested":
        with tqdm(total=k, desc=f"{task.name} folds", disable=not show_progress) as bar:
            X, y = labelled["all"]
            return nested_kfold(X, y, task.nclasses, fitter, k, seed, with_test, progress=lambda: bar.update(1))
    if task.protocol == "kfold":
        return kfold_then_test(labelled["train"], labelled["test"], task.nclasses, fitter, k, seed, with_test,
                               f1=task.name == "MRPC")
    return train_dev_test(labelled, task.nclasses, fitter, with_test)


# ----------------------------------------------------------------------------------------------- entry points


def make_fitter(mode: str, backend: str = "senteval", seed: int = 1111, device: str | None = None) -> Fitter:
    """The classifier for a mode: SentEval's optimiser-trained one, or scikit-learn (``backend="sklearn"``)."""
    if mode not in MODES:
        raise ValueError(f"unknown transfer mode {mode!r}; choose from {', '.join(MODES)}")
    if backend == "senteval":
        return SentEvalLogReg(SENTEVAL_CONFIGS[mode], seed=seed, device=device)
    if backend == "sklearn":
        return SklearnLogReg(seed=seed)
    raise ValueError(f"unknown classifier backend {backend!r}; choose 'senteval' or 'sklearn'")


def _summarise(results: Mapping[str, TaskResult], mode: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, result in results.items():
        if mode == "dev":
            out[name] = result.dev
        else:
            out[name] = float(result.test)  # type: ignore[arg-type]
            out[f"{name}_dev"] = result.dev
        if result.f1 is not None:
            out[f"{name}_F1"] = result.f1
    out["transfer_avg"] = round(float(np.mean([out[name] for name in results])), 2)
    return out


def evaluate_transfer(
    encoder: SupportsEncode,
    senteval_dir: str | os.PathLike[str],
    mode: str,
    tasks: Sequence[str] | None = None,
    seed: int = 1111,
    *,
    backend: str = "senteval",
    device: str | None = None,
    check_sizes: bool = True,
    show_progress: bool = True,
) -> dict[str, float]:
    """Run SentEval's transfer tasks on frozen embeddings of ``encoder``.

    Args:
        encoder: anything with ``encode(sentences, show_progress, desc) -> [n, d]``; each task is encoded in one
            call, then only the classifier runs.
        senteval_dir: SentEval's ``data/downstream`` folder (or its parent).
        mode: ``"test"`` (10 folds, Adam), ``"fasttest"`` (5 folds, RMSprop) or ``"dev"`` (fasttest settings).
        tasks: a subset of :data:`TRANSFER_TASKS` (default: all seven).
        seed: SentEval's seed (folds, initialisation, batch order).
        backend: ``"senteval"`` (the optimiser-trained classifier) or ``"sklearn"`` (SentEval's sklearn path).
        device: classifier device; CUDA when available by default.
        check_sizes: reject files whose row counts differ from SentEval's release (truncated downloads).

    Returns:
        ``"test"``/``"fasttest"``: test accuracy (percent, 2 decimals) under each task name (``"MR"``, ...,
        ``"MRPC"``), the dev accuracy under ``"<task>_dev"``, ``"MRPC_F1"``, and ``"transfer_avg"``, the mean of
        the task accuracies. ``"dev"``: the **dev** accuracies under the task names (no test set is touched, no
        ``MRPC_F1``) and ``"transfer_avg"`` their mean - what SimCSE's evaluation prints in dev mode.
    """
    tasks = tuple(tasks) if tasks is not None else TRANSFER_TASKS
    fitter = make_fitter(mode, backend, seed, device)
    k = SENTEVAL_CONFIGS[mode].kfold
    results: dict[str, TaskResult] = {}
    for name in tasks:
        start = time.perf_counter()
        task = load_transfer_task(name, senteval_dir, check_sizes)
        features = embed_task(encoder, task, show_progress)
        results[name] = run_task(task, features, fitter, k, seed, with_test=mode != "dev", show_progress=show_progress)
        logger.info("%s (%s): %s [%.1fs]", name, mode, results[name], time.perf_counter() - start)
    return _summarise(results, mode)


def transfer_dev_metrics(tasks: Sequence[str] = TRANSFER_TASKS) -> tuple[str, ...]:
    """What :func:`evaluate_transfer_dev` reports over ``tasks``: each task's dev accuracy and their mean (the F1 of
    MRPC needs its test split)."""
    return (*tasks, "transfer_avg")


def evaluate_transfer_dev(
    encoder: SupportsEncode, senteval_dir: str | os.PathLike[str], tasks: Sequence[str] | None = None
) -> dict[str, float]:
    """In-training transfer evaluation (SimCSE's ``--eval_transfer``): dev accuracies with fasttest settings.

    Returns ``{"MR": ..., ..., "MRPC": ..., "transfer_avg": ...}`` (percent).
    """
    return evaluate_transfer(encoder, senteval_dir, "dev", tasks, show_progress=False)
