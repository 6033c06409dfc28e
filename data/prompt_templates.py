"""PromptBERT's templates as token ids, and the collator that puts every sentence into them (Jiang et al., 2022,
Sec. 4-5; the official code's ``train.py``, ``prepare_features``).

A template is written in the code's syntax, ``*cls*_This_sentence_of_"*sent_0*"_means*mask*.*sep+*``: ``_`` is a
space, ``*sent_0*`` the sentence, ``*mask*`` the tokenizer's mask token, ``*cls*`` / ``*sep+*`` the special tokens.
As the code does, the text before the sentence (stripped) and after it are tokenised on their own:

    prefix = tokenizer.encode(before)[:-1]        # [CLS] + the prefix's tokens
    suffix = tokenizer.encode(after)[1:]          # the suffix's tokens + [SEP]

(cuts that need a tokenizer framing a text as one special token before it and one after; any other, such as XLNet's
``text <sep> <cls>``, is refused: :func:`framing_problem`), and a training view is ``prefix + sentence[:max_length] +
suffix``, the sentence tokenised without special tokens and truncated BEFORE the template is added (so the template
is never cut). View 0 uses the first template, view 1 the second (Sec. 5: two templates make the positive pair).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch
from transformers import PreTrainedTokenizerBase

from .collators import pad_views

SENTENCE_SLOT, MASK_SLOT = "*sent_0*", "*mask*"


@dataclass(frozen=True)
class PromptTemplate:
    """One template as token ids: ``prefix`` ([CLS] + the words before the sentence) and ``suffix`` (the words
    after it + [SEP]); the mask token is ``suffix[mask_index]``."""

    prefix: tuple[int, ...]
    suffix: tuple[int, ...]
    mask_index: int

    def wrap(self, sentence: Sequence[int]) -> list[int]:
        """``prefix + sentence + suffix``."""
        return [*self.prefix, *sentence, *self.suffix]

    def as_dict(self) -> dict[str, list[int]]:
        return {"prefix": list(self.prefix), "suffix": list(self.suffix)}


def split_template(template: str, mask_token: str) -> tuple[str, str]:
    """The text before and after the sentence, as the code's ``train.py`` makes them (``*mask*`` -> the mask token,
    ``*cls*`` / ``*sep+*`` dropped, ``_`` -> space; the prefix stripped, which RoBERTa's BPE needs and BERT's
    WordPiece ignores)."""
    if template.count(SENTENCE_SLOT) != 1 or template.count(MASK_SLOT) != 1 or " " in template:
        raise ValueError(f"template {template!r}: it needs one {SENTENCE_SLOT}, one {MASK_SLOT} and no spaces")
    text = template.replace(MASK_SLOT, mask_token).replace("*sep+*", "").replace("*cls*", "")
    before, after = text.replace(SENTENCE_SLOT, " ").split(" ")
    return before.replace("_", " ").strip(), after.replace("_", " ")


def framing_problem(tokenizer: PreTrainedTokenizerBase, text: str) -> str | None:
    """Why the code's cuts (``encode(before)[:-1]``, ``encode(after)[1:]``) would not drop exactly the special tokens
    that ``tokenizer`` adds around ``text``, or ``None`` where it adds one before the text and one after it (BERT's
    ``[CLS] text [SEP]``, RoBERTa's ``<s> text </s>``). XLNet's ``text <sep> <cls>`` kept <sep> in the prefix and cut
    the suffix's first word, and the run trained without a word. Decided by comparing the text tokenised with and
    without special tokens, so no tokenizer class or special token is named here."""
    framed = tokenizer(text)["input_ids"]
    bare = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(framed) == len(bare) + 2 and framed[1:-1] == bare:
        return None
    tokens = tokenizer.convert_ids_to_tokens(framed)
    starts = [i for i in range(len(framed) - len(bare) + 1) if framed[i:i + len(bare)] == bare]
    found = (" ".join([*tokens[:starts[0]], "text", *tokens[starts[0] + len(bare):]]) if starts
             else f"{text!r} -> {' '.join(tokens)}")  # the text's own tokens changed: show them all
    return (f"PromptBERT needs a tokenizer that frames a text as one special token before it and one after "
            f"('[CLS] text [SEP]', '<s> text </s>'), which its template's ids drop (the prefix's last token, the "
            f"suffix's first); {type(tokenizer).__name__} frames a text as '{found}', so the template would keep "
            f"special tokens and lose words. Use a backbone whose tokenizer frames a text that way (BERT, RoBERTa...)")


def tokenize_template(template: str, tokenizer: PreTrainedTokenizerBase) -> PromptTemplate:
    """A template's token ids (:class:`PromptTemplate`), checked: a tokenizer that frames a text as one special token
    before it and one after (:func:`framing_problem`), one mask token, in the suffix."""
    if tokenizer.mask_token_id is None:
        raise ValueError(f"PromptBERT needs a tokenizer with a mask token; {type(tokenizer).__name__} has none")
    before, after = split_template(template, tokenizer.mask_token)
    if problem := framing_problem(tokenizer, before) or framing_problem(tokenizer, after):
        raise ValueError(problem)
    prefix, suffix = tokenizer.encode(before)[:-1], tokenizer.encode(after)[1:]
    masks = [i for i, token in enumerate(suffix) if token == tokenizer.mask_token_id]
    if len(masks) != 1 or tokenizer.mask_token_id in prefix:
        raise ValueError(f"template {template!r} tokenises to {len(masks)} mask tokens after the sentence; it "
                         f"needs exactly one (and none before it)")
    return PromptTemplate(tuple(prefix), tuple(suffix), masks[0])


def template_token_ids(templates: Sequence[str], tokenizer: PreTrainedTokenizerBase) -> dict[str, Any]:
    """What the model keeps in its config (``prompt_token_ids``): every template's prefix and suffix ids and the
    mask token's id, so that the model and its exports encode without the tokenizer's help."""
    return {"templates": [tokenize_template(t, tokenizer).as_dict() for t in templates],
            "mask_token_id": int(tokenizer.mask_token_id), "pad_token_id": int(tokenizer.pad_token_id or 0)}


def add_period(sentence: str) -> str:
    """The official evaluation's change to a test sentence (``evaluation.py``'s batcher): ``'.'`` after one that
    does not end in ``. ? " '`` (an empty one stays empty)."""
    return sentence + "." if sentence and sentence[-1] not in ".?\"'" else sentence


