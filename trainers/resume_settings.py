"""A resume continues the run that wrote the checkpoint: the settings that define what it trains must be that run's.

The Trainer restores the weights, the optimizer and schedule, the RNG states and the step, and takes everything
else from the new command line without comparing: another ``--seed`` or batch size skips the wrong batches of the
epoch (sentences trained twice or never), another ``--learning_rate`` is ignored (the restored schedule holds the
old one) yet recorded in ``run_arguments.json`` and the card, another ``--max_steps`` bends the restored linear
schedule back up, another method setting or backbone trains another model (or, with a backbone whose parameters
come in another order, hands the optimizer's moments to tensors of other shapes: NaN, then heap corruption). So
:func:`resume_mismatch_error` compares, once the model is built and before any state loads, the
checkpoint's records with this run:

- the method settings (``config.json``: every setting :meth:`models.config.ContrastiveConfig.settings` lists but
  those that only change the evaluation or name a path) and the backbone (its ``model_type`` and sizes);
- the training arguments that shape the optimisation and the data order (:data:`TRAINING_ARGUMENTS`), from the
  ``run_arguments.json`` each checkpoint holds (``trainers/trainer_adapter.py``); a checkpoint written before it did
  is compared on its ``trainer_state.json``'s batch size alone. A changed length (:data:`LENGTH_ARGUMENTS`) is
  allowed, with a warning (:func:`length_change_warning`): lengthening a run is what a resume is often for;
- on another number of processes than the run's, the global batch (processes x ``per_device_train_batch_size``;
  another is refused before, ``trainers.checkpoints.processes_change_error``) and whether the method's objective
  depends on how it is split (:func:`process_split_error`); the run's global batch otherwise resumes, with a warning
  (:func:`process_change_warning`);
- how the run picks its best checkpoint (:data:`SELECTION_ARGUMENTS`): each new dev score is compared with the run's
  best so far, which another metric would compare with a different number;
- the corpus: the SHA-256 of the ``--train_file`` bytes, which every run records in the ``corpus`` section of its
  ``run_arguments.json`` (:func:`corpus_record`): another corpus, at any path, would skip the wrong batches of the
  resumed epoch. The same corpus at another path is the same run.

:func:`resume_warnings` gathers the warnings: :func:`length_change_warning` above, :func:`corpus_change_warning` when
``--train_file`` names another file than the run's and the checkpoint records no corpus digest (written before it
did: the file may be the same corpus, moved), :func:`precision_change_warning` when the resume trains in another
precision (another machine's default, another ``--bf16`` or ``--tf32``), :func:`attention_change_warning` when its
encoder computes attention with another implementation (``--attn_implementation``),
:func:`fast_path_change_warning` when it turns the fast path on or off under stream dropout masks (drawn over the
width the fast path fixes),
:func:`cached_step_change_warning` when it encodes each batch in other chunks under them (another
``--cache_chunk_size``: each chunk draws its own), :func:`lost_best_warning` when the run's best checkpoint is gone
(the run can then only end on a later one). :func:`finished_at` says whether the checkpoint already holds the run's
last step: the Trainer would train one step past ``--max_steps`` from it (its loop tests the limit after a step), so
the pipeline evaluates and exports it instead. All of them read the checkpoint's records once, in
:class:`CheckpointRecords`.
"""
from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from eval.curves import BEFORE_PREFIX
from models.config import SETTINGS, flag_of
from models.distributed import processes_phrase

from .errors import UsageError
from .precision import training_precision

RUN_ARGUMENTS = "run_arguments.json"
#: The ``run_arguments.json`` section that records the corpus a run trained on (:func:`corpus_record`).
CORPUS_SECTION = "corpus"
#: The ``run_arguments.json`` section that records the processes a run trained on (:func:`launch_record`).
LAUNCH_SECTION = "launch"
#: The ``run_arguments.json`` section that records how a run's backbone computed (:func:`backbone_record`).
BACKBONE_SECTION = "backbone"
#: Method settings a resume may change: they act in the evaluation only, name a path whose weights the checkpoint
#: holds, or are filled by the model's builder from those (DiffCSE's generator config, PromptBERT's token ids).
FREE_SETTINGS = frozenset({"test_denoising", "dev_denoising", "eval_add_period", "generator_name",
                           "insert_mlm_name_or_path", "generator_config", "prompt_token_ids"})
