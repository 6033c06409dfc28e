"""Checks that run before a training script loads or writes anything, so that a doomed run fails in a second
with one message instead of after minutes of loading (or, worse, after training steps it then loses).

- :func:`check_output_dir`: a folder holding a previous run is refused unless the run is resumed or
  ``--overwrite_output_dir`` replaces it (which then deletes the old run's checkpoints, results and export first).
- :func:`check_resume_checkpoint`: ``--resume_from_checkpoint`` names a checkpoint holding everything a resume
  loads, whole (``latest``: the newest such checkpoint of ``--output_dir``; :mod:`trainers.checkpoints`).
- :func:`missing_inputs`: the corpus exists and every model named on the command line is a local model folder or
  a Hub name that can be reached (in the cache, or the Hub is not switched offline).
- :func:`check_evaluation_data`: the dev sets evaluation reads (STS-B dev and SICK-R dev) load, with SentEval's
  line counts, before the first training step.
- :func:`command_line.writable.check_creatable`: ``--output_dir`` (and ``--export_dir``) can be created and written.

Before them, :func:`resolve_backbone` reads ``--model_name_or_path`` as the folder the backbone loads from.
"""
from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any, Mapping

from eval.backbone import (ModelLoadingError, contrastive_checkpoint_method, in_hub_cache, model_problem,
                           resolve_run_folder, sentence_transformers_backbone)
from models.card import is_hub_name
from trainers.checkpoints import (checkpoint_step, incomplete_checkpoint_error, newest_complete_checkpoint,
                                  processes_change_error, resolve_latest)
from trainers.errors import UserError

from .writable import check_creatable

logger = logging.getLogger("cse_repro")

QUICKSTART = ("New here? `bash scripts/quickstart.sh` trains SimCSE offline on a CPU in minutes (README.md, "
              "'Two commands').")
SENTEVAL_HELP = ("Get it with `bash data/download_senteval.sh` (needs internet) and point "
                 "`--senteval_dir`/`SENTEVAL_DIR` at its `downstream/` folder, or pass `--eval_strategy no` to train "
                 "without model selection.")

#: Files a finished (or started) run leaves in its output folder, besides its checkpoint-N folders and export.
RUN_FILES = ("all_results.json", "train_results.json", "eval_results.json", "run_arguments.json")


# ------------------------------------------------------------------------------------------------ backbone


def resolve_backbone(model_args: Any, training_args: Any) -> None:
    """Set ``--model_name_or_path`` to the folder the backbone loads from: a finished run's folder (its
    ``--output_dir``) or its ``export/`` folder is its export (:func:`eval.backbone.resolve_run_folder`, logged, as
    ``python -m eval`` reads it), and an unfinished run's folder is refused, naming its newest checkpoint. An older
    sentence-transformers folder is its transformer's module folder
    (:func:`eval.backbone.sentence_transformers_backbone`, logged). A training checkpoint (``checkpoint-N``) gives its
    encoder (:func:`eval.backbone.checkpoint_encoder`; the official SimCSE train.py loads ``BertForCL``, encoder and
    MLP, from any folder, a checkpoint included, and passes that folder to ``trainer.train(model_path=...)``: here the
    encoder alone starts a new run), with a warning (``training_args.command_line_warnings``: said at the run's start
    and in its summary): the run starts at step 0 where ``--resume_from_checkpoint`` would continue that run."""
    name = model_args.model_name_or_path
    try:
        model_args.model_name_or_path = resolve_run_folder(name, "train")
    except ModelLoadingError as exc:
        raise UserError(f"--model_name_or_path {exc}") from None
    module = sentence_transformers_backbone(model_args.model_name_or_path)
    if module is not None:  # said: the pooling modules beside it are not what the run trains
        logger.warning("--model_name_or_path %s is a sentence-transformers folder whose transformer is in %s: training "
                       "from that folder (its pooling modules are not used; the method's pooler is)", name, module)
        model_args.model_name_or_path = str(module)
    method = contrastive_checkpoint_method(model_args.model_name_or_path)
    if method is not None:  # said with the run's other warnings, at its start and in its summary
        training_args.command_line_warnings.append(
            f"--model_name_or_path {name} is a training checkpoint of a {method} run: this run starts from its "
            f"encoder's weights, at step 0, with new heads (projector, momentum encoder, generator), optimizer and "
            f"learning-rate schedule; --resume_from_checkpoint {name} would continue that run instead")


