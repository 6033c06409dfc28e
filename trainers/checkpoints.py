"""Whether a Trainer checkpoint holds everything a resume loads, and the marker a finished save leaves in it.

A resume loads the weights (every tensor of the model: ESimCSE's queue and momentum encoder and DiffCSE's generator
are tensors of the model too), ``optimizer.pt``, ``scheduler.pt``, the RNG states (``rng_state.pth``, or
``rng_state_<rank>.pth`` for each process of a multi-process run) and ``trainer_state.json``. The Trainer loads
whatever of these it finds and silently starts the rest over; and a kill can leave any subset of them in a folder
named ``checkpoint-N`` (the Trainer writes them one by one, and deletes older checkpoints with ``rmtree``, whose
order is the file system's). So:

- :func:`write_completion_marker` runs after every file of a checkpoint is written (``trainers/trainer_adapter.py``,
  after every process wrote its RNG state): ``checkpoint_complete.json`` lists each file with its size, written to
  a temporary name and renamed, so it is either whole or absent.
- :func:`checkpoint_problems` checks a folder against its marker (every listed file, at its size) and, marker or
  not, checks every file the resume will load (present, not truncated). A checkpoint written before the marker
  existed (an older run) is accepted when everything a resume loads is present and whole; one missing anything
  is refused.
- :func:`incomplete_checkpoint_error` is the one-line refusal naming what is missing and the newest complete
  checkpoint beside it; :func:`complete_checkpoints` / :func:`newest_complete_checkpoint` are what hints and
  ``--resume_from_checkpoint latest`` name.
"""
from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

from eval.model_files import SHARD_INDEX, archive_problem, safetensors_header, safetensors_problem, shard_names

from .errors import UserError
from .process_state import process_state_files

#: Written last into a checkpoint folder: ``{"processes": N, "files": {name: size in bytes}}``.
MARKER = "checkpoint_complete.json"
TRAINER_STATE = "trainer_state.json"
#: The optimizer's and the learning-rate schedule's state: every resume loads both.
OPTIMIZATION_STATE = ("optimizer.pt", "scheduler.pt")
#: ``--resume_from_checkpoint`` values that mean "the newest complete checkpoint in --output_dir".
LATEST = ("latest", "true")


# ------------------------------------------------------------------------------------------------ writing
def write_completion_marker(folder: str | Path, processes: int) -> Path:
    """Record every file of the finished checkpoint ``folder`` with its size; atomic (a temporary file, renamed)."""
    folder = Path(folder)
    files = {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.is_file() and p.name != MARKER}
    temporary = folder / f".{MARKER}.partial"
    temporary.write_text(json.dumps({"processes": processes, "files": files}, indent=1), encoding="utf-8")
    os.replace(temporary, folder / MARKER)
    return folder / MARKER


# ------------------------------------------------------------------------------------------------ reading
def checkpoint_step(path: Path) -> int:
    """The N of ``checkpoint-N`` (-1 for another name)."""
    suffix = path.name.rsplit("-", 1)[-1]
    return int(suffix) if suffix.isdigit() else -1


def rng_state_files(processes: int) -> list[str]:
    """The RNG-state files a resume by ``processes`` processes loads (the Trainer's names)."""
    return ["rng_state.pth"] if processes <= 1 else [f"rng_state_{rank}.pth" for rank in range(processes)]


def weights_files(folder: Path) -> list[str]:
    """The weight files the resume loads: the shards of an index, ``pytorch_model.bin``, or ``model.safetensors``."""
    index = folder / SHARD_INDEX
    if index.is_file():
        return [index.name, *(shard_names(index) or [])]
    if (folder / "pytorch_model.bin").is_file() and not (folder / "model.safetensors").is_file():
        return ["pytorch_model.bin"]
    return ["model.safetensors"]


def marker_files(folder: Path) -> dict[str, int] | None:
    """The files and sizes the marker lists; ``None`` without a marker (or with an unreadable one)."""
    try:
        return dict(json.loads((folder / MARKER).read_text(encoding="utf-8"))["files"])
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None


def content_problem(path: Path) -> str | None:
    """Why a present file cannot be loaded whole: a truncated safetensors file or torch archive, invalid JSON."""
    if path.suffix == ".safetensors":
        return safetensors_problem(path)
    if path.suffix in (".pt", ".pth", ".bin"):
        return archive_problem(path)
    if path.name == TRAINER_STATE:
        try:
            json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):
            return f"{path} is not valid JSON (a truncated save?)"
    return None


def checkpoint_problems(folder: str | Path, processes: int, model: Any = None) -> list[str]:
    """What a resume of ``folder`` by ``processes`` processes would not find whole (empty: it is complete).
    With ``model``, also the model's tensors missing from the weights (a method's own state among them)."""
    folder = Path(folder)
    if not folder.is_dir():
        return ["no such folder"]
    listed = marker_files(folder) or {}
    loaded = [TRAINER_STATE, *weights_files(folder), *OPTIMIZATION_STATE, *rng_state_files(processes)]
    # each process's own buffers: required where the checkpoint was written with them (an older one has none)
    loaded += [name for name in (process_state_files(model, processes) if model is not None else ())
               if name in listed or any(folder.glob("process_state_*"))]
    wanted = list(dict.fromkeys([*listed, *loaded]))
    missing = [name for name in wanted if not (folder / name).is_file()]
    problems = [f"missing {', '.join(missing)}{rng_state_note(folder, processes, missing)}"] if missing else []
    for name in wanted:
        path = folder / name
        if name in missing:
            continue
        if name in listed and path.stat().st_size != listed[name]:
            problems.append(f"{path} is {path.stat().st_size} bytes, not the {listed[name]} written")
        elif name in loaded and (problem := content_problem(path)):
            problems.append(problem)
    if model is not None and not problems:
        problems += missing_model_tensors(folder, model)
    return problems


