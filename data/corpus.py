"""Loading the training corpora: a corpus file -> a ``datasets.Dataset``, checked first, nothing dropped silently.

- ``load_unsup_corpus``: unsupervised SimCSE's one-sentence-per-line file (``wiki1m_for_simcse.txt``, or the offline
  stand-in of ``data.standin``) -> ``datasets.Dataset`` with one column ``"text"``. A single-column CSV with a header
  row (SimCSE's unsupervised CSV form) is read too.
- ``load_sup_corpus``: supervised SimCSE's NLI triplets (``nli_for_simcse.csv``, header ``sent0,sent1,hard_neg``; a
  pair file ``sent0,sent1`` is allowed) -> ``datasets.Dataset`` with those columns.
- ``load_next_sentence_corpus``: an ordered corpus (documents separated by blank lines, e.g. the one
  ``python -m data.standin --ordered_out`` builds) -> columns ``"text"`` and ``"next_text"`` (DiffCSE Table 3).

Files are checked before ``datasets`` reads them, so that a bad file fails with a ``CorpusError`` that names the file
(and line) and says how to fix it, instead of a deep traceback. A corpus compressed with gzip, bzip2 or xz (named
``.gz`` / ``.bz2`` / ``.xz``, e.g. ``wiki1m_for_simcse.txt.gz``) is read as its contents (:data:`COMPRESSIONS`).
Every filter logs how many rows it dropped: nothing is dropped silently. The sentence splitter of the stand-in
corpora is ``data.sentences``.
"""
from __future__ import annotations

import bz2
import contextlib
import csv
import gzip
import hashlib
import io
import logging
import lzma
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:  # ``datasets`` is imported lazily: importing this module (the collators do) stays cheap.
    import datasets

logger = logging.getLogger(__name__)

UNSUP_HINT = (
    "download SimCSE's corpus with `bash data/download_wiki1m.sh`, or build the offline stand-in corpus with "
    "`python -m data.standin`"
)
SUP_HINT = "download SimCSE's NLI triplets with `bash data/download_nli.sh`"
ORDERED_HINT = "build an ordered corpus with `python -m data.standin --ordered_out PATH`"
SUP_HEADERS: tuple[tuple[str, ...], ...] = (("sent0", "sent1", "hard_neg"), ("sent0", "sent1"))
NEXT_COLUMN = "next_text"  # the column of a sentence's successor (load_next_sentence_corpus, DiffCSE source="next")

_BLOCK_BYTES = 16 << 20  # read size for the UTF-8 check (rounded up to a whole line)

#: A compressed corpus's name suffix -> (its format's name, the first bytes of such a file, the opener of its
#: contents); ``datasets`` decompresses by the same suffix.
COMPRESSIONS = {".gz": ("gzip", b"\x1f\x8b", gzip.open), ".bz2": ("bzip2", b"BZh", bz2.open),
                ".xz": ("xz", b"\xfd7zXZ\x00", lzma.open)}


class CorpusError(ValueError):
    """A corpus file is missing or malformed; the message names the file (and line) and says how to fix it."""


@dataclass
class CorpusStats:
    """What a loader read and dropped, filled in when passed as ``stats=`` (the end-of-run summary prints it)."""

    file: str = ""
    rows: int = 0  # rows (lines) read, dropped ones included
    skipped: int = 0
    skipped_what: str = ""  # e.g. "blank lines"
    #: What the file holds that changes its rows unseen (:class:`LineNotes`), for the summary's warnings.
    notes: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------------------------------------------
# Public loaders
# ----------------------------------------------------------------------------------------------------------------


