"""ESimCSE's positive-view augmentations on token ids (Wu et al., 2022), applied by the collator on the fly.

Everything here acts on the token ids of one batch (each list with its special tokens), as the collator's
per-view augmenters do (:class:`data.collators.ContrastiveCollator`), so it runs on the fly for every batch.

- Repetition (Sec. 3.1, Eq. 3-4): pick ``dup_len`` units uniformly without replacement and repeat each right after
  itself. Units are sub-words (``dup_type="subword"``, the paper's default) or whole words (``"word"``: a word and
  its continuation pieces, the "repetition before tokenization" of Sec. 5.2, read from the tokenizer's word marks:
  :mod:`data.word_boundaries`). ``dup_len`` follows
  :func:`dup_length`: the paper's ``U{0 .. max(2, int(dup_rate * N))}`` (N = the sentence's units) or the released
  code's ``randrange(min(10, int(dup_rate * input_len)))`` (``input_len`` = all its tokens, [CLS] and [SEP]
  included). Special tokens are never picked. The anchor arrives truncated to ``max_seq_length`` by the collator
  and the positive is that truncated anchor plus the repetitions, never cut again (the released ``dup_type bpe``
  path: tokenize with truncation, then repeat), so it may be up to ``max_seq_length + 9`` tokens long and the batch
  is padded to its longest row. ``truncate_to=max_seq_length`` re-truncates (an opt-in ablation: it removes the
  length difference for every sentence already at the limit).
- Table 5 length-extension ablations: after each picked unit insert a random stop-word, a ``[MASK]``, or the
  top-1 masked-LM prediction for an inserted ``[MASK]`` (:class:`MaskedLMFiller`).

ESimCSE's Table 6 (length bucketing) reorders the corpus offline, before training: that is ``data.length_buckets``.

Randomness: every sentence's draw comes from a generator seeded by a stable hash of (seed, epoch, its token ids)
(``resample=True``: a sentence gets a fresh draw every epoch) or of (seed, its token ids) alone (``resample=False``:
the original code's repeat-once-at-preprocessing, cached behaviour, without holding a cache). The draw depends
neither on the rest of the batch nor on global RNG state, so (1) N processes repeat exactly the tokens one process
repeats for the same global batch, however the batch is split, and (2) a run resumed from a checkpoint repeats
exactly the same tokens (the Trainer restores the global generators only *after* it has collated the first resumed
batches: accelerate fetches a batch ahead). The trainer sets seed and epoch through :meth:`LengthExtender.set_epoch`
(:class:`trainers.cl_trainer.CollatorEpochHook`).
"""
from __future__ import annotations

import hashlib
import random
from typing import TYPE_CHECKING, Sequence

import torch

from .padding import pad_token_ids
from .word_boundaries import WordBoundaries

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

LENGTH_EXTENSIONS = ("repetition", "stopword", "mask", "mlm_prediction")

#: NLTK's English stop-word list (179 words), written out so nothing is downloaded.
STOP_WORDS = tuple("""i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself
yourselves he him his himself she she's her hers herself it it's its itself they them their theirs themselves what
which who whom this that that'll these those am is are was were be been being have has had having do does did doing
a an the and but if or because as until while of at by for with about against between into through during before
after above below to from up down in out on off over under again further then once here there when where why how all
any both each few more most other some such no nor not only own same so than too very s t can will just don don't
should should've now d ll m o re ve y ain aren aren't couldn couldn't didn didn't doesn doesn't hadn hadn't hasn
hasn't haven haven't isn isn't ma mightn mightn't mustn mustn't needn needn't shan shan't shouldn shouldn't wasn
wasn't weren weren't won won't wouldn wouldn't""".split())


def seeded_rng(*keys: object) -> random.Random:
    """A generator seeded by a stable hash of ``keys`` (not Python's salted ``hash``)."""
    digest = hashlib.blake2b(repr(keys).encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(digest, "little"))


