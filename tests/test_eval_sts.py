"""Tests of eval/sts.py (SentEval STS loaders, "all" Spearman) and eval/encoder.py (batched encoding)."""
from __future__ import annotations

import logging
import math
import shutil
from pathlib import Path
from typing import Sequence

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from eval.encoder import SentenceEncoder, length_sorted_batches
from eval.sts import (
    STS_TASKS,
    SentEvalDataError,
    STSPairs,
    cosine_scores,
    evaluate_sts,
    evaluate_sts_dev,
    load_sts,
    spearman_all,
)


pytestmark = pytest.mark.usefixtures("torch_single_thread")


class DictEncoder:
    """A fake encoder: a fixed vector per sentence (random for unknown ones); records every ``encode`` call."""

    def __init__(self, vectors: dict[str, Sequence[float]] | None = None, dim: int = 2) -> None:
        self.vectors = {key: np.asarray(value, dtype=np.float32) for key, value in (vectors or {}).items()}
        self.dim = dim
        self.calls: list[list[str]] = []

    def encode(self, sentences: Sequence[str], show_progress: bool = False, desc: str | None = None) -> np.ndarray:
        self.calls.append(list(sentences))
        rng = np.random.default_rng(0)
        for sentence in sentences:
            self.vectors.setdefault(sentence, rng.standard_normal(self.dim).astype(np.float32))
        return np.stack([self.vectors[s] for s in sentences])


# ----------------------------------------------------------------------------------------------- metrics


def test_spearman_all_matches_hand_computed_rho():
    pred = np.array([0.9, 0.1, 0.5, 0.3, 0.7])
    gold = np.array([4.0, 1.0, 2.0, 3.0, 5.0])
    # ranks: pred -> [5, 1, 3, 2, 4]; gold -> [4, 1, 2, 3, 5]; d = [1, 0, 1, -1, -1]; sum d^2 = 4
    # rho = 1 - 6 * 4 / (5 * (25 - 1)) = 1 - 24 / 120 = 0.8
    assert spearman_all(pred, gold) == pytest.approx(80.0)


def test_spearman_all_uses_average_ranks_for_ties():
    pred = np.array([1.0, 2.0, 2.0, 3.0])
    gold = np.array([1.0, 2.0, 3.0, 4.0])
    # average ranks: pred -> [1, 2.5, 2.5, 4], gold -> [1, 2, 3, 4]; both have mean 2.5
    # deviations x = [-1.5, 0, 0, 1.5], y = [-1.5, -0.5, 0.5, 1.5]
    # sum xy = 2.25 + 0 + 0 + 2.25 = 4.5; sum x^2 = 4.5; sum y^2 = 5
    # rho = Pearson of the ranks = 4.5 / sqrt(4.5 * 5) = sqrt(0.9) = 0.948683...
    expected = 100 * math.sqrt(0.9)
    assert spearman_all(pred, gold) == pytest.approx(expected)
    assert spearman_all(pred, gold) == pytest.approx(spearmanr(pred, gold).statistic * 100)
    # the no-ties shortcut 1 - 6 * sum d^2 / (n (n^2 - 1)) = 1 - 6 * 0.5 / 60 = 0.95 would be wrong here
    assert spearman_all(pred, gold) != pytest.approx(95.0)


def test_all_aggregation_pools_subsets_instead_of_averaging():
    # two subsets, each perfectly rank-correlated on its own, but the gold ranges are swapped between them
    pred_a, gold_a = np.array([0.1, 0.2, 0.3]), np.array([4.0, 5.0, 6.0])
    pred_b, gold_b = np.array([0.7, 0.8, 0.9]), np.array([1.0, 2.0, 3.0])
    mean_of_subsets = (spearman_all(pred_a, gold_a) + spearman_all(pred_b, gold_b)) / 2
    assert mean_of_subsets == pytest.approx(100.0)
    # pooled: pred ranks [1..6]; gold ranks [4, 5, 6, 1, 2, 3]; d = [-3, -3, -3, 3, 3, 3]; sum d^2 = 54
    # rho = 1 - 6 * 54 / (6 * 35) = 1 - 54 / 35 = -19 / 35
    pooled = spearman_all(np.concatenate([pred_a, pred_b]), np.concatenate([gold_a, gold_b]))
    assert pooled == pytest.approx(-100 * 19 / 35)