def load_unsup_corpus(path: str | Path, *, cache_dir: str | None = None,
                      stats: CorpusStats | None = None) -> datasets.Dataset:
    """Load a one-sentence-per-line corpus as a ``Dataset`` with one column ``"text"``.

    Lines are stripped; blank lines are skipped and their count is logged. A ``.csv`` file must have a single
    column under a header row (any name; it is renamed ``"text"``); any other suffix is read as plain text lines,
    which end at ``\n``, ``\r\n`` or ``\r`` (the ``text`` reader's universal newlines, as the authors' code reads
    its corpus): a lone ``\r`` and a line holding a tab are counted and warned of (:class:`LineNotes`).

    Raises:
        CorpusError: the file is missing, empty, not UTF-8, holds only blank lines, or (CSV) has more than one
            column, a row with the wrong number of fields or a row repeating the header.
    """
    lines = None if contents_suffix(Path(path)) == ".csv" else LineNotes()  # a CSV's rows are not its lines
    file = _check_file(path, hint=UNSUP_HINT, lines=lines)
    if lines is None:
        header = _check_csv(file)
        if len(header) != 1:
            raise CorpusError(
                f"{file}: an unsupervised CSV corpus must have a single column, but its header is "
                f"{_join(header)!r}; expected a header such as 'text' and one (quoted) sentence per row, "
                f"or use a .txt file with one sentence per line"
            )
        dataset = _load_csv(file, header, cache_dir=cache_dir)
        if header[0] != "text":
            dataset = dataset.rename_column(header[0], "text")
        return _drop_blank_rows(dataset, file, skipped="blank rows", problem="every row is blank", stats=stats)
    notes = lines.warn(file)
    dataset = _load_builder("text", file, cache_dir=cache_dir)
    dataset = _drop_blank_rows(dataset, file, skipped="blank lines", problem="the file holds only blank lines",
                               stats=stats)
    if stats is not None:
        stats.notes = notes
    return dataset


def load_sup_corpus(path: str | Path, *, cache_dir: str | None = None,
                    stats: CorpusStats | None = None) -> datasets.Dataset:
    """Load supervised SimCSE's NLI CSV as a ``Dataset`` with columns ``sent0, sent1, hard_neg``.

    The header must be ``sent0,sent1,hard_neg`` or, for a corpus without hard negatives, ``sent0,sent1`` (then the
    dataset has no ``hard_neg`` column). Cells are stripped and read as text (``NA``/``None`` stay strings); rows with
    an empty cell (blank lines included) are skipped and counted in the log.

    Raises:
        CorpusError: the file is missing, empty, not UTF-8, has another header, a row with the wrong number of
            fields, a row repeating the header (files joined with ``cat``), or no complete row.
    """
    file = _check_file(path, hint=SUP_HINT)
    header = _check_csv(file)
    if header not in SUP_HEADERS:
        expected = " or ".join(repr(_join(names)) for names in SUP_HEADERS)
        raise CorpusError(
            f"{file}: the header (line 1) is {_join(header)!r} but a supervised corpus needs {expected} "
            f"(the second without hard negatives); fix the first line of the file, or {SUP_HINT}"
        )
    dataset = _load_csv(file, header, cache_dir=cache_dir)
    return _drop_blank_rows(dataset, file, skipped="rows with an empty cell", problem="every row has an empty cell",
                            stats=stats)


def file_sha256(path: str | Path) -> str:
    """The SHA-256 of ``path``'s bytes (hex): what a run records of its corpus (``run_arguments.json``), for a resume
    to tell the same corpus, moved, from another one at the same path (``trainers.resume_settings``)."""
    with Path(path).open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def corpus_lines(path: str | Path) -> Iterator[str]:
    """A one-sentence-per-line corpus's lines, stripped (blank ones as ``""``), decompressed where it is compressed,
    broken where the "text" builder of :func:`load_unsup_corpus` breaks them: at ``"\n"``, ``"\r\n"`` or ``"\r"``
    only (universal newlines; ``str.splitlines()`` also broke a sentence at U+2028, U+0085, ``"\x0c"``, ...). A UTF-8
    BOM is dropped."""
    with open_corpus(Path(path)) as raw, io.TextIOWrapper(raw, encoding="utf-8-sig") as handle:
        for line in handle:
            yield line.strip()


def read_documents(path: str | Path) -> list[list[str]]:
    """An ordered corpus: one sentence per line in document order, documents separated by blank lines
    (:func:`corpus_lines`)."""
    documents, current = [], []
    for line in corpus_lines(path):
        if line:
            current.append(line)
        elif current:
            documents.append(current)
            current = []
    if current:
        documents.append(current)
    return documents