#: The backbone's config entries compared (its kind and sizes), where both configs have them.
BACKBONE_KEYS = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                 "vocab_size", "max_position_embeddings")
#: Training and data arguments that define the optimisation and the data order of a run (and the backbone's config
#: settings it changed, e.g. its dropout rates).
TRAINING_ARGUMENTS = ("per_device_train_batch_size", "gradient_accumulation_steps", "seed", "data_seed",
                      "learning_rate", "lr_scheduler_type", "lr_scheduler_kwargs", "warmup_steps", "warmup_ratio",
                      "weight_decay", "optim", "optim_args", "adam_beta1", "adam_beta2", "adam_epsilon",
                      "max_grad_norm", "train_sampling_strategy", "dataloader_drop_last", "max_seq_length",
                      "max_train_samples", "config_overrides")
#: How the run picks its best checkpoint: a resume compares each new dev score with the run's best so far
#: (``trainer_state.json``'s ``best_metric``), so another metric (or direction) would compare two different numbers.
SELECTION_ARGUMENTS = ("metric_for_best_model", "greater_is_better")
#: The run's length: a resume may lengthen (or shorten) it, with a warning, since the restored schedule then goes on
#: as the new length's schedule from the checkpoint's step.
LENGTH_ARGUMENTS = ("num_train_epochs", "max_steps")


def write_run_arguments(folder: str | Path, run_arguments: Mapping[str, Any]) -> Path:
    """``folder/run_arguments.json``: a run's parsed arguments (a run's folder at its end, each checkpoint's)."""
    path = Path(folder) / RUN_ARGUMENTS
    path.write_text(json.dumps(run_arguments, indent=2, default=str), encoding="utf-8")
    return path


def corpus_record(train_file: str | Path, rows: int) -> dict[str, Any]:
    """The ``corpus`` section of a run's ``run_arguments.json``: the digest of its ``--train_file`` and the rows it
    trains on (what a resume compares: :func:`corpus_differences`)."""
    from data.corpus import file_sha256

    return {"train_file_sha256": file_sha256(train_file), "train_rows": rows}


def launch_record(processes: int, per_device_batch: int, accumulation_steps: int,
                  run_processes: int | None = None) -> dict[str, Any]:
    """The ``launch`` section of a run's ``run_arguments.json``: the processes it trained on and the sentences of
    each of its steps (processes x ``--per_device_train_batch_size`` x ``--gradient_accumulation_steps``), which no
    parsed argument holds: a 4 x 16 run's arguments read ``per_device_train_batch_size 16`` alone, as a one-process
    run of batch 16 would (the table scripts divide the paper's batch by the processes). ``run_processes``: a resume's
    checkpoint's run's, recorded where it differs (``resumed_from_processes``)."""
    record = {"processes": processes, "sentences_per_step": processes * per_device_batch * accumulation_steps}
    if run_processes is not None and run_processes != processes:
        record["resumed_from_processes"] = run_processes
    return record


def backbone_record(encoder: Any) -> dict[str, Any]:
    """The ``backbone`` section of a run's ``run_arguments.json``: the attention implementation its encoder computes
    with (``attention``), as it resolved: ``--attn_implementation`` where the backbone has it, the architecture's own
    where it has no other (DeBERTa-v2's eager attention under ``sdpa``), this repo's per-row dropout attention where
    the run installs it (row-seeded masks, S-SimCSE, SimCSE++: :func:`models.dropout.install_row_dropout`); what
    :func:`attention_change_warning` compares."""
    return {"attention": getattr(getattr(encoder, "config", None), "_attn_implementation", None)}


