"""Which runs each committed figure was drawn from, so that no report command quietly replaces a figure with one
drawn from fewer runs (issue 25: ``python -m eval.results`` in a checkout holding fewer stand-in runs rewrote
``docs/img/standin_seed_spread.png`` from them).

A guarded image folder holds :data:`RECORD` (``standin_figures.json``): figure file -> the runs it shows
(``<method>_seed<S>``, scripts/standin.sh's run folders). Before any figure is drawn into a guarded folder,
:func:`check_replacements` compares each figure about to be replaced with its record; a figure that would lose runs
(or whose runs were never recorded) is refused, naming the missing runs, unless forced. :func:`write_record` updates
the record after drawing. A folder without a record (``outputs/report/img``, a test's folder) is not guarded.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

RECORD = "standin_figures.json"
ABOUT = ("Which stand-in runs each figure in this folder was drawn from (eval/figure_record.py). "
         "`python -m eval.results --update_docs` refuses to replace a figure with one missing any of these runs "
         "unless --force; it updates this file after drawing.")


@dataclass(frozen=True)
class Figure:
    """One figure to draw: its file name, the runs it shows, and the function that draws it to a path."""

    name: str
    runs: tuple[str, ...]
    draw: Callable[[Path], Path]


class FigureRefused(SystemExit):
    """A guarded figure would lose runs; the message is one line per refused figure."""


def run_id(method: str, seed: int) -> str:
    """``simcse_seed43``: a run as the record names it."""
    return f"{method}_seed{seed}"


def read_record(img_dir: Path) -> dict[str, list[str]] | None:
    """The folder's record (figure -> runs), or ``None`` when the folder is not guarded."""
    path = img_dir / RECORD
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise SystemExit(f"{path}: not valid JSON ({exc}); restore it with `git checkout {path}`") from None
    return {name: list(runs) for name, runs in record.items() if not name.startswith("_")}


def check_replacements(figures: Sequence[Figure], img_dir: Path, force: bool = False) -> list[str]:
    """Raise :class:`FigureRefused` when a figure of a guarded ``img_dir`` would be replaced by one missing runs
    it shows now (or whose runs are not recorded), unless ``force``; returns the warnings of forced replacements."""
    record = read_record(img_dir)
    if record is None:
        return []
    problems = []
    for figure in figures:
        target = img_dir / figure.name
        if not target.is_file():
            continue
        if figure.name not in record:
            problems.append(f"refusing to replace {target}: the runs it was drawn from are not recorded in "
                            f"{img_dir / RECORD}; pass --force to replace it")
            continue
        missing = sorted(set(record[figure.name]) - set(figure.runs))
        if missing:
            problems.append(f"refusing to replace {target} (drawn from {len(record[figure.name])} runs) with one "
                            f"drawn from {len(figure.runs)}: missing {', '.join(missing)}; run them, point "
                            "--standin_dir at the checkout that has them, or pass --force")
    if problems and not force:
        raise FigureRefused("\n".join(problems))
    return [problem.replace("refusing to replace", "--force: replacing", 1) for problem in problems]


def write_record(img_dir: Path, figures: Sequence[Figure]) -> Path:
    """Record the runs of the figures just drawn (other figures' entries are kept)."""
    record = read_record(img_dir) or {}
    record.update({figure.name: sorted(figure.runs) for figure in figures})
    path = img_dir / RECORD
    path.write_text(json.dumps({"_about": ABOUT, **dict(sorted(record.items()))}, indent=2) + "\n", encoding="utf-8")
    return path


__all__ = ["RECORD", "Figure", "FigureRefused", "check_replacements", "read_record", "run_id", "write_record"]