def test_evaluate_sts_pools_the_subsets_of_a_year(sts_fixture_dir: Path):
    # rewrite STS13 so each subset is perfectly correlated alone but the pooled ranking is not
    folder = sts_fixture_dir / "STS" / "STS13-en-test"
    angles = {"FNWN": (10, 20, 30), "headlines": (40, 50, 60), "OnWN": (70, 80, 85)}
    golds = {"FNWN": (1.0, 0.5, 0.0), "headlines": (5.0, 4.5, 4.0), "OnWN": (3.0, 2.5, 2.0)}
    vectors = {"anchor": (1.0, 0.0)}
    for subset, subset_angles in angles.items():
        (folder / f"STS.input.{subset}.txt").write_text("".join(f"anchor\tangle {a}\n" for a in subset_angles))
        (folder / f"STS.gs.{subset}.txt").write_text("".join(f"{g}\n" for g in golds[subset]))
        vectors.update({f"angle {a}": (math.cos(math.radians(a)), math.sin(math.radians(a))) for a in subset_angles})
    encoder = DictEncoder(vectors)
    result = evaluate_sts(encoder, sts_fixture_dir, tasks=("STS13",), show_progress=False)
    cosines = np.cos(np.radians([a for subset in angles.values() for a in subset]))
    pooled = spearman_all(cosines, np.array([g for subset in golds.values() for g in subset]))
    per_subset = np.mean([spearman_all(np.cos(np.radians(angles[s])), np.array(golds[s])) for s in angles])
    assert per_subset == pytest.approx(100.0)
    assert result["STS13"] == pytest.approx(pooled)
    assert result["STS13"] < 50.0
    assert result["avg"] == pytest.approx(result["STS13"])


def test_cosine_scores_are_rowwise_cosines():
    e1 = np.array([[1.0, 0.0], [3.0, 4.0], [1.0, 1.0]])
    e2 = np.array([[0.0, 2.0], [6.0, 8.0], [-1.0, -1.0]])
    np.testing.assert_allclose(cosine_scores(e1, e2), [0.0, 1.0, -1.0], atol=1e-12)


# ----------------------------------------------------------------------------------------------- loaders


def test_load_sts_year_concatenates_subsets_drops_blank_gold_and_roundtrips_whitespace(sts_fixture_dir: Path):
    pairs = load_sts("STS12", sts_fixture_dir)
    assert len(pairs) == 3 + 4 * 4
    assert pairs.subset[:3] == ["MSRpar"] * 3 and pairs.subset[3] == "MSRvid"
    assert pairs.sent1[:3] == ["the cat sits on the table .", "a man plays the guitar", "an old king reads a book ."]
    assert pairs.sent2[1] == "a man plays a piano ."
    np.testing.assert_allclose(pairs.scores[:3], [4.5, 1.2, 3.0])
    assert "the dog runs in the park ." not in pairs.sent1  # its gold line is blank


def test_load_sts_benchmark_and_sick_splits(sts_fixture_dir: Path):
    assert [len(load_sts("STSBenchmark", sts_fixture_dir, split)) for split in ("train", "dev", "test")] == [6, 6, 6]
    assert [len(load_sts("SICKRelatedness", sts_fixture_dir, split)) for split in ("train", "dev", "test")] == [5] * 3
    sick = load_sts("SICKRelatedness", sts_fixture_dir, "test")
    assert not any(s.endswith(("\r", " ")) for s in sick.sent1 + sick.sent2)  # CRLF stripped
    assert "sentence_A" not in sick.sent1  # header skipped