def _json(value: Any) -> Any:
    """``value`` as a JSON file gives it back (tuples as lists), so a record compares with a live value."""
    return json.loads(json.dumps(value, default=str))


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def flat_arguments(run_arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Every parsed argument of a ``run_arguments.json`` by name (its dataclass sections merged)."""
    return {name: value for section, values in run_arguments.items() if isinstance(values, dict)
            and section != "settings" for name, value in values.items()}


@dataclass(frozen=True)
class CheckpointRecords:
    """What a checkpoint says of the run that wrote it, read once: ``config`` (its ``config.json``), ``state``
    (``trainer_state.json``) and ``arguments`` (``run_arguments.json``, flattened; ``None`` in a checkpoint written
    before it held one)."""

    folder: Path
    config: dict[str, Any]
    state: dict[str, Any]
    arguments: dict[str, Any] | None

    @classmethod
    def read(cls, checkpoint: str | Path) -> CheckpointRecords:
        folder = Path(checkpoint)
        recorded = _read(folder / RUN_ARGUMENTS)
        return cls(folder, _read(folder / "config.json") or {}, _read(folder / "trainer_state.json") or {},
                   flat_arguments(recorded) if recorded is not None else None)

    def before_scores(self) -> dict[str, Any]:
        """The run's scores of the model before its first step (``before_*``, evaluated at the start of the run that
        wrote the checkpoint, kept at the head of its log history by ``trainers.curves``), for a resumed run to report
        as the uninterrupted run would; empty where the run did not evaluate at its start."""
        return {key: value for entry in self.state.get("log_history", [])
                for key, value in entry.items() if key.startswith(BEFORE_PREFIX)}


def setting_differences(records: CheckpointRecords, model: Any) -> list[tuple[str, Any, Any]]:
    """(name, the checkpoint's value, this run's) of each method setting and backbone entry that differ."""
    recorded, differences = records.config, []
    for name, value in _json(model.config.settings()).items():
        if name not in FREE_SETTINGS and name in recorded and recorded[name] != value:
            differences.append((name, recorded[name], value))
    ours, theirs = model.config.encoder_config.to_dict(), recorded.get("encoder_config") or {}
    for key in BACKBONE_KEYS:
        if key in ours and key in theirs and ours[key] != theirs[key]:
            differences.append((f"backbone {key}", theirs[key], ours[key]))
    return differences


def argument_differences(records: CheckpointRecords, run_arguments: Mapping[str, Any],
                         process_counts: tuple[int, int] = (1, 1)) -> list[tuple[str, Any, Any]]:
    """(name, the checkpoint's value, this run's) of each :data:`TRAINING_ARGUMENTS` and :data:`LENGTH_ARGUMENTS`
    entry that differs; from the checkpoint's ``run_arguments.json``, else its ``trainer_state.json`` (batch size,
    ``max_steps``). ``process_counts``: the run's processes and this resume's; on another number of processes the
    batch compared is the global one (processes x ``per_device_train_batch_size``)."""
    ours = _json(flat_arguments(run_arguments))
    if records.arguments is not None:
        theirs = records.arguments
        differences = [(name, theirs[name], ours[name]) for name in
                       TRAINING_ARGUMENTS + SELECTION_ARGUMENTS + LENGTH_ARGUMENTS if name in theirs and name in ours
                       and _compared(name, theirs[name]) != _compared(name, ours[name])]
    else:
        state, differences = records.state, []
        batch = ours.get("per_device_train_batch_size")
        if state.get("train_batch_size") not in (None, batch) and batch is not None:
            differences.append(("per_device_train_batch_size", state["train_batch_size"], batch))
        if (ours.get("max_steps") or 0) > 0 and state.get("max_steps") not in (None, ours["max_steps"]):
            differences.append(("max_steps", state["max_steps"], ours["max_steps"]))
    run, resume = process_counts
    return [(name, before, now) for name, before, now in differences if not (
        name == "per_device_train_batch_size" and run != resume and run * before == resume * now)]


def _compared(name: str, value: Any) -> Any:
    """``value`` of the argument ``name`` as compared: a metric with or without the Trainer's ``eval_`` prefix is
    the same metric."""
    return value.removeprefix("eval_") if name == "metric_for_best_model" and isinstance(value, str) else value


def _recorded_corpus(arguments: Mapping[str, Any] | None) -> tuple[str | None, Any]:
    arguments = arguments or {}
    return arguments.get("train_file_sha256"), arguments.get("train_rows")


def corpus_differences(records: CheckpointRecords, run_arguments: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """``[("--train_file's contents", theirs, ours)]`` when this run's corpus digest (:func:`corpus_record`) is not
    the one the checkpoint's run recorded; empty when they match or the checkpoint records none."""
    (theirs, their_rows), (ours, our_rows) = (_recorded_corpus(records.arguments),
                                              _recorded_corpus(flat_arguments(run_arguments)))
    if theirs is None or ours is None or theirs == ours:
        return []
    return [("--train_file's contents", f"{their_rows:,} rows, sha256 {theirs[:12]}",
             f"{our_rows:,} rows, sha256 {ours[:12]}")]


