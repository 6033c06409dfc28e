"""Tests of data/corpus.py (loaders), data/sentences.py (sentence splitter) and of the download scripts' shell syntax
and skip logic."""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from data import corpus
from data.corpus import CorpusError, load_sup_corpus, load_unsup_corpus
from data.sentences import split_sentences

DATA_DIR = Path(corpus.__file__).resolve().parent
BASH = shutil.which("bash") or "/bin/bash"
DOWNLOAD_SCRIPTS = ("download_wiki1m.sh", "download_nli.sh", "download_senteval.sh")


def write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8", newline="")
    return path


def load_unsup(path: Path, tmp_path: Path):
    return load_unsup_corpus(path, cache_dir=str(tmp_path / "hf_cache"))


def load_sup(path: Path, tmp_path: Path):
    return load_sup_corpus(path, cache_dir=str(tmp_path / "hf_cache"))


# ------------------------------------------------------------------------------------------------ unsupervised


def test_unsup_txt_strips_and_skips_blank_lines(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write(tmp_path, "corpus.txt", "  first sentence here. \n\n   \nsecond one\r\n\t\n\ufeff\nlast, no newline")
    with caplog.at_level(logging.INFO, logger="data.corpus"):
        dataset = load_unsup(path, tmp_path)
    assert dataset.column_names == ["text"]
    assert dataset["text"] == ["first sentence here.", "second one", "last, no newline"]
    assert f"skipped 4 blank lines of 7 in {path}" in caplog.messages


def test_unsup_txt_without_blank_lines_logs_zero(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write(tmp_path, "corpus.txt", "\ufeffone\ntwo\n")
    with caplog.at_level(logging.INFO, logger="data.corpus"):
        assert load_unsup(path, tmp_path)["text"] == ["one", "two"]
    assert f"skipped 0 blank lines of 2 in {path}" in caplog.messages


@pytest.mark.parametrize("column", ["text", "sentence"])
def test_unsup_single_column_csv(tmp_path: Path, column: str, caplog: pytest.LogCaptureFixture) -> None:
    path = write(tmp_path, "corpus.csv", f'{column}\n"Hello, world."\n\nNA\n""\n"two\nlines"\n')
    with caplog.at_level(logging.INFO, logger="data.corpus"):
        dataset = load_unsup(path, tmp_path)
    assert dataset.column_names == ["text"]
    assert dataset["text"] == ["Hello, world.", "NA", "two\nlines"]
    assert f"skipped 2 blank rows of 5 in {path}" in caplog.messages


def test_unsup_multi_column_csv_is_rejected(tmp_path: Path) -> None:
    path = write(tmp_path, "pairs.csv", "sent0,sent1\na,b\n")
    with pytest.raises(CorpusError, match="single column") as error:
        load_unsup(path, tmp_path)
    assert str(path) in str(error.value) and "'sent0,sent1'" in str(error.value)


def test_unsup_missing_file_suggests_how_to_get_one(tmp_path: Path) -> None:
    path = tmp_path / "wiki1m_for_simcse.txt"
    with pytest.raises(CorpusError, match="no such file") as error:
        load_unsup(path, tmp_path)
    assert str(path) in str(error.value)
    assert "bash data/download_wiki1m.sh" in str(error.value) and "python -m data.standin" in str(error.value)


def test_directory_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match="not a regular file"):
        load_unsup(tmp_path, tmp_path)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("empty.txt", "", "empty"),
        ("blank.txt", "\n  \n\t\n\n", "only blank lines"),
        ("blank.csv", "text\n\n   \n", "every row is blank"),
        ("header_only.csv", "text\n", "no row under the header"),
    ],
)
def test_unsup_files_without_sentences(tmp_path: Path, name: str, content: str, message: str) -> None:
    path = write(tmp_path, name, content)
    with pytest.raises(CorpusError, match=message) as error:
        load_unsup(path, tmp_path)
    assert str(path) in str(error.value)


@pytest.mark.parametrize("block_bytes", [16 << 20, 5])  # one block, and line-aligned blocks of ~5 bytes
def test_undecodable_bytes_name_line_and_offset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block_bytes: int
) -> None:
    monkeypatch.setattr(corpus, "_BLOCK_BYTES", block_bytes)
    # line 1 = 10 bytes, line 2 = 7 bytes ("é" in UTF-8 is fine), line 3 holds a Latin-1 "é" (0xe9) at offset 21.
    path = write(tmp_path, "latin1.txt", "good line\n".encode() + "séné\n".encode() + b"bad \xe9 here\nok\n")
    with pytest.raises(CorpusError) as error:
        load_unsup(path, tmp_path)
    message = str(error.value)
    assert str(path) in message and "line 3" in message and "byte offset 21" in message and "0xe9" in message
    assert "iconv -f latin1 -t utf8" in message


