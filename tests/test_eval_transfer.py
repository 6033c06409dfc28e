"""Transfer tasks (eval.transfer) and SentEval's classifier (eval.classifier): folds, training loop, readers."""
from __future__ import annotations

import copy
import dataclasses
import zlib
from pathlib import Path
from typing import Sequence

import numpy as np
import pytest
import torch

from eval.classifier import (
    L2_GRID,
    SENTEVAL_CONFIGS,
    ClassifierConfig,
    FitSpec,
    SentEvalLogReg,
    SklearnLogReg,
    fit_many,
    init_linear,
)
from eval.sts import SentEvalDataError
from eval.transfer import (
    TRANSFER_TASKS,
    evaluate_transfer,
    evaluate_transfer_dev,
    load_transfer_task,
    pair_features,
    stratified_folds,
)


class HashingEncoder:
    """A cheap deterministic encoder: signed hashed bag of words (no model), and a call counter."""

    def __init__(self, dim: int = 64) -> None:
        self.dim = dim
        self.calls = 0

    def encode(self, sentences: Sequence[str], show_progress: bool = False, desc: str | None = None) -> np.ndarray:
        self.calls += 1
        out = np.zeros((len(sentences), self.dim), dtype=np.float32)
        for i, sentence in enumerate(sentences):
            for word in sentence.lower().split():
                h = zlib.crc32(word.encode("utf-8"))
                out[i, h % self.dim] += 1.0 if (h >> 16) & 1 else -1.0
        return out


# ----------------------------------------------------------------------------------------------- folds


def test_folds_are_stratified_and_deterministic() -> None:
    y = np.array([0] * 30 + [1] * 70 + [2] * 20)
    folds = stratified_folds(y, 5, seed=1111)
    again = stratified_folds(y, 5, seed=1111)
    other = stratified_folds(y, 5, seed=7)
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(folds, again))
    assert not all(np.array_equal(a[1], b[1]) for a, b in zip(folds, other))
    test_rows = np.concatenate([test for _, test in folds])
    assert sorted(test_rows.tolist()) == list(range(len(y)))  # a partition
    for train, test in folds:
        assert not set(train) & set(test)
        # 120 rows / 5 folds: each test fold holds exactly 6 / 14 / 4 of the classes (30/5, 70/5, 20/5)
        assert np.bincount(y[test], minlength=3).tolist() == [6, 14, 4]


# ----------------------------------------------------------------------------------------------- classifier


def test_init_linear_is_nn_linear_after_manual_seed() -> None:
    with torch.random.fork_rng():
        torch.manual_seed(1111)
        reference = torch.nn.Linear(7, 3)
    weight, bias = init_linear(7, 3, seed=1111)
    assert torch.equal(weight, reference.weight.data) and torch.equal(bias, reference.bias.data)


def _senteval_reference_fit(X: np.ndarray, y: np.ndarray, spec: FitSpec, nclasses: int,
                            config: ClassifierConfig, seed: int = 1111) -> tuple[np.ndarray, np.ndarray, float]:
    """SentEval's PyTorchClassifier.fit for one model, written with torch.optim (the oracle for fit_many)."""
    rng = np.random.RandomState(seed)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = torch.nn.Linear(X.shape[1], nclasses)
    optimizer = (torch.optim.Adam if config.optim == "adam" else torch.optim.RMSprop)(model.parameters())
    optimizer.param_groups[0]["weight_decay"] = spec.reg
    train_idx, val_idx = spec.train_idx, spec.val_idx
    if val_idx is None:
        permutation = rng.permutation(len(train_idx))
        n_dev = int(config.validation_split * len(train_idx))
        train_idx, val_idx = train_idx[permutation[n_dev:]], train_idx[permutation[:n_dev]]
    X_train, y_train = torch.tensor(X[train_idx]), torch.tensor(y[train_idx])
    X_val, y_val = torch.tensor(X[val_idx]), torch.tensor(y[val_idx])
    n_epoch, best, stop, misses, best_model = 0, -1.0, False, 0, None
    while not stop and n_epoch <= config.max_epoch:
        for _ in range(config.epoch_size):
            permutation = rng.permutation(len(X_train))
            for i in range(0, len(X_train), config.batch_size):
                idx = torch.from_numpy(permutation[i:i + config.batch_size])
                loss = torch.nn.functional.cross_entropy(model(X_train[idx]), y_train[idx])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        n_epoch += config.epoch_size
        with torch.no_grad():
            acc = (model(X_val).argmax(1) == y_val).double().mean().item()
        if acc > best:
            best, best_model = acc, copy.deepcopy(model)
        else:
            stop = misses >= config.tenacity
            misses += 1
    return best_model.weight.detach().numpy(), best_model.bias.detach().numpy(), best


