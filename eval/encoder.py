"""Batched sentence encoding for evaluation: deduplicated, length-sorted, dynamically padded, no gradients.

SentEval hands the model one batch at a time through a ``batcher``; SimCSE's batcher tokenizes with
``padding=True`` and reads the pooled vector. :class:`SentenceEncoder` does the same work for a whole list at once,
which lets it (1) encode each distinct sentence once, (2) sort by token count so that every batch holds sentences
of similar length (minimal padding), and (3) return rows in the caller's order. Length sorting and per-batch
padding change nothing but the speed: a padded position is masked out of attention and pooling.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
import torch

from data.padding import pad_rows
from eval.fp32_precision import full_fp32

EmbedFn = Callable[..., torch.Tensor]
"""``embed_fn(input_ids=..., attention_mask=..., [token_type_ids=...]) -> Tensor[B, d]``."""

_UNBOUNDED_MODEL_MAX_LENGTH = 1_000_000  # tokenizers without a limit report int(1e30)

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


def length_sorted_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices grouped into batches of similar length, longest first (an out-of-memory shows up at once).

    The sort is stable, so equal lengths keep their input order and the batching is deterministic.
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    return [order[start:start + batch_size] for start in range(0, len(order), batch_size)]


class SentenceEncoder:
    """Encode sentences to float32 numpy vectors with any ``embed_fn`` and Hugging Face tokenizer.

    Args:
        embed_fn: called as ``embed_fn(**tokenized)`` with exactly the keys the tokenizer returns
            (``input_ids``, ``attention_mask`` and ``token_type_ids`` when the tokenizer makes them), as
            ``torch.long`` tensors already on ``device``; returns ``Tensor[B, d]``.
        tokenizer: a Hugging Face tokenizer (``__call__`` returning lists, ``pad_token_id``, ``padding_side``).
        device: where the inputs go; ``None`` = CUDA when available, else CPU.
        batch_size: sentences per forward pass.
        max_length: truncation length in tokens; ``None`` = the tokenizer's ``model_max_length``.
        preprocess: a change to every sentence's text before tokenisation (PromptBERT's official evaluation
            appends '.'); ``None``: none.

    The encoder never calls ``model.eval()``/``model.train()``: the caller owns the module's mode
    (:func:`eval.loading.load_encoder` sets eval mode; a trainer evaluating mid-training switches to eval and
    back itself). Encoding runs under :func:`torch.inference_mode` and :func:`evaluation_precision`: float32 by
    default (``eval_dtype="fp32"``: autocast off, TF32 off, as the papers' numbers were computed), bfloat16
    autocast only when asked (``eval_dtype="bf16"``). The result is always float32 on the CPU.
    """

    def __init__(
        self,
        embed_fn: EmbedFn,
        tokenizer: Any,
        *,
        device: str | torch.device | None = None,
        batch_size: int = 128,
        max_length: int | None = None,
        eval_dtype: str = "fp32",
        preprocess: Callable[[str], str] | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        check_eval_dtype(eval_dtype)  # at construction, not at the first encode
        self.eval_dtype = eval_dtype
        self.embed_fn = embed_fn
        self.tokenizer = tokenizer
        self.device = resolve_device(device)
        self.batch_size = batch_size
        self.max_length = max_length if max_length is not None else default_max_length(tokenizer)
        self.preprocess = preprocess
        self._cached_batches: tuple[tuple[str, ...], list[tuple[torch.Tensor, dict[str, torch.Tensor]]]] | None = None

    def encode(self, sentences: Sequence[str], show_progress: bool = False, desc: str | None = None) -> np.ndarray:
        """Embed ``sentences``; returns float32 ``[len(sentences), d]``, row ``i`` for ``sentences[i]``.

        Each distinct sentence is tokenized and encoded once; duplicates share its row. An empty input gives
        an array of shape ``(0, 0)``. The padded batches on the device are kept for the next call with the same
        sentences (a training run's dev evaluations: the tokenizer and the sentences do not change), and the
        embeddings stay on the device until one copy to the host at the end.
        """
        sentences = list(sentences)
        unique = list(dict.fromkeys(sentences))
        if not unique:
            return np.zeros((0, 0), dtype=np.float32)
        batches = self._device_batches(unique)
        embeddings: torch.Tensor | None = None
        with torch.inference_mode(), evaluation_precision(self.eval_dtype, self.device):
            for rows, batch in self._progress(batches, show_progress, desc):
                vectors = self.embed_fn(**batch)
                if embeddings is None:
                    embeddings = torch.empty((len(unique), vectors.shape[-1]), dtype=torch.float32,
                                             device=vectors.device)
                embeddings.index_copy_(0, rows, vectors.to(torch.float32))
        assert embeddings is not None
        row = {sentence: i for i, sentence in enumerate(unique)}
        return embeddings.cpu().numpy()[[row[sentence] for sentence in sentences]]

    def _device_batches(self, unique: list[str]) -> list[tuple[torch.Tensor, dict[str, torch.Tensor]]]:
        """``unique``'s length-sorted batches as (their rows in ``unique``, the padded inputs), on the device; the
        last call's are reused when the sentences are the same."""
        key = tuple(unique)
        if self._cached_batches is not None and self._cached_batches[0] == key:
            return self._cached_batches[1]
        tokenized = self._tokenize(unique)
        batches = [(torch.tensor(indices, device=self.device), self._collate(tokenized, indices))
                   for indices in length_sorted_batches([len(ids) for ids in tokenized["input_ids"]], self.batch_size)]
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
        """Dynamic padding: pad the batch to its own longest sentence, on the tokenizer's padding side."""
        width = max(len(tokenized["input_ids"][i]) for i in indices)
        side = "left" if getattr(self.tokenizer, "padding_side", "right") == "left" else "right"
        return {
            key: pad_rows([rows[i] for i in indices], self._pad_value(key), length=width, side=side).to(
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