def resume_mismatch_error(records: CheckpointRecords, model: Any, run_arguments: Mapping[str, Any],
                          process_counts: tuple[int, int] = (1, 1)) -> UsageError | None:
    """The one-line refusal of a resume whose command differs from the checkpoint's run in what it trains (module
    docstring), or ``None``; ``process_counts``: the run's processes and this resume's."""
    differences = setting_differences(records, model) + [
        difference for difference in argument_differences(records, run_arguments, process_counts)
        if difference[0] not in LENGTH_ARGUMENTS] + corpus_differences(records, run_arguments)
    if not differences:
        return None
    listed = "; ".join(f"{name}: {theirs!r} there, {ours!r} here" for name, theirs, ours in differences)
    flags = restoring_flags(records, run_arguments, differences)
    return UsageError(
        f"--resume_from_checkpoint {records.folder}: a resume continues the run that wrote it, and this command "
        f"differs from that run in what it trains or how it picks its best checkpoint ({listed}). Resume with that run's values (drop the changed flags "
        f"or set them back{': ' + ', '.join(flags) if flags else ''}), or start a new run in another --output_dir.")


def process_split_error(records: CheckpointRecords, model: Any, process_counts: tuple[int, int]) -> UsageError | None:
    """A resume on another number of processes than the run's (the same global batch: ``trainers.checkpoints.
    processes_change_error`` refused another) where the method's objective depends on how the batch is split over
    the processes (:meth:`models.base.ContrastiveModel.process_split_notes`): refused in one line, or ``None``."""
    run, resume = process_counts
    notes = model.process_split_notes() if run != resume else []
    if not notes:
        return None
    return UsageError(f"--resume_from_checkpoint {records.folder}: its run trained on {processes_phrase(run)} and this "
                      f"resume runs on {resume}, with the same global batch, but {model.config.method}'s objective "
                      f"depends on how that batch is split over the processes: {'; '.join(notes)}. Resume it on "
                      f"{processes_phrase(run)} ({launch_on(run)}), or start a new run in another --output_dir.")


def launch_on(processes: int) -> str:
    """The launches that start ``processes`` processes."""
    return (f"torchrun --nproc_per_node {processes}, or accelerate launch --num_processes {processes}"
            if processes > 1 else "python, or accelerate launch --num_processes 1")


def process_change_warning(records: CheckpointRecords, run_arguments: Mapping[str, Any],
                           process_counts: tuple[int, int]) -> str | None:
    """A resume on another number of processes with the run's global batch (and an objective that does not depend on
    the split): it trains on the run's batches and objective, but every process's RNG state was its own, so the
    random draws go on from other states. ``None`` on the run's processes."""
    run, resume = process_counts
    if run == resume:
        return None
    batch = flat_arguments(run_arguments).get("per_device_train_batch_size")
    return (f"--resume_from_checkpoint {records.folder}: the run trained on {processes_phrase(run)} and resumes on "
            f"{resume} x {batch} sentences, the same global batch: the same batches and the same "
            f"objective, but the RNG states were each process's, so what is drawn from them (stream dropout masks, "
            f"the augmentations' draws) goes on from other states than the uninterrupted run's (row-seeded masks, "
            f"--dropout_masks row_seeded, are keyed by sentence and come out the same)")


