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
- A checkpoint is complete or not whatever the number of processes resuming it: it holds the RNG states (and
  ESimCSE's per-process queues) of the processes that wrote it (:func:`written_processes`). A resume by another
  number of processes with another global batch is refused apart (:func:`processes_change_error`): the processes
  share each step's batch, so another global batch trains another objective (and contrast batch) and skips another
  part of the resumed epoch. Before, a run of 4 processes resumed by 2 found every file those 2 load and trained
  on, silently. The same global batch on another number of processes (4 x 16 resumed as 2 x 32) continues the run
  where the method's objective does not depend on the split (``trainers.resume_settings.process_split_error``).
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
from models.distributed import processes_phrase

from .errors import UserError
from .process_state import process_state_files
from .resume_settings import CheckpointRecords, launch_on

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


def _marker(folder: Path) -> dict[str, Any] | None:
    try:
        marker = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return marker if isinstance(marker, dict) else None


def marker_files(folder: Path) -> dict[str, int] | None:
    """The files and sizes the marker lists; ``None`` without a marker (or with an unreadable one)."""
    try:
        return dict(_marker(folder)["files"])
    except (KeyError, TypeError, ValueError):
        return None


def written_processes(folder: str | Path) -> int | None:
    """How many processes trained the run that wrote the checkpoint ``folder``: its marker's count, else (a
    checkpoint written before the marker) the count of its RNG-state files (``rng_state.pth``: 1,
    ``rng_state_<rank>.pth``: one per process); ``None`` where neither says."""
    folder = Path(folder)
    recorded = (_marker(folder) or {}).get("processes")
    if isinstance(recorded, int) and recorded > 0:
        return recorded
    ranks = [p.name for p in folder.glob("rng_state_*.pth")]
    return len(ranks) if ranks else 1 if (folder / "rng_state.pth").is_file() else None


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
    """What a resume of ``folder`` would not find whole (empty: it is complete): the files of the processes that
    wrote it (:func:`written_processes`; ``processes``, this run's count, where the checkpoint does not say). With
    ``model``, also the model's tensors missing from the weights (a method's own state among them)."""
    folder = Path(folder)
    if not folder.is_dir():
        return ["no such folder"]
    listed = marker_files(folder) or {}
    writers = written_processes(folder) or processes
    loaded = [TRAINER_STATE, *weights_files(folder), *OPTIMIZATION_STATE, *rng_state_files(writers)]
    # each process's own buffers: required where the checkpoint was written with them (an older one has none)
    loaded += [name for name in (process_state_files(model, writers) if model is not None else ())
               if name in listed or any(folder.glob("process_state_*"))]
    wanted = list(dict.fromkeys([*listed, *loaded]))
    missing = [name for name in wanted if not (folder / name).is_file()]
    problems = [f"missing {', '.join(missing)}"] if missing else []
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


def processes_change_error(path: str, processes: int, batch: int | None = None) -> UserError | None:
    """The refusal of a resume of ``path`` by another number of processes than the run's that wrote it, with
    another global batch (processes x ``batch``, this run's sentences per process) than the run's (one line, with
    the launches that resume it), or ``None``. The processes share each step's batch (each takes its part of the
    global batch, and under gathered negatives the whole global batch as its contrast batch), so another global
    batch trains another objective and the resumed epoch skips another number of sentences than the run trained:
    some twice, some never. The same global batch on another number of processes passes here; what of the method
    depends on the split is :func:`trainers.resume_settings.process_split_error`'s."""
    writers = written_processes(path)
    if writers is None or writers == processes:
        return None
    theirs = recorded_batch(path)
    if theirs is not None and batch is not None and writers * theirs == processes * batch:
        return None
    if theirs is None or batch is None:  # an older checkpoint without its batch: the counts alone
        trained, runs = processes_phrase(writers), processes_phrase(processes)
    else:
        trained = f"{processes_phrase(writers)} x {theirs} sentences (a global batch of {writers * theirs})"
        runs = f"{processes_phrase(processes)} x {batch} ({processes * batch})"
    keep = (f", or on {processes_phrase(processes)} with --per_device_train_batch_size "
            f"{writers * theirs // processes} (the run's global batch)"
            if theirs is not None and writers * theirs % processes == 0 else "")
    return UserError(f"--resume_from_checkpoint {path}: its run trained on {trained} and this resume runs on "
                     f"{runs}. A resume continues the run's global batch: the processes share each step's batch (and "
                     f"their negatives), so another global batch would train another objective and skip another "
                     f"part of the resumed epoch. Resume it on {processes_phrase(writers)} ({launch_on(writers)})"
                     f"{keep}, or start a new run in another --output_dir.")


def recorded_batch(path: str | Path) -> int | None:
    """The sentences per process of the run that wrote checkpoint ``path``: its ``run_arguments.json``'s
    ``per_device_train_batch_size``, else its ``trainer_state.json``'s ``train_batch_size``; ``None`` if neither."""
    records = CheckpointRecords.read(path)
    batch = (records.arguments or {}).get("per_device_train_batch_size") or records.state.get("train_batch_size")
    return batch if isinstance(batch, int) else None


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
           "incomplete_checkpoint_error", "newest_complete_checkpoint", "processes_change_error", "recorded_batch",
           "resolve_latest", "resumed_step", "rng_state_files", "write_completion_marker", "written_processes"]
