"""The end-of-run summary a training script prints at any log level: the numbers a user looks for first.

STS-B (and SICK-R) dev before and after training, the best checkpoint, where the export went, how much of the
corpus was used (how many lines were skipped, how many sentences --max_seq_length cuts), wall time and throughput,
and the warnings worth repeating.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from data.corpus import CorpusStats
from eval.sts import nan_spearman_note
from trainers.fast_path import backbone_compile_refusal, typed_checkpointing_flag


@dataclass
class RunSummary:
    """What :func:`format_summary` reports; ``metrics`` are ``train_and_export``'s (``before_*``, ``eval_*``,
    ``train_*``, ``best_*``)."""

    method: str
    metrics: Mapping[str, Any]
    output_dir: str
    export: Mapping[str, Any] | None = None
    corpus: CorpusStats | None = None
    train_rows: int | None = None
    #: The optimizer steps this process ran (after a resume: from ``resumed_at`` on).
    steps: int | None = None
    resumed_at: int = 0
    evaluation_seconds: float = 0.0  # of train_runtime, spent evaluating
    wall_seconds: float = 0.0
    selected_best: bool = True
    tensorboard_dir: str | None = None
    warnings: list[str] = field(default_factory=list)
    #: How the steps ran when it is not the plain step: a cached step and / or row-seeded dropout masks.
    step: str | None = None
    #: Training precision (``bf16`` / ``fp16`` / ``fp32``; trainers/precision.py) and the evaluation's.
    precision: str | None = None
    #: How the dev scores' embedding differs from the export's (``ContrastiveModel.dev_embedding_note``).
    dev_embedding: str | None = None
    #: The dev metric that picked the best checkpoint (``--metric_for_best_model``; its value: ``best_<name>``).
    best_metric: str = "stsb_spearman"
    #: How many training sentences ``--max_seq_length`` cuts (``data.truncation.SentenceCut.describe``).
    truncation: str | None = None


#: How the summary names a dev metric (``eval.sts.DEV_METRICS``; a transfer task's name is its dev accuracy).
METRIC_LABELS = {"stsb_spearman": "STS-B dev", "sickr_spearman": "SICK-R dev", "avg_sts": "STS-B and SICK-R dev mean",
                 "transfer_avg": "transfer dev mean"}


#: Said under a nan dev score: Spearman's correlation of a constant (or non-finite) list of similarities.
NAN_SCORE_NOTE = f"nan: {nan_spearman_note('dev pair')} A nan score is never the best checkpoint's."


def duration(seconds: float) -> str:
    """``42.0 s`` / ``6 min 43 s`` / ``2 h 05 min``."""
    seconds = float(seconds)
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def _score_line(name: str, key: str, metrics: Mapping[str, Any], after_label: str) -> str | None:
    before, after = metrics.get(f"before_{key}"), metrics.get(f"eval_{key}")
    if before is None and after is None:
        return None
    parts = [f"before {before:.2f}" if before is not None else None,
             f"after {after:.2f} ({after_label})" if after is not None else None]
    return f"{name} dev Spearman x100: " + " -> ".join(p for p in parts if p)


def throughput(metrics: Mapping[str, Any], evaluation_seconds: float) -> str:
    """``, 123.4 sentences/s`` over the training steps alone (the Trainer's own rate counts evaluation time too)."""
    runtime, rate = metrics.get("train_runtime"), metrics.get("train_samples_per_second")
    if runtime is None or rate is None:
        return ""
    training = runtime - evaluation_seconds
    return f", {rate * runtime / training:,.1f} sentences/s" if training > 0 else ""


def format_summary(summary: RunSummary) -> str:
    """A short block of lines (no logging prefix), ready to print."""
    m = summary.metrics
    after = "best checkpoint" if summary.selected_best and m.get("best_model_checkpoint") else "final model"
    lines = [f"=== {summary.method}: run summary ==="]
    lines += [line for line in (_score_line("STS-B", "stsb_spearman", m, after),
                                _score_line("SICK-R", "sickr_spearman", m, after)) if line]
    if any(isinstance(m.get(f"{when}_{key}"), float) and math.isnan(m[f"{when}_{key}"])
           for when in ("before", "eval") for key in ("stsb_spearman", "sickr_spearman")):
        lines.append(NAN_SCORE_NOTE)
    if m.get("best_model_checkpoint"):
        label = METRIC_LABELS.get(summary.best_metric, f"{summary.best_metric} dev accuracy")
        best = m.get(f"best_{summary.best_metric}")
        lines.append(f"best checkpoint: {m['best_model_checkpoint']}"
                     + (f" ({label} {best:.2f})" if isinstance(best, (int, float)) else ""))
    elif "eval_stsb_spearman" not in m:
        lines.append("no STS-B dev evaluation (--eval_strategy no): the export is the final model")
    if summary.dev_embedding and ("eval_stsb_spearman" in m or "before_stsb_spearman" in m):
        lines.append(f"dev evaluation: {summary.dev_embedding}")
    if summary.corpus is not None and summary.corpus.file:
        c = summary.corpus
        used = f"{summary.train_rows:,} used of " if summary.train_rows is not None and summary.train_rows != (
            c.rows - c.skipped) else ""
        lines.append(f"corpus: {used}{c.rows - c.skipped:,} rows of {c.file} (skipped {c.skipped:,} {c.skipped_what})")
    elif summary.train_rows is not None:
        lines.append(f"corpus: {summary.train_rows:,} training rows")
    if summary.truncation:
        lines.append(f"truncation: {summary.truncation}")
    steps, runtime = summary.steps, m.get("train_runtime")
    if runtime is not None:
        resumed = f" (resumed at step {summary.resumed_at})" if summary.resumed_at else ""
        counted = f" for {steps} step{'' if steps == 1 else 's'}{resumed}" if steps is not None else ""
        lines.append(f"training: {duration(runtime)}" + counted
                     + (f" ({duration(summary.evaluation_seconds)} of it evaluating)" if summary.evaluation_seconds
                        else "") + throughput(m, summary.evaluation_seconds))
    elif summary.resumed_at:
        lines.append(f"training: no step (resumed at the run's last step, {summary.resumed_at})")
    if summary.step:
        lines.append(f"step: {summary.step}")
    if summary.precision:
        lines.append(f"precision: {summary.precision} training, {m.get('eval_dtype', 'fp32')} evaluation"
                     + (" (--bf16 false trains in fp32)" if summary.precision == "bf16" else ""))
    if summary.export:
        hf, st = summary.export.get("hf"), summary.export.get("sentence-transformers")
        lines.append(f"export: {hf} (AutoModel)" + (f" and {st} (SentenceTransformer)" if st else ""))
    if summary.tensorboard_dir:
        lines.append(f"training curves: tensorboard --logdir {summary.tensorboard_dir}")
    lines.append(f"wall time: {duration(summary.wall_seconds)}; everything else in {summary.output_dir}")
    lines += [f"warning: {w}" for w in summary.warnings]
    return "\n".join(lines)


def describe_step(config: Any, training_args: Any, compile_failure: str | None = None,
                  step_graph_failure: str | None = None) -> str | None:
    """The summary's ``step:`` line from the model's config and the training arguments (the processes and their
    contrast batch; why the fast path's compiled step, or the step graph's capture, was given up, if it was), or
    ``None`` for the plain step (one process, uncached, stream masks, eager)."""
    dropout_masks, cache_chunk_size = config.dropout_masks, getattr(training_args, "cache_chunk_size", None)
    parts = []
    processes = getattr(training_args, "world_size", 1)
    if processes > 1:
        batch = training_args.per_device_train_batch_size
        sentences = f"{processes} processes x {batch} sentences"
        parts.append(f"{sentences}, negatives gathered: contrast batch {processes * batch}" if config.gather_negatives
                     else f"{sentences}, each contrasting its own (--gather_negatives false)")
    if cache_chunk_size:
        parts.append(f"cached, {cache_chunk_size} sentences per backbone pass (--cache_chunk_size)")
    if dropout_masks != "stream":
        parts.append(f"{dropout_masks} dropout masks (--dropout_masks; docs/cached_training.md)")
    if getattr(training_args, "fast_path", False):
        refusal = f"its compiled step failed: {compile_failure}" if compile_failure else backbone_compile_refusal(
            typed_checkpointing_flag(training_args), bool(cache_chunk_size),
            keyed_masks=dropout_masks == "row_seeded")
        layers = getattr(training_args, "torch_compile_regions", None) == "layers"
        compiled = (f"the backbone eager ({refusal})" if refusal else
                    "compiled backbone layers, one at a time (--torch_compile_regions layers), and loss" if layers else
                    "compiled backbones and loss")
        parts.append(f"the fast path: fixed shapes, {compiled} (--torch_compile false: the eager step)")
    if getattr(training_args, "step_graph", False):
        parts.append(f"the step graph's capture failed ({step_graph_failure})" if step_graph_failure else
                     "the whole step replayed as one CUDA graph (--step_graph)")
    return "; ".join(parts) or None


__all__ = ["RunSummary", "describe_step", "duration", "format_summary", "throughput"]
