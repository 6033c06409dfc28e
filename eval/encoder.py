"""Batched sentence encoding for evaluation: deduplicated, length-sorted, dynamically padded, no gradients.

SentEval hands the model one batch at a time through a ``batcher``; SimCSE's batcher tokenizes with
``padding=True`` and reads the pooled vector. :class:`SentenceEncoder` does the same work for a whole list at once,
which lets it (1) encode each distinct sentence once, (2) sort by token count so that every batch holds sentences
of similar length (minimal padding), and (3) return rows in the caller's order. Length sorting and per-batch
padding change nothing but the speed: a padded position is masked out of attention and pooling.
"""
from __future__ import annotations

import contextlib
import logging
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from data.padding import pad_rows
from eval.batching import fewest_padding_cuts
from eval.fp32_precision import full_fp32
from eval.packing import PackedPass, packed_backbone, packed_passes, packing_refusal

logger = logging.getLogger(__name__)

EmbedFn = Callable[..., torch.Tensor]
"""``embed_fn(input_ids=..., attention_mask=..., [token_type_ids=...]) -> Tensor[B, d]``."""

_UNBOUNDED_MODEL_MAX_LENGTH = 1_000_000  # tokenizers without a limit report int(1e30)

DEV_MAX_TOKENS = 8192
"""The training-time dev evaluation's token budget per forward pass (``--eval_max_tokens``). STS-B + SICK-R dev are
3,833 distinct sentences, 59,118 tokens with [CLS]/[SEP] (bert-base-uncased's vocabulary): batches of 128 sentences
are 30 forward passes of about 2,000 tokens (62,920 padded tokens in all), a budget of 8,192 tokens 9 passes (64,342
padded, cut where padding is fewest: 67,033 filling each batch in turn), or packed (:mod:`eval.packing`, where the
backbone allows) 8 passes of 60,367 tokens; 16,384 would be 5 padded passes and more padding, or 4 packed.
Larger matmuls fill a GPU better, longer batches span more lengths and pad more: ``python -m bench.eval_speed`` times
each setting."""

EVAL_DTYPES = ("fp32", "bf16")
"""Evaluation precision: ``fp32`` (default, the papers' numbers) or ``bf16`` autocast (opt-in)."""


def resolve_device(device: str | torch.device | None) -> torch.device:
    """``None`` picks CUDA when available, else the CPU."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def default_max_length(tokenizer: Any) -> int | None:
    """The tokenizer's own limit (``model_max_length``), or ``None`` (no truncation) when it sets none."""
    limit = getattr(tokenizer, "model_max_length", None)
    return int(limit) if limit is not None and limit < _UNBOUNDED_MODEL_MAX_LENGTH else None


def check_eval_dtype(eval_dtype: str) -> None:
    if eval_dtype not in EVAL_DTYPES:
        raise ValueError(f"eval_dtype={eval_dtype!r}; choose one of {', '.join(EVAL_DTYPES)}")


@contextlib.contextmanager
def evaluation_precision(eval_dtype: str, device: torch.device) -> Iterator[None]:
    """The numeric precision of an evaluation, whatever the training around it set.

    - ``"fp32"`` (default): the papers' setting. Autocast is disabled (also inside a bf16 training run's context)
      and every backend's fp32 math is IEEE for the duration (no TF32: :func:`eval.fp32_precision.full_fp32`, which
      works whether the Trainer's ``--tf32`` set torch's per-backend or its legacy API); the previous settings are
      restored exactly afterwards.
    - ``"bf16"``: bfloat16 autocast on ``device`` (faster on a GPU; scores may differ in the second decimal).
    """
    check_eval_dtype(eval_dtype)
    if eval_dtype == "bf16":
        with torch.autocast(device.type, dtype=torch.bfloat16):
            yield
        return
    with full_fp32(), torch.autocast(device.type, enabled=False):
        yield