def test_load_sts_benchmark_reads_quotes_literally(sts_fixture_dir: Path):
    path = sts_fixture_dir / "STS" / "STSBenchmark" / "sts-test.csv"
    path.write_text('g\tsrc\ty\t0001\t2.5\t" it \'s a cat , " he said .\tthe "dog\n'
                    "g\tsrc\ty\t0002\t4.0\ta cat .\ta  dog .\tmerged-from\textra\n", encoding="utf-8")
    pairs = load_sts("STSBenchmark", sts_fixture_dir)
    assert pairs.sent1 == ['" it \'s a cat , " he said .', "a cat ."]
    assert pairs.sent2 == ['the "dog', "a dog ."]  # extra trailing columns are ignored, as in SentEval
    np.testing.assert_allclose(pairs.scores, [2.5, 4.0])


def test_load_sts_accepts_the_parent_of_downstream(sts_fixture_dir: Path):
    parent = sts_fixture_dir.parent / "SentEval-data"
    parent.mkdir()
    sts_fixture_dir.rename(parent / "downstream")
    assert len(load_sts("STS13", parent)) == 12


def test_load_sts_rejects_unknown_task_and_split(sts_fixture_dir: Path):
    with pytest.raises(ValueError, match="unknown STS task"):
        load_sts("STS17", sts_fixture_dir)
    with pytest.raises(ValueError, match="only a test split"):
        load_sts("STS12", sts_fixture_dir, "dev")


@pytest.mark.parametrize("split, expected", [
    ("test", dict(zip(STS_TASKS, (3108, 1500, 3750, 3000, 1186, 1379, 4927)))),
    ("dev", {"STSBenchmark": 1500, "SICKRelatedness": 500}),
])
def test_real_senteval_pair_counts(senteval_dir: Path, split: str, expected: dict[str, int]):
    assert {task: len(load_sts(task, senteval_dir, split)) for task in expected} == expected


@pytest.mark.parametrize("task, relative, found, expected, total", [
    ("STSBenchmark", "STS/STSBenchmark/sts-test.csv", 1378, 1379, 1378),
    ("STS12", "STS/STS12-en-test/STS.gs.MSRpar.txt", 749, 750, 3107),
])
def test_a_blanked_line_of_the_real_data_is_a_scored_pair_mismatch(senteval_dir: Path, tmp_path: Path, caplog,
                                                                   task, relative, found, expected, total):
    """A blanked line keeps the file's line count: STS-B test was scored on 1378 pairs, STS12 on 3107, silently."""
    copy = tmp_path / "downstream"
    shutil.copytree(senteval_dir / Path(relative).parent, copy / Path(relative).parent)
    path = _edit_line(copy / relative, 7, lambda line: "")
    with pytest.raises(SentEvalDataError) as info:
        load_sts(task, copy, check_sizes=True)
    assert str(info.value).startswith(f"{path} has {found} scored pairs (a blank line or blank gold score drops "
                                      f"one) but SentEval's file has {expected}: ")
    with caplog.at_level(logging.INFO, logger="eval.sts"):
        pairs = load_sts(task, copy, check_sizes=False)
    assert len(pairs) == total
    assert f"{path}: dropped 1 pair(s) with a blank line or gold score (as SentEval does); {found} scored" in (
        caplog.text)


# ----------------------------------------------------------------------------------------------- bad input


def _edit_line(path: Path, lineno: int, edit) -> Path:
    """Replace line ``lineno`` (1-based) of ``path`` by ``edit(line)``; ``edit`` returning None deletes the rest."""
    lines = path.read_text(encoding="utf-8").splitlines()
    replacement = edit(lines[lineno - 1])
    lines = lines[:lineno - 1] + ([replacement] + lines[lineno:] if replacement is not None else [])
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_missing_directory_names_it_and_the_fix(tmp_path: Path):
    missing = tmp_path / "nowhere"
    with pytest.raises(SentEvalDataError, match="SENTEVAL_DIR") as info:
        load_sts("STS12", missing)
    assert str(missing) in str(info.value) and "download_senteval.sh" in str(info.value)


def test_missing_file_names_it_and_the_fix(sts_fixture_dir: Path):
    gold = sts_fixture_dir / "STS" / "STS14-en-test" / "STS.gs.images.txt"
    gold.unlink()
    with pytest.raises(SentEvalDataError, match="--senteval_dir") as info:
        load_sts("STS14", sts_fixture_dir)
    assert str(gold) in str(info.value)