def rng_state_note(folder: Path, processes: int, missing: list[str]) -> str:
    """`` (written by 2 processes: resume with 2)`` when the RNG states present are another process count's."""
    if not set(rng_state_files(processes)) & set(missing):
        return ""
    others = sorted(p.name for p in folder.glob("rng_state*.pth"))
    if not others:
        return ""
    written_by = 1 if others == ["rng_state.pth"] else len([n for n in others if n != "rng_state.pth"])
    return f" (its RNG states are those of {written_by} process(es): resume with {written_by})"


def missing_model_tensors(folder: Path, model: Any) -> list[str]:
    """``model.safetensors lacks queue.* (3 tensors)``: the model's tensors the weights do not hold (tied tensors
    count as held when one of their names is). Only safetensors weights are read (their header)."""
    names = weights_files(folder)
    files = [folder / name for name in names if name.endswith(".safetensors")]
    if not files:
        return []
    saved: set[str] = set()
    for path in files:
        saved |= set(safetensors_header(path)[1]) - {"__metadata__"}
    groups: dict[int, list[str]] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        groups.setdefault(id(tensor), []).append(name)
    ignored = set(getattr(model, "_keys_to_ignore_on_save", None) or ())
    lacking = sorted(group[0] for group in groups.values() if not (set(group) & (saved | ignored)))
    if not lacking:
        return []
    per_part = Counter(name.split(".", 1)[0] for name in lacking)
    parts = ", ".join(f"{part}.* ({count} tensor{'s' * (count > 1)})" for part, count in per_part.items())
    return [f"{names[0] if len(files) == 1 else 'the weight shards'} lack{'s' * (len(files) == 1)} the model's "
            f"{parts}"]


def complete_checkpoints(output_dir: str | Path, processes: int, model: Any = None) -> list[Path]:
    """The complete ``checkpoint-N`` folders of ``output_dir``, oldest step first."""
    out = Path(output_dir)
    if not out.is_dir():
        return []
    candidates = sorted((p for p in out.glob("checkpoint-*") if p.is_dir()), key=checkpoint_step)
    return [p for p in candidates if not checkpoint_problems(p, processes, model)]


def newest_complete_checkpoint(output_dir: str | Path, processes: int, model: Any = None) -> Path | None:
    """The complete ``checkpoint-N`` of ``output_dir`` with the highest N, or ``None``."""
    complete = complete_checkpoints(output_dir, processes, model)
    return complete[-1] if complete else None


def resumed_step(folder: str | Path) -> int:
    """The step a resume from ``folder`` starts at (its ``trainer_state.json``'s ``global_step``)."""
    return int(json.loads((Path(folder) / TRAINER_STATE).read_text(encoding="utf-8")).get("global_step", 0))


# ------------------------------------------------------------------------------------------------ refusing
def newest_complete_hint(folder: Path, processes: int, model: Any = None) -> str:
    """`` The newest complete checkpoint in D is D/checkpoint-N: resume from it ...`` (or: there is none)."""
    newest = newest_complete_checkpoint(folder.parent, processes, model)
    if newest is not None and newest.resolve() != folder.resolve():
        return (f" The newest complete checkpoint in {folder.parent} is {newest}: resume from it with "
                f"--resume_from_checkpoint {newest}, or start again without --resume_from_checkpoint.")
    return f" No complete checkpoint in {folder.parent}: start again without --resume_from_checkpoint."


def incomplete_checkpoint_error(path: str, processes: int, model: Any = None) -> UserError | None:
    """The refusal of ``--resume_from_checkpoint path`` (one line), or ``None`` when it is complete."""
    problems = checkpoint_problems(path, processes, model)
    if not problems:
        return None
    folder = Path(path)
    flag = f"--resume_from_checkpoint {path}"
    hint = newest_complete_hint(folder, processes, model)
    if problems == ["no such folder"]:
        return UserError(f"{flag}: no such folder.{hint}")
    return UserError(f"{flag}: an incomplete checkpoint ({'; '.join(problems)}), so resuming it would start part "
                     f"of the training state over (an interrupted save or deletion, or not a Trainer checkpoint)."
                     f"{hint}")


def resolve_latest(value: str | None, output_dir: str | Path, processes: int) -> str | None:
    """``--resume_from_checkpoint latest`` (or the Trainer's ``true``): the newest complete checkpoint of
    ``output_dir``; any other value unchanged."""
    if value is None or str(value).strip().lower() not in LATEST:
        return value
    newest = newest_complete_checkpoint(output_dir, processes)
    if newest is None:
        found = sorted((p.name for p in Path(output_dir).glob("checkpoint-*")), key=lambda n: checkpoint_step(Path(n)))
        what = f"its checkpoints ({', '.join(found)}) are incomplete" if found else "it holds no checkpoint"
        raise UserError(f"--resume_from_checkpoint {value}: no complete checkpoint in --output_dir {output_dir} "
                        f"({what}). Start again without --resume_from_checkpoint.")
    return str(newest)


__all__ = ["LATEST", "MARKER", "checkpoint_problems", "checkpoint_step", "complete_checkpoints",
           "incomplete_checkpoint_error", "newest_complete_checkpoint", "resolve_latest", "resumed_step",
           "rng_state_files", "write_completion_marker"]
