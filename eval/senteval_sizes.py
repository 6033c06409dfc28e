"""The line counts of SentEval's STS files, so a truncated or wrong file is an error instead of a smaller score.

A truncated STS-B dev file used to be scored on the pairs it still had (857 of 1500) with one INFO line. Every file
the STS loaders read has a known length: :func:`check_line_count` compares the lines read with
:data:`SENTEVAL_LINE_COUNTS` and raises :class:`eval.sts.SentEvalDataError` naming the file, the count found and the
count expected. A blanked line keeps the line count, so the pairs each file scores are checked too
(:data:`SENTEVAL_SCORED_PAIRS`).

Your own STS-format files (other sizes, same layout) are evaluated with the check off: ``python -m eval
--no_check_senteval_sizes``, ``run_unsup.py/run_diffcse.py --check_senteval_sizes false``, or the environment
variable ``SENTEVAL_CHECK_SIZES=0`` (the default of both flags).
"""
from __future__ import annotations

import os

SIZES_ENV = "SENTEVAL_CHECK_SIZES"
"""Environment variable giving the default of the size check: ``0``/``false``/``no`` turns it off."""

SENTEVAL_LINE_COUNTS: dict[str, int] = {
    # Counted with ``len(text.splitlines())`` (how eval/sts.py reads them: UTF-8, a BOM ignored) on SentEval's
    # data/downstream as `bash data/download_senteval.sh` fetches it (the copy in ../shared/senteval/downstream).
    # STS12-16: input and gold files of one subset have the same count.
    "STS/STS12-en-test/MSRpar": 750, "STS/STS12-en-test/MSRvid": 750, "STS/STS12-en-test/SMTeuroparl": 459,
    "STS/STS12-en-test/surprise.OnWN": 750, "STS/STS12-en-test/surprise.SMTnews": 399,
    "STS/STS13-en-test/FNWN": 189, "STS/STS13-en-test/headlines": 750, "STS/STS13-en-test/OnWN": 561,
    "STS/STS14-en-test/deft-forum": 450, "STS/STS14-en-test/deft-news": 300, "STS/STS14-en-test/headlines": 750,
    "STS/STS14-en-test/images": 750, "STS/STS14-en-test/OnWN": 750, "STS/STS14-en-test/tweet-news": 750,
    "STS/STS15-en-test/answers-forums": 2000, "STS/STS15-en-test/answers-students": 1500,
    "STS/STS15-en-test/belief": 2000, "STS/STS15-en-test/headlines": 1500, "STS/STS15-en-test/images": 1500,
    "STS/STS16-en-test/answer-answer": 1572, "STS/STS16-en-test/headlines": 1498,
    "STS/STS16-en-test/plagiarism": 1271, "STS/STS16-en-test/postediting": 3287,
    "STS/STS16-en-test/question-question": 1555,
    # STS Benchmark: one pair a line, no header.
    "STS/STSBenchmark/sts-train.csv": 5749, "STS/STSBenchmark/sts-dev.csv": 1500, "STS/STSBenchmark/sts-test.csv": 1379,
    # SICK: a header line + 4500 / 500 / 4927 pairs (SICK_trial is SICK-R's dev split).
    "SICK/SICK_train.txt": 4501, "SICK/SICK_trial.txt": 501, "SICK/SICK_test_annotated.txt": 4928,
}
"""Relative path (STS12-16: ``STS/<year>-en-test/<subset>``, for both ``STS.input`` and ``STS.gs``) -> lines."""

SENTEVAL_SCORED_PAIRS: dict[str, int] = {
    # The pairs each file scores: SICK less its header; STS15/16 subsets less the pairs with a blank gold line
    # (SentEval drops them); every other file one pair a line. Totals: the counts :func:`eval.sts.load_sts` lists.
    **{key: lines - key.startswith("SICK/") for key, lines in SENTEVAL_LINE_COUNTS.items()},
    "STS/STS15-en-test/answers-forums": 375, "STS/STS15-en-test/answers-students": 750,
    "STS/STS15-en-test/belief": 375, "STS/STS15-en-test/headlines": 750, "STS/STS15-en-test/images": 750,
    "STS/STS16-en-test/answer-answer": 254, "STS/STS16-en-test/headlines": 249,
    "STS/STS16-en-test/plagiarism": 230, "STS/STS16-en-test/postediting": 244,
    "STS/STS16-en-test/question-question": 209,
}
"""The keys of :data:`SENTEVAL_LINE_COUNTS` -> scored pairs: a blanked line or gold score keeps the line count
but scores one pair fewer."""

SCORED_PAIRS = "scored pairs (a blank line or blank gold score drops one)"
""":func:`mismatch_message`'s ``unit`` for a :data:`SENTEVAL_SCORED_PAIRS` mismatch."""


def check_sizes_default() -> bool:
    """The size check's default: on, unless ``SENTEVAL_CHECK_SIZES`` is ``0``/``false``/``no``/``off``."""
    return os.environ.get(SIZES_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def size_mismatch(key: str, found: int, counts: dict[str, int] = SENTEVAL_LINE_COUNTS) -> int | None:
    """The expected count of ``key`` (lines; scored pairs with :data:`SENTEVAL_SCORED_PAIRS`) when ``found``
    differs from it; ``None`` when it matches or is unknown."""
    expected = counts.get(key)
    return expected if expected is not None and expected != found else None


def mismatch_message(path: os.PathLike[str] | str, found: int, expected: int, unit: str = "lines") -> str:
    return (f"{path} has {found} {unit} but SentEval's file has {expected}: it is truncated or not SentEval's file. "
            "Re-download the data (bash data/download_senteval.sh); to evaluate your own STS-format file, turn the "
            f"size check off (python -m eval --no_check_senteval_sizes; run_unsup.py/run_diffcse.py "
            f"--check_senteval_sizes false; or {SIZES_ENV}=0)")


__all__ = ["SCORED_PAIRS", "SENTEVAL_LINE_COUNTS", "SENTEVAL_SCORED_PAIRS", "SIZES_ENV", "check_sizes_default",
           "mismatch_message", "size_mismatch"]