def _command_line_value(value: Any) -> str:
    """``value`` as a flag takes it on the command line (``true``, ``3e-05``, a dict as JSON), quoted for a shell."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return shlex.quote(json.dumps(value) if isinstance(value, (dict, list)) else str(value))


def restoring_flags(records: CheckpointRecords, run_arguments: Mapping[str, Any],
                    differences: list[tuple[str, Any, Any]]) -> list[str]:
    """The flags that set each of ``differences`` back to the checkpoint's run's value, for the refusal to name:
    ``--dropout_masks stream`` (also where no flag of this command set it, but another implied it: the row-seeded
    masks of ``--cache_chunk_size``), ``--model_name_or_path P`` for the backbone, ``--train_file F`` for another
    corpus file; ``no --data_seed`` for a value the run left unset. None for a corpus edited in place."""
    recorded, flags = records.arguments or {}, []
    for name, theirs, _ in differences:
        if name in SETTINGS or name in TRAINING_ARGUMENTS or name in SELECTION_ARGUMENTS:
            flag, value = (flag_of(name) if name in SETTINGS else f"--{name}"), theirs
        elif name.startswith("backbone "):
            flag = "--model_name_or_path"
            value = recorded.get("model_name_or_path") or (records.config.get("encoder_config") or {}).get(
                "_name_or_path")
            if value is None:
                continue  # no path recorded: no flag to name (``no --model_name_or_path`` would be wrong)
        else:  # the corpus: its file, where the run's was another path than this command's
            flag, value = "--train_file", recorded.get("train_file")
            ours = flat_arguments(run_arguments).get("train_file")
            if not value or (ours and os.path.realpath(value) == os.path.realpath(ours)):
                continue  # none recorded, or the same path, its contents edited since: no flag brings them back
        phrase = f"no {flag}" if value is None else f"{flag} {_command_line_value(value)}"
        if phrase not in flags:
            flags.append(phrase)
    return flags


def length_change_warning(records: CheckpointRecords, run_arguments: Mapping[str, Any]) -> str | None:
    """What a resume that changes the run's length (:data:`LENGTH_ARGUMENTS`) does to its schedule, or ``None``."""
    changed = [difference for difference in argument_differences(records, run_arguments)
               if difference[0] in LENGTH_ARGUMENTS]
    if not changed:
        return None
    listed = ", ".join(f"--{name} {theirs} -> {ours}" for name, theirs, ours in changed)
    return (f"--resume_from_checkpoint {records.folder}: this resume changes the run's length ({listed}); the "
            f"learning rate goes on from the checkpoint's step as the new length's schedule has it there, so it "
            f"differs from both an uninterrupted run of the old length and one of the new")


def precision_change_warning(records: CheckpointRecords, run_arguments: Mapping[str, Any]) -> str | None:
    """When the resume trains in another precision than the checkpoint's run (``bf16`` / ``fp16`` / ``fp32``: a
    resume on another machine, whose default differs, or another ``--bf16``), or with TF32 matmuls turned on or off
    (``--tf32``, on by default on an Ampere+ GPU: both records a bool, ``None`` where no such GPU decided it, a CPU
    run's, which nothing compares): allowed, since moving a run is legitimate, but said, with the flags that go on as
    the run did. ``None`` when equal or not recorded."""
    theirs, ours = records.arguments or {}, flat_arguments(run_arguments)
    if "bf16" not in theirs or "bf16" not in ours:
        return None
    before = training_precision(bool(theirs["bf16"]), bool(theirs.get("fp16")))
    now = training_precision(bool(ours["bf16"]), bool(ours.get("fp16")))
    tf32_before, tf32_now = theirs.get("tf32"), ours.get("tf32")
    tf32_changed = isinstance(tf32_before, bool) and isinstance(tf32_now, bool) and tf32_before != tf32_now
    if before == now and not tf32_changed:
        return None
    flags, restore = [], []
    if before != now:
        flags.append("--bf16 / --fp16")
        restore.append("--fp16 true" if before == "fp16" else f"--bf16 {str(before == 'bf16').lower()}")
    if tf32_changed:
        flags.append("--tf32")
        restore.append(f"--tf32 {str(tf32_before).lower()}")
        before, now = (f"{precision} with TF32 matmuls {'on' if tf32 else 'off'}"
                       for precision, tf32 in ((before, tf32_before), (now, tf32_now)))
    return (f"--resume_from_checkpoint {records.folder}: its run trained in {before}, this resume trains in {now} "
            f"(this machine's default, or {' / '.join(flags)}), so its remaining steps compute differently from the "
            f"uninterrupted run's; {' '.join(restore)} goes on in {before}")


def fast_path_change_warning(records: CheckpointRecords, run_arguments: Mapping[str, Any]) -> str | None:
    """When the resume turns the fast path (``--torch_compile``: every batch padded to a fixed width) on or off
    against the checkpoint's run (another machine's default, or the flag) under stream dropout masks: stream masks,
    and DiffCSE's sampled replacements, are drawn over the batch's padded width, so the remaining steps draw other
    ones than the uninterrupted run's. Allowed, and said, with the flag that goes on as the run did. Row-seeded
    masks are keyed by coordinates: the fast path's steps are the eager ones within float rounding, nothing is said.
    ``None`` then, when equal, or where the checkpoint records no fast path (written before it did)."""
    theirs, ours = records.arguments or {}, flat_arguments(run_arguments)
    if "fast_path" not in theirs or "fast_path" not in ours or bool(theirs["fast_path"]) == bool(ours["fast_path"]):
        return None
    if not draws_stream_masks(run_arguments):
        return None
    before, now = ("on the fast path", "eagerly") if theirs["fast_path"] else ("eagerly", "on the fast path")
    return (f"--resume_from_checkpoint {records.folder}: its run trained {before}, this resume trains {now} (this "
            f"machine's default, or --torch_compile), and stream dropout masks (and DiffCSE's sampled tokens) are "
            f"drawn over each batch's padded width, which the fast path fixes, so its remaining steps draw other "
            f"masks than the uninterrupted run's; --torch_compile {str(bool(theirs['fast_path'])).lower()} goes on "
            f"{before}")


