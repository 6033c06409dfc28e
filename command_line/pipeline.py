"""The steps every training script shares: logging, data, trainer, train/resume, final evaluation, export.

``run_unsup.py`` and ``run_diffcse.py`` differ only in their argument dataclasses and method classes; both read
top to bottom through :func:`train_and_export`.
"""
from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

import datasets
import transformers
from safetensors import SafetensorError
from transformers import AutoTokenizer

from data.corpus import CorpusStats
from data.length_buckets import bucketing_warning
from data.truncation import count_cut_sentences
from eval.backbone import repeated_modules
from models.base import ContrastiveModel
from models.dropout import RowDropout, applies_dropout, config_dropout_rates
from models.card_metadata import run_argument
from models.export import export_model
from trainers.checkpoints import incomplete_checkpoint_error, resumed_step, written_processes
from trainers.cl_trainer import CLTrainer
from trainers.resume_settings import (BACKBONE_SECTION, CORPUS_SECTION, LAUNCH_SECTION, CheckpointRecords,
                                      backbone_record, corpus_record, finished_at, launch_record,
                                      process_split_error, resume_mismatch_error, resume_warnings,
                                      write_run_arguments)
from trainers.errors import UsageError, UserError, reraise_as
from trainers.keyed_dropout import keyed_controllers
from trainers.methods import build_collator, build_model
from trainers.backbone_card import read_backbone_license
from trainers.precision import training_precision
from trainers.unused_parameters import choose_find_unused_parameters

from .backbone_checks import check_backbone, check_built_model, check_view_width, config_override_values
from .summary import RunSummary, describe_step, format_summary

logger = logging.getLogger("cse_repro")


def setup_logging(training_args) -> None:
    level = training_args.get_process_log_level()
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S",
                        handlers=[logging.StreamHandler(sys.stdout)], level=level)
    for library in (datasets.utils.logging, transformers.utils.logging):
        library.set_verbosity(level)


def load_tokenizer(model_args):
    """The backbone's tokenizer, padding on the right: the training collators pad there (``data.collators``), the
    evaluation too (``eval.encoder.SentenceEncoder``), and the exports save it, so a sentence-transformers folder pads
    as the run trained (a tokenizer that pads on the left, XLNet's by default, would give its ``cls`` pooling a
    [PAD] state)."""
    tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path, cache_dir=model_args.cache_dir)
    if getattr(tokenizer, "padding_side", "right") != "right":
        logger.info("the tokenizer of %s pads on the %s: this run pads on the right (training, evaluation and the "
                    "exported tokenizer)", model_args.model_name_or_path, tokenizer.padding_side)
        tokenizer.padding_side = "right"
    return tokenizer


def load_train_dataset(model: ContrastiveModel, data_args, stats: CorpusStats | None = None) -> datasets.Dataset:
    """The corpus the model's views read: one sentence a line, the supervised CSV, or an ordered corpus's pairs of
    consecutive sentences (:attr:`ContrastiveModel.reads_ordered_corpus`)."""
    from data.corpus import CorpusError, load_next_sentence_corpus, load_sup_corpus, load_unsup_corpus

    loader = (load_next_sentence_corpus if model.reads_ordered_corpus else
              load_unsup_corpus if set(model.view_columns) == {"text"} else load_sup_corpus)
    dataset = loader(data_args.train_file, stats=stats)
    if model.read_views_from(dataset.column_names) and model.config.hard_negative_weight:
        raise UsageError(f"--hard_negative_weight {model.config.hard_negative_weight} weights each anchor's hard "
                         f"negative, and {data_args.train_file} has no hard_neg column: add one (a header "
                         "sent0,sent1,hard_neg), or drop the flag to train on its pairs")
    missing = set(model.view_columns) - set(dataset.column_names)
    if missing:
        raise CorpusError(f"{data_args.train_file}: method {model.config.method!r} needs columns "
                          f"{sorted(set(model.view_columns))}, the file has {dataset.column_names}")
    if data_args.max_train_samples is not None:
        dataset = dataset.select(range(min(data_args.max_train_samples, len(dataset))))
    logger.info("training corpus: %d rows from %s", len(dataset), data_args.train_file)
    return dataset