@pytest.mark.parametrize("mode", ["test", "fasttest"])
def test_fit_many_equals_one_model_at_a_time(mode: str, torch_single_thread: None) -> None:
    """Side-by-side training reproduces SentEval's loop model by model (init, batches, Adam/RMSprop, stopping)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(240, 6)).astype(np.float32)
    y = (X @ rng.normal(size=(6, 3)) + rng.normal(size=(240, 3))).argmax(1)
    specs = [
        FitSpec(np.arange(160), np.arange(160, 240), 1e-5),
        FitSpec(np.arange(160), np.arange(160, 240), 1e-2),
        FitSpec(np.arange(40, 240), None, 1e-3),  # SentEval's validation_split=0.05
        FitSpec(np.arange(70), np.arange(70, 240), 0.1),  # fewer batches per pass than the others
    ]
    config = dataclasses.replace(SENTEVAL_CONFIGS[mode], max_epoch=24)  # keeps the reference loop short
    models = fit_many(X, y, specs, 3, config, device="cpu")
    for spec, model in zip(specs, models):
        weight, bias, best = _senteval_reference_fit(X, y, spec, 3, config)
        assert model.val_accuracy == pytest.approx(best)
        np.testing.assert_allclose(model.weight, weight, atol=2e-5)
        np.testing.assert_allclose(model.bias, bias, atol=2e-5)


def test_classifier_learns_linearly_separable_problem() -> None:
    rng = np.random.default_rng(1)
    X = rng.uniform(-1, 1, size=(1000, 2)).astype(np.float32)
    X = X[np.abs(X[:, 0] - X[:, 1]) > 0.2] * 5.0  # a margin around the line x0 = x1
    y = (X[:, 0] > X[:, 1]).astype(np.int64)
    train, test = np.arange(0, len(y) // 2), np.arange(len(y) // 2, len(y))
    (model,) = fit_many(X, y, [FitSpec(train, None, 1e-5)], 2, SENTEVAL_CONFIGS["fasttest"], device="cpu")
    assert np.mean(model.predict(X[test]) == y[test]) >= 0.97


def test_sklearn_backend_grids_and_fit() -> None:
    fitter = SklearnLogReg()
    assert fitter.grid("kfold") == (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
    assert fitter.grid("nested") == (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
    assert SentEvalLogReg(SENTEVAL_CONFIGS["test"]).grid("kfold") == L2_GRID == (1e-5, 1e-4, 1e-3, 1e-2)
    X = np.array([[0.0], [1.0], [2.0], [3.0]], dtype=np.float32)
    (model,) = fitter.fit(X, np.array([0, 0, 1, 1]), [FitSpec(np.arange(4), np.arange(4), 8.0)], 2)
    assert model.val_accuracy == 1.0


def test_mrpc_pair_features_are_abs_diff_and_product() -> None:
    u = np.array([[1.0, -2.0], [0.5, 0.0]])
    v = np.array([[3.0, 1.0], [0.5, 4.0]])
    np.testing.assert_array_equal(pair_features(u, v), [[2.0, 3.0, 3.0, -2.0], [0.0, 4.0, 0.25, 0.0]])


# ----------------------------------------------------------------------------------------------- readers


def _sentences(prefix: str, n: int) -> list[str]:
    return [f"{prefix} {'word ' * (i % 4)}number{i} ." for i in range(n)]


def write_transfer_fixture(root: Path, n: int = 20) -> Path:
    """A small SentEval folder for the seven transfer tasks (n rows per class and file)."""
    def write(relative: str, lines: Sequence[str], encoding: str = "utf-8") -> None:
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(("\n".join(lines) + "\n").encode(encoding))

    for task, first, second in (("MR", "rt-polarity.pos", "rt-polarity.neg"), ("CR", "custrev.pos", "custrev.neg"),
                                ("SUBJ", "subj.objective", "subj.subjective"), ("MPQA", "mpqa.pos", "mpqa.neg")):
        write(f"{task}/{first}", _sentences("great good", n), "latin-1")
        write(f"{task}/{second}", _sentences("awful bad", n), "latin-1")
    for split in ("train", "dev", "test"):
        write(f"SST/binary/sentiment-{split}",
              [f"{s}\t1" for s in _sentences("great good", n)] + [f"{s}\t0" for s in _sentences("awful bad", n)])
    for name in ("train_5500.label", "TREC_10.label"):
        write(f"TREC/{name}", [f"NUM:date when is {s}" for s in _sentences("when year", n)]
              + [f"HUM:ind who is {s}" for s in _sentences("who person", n)]
              + [f"LOC:city where is {s}" for s in _sentences("where city", n)], "latin-1")
    header = "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String"
    for split in ("train", "test"):
        same = [f"1\t{i}\t{i + 1}\t{s}\t{s} indeed" for i, s in enumerate(_sentences("cats sleep", n))]
        differ = [f"0\t{i}\t{i + 1}\t{s}\tdogs bark loudly {i}" for i, s in enumerate(_sentences("cats sleep", n))]
        write(f"MRPC/msr_paraphrase_{split}.txt", [header, *same, *differ])
    return root


@pytest.fixture
def transfer_dir(tmp_path: Path) -> Path:
    return write_transfer_fixture(tmp_path / "downstream")


def test_binary_reader_latin1_blank_lines_and_senteval_order(tmp_path: Path) -> None:
    (tmp_path / "CR").mkdir()
    (tmp_path / "CR" / "custrev.pos").write_bytes("caf\xe9  was   fine\n\na b\n".encode("latin-1"))
    (tmp_path / "CR" / "custrev.neg").write_bytes(b"x y\nz\n")
    task = load_transfer_task("CR", tmp_path, check_sizes=False)
    split = task.splits["all"]
    # rows sorted by (token count, label), stably; the blank line is kept as an empty sentence (as SentEval)
    assert split.columns[0] == ["", "z", "x y", "a b", "café was fine"]
    assert split.labels.tolist() == [1, 0, 0, 1, 1]
    assert task.protocol == "nested" and task.nclasses == 2


def test_line_splitting_follows_senteval(tmp_path: Path) -> None:
    (tmp_path / "TREC").mkdir()
    # "for line in f" breaks only at \n / \r\n / \r: a latin-1 \x85 (NEL) does not start a new row (str.split()
    # then treats it as whitespace, as SentEval's tokenisation does); blank lines carry no label and are skipped
    (tmp_path / "TREC" / "train_5500.label").write_bytes(b"HUM:ind Who is X\x85Y ?\r\n\nNUM:date When ?\n")
    (tmp_path / "TREC" / "TREC_10.label").write_bytes(b"LOC:city Where ?\n")
    train = load_transfer_task("TREC", tmp_path, check_sizes=False).splits["train"]
    assert train.columns[0] == ["When ?", "Who is X Y ?"] and train.labels.tolist() == [5, 3]


def test_readers_parse_every_task(transfer_dir: Path) -> None:
    trec = load_transfer_task("TREC", transfer_dir, check_sizes=False)
    assert sorted(set(trec.splits["train"].labels.tolist())) == [1 + 2, 4, 5]  # HUM=3, LOC=4, NUM=5
    questions = trec.splits["test"].columns[0]
    assert "when is when year number0 ." in questions and not any(":" in q for q in questions)
    mrpc = load_transfer_task("MRPC", transfer_dir, check_sizes=False)
    assert len(mrpc.splits["train"]) == 40 and len(mrpc.splits["train"].columns) == 2  # header dropped
    sst = load_transfer_task("SST2", transfer_dir, check_sizes=False)
    assert set(sst.splits) == {"train", "dev", "test"} and sst.protocol == "split"
    subj = load_transfer_task("SUBJ", transfer_dir, check_sizes=False)
    assert np.bincount(subj.splits["all"].labels).tolist() == [20, 20]


@pytest.mark.parametrize(
    ("relative", "content", "message"),
    [
        ("SST/binary/sentiment-dev", "good film\t1\nno label here\n", "sentiment-dev:2"),
        ("SST/binary/sentiment-dev", "good film\t1\nbad film\t7\n", "sentiment-dev:2"),
        ("TREC/TREC_10.label", "NUM:date when ?\nFOO:bar what ?\n", "TREC_10.label:2"),
        ("MRPC/msr_paraphrase_test.txt", "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t2\t3\tonly a\n",
         "msr_paraphrase_test.txt:2"),
        ("MRPC/msr_paraphrase_test.txt", "1\t2\t3\ta\tb\n", "msr_paraphrase_test.txt:1"),
    ],
)
def test_malformed_lines_name_file_and_line(transfer_dir: Path, relative: str, content: str, message: str) -> None:
    (transfer_dir / relative).write_text(content, encoding="utf-8")
    task = relative.split("/")[0].replace("SST", "SST2")
    with pytest.raises(SentEvalDataError, match=message) as info:
        load_transfer_task(task, transfer_dir, check_sizes=False)
    assert "re-download" in str(info.value)


def test_missing_and_truncated_files(transfer_dir: Path) -> None:
    (transfer_dir / "MR" / "rt-polarity.neg").unlink()
    with pytest.raises(SentEvalDataError, match="rt-polarity.neg"):
        load_transfer_task("MR", transfer_dir, check_sizes=False)
    with pytest.raises(SentEvalDataError, match=r"custrev.pos: 20 rows, SentEval's release has 2407"):
        load_transfer_task("CR", transfer_dir)  # the release sizes are checked by default
    (transfer_dir / "SST" / "binary" / "sentiment-test").write_bytes(b"caf\xe9 film\t1\n")
    with pytest.raises(SentEvalDataError, match="sentiment-test:1: not valid utf-8"):
        load_transfer_task("SST2", transfer_dir, check_sizes=False)
    with pytest.raises(ValueError, match="unknown transfer task"):
        load_transfer_task("NOPE", transfer_dir)


# ----------------------------------------------------------------------------------------------- end to end


def test_evaluate_transfer_fasttest_on_fixture(transfer_dir: Path) -> None:
    encoder = HashingEncoder()
    results = evaluate_transfer(encoder, transfer_dir, "fasttest", check_sizes=False, device="cpu",
                                show_progress=False)
    assert encoder.calls == len(TRANSFER_TASKS)  # one encode call per task
    assert set(results) >= {*TRANSFER_TASKS, "MRPC_F1", "transfer_avg", "MR_dev"}
    assert all(0.0 <= results[t] <= 100.0 for t in TRANSFER_TASKS)
    assert results["MR"] >= 70.0 and results["SST2"] >= 70.0  # "great good" vs "awful bad": separable (chance 50)
    assert results["transfer_avg"] == pytest.approx(round(np.mean([results[t] for t in TRANSFER_TASKS]), 2))
    again = evaluate_transfer(HashingEncoder(), transfer_dir, "fasttest", check_sizes=False, device="cpu",
                              show_progress=False)
    assert again == results  # deterministic given the seed


def test_dev_mode_reports_dev_accuracies(transfer_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tasks = ["CR", "TREC", "SST2"]
    full = evaluate_transfer(HashingEncoder(), transfer_dir, "fasttest", tasks, check_sizes=False, device="cpu",
                             show_progress=False)
    dev = evaluate_transfer(HashingEncoder(), transfer_dir, "dev", tasks, check_sizes=False, device="cpu",
                            show_progress=False)
    assert {t: dev[t] for t in tasks} == {t: full[f"{t}_dev"] for t in tasks}
    assert set(dev) == {*tasks, "transfer_avg"}
    monkeypatch.setattr("eval.transfer.load_transfer_task",
                        lambda name, d, check_sizes=True: load_transfer_task(name, d, check_sizes=False))
    assert evaluate_transfer_dev(HashingEncoder(), transfer_dir, tasks) == dev


def test_sklearn_backend_end_to_end(transfer_dir: Path) -> None:
    results = evaluate_transfer(HashingEncoder(), transfer_dir, "fasttest", ["MRPC"], check_sizes=False,
                                backend="sklearn", show_progress=False)
    assert results["MRPC"] >= 70.0 and 0.0 <= results["MRPC_F1"] <= 100.0


def test_real_data_sizes_and_fasttest_cr(senteval_dir: Path) -> None:
    """Real SentEval data: every file has the release's row count; CR in fasttest mode with a hashing encoder."""
    sizes = {name: {s: len(split) for s, split in load_transfer_task(name, senteval_dir).splits.items()}
             for name in TRANSFER_TASKS}
    assert sizes == {"MR": {"all": 10662}, "CR": {"all": 3775}, "SUBJ": {"all": 10000}, "MPQA": {"all": 10606},
                     "SST2": {"train": 67349, "dev": 872, "test": 1821}, "TREC": {"train": 5452, "test": 500},
                     "MRPC": {"train": 4076, "test": 1725}}
    results = evaluate_transfer(HashingEncoder(256), senteval_dir, "fasttest", ["CR"], device="cpu",
                                show_progress=False)
    assert 63.8 < results["CR"] < 90.0  # above the majority class (2407 / 3775 = 63.8%)