def load_next_sentence_corpus(path: str | Path, *, stats: CorpusStats | None = None) -> datasets.Dataset:
    """``datasets.Dataset`` with columns ``text`` and ``next_text`` = every sentence that has a successor in its
    document (the last sentence of each document is dropped, and counted). A shuffled corpus such as
    ``wiki1m_for_simcse.txt`` or the stand-in ``wiki_standin.txt`` has no order: building the pairs from it would
    pair unrelated sentences, so a file without any blank line (= one document) is refused.

    DiffCSE's Table 3 ("use next sent. for x'"): ``data.diffcse_collator.DiffCSECollator(source="next")`` edits
    ``next_text`` while the sentence embedding comes from ``text``.

    Raises:
        CorpusError: the file is missing, empty, not UTF-8, or not an ordered corpus.
    """
    import datasets

    lines = LineNotes()
    file = _check_file(path, hint=ORDERED_HINT, lines=lines)
    notes = lines.warn(file)
    documents = read_documents(file)
    if len(documents) < 2:
        raise CorpusError(f"{file}: source='next' needs an ordered corpus with documents separated by blank lines "
                          f"(one sentence per line in document order); {ORDERED_HINT}")
    pairs = [(doc[i], doc[i + 1]) for doc in documents for i in range(len(doc) - 1)]
    logger.info("next-sentence corpus: %d pairs from %d documents (%d last sentences without successor dropped)",
                len(pairs), len(documents), len(documents))
    if stats is not None:
        stats.file, stats.rows, stats.skipped = str(path), len(pairs) + len(documents), len(documents)
        stats.skipped_what = "last sentences of a document, which have no next sentence"
        stats.notes = notes
    return datasets.Dataset.from_dict({"text": [a for a, _ in pairs], NEXT_COLUMN: [b for _, b in pairs]})


# ----------------------------------------------------------------------------------------------------------------
# File checks (before ``datasets`` sees the file)
# ----------------------------------------------------------------------------------------------------------------


def _check_file(path: str | Path, *, hint: str, lines: LineNotes | None = None) -> Path:
    """Check that ``path`` is an existing, non-empty, UTF-8 file; return it as a ``Path``. ``lines``: counts what
    its lines hold (:class:`LineNotes`), in the same pass."""
    file = Path(path)
    if not file.exists():
        raise CorpusError(f"{file}: no such file; {hint}")
    if not file.is_file():
        raise CorpusError(f"{file}: is not a regular file (a directory?); pass the path of the corpus file itself")
    if file.stat().st_size == 0:
        raise CorpusError(f"{file}: the file is empty; {hint}")
    _check_utf8(file, lines)
    return file


def compression_of(file: Path) -> str | None:
    """The compression suffix of ``file`` (:data:`COMPRESSIONS`), or ``None`` for plain text. Its name and its first
    bytes must agree: ``datasets`` decompresses by the name, so a compressed file named ``.txt`` was read as bytes
    (the UTF-8 check's refusal told the user to convert it from Latin-1), and a plain one named ``.gz`` would fail."""
    with file.open("rb") as handle:
        head = handle.read(6)
    named = file.suffix.lower() if file.suffix.lower() in COMPRESSIONS else None
    found = next((suffix for suffix, (_, magic, _) in COMPRESSIONS.items() if head.startswith(magic)), None)
    if found is not None and found != named:
        raise CorpusError(f"{file}: the file is {COMPRESSIONS[found][0]}-compressed but its name does not end in "
                          f"{found}; rename it ({file.name}{found}) to read it compressed, or decompress it")
    if named is not None and found is None:
        raise CorpusError(f"{file}: the name ends in {named} but the file is not {COMPRESSIONS[named][0]}-compressed; "
                          f"rename it without {named}")
    return named


def contents_suffix(file: Path) -> str:
    """The suffix of what ``file`` holds: ``.csv`` for ``nli.csv`` and ``nli.csv.gz``."""
    name = file.name[:-len(file.suffix)] if file.suffix.lower() in COMPRESSIONS else file.name
    return Path(name).suffix.lower()


@contextlib.contextmanager
def open_corpus(file: Path) -> Iterator[BinaryIO]:
    """``with open_corpus(file) as handle``: ``file``'s contents as bytes, decompressed where it is compressed
    (:func:`compression_of`); a truncated or corrupt archive read through it raises ``CorpusError``."""
    compression = compression_of(file)
    if compression is None:
        with file.open("rb") as handle:
            yield handle
        return
    name, _, opener = COMPRESSIONS[compression]
    try:
        with opener(file, "rb") as handle:
            yield handle
    except (EOFError, OSError, lzma.LZMAError, zlib.error) as error:  # gzip.BadGzipFile is an OSError
        raise CorpusError(f"{file}: the {name} archive is truncated or corrupt ({error}); download it again, or "
                          f"compress the plain corpus again") from None