def test_undecodable_bytes_in_csv(tmp_path: Path) -> None:
    path = write(tmp_path, "nli.csv", b"sent0,sent1,hard_neg\na,b,c\nd,\xff,f\n")
    with pytest.raises(CorpusError, match="line 3") as error:
        load_sup(path, tmp_path)
    assert str(path) in str(error.value)


# ------------------------------------------------------------------------------------------------ supervised


COMPRESSED = {".gz": "gzip", ".bz2": "bz2", ".xz": "lzma"}  # suffix -> the stdlib module that writes it


def compress(path: Path, suffix: str, name: str | None = None) -> Path:
    """``path``'s bytes compressed as ``suffix`` says, written beside it as ``name`` (default: path + suffix)."""
    import importlib

    target = path.with_name(name or path.name + suffix)
    target.write_bytes(importlib.import_module(COMPRESSED[suffix]).compress(path.read_bytes()))
    return target


@pytest.mark.parametrize("suffix", sorted(COMPRESSED))
def test_a_compressed_corpus_is_read_as_its_contents(tmp_path: Path, suffix: str) -> None:
    """``wiki1m_for_simcse.txt.gz``: its UTF-8 check refused byte 0x8b and told the user to convert it from
    Latin-1. Text and CSV corpora compressed with gzip, bzip2 or xz load as their plain files do."""
    plain = write(tmp_path, "corpus.txt", "first sentence\n\n  second sentence \n")
    assert load_unsup_corpus(compress(plain, suffix))["text"] == load_unsup_corpus(plain)["text"] == [
        "first sentence", "second sentence"]
    nli = write(tmp_path, "nli.csv", "sent0,sent1,hard_neg\na cat,a dog,a car\nthe sun,the moon,a song\n")
    assert load_sup_corpus(compress(nli, suffix)).to_dict() == load_sup_corpus(nli).to_dict()
    single = write(tmp_path, "single.csv", "sentence\nfirst one\nsecond one\n")  # .csv inside: its header read
    assert load_unsup_corpus(compress(single, suffix))["text"] == ["first one", "second one"]


def test_a_compressed_corpus_whose_name_says_otherwise_is_refused(tmp_path: Path) -> None:
    """``datasets`` decompresses by the name: a gzip file named .txt was read as bytes, a plain one named .gz fails."""
    plain = write(tmp_path, "corpus.txt", "a sentence\n")
    hidden = compress(plain, ".gz", name="hidden.txt")
    with pytest.raises(CorpusError, match=r"hidden.txt: the file is gzip-compressed but its name does not end in "
                                          r"\.gz; rename it \(hidden.txt.gz\)"):
        load_unsup_corpus(hidden)
    named = write(tmp_path, "named.txt.xz", "a sentence\n")
    with pytest.raises(CorpusError, match=r"named.txt.xz: the name ends in \.xz but the file is not xz-compressed"):
        load_unsup_corpus(named)


def test_undecodable_bytes_of_a_compressed_corpus_name_its_decompressed_offset(tmp_path: Path) -> None:
    latin1 = write(tmp_path, "latin1.txt", "caf\xe9 au lait\n".encode("latin-1"))
    with pytest.raises(CorpusError, match=r"latin1.txt.gz, line 1: byte 0xe9 at byte offset 3 \(byte 4 of the "
                                          r"line\) of its decompressed contents is not valid UTF-8"):
        load_unsup_corpus(compress(latin1, ".gz"))


@pytest.mark.parametrize("suffix", sorted(COMPRESSED))
def test_a_corrupt_compressed_corpus_is_refused_with_the_fix(tmp_path: Path, suffix: str) -> None:
    """Flipped bytes inside the archive stopped the check with zlib.error / OSError / LZMAError and a traceback
    (a truncated one: tests/test_user_errors.py)."""
    plain = write(tmp_path, "corpus.txt", "".join(f"sentence number {i} is here\n" for i in range(500)))
    archive = compress(plain, suffix)
    damaged = bytearray(archive.read_bytes())
    for i in range(20, len(damaged) - 20, 7):
        damaged[i] ^= 0x55
    archive.write_bytes(bytes(damaged))
    with pytest.raises(CorpusError, match=rf"corpus.txt{suffix}: the \w+ archive is truncated or corrupt \(.+\); "
                                          r"download it again, or compress the plain corpus again"):
        load_unsup_corpus(archive)


