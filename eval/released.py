"""``python -m eval.released``: the authors' released checkpoints, our evaluation beside their published numbers.

    python -m eval.released list                       # id, pooler, task set, results file name (tab-separated)
    python -m eval.released check_hub                  # exit 1, saying why, when the checkpoints cannot be fetched
    python -m eval.released compare --results_dir results/released

``bash scripts/check_released.sh`` runs ``python -m eval --model_name_or_path <id> --pooler <pooler> --mode test
--task_set <sts|transfer> --output_json results/released/<owner>__<name>.json`` per checkpoint of
``results/released_checkpoints.json`` and then ``compare``. A checkpoint whose every number is within
``--tolerance`` (0.10 points, the published figures' rounding being 0.005) of the published one says our evaluation
reproduces the authors' protocol on their own model, so a gap left between our training runs and a paper is in the
training. ``compare`` exits 1 when a checkpoint differs, so the check can gate a run. Docs: ``docs/released.md``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

CATALOGUE = Path("results/released_checkpoints.json")
RESULTS_DIR = Path("results/released")
TOLERANCE = 0.10
TASK_SETS = ("sts", "transfer")
HEADERS = {"STSBenchmark": "STS-B", "SICKRelatedness": "SICK-R", "avg": "Avg.", "transfer_avg": "Avg."}
HUB_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Released:
    """One released checkpoint: hub id, its paper, the test-time pooler it needs, what it is evaluated on, the
    published numbers (``python -m eval`` result keys) and where they are published."""

    id: str
    paper: str
    pooler: str
    task_set: str
    published: dict[str, float]
    source: str

    @property
    def result_name(self) -> str:
        """``princeton-nlp/unsup-simcse-bert-base-uncased`` -> ``princeton-nlp__unsup-simcse-bert-base-uncased.json``."""
        return self.id.replace("/", "__") + ".json"


def load_catalogue(path: Path = CATALOGUE) -> list[Released]:
    """The checkpoints of ``results/released_checkpoints.json``, checked for the fields each needs."""
    try:
        entries = json.loads(Path(path).read_text(encoding="utf-8"))["checkpoints"]
        released = [Released(**entry) for entry in entries]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SystemExit(f"{path}: not a released-checkpoint catalogue ({exc}); see results/released_checkpoints.json "
                         "for the format") from None
    for entry in released:
        if entry.task_set not in TASK_SETS:
            raise SystemExit(f"{path}: {entry.id} has task_set {entry.task_set!r}; use one of {', '.join(TASK_SETS)}")
    return released


def select(catalogue: Sequence[Released], only: str | None) -> list[Released]:
    """The checkpoints whose id matches the regular expression ``only`` (all of them for ``None`` / ``""``)."""
    return [entry for entry in catalogue if not only or re.search(only, entry.id)]


# ----------------------------------------------------------------------------------------------- fetching


def _cached(model_id: str) -> bool:
    """Whether the hub cache already holds the checkpoint (its config.json), so it loads offline."""
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(model_id, "config.json"), str)


def hub_problem(model_ids: Sequence[str]) -> str | None:
    """Why the checkpoints cannot be loaded here (``None`` when they can): every one cached, or the hub reachable."""
    missing = [model_id for model_id in model_ids if not _cached(model_id)]
    if not missing:
        return None
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    if offline:
        return (f"HF_HUB_OFFLINE is set and {len(missing)} of the {len(model_ids)} checkpoints are not in the Hugging "
                f"Face cache (e.g. {missing[0]}): on a machine with internet, run `HF_HUB_OFFLINE=0 bash "
                "scripts/check_released.sh` once (it downloads them), or point RELEASED_ROOT at local copies "
                "(RELEASED_ROOT/<owner>/<name>)")
    from huggingface_hub import HfApi

    try:
        HfApi().model_info(missing[0], timeout=HUB_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - any failure means "cannot fetch"; the message says which
        return (f"cannot reach the Hugging Face hub for {missing[0]} ({type(exc).__name__}: "
                f"{' '.join(str(exc).split())[:200]}): check_released.sh needs internet once to download the released "
                "checkpoints; run it on a machine with internet, or point RELEASED_ROOT at local copies")
    return None


# ----------------------------------------------------------------------------------------------- comparing


@dataclass(frozen=True)
class Comparison:
    """One checkpoint's published numbers beside ours (``None``: not evaluated / a key our results lack)."""

    entry: Released
    ours: dict[str, float | None] | None
    tolerance: float

    @property
    def differences(self) -> dict[str, float | None]:
        if self.ours is None:
            return {}
        return {key: None if self.ours.get(key) is None else self.ours[key] - published
                for key, published in self.entry.published.items()}

    @property
    def status(self) -> str:
        """``not evaluated``, ``agrees`` (every published number within the tolerance), or ``differs``."""
        if self.ours is None:
            return "not evaluated"
        ok = all(diff is not None and abs(diff) <= self.tolerance + 1e-9 for diff in self.differences.values())
        return "agrees" if ok else "differs"


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(
        value) else None


