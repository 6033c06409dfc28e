"""The dev evaluation's fixed cost and batching (issue 32, item 3): parsed SentEval files cached per file stamp, the
scoring plan reused, token-budget batches, embeddings scored where they are, and ``python -m bench.eval_speed``."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

import eval.sts as sts
from eval.encoder import SentenceEncoder, length_sorted_batches
from eval.sts import evaluate_sts, evaluate_sts_dev, load_sts
from tests.test_eval_sts import SENTENCES, DictEncoder, RecordingEmbed
from tests.test_no_host_sync import HostSyncRecorder

pytestmark = pytest.mark.usefixtures("torch_single_thread")


@pytest.fixture
def file_reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every SentEval file read (``Path.read_bytes``, what :func:`eval.sts._read_lines` opens files with)."""
    reads: list[Path] = []
    read_bytes = Path.read_bytes

    def counting(path: Path) -> bytes:
        reads.append(path)
        return read_bytes(path)

    monkeypatch.setattr(Path, "read_bytes", counting)
    return reads


@pytest.fixture(scope="module")
def tiny_tokenizer(tiny_bert_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_bert_dir)


# ------------------------------------------------------------------------------------------- the parsed files cached
def test_repeated_dev_evaluations_read_no_file(sts_fixture_dir: Path, file_reads: list[Path]):
    encoder = DictEncoder(dim=8)
    first = evaluate_sts_dev(encoder, sts_fixture_dir)
    assert sorted(p.name for p in file_reads) == ["SICK_trial.txt", "sts-dev.csv"]
    file_reads.clear()
    assert evaluate_sts_dev(encoder, sts_fixture_dir) == first
    assert evaluate_sts_dev(encoder, str(sts_fixture_dir)) == first  # the folder as a string: the same files
    assert file_reads == []


def test_a_changed_file_is_read_again(sts_fixture_dir: Path, file_reads: list[Path]):
    path = sts_fixture_dir / "STS" / "STSBenchmark" / "sts-dev.csv"
    before = load_sts("STSBenchmark", sts_fixture_dir, "dev")
    lines = path.read_text(encoding="utf-8").splitlines()
    columns = lines[0].split("\t")
    columns[4] = "0.125"
    path.write_text("\n".join(["\t".join(columns), *lines[1:]]) + "\n", encoding="utf-8")
    file_reads.clear()
    after = load_sts("STSBenchmark", sts_fixture_dir, "dev")
    assert [p.name for p in file_reads] == ["sts-dev.csv"] and after.scores[0] == 0.125 != before.scores[0]
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # same bytes, a newer stamp: read again
    assert load_sts("STSBenchmark", sts_fixture_dir, "dev") is not after and len(file_reads) == 2


def test_the_size_check_is_not_skipped_by_the_cache(sts_fixture_dir: Path):
    """Pairs parsed without the line-count check do not answer a call that asks for it."""
    load_sts("STSBenchmark", sts_fixture_dir, "dev", check_sizes=False)
    with pytest.raises(sts.SentEvalDataError, match="SentEval's file has"):
        load_sts("STSBenchmark", sts_fixture_dir, "dev", check_sizes=True)


def test_the_scoring_plan_is_built_once_per_loaded_pairs(sts_fixture_dir: Path, monkeypatch: pytest.MonkeyPatch):
    builds = []
    build = sts._ScoringPlan.build.__func__
    monkeypatch.setattr(sts._ScoringPlan, "build", classmethod(lambda cls, pairs: builds.append(1) or build(cls, pairs)))
    encoder = DictEncoder(dim=8)
    for _ in range(3):
        evaluate_sts_dev(encoder, sts_fixture_dir)
    assert len(builds) == 1
    evaluate_sts(encoder, sts_fixture_dir, tasks=("STS12",))  # other pairs: a new plan
    assert len(builds) == 2