# ------------------------------------------------------------------------------------------------ output folder
def previous_run(output_dir: str | Path, export_dir: str | Path | None) -> list[Path]:
    """What a previous run left in ``output_dir``: checkpoint folders, result files, a non-empty export folder."""
    out = Path(output_dir)
    found: list[Path] = []
    if out.is_dir():
        found += sorted((p for p in out.glob("checkpoint-*") if p.is_dir()), key=checkpoint_step)
        found += [out / name for name in RUN_FILES if (out / name).is_file()]
    export = Path(export_dir) if export_dir else out / "export"
    if export.is_dir() and any(export.iterdir()):
        found.append(export)
    return found


def check_output_dir(training_args: Any) -> None:
    """Refuse to start in a folder holding a previous run, unless this run resumes it or replaces it.

    Every process decides from the same files before the main process deletes anything (two barriers), so all
    of them take the same branch."""
    from accelerate import PartialState

    out = Path(training_args.output_dir)
    found = previous_run(out, training_args.export_dir)
    resume = training_args.resume_from_checkpoint
    resuming_here = bool(resume) and Path(resume).resolve().parent == out.resolve()
    overwrite = bool(found) and not resuming_here and training_args.overwrite_output_dir
    if found and not resuming_here and not overwrite:
        resumable = newest_complete_checkpoint(out, training_args.world_size)
        raise UserError(output_dir_message(out, found, resume, resumable))
    PartialState().wait_for_everyone()
    if overwrite and training_args.process_index == 0:
        for path in found:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
        logger.warning("--overwrite_output_dir: deleted the previous run's %s in %s",
                       ", ".join(p.name for p in found), out)
    PartialState().wait_for_everyone()


def output_dir_message(out: Path, found: list[Path], resume: str | None, resumable: Path | None = None) -> str:
    """Why the folder is refused and the ways on: resume (an unfinished run: from ``resumable``, its newest complete
    checkpoint), another folder, or overwrite."""
    names = ", ".join(p.name for p in found[:6]) + (", ..." if len(found) > 6 else "")
    checkpoints = [p for p in found if p.name.startswith("checkpoint-")]
    finished = any(p.name == "all_results.json" or (p.is_dir() and p not in checkpoints) for p in found)
    if resume:
        return (f"--output_dir {out} holds another run ({names}) and --resume_from_checkpoint {resume} is not one "
                f"of its checkpoints: resuming there would mix two runs and overwrite its export. Resume into the "
                f"checkpoint's own folder, choose another --output_dir, or pass --overwrite_output_dir to delete "
                f"that run first.")
    if finished:
        return (f"--output_dir {out} holds a finished run ({names}): starting a new one there would delete its "
                f"checkpoints and overwrite its export. Choose another --output_dir, or pass --overwrite_output_dir "
                f"to delete that run first.")
    resume_it = (f"Resume it with --resume_from_checkpoint {resumable} (its newest complete checkpoint), choose"
                 if resumable else "None of its checkpoints is complete. Choose" if checkpoints else "Choose")
    return (f"--output_dir {out} holds an unfinished run ({names}): starting a new one there would delete its "
            f"checkpoints. {resume_it} another --output_dir, or pass --overwrite_output_dir to delete that run first.")