def length_sorted_batches(lengths: Sequence[int], batch_size: int, max_tokens: int | None = None) -> list[list[int]]:
    """Indices grouped into batches of similar length, longest first (an out-of-memory shows up at once).

    ``batch_size`` sentences a batch, or with ``max_tokens`` a token budget instead: batches of at most
    ``max_tokens`` padded tokens (a batch pads to its first, longest sentence; a longer sentence alone), as many
    passes as filling each batch in turn would take, cut where the padded tokens are fewest
    (:func:`eval.batching.fewest_padding_cuts`), so batches of short sentences hold more of them and every forward
    pass does about the same work. The sort is stable, so equal lengths keep their input order and the batching is
    deterministic.
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    if max_tokens is None:
        cuts = list(range(batch_size, len(order), batch_size)) + [len(order)] if order else []
    else:
        cuts = fewest_padding_cuts([lengths[i] for i in order], max_tokens)
    batches, start = [], 0
    for end in cuts:
        batches.append(order[start:end])
        start = end
    return batches


class SentenceEncoder:
    """Encode sentences to float32 numpy vectors with any ``embed_fn`` and Hugging Face tokenizer.

    Args:
        embed_fn: called as ``embed_fn(**tokenized)`` with exactly the keys the tokenizer returns
            (``input_ids``, ``attention_mask`` and ``token_type_ids`` when the tokenizer makes them), as
            ``torch.long`` tensors already on ``device``; returns ``Tensor[B, d]``.
        tokenizer: a Hugging Face tokenizer (``__call__`` returning lists, ``pad_token_id``). Batches are padded on
            the right whatever its ``padding_side`` (:meth:`_collate`).
        device: where the inputs go; ``None`` = CUDA when available, else CPU.
        batch_size: sentences per forward pass.
        max_tokens: batch by a token budget instead of ``batch_size``: as many length-sorted sentences as fit in
            this many padded tokens per forward pass (:func:`length_sorted_batches`); ``None``: ``batch_size``.
        max_length: truncation length in tokens; ``None`` = the tokenizer's ``model_max_length``.
        preprocess: a change to every sentence's text before tokenisation (PromptBERT's official evaluation
            appends '.'); ``None``: none.
        backbone: the transformer ``embed_fn`` hands each batch's own ``input_ids`` to (``None``: unknown, or an
            embedding that rewrites them, as PromptBERT's template does). With ``max_tokens`` and ``packing``, the
            passes are packed (:mod:`eval.packing`: several sentences a row, no padding) when that backbone can
            take packed rows (:attr:`packing_refusal` says why not otherwise) and the packed rows run fewer tokens
            than the padded passes would (a few sentences in a small budget may not); the log says which.
        packing: pack the passes when the backbone allows (default); ``False``: padded passes.
        embedding: what the sentence embedding is, as its loader resolved it (``pooler avg``; :attr:`embedding`),
            for the results record of ``python -m eval``; ``""``: unsaid.

    The encoder never calls ``model.eval()``/``model.train()``: the caller owns the module's mode
    (:func:`eval.loading.load_encoder` sets eval mode; a trainer evaluating mid-training switches to eval and
    back itself). Encoding runs under :func:`torch.inference_mode` and :func:`evaluation_precision`: float32 by
    default (``eval_dtype="fp32"``: autocast off, TF32 off, as the papers' numbers were computed), bfloat16
    autocast only when asked (``eval_dtype="bf16"``). The result is always float32: on the CPU from :meth:`encode`,
    on the device from :meth:`encode_tensor`.
    """

    def __init__(
        self,
        embed_fn: EmbedFn,
        tokenizer: Any,
        *,
        device: str | torch.device | None = None,
        batch_size: int = 128,
        max_tokens: int | None = None,
        max_length: int | None = None,
        eval_dtype: str = "fp32",
        preprocess: Callable[[str], str] | None = None,
        backbone: nn.Module | None = None,
        packing: bool = True,
        embedding: str = "",
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        if max_tokens is not None and max_tokens < 1:
            raise ValueError(f"max_tokens must be positive (or None: batch_size sentences a batch), got {max_tokens}")
        check_eval_dtype(eval_dtype)  # at construction, not at the first encode
        self.eval_dtype = eval_dtype
        self.embed_fn = embed_fn
        self.tokenizer = tokenizer
        self.device = resolve_device(device)
        self.batch_size = batch_size
        self.max_tokens = max_tokens
        self.max_length = max_length if max_length is not None else default_max_length(tokenizer)
        self.preprocess = preprocess
        self.backbone = backbone
        self.embedding = embedding
        self.packing_refusal = self._packing_refusal(backbone, packing)
        self._cached_batches: tuple[tuple, list[tuple[torch.Tensor, dict[str, torch.Tensor]]]] | None = None
        self._packed_passes: dict[int, PackedPass] = {}  # id(a kept batch's input_ids) -> its packing
        self._warned_unpacked = False

    def _packing_refusal(self, backbone: nn.Module | None, packing: bool) -> str | None:
        """Why the passes are not packed (``None``: they are)."""
        if not packing:
            return "packing is off"
        if self.max_tokens is None:
            return "batches of a number of sentences (packing fills a token budget)"
        if backbone is None:
            return "the embedding does not hand the sentences' own tokens to a known backbone"
        return packing_refusal(backbone)

    @property
    def packs(self) -> bool:
        """Whether the passes may be packed (:mod:`eval.packing`): they are where that runs fewer tokens."""
        return self.packing_refusal is None

    @property
    def packed_batches(self) -> bool:
        """Whether the kept batches (:meth:`device_batches`) are packed passes."""
        return bool(self._packed_passes)

    def packed_forward(self) -> contextlib.AbstractContextManager:
        """The context the kept batches run in: with packing, the backbone runs each batch packed (its hooks);
        otherwise nothing changes."""
        if not self._packed_passes:
            return contextlib.nullcontext()
        return packed_backbone(self.backbone, self._packed_passes)

    def _check_packed_runs(self) -> None:
        """Warn (once per encoder) when a planned pass reached the backbone unpacked: the embedding did not hand it
        the batch's own ``input_ids`` tensor, so it ran the pass's padded layout (the same vectors, more work)."""
        missed = sum(1 for planned in self._packed_passes.values() if planned.runs == 0)
        for planned in self._packed_passes.values():
            planned.runs = 0
        if missed and not self._warned_unpacked:
            self._warned_unpacked = True
            logger.warning("%d of %d packed passes ran padded: the embedding did not hand the backbone the batch's "
                           "own input_ids (pass backbone=None to plan padded passes)", missed,
                           len(self._packed_passes))

    def pass_tokens(self, batches: Sequence[tuple[torch.Tensor, dict[str, torch.Tensor]]]) -> int:
        """The tokens the forward passes of ``batches`` (:meth:`device_batches`) run: the packed rows' slots, or
        the padded batches' positions."""
        return sum(self._packed_passes[id(batch["input_ids"])].layout.tokens
                   if id(batch["input_ids"]) in self._packed_passes else batch["input_ids"].numel()
                   for _, batch in batches)

    def encode(self, sentences: Sequence[str], show_progress: bool = False, desc: str | None = None) -> np.ndarray:
        """Embed ``sentences``; returns float32 ``[len(sentences), d]``, row ``i`` for ``sentences[i]``.

        :meth:`encode_tensor`, copied to the host once. An empty input gives an array of shape ``(0, 0)``.
        """
        if not sentences:
            return np.zeros((0, 0), dtype=np.float32)
        return self.encode_tensor(sentences, show_progress, desc).cpu().numpy()

    def encode_tensor(self, sentences: Sequence[str], show_progress: bool = False,
                      desc: str | None = None) -> torch.Tensor:
        """Embed ``sentences`` into a float32 ``[len(sentences), d]`` tensor on the device, row ``i`` for
        ``sentences[i]``; nothing is copied to the host, and the encoder adds no host-device sync of its own.

        Each distinct sentence is tokenized and encoded once; duplicates share its row. The padded batches on the
        device are kept for the next call with the same sentences and batching (a training run's dev evaluations:
        the tokenizer and the sentences do not change); each batch's vectors go into one device buffer.
        """
        sentences = list(sentences)
        unique = list(dict.fromkeys(sentences))
        if not unique:
            raise ValueError("encode_tensor needs at least one sentence")
        embeddings: torch.Tensor | None = None
        with torch.inference_mode(), evaluation_precision(self.eval_dtype, self.device):
            batches = self.device_batches(unique)
            with self.packed_forward():
                for rows, batch in self._progress(batches, show_progress, desc):
                    vectors = self.embed_fn(**batch)
                    if embeddings is None:
                        embeddings = torch.empty((len(unique), vectors.shape[-1]), dtype=torch.float32,
                                                 device=vectors.device)
                    embeddings.index_copy_(0, rows, vectors.to(torch.float32))
            assert embeddings is not None
            self._check_packed_runs()
            if len(unique) == len(sentences):  # already distinct: ``unique`` is ``sentences``, in order
                return embeddings
            row = {sentence: i for i, sentence in enumerate(unique)}
            return embeddings.index_select(0, torch.tensor([row[s] for s in sentences], device=embeddings.device))

    def device_batches(self, unique: list[str]) -> list[tuple[torch.Tensor, dict[str, torch.Tensor]]]:
        """``unique``'s (distinct sentences) batches as (their rows in ``unique``, the padded inputs ``embed_fn``
        gets), on the device: length-sorted, or with packing the sentences of each packed pass (which
        :meth:`packed_forward` runs packed); the last call's are reused when the sentences and the batching are the
        same. Public for the benchmark, which times the forward of exactly these batches."""
        key = (tuple(unique), self.batch_size, self.max_tokens, self.max_length, self.packs)
        if self._cached_batches is not None and self._cached_batches[0] == key:
            return self._cached_batches[1]
        tokenized = self._tokenize(unique)
        lengths = [len(ids) for ids in tokenized["input_ids"]]
        self._packed_passes = {}
        padded = length_sorted_batches(lengths, self.batch_size, self.max_tokens)
        padded_tokens = sum(max(lengths[i] for i in indices) * len(indices) for indices in padded)
        layouts = packed_passes(lengths, self.max_tokens) if self.packs and self.max_tokens is not None else []
        packed_tokens = sum(layout.tokens for layout in layouts)
        if layouts and packed_tokens < padded_tokens:
            batches = []
            for layout in layouts:
                batch = self._collate(tokenized, list(layout.sentences))
                self._packed_passes[id(batch["input_ids"])] = PackedPass(layout, lengths, self.device)
                batches.append((torch.tensor(layout.sentences, device=self.device), batch))
            how = f"packed ({padded_tokens} tokens padded)"
        else:
            batches = [(torch.tensor(indices, device=self.device), self._collate(tokenized, indices))
                       for indices in padded]
            how = (f"padded ({self.packing_refusal})" if not layouts
                   else f"padded (packed: {packed_tokens}, no fewer)")
        logger.info("%d distinct sentences, %d tokens: %d passes of %d tokens, %s", len(unique), sum(lengths),
                    len(batches), packed_tokens if self._packed_passes else padded_tokens, how)
        self._cached_batches = (key, batches)
        return batches

    def _tokenize(self, sentences: list[str]) -> Mapping[str, list[list[int]]]:
        """Tokenize once, unpadded; padding happens per batch in :meth:`_collate`."""
        if self.preprocess is not None:
            sentences = [self.preprocess(sentence) for sentence in sentences]
        encoded = self.tokenizer(
            sentences, truncation=self.max_length is not None, max_length=self.max_length, padding=False
        )
        return dict(encoded)

    def _pad_value(self, key: str) -> int:
        if key == "input_ids":
            pad_id = getattr(self.tokenizer, "pad_token_id", None)
            return 0 if pad_id is None else int(pad_id)
        if key == "token_type_ids":
            return int(getattr(self.tokenizer, "pad_token_type_id", 0))
        return 0  # attention_mask and any other 0/1 mask

    def _collate(self, tokenized: Mapping[str, list[list[int]]], indices: list[int]) -> dict[str, torch.Tensor]:
        """Dynamic padding: pad the batch to its own longest sentence, on the right, as training pads
        (``data.collators``), whatever the tokenizer's ``padding_side``: every embedding here reads the sentence from
        position 0 (the ``cls`` poolers' [CLS], PromptBERT's template around it, the positions a backbone numbers
        from the first token). A tokenizer that pads on the left (XLNet's, by default) gave a short sentence the
        state of a [PAD] under ``cls`` pooling and positions shifted by its batch-mates' lengths: other embeddings
        than the training's and than the sentence encoded alone."""
        width = max(len(tokenized["input_ids"][i]) for i in indices)
        return {
            key: pad_rows([rows[i] for i in indices], self._pad_value(key), length=width).to(
                self.device, non_blocking=True
            )
            for key, rows in tokenized.items()
        }

    @staticmethod
    def _progress(batches: list, show: bool, desc: str | None) -> Iterable:
        if not show:
            return batches
        from tqdm.auto import tqdm

        return tqdm(batches, desc=desc or "encoding", unit="batch")