def dup_length(num_units: int, dup_rate: float, rule: str, rng: random.Random, num_special: int = 0) -> int:
    """How many units to repeat (never more than ``num_units``).

    - ``rule="paper"`` (Eq. 3): uniform on the integers ``0 .. max(2, int(dup_rate * N))`` (both ends included),
      N = ``num_units``, the sentence's sub-words (or words): the paper's sentence length, without special tokens.
    - ``rule="code"`` (``caskcsg/sentemb``, ``ESimCSE/train.py``, ``dup_type bpe``):
      ``randrange(min(10, int(dup_rate * input_len)))``, i.e. ``0 .. min(10, int(dup_rate * input_len)) - 1``, where
      ``input_len = num_units + num_special`` counts the [CLS] and [SEP] the released code's ``len(input_ids)``
      includes; 0 when that range is empty (the code then leaves the sentence unchanged).
    """
    if rule == "paper":
        length = rng.randint(0, max(2, int(dup_rate * num_units)))
    elif rule == "code":
        upper = min(10, int(dup_rate * (num_units + num_special)))
        length = rng.randrange(upper) if upper > 0 else 0
    else:
        raise ValueError(f"dup length rule {rule!r}; choose 'paper' or 'code'")
    return min(length, num_units)


def most_dup_length(longest_input: int, dup_rate: float, rule: str, special_tokens: int = 0) -> int:
    """The largest :func:`dup_length` of any sentence of at most ``longest_input`` tokens, its ``special_tokens``
    included (both rules grow with the sentence's N units, N + specials <= n): the paper's
    ``min(N, max(2, int(dup_rate * N)))`` at N = n - specials, the code's ``min(10, int(dup_rate * n)) - 1`` (at
    least 0)."""
    if rule == "paper":
        units = max(longest_input - special_tokens, 0)
        return min(units, max(2, int(dup_rate * units)))
    if rule == "code":
        return max(min(10, int(dup_rate * longest_input)) - 1, 0)
    raise ValueError(f"dup length rule {rule!r}; choose 'paper' or 'code'")


class EpochDraws:
    """Holds the ``seed`` and ``epoch`` that an augmentation's per-sentence draws are keyed on; the trainer calls
    :meth:`set_epoch` at every epoch start (:class:`trainers.cl_trainer.CollatorEpochHook`)."""

    seed: int
    epoch: int

    def set_epoch(self, epoch: int, seed: int | None = None) -> None:
        """The epoch (and run seed) that the next draws belong to."""
        self.epoch = epoch
        if seed is not None:
            self.seed = seed


