"""Analyses (eval.analysis) against hand-computed values, and their run_* wrappers / plots on small fixtures."""
from __future__ import annotations

import json
import math
import zlib
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pytest

from conftest import own_sts_format_files, write_sts_fixture
from eval.analysis import (
    alignment,
    cosine_by_bucket,
    length_bias,
    main,
    nearest_neighbours,
    normalise_gold,
    pairwise_sq_distances,
    recall_at_k,
    retrieval_ranks,
    run_align_uniform,
    run_cosine_distribution,
    run_length_bias,
    run_nearest_neighbours,
    run_retrieval,
    uniformity,
)
from eval.plots import plot_align_uniform_scatter

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def unit(degrees: float) -> list[float]:
    return [math.cos(math.radians(degrees)), math.sin(math.radians(degrees))]


# Four sentences on the unit circle at 0, 10, 30 and 90 degrees.
ANGLES = {"a man sings .": 0.0, "a man is singing .": 10.0, "the man sings a song .": 30.0, "a dog runs .": 90.0}
A, B, C, D = ANGLES


class TableEncoder:
    """2-d embeddings: the angle table above; any other sentence at a hashed angle. Counts encode calls."""

    def __init__(self, angles: Mapping[str, float] = ANGLES) -> None:
        self.angles = dict(angles)
        self.calls = 0

    def encode(self, sentences: Sequence[str], show_progress: bool = False, desc: str | None = None) -> np.ndarray:
        self.calls += 1
        return np.asarray([unit(self.angles.get(s, zlib.crc32(s.encode()) % 360)) for s in sentences],
                          dtype=np.float32)


# ----------------------------------------------------------------------------------------------- pure metrics


def test_uniformity_three_points_by_hand() -> None:
    x = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    # squared distances: (1,0)-(0,1): 2, (1,0)-(-1,0): 4, (0,1)-(-1,0): 2
    np.testing.assert_allclose(pairwise_sq_distances(x), [2.0, 4.0, 2.0])
    expected = math.log((math.exp(-2 * 2) + math.exp(-2 * 4) + math.exp(-2 * 2)) / 3)  # = -4.396349
    assert uniformity(x) == pytest.approx(expected) == pytest.approx(-4.396349, abs=1e-6)
    assert uniformity(3.0 * x) == pytest.approx(expected)  # rows are normalised first
    assert uniformity(x, block=1) == pytest.approx(expected)  # block-wise log-sum-exp


def test_alignment_by_hand() -> None:
    x = np.array([[1.0, 0.0], [0.0, 1.0]])
    y = np.array([[0.0, 2.0], [0.0, 5.0]])  # normalised: (0,1), (0,1)
    assert alignment(x, y) == pytest.approx((2.0 + 0.0) / 2)  # ||(1,-1)||^2 = 2, ||0||^2 = 0
    assert alignment(x, y, alpha=1) == pytest.approx((math.sqrt(2.0) + 0.0) / 2)


def test_retrieval_ranks_by_hand() -> None:
    pool = np.array([unit(0), unit(10), unit(30), unit(90)])
    # query 0 deg -> target 30 deg: only 10 deg is closer -> rank 2
    # query 0 deg -> target 90 deg: 10 and 30 deg are closer -> rank 3
    # query 90 deg -> target 0 deg: 30 deg (cos 60) and 10 deg (cos 80) are closer -> rank 3
    # query 10 deg -> target 0 deg: cos 10 beats 30 deg (cos 20) and 90 deg (cos 80) -> rank 1
    np.testing.assert_array_equal(retrieval_ranks(pool, [0, 0, 3, 1], [2, 3, 0, 0]), [2, 3, 3, 1])
    collapsed = np.ones((4, 2))  # every cosine ties: the target is ranked behind the two other rows
    np.testing.assert_array_equal(retrieval_ranks(collapsed, [0], [1]), [3])


def test_recall_at_k() -> None:
    assert recall_at_k(np.array([1, 2, 6, 11])) == {"R@1": 25.0, "R@5": 50.0, "R@10": 75.0}