def draws_stream_masks(run_arguments: Mapping[str, Any]) -> bool:
    """Whether the run draws stream dropout masks (``--dropout_masks stream``), whose draws follow the shapes each
    backbone pass gets, unlike row-seeded masks, keyed by coordinates. A resume cannot change it (a method setting:
    :func:`resume_mismatch_error`), so this run's value is the checkpoint's run's."""
    return (run_arguments.get("settings") or {}).get("dropout_masks") == "stream"


def sentences_per_pass(arguments: Mapping[str, Any]) -> int | None:
    """The sentences each backbone pass of a training step encodes under a run's (flat) ``arguments``: its
    ``--cache_chunk_size`` up to its ``--per_device_train_batch_size`` (a chunk as large as the batch is the uncached
    step's one pass: ``trainers.cached_step``), the batch where it trains uncached; ``None`` where either is not
    recorded."""
    batch = arguments.get("per_device_train_batch_size")
    if "cache_chunk_size" not in arguments or not isinstance(batch, int):
        return None
    return min(arguments["cache_chunk_size"] or batch, batch)


def cached_step_change_warning(records: CheckpointRecords, run_arguments: Mapping[str, Any]) -> str | None:
    """When the resume encodes each batch in other chunks than the checkpoint's run (another ``--cache_chunk_size``,
    or one added or dropped: :func:`sentences_per_pass`) under stream dropout masks: each chunk of a cached step draws
    its own masks (``trainers.cached_step``), so the remaining steps draw other masks than the uninterrupted run's
    (measured through run_unsup.py on a tiny BERT: chunks of 3 resumed in chunks of 4, 1.1e-3 from the uninterrupted
    run's weights after 2 steps at lr 1e-3). Allowed, and said, with the flag that goes on as the run did. Row-seeded
    masks are keyed by each row's index in the batch: every chunk size trains the same steps, nothing is said.
    ``None`` then, when equal, or where the checkpoint records none (written before it did)."""
    theirs, ours = records.arguments or {}, flat_arguments(run_arguments)
    before, now = sentences_per_pass(theirs), sentences_per_pass(ours)
    if before is None or now is None or before == now or not draws_stream_masks(run_arguments):
        return None

    def chunks(per_pass: int, arguments: Mapping[str, Any]) -> str:
        if per_pass == arguments["per_device_train_batch_size"]:
            return "each batch in one pass"
        return f"each batch in chunks of {per_pass} sentences (--cache_chunk_size {arguments['cache_chunk_size']})"

    restore = (f"--cache_chunk_size {theirs['cache_chunk_size']}" if theirs["cache_chunk_size"] else
               "no --cache_chunk_size")
    return (f"--resume_from_checkpoint {records.folder}: its run encoded {chunks(before, theirs)}, this resume "
            f"encodes {chunks(now, ours)}, and with stream dropout masks each chunk of a cached step draws its own "
            f"masks, so its remaining steps draw other masks than the uninterrupted run's; {restore} goes on as it ran")


def attention_change_warning(records: CheckpointRecords, run_arguments: Mapping[str, Any]) -> str | None:
    """When the resume's encoder computes attention with another implementation than the checkpoint's run's
    (:func:`backbone_record`: another ``--attn_implementation``, or another machine's fallback): the kernels round
    differently, and on a GPU SDPA's fused kernels and flash attention draw the dropout of the attention
    probabilities themselves, where eager attention draws it through its dropout module (other masks; on a CPU,
    SDPA's dropout path draws eager's masks: measured, 2.4e-7 apart), so the remaining steps are not the
    uninterrupted run's. Allowed, and said, with the flag that goes on as the run did. ``None`` when equal, or where
    either is unrecorded (a checkpoint written before it was recorded)."""
    theirs, ours = (records.arguments or {}).get("attention"), flat_arguments(run_arguments).get("attention")
    if theirs is None or ours is None or theirs == ours:
        return None
    flag = (records.arguments or {}).get("attn_implementation")
    restore = (f"--attn_implementation {flag}" if flag == theirs else
               f"the --attn_implementation that gives {theirs}")
    return (f"--resume_from_checkpoint {records.folder}: its run's encoder computed attention with {theirs}, this "
            f"resume's with {ours} (--attn_implementation, or what this machine's backbone falls back to): the two "
            f"round differently and, on a GPU, draw the dropout of the attention probabilities differently (SDPA's "
            f"fused kernels draw their own), so its remaining steps differ from the uninterrupted run's; {restore} "
            f"goes on as it ran")