def test_scores_computed_on_the_encoders_tensors_equal_the_numpy_path(sts_fixture_dir: Path, tiny_bert_dir: Path):
    """An encoder with ``encode_tensor`` is scored where its embeddings are; an ``encode``-only one through numpy:
    the same scores (float64 cosines either way)."""
    from eval.loading import load_encoder

    encoder = load_encoder(tiny_bert_dir, "avg", device="cpu")

    class NumpyOnly:
        def encode(self, sentences, show_progress=False, desc=None):
            return encoder.encode(sentences)

    on_tensors = evaluate_sts(encoder, sts_fixture_dir, show_progress=False)
    through_numpy = evaluate_sts(NumpyOnly(), sts_fixture_dir, show_progress=False)
    assert on_tensors == pytest.approx(through_numpy, abs=1e-9)


# ------------------------------------------------------------------------------------------- batching
def test_token_budget_batches():
    lengths = [3, 10, 4, 4, 9, 2, 4]
    # longest first: 10 (1 x 10 <= 12), then 9 (1 x 9; 2 x 9 > 12), then 4, 4, 4 (3 x 4 = 12), then 3, 2
    assert length_sorted_batches(lengths, batch_size=2, max_tokens=12) == [[1], [4], [2, 3, 6], [0, 5]]
    assert length_sorted_batches(lengths, batch_size=2, max_tokens=5) == [[1], [4], [2], [3], [6], [0], [5]]
    batches = length_sorted_batches([7] * 5 + [1] * 30, batch_size=1, max_tokens=14)
    assert all(len(b) * max(([7] * 5 + [1] * 30)[i] for i in b) <= 14 for b in batches)
    # the greedy's six passes (2, 2, 2, 14, 14, 1: the third pairs the last 7 with a 1, 71 padded tokens), cut where
    # the padding is fewest: one 7 alone, no 7 beside a 1 (65 padded tokens)
    assert [len(b) for b in batches] == [1, 2, 2, 2, 14, 14]