def check_contrast_batch(model: ContrastiveModel, training_args) -> None:
    """Refuse a contrast batch of one sentence without other negatives: its loss and gradient are exactly 0."""
    processes = training_args.world_size if model.config.gather_negatives else 1
    batch = training_args.per_device_train_batch_size * processes
    other_negatives = len(model.view_columns) > 2 or getattr(model, "queue", None) is not None
    if batch < 2 and not other_negatives:
        raise UsageError(
            f"--per_device_train_batch_size {training_args.per_device_train_batch_size} on {processes} process(es) "
            f"contrasts each sentence with no other sentence (no in-batch negatives), so the loss and its gradient "
            f"are 0 and nothing is learned. The minimum is 2 sentences per contrast batch (per-device batch x "
            f"processes); the papers use 64.")


def method_warnings(model: ContrastiveModel) -> list[str]:
    """Settings that quietly turn a method into one of its ablations: logged loudly and repeated in the summary."""
    config = model.config
    warnings = []
    if config.method == "esimcse" and config.momentum_contrast and config.queue_size == 0:
        warnings.append("--queue_size 0 turns ESimCSE's momentum contrast off (no queue, so no momentum encoder "
                        "either): this run is the 'repetition only' ablation (ESimCSE Table 4), not ESimCSE. Say so "
                        "with --momentum_contrast false, or use the paper's --queue_size 160.")
    if (warning := no_dropout_warning(model)) is not None:
        warnings.append(warning)
    if (warning := repeated_keyed_masks_warning(model)) is not None:
        warnings.append(warning)
    if (warning := model.backbone_warning()) is not None:
        warnings.append(warning)
    if "hard_neg" in model.optional_view_columns and "hard_neg" not in model.view_columns:
        warnings.append("the corpus has no hard_neg column, so supervised SimCSE trains on its (sent0, sent1) pairs "
                        "without hard negatives: Eq. 1 with sent1 as the positive, the paper's Table 4 rows without "
                        "'+ hard neg' (the official code's two-column CSV), not Eq. 5. For Eq. 5 give the file a "
                        "hard_neg column (header sent0,sent1,hard_neg).")
    return warnings


def no_dropout_warning(model: ContrastiveModel) -> str | None:
    """An unsupervised method on a backbone that applies no dropout (a ModernBERT's config sets every rate to 0): its
    positive pair, two dropout-noised encodings of each sentence, is one encoding twice (beside ESimCSE's repetition
    or PromptBERT's second template): SimCSE Table 3's 'no dropout' row, 'a dramatic performance degradation'
    (Sec. 3). Names the ``--config_overrides`` that gives the papers' p = 0.1. ``None`` where dropout applies (a
    dropout module with a rate above 0, S-SimCSE's drawn rates, or a rate above 0 in the backbone's config, which an
    architecture may apply without a module), and for supervised SimCSE (its positives are NLI pairs)."""
    config = model.config
    rates = config_dropout_rates(model.encoder.config)  # a head's rates aside
    if config.method == "sup_simcse" or any(rates.values()) or applies_dropout(
            model.encoder, sampled_rates=config.dropout_dist != "none"):  # a rate > 0 in its config or its modules
        return None
    zero = list(rates)
    views = {"esimcse": " (they differ only by the repetition)", "promptbert": " (they differ only by the template)"}
    rates_said = (f"{', '.join(zero)} {'is' if len(zero) == 1 else 'are'} 0 in its config" if zero else
                  "its config has no dropout rate and it has no dropout module")
    return (f"the backbone applies no dropout ({rates_said}), and {config.method}'s positive pair is two "
            f"dropout-noised encodings of each sentence: here the two are the same encoding"
            f"{views.get(config.method, '')}, SimCSE Table 3's 'no dropout' row (a dramatic degradation, Sec. 3)."
            + (f" For the papers' p = 0.1 add --config_overrides {','.join(f'{key}=0.1' for key in zero)}."
               if zero else ""))