def test_the_ordered_corpus_breaks_lines_where_the_unsupervised_loader_does(tmp_path: Path) -> None:
    """``read_documents`` split with str.splitlines(): 'A two has\\u2028a line separator.' became two sentences (and
    two wrong pairs), as did lines holding U+0085 or a form feed, and a UTF-8 BOM stayed on the first sentence. Lines
    end at \\n, \\r\\n and a lone \\r only, as the "text" builder of ``load_unsup_corpus`` reads them."""
    from data.corpus import load_next_sentence_corpus, read_documents

    path = write(tmp_path, "ordered.txt", "\ufeffA one.\nA two has\u2028a line separator.\r\nA three\x0cff.\rA four."
                                          "\n\nB one\x85 next.\nB two \x1e x.\n")
    documents = read_documents(path)
    assert documents == [["A one.", "A two has\u2028a line separator.", "A three\x0cff.", "A four."],
                         ["B one\x85 next.", "B two \x1e x."]]
    assert [s for d in documents for s in d] == load_unsup_corpus(path, cache_dir=str(tmp_path / "hf"))["text"]
    stats = corpus.CorpusStats()
    pairs = load_next_sentence_corpus(compress(path, ".gz"), stats=stats)
    assert pairs["text"] == ["A one.", "A two has\u2028a line separator.", "A three\x0cff.", "B one\x85 next."]
    assert (stats.rows, stats.skipped) == (6, 2)
    assert [note.split(" (", 1)[0] for note in stats.notes] == [f"{path}.gz: 1 lone carriage return"]


def test_lone_carriage_returns_and_lines_with_a_tab_are_counted_and_warned(tmp_path: Path, caplog) -> None:
    """A stray \\r inside a line cut its sentence in two, and a tab-separated file's columns trained as one
    sentence, both unseen: each is now a warning with its count, its first line and the fix (and a note for the
    run's summary). A \\r\\n line end, a \\r or tab beside blanks only, and a clean file say nothing."""
    path = write(tmp_path, "corpus.txt", "fine one\r\n  \t \nhalf a\rhalf b\n\tlead tab\n4.5\tA man.\tA dog.\n"
                                         "x\ry\rz\r\n \r \nlast\tone")
    stats = corpus.CorpusStats()
    with caplog.at_level(logging.WARNING, logger="data.corpus"):
        dataset = load_unsup_corpus(path, cache_dir=str(tmp_path / "hf"), stats=stats)
    assert dataset["text"] == ["fine one", "half a", "half b", "lead tab", "4.5\tA man.\tA dog.", "x", "y", "z",
                               "last\tone"]
    assert caplog.messages == stats.notes == [
        f"{path}: 3 lone carriage returns (\\r without \\n; the first on line 3) each end a sentence, as the corpus "
        f"is read with universal newlines (\\n, \\r\\n and \\r end a line): if they sit inside sentences, each "
        f"cuts one in two: replace them (tr '\\r' ' ' < {path} > FIXED); as the line ends of an old Mac file they "
        f"are right",
        f"{path}: 2 lines hold a tab (the first: line 5), and each line trains as one sentence, tabs and all: if the "
        f"file is tab-separated columns (scores, pairs), pass one sentence per line"]
    caplog.clear()
    clean = write(tmp_path, "clean.txt", "one\r\n\t\ntwo \r\n")
    with caplog.at_level(logging.WARNING, logger="data.corpus"):
        assert load_unsup_corpus(clean, cache_dir=str(tmp_path / "hf"))["text"] == ["one", "two"]
    assert caplog.messages == []


@pytest.mark.parametrize("name, content, line", [
    ("nli.csv", "sent0,sent1,hard_neg\nx,y,z\n\ufeffsent0,sent1,hard_neg\r\nx,y,z\n", 3),
    ("pairs.csv", "sent0,sent1\nx,y\n\n sent0 , sent1\n", 4),
    ("corpus.csv", "text\na\nb\ntext\nc\n", 4)])
def test_a_row_repeating_the_header_is_refused_naming_its_line(tmp_path: Path, name, content, line) -> None:
    """Two corpora joined with ``cat``: the second's header trained as a sentence (an NLI triple of the column
    names, or the sentence 'text')."""
    path = write(tmp_path, name, content)
    loader = load_unsup if name == "corpus.csv" else load_sup
    with pytest.raises(CorpusError) as error:
        loader(path, tmp_path)
    header = content.split("\n", 1)[0]
    assert str(error.value) == (
        f"{path}, line {line}: the row repeats the header {header!r} (files joined with cat?), which would train as a "
        f"sentence; delete that line (the header belongs on line 1 only), or join the files with `tail -n +2` on all "
        f"but the first")