def test_truncated_gold_file_names_both_files_and_counts(sts_fixture_dir: Path):
    folder = sts_fixture_dir / "STS" / "STS15-en-test"
    _edit_line(folder / "STS.gs.belief.txt", 3, lambda line: None)  # keep 2 of 4 lines
    with pytest.raises(SentEvalDataError) as info:
        load_sts("STS15", sts_fixture_dir)
    message = str(info.value)
    assert str(folder / "STS.input.belief.txt") in message and str(folder / "STS.gs.belief.txt") in message
    assert "4 lines" in message and "has 2" in message


def test_non_numeric_score_names_file_and_line(sts_fixture_dir: Path):
    gold = _edit_line(sts_fixture_dir / "STS" / "STS16-en-test" / "STS.gs.headlines.txt", 3,
                      lambda line: "four point five")
    with pytest.raises(SentEvalDataError, match="four point five") as info:
        load_sts("STS16", sts_fixture_dir)
    assert f"{gold}:3:" in str(info.value)


def test_non_numeric_table_score_names_file_and_line(sts_fixture_dir: Path):
    path = _edit_line(sts_fixture_dir / "SICK" / "SICK_trial.txt", 2,
                      lambda line: "\t".join(c if i != 3 else "x" + c for i, c in enumerate(line.split("\t"))))
    with pytest.raises(SentEvalDataError) as info:
        load_sts("SICKRelatedness", sts_fixture_dir, "dev")
    assert f"{path}:2:" in str(info.value) and "not a number" in str(info.value)


def test_a_sick_file_without_its_header_is_said_to_lose_its_first_pair(sts_fixture_dir: Path, caplog):
    """SentEval skips SICK's first line as its header, and so does the loader; your own SICK-format file without
    one (size checks off) lost its first pair unseen. A warning now names the file and the fix; with the header
    nothing is said."""
    path = sts_fixture_dir / "SICK" / "SICK_trial.txt"
    with caplog.at_level(logging.WARNING, logger="eval.sts"):
        assert len(load_sts("SICKRelatedness", sts_fixture_dir, "dev", check_sizes=False)) == 5
    assert caplog.messages == []
    path.write_text("".join(line + "\n" for line in [
        "1\tA man plays.\tA man is playing.\t4.5\tENTAILMENT", "2\tA dog runs.\tA cat sleeps.\t1.2\tNEUTRAL",
        "3\tA girl sings.\tA girl is singing.\t4.9\tENTAILMENT"]), encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="eval.sts"):
        pairs = load_sts("SICKRelatedness", sts_fixture_dir, "dev", check_sizes=False)
    assert pairs.sent1 == ["A dog runs.", "A girl sings."]
    assert caplog.messages == [
        f"{path}: line 1 holds a scored pair, not SICKRelatedness's header, and is skipped as the header, as SentEval "
        "does: put the header line (pair_ID, sentence_A, sentence_B, relatedness_score, entailment_judgment; "
        "tab-separated) first to score every pair"]


@pytest.mark.parametrize(("score", "problem"), [("nan", "is not finite"), ("inf", "is not finite"),
                                                ("-Infinity", "is not finite"), ("1e999", "is not finite"),
                                                ("5_0", "is not a number")])
def test_gold_score_float_takes_but_no_decimal_is_refused(sts_fixture_dir: Path, score: str, problem: str):
    """float() takes 'nan', 'inf' and '5_0' (50.0): one 'inf' moved STS-B test's Spearman silently."""
    gold = _edit_line(sts_fixture_dir / "STS" / "STS16-en-test" / "STS.gs.headlines.txt", 2, lambda line: score)
    with pytest.raises(SentEvalDataError) as info:
        load_sts("STS16", sts_fixture_dir)
    assert str(info.value).startswith(f"{gold}:2: gold score {score!r} {problem}; ")
    csv = _edit_line(sts_fixture_dir / "STS" / "STSBenchmark" / "sts-dev.csv", 3,
                     lambda line: "\t".join(c if i != 4 else score for i, c in enumerate(line.split("\t"))))
    with pytest.raises(SentEvalDataError, match=f"^{csv}:3: gold score '{score}' {problem}; "):
        load_sts("STSBenchmark", sts_fixture_dir, "dev")


