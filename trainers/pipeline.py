"""The steps every training script shares: logging, data, trainer, train/resume, final evaluation, export.

``run_unsup.py`` and ``run_diffcse.py`` differ only in their argument dataclasses and method classes; both read
top to bottom through :func:`train_and_export`.
"""
from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import datasets
import transformers
from transformers import AutoTokenizer

from models.base import ContrastiveModel
from models.export import export_model

from .cl_trainer import CLTrainer

logger = logging.getLogger("cse_repro")

SENTEVAL_HELP = ("Get it with `bash data/download_senteval.sh` (needs internet) and point "
                 "`--senteval_dir`/`SENTEVAL_DIR` at its `downstream/` folder, or pass `--eval_strategy no` to train "
                 "without model selection.")


def setup_logging(training_args) -> None:
    level = training_args.get_process_log_level()
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S",
                        handlers=[logging.StreamHandler(sys.stdout)], level=level)
    for library in (datasets.utils.logging, transformers.utils.logging):
        library.set_verbosity(level)


def senteval_available(senteval_dir: str | None) -> bool:
    return bool(senteval_dir) and (Path(senteval_dir) / "STS" / "STSBenchmark").is_dir()


def check_evaluation_data(training_args, senteval_dir: str | None) -> None:
    """Model selection needs STS-B dev: refuse to train 'with evaluation' when it is absent."""
    if training_args.eval_strategy != "no" and not senteval_available(senteval_dir):
        raise SystemExit(f"SentEval data not found at {senteval_dir!r} (needed for STS-B dev evaluation). "
                         + SENTEVAL_HELP)


def load_tokenizer(model_args):
    return AutoTokenizer.from_pretrained(model_args.model_name_or_path, cache_dir=model_args.cache_dir)


def load_train_dataset(model: ContrastiveModel, data_args) -> datasets.Dataset:
    """The corpus the model's views read: one sentence a line, or the supervised CSV."""
    from data.corpus import load_sup_corpus, load_unsup_corpus

    loader = load_unsup_corpus if set(model.view_columns) == {"text"} else load_sup_corpus
    dataset = loader(data_args.train_file)
    missing = set(model.view_columns) - set(dataset.column_names)
    if missing:
        raise SystemExit(f"{data_args.train_file}: method {model.config.method!r} needs columns "
                         f"{sorted(set(model.view_columns))}, the file has {dataset.column_names}")
    if data_args.max_train_samples is not None:
        dataset = dataset.select(range(min(data_args.max_train_samples, len(dataset))))
    logger.info("training corpus: %d rows from %s", len(dataset), data_args.train_file)
    return dataset


def train_and_export(model: ContrastiveModel, tokenizer, training_args, data_args,
                     run_arguments: dict[str, Any], train_dataset: datasets.Dataset | None = None) -> dict[str, float]:
    """Train (or resume), reload the best checkpoint, evaluate it on STS dev, export it. Returns final metrics.
    ``train_dataset``: a corpus the script built itself (DiffCSE's ordered next-sentence pairs); default: the file."""
    if train_dataset is None:
        train_dataset = load_train_dataset(model, data_args)
    trainer = CLTrainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        data_collator=model.build_collator(tokenizer, data_args.max_seq_length),
        processing_class=tokenizer,
        senteval_dir=data_args.senteval_dir,
    )
    metrics: dict[str, Any] = {}
    if training_args.eval_strategy != "no" and training_args.evaluate_at_start and not training_args.resume_from_checkpoint:
        metrics.update(trainer.evaluate(metric_key_prefix="before"))  # the pretrained model's STS-B dev
    train_result = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    metrics.update(train_result.metrics)
    if training_args.eval_strategy != "no":
        metrics.update(trainer.evaluate())
        metrics["eval_dtype"] = training_args.eval_dtype  # the precision of every score above
    if trainer.is_world_process_zero():
        if trainer.state.best_model_checkpoint:
            metrics["best_model_checkpoint"] = trainer.state.best_model_checkpoint
            metrics["best_stsb_spearman"] = trainer.state.best_metric
        trainer.save_metrics("all", metrics)
        export_dir = training_args.export_dir or os.path.join(training_args.output_dir, "export")
        scores = {k: v for k, v in metrics.items() if k.startswith("eval_")}
        export_model(trainer.model, tokenizer, export_dir, scores=scores, training=run_arguments)
        (Path(training_args.output_dir) / "run_arguments.json").write_text(
            json.dumps(run_arguments, indent=2, default=str))
    return metrics


def describe_arguments(*argument_objects: Any) -> dict[str, Any]:
    """Every parsed argument, for the model card and ``run_arguments.json`` (enough to compare runs)."""
    described: dict[str, Any] = {}
    for obj in argument_objects:
        values = obj.to_dict() if hasattr(obj, "to_dict") else asdict(obj)
        described[type(obj).__name__] = {k: v for k, v in values.items() if not k.startswith("_")}
    return described
