"""How many training sentences the collator cuts to ``--max_seq_length``, counted before training: the tokens past
it are dropped (the papers' recipe: 32 tokens), which the log and the run summary say with a count instead of
silently. A corpus of at most :data:`COUNTED_ROWS` rows is counted whole; a larger one on that many evenly spaced
rows (wiki1m's million in about a second)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence

#: The most corpus rows counted (evenly spaced over a larger corpus).
COUNTED_ROWS = 10_000
#: Sentences tokenised per call (bounds the memory of the count; each is kept to one token past the limit).
BATCH = 256


class CutCounter(Protocol):
    """What a collator tells of its truncation (:class:`data.collators.ContrastiveCollator`, PromptBERT's and
    DiffCSE's collators)."""

    max_length: int

    @property
    def text_columns(self) -> tuple[str, ...]: ...

    def cut_count(self, texts: list[str]) -> int: ...


@dataclass(frozen=True)
class SentenceCut:
    """``cut`` of the ``sentences`` read from ``rows`` of the corpus's ``corpus_rows`` rows exceed ``max_length``."""

    cut: int
    sentences: int
    rows: int
    corpus_rows: int
    max_length: int
    #: Of them, the edited sentences an edit shortens to fit (DiffCSE's ``--rtd_edit insert``: ``edit_cut_count``).
    edit_cut: int = 0

    def describe(self) -> str:
        """``12 of 400 sentences (3.0 %) are longer than --max_seq_length 32 tokens and are cut to it``, with where
        they were counted when not on the whole corpus."""
        share = 100 * self.cut / self.sentences if self.sentences else 0.0
        where = (f" (counted on {self.rows:,} evenly spaced rows of {self.corpus_rows:,})"
                 if self.rows < self.corpus_rows else "")
        edited = ""
        if self.edit_cut:
            edited = (f"; the edited copies of {self.edit_cut:,} ({100 * self.edit_cut / self.sentences:.1f} %) lose "
                      f"their last tokens to make room for --rtd_edit insert's [MASK] tokens within "
                      f"--max_seq_length {self.max_length}")
        return (f"{self.cut:,} of {self.sentences:,} sentences ({share:.1f} %) are longer than --max_seq_length "
                f"{self.max_length} tokens and are cut to it{edited}{where}")

    def metrics(self) -> dict[str, int]:
        """For ``all_results.json``."""
        edited = {"edit_cut_sentences": self.edit_cut} if self.edit_cut else {}
        return {"cut_sentences": self.cut, "counted_sentences": self.sentences, **edited}


def count_cut_sentences(collator: CutCounter, dataset: Any, counted_rows: int = COUNTED_ROWS) -> SentenceCut | None:
    """How many sentences of ``dataset`` (a ``datasets.Dataset``) ``collator`` cuts, on at most ``counted_rows`` evenly
    spaced rows; ``None`` when the dataset holds none of the collator's text columns or no rows."""
    columns = [column for column in collator.text_columns if column in dataset.column_names]
    total = len(dataset)
    if not columns or total == 0:
        return None
    stride = -(-total // counted_rows)
    rows = dataset.select(range(0, total, stride)) if stride > 1 else dataset
    texts = [text for column in columns for text in rows[column] if isinstance(text, str)]
    cut = sum(collator.cut_count(batch) for batch in batches(texts, BATCH))
    edit_cut_count = getattr(collator, "edit_cut_count", None)  # DiffCSE's collator: its edited copies
    edit_cut = sum(edit_cut_count(batch) for batch in batches(texts, BATCH)) if edit_cut_count else 0
    return SentenceCut(cut, len(texts), len(rows), total, collator.max_length, edit_cut)


def batches(items: Sequence[str], size: int) -> list[list[str]]:
    """``items`` in consecutive lists of ``size`` (the last shorter)."""
    return [list(items[start:start + size]) for start in range(0, len(items), size)]


__all__ = ["BATCH", "COUNTED_ROWS", "CutCounter", "SentenceCut", "count_cut_sentences"]