def _check_utf8(file: Path, lines: LineNotes | None = None) -> None:
    """Raise ``CorpusError`` at the first byte that is not valid UTF-8, naming its line and byte offset; ``lines``
    counts what the lines hold as they are read."""
    first_line, first_byte = 1, 0
    with open_corpus(file) as handle:
        for block in _line_aligned_blocks(handle):
            try:
                block.decode("utf-8")
            except UnicodeDecodeError as error:
                line_start = block.rfind(b"\n", 0, error.start) + 1
                line = first_line + block.count(b"\n", 0, error.start)
                where = "" if compression_of(file) is None else " of its decompressed contents"
                raise CorpusError(
                    f"{file}, line {line}: byte 0x{block[error.start]:02x} at byte offset {first_byte + error.start} "
                    f"(byte {error.start - line_start + 1} of the line){where} is not valid UTF-8 ({error.reason}); "
                    f"the corpus must be UTF-8: convert it, e.g. `iconv -f latin1 -t utf8 {file} > {file}.utf8` "
                    f"if it is Latin-1"
                ) from None
            if lines is not None:
                lines.count(block, first_line)
            first_line += block.count(b"\n")
            first_byte += len(block)


@dataclass
class LineNotes:
    """What a one-sentence-per-line file holds that makes its rows other than its ``\n``-lines, unseen, counted as
    :func:`_check_utf8` reads it (one pass): lone carriage returns (``\r`` without ``\n``) inside a line's text,
    each of which ends a sentence too (the ``text`` reader's universal newlines: a stray ``\r`` inside a sentence
    splits it in two), and lines whose text holds a tab (a tab-separated file's columns, a score and a pair, are then
    one sentence); the first line of each (lines counted at ``\n``)."""

    lone_returns: int = 0
    first_return: int | None = None
    tab_lines: int = 0
    first_tab: int | None = None

    def count(self, block: bytes, first_line: int) -> None:
        """Count ``block``'s (whole lines, the first of them line ``first_line``)."""
        if b"\r" not in block and b"\t" not in block:
            return
        texts = [text.strip() for text in block.split(b"\n")]  # each line's text: no \r\n end, no blanks around
        returns = [text.count(b"\r") for text in texts]
        tabbed = [b"\t" in text for text in texts]
        if self.first_return is None and any(returns):
            self.first_return = first_line + next(number for number, count in enumerate(returns) if count)
        if self.first_tab is None and any(tabbed):
            self.first_tab = first_line + tabbed.index(True)
        self.lone_returns += sum(returns)
        self.tab_lines += sum(tabbed)

    def warn(self, file: Path) -> list[str]:
        """Each, logged as a warning and returned: ``file``, the count, the first line and the fix; empty when neither
        is there."""
        notes = []
        if self.lone_returns:
            notes.append(f"{file}: {self.lone_returns:,} lone carriage return{'s' if self.lone_returns > 1 else ''} "
                         f"(\\r without \\n; the first on line {self.first_return}) each end a sentence, as the "
                         f"corpus is read with universal newlines (\\n, \\r\\n and \\r end a line): if they sit "
                         f"inside sentences, each cuts one in two: replace them (tr '\\r' ' ' < {file} > FIXED); as "
                         f"the line ends of an old Mac file they are right")
        if self.tab_lines:
            notes.append(f"{file}: {self.tab_lines:,} line{'s hold' if self.tab_lines > 1 else ' holds'} a tab (the "
                         f"first: line {self.first_tab}), and each line trains as one sentence, tabs and all: if the "
                         f"file is tab-separated columns (scores, pairs), pass one sentence per line")
        for note in notes:
            logger.warning(note)
        return notes


def _line_aligned_blocks(handle: BinaryIO) -> Iterator[bytes]:
    """Yield large blocks of ``handle`` that end at a line break (so a multi-byte character is never cut)."""
    while block := handle.read(_BLOCK_BYTES):
        yield block + handle.readline()