def test_sup_triplets(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    content = (
        "sent0,sent1,hard_neg\n"
        '"A man, smiling.",A man smiles., Nobody smiles. \n'
        "\n"
        "no hard negative,here,\n"
        "NA,None,null\n"
        '"multi\nline",b,c\n'
    )
    path = write(tmp_path, "nli_for_simcse.csv", content)
    with caplog.at_level(logging.INFO, logger="data.corpus"):
        dataset = load_sup(path, tmp_path)
    assert dataset.column_names == ["sent0", "sent1", "hard_neg"]
    assert dataset[:] == {
        "sent0": ["A man, smiling.", "NA", "multi\nline"],
        "sent1": ["A man smiles.", "None", "b"],
        "hard_neg": ["Nobody smiles.", "null", "c"],
    }
    assert f"skipped 2 rows with an empty cell of 5 in {path}" in caplog.messages


def test_sup_pairs_have_no_hard_negative(tmp_path: Path) -> None:
    path = write(tmp_path, "pairs.csv", "sent0,sent1\nx,y\n1,2\n")
    dataset = load_sup(path, tmp_path)
    assert dataset.column_names == ["sent0", "sent1"]
    assert dataset[:] == {"sent0": ["x", "1"], "sent1": ["y", "2"]}


@pytest.mark.parametrize(
    "header", ["premise,hypothesis,negative", "sent0", "sent0,sent1,hard_neg,label", "sent1,sent0"]
)
def test_sup_wrong_header(tmp_path: Path, header: str) -> None:
    fields = ",".join("x" * (header.count(",") + 1))
    path = write(tmp_path, "nli.csv", f"{header}\n{fields}\n")
    with pytest.raises(CorpusError) as error:
        load_sup(path, tmp_path)
    message = str(error.value)
    assert str(path) in message and repr(header) in message and "'sent0,sent1,hard_neg'" in message


@pytest.mark.parametrize("bad_row", ["a,b", "a,b,c,d", 'a,"b,c'])
def test_sup_ragged_row_names_its_line(tmp_path: Path, bad_row: str) -> None:
    path = write(tmp_path, "nli.csv", f"sent0,sent1,hard_neg\nx,y,z\n{bad_row}\nx,y,z\n")
    with pytest.raises(CorpusError) as error:
        load_sup(path, tmp_path)
    message = str(error.value)
    assert str(path) in message and ("line 3" in message or "line 4" in message)  # an open quote runs to EOF


def test_sup_ragged_row_exact_line(tmp_path: Path) -> None:
    path = write(tmp_path, "nli.csv", "sent0,sent1,hard_neg\nx,y,z\n\nx,y,z\nonly,two\n")
    with pytest.raises(CorpusError, match=r"line 5: found 2 fields .* has 3"):
        load_sup(path, tmp_path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "empty"),
        ("sent0,sent1,hard_neg\n", "no row under the header"),
        ("sent0,sent1\n,\n", "every row has an empty cell"),
        ("\nsent0,sent1\n", "header"),
    ],
)
def test_sup_files_without_rows(tmp_path: Path, content: str, message: str) -> None:
    path = write(tmp_path, "nli.csv", content)
    with pytest.raises(CorpusError, match=message) as error:
        load_sup(path, tmp_path)
    assert str(path) in str(error.value)


def test_sup_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nli_for_simcse.csv"
    with pytest.raises(CorpusError, match="bash data/download_nli.sh") as error:
        load_sup(path, tmp_path)
    assert str(path) in str(error.value)