def test_cosine_by_bucket_by_hand() -> None:
    gold = np.array([0.5, 1.0, 4.5, 5.0, 3.99])
    cosines = np.array([0.1, 0.3, 0.8, 1.0, 0.6])
    buckets = cosine_by_bucket(cosines, gold)
    assert list(buckets) == ["0-1", "1-2", "2-3", "3-4", "4-5"]
    assert buckets["0-1"] == {"n": 1, "mean": pytest.approx(0.1), "std": 0.0}
    assert buckets["1-2"]["mean"] == pytest.approx(0.3)  # 1.0 opens [1, 2)
    assert buckets["3-4"]["mean"] == pytest.approx(0.6)
    assert buckets["4-5"] == {"n": 2, "mean": pytest.approx(0.9), "std": pytest.approx(0.1)}  # 5.0 included
    assert buckets["2-3"]["n"] == 0 and math.isnan(buckets["2-3"]["mean"])


def test_normalise_gold() -> None:
    np.testing.assert_allclose(normalise_gold("STS12", np.array([0.0, 2.5, 5.0])), [0.0, 0.5, 1.0])
    np.testing.assert_allclose(normalise_gold("SICKRelatedness", np.array([1.0, 3.0, 5.0])), [0.0, 0.5, 1.0])


def test_length_bias_four_pairs_by_hand() -> None:
    sent1 = ["a b c", "a b", "one two three four five", "x"]
    sent2 = ["d e f", "a b c d e f g", "one two three four five six seven eight", "x y z w v u"]
    # word counts (3, 3) (2, 7) (5, 8) (1, 6): differences 0, 5, 3, 5 -> "<= 3": pairs 1 and 3, "> 3": pairs 2 and 4
    cosines = np.array([0.9, 0.2, 0.5, 0.4])
    gold01 = np.array([1.0, 0.5, 0.2, 0.8])
    # |cos - gold|: 0.1, 0.3, 0.3, 0.4 -> le = (0.1 + 0.3) / 2 = 0.2, gt = (0.3 + 0.4) / 2 = 0.35
    result = length_bias(sent1, sent2, cosines, gold01)
    assert result == {"le": pytest.approx(20.0), "gt": pytest.approx(35.0), "gap": pytest.approx(-15.0),
                      "n_le": 2, "n_gt": 2}


def test_nearest_neighbours_order_and_exclusion() -> None:
    pool = np.array([unit(0), unit(10), unit(30), unit(90)])
    names = ["q", "ten", "thirty", "ninety"]
    found = nearest_neighbours(np.array(unit(0)), pool, names, k=2, exclude=("q",))
    assert [s for s, _ in found] == ["ten", "thirty"]
    assert found[0][1] == pytest.approx(math.cos(math.radians(10)))


# ----------------------------------------------------------------------------------------------- run_* wrappers