class LengthExtender(EpochDraws):
    """The ESimCSE positive view: lengthen each sentence by repeating (or inserting after) random units.

    A :data:`data.collators.TokenAugmenter`: ``extender(batch_ids) -> new batch_ids``. After a call,
    :attr:`last_inserted` holds, per sentence, the positions of inserted tokens (for the masked-LM filler/tests).

    Args:
        tokenizer: the encoder's fast tokenizer (special ids, ``[MASK]``, stop-word ids, word boundaries).
        truncate_to: ``None`` (default, the released code): the result is never cut, the positive is the whole
            anchor plus its repetitions; an int re-truncates it to that many tokens (opt-in ablation).
        dup_rate: the maximal repetition rate (0.32 for BERT-base).
        dup_type: ``subword`` | ``word``: the unit that is picked (and repeated).
        rule: ``paper`` | ``code`` (:func:`dup_length`).
        mode: ``repetition`` | ``stopword`` | ``mask`` | ``mlm_prediction``: what follows a picked unit.
        resample: a fresh draw every epoch (the paper) vs once per sentence (the code's preprocessing cache).
        filler: a :class:`MaskedLMFiller` (needed for ``mlm_prediction``).
        seed: mixed into every draw (the trainer sets the run's seed through :meth:`set_epoch`).

    Every result is at most twice its input's length (each unit is picked at most once and adds at most itself).
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, truncate_to: int | None = None, *, dup_rate: float,
                 dup_type: str = "subword", rule: str = "paper", mode: str = "repetition", resample: bool = True,
                 filler: MaskedLMFiller | None = None, seed: int = 0) -> None:
        if dup_type not in ("subword", "word"):
            raise ValueError(f"dup_type {dup_type!r}; choose 'subword' or 'word'")
        if mode not in LENGTH_EXTENSIONS:
            raise ValueError(f"length extension {mode!r}; choose one of {', '.join(LENGTH_EXTENSIONS)}")
        if mode == "mlm_prediction" and filler is None:
            raise ValueError("mode='mlm_prediction' needs a MaskedLMFiller")
        if truncate_to is not None and truncate_to < 2:
            raise ValueError(f"truncate_to must be None or >= 2 tokens, got {truncate_to}")
        self.truncate_to, self.dup_rate, self.dup_type = truncate_to, dup_rate, dup_type
        self.rule, self.mode, self.resample, self.filler, self.seed = rule, mode, resample, filler, seed
        self.epoch = 0
        self.special_ids = frozenset(tokenizer.all_special_ids)
        #: The special tokens the collator's tokenizer adds to each sentence (never picked: not units).
        self.special_tokens = tokenizer.num_special_tokens_to_add(pair=False)
        self.mask_id = tokenizer.mask_token_id
        if mode in ("mask", "mlm_prediction") and self.mask_id is None:
            raise ValueError(f"mode={mode!r} needs a tokenizer with a mask token")
        self.boundaries = WordBoundaries(tokenizer) if dup_type == "word" else None
        self.stop_ids = self._stop_word_ids(tokenizer) if mode == "stopword" else ()
        self.last_inserted: list[list[int]] = []

    def _stop_word_ids(self, tokenizer: PreTrainedTokenizerBase) -> tuple[int, ...]:
        """The ids of the stop-words that are one (non-special) token of ``tokenizer``, in list order."""
        ids = []
        for word in STOP_WORDS:
            pieces = tokenizer(" " + word, add_special_tokens=False)["input_ids"]
            if len(pieces) == 1 and pieces[0] not in self.special_ids:
                ids.append(pieces[0])
        if not ids:
            raise ValueError("no English stop-word is a single token of this tokenizer")
        return tuple(dict.fromkeys(ids))

    def longest_output(self, longest_input: int) -> int:
        """The longest sentence :meth:`extend` returns from one of at most ``longest_input`` tokens: the fixed width
        of a compiled step (:attr:`data.collators.ContrastiveCollator.max_width`; 41 at ESimCSE's defaults, 32
        tokens with [CLS] and [SEP], ``dup_rate`` 0.32). Each picked unit adds one token (a repeated sub-word, a
        stop-word, a ``[MASK]``), or, repeating whole words, the word's pieces (at most the sentence again); at most
        :func:`most_dup_length` units are picked; ``truncate_to`` caps the result."""
        if self.dup_type == "word" and self.mode == "repetition":
            added = longest_input
        else:
            added = min(most_dup_length(longest_input, self.dup_rate, self.rule, self.special_tokens), longest_input)
        longest = longest_input + added
        return longest if self.truncate_to is None else min(longest, self.truncate_to)

    # ------------------------------------------------------------------------------------------------ units
    def units(self, body: Sequence[int]) -> list[tuple[int, int]]:
        """``(start, end)`` spans of ``body`` that can be picked: single non-special sub-words, or words (a start
        token and its continuation pieces)."""
        spans: list[tuple[int, int]] = []
        starts = self.boundaries.starts(body) if self.boundaries is not None else [True] * len(body)
        for i, token in enumerate(body):
            if token in self.special_ids:
                continue
            if starts[i] or not spans or spans[-1][1] != i:
                spans.append((i, i + 1))
            else:
                spans[-1] = (spans[-1][0], i + 1)
        return spans

    def split_specials(self, ids: Sequence[int]) -> tuple[list[int], list[int], list[int]]:
        """Leading special tokens, body, trailing special tokens."""
        start, end = 0, len(ids)
        while start < end and ids[start] in self.special_ids:
            start += 1
        while end > start and ids[end - 1] in self.special_ids:
            end -= 1
        return list(ids[:start]), list(ids[start:end]), list(ids[end:])

    # ------------------------------------------------------------------------------------------------ extend
    def extend(self, ids: Sequence[int], rng: random.Random) -> tuple[list[int], list[int]]:
        """One sentence -> (new ids, positions of inserted tokens)."""
        head, body, tail = self.split_specials(ids)
        spans = self.units(body)
        count = dup_length(len(spans), self.dup_rate, self.rule, rng, num_special=len(head) + len(tail))
        picked = {spans[k][1]: spans[k] for k in rng.sample(range(len(spans)), count)}
        out: list[int] = []
        inserted: list[int] = []
        for i, token in enumerate(body):
            out.append(token)
            span = picked.get(i + 1)
            if span is None:
                continue
            if self.mode == "repetition":
                addition = body[span[0]:span[1]]
            elif self.mode == "stopword":
                addition = [rng.choice(self.stop_ids)]
            else:
                addition = [self.mask_id]
            inserted += range(len(out), len(out) + len(addition))
            out += addition
        if self.truncate_to is not None:
            budget = max(self.truncate_to - len(head) - len(tail), 0)
            out = out[:budget]
            inserted = [p for p in inserted if p < budget]
        return head + out + tail, [len(head) + p for p in inserted]

    def rng_for(self, ids: Sequence[int]) -> random.Random:
        """The generator of one sentence's draw: (seed, epoch, ids) when resampling, (seed, ids) otherwise."""
        if self.resample:
            return seeded_rng(self.seed, "epoch", self.epoch, list(ids))
        return seeded_rng(self.seed, "sentence", list(ids))

    def __call__(self, batch: list[list[int]]) -> list[list[int]]:
        """A batch of token ids -> the lengthened positives (one draw per sentence, see :meth:`rng_for`)."""
        results = [self.extend(ids, self.rng_for(ids)) for ids in batch]
        new_ids = [ids for ids, _ in results]
        self.last_inserted = [positions for _, positions in results]
        if self.mode == "mlm_prediction":
            new_ids = self.filler(new_ids, self.last_inserted)
        return new_ids