# ------------------------------------------------------------------------------------------------ checkpoints
def check_resume_checkpoint(training_args: Any) -> None:
    """``--resume_from_checkpoint``: ``latest`` (or ``true``) becomes the newest complete checkpoint of
    ``--output_dir``; a folder must hold everything a resume loads, whole (:mod:`trainers.checkpoints`), or the run
    is refused in one line naming what is missing and the newest complete checkpoint; a run trained with another
    global batch (processes x sentences per process) is refused in one line naming its launch."""
    processes = training_args.world_size
    path = resolve_latest(training_args.resume_from_checkpoint, training_args.output_dir, processes)
    training_args.resume_from_checkpoint = path
    batch = training_args.per_device_train_batch_size
    if path and (error := processes_change_error(path, processes, batch)
                 or incomplete_checkpoint_error(path, processes)):
        raise error


# ------------------------------------------------------------------------------------------------ corpus, models
def missing_inputs(train_file: str | None, corpus_hint: str, models: Mapping[str, str | None],
                   cache_dir: str | None = None) -> None:
    """Raise one :class:`UserError` listing every input that is missing: the corpus, models that cannot load."""
    problems: list[str] = []
    if train_file is not None and not Path(train_file).exists():
        problems.append(f"--train_file {train_file}: no such file; {corpus_hint}")
    problems += [p for flag, name in models.items() if name for p in [model_problem(flag, name, cache_dir)] if p]
    if not problems:
        return
    notes = [f"{flag} {name} is not in the local Hugging Face cache: it would be downloaded (needs internet)"
             for flag, name in models.items() if name and not Path(name).expanduser().exists() and is_hub_name(name)
             and not in_hub_cache(name, cache_dir) and not any(p.startswith(f"{flag} ") for p in problems)]
    items = problems + notes
    quickstart = "" if train_file and Path(train_file).exists() else f"\n{QUICKSTART}"
    if len(items) == 1:
        raise UserError(items[0] + quickstart)
    raise UserError("this run cannot start:\n" + "\n".join(f"  - {item}" for item in items) + quickstart)


# ------------------------------------------------------------------------------------------------ evaluation data
def check_evaluation_data(training_args: Any, senteval_dir: str | None) -> None:
    """Model selection reads STS-B dev and SICK-R dev: load both now (existence, format, SentEval's line counts),
    so a missing or truncated file fails before the first training step instead of at the first evaluation."""
    if str(getattr(training_args.eval_strategy, "value", training_args.eval_strategy)) == "no":
        return
    from eval.sts import DEV_TASKS, SentEvalDataError, load_sts

    if not senteval_dir or not Path(senteval_dir).is_dir():
        raise UserError(f"SentEval data not found at {senteval_dir!r} (needed for STS-B dev evaluation). "
                        + SENTEVAL_HELP)
    check = getattr(training_args, "check_senteval_sizes", None)
    for task in DEV_TASKS:
        try:
            load_sts(task, senteval_dir, "dev", check_sizes=check)
        except SentEvalDataError as error:
            raise UserError(f"{error}. (Checked before training because model selection reads STS-B dev and "
                            "SICK-R dev; --eval_strategy no trains without them.)") from error


def preflight(training_args: Any, data_args: Any, models: Mapping[str, str | None], *, corpus_hint: str,
              cache_dir: str | None = None) -> None:
    """Every check of this module, cheapest and most basic first; nothing is loaded or written before they pass
    (except what ``--overwrite_output_dir`` asks to delete)."""
    check_resume_checkpoint(training_args)
    missing_inputs(data_args.train_file, corpus_hint, models, cache_dir)
    check_evaluation_data(training_args, data_args.senteval_dir)
    check_creatable("--output_dir", training_args.output_dir)
    check_creatable("--export_dir", training_args.export_dir)
    check_output_dir(training_args)


__all__ = ["QUICKSTART", "SENTEVAL_HELP", "check_evaluation_data", "check_output_dir", "check_resume_checkpoint",
           "missing_inputs", "model_problem", "preflight", "previous_run", "resolve_backbone"]
