"""ESimCSE's length bucketing (Table 6, Sec. 5.3): reorder a corpus offline so that each batch holds one length.

:func:`bucket_sentences` orders a one-sentence-per-line corpus so that consecutive batches hold sentences of one
length bucket (:func:`length_bucket`); train on the written file with ``--train_sampling_strategy sequential``:

    python -m data.length_buckets --train_file data/wiki1m_for_simcse.txt --output data/wiki1m_buc3.txt
                                  [--buc_len fine|N] [--batch_size 64] [--seed 42]

The corpus is read as training reads it (``data.corpus.corpus_lines``: lines break at ``\n``, ``\r\n`` and ``\r``
only; ``str.splitlines()`` cut a sentence holding U+2028 or a form feed in two). Beside the output,
``OUTPUT.buckets.json`` records the batch the order was made for (:func:`bucketing_record`): a run on the file under
another batch, or under the Trainer's default random sampling (which shuffles the order away), is warned of
(:func:`bucketing_warning`); it trained on mixed batches silently before.
"""
from __future__ import annotations

import argparse
import json
import logging
import random
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

from .corpus import corpus_lines

logger = logging.getLogger(__name__)

__all__ = ["RECORD_SUFFIX", "bucket_sentences", "bucketing_record", "bucketing_warning", "length_bucket", "main"]

#: The suffix of the record written beside a bucketed corpus (``wiki1m_buc3.txt.buckets.json``).
RECORD_SUFFIX = ".buckets.json"


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


def bucketing_record(train_file: str | Path) -> dict[str, Any] | None:
    """What :func:`main` recorded beside ``train_file`` (its ``batch_size``, ``buc_len``, ``seed`` and ``source``), or
    ``None`` where the file is not a bucketed corpus (or its record was not copied with it)."""
    try:
        return json.loads(Path(f"{train_file}{RECORD_SUFFIX}").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def bucketing_warning(train_file: str | Path, sampling: str, contrast_batch: int) -> str | None:
    """A run on a bucketed corpus that does not take its batches in the file's order (``sampling`` other than
    ``sequential``: the Trainer's default ``random`` shuffles the order away) or takes another number of sentences a
    step (``contrast_batch``: the per-device batch x the processes, each process's share of one run of consecutive
    sentences) than the batches the order was made for: each step's batch mixes buckets. ``None`` otherwise, and for
    a file without a record."""
    record = bucketing_record(train_file)
    if record is None:
        return None
    problems = []
    if sampling != "sequential":
        problems.append(f"--train_sampling_strategy {sampling} shuffles that order away")
    if contrast_batch != record.get("batch_size"):
        problems.append(f"this run takes {contrast_batch} sentences a step")
    if not problems:
        return None
    return (f"--train_file {train_file} is length-bucketed for batches of {record.get('batch_size')} sentences "
            f"(python -m data.length_buckets, its record {train_file}{RECORD_SUFFIX}), but {' and '.join(problems)}, "
            f"so each step's batch mixes buckets: pass --train_sampling_strategy sequential and a batch of "
            f"{record.get('batch_size')} (per device x processes), or bucket the corpus again for this batch")


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
    lines = list(corpus_lines(args.train_file))
    sentences = [line for line in lines if line]
    ordered = bucket_sentences(sentences, args.batch_size, buc_len, args.seed)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text("\n".join(ordered) + "\n", encoding="utf-8")
    record = {"batch_size": args.batch_size, "buc_len": args.buc_len, "seed": args.seed, "source": args.train_file}
    Path(f"{output}{RECORD_SUFFIX}").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    logger.info("wrote %d sentences (%d blank lines skipped) in %s-length buckets for batches of %d to %s; train on "
                "it with --train_sampling_strategy sequential and that batch", len(ordered),
                len(lines) - len(sentences), args.buc_len, args.batch_size, output)
    return output


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    main()