def repeated_keyed_masks_warning(model: ContrastiveModel) -> str | None:
    """Row-seeded masks on a backbone that calls a dropout module more than once in a pass (ALBERT applies one layer
    at every depth; X-MOD's layer output calls its dropout twice: :func:`eval.backbone.repeated_modules`): a mask is
    keyed by its module, row and element, so every application draws the same masks for a sentence, where stream
    masks draw new ones at each call. ``None`` elsewhere."""
    for name, backbone in model.trainable_backbones().items():
        if keyed_controllers(backbone) and (repeated := repeated_modules(backbone, RowDropout)):
            module, calls = next(iter(repeated.items()))
            return (f"{type(backbone).__name__} (the {name}) calls {len(repeated)} of its dropout modules "
                    f"{max(repeated.values())} times in a pass ({module}: {calls} calls; ALBERT applies one layer "
                    f"at every depth, X-MOD one output dropout before and after its language adapter), and row-seeded "
                    f"masks (--dropout_masks row_seeded, --cache_chunk_size's default) "
                    f"key a mask by its module, row and element: each call draws the same masks for a sentence, "
                    f"where the papers' stream masks draw new ones. --dropout_masks stream draws them anew, with "
                    f"--cache_chunk_size too (each chunk's masks replayed from its RNG state).")
    return None


def accumulation_warning(model: ContrastiveModel, training_args) -> str | None:
    """``--gradient_accumulation_steps`` above 1 averages the gradients of several micro-batches, but each
    micro-batch's loss contrasts its own sentences only: the in-batch negatives are a micro-batch's, not the step's
    (a researcher reaching batch 512 this way trains batch 64's objective). Said, with the flags that train the step's
    objective in a micro-batch's memory (the cached step); ``None`` without accumulation."""
    steps = training_args.gradient_accumulation_steps
    if steps <= 1:
        return None
    batch, gather = training_args.per_device_train_batch_size, model.config.gather_negatives
    contrast = batch * (training_args.world_size if gather else 1)
    return (f"--gradient_accumulation_steps {steps}: each step averages the gradients of {steps} micro-batches, and "
            f"each micro-batch's loss contrasts only its own {contrast} corpus rows "
            f"({'per-device batch x processes' if gather else 'the per-device batch: --gather_negatives false'}), so "
            f"the in-batch negatives are those of batch {contrast}, not of batch {contrast * steps}. For the loss of "
            f"batch {contrast * steps} in a micro-batch's memory use --per_device_train_batch_size {batch * steps} "
            f"--cache_chunk_size {batch} (docs/cached_training.md).")


def queue_warning(model: ContrastiveModel, training_args) -> str | None:
    """ESimCSE's queue shorter than the momentum keys one step enqueues (the contrast batch of several processes
    with the gathered queue, or a per-device batch above it): it then holds only the last ``queue_size`` keys of the
    previous step, none older, where the paper's holds 2.5 batches (Table 10: 1-3). ``None`` otherwise."""
    queue = getattr(model, "queue", None)
    if queue is None:
        return None
    processes = training_args.world_size if model.config.gather_queue else 1
    enqueued = training_args.per_device_train_batch_size * processes
    if queue.size >= enqueued:
        return None
    how = f"{processes} processes x {training_args.per_device_train_batch_size}, gathered" if processes > 1 else (
        "--per_device_train_batch_size")
    return (f"--queue_size {queue.size} is less than the {enqueued} momentum keys each step enqueues ({how}): the "
            f"queue holds only the last {queue.size} keys of the previous step, none older, where ESimCSE's holds "
            f"2.5 batches (Table 10 tries 1-3): for 2.5 x {enqueued} pass --queue_size {int(2.5 * enqueued)}")