def test_gold_scores_take_any_scale_and_decimal_form(sts_fixture_dir: Path):
    """No range check: your own STS files may score on another scale (Spearman does not see it)."""
    scores = ["-3", "+12.5", ".25", "1e2"]
    gold = sts_fixture_dir / "STS" / "STS16-en-test" / "STS.gs.headlines.txt"
    for lineno, score in enumerate(scores, start=1):
        _edit_line(gold, lineno, lambda line, score=score: score)
    pairs = load_sts("STS16", sts_fixture_dir)
    assert [score for score, subset in zip(pairs.scores, pairs.subset) if subset == "headlines"] == [
        -3.0, 12.5, 0.25, 100.0]


def test_wrong_column_count_names_file_and_line(sts_fixture_dir: Path):
    inputs = _edit_line(sts_fixture_dir / "STS" / "STS13-en-test" / "STS.input.OnWN.txt", 1,
                        lambda line: line.replace("\t", " "))
    with pytest.raises(SentEvalDataError, match="expected 2 tab-separated columns, found 1") as info:
        load_sts("STS13", sts_fixture_dir)
    assert f"{inputs}:1:" in str(info.value)
    csv = _edit_line(sts_fixture_dir / "STS" / "STSBenchmark" / "sts-dev.csv", 5,
                     lambda line: "a\tb\tc\t0.5\tonly one sentence")
    with pytest.raises(SentEvalDataError, match="at least 7") as info:
        load_sts("STSBenchmark", sts_fixture_dir, "dev")
    assert f"{csv}:5:" in str(info.value)


# ----------------------------------------------------------------------------------------------- evaluation


def test_evaluate_sts_encodes_each_sentence_once_in_one_call(sts_fixture_dir: Path):
    encoder = DictEncoder(dim=8)
    results = evaluate_sts(encoder, sts_fixture_dir, show_progress=False)
    assert list(results) == [*STS_TASKS, "avg"]
    assert results["avg"] == pytest.approx(np.mean([results[task] for task in STS_TASKS]))
    assert len(encoder.calls) == 1
    sentences = encoder.calls[0]
    assert len(sentences) == len(set(sentences))
    every = {s for task in STS_TASKS for p in [load_sts(task, sts_fixture_dir)] for s in p.sent1 + p.sent2}
    assert set(sentences) == every


def test_evaluate_sts_dev_encodes_only_the_dev_sets(sts_fixture_dir: Path):
    encoder = DictEncoder(dim=8)
    results = evaluate_sts_dev(encoder, sts_fixture_dir)
    assert set(results) == {"stsb_spearman", "sickr_spearman", "avg_sts"}
    assert results["avg_sts"] == pytest.approx((results["stsb_spearman"] + results["sickr_spearman"]) / 2)
    dev = [load_sts(task, sts_fixture_dir, "dev") for task in ("STSBenchmark", "SICKRelatedness")]
    assert len(encoder.calls) == 1 and set(encoder.calls[0]) == {s for p in dev for s in p.sent1 + p.sent2}


def test_stspairs_checks_lengths():
    with pytest.raises(ValueError, match="differ in length"):
        STSPairs(["a"], ["b", "c"], np.array([1.0]))


# ----------------------------------------------------------------------------------------------- encoder


class RecordingEmbed:
    """``embed_fn`` whose output depends only on the unpadded tokens; records each batch it sees."""

    def __init__(self) -> None:
        self.batches: list[dict[str, torch.Tensor]] = []

    def __call__(self, **features: torch.Tensor) -> torch.Tensor:
        assert torch.is_inference_mode_enabled()
        self.batches.append(features)
        mask = features["attention_mask"].float()
        ids = features["input_ids"].float() * mask
        return torch.stack([ids.sum(1), mask.sum(1), (ids ** 2).sum(1)], dim=1)


@pytest.fixture(scope="module")
def tiny_tokenizer(tiny_bert_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_bert_dir)


SENTENCES = ["the cat sits .", "a man plays the guitar in the park with his dog .", "the cat sits .", "dog .",
             "the old king reads a big red book .", "a dog .", "the sun and the moon", "dog ."]