# ------------------------------------------------------------------------------------------------ sentence splitter


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("One sentence here. Another one there! A third? Yes.",
         ["One sentence here.", "Another one there!", "A third?", "Yes."]),
        ("Mr. Smith met Dr. Jones and Prof. Brown. They talked.",
         ["Mr. Smith met Dr. Jones and Prof. Brown.", "They talked."]),
        ("Some fruit, e.g. Apples, are red, i.e. Not green. Fine.",
         ["Some fruit, e.g. Apples, are red, i.e. Not green.", "Fine."]),
        ("The U.S. Army won. It was 1945.", ["The U.S. Army won.", "It was 1945."]),
        ("He moved to the U.S. The year was 1990.", ["He moved to the U.S.", "The year was 1990."]),
        ("It was written by Arthur C. Clarke and J. R. R. Tolkien. Both wrote.",
         ["It was written by Arthur C. Clarke and J. R. R. Tolkien.", "Both wrote."]),
        ("Pi is about 3.14 and e about 2.718. Version 2.0 shipped.",
         ["Pi is about 3.14 and e about 2.718.", "Version 2.0 shipped."]),
        ("It cost $3.5 million in 2001. 200 people came.", ["It cost $3.5 million in 2001.", "200 people came."]),
        ('He said "Stop." Then he left. (It rained.) Later, sun.',
         ['He said "Stop."', "Then he left.", "(It rained.)", "Later, sun."]),
        ("Apples, pears, etc. Are fruit. Acme Inc. The end.",
         ["Apples, pears, etc. Are fruit.", "Acme Inc.", "The end."]),
        ("See Fig. 3 and No. 5 for the data. Written c. 1000 AD. Done.",
         ["See Fig. 3 and No. 5 for the data.", "Written c. 1000 AD.", "Done."]),
        ("it ends in lower case. not a new sentence.", ["it ends in lower case. not a new sentence."]),
        ("Wait... What happened?! Nothing.", ["Wait...", "What happened?!", "Nothing."]),
        ("First paragraph ends\nSecond paragraph. Its end.", ["First paragraph ends", "Second paragraph.", "Its end."]),
        ("A line that wraps\nin the middle. Next.", ["A line that wraps in the middle.", "Next."]),
        ("  Spaces   and\ttabs  collapse.  ", ["Spaces and tabs collapse."]),
        ("", []),
        ("\n \n", []),
    ],
)
def test_split_sentences(text: str, expected: list[str]) -> None:
    assert split_sentences(text) == expected


def test_split_sentences_never_returns_line_breaks() -> None:
    text = "One.\u2028Two words here.\r\nThree\x0bfour. Five\u00a0six."
    assert all(not any(ch.isspace() and ch != " " for ch in s) for s in split_sentences(text))


# ------------------------------------------------------------------------------------------------ download scripts


@pytest.mark.parametrize("script", DOWNLOAD_SCRIPTS)
def test_download_script_syntax(script: str) -> None:
    path = DATA_DIR / script
    assert subprocess.run([BASH, "-n", str(path)], capture_output=True, text=True).returncode == 0
    text = path.read_text()
    assert text.startswith("#!/usr/bin/env bash") and "set -euo pipefail" in text
    assert "https://huggingface.co/datasets/princeton-nlp/datasets-for-simcse/resolve/main/" in text


def run_script(script: str, *args: str, path_env: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ) if path_env is None else {**os.environ, "PATH": path_env}
    return subprocess.run([BASH, str(DATA_DIR / script), *args], capture_output=True, text=True, env=env,
                          timeout=60)


@pytest.mark.parametrize(("script", "name"), [("download_wiki1m.sh", "wiki1m_for_simcse.txt"),
                                              ("download_nli.sh", "nli_for_simcse.csv")])
def test_download_skips_existing_file(tmp_path: Path, script: str, name: str) -> None:
    (tmp_path / name).write_text("already here\n")
    result = run_script(script, str(tmp_path))
    assert result.returncode == 0 and "skipping" in result.stdout
    assert (tmp_path / name).read_text() == "already here\n"


def test_download_fails_clearly_without_curl_or_wget(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("dirname", "mkdir", "mv", "rm", "wc"):  # everything the script runs except curl and wget
        (bin_dir / tool).symlink_to(shutil.which(tool))
    result = run_script("download_nli.sh", str(tmp_path / "out"), path_env=str(bin_dir))
    assert result.returncode != 0 and "neither curl nor wget" in result.stderr


def test_senteval_extracts_into_downstream_and_prints_export(tmp_path: Path) -> None:
    source = tmp_path / "src"
    for folder in ("STS/STSBenchmark", "SICK", "MR"):
        (source / folder).mkdir(parents=True)
    (source / "STS/STSBenchmark/sts-dev.csv").write_text("x\n")
    target = tmp_path / "senteval"
    target.mkdir()
    # A tar already in place is extracted without downloading (the archive keeps STS/, SICK/, ... at its top).
    subprocess.run(["tar", "-cf", str(target / "senteval.tar"), "-C", str(source), "."], check=True)
    result = run_script("download_senteval.sh", str(target))
    assert result.returncode == 0, result.stderr
    assert (target / "downstream/STS/STSBenchmark/sts-dev.csv").read_text() == "x\n"
    assert sorted(p.name for p in target.iterdir()) == ["downstream"]  # tar and scratch folder removed
    assert result.stdout.rstrip().endswith(f"export SENTEVAL_DIR={target.resolve()}/downstream")
    rerun = run_script("download_senteval.sh", str(target))
    assert rerun.returncode == 0 and "skipping" in rerun.stdout and "export SENTEVAL_DIR=" in rerun.stdout