def compare(catalogue: Sequence[Released], results_dir: Path, tolerance: float = TOLERANCE) -> list[Comparison]:
    """Each checkpoint against ``results_dir/<owner>__<name>.json`` (``python -m eval --output_json``)."""
    comparisons = []
    for entry in catalogue:
        path = Path(results_dir) / entry.result_name
        ours = None
        if path.is_file():
            results = json.loads(path.read_text(encoding="utf-8"))
            ours = {key: _number(results.get(key)) for key in entry.published}
        comparisons.append(Comparison(entry, ours, tolerance))
    return comparisons


def _cell(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "—"
    return f"{value:+.2f}" if signed else f"{value:.2f}"


def format_comparison(comparison: Comparison) -> str:
    """A Markdown block: the checkpoint, its pooler and task set, the published / ours / difference lines, the
    verdict, and where the published numbers come from."""
    entry = comparison.entry
    keys = list(entry.published)
    lines = [f"#### {entry.id} ({entry.paper}; --pooler {entry.pooler}; {entry.task_set} test): {comparison.status}",
             "", "| | " + " | ".join(HEADERS.get(key, key) for key in keys) + " |",
             "| --- |" + " --- |" * len(keys),
             "| published | " + " | ".join(_cell(entry.published[key]) for key in keys) + " |"]
    if comparison.ours is not None:
        lines.append("| ours | " + " | ".join(_cell(comparison.ours[key]) for key in keys) + " |")
        lines.append("| ours - published | " + " | ".join(_cell(comparison.differences[key], signed=True)
                                                         for key in keys) + " |")
    lines += ["", f"Published: {entry.source}", ""]
    return "\n".join(lines)


def format_report(comparisons: Sequence[Comparison]) -> str:
    counts = {status: sum(c.status == status for c in comparisons) for status in ("agrees", "differs", "not evaluated")}
    tolerance = comparisons[0].tolerance if comparisons else TOLERANCE
    summary = (f"Released checkpoints: {counts['agrees']} agree with their published numbers (every number within "
               f"{tolerance:.2f}), {counts['differs']} differ, {counts['not evaluated']} not evaluated.")
    return "\n".join([summary, "", *(format_comparison(c) for c in comparisons), summary])


# ----------------------------------------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m eval.released", description=__doc__.split("\n\n")[0])
    parser.add_argument("--catalogue", type=Path, default=CATALOGUE)
    parser.add_argument("--only", default=None, help="only the checkpoints whose id matches this regular expression")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="id, pooler, task set and results file name per checkpoint (tab-separated)")
    commands.add_parser("check_hub", help="exit 1 (saying why) unless every checkpoint is cached or downloadable")
    comparing = commands.add_parser("compare", help="ours beside the published numbers; exit 1 if any differs")
    comparing.add_argument("--results_dir", type=Path, default=RESULTS_DIR)
    comparing.add_argument("--tolerance", type=float, default=TOLERANCE)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    catalogue = select(load_catalogue(args.catalogue), args.only)
    if not catalogue:
        raise SystemExit(f"no checkpoint of {args.catalogue} matches --only {args.only!r}")
    if args.command == "list":
        for entry in catalogue:
            print("\t".join((entry.id, entry.pooler, entry.task_set, entry.result_name)))
        return 0
    if args.command == "check_hub":
        problem = hub_problem([entry.id for entry in catalogue])
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            return 1
        return 0
    comparisons = compare(catalogue, args.results_dir, args.tolerance)
    print(format_report(comparisons))
    return 1 if any(c.status == "differs" for c in comparisons) else 0


if __name__ == "__main__":
    raise SystemExit(main())
