"""ESimCSE's length bucketing (Table 6, Sec. 5.3): reorder a corpus offline so that each batch holds one length.

:func:`bucket_sentences` orders a one-sentence-per-line corpus so that consecutive batches hold sentences of one
length bucket (:func:`length_bucket`); train on the written file with ``--train_sampling_strategy sequential``:

    python -m data.length_buckets --train_file data/wiki1m_for_simcse.txt --output data/wiki1m_buc3.txt
                                  [--buc_len fine|N] [--batch_size 64] [--seed 42]
"""
from __future__ import annotations

import argparse
import logging
import random
from collections import defaultdict
from pathlib import Path
from typing import Sequence

logger = logging.getLogger(__name__)

__all__ = ["bucket_sentences", "length_bucket", "main"]


def length_bucket(sentence: str, buc_len: int | None) -> int:
    """ESimCSE Sec. 5.3: two coarse buckets (``words > buc_len`` or not) or, with ``buc_len=None``, the six fine
    buckets ``{<=3, 4, 5, 6, 7, >=8}`` ("3~8"). Length = whitespace-separated words."""
    words = len(sentence.split())
    return int(words > buc_len) if buc_len is not None else min(max(words, 3), 8)


def bucket_sentences(sentences: Sequence[str], batch_size: int, buc_len: int | None, seed: int = 42) -> list[str]:
    """Reorder ``sentences`` so that every run of ``batch_size`` consecutive sentences comes from one length bucket
    (shuffled within buckets, batches shuffled across buckets); each bucket's remainder (< one batch) goes to the
    end, so at most one mixed batch per bucket remains, last."""
    rng = random.Random(seed)
    order = list(range(len(sentences)))
    rng.shuffle(order)
    buckets: dict[int, list[int]] = defaultdict(list)
    for index in order:
        buckets[length_bucket(sentences[index], buc_len)].append(index)
    batches: list[list[int]] = []
    remainder: list[int] = []
    for key in sorted(buckets):
        items = buckets[key]
        full = len(items) - len(items) % batch_size
        batches += [items[i:i + batch_size] for i in range(0, full, batch_size)]
        remainder += items[full:]
    rng.shuffle(batches)
    return [sentences[i] for batch in batches for i in batch] + [sentences[i] for i in remainder]


def main(argv: list[str] | None = None) -> Path:
    """``python -m data.length_buckets``: write a length-bucketed copy of a corpus; returns the output path."""
    parser = argparse.ArgumentParser(
        prog="python -m data.length_buckets",
        description="Write a length-bucketed copy of a one-sentence-per-line corpus (ESimCSE Table 6); train on it "
                    "with --train_sampling_strategy sequential.")
    parser.add_argument("--train_file", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--buc_len", default="fine",
                        help="an integer (two buckets: <= buc_len / > buc_len words) or 'fine' ({<=3,4,5,6,7,>=8})")
    parser.add_argument("--batch_size", type=int, default=64, help="the global batch size of the training run")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    buc_len = None if args.buc_len == "fine" else int(args.buc_len)
    lines = [line.strip() for line in Path(args.train_file).read_text(encoding="utf-8").splitlines()]
    sentences = [line for line in lines if line]
    ordered = bucket_sentences(sentences, args.batch_size, buc_len, args.seed)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text("\n".join(ordered) + "\n", encoding="utf-8")
    logger.info("wrote %d sentences in %s-length buckets to %s", len(ordered), args.buc_len, output)
    return output


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    main()