@pytest.fixture
def analysis_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The conftest SentEval folder with a hand-made STS-B test set over the four sentences above."""
    own_sts_format_files(monkeypatch)
    root = write_sts_fixture(tmp_path / "senteval")
    rows = [(A, C, 5.0), (D, A, 5.0), (A, B, 4.5), (B, D, 1.0), (C, D, 0.5)]
    (root / "STS" / "STSBenchmark" / "sts-test.csv").write_text(
        "".join(f"main-captions\tMSRvid\t2012test\t{i:04d}\t{score:.3f}\t{s1}\t{s2}\n"
                for i, (s1, s2, score) in enumerate(rows)), encoding="utf-8")
    return root


def _check_outputs(result: dict, key: str, out_dir: Path) -> dict:
    json.dumps(result)  # JSON-serialisable
    numbers = result[key]
    assert Path(numbers["plot"]).read_bytes().startswith(PNG_MAGIC)
    assert Path(numbers["plot"]).parent == out_dir
    return numbers


def test_run_align_uniform(analysis_dir: Path, tmp_path: Path) -> None:
    numbers = _check_outputs(run_align_uniform(TableEncoder(), analysis_dir, tmp_path / "out"), "align_uniform",
                             tmp_path / "out")
    # positive pairs (score > 4): A-C (30 deg), D-A (90 deg), A-B (10 deg): 2 - 2 cos(angle)
    assert numbers["alignment"] == pytest.approx((0.2679492 + 2.0 + 0.0303845) / 3, abs=1e-6)  # 0.766111
    # four distinct sentences, six pairs at 10, 30, 90, 20, 80, 60 degrees
    sq = [0.0303845, 0.2679492, 2.0, 0.1206148, 1.6527036, 1.0]
    assert numbers["uniformity"] == pytest.approx(math.log(sum(math.exp(-2 * d) for d in sq) / 6), abs=1e-6)
    assert (numbers["n_positive_pairs"], numbers["n_sentences"]) == (3, 4)
    assert json.loads((tmp_path / "out" / "align_uniform.json").read_text())["alignment"] == numbers["alignment"]


def test_run_retrieval(analysis_dir: Path, tmp_path: Path) -> None:
    numbers = _check_outputs(run_retrieval(TableEncoder(), analysis_dir, tmp_path), "retrieval", tmp_path)
    # sent1 -> sent2: A -> C rank 2 (B at 10 deg is closer), D -> A rank 3 (B and C are closer)
    assert numbers["sent1->sent2"] == {"R@1": 0.0, "R@5": 100.0, "R@10": 100.0}
    assert numbers["mean_rank"] == {"sent1->sent2": 2.5, "sent2->sent1": 2.5}  # C -> A: 2, A -> D: 3
    assert (numbers["n_queries"], numbers["pool_size"]) == (2, 4)


def test_run_cosine_distribution(analysis_dir: Path, tmp_path: Path) -> None:
    buckets = _check_outputs(run_cosine_distribution(TableEncoder(), analysis_dir, tmp_path),
                             "cosine_distribution", tmp_path)["buckets"]
    cos30, cos10 = math.cos(math.radians(30)), math.cos(math.radians(10))  # 0.866025, 0.984808
    assert buckets["4-5"]["n"] == 3
    assert buckets["4-5"]["mean"] == pytest.approx((cos30 + 0.0 + cos10) / 3)  # 0.616944
    assert buckets["0-1"]["mean"] == pytest.approx(0.5)  # C-D at 60 deg, gold 0.5
    assert buckets["1-2"]["mean"] == pytest.approx(math.cos(math.radians(80)))  # B-D, gold 1.0


def test_run_length_bias_encodes_once(analysis_dir: Path, tmp_path: Path) -> None:
    encoder = TableEncoder()
    table = _check_outputs(run_length_bias(encoder, analysis_dir, tmp_path), "length_bias", tmp_path)["by_task"]
    assert encoder.calls == 1
    assert set(table) == {"STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness", "avg"}
    # STS-B test: word-count differences A/C 2, D/A 0, A/B 1, B/D 1, C/D 2 -> all "<= 3"
    stsb = table["STSBenchmark"]
    assert (stsb["n_le"], stsb["n_gt"]) == (5, 0)
    errors = [abs(math.cos(math.radians(30)) - 1.0), 1.0, abs(math.cos(math.radians(10)) - 0.9),
              abs(math.cos(math.radians(80)) - 0.2), abs(0.5 - 0.1)]
    assert stsb["le"] == pytest.approx(100 * sum(errors) / 5)


def test_run_nearest_neighbours_excludes_query(analysis_dir: Path, tmp_path: Path) -> None:
    numbers = _check_outputs(run_nearest_neighbours(TableEncoder(), analysis_dir, "  a man   sings . ", tmp_path,
                                                    k=2), "nearest_neighbours", tmp_path)
    assert numbers["query"] == A
    assert [s for s, _ in numbers["neighbours"]] == [B, C]


def test_scatter_plot_and_cli(analysis_dir: Path, tiny_bert_dir: Path, tmp_path: Path,
                              torch_single_thread: None) -> None:
    path = plot_align_uniform_scatter({"avg BERT": (0.17, -1.47), "SimCSE": (0.18, -2.31)}, tmp_path / "s.png")
    assert path.read_bytes().startswith(PNG_MAGIC)
    out = tmp_path / "cli.png"
    main(["scatter", "--models", str(tiny_bert_dir), str(tiny_bert_dir), "--names", "avg", "cls",
          "--poolers", "avg", "cls_before_pooler", "--senteval_dir", str(analysis_dir), "--device", "cpu",
          "--out", str(out)])
    assert out.read_bytes().startswith(PNG_MAGIC)
    with pytest.raises(SystemExit, match="--names needs one value per --models entry"):
        main(["scatter", "--models", str(tiny_bert_dir), "--names", "a", "b", "--out", str(out)])
