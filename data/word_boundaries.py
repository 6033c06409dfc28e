"""Where a tokenizer's words start, from how it marks them: ESimCSE's word repetition (``--dup_type word``) picks and
repeats whole words, a start token and its continuation pieces (:class:`data.augment.LengthExtender`).

Tokenizers mark words in one of four ways (:data:`MARK_KINDS`):

- ``continuation_prefix``: WordPiece's ``##`` (BERT, DistilBERT, MiniLM, ELECTRA): a token without it starts a word;
- ``start_mark``: byte-level BPE's ``Ġ`` (RoBERTa, GPT-2, DeBERTa), SentencePiece's ``▁`` (XLM-R, ALBERT,
  DeBERTa-v3, T5): a token with it starts a word, and so does the text's first token (``Ġ`` marks a space before);
- ``end_suffix``: ``</w>`` ends a word (HerBERT, CLIP; XLM and FlauBERT's Python tokenizers): the token after one
  that ends with it starts a word;
- ``continuation_suffix``: fastBPE's ``@@`` (PhoBERT, BERTweet): the token after one that does not end with it starts
  a word.

A fast tokenizer's model says which (its ``tokenizer.json``: WordPiece's ``continuing_subword_prefix``, BPE's
``end_of_word_suffix`` or ``continuing_subword_prefix``, else its start marks; Unigram's ``▁``; WordLevel's tokens are
words); a Python tokenizer's vocabulary does, by the mark most of its tokens carry. Before, every tokenizer without a
WordPiece model was read as marking word starts with ``Ġ`` / ``▁``, and one without a fast backend as WordPiece: a
HerBERT sentence was one word (repeated whole), a PhoBERT sentence's every sub-word a word, both without a word. A
tokenizer whose vocabulary carries none of these marks is refused (:class:`WordBoundaryError`): its words cannot be
told from its tokens.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

#: How a vocabulary can mark its words (module docstring).
MARK_KINDS = ("continuation_prefix", "start_mark", "end_suffix", "continuation_suffix", "every_token")
#: The marks a vocabulary's tokens are counted for, with the kind each is (a Python tokenizer's vocabulary).
VOCABULARY_MARKS = (("continuation_prefix", "##"), ("start_mark", "Ġ"), ("start_mark", "▁"),
                    ("end_suffix", "</w>"), ("continuation_suffix", "@@"))
#: Byte-level BPE's and SentencePiece's word-start marks.
START_MARKS = ("Ġ", "▁")


class WordBoundaryError(ValueError):
    """A tokenizer whose words cannot be told from its tokens (its vocabulary carries no mark of
    :data:`VOCABULARY_MARKS`)."""


@dataclass(frozen=True)
class WordMarks:
    """How a tokenizer marks its words: ``kind`` (one of :data:`MARK_KINDS`) and its ``marks`` (``("##",)``,
    ``("Ġ", "▁")``, ``("</w>",)``, ``("@@",)``; none for ``every_token``)."""

    kind: str
    marks: tuple[str, ...] = ()

    def starts(self, tokens: Sequence[str]) -> list[bool]:
        """Per token of ``tokens`` (a sentence's, without its special tokens): whether it starts a word."""
        if self.kind == "continuation_prefix":
            return [not token.startswith(self.marks) for token in tokens]
        if self.kind == "start_mark":
            return [i == 0 or token.startswith(self.marks) for i, token in enumerate(tokens)]
        if self.kind == "end_suffix":
            return [i == 0 or tokens[i - 1].endswith(self.marks) for i in range(len(tokens))]
        if self.kind == "continuation_suffix":
            return [i == 0 or not tokens[i - 1].endswith(self.marks) for i in range(len(tokens))]
        return [True] * len(tokens)

    def describe(self) -> str:
        """The convention in words, for the log (``words: a token without '##' starts one``)."""
        marks = " or ".join(repr(mark) for mark in self.marks)
        return {"continuation_prefix": f"a token without {marks} starts a word",
                "start_mark": f"a token with {marks} starts a word",
                "end_suffix": f"a token ending in {marks} ends a word",
                "continuation_suffix": f"a token ending in {marks} goes on in the next",
                "every_token": "every token is a word"}[self.kind]


def vocabulary_mark_counts(tokenizer: PreTrainedTokenizerBase) -> Counter[tuple[str, str]]:
    """How many tokens of ``tokenizer``'s vocabulary (special tokens aside) carry each mark of
    :data:`VOCABULARY_MARKS`, by (kind, mark)."""
    special = set(tokenizer.all_special_tokens)
    counts: Counter[tuple[str, str]] = Counter()
    for token in tokenizer.get_vocab():
        if token in special:
            continue
        for kind, mark in VOCABULARY_MARKS:
            carries = token.endswith(mark) if kind in ("end_suffix", "continuation_suffix") else token.startswith(mark)
            if carries and len(token) > len(mark):
                counts[kind, mark] += 1
    return counts


def _model_marks(model: dict) -> WordMarks | None:
    """The marks a fast tokenizer's model (its ``tokenizer.json`` ``model``) declares, or ``None`` where it leaves
    them to its pre-tokenizer (a BPE without a suffix or prefix: byte-level ``Ġ``, or Metaspace ``▁``)."""
    kind = model.get("type")
    if kind == "WordPiece":
        return WordMarks("continuation_prefix", (model.get("continuing_subword_prefix") or "##",))
    if kind == "BPE" and model.get("end_of_word_suffix"):
        return WordMarks("end_suffix", (model["end_of_word_suffix"],))
    if kind == "BPE" and model.get("continuing_subword_prefix"):
        return WordMarks("continuation_prefix", (model["continuing_subword_prefix"],))
    if kind == "WordLevel":
        return WordMarks("every_token")
    return None


def word_marks(tokenizer: PreTrainedTokenizerBase) -> WordMarks:
    """How ``tokenizer`` marks its words (module docstring); :class:`WordBoundaryError` where its vocabulary carries
    no mark it could use."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and (declared := _model_marks(json.loads(backend.to_str())["model"])) is not None:
        return declared
    if backend is not None:  # BPE or Unigram: the marks of a word's start, which its pre-tokenizer adds
        if any(token.startswith(START_MARKS) and len(token) > 1 for token in tokenizer.get_vocab()):
            return WordMarks("start_mark", START_MARKS)
    elif counts := vocabulary_mark_counts(tokenizer):  # a Python tokenizer: the mark most of its vocabulary carries
        (kind, _), _ = counts.most_common(1)[0]
        return WordMarks(kind, tuple(mark for mark_kind, mark in VOCABULARY_MARKS if mark_kind == kind))
    raise WordBoundaryError(
        f"{type(tokenizer).__name__} marks no word boundary in its vocabulary (none of its tokens starts with "
        f"'##', 'Ġ' or '▁' or ends with '</w>' or '@@'), so its words cannot be told from its tokens")


class WordBoundaries:
    """Which tokens of a sentence start a word, by ``tokenizer``'s marks (:func:`word_marks`)."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self.tokenizer = tokenizer
        self.marks = word_marks(tokenizer)

    def starts(self, ids: Sequence[int]) -> list[bool]:
        """Per token of ``ids`` (a sentence's, without its special tokens): whether it starts a word."""
        return self.marks.starts(self.tokenizer.convert_ids_to_tokens(list(ids)))


__all__ = ["MARK_KINDS", "START_MARKS", "VOCABULARY_MARKS", "WordBoundaries", "WordBoundaryError", "WordMarks",
           "vocabulary_mark_counts", "word_marks"]