def test_encoder_dedupes_and_keeps_input_order(tiny_tokenizer):
    embed = RecordingEmbed()
    out = SentenceEncoder(embed, tiny_tokenizer, device="cpu", batch_size=2).encode(SENTENCES)
    assert out.dtype == np.float32 and out.shape == (len(SENTENCES), 3)
    assert sum(len(batch["input_ids"]) for batch in embed.batches) == len(set(SENTENCES))
    np.testing.assert_array_equal(out[0], out[2])
    np.testing.assert_array_equal(out[3], out[7])
    lengths = [len(tiny_tokenizer(s)["input_ids"]) for s in SENTENCES]
    np.testing.assert_array_equal(out[:, 1], lengths)  # row i belongs to sentence i


class PrecisionProbe:
    """An embed_fn recording the autocast state and fp32 matmul precision it runs under."""

    def __init__(self) -> None:
        self.seen: list[tuple[bool, torch.dtype, str]] = []

    def __call__(self, input_ids, attention_mask, **_):
        self.seen.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"),
                          torch.get_float32_matmul_precision()))
        return torch.zeros(len(input_ids), 2)


def test_encoder_default_is_fp32_even_inside_a_bf16_training_context(tiny_tokenizer):
    """The papers' numbers come from fp32: the default evaluation disables autocast and TF32 even when a bf16/TF32
    training run surrounds it, and restores that run's settings afterwards."""
    probe, previous = PrecisionProbe(), torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")  # what --tf32 sets for a training run
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            SentenceEncoder(probe, tiny_tokenizer, device="cpu", batch_size=3).encode(SENTENCES)
            assert torch.is_autocast_enabled("cpu")  # the training context is back after the evaluation
        assert torch.get_float32_matmul_precision() == "high"
    finally:
        torch.set_float32_matmul_precision(previous)
    assert probe.seen and all(not enabled and precision == "highest" for enabled, _, precision in probe.seen)


def test_encoder_bf16_is_opt_in(tiny_tokenizer):
    probe = PrecisionProbe()
    SentenceEncoder(probe, tiny_tokenizer, device="cpu", batch_size=3, eval_dtype="bf16").encode(SENTENCES)
    assert probe.seen and all(enabled and dtype == torch.bfloat16 for enabled, dtype, _ in probe.seen)
    with pytest.raises(ValueError, match="eval_dtype"):
        SentenceEncoder(probe, tiny_tokenizer, eval_dtype="fp16")


def test_encoder_batches_are_length_sorted_and_minimally_padded(tiny_tokenizer):
    embed = RecordingEmbed()
    SentenceEncoder(embed, tiny_tokenizer, device="cpu", batch_size=3).encode(SENTENCES)
    true_lengths = [batch["attention_mask"].sum(1).tolist() for batch in embed.batches]
    flat = [n for batch in true_lengths for n in batch]
    assert flat == sorted(flat, reverse=True)
    assert [batch["input_ids"].shape[1] for batch in embed.batches] == [max(b) for b in true_lengths]
    assert set(embed.batches[0]) == set(tiny_tokenizer("x"))  # exactly the tokenizer's keys


def test_length_sorted_batches_is_stable():
    assert length_sorted_batches([2, 5, 2, 5, 3], batch_size=2) == [[1, 3], [4, 0], [2]]


def test_encoder_results_independent_of_batch_size_and_order(tiny_bert_dir: Path):
    from eval.loading import load_encoder

    encoder = load_encoder(tiny_bert_dir, "avg", device="cpu", batch_size=1)
    reference = encoder.encode(SENTENCES)
    encoder.batch_size = 64
    np.testing.assert_allclose(encoder.encode(SENTENCES), reference, atol=1e-5)
    permutation = np.random.default_rng(0).permutation(len(SENTENCES))
    np.testing.assert_allclose(encoder.encode([SENTENCES[i] for i in permutation]), reference[permutation], atol=1e-5)


def test_encoder_empty_input(tiny_tokenizer):
    assert SentenceEncoder(RecordingEmbed(), tiny_tokenizer).encode([]).shape == (0, 0)