@dataclass
class PromptCollator:
    """Views of an unsupervised PromptBERT batch: view ``v`` is the row's sentence inside ``templates[v]``.

    Args:
        tokenizer: a fast tokenizer with a mask token.
        templates: one :class:`PromptTemplate` per view (PromptBERT: two different ones).
        max_length: the sentence's own truncation length (the template comes on top; 32 in the paper).
        column: the row field holding the sentence.
    """

    tokenizer: PreTrainedTokenizerBase
    templates: Sequence[PromptTemplate]
    max_length: int = 32
    column: str = "text"

    @property
    def max_width(self) -> int:
        """The widest batch this collator can make: ``max_length`` sentence tokens inside the longest template."""
        return self.max_length + max(len(t.prefix) + len(t.suffix) for t in self.templates)

    def sentence_ids(self, texts: list[str | None]) -> list[list[int]]:
        """Each sentence's ids without special tokens, cut to ``max_length`` (the code: ``encode(s,
        add_special_tokens=False)[:max_seq_length]``; a missing sentence is ``" "``, as there)."""
        texts = [" " if text is None else text for text in texts]
        return self.tokenizer(texts, add_special_tokens=False, truncation=True,
                              max_length=self.max_length)["input_ids"]

    @property
    def text_columns(self) -> tuple[str, ...]:
        """The row field this collator reads."""
        return (self.column,)

    def cut_count(self, texts: list[str]) -> int:
        """How many of ``texts`` :meth:`sentence_ids` cuts: more than ``max_length`` tokens of their own."""
        kept = self.tokenizer(texts, add_special_tokens=False, truncation=True, max_length=self.max_length + 1)
        return sum(len(ids) > self.max_length for ids in kept["input_ids"])  # one token past the limit: cut

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        """Rows -> ``input_ids`` / ``attention_mask`` [B, V, L], padded to the batch's longest view (no
        ``token_type_ids``: the code passes none)."""
        sentences = self.sentence_ids([row[self.column] for row in rows])
        views = [[template.wrap(ids) for ids in sentences] for template in self.templates]
        return pad_views(views, self.tokenizer.pad_token_id, with_token_type_ids=False)


__all__ = ["PromptCollator", "PromptTemplate", "add_period", "framing_problem", "split_template", "template_token_ids",
           "tokenize_template"]