def corpus_change_warning(records: CheckpointRecords, run_arguments: Mapping[str, Any]) -> str | None:
    """When ``--train_file`` names another file than the checkpoint's run did (its ``run_arguments.json``; compared
    as real paths from here) and the checkpoint records no corpus digest to compare the contents with: if it is
    another corpus, the resumed epoch skips its first batches as if it were the old one. ``None`` when the digest
    was compared (:func:`corpus_differences`), the path is the same, or nothing is recorded."""
    if _recorded_corpus(records.arguments)[0] is not None:
        return None
    theirs = (records.arguments or {}).get("train_file")
    ours = flat_arguments(run_arguments).get("train_file")
    if not theirs or not ours or os.path.realpath(theirs) == os.path.realpath(ours):
        return None
    return (f"--resume_from_checkpoint {records.folder}: --train_file {ours} is not its run's ({theirs}); if it is "
            f"another corpus, the resumed epoch skips its first batches as if it were that one")


def lost_best_warning(records: CheckpointRecords) -> str | None:
    """When the best checkpoint the resumed run recorded is gone (the newest checkpoint moved or copied elsewhere,
    or the folder cleaned): the Trainer drops it with a log line and keeps its score, so the run ends on the final
    model, or on a later checkpoint only if it beats the lost one. ``None`` when it is there or none was recorded."""
    state = records.state
    best = state.get("best_model_checkpoint")
    if not best or Path(best).is_dir():
        return None
    return (f"--resume_from_checkpoint {records.folder}: its run's best checkpoint {best} (step "
            f"{state.get('best_global_step')}, {state.get('best_metric')}) is gone, so this run keeps a later "
            f"checkpoint only if it scores above {state.get('best_metric')} and otherwise exports its final model")


def resume_warnings(records: CheckpointRecords, run_arguments: Mapping[str, Any],
                    process_counts: tuple[int, int] = (1, 1)) -> list[str]:
    """Every warning a resume from ``records``'s checkpoint gets (its length, its corpus file, its precision, its
    attention, its fast path, its chunks, its processes, its lost best)."""
    return [warning for warning in (length_change_warning(records, run_arguments),
                                    corpus_change_warning(records, run_arguments),
                                    precision_change_warning(records, run_arguments),
                                    attention_change_warning(records, run_arguments),
                                    fast_path_change_warning(records, run_arguments),
                                    cached_step_change_warning(records, run_arguments),
                                    process_change_warning(records, run_arguments, process_counts),
                                    lost_best_warning(records))
            if warning is not None]


def finished_at(records: CheckpointRecords, run_arguments: Mapping[str, Any]) -> int | None:
    """The step of the checkpoint when this run ends there (its ``--max_steps``, or with the checkpoint's length
    unchanged the ``max_steps`` of its ``trainer_state.json``), else ``None``."""
    state = records.state
    step, last = state.get("global_step"), (flat_arguments(run_arguments).get("max_steps") or -1)
    if last <= 0 and not any(name in LENGTH_ARGUMENTS for name, _, _ in argument_differences(records, run_arguments)):
        last = state.get("max_steps")
    return step if isinstance(step, int) and isinstance(last, int) and 0 < last <= step else None


__all__ = ["BACKBONE_SECTION", "CORPUS_SECTION", "LAUNCH_SECTION", "LENGTH_ARGUMENTS", "RUN_ARGUMENTS", "SELECTION_ARGUMENTS", "TRAINING_ARGUMENTS",
           "CheckpointRecords", "attention_change_warning", "backbone_record", "cached_step_change_warning", "corpus_differences", "corpus_record",
           "draws_stream_masks", "finished_at", "flat_arguments", "launch_on", "launch_record", "process_change_warning",
           "process_split_error", "restoring_flags", "resume_mismatch_error", "resume_warnings",
           "write_run_arguments"]