def best_metric_name(training_args) -> str:
    """The dev metric that picks the best checkpoint (``--metric_for_best_model``, without the Trainer's ``eval_``)."""
    return (training_args.metric_for_best_model or "stsb_spearman").removeprefix("eval_")


def completed_last_batch_warning(rows: int, training_args) -> str | None:
    """Under several processes, what accelerate adds to each epoch's last step: its ``even_batches`` (the default)
    completes a last round that the corpus does not fill with sentences from the epoch's start, so every process
    steps alike; one process would train that step on the leftover rows alone. ``None`` when nothing is added (one
    process, ``--dataloader_drop_last``, or rows that fill every round) or the run ends before the epoch's last
    round (``--max_steps`` x ``--gradient_accumulation_steps`` rounds)."""
    processes, batch = training_args.world_size, training_args.per_device_train_batch_size
    if processes < 2 or training_args.dataloader_drop_last or rows < 1:
        return None
    batches = -(-rows // batch)  # each process's batches, dealt in turn; the last round completed
    rounds = -(-batches // processes)
    added = rounds * processes * batch - rows
    max_steps = getattr(training_args, "max_steps", -1)
    if added == 0 or 0 < max_steps * getattr(training_args, "gradient_accumulation_steps", 1) < rounds:
        return None
    global_batch = processes * batch
    return (f"{processes} processes x {batch}: the {rows:,} training rows leave {global_batch - added} for each "
            f"epoch's last step, which accelerate completes with {added} sentences from the epoch's start (its "
            f"even_batches), so that step trains them twice where one process with batch {global_batch} trains "
            f"the {global_batch - added} alone."
            + (f" For exactly one process's objective use a multiple of {global_batch} rows (--max_train_samples "
               f"{rows - rows % global_batch}) or --dataloader_drop_last true." if rows >= global_batch else ""))


def build_and_train(method: str, settings: dict[str, Any], model_args, data_args, method_args, training_args,
                    argv: Sequence[str] | None, generator: str | None = None) -> dict[str, float]:
    """What both training scripts run once their arguments have passed the preflight checks: the tokenizer, the
    backbone's checks (and those of DiffCSE's ``generator``), the method's model around the backbone (a load error: one
    line naming the folders read), the built model's checks, then :func:`train_and_export`."""
    read = f"--model_name_or_path {model_args.model_name_or_path}" + (
        f" or --generator_name {generator}" if generator else "")
    with reraise_as(UsageError, ValueError), reraise_as(UserError, OSError, SafetensorError,
                                                       prefix=f"could not load {read}: "):
        tokenizer = load_tokenizer(model_args)
        check_backbone(model_args, data_args.max_seq_length, method, settings, tokenizer, generator)
        model = build_model(method, model_args.model_name_or_path,
                            attn_implementation=model_args.attn_implementation, cache_dir=model_args.cache_dir,
                            tokenizer=tokenizer, cache_chunk_size=training_args.cache_chunk_size,
                            config_overrides=config_override_values(model_args), **settings)
    check_built_model(model, tokenizer, training_args, model_args.model_name_or_path)
    return train_and_export(model, tokenizer, training_args, data_args,
                            describe_arguments(model_args, data_args, method_args, training_args, argv=argv))


def train_and_export(model: ContrastiveModel, tokenizer, training_args, data_args,
                     run_arguments: dict[str, Any], train_dataset: datasets.Dataset | None = None) -> dict[str, float]:
    """Train (or resume), reload the best checkpoint, evaluate it on STS dev, export it, print a summary. Returns
    the final metrics. ``train_dataset``: a corpus the script built itself (DiffCSE's ordered next-sentence pairs);
    default: the file."""
    check_contrast_batch(model, training_args)
    choose_find_unused_parameters(model, training_args, tokenizer)  # DDP's search for unused parameters: where needed
    run_arguments = {**run_arguments, "settings": model.config.settings()}  # what the preset and flags resolved to
    corpus = CorpusStats()
    if train_dataset is None:
        train_dataset = load_train_dataset(model, data_args, corpus)
    run_arguments[CORPUS_SECTION] = corpus_record(data_args.train_file, len(train_dataset))
    run_arguments[BACKBONE_SECTION] = backbone_record(model.encoder)
    resume = training_args.resume_from_checkpoint
    records = CheckpointRecords.read(resume) if resume else None
    processes = training_args.world_size
    counts = ((written_processes(resume) or processes) if resume else processes, processes)  # the run's, this one's
    run_arguments[LAUNCH_SECTION] = launch_record(processes, training_args.per_device_train_batch_size,
                                                  training_args.gradient_accumulation_steps, counts[0])
    if records is not None and (error := resume_mismatch_error(records, model, run_arguments, counts)
                                or process_split_error(records, model, counts)
                                or incomplete_checkpoint_error(resume, processes, model)):
        raise error  # the files were checked before loading; the settings and the model's tensors now
    run_warnings = (completed_last_batch_warning(len(train_dataset), training_args),
                    accumulation_warning(model, training_args), queue_warning(model, training_args),
                    bucketing_warning(data_args.train_file, training_args.train_sampling_strategy,
                                      training_args.per_device_train_batch_size * training_args.world_size))
    warnings = (list(getattr(training_args, "command_line_warnings", ())) + method_warnings(model)
                + [warning for warning in run_warnings if warning]
                + (resume_warnings(records, run_arguments, counts) if records is not None else []))
    for warning in warnings if training_args.should_log else ():  # the run's, said once (not once per process)
        logger.warning(warning)
    warnings += corpus.notes  # what the corpus file holds that changes its rows (logged as it loaded)
    collator = build_collator(model, tokenizer, data_args.max_seq_length)
    check_view_width(str(run_argument(run_arguments, "model_name_or_path")), model.encoder.config, collator,
                     data_args.max_seq_length)
    cut = count_cut_sentences(collator, train_dataset)  # the tokens past --max_seq_length, counted, not silent
    if cut is not None and training_args.should_log:
        logger.info("training corpus: %s", cut.describe())
    trainer = CLTrainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        data_collator=collator,
        processing_class=tokenizer,
        senteval_dir=data_args.senteval_dir,
    )
    trainer.run_arguments = run_arguments  # into every checkpoint, for a resume to compare with its own
    first_step = resumed_step(resume) if resume else 0
    metrics: dict[str, Any] = {}
    if training_args.eval_strategy != "no" and training_args.evaluate_at_start:  # the pretrained model's STS-B dev
        metrics.update(records.before_scores() if records is not None else trainer.evaluate(metric_key_prefix="before"))
    if records is not None and finished_at(records, run_arguments) is not None:  # train() steps past max_steps
        if training_args.should_log:
            logger.warning("--resume_from_checkpoint %s holds the run's last step (%d): nothing is left to train, "
                           "so it is evaluated and exported as the run would have been", resume, first_step)
        trainer.load_finished_run(resume)
    else:
        metrics.update(trainer.train(resume_from_checkpoint=resume).metrics)
    compile_failure = trainer.compiled_backbone.failure if trainer.compiled_backbone is not None else None
    if compile_failure:
        warnings.append(f"the fast path's compiled step failed ({compile_failure}): the run trained with the eager "
                        "step from there on")
    step_graph = trainer.step_graph
    if step_graph is not None:
        metrics["step_graph_replays"] = step_graph.replays
        if step_graph.failure:
            warnings.append(f"the step graph was not used, because {step_graph.failure}: the run trained with the "
                            "fast path's compiled regions from there on")
    metrics.update(cut.metrics() if cut is not None else {})
    metrics["train_precision"] = training_precision(training_args.bf16, training_args.fp16)
    metrics["evaluation_seconds"] = round(trainer.evaluation_seconds, 2)  # of train_runtime (not training throughput)
    metrics.update(peak_accelerator_memory())
    if training_args.eval_strategy != "no":
        metrics.update(trainer.evaluate())
        metrics["eval_dtype"] = training_args.eval_dtype  # the precision of every score above
    trainer.check_finite(weights=True, before="the export")  # the model about to be exported (best or final)
    if trainer.is_world_process_zero():
        if trainer.state.best_model_checkpoint:
            metrics["best_model_checkpoint"] = trainer.state.best_model_checkpoint
            metrics[f"best_{best_metric_name(training_args)}"] = trainer.state.best_metric
        trainer.save_metrics("all", metrics)
        export_dir = training_args.export_dir or os.path.join(training_args.output_dir, "export")
        exported = export_model(trainer.model, tokenizer, export_dir, scores=metrics, training=run_arguments,
                                log_history=trainer.state.log_history,
                                backbone_license=read_backbone_license(str(run_argument(run_arguments,
                                                                                        "model_name_or_path"))))
        write_run_arguments(training_args.output_dir, run_arguments)
        print(format_summary(RunSummary(
            method=model.config.method, metrics=metrics, output_dir=training_args.output_dir, export=exported,
            corpus=corpus, train_rows=len(train_dataset), steps=trainer.state.global_step - first_step,
            resumed_at=first_step,
            evaluation_seconds=trainer.evaluation_seconds,
            wall_seconds=process_wall_time(), selected_best=bool(training_args.load_best_model_at_end),
            tensorboard_dir=tensorboard_dir(training_args), warnings=warnings,
            step=describe_step(model.config, training_args, compile_failure,
                               step_graph.failure if step_graph is not None else None),
            precision=metrics["train_precision"], dev_embedding=model.dev_embedding_note(),
            truncation=cut.describe() if cut is not None else None,
            best_metric=best_metric_name(training_args))),
            flush=True)
    return metrics


def peak_accelerator_memory() -> dict[str, float]:
    """``peak_gpu_memory_mib``: the most GPU memory this process's tensors held (``torch.cuda.max_memory_allocated``),
    on a CUDA run; nothing elsewhere."""
    import torch

    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return {}
    return {"peak_gpu_memory_mib": round(torch.cuda.max_memory_allocated() / 2**20, 1)}


def tensorboard_dir(training_args) -> str | None:
    """Where the Trainer's TensorBoard callback writes (``None`` when TensorBoard is not among ``report_to``)."""
    if "tensorboard" not in (training_args.report_to or []):
        return None
    return os.environ.get("TENSORBOARD_LOGGING_DIR") or os.path.join(training_args.output_dir, "runs")


def process_wall_time() -> float:
    """Seconds since this process started (imports and model loading included)."""
    import psutil

    return time.time() - psutil.Process().create_time()


def describe_arguments(*argument_objects: Any, argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Every parsed argument, for the model card and ``run_arguments.json`` (enough to compare runs), and under
    ``argv`` the command line exactly as the script received it (``argv``, else ``sys.argv[1:]``).
    :func:`train_and_export` adds ``settings`` (every method setting as resolved), ``corpus`` (its digest) and
    ``launch`` (the processes and the sentences of a step). ``python -m eval --training_run`` copies ``argv``,
    ``settings``, ``launch`` and the ``--fidelity`` preset into a results JSON (:mod:`eval.provenance`)."""
    described: dict[str, Any] = {"argv": list(sys.argv[1:] if argv is None else argv)}
    for obj in argument_objects:
        values = obj.to_dict() if hasattr(obj, "to_dict") else asdict(obj)
        described[type(obj).__name__] = {k: v for k, v in values.items() if not k.startswith("_")}
    return described