def test_token_budget_cuts_pad_least_within_the_greedys_passes():
    """Against an exhaustive search over every batching of random length lists: no more passes than filling each
    batch in turn, every batch within the budget (or one sentence), and the fewest padded tokens there are."""
    import functools
    import random

    from eval.batching import fewest_padding_cuts, greedy_cuts, padded_tokens

    rng = random.Random(0)
    for _ in range(300):
        lengths = tuple(sorted((rng.randint(1, 9) for _ in range(rng.randint(1, 13))), reverse=True))
        budget = rng.randint(1, 30)
        passes = len(greedy_cuts(lengths, budget))

        @functools.lru_cache(None)
        def fewest(start: int, left: int) -> float:
            if start == len(lengths):
                return 0
            if left == 0:
                return float("inf")
            reach = min(len(lengths), start + max(1, budget // lengths[start]))
            return min(fewest(end, left - 1) + lengths[start] * (end - start) for end in range(start + 1, reach + 1))

        cuts = fewest_padding_cuts(lengths, budget)
        assert cuts[-1] == len(lengths) and len(cuts) <= passes
        assert all(end - start == 1 or lengths[start] * (end - start) <= budget
                   for start, end in zip([0, *cuts], cuts))
        assert padded_tokens(lengths, cuts) == fewest(0, passes) <= padded_tokens(lengths, greedy_cuts(lengths, budget))
    with pytest.raises(ValueError, match="sorted"):
        fewest_padding_cuts([1, 2], 4)


def test_a_sentence_longer_than_the_budget_is_a_batch_of_its_own():
    assert length_sorted_batches([50, 3, 3], batch_size=8, max_tokens=16) == [[0], [1, 2]]


@pytest.mark.parametrize("max_tokens", [0, -5])
def test_max_tokens_must_be_positive(tiny_tokenizer, max_tokens: int):
    with pytest.raises(ValueError, match="max_tokens"):
        SentenceEncoder(RecordingEmbed(), tiny_tokenizer, max_tokens=max_tokens)


def test_the_encoder_batches_by_tokens(tiny_tokenizer):
    embed = RecordingEmbed()
    out = SentenceEncoder(embed, tiny_tokenizer, device="cpu", max_tokens=24).encode(SENTENCES)
    assert all(batch["input_ids"].numel() <= 24 for batch in embed.batches)
    assert len(embed.batches) < len(set(SENTENCES))  # short sentences share a pass
    reference = SentenceEncoder(RecordingEmbed(), tiny_tokenizer, device="cpu", batch_size=1).encode(SENTENCES)
    np.testing.assert_array_equal(out, reference)


def test_kept_batches_follow_the_batching(tiny_tokenizer):
    """The device batches kept between calls are rebuilt when the batching changes (they were kept by the
    sentences alone: a changed batch size went unseen)."""
    embed = RecordingEmbed()
    encoder = SentenceEncoder(embed, tiny_tokenizer, device="cpu", batch_size=8)
    encoder.encode(SENTENCES)
    assert len(embed.batches) == 1
    encoder.batch_size = 2
    embed.batches.clear()
    encoder.encode(SENTENCES)
    assert [len(b["input_ids"]) for b in embed.batches] == [2, 2, 2]
    encoder.max_tokens = 1000
    embed.batches.clear()
    encoder.encode(SENTENCES)
    assert [len(b["input_ids"]) for b in embed.batches] == [6]


@pytest.mark.parametrize("batching", [{"batch_size": 128}, {"batch_size": 3}, {"max_tokens": 16},
                                      {"max_tokens": 64}, {"max_tokens": 10 ** 6}])
def test_scores_do_not_depend_on_the_batching(batching, sts_fixture_dir: Path, tiny_bert_dir: Path):
    from eval.loading import load_encoder

    reference = evaluate_sts(load_encoder(tiny_bert_dir, "avg", device="cpu", batch_size=1), sts_fixture_dir,
                             show_progress=False)
    scores = evaluate_sts(load_encoder(tiny_bert_dir, "avg", device="cpu", **batching), sts_fixture_dir,
                          show_progress=False)
    assert scores == pytest.approx(reference, abs=1e-6)


# ------------------------------------------------------------------------------------------- on the device
def test_encode_tensor_keeps_the_rows_on_the_device_without_a_sync(tiny_bert_dir: Path):
    from eval.loading import load_encoder

    encoder = load_encoder(tiny_bert_dir, "avg", device="cpu", batch_size=3)
    expected = encoder.encode(SENTENCES)
    recorder = HostSyncRecorder()
    with recorder:
        rows = encoder.encode_tensor(SENTENCES)
    assert recorder.syncs == []
    assert isinstance(rows, torch.Tensor) and rows.dtype == torch.float32 and rows.device.type == "cpu"
    np.testing.assert_array_equal(rows.numpy(), expected)  # duplicates included, in the caller's order
    distinct = list(dict.fromkeys(SENTENCES))
    np.testing.assert_array_equal(encoder.encode_tensor(distinct).numpy(), encoder.encode(distinct))


# ------------------------------------------------------------------------------------------- the trainer
@pytest.mark.parametrize("eval_max_tokens, max_tokens, batch_size", [(None, 8192, 32), (0, None, 32),
                                                                      (100, 100, 32)])
def test_the_trainer_encoder_batching(eval_max_tokens, max_tokens, batch_size, tmp_path: Path, tiny_bert_dir: Path):
    from tests.tiny import tiny_trainer
    from trainers.methods import build_model

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a cat\na dog\n")
    flags = {} if eval_max_tokens is None else {"eval_max_tokens": eval_max_tokens}
    trainer = tiny_trainer(build_model("simcse", str(tiny_bert_dir)), tiny_bert_dir, tmp_path / "run", corpus,
                           per_device_eval_batch_size=2, **flags)
    encoder = trainer.sentence_encoder()
    assert (encoder.max_tokens, encoder.batch_size) == (max_tokens, batch_size)


def test_the_trainer_scores_agree_across_batchings(tmp_path: Path, tiny_bert_dir: Path, sts_fixture_dir: Path):
    from tests.tiny import tiny_trainer
    from trainers.methods import build_model

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a cat\na dog\n")
    scores = []
    for flags in ({"eval_max_tokens": 0, "per_device_eval_batch_size": 1}, {"eval_max_tokens": 32}, {}):
        torch.manual_seed(0)
        trainer = tiny_trainer(build_model("simcse", str(tiny_bert_dir)), tiny_bert_dir, tmp_path / "run", corpus,
                               **flags)
        trainer.senteval_dir = str(sts_fixture_dir)
        scores.append(trainer.evaluate())
    for other in scores[1:]:
        assert {k: v for k, v in other.items() if k != "eval_runtime"} == pytest.approx(
            {k: v for k, v in scores[0].items() if k != "eval_runtime"}, abs=1e-6)


# ------------------------------------------------------------------------------------------- the benchmark
def test_the_training_batching_is_the_trainers_default_budget_packed_then_padded():
    """``--training_batching`` (the GPU check's eval_speed step) times the batching CLTrainer.evaluate() uses by
    default (DEV_MAX_TOKENS tokens a pass, packed), the same budget padded (what it replaced) and twice the budget
    packed; without it, --batch_sizes then each --max_tokens both ways (``--packing both``, the default)."""
    from bench.eval_speed import Batching, build_parser, timed_batchings
    from command_line.arguments import CLTrainingArguments

    defaults = CLTrainingArguments(output_dir="unused")
    assert defaults.eval_packing is True
    budget = defaults.eval_max_tokens
    assert timed_batchings(build_parser().parse_args(["--training_batching", "--max_tokens", "64"])) == [
        Batching(max_tokens=budget, packed=True), Batching(max_tokens=budget), Batching(max_tokens=2 * budget,
                                                                                         packed=True)]
    assert timed_batchings(build_parser().parse_args(["--batch_sizes", "16", "--max_tokens", "64", "128"])) == [
        Batching(batch_size=16), Batching(max_tokens=64, packed=True), Batching(max_tokens=64),
        Batching(max_tokens=128, packed=True), Batching(max_tokens=128)]
    assert timed_batchings(build_parser().parse_args(["--batch_sizes", "--max_tokens", "64", "--packing",
                                                      "padded"])) == [Batching(max_tokens=64)]


def test_the_benchmark_runs_on_the_cpu(tmp_path: Path, wide_sts_fixture_dir: Path, monkeypatch):
    """The CPU smoke run; the JSON is written after every batching (a run stopped at the GPU check's time limit keeps
    the batchings it measured)."""
    import bench.eval_speed as eval_speed
    from bench.eval_speed import main

    out = tmp_path / "speed.json"
    written_before_each_batching = []

    def measure_after_noting_the_json(*args, **kwargs):
        written_before_each_batching.append(len(json.loads(out.read_text())["measurements"]) if out.exists() else 0)
        return measure(*args, **kwargs)

    measure = eval_speed.measure
    monkeypatch.setattr(eval_speed, "measure", measure_after_noting_the_json)
    threads = torch.get_num_threads()
    try:
        report = main(["--config", "tiny", "--device", "cpu", "--senteval_dir", str(wide_sts_fixture_dir), "--repeats",
                       "1", "--gemm_size", "64", "--batch_sizes", "16", "--max_tokens", "256", "--sts_test",
                       "--threads", "1", "--output_json", str(out)])
    finally:
        torch.set_num_threads(threads)
    assert written_before_each_batching == [0, 1, 2]
    data = json.loads(out.read_text())
    assert data["command"].startswith("python -m bench.eval_speed --config tiny")
    assert data["sgemm_tflops"] > 0 and data["matmul_parameters"] == report.matmul_parameters > 0
    assert data["fixed_cost_seconds"] > 0
    assert data["floor_seconds"] == pytest.approx(data["dev_tokens"] * 2 * data["matmul_parameters"]
                                                  / (data["sgemm_tflops"] * 1e12))
    by_name = {m["batching"]: m for m in data["measurements"]}
    assert set(by_name) == {"16 sentences", "256 tokens, packed", "256 tokens, padded"}
    for m in by_name.values():
        assert m["evaluation_seconds"] > 0 and m["forward_seconds"] > 0 and m["sts_test_seconds"] > 0
        assert m["padded_tokens"] >= data["dev_tokens"] and m["batches"] >= 1
    assert by_name["256 tokens, packed"]["padded_tokens"] < by_name["256 tokens, padded"]["padded_tokens"]
    for name in ("256 tokens, packed", "256 tokens, padded"):
        assert by_name[name]["stsb_spearman"] == pytest.approx(by_name["16 sentences"]["stsb_spearman"], abs=1e-4)
