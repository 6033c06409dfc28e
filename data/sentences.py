"""A dependency-free English sentence splitter, good enough for Wikipedia extracts (the stand-in corpora).

:func:`split_sentences` is the public entry point; ``data.standin`` splits every extract with it.
"""
from __future__ import annotations

import re
from collections.abc import Iterator

__all__ = ["split_sentences"]

# Abbreviations (lower-cased, without their last period) that never end a sentence.
_NEVER_FINAL = frozenset(
    "mr mrs ms messrs dr prof rev hon gen col lt capt sgt maj cmdr adm gov sen rep fr st mt "
    "e.g i.e cf viz vs v ca c approx fig figs vol vols pp ch op".split()
)
# Abbreviations that end a sentence only when a typical sentence opener follows ("... in the U.S. The ...").
_SOMETIMES_FINAL = frozenset("etc inc ltd co corp bros jr sr al ft no".split())
_SENTENCE_OPENERS = frozenset(
    "The A An This That These Those There It Its He She They We I His Her Their In On At After Before During As "
    "But However Since When While Although Today Many Some Most".split()
)
_DOTTED_ACRONYM = re.compile(r"(?:[A-Za-z]{1,2}\.)+[A-Za-z]{1,2}")  # U.S, D.C, Ph.D, a.m (last period cut off)
_CANDIDATE_END = re.compile(r"[.!?]+[\"'\u201d\u2019)\]]*(?=\s)")  # terminal punctuation, closers, then a space
_OPENERS = "\"'\u201c\u2018([{"
_CLOSERS = "\"'\u201d\u2019)]}"


def split_sentences(text: str) -> list[str]:
    """Split English prose into sentences; whitespace inside a sentence is collapsed to single spaces.

    A line break ends a sentence (Wikipedia extracts put paragraphs on separate lines) unless the next line starts
    in lower case (a wrapped line, joined to the one before). Otherwise a sentence
    ends at ``.``, ``!`` or ``?`` (plus closing quotes/brackets) followed by a space and a word that starts with an
    upper-case letter or a digit, except after an abbreviation: titles ("Mr.", "Dr."), Latin ("e.g.", "i.e.",
    "cf."), single-letter initials ("Arthur C. Clarke"); dotted acronyms ("U.S.") and words like "etc." or "Inc."
    end a sentence only before a typical sentence opener ("The", "He", "In", ...). Decimals ("3.5") have no space
    after the period and are never split.

    >>> split_sentences("Dr. Smith moved to the U.S. in 1990. He paid $3.5 million, i.e. a lot.")
    ['Dr. Smith moved to the U.S. in 1990.', 'He paid $3.5 million, i.e. a lot.']
    """
    return [sentence for paragraph in _paragraphs(text) for sentence in _split_paragraph(paragraph)]


def _paragraphs(text: str) -> Iterator[str]:
    """Whitespace-normalised lines of ``text``; a line that starts in lower case continues the one before."""
    current = ""
    for line in text.splitlines():
        line = " ".join(line.split())
        if current and line[:1].islower():
            current = f"{current} {line}"
            continue
        if current:
            yield current
        current = line
    if current:
        yield current


def _split_paragraph(paragraph: str) -> list[str]:
    """Split one whitespace-normalised line into sentences."""
    sentences, start = [], 0
    for match in _CANDIDATE_END.finditer(paragraph):
        if _ends_sentence(paragraph, match):
            sentences.append(paragraph[start : match.end()].strip())
            start = match.end()
    tail = paragraph[start:].strip()
    return sentences + [tail] if tail else sentences


def _ends_sentence(paragraph: str, match: re.Match[str]) -> bool:
    """Whether the terminal punctuation ``match`` (followed by a space) ends a sentence."""
    word_end = paragraph.find(" ", match.end() + 1)
    next_word = paragraph[match.end() + 1 : word_end if word_end >= 0 else None].lstrip(_OPENERS)
    if not next_word or not (next_word[0].isupper() or next_word[0].isdigit()):
        return False
    if match.group().rstrip(_CLOSERS) != ".":  # "!", "?", "..." and the like
        return True
    word_start = paragraph.rfind(" ", 0, match.start()) + 1
    return not _is_abbreviation(paragraph[word_start : match.start()].lstrip(_OPENERS), next_word)


def _is_abbreviation(word: str, next_word: str) -> bool:
    """Whether ``word`` + "." is an abbreviation rather than a sentence end, given the word after it."""
    lowered = word.lower()
    if lowered in _NEVER_FINAL or (len(word) == 1 and word.isalpha()):
        return True
    if lowered in _SOMETIMES_FINAL or _DOTTED_ACRONYM.fullmatch(word):
        return next_word.rstrip(",;:") not in _SENTENCE_OPENERS
    return False