def _check_csv(file: Path) -> tuple[str, ...]:
    """Return a (UTF-8) CSV file's header; raise ``CorpusError`` at the first row whose field count differs.

    Blank lines are allowed here (they are read as empty rows, then skipped and counted by the loader).
    """
    rows = 0
    with open_corpus(file) as raw, io.TextIOWrapper(raw, encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle)
        try:
            header = tuple(next(reader, ()))
            names = _header_names(header)
            for rows, row in enumerate(reader, start=1):
                if row and len(row) != len(header):
                    raise CorpusError(
                        f"{file}, line {reader.line_num}: found {len(row)} fields but the header "
                        f"{_join(header)!r} has {len(header)}; quote fields that contain commas or line breaks "
                        f"(\"like, this\") and give every row {len(header)} fields"
                    )
                if row and _header_names(row) == names:
                    raise CorpusError(
                        f"{file}, line {reader.line_num}: the row repeats the header {_join(header)!r} (files "
                        f"joined with cat?), which would train as a sentence; delete that line (the header belongs on "
                        f"line 1 only), or join the files with `tail -n +2` on all but the first")
        except csv.Error as error:
            raise CorpusError(f"{file}, line {reader.line_num}: malformed CSV ({error})") from None
    if not header or not any(header):
        raise CorpusError(f"{file}: the first line must be a header row naming the columns, but it is blank")
    if rows == 0:
        raise CorpusError(f"{file}: there is no row under the header; a corpus needs at least one sentence")
    return header


def _header_names(cells: Sequence[str]) -> tuple[str, ...]:
    """A row's cells as a header names them: stripped, a byte-order mark dropped (a second file's, joined)."""
    return tuple(cell.lstrip("\ufeff").strip() for cell in cells)


def _join(names: Sequence[str]) -> str:
    return ",".join(names)


# ----------------------------------------------------------------------------------------------------------------
# Reading through ``datasets`` and filtering
# ----------------------------------------------------------------------------------------------------------------


def _load_csv(file: Path, header: Sequence[str], *, cache_dir: str | None) -> datasets.Dataset:
    """Read a checked CSV through the "csv" builder, every column as text, blank lines kept as empty rows."""
    import datasets

    features = datasets.Features({name: datasets.Value("string") for name in header})
    return _load_builder(
        "csv", file, cache_dir=cache_dir, features=features, keep_default_na=False, na_filter=False,
        skip_blank_lines=False,
    )


def _load_builder(builder: str, file: Path, *, cache_dir: str | None, **config: object) -> datasets.Dataset:
    """``load_dataset(builder, data_files=file, split="train")``, with parse failures turned into ``CorpusError``."""
    import datasets

    try:
        return datasets.load_dataset(builder, data_files=str(file), split="train", cache_dir=cache_dir, **config)
    except (datasets.exceptions.DatasetGenerationError, ValueError) as error:
        cause = error.__cause__ or error
        raise CorpusError(f"{file}: could not be read as {builder} ({type(cause).__name__}: {cause})") from error


def _drop_blank_rows(dataset: datasets.Dataset, file: Path, *, skipped: str, problem: str,
                     stats: CorpusStats | None = None) -> datasets.Dataset:
    """Strip every cell, drop rows with an empty cell, and log how many were dropped (and note it in ``stats``).

    ``skipped`` names the dropped rows in the log ("skipped 3 blank lines of 10 in FILE"); ``problem`` says what is
    wrong with the file when nothing is left.
    """
    total = len(dataset)
    dataset = dataset.map(_strip_cells, batched=True, desc=f"strip {file.name}")
    dataset = dataset.filter(_rows_without_empty_cell, batched=True, desc=f"skip {skipped} of {file.name}")
    logger.info("skipped %d %s of %d in %s", total - len(dataset), skipped, total, file)
    if stats is not None:
        stats.file, stats.rows, stats.skipped, stats.skipped_what = str(file), total, total - len(dataset), skipped
    if len(dataset) == 0:
        raise CorpusError(f"{file}: {problem} ({total} in all); a corpus needs at least one sentence")
    return dataset


def _strip_cells(batch: dict[str, list[str]]) -> dict[str, list[str]]:
    """Strip whitespace (and a leading byte-order mark) from every cell of a batch."""
    return {name: [cell.lstrip("\ufeff").strip() for cell in column] for name, column in batch.items()}


def _rows_without_empty_cell(batch: dict[str, list[str]]) -> list[bool]:
    return [all(cells) for cells in zip(*batch.values())]