class MaskedLMFiller:
    """Replaces inserted ``[MASK]`` tokens with a masked LM's top-1 prediction (ESimCSE Table 5, "inserting masked
    prediction"); special tokens are never predicted. Runs in the collator, without gradients, in eval mode."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> None:
        vocab = len(tokenizer)
        if model.config.vocab_size < vocab:
            raise ValueError(f"the masked LM has {model.config.vocab_size} tokens, the encoder's tokenizer {vocab}: "
                             "they must share one vocabulary")
        self.model = model.eval()
        self.pad_id = tokenizer.pad_token_id or 0
        self.banned = torch.tensor(sorted(set(tokenizer.all_special_ids)), dtype=torch.long)

    @torch.no_grad()
    def __call__(self, batch: list[list[int]], positions: list[list[int]]) -> list[list[int]]:
        """Replace the tokens at ``positions`` (per sentence) of ``batch`` with the masked LM's top-1 prediction."""
        if not any(positions):
            return batch
        device = next(self.model.parameters()).device
        padded = pad_token_ids(batch, self.pad_id)
        input_ids, attention_mask = padded["input_ids"], padded["attention_mask"]
        logits = self.model(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device)).logits.float()
        logits[..., self.banned.to(device)] = float("-inf")
        predictions = logits.argmax(-1).cpu()
        filled = [list(ids) for ids in batch]
        for row, row_positions in enumerate(positions):
            for p in row_positions:
                filled[row][p] = int(predictions[row, p])
        return filled


__all__ = ["LENGTH_EXTENSIONS", "STOP_WORDS", "EpochDraws", "LengthExtender", "MaskedLMFiller", "WordBoundaries",
           "dup_length", "most_dup_length", "seeded_rng"]
