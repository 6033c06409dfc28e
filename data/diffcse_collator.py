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
  result would exceed ``max_length`` (counted before training: :meth:`DiffCSECollator.edit_cut_count`, in the run's
  log and summary).
- ``delete`` (Table 4): ``round(masking_ratio * n)`` body tokens (at least 1, keeping at least 1) are deleted;
  label 1 = "the token before this one was deleted" (the paper's wording). No generator is needed.

``source="next"`` (Table 3, "use next sent. for x'"): the edited sentence is the row's ``next_text`` (the following
sentence of the same document, see :func:`data.corpus.load_next_sentence_corpus`) while h still comes from the
row's ``text``.
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

import random
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
from transformers import PreTrainedTokenizerBase

from .augment import EpochDraws, seeded_rng
from .collators import ContrastiveCollator
from .corpus import NEXT_COLUMN
from .padding import pad_rows, pad_token_ids

EDITS = ("replace", "insert", "delete")
MASK_STYLES = ("mask", "bert")
SOURCES = ("same", "next")


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
    masking_ratio: float = field(kw_only=True)  # required: its one default is declared in models/config.py
    edit: str = "replace"
    mask_style: str = "mask"
    rtd_views: int = 1
    source: str = "same"
    seed: int = 42
    epoch: int = 0
    views: ContrastiveCollator = field(init=False, repr=False)

    def __post_init__(self) -> None:
        """Check the settings and build the SimCSE-view collator this one extends."""
        if self.edit not in EDITS or self.mask_style not in MASK_STYLES or self.source not in SOURCES:
            raise ValueError(f"edit={self.edit!r} mask_style={self.mask_style!r} source={self.source!r}; choose "
                             f"edit in {EDITS}, mask_style in {MASK_STYLES}, source in {SOURCES}")
        if not 1 <= self.rtd_views <= len(self.view_columns):
            raise ValueError(f"rtd_views must be in 1..{len(self.view_columns)}, got {self.rtd_views}")
        if self.tokenizer.mask_token_id is None:
            raise ValueError(f"{type(self.tokenizer).__name__} has no mask token: DiffCSE's generator needs one")
        self.views = ContrastiveCollator(self.tokenizer, max_length=self.max_length, view_columns=self.view_columns)
        self.special_ids = frozenset(self.tokenizer.all_special_ids)
        self.vocab_size = len(self.tokenizer)

    @property
    def max_width(self) -> int:
        """The widest view batch this collator can make (its views': ``max_length``)."""
        return self.views.max_width

    @property
    def text_columns(self) -> tuple[str, ...]:
        """The row fields its SimCSE views tokenise."""
        return self.views.text_columns

    def cut_count(self, texts: list[str]) -> int:
        """How many of ``texts`` its SimCSE views cut (:meth:`ContrastiveCollator.cut_count`); the edited sentences
        are built from the cut views."""
        return self.views.cut_count(texts)

    def edit_cut_count(self, texts: list[str]) -> int:
        """How many of ``texts``' edited sentences lose their last tokens to the edit (``insert``: the body tokens
        dropped from the end so that its ``[MASK]`` tokens fit in ``max_length``; :meth:`fit_insertions`); 0 for the
        other edits, which never lengthen a sentence."""
        if self.edit != "insert":
            return 0
        return sum(len(self.fit_insertions(ids)[0]) < len(ids) for ids in self.views.tokenize(texts))

    # ------------------------------------------------------------------ batch
    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        """Dataset rows -> SimCSE's views plus the ``rtd_*`` keys of the edited sentences (module docstring)."""
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
        """Edit one sentence's token ids with the collator's ``edit``, drawing from ``rng``."""
        return {"replace": self.replace, "insert": self.insert, "delete": self.delete}[self.edit](ids, rng)

    def body_positions(self, ids: list[int]) -> list[int]:
        """Positions of the non-special tokens of ``ids``."""
        return [i for i, token in enumerate(ids) if token not in self.special_ids]

    # ------------------------------------------------------------------ edits
    def replace(self, ids: list[int], rng: random.Random) -> EditedRow:
        """``edit="replace"``: select body tokens with probability ``masking_ratio`` for the generator to fill."""
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

    def fit_insertions(self, ids: list[int]) -> tuple[list[int], list[int], int]:
        """``ids`` with body tokens dropped from the end until they and their insertions fit in ``max_length``, the
        positions of their body tokens and how many ``[MASK]`` tokens go in (``round(masking_ratio * n)``, at least
        1)."""
        ids = list(ids)
        body = self.body_positions(ids)
        count = max(1, round(self.masking_ratio * len(body))) if body else 0
        while body and len(ids) + count > self.max_length:  # drop body tokens from the end to make room
            del ids[body.pop()]
            count = max(1, round(self.masking_ratio * len(body))) if body else 0
        return ids, body, count

    def insert(self, ids: list[int], rng: random.Random) -> EditedRow:
        """``edit="insert"``: insert ``[MASK]`` tokens at random gaps of the body for the generator to fill (the body
        shortened to make room: :meth:`fit_insertions`)."""
        ids, body, count = self.fit_insertions(ids)
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
        """``edit="delete"``: delete random body tokens; label 1 on the token after a deletion."""
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
    def padding_values(self) -> dict[str, int]:
        """What fills each ``rtd_*`` key's padded positions (:meth:`pad`; the fast path's fixed width too)."""
        pad_id = self.tokenizer.pad_token_id
        return {"rtd_input_ids": pad_id, "rtd_attention_mask": 0, "rtd_fill": False, "rtd_original_ids": pad_id,
                "rtd_labels": 0}

    def pad(self, rows: list[EditedRow]) -> dict[str, torch.Tensor]:
        """The edited rows padded on the right to the longest one: the ``rtd_*`` batch keys, each ``[N, L']``."""
        fills = self.padding_values()
        edited = pad_token_ids([row.input_ids for row in rows], fills["rtd_input_ids"])
        length = edited["input_ids"].shape[1]
        return {"rtd_input_ids": edited["input_ids"],
                "rtd_attention_mask": edited["attention_mask"],
                "rtd_fill": pad_rows([row.fill for row in rows], fills["rtd_fill"], length=length, dtype=torch.bool),
                "rtd_original_ids": pad_rows([row.original_ids for row in rows], fills["rtd_original_ids"],
                                             length=length),
                "rtd_labels": pad_rows([row.labels for row in rows], fills["rtd_labels"], length=length)}
