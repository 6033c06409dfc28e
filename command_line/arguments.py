"""Flat argument dataclasses for ``run_unsup.py`` / ``run_diffcse.py``, parsed by ``HfArgumentParser``.

Defaults are the SimCSE paper's unsupervised BERT-base recipe (Gao et al., 2021, Sec. 3 and Appendix A;
REFERENCE.md "Training recipes"): bert-base-uncased, lr 3e-5, batch 64, max length 32, 1 epoch, STS-B dev every
125 steps, tau 0.05, ``cls`` pooler with the MLP in training only, seed 42, no warmup, linear decay.

The method flags are not written here: :func:`setting_fields` generates them from the settings' one declaration
(``models/config.py``: default, help, choices, range, the papers' flag names such as ``--temp``). They default to
``None`` = "not given": the method's own paper values apply (``trainers.methods.resolve_settings``), so ``--method
esimcse`` alone gives the ESimCSE paper's settings and any flag given explicitly wins.
"""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field, fields, make_dataclass
from typing import Any, NoReturn

import torch
from transformers import HfArgumentParser, TrainingArguments
from transformers.hf_argparser import string_to_bool
from transformers.trainer_utils import IntervalStrategy, SaveStrategy, SchedulerType

from eval.encoder import DEV_MAX_TOKENS
from models.config import (DIFFCSE, SETTINGS, UNSUP, check_setting, check_value, number, setting_names,
                           value_range)
from trainers.errors import UsageError, reraise_as
from trainers.fast_path import COMPILE_MODES, COMPILE_REGIONS, asynchronous_batches
from trainers.methods import METHODS
from trainers.precision import mixed_precision_of, resolve_precision

from .cli_help import USAGE, CompactHelpFormatter, hide_inherited_trainer_flags, move_group_first, move_to_front
from .config_file import expand_config_file
from .launch import (launched_world_size, refuse_data_parallel, refuse_more_processes_than_gpus,
                     refuse_silent_single_process, refuse_single_process_launch)


EVERY_N_STEPS = "every N steps (a value below 1 is a ratio of the run's steps)"
SEED_RANGE = value_range(0, 2**32 - 1, reason="set_seed also seeds numpy, whose seeds are 32-bit unsigned integers")

#: The numeric flags of the data and of the Trainer that a recipe sets, each with its valid range in the settings'
#: form (``models.config.value_range``) and checked by the same :func:`models.config.check_value` when the
#: arguments are parsed (:func:`check_flag_ranges`): a value outside is refused in one line before anything loads.
FLAG_RANGES: dict[str, dict[str, Any]] = {
    "max_seq_length": value_range(3, reason="a view needs [CLS], [SEP] and at least one token of the sentence"),
    "max_train_samples": value_range(1, reason="it is a number of sentences"),
    "learning_rate": value_range(0, open_low=True, reason="the optimizer's step size must be positive (the papers "
                                                          "use 1e-5 to 5e-5)"),
    "per_device_train_batch_size": value_range(1, reason="it is a number of sentences per process and step"),
    "per_device_eval_batch_size": value_range(1, reason="it is a number of sentences per process"),
    "gradient_accumulation_steps": value_range(1, reason="it is a number of micro-batches per step"),
    "num_train_epochs": value_range(0, open_low=True, reason="it is a number of passes over the corpus "
                                                             "(--max_steps N trains N steps instead)"),
    "max_steps": value_range(1, also=(-1,), reason="-1 trains for --num_train_epochs, and no other value below 1 is "
                                                   "a number of steps"),
    "warmup_steps": value_range(0, reason="it is a number of steps (a value below 1 is a ratio of the run's steps)"),
    "eval_steps": value_range(0, open_low=True, reason=f"it evaluates {EVERY_N_STEPS}"),
    "save_steps": value_range(0, open_low=True, reason=f"it saves a checkpoint {EVERY_N_STEPS}"),
    "logging_steps": value_range(0, open_low=True, reason=f"it logs {EVERY_N_STEPS}"),
    "max_grad_norm": value_range(0, reason="it is a norm (0 turns clipping off)"),
    "weight_decay": value_range(0, reason="a negative decay pushes the weights away from 0"),
    "dataloader_num_workers": value_range(0, reason="it is a number of processes (0 loads in the main process)"),
    "seed": SEED_RANGE,
    "data_seed": SEED_RANGE,
    "cache_chunk_size": value_range(1, reason="it is a number of sentences per encoding chunk"),
    "eval_max_tokens": value_range(0, reason="it is a number of tokens per forward pass (0: a number of sentences)"),
}


def check_flag_ranges(arguments: Any) -> None:
    """Refuse (:class:`UsageError`) a value of a flag of ``arguments`` (a parsed dataclass) outside its declared
    range (:data:`FLAG_RANGES`); ``None`` means not given."""
    defaults = {f.name: f.default for f in fields(arguments)}
    for name in FLAG_RANGES.keys() & defaults.keys():
        value, default = getattr(arguments, name), defaults[name]
        if value is None:
            continue
        usual = f"The default is {number(default)}." if isinstance(default, (int, float)) else ""
        with reraise_as(UsageError, ValueError):
            check_value(f"--{name}", value, FLAG_RANGES[name], usual)


@dataclass
class ModelArguments:
    _argument_group_name = "model"

    model_name_or_path: str = field(
        default="bert-base-uncased", metadata={"help": "Backbone: any AutoModel name or local folder."})
    attn_implementation: str | None = field(default="sdpa", metadata={"help": "Backbone attention kernel."})
    cache_dir: str | None = field(default=None, metadata={"help": "Hugging Face cache directory."})
    config_overrides: str | None = field(default=None, metadata={"help": (
        "Backbone config settings changed before it loads, e.g. attention_dropout=0.1,embedding_dropout=0.1,"
        "mlp_dropout=0.1 (a ModernBERT's rates are 0, so SimCSE's two views would be one); transformers' "
        "update_from_string syntax, recorded with the run.")})

    def __post_init__(self) -> None:
        check_attention(self.attn_implementation)


def attention_choices() -> list[str]:
    """The attention implementations a backbone can be asked for: ``eager`` and those registered in transformers'
    ``AttentionInterface`` (``sdpa``, flash attention, flex attention, ...), but this repo's own row-seeded dropout
    attention, which the model installs itself."""
    from transformers import AttentionInterface

    from models.dropout import ROW_DROPOUT_ATTENTION

    return ["eager", *(name for name in AttentionInterface().valid_keys() if name != ROW_DROPOUT_ATTENTION)]


def check_attention(name: str | None) -> None:
    """Refuse an ``--attn_implementation`` transformers does not know (the loader fell back to the architecture's
    default attention without a word); a Hub kernel (``org/name``) is left to transformers."""
    if name is None or "/" in name or name in attention_choices():
        return
    raise UsageError(f"--attn_implementation {name!r}: choose one of {', '.join(attention_choices())} (or a Hub "
                     "kernel, org/name); the default sdpa falls back to the architecture's own attention where it "
                     "has no SDPA")


@dataclass
class DataArguments:
    _argument_group_name = "data"

    train_file: str = field(
        default="data/wiki1m_for_simcse.txt",
        metadata={"help": "Unsupervised: one sentence per line (.txt). Supervised: CSV sent0,sent1,hard_neg."})
    max_seq_length: int = field(default=32, metadata={"help": "Truncation length of every view."})
    senteval_dir: str | None = field(
        default=None, metadata={"help": "SentEval data dir (default: env SENTEVAL_DIR, else data/senteval)."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Use only the first N sentences."})

    def __post_init__(self) -> None:
        check_flag_ranges(self)
        if self.senteval_dir is None:
            self.senteval_dir = os.environ.get("SENTEVAL_DIR", "data/senteval")


def setting_fields(script: str) -> list[tuple[str, Any, Any]]:
    """``make_dataclass`` fields for every setting ``script`` exposes (``models.config``): default ``None`` = not
    given (the method's paper value applies), the declared help, choices and the papers' flag names."""
    specs = []
    for name, declared in SETTINGS.items():
        meta = declared.metadata
        if script not in meta["scripts"]:
            continue
        value_type = type(declared.default) if declared.default is not None else str
        choices = [str(c) for c in meta["choices"] or () if c is not None]
        shown = f" {{{','.join(choices)}}}" if choices else ""  # checked with the declaration's message, not argparse's
        metadata: dict[str, Any] = {"help": f"{meta['help']}{shown} {default_text(name, script)}"}
        names = [f"--{alias}" for alias in setting_names(name)[1:]]
        if names:
            metadata["aliases"] = names
        specs.append((name, value_type | None, field(default=None, metadata=metadata)))
    return specs


def default_text(name: str, script: str) -> str:
    """``(default: X)`` for ``--help``: the declared default, and each method's own value where its class sets one
    (``(default: False; simcse_pp: True)``); a script that trains one method shows that method's value."""
    methods = {m: spec.model_class.method_defaults for m, spec in METHODS.items() if spec.script == script}
    overrides = {m: defaults[name] for m, defaults in methods.items() if name in defaults}
    if len(methods) == 1 and overrides:
        return f"(default: {next(iter(overrides.values()))})"
    return f"(default: {SETTINGS[name].default}" + "".join(f"; {m}: {v}" for m, v in overrides.items()) + ")"


class SettingArguments:
    """Base of the generated method-settings dataclasses: every value given is checked against its declaration at
    parse time (so a bad ``--temp`` is refused before anything loads)."""

    def __post_init__(self) -> None:
        for name, value in self.explicit_settings().items():
            with reraise_as(UsageError, ValueError):
                check_setting(name, value)

    def explicit_settings(self) -> dict[str, Any]:
        """The settings given on the command line / in the config file (``None`` = not given)."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name in SETTINGS and f.name != "method" and getattr(self, f.name) is not None}


MethodArguments = make_dataclass(
    "MethodArguments",
    [("method", str, field(default="simcse", metadata={
        "help": "The paper whose objective to train.", "choices": [m for m, spec in METHODS.items()
                                                                   if spec.script == UNSUP]})),
     *setting_fields(UNSUP)],
    bases=(SettingArguments,),
    namespace={"_argument_group_name": "method (--method and its paper's settings; default: the paper's value)",
               "__doc__": "``run_unsup.py``'s method flags, generated from the settings' declaration."})


#: Data-loading worker processes of a GPU run (``--dataloader_num_workers`` left unset): the collators tokenise on the
#: fly (``data/collators.py``), about 5 ms per batch of 64 on one core, which a GPU step waiting on the loop's thread
#: would add to every step (the compiled SimCSE step computes in about 10 ms on an H200); two workers keep batches
#: ahead of it. Every augmentation draw is keyed by (seed, epoch, sentence), and the Trainer sets the epoch before
#: the workers start, so the batches are the ones the main process would make (``tests/test_data_workers.py``).
GPU_DATALOADER_WORKERS = 2


def check_best_model_metric(metric: str | None, eval_transfer: bool) -> None:
    """Refuse a ``--metric_for_best_model`` the dev evaluation does not report (``eval.sts.DEV_METRICS``; with
    ``--eval_transfer``, ``eval.transfer.transfer_dev_metrics`` too): the Trainer looks it up only at the first
    evaluation, after ``--eval_steps`` steps, and stopped there with a KeyError traceback."""
    from eval.sts import DEV_METRICS
    from eval.transfer import transfer_dev_metrics

    if metric is None:
        return
    name = metric.removeprefix("eval_")  # the Trainer's own prefix, accepted with or without
    reported = [*DEV_METRICS, *(transfer_dev_metrics() if eval_transfer else ())]
    if name not in reported:
        needs_transfer = " (the transfer tasks' with --eval_transfer true)" if name in transfer_dev_metrics() else ""
        raise UsageError(f"--metric_for_best_model {metric}: the dev evaluation reports {', '.join(reported)}"
                         f"{needs_transfer}; pick one of them (the default, stsb_spearman, is the papers' choice)")


#: The package each ``--report_to`` integration needs, where its name is not the integration's.
REPORTING_PACKAGES = {"azure_ml": "azureml-core", "neptune": "neptune", "flyte": "flytekit"}


def check_report_to(report_to: str | list[str]) -> None:
    """Refuse, at parse time, a ``--report_to`` integration the Trainer would fail to start once the model and the
    corpus are loaded (with a traceback): a name transformers does not know, or one whose package is not installed
    (``--report_to tensorboard`` without tensorboard)."""
    from transformers.integrations.integration_utils import (INTEGRATION_TO_CALLBACK,
                                                             get_available_reporting_integrations)

    names = [report_to] if isinstance(report_to, str) else list(report_to or [])
    available = get_available_reporting_integrations()
    for name in names:
        if name in ("none", "all") or name in available:
            continue
        if name not in INTEGRATION_TO_CALLBACK:
            raise UsageError(f"--report_to {name}: not a logging integration; choose among "
                             f"{', '.join(sorted(INTEGRATION_TO_CALLBACK))}, all or none")
        raise UsageError(f"--report_to {name}: its package is not installed here, so the Trainer could not start; "
                         f"pip install {REPORTING_PACKAGES.get(name, name)}, or drop --report_to (the run draws its "
                         "curves into <output_dir>/training_curves.png either way)")


def default_dataloader_workers(on_cpu: bool) -> int:
    """``--dataloader_num_workers`` when not given: :data:`GPU_DATALOADER_WORKERS` on an accelerator; 0 on a CPU, where
    the step itself needs the cores (a worker made a 2-core CPU run slower: 22 vs 15 ms per step, docs/benchmarks.md)."""
    return 0 if on_cpu else GPU_DATALOADER_WORKERS


def default_fast_path(on_cpu: bool, bf16: bool, processes: int) -> bool:
    """``--torch_compile`` when not given: the fast path for one GPU training in bf16 autocast, where it was measured
    equal to the eager step and faster (CUDA graphs; docs/benchmarks.md); the eager loop on a CPU (whose step is
    compute-bound, and whose results the behaviour lock pins), under several processes and in fp32 (not measured)."""
    return not on_cpu and bf16 and processes == 1


@dataclass
class CLTrainingArguments(TrainingArguments):
    """``TrainingArguments`` with the SimCSE recipe as defaults; best checkpoint by STS-B dev Spearman.

    ``--eval_strategy no`` derives what depends on it (unless given): ``save_strategy`` steps (the last checkpoint
    kept, to resume) instead of best, and ``load_best_model_at_end`` false."""

    _argument_group_name = "training (the paper recipe; --help_all also lists the inherited Trainer flags)"

    output_dir: str | None = field(default="outputs/simcse", metadata={
        "help": "Where checkpoints, results and the export go. A folder holding a previous run is refused unless "
                "the run resumes (--resume_from_checkpoint) or --overwrite_output_dir is given."})
    overwrite_output_dir: bool = field(default=False, metadata={
        "help": "Delete the previous run in --output_dir (its checkpoints, results and export) and start anew."})
    learning_rate: float = field(default=3e-5, metadata={"help": "Peak learning rate (linear decay)."})
    per_device_train_batch_size: int = field(default=64, metadata={
        "help": "Sentences per process and step; with N processes the contrast batch is N times this (min 2)."})
    num_train_epochs: float = field(default=1.0, metadata={"help": "Passes over the corpus (--max_steps wins)."})
    eval_strategy: IntervalStrategy | str = field(default="steps", metadata={
        "help": "steps: STS-B dev every --eval_steps, the best checkpoint kept and exported; no: no evaluation "
                "(the final model is exported)."})
    eval_steps: float | None = field(default=125, metadata={"help": "Evaluate STS-B + SICK-R dev every N steps."})
    save_strategy: SaveStrategy | str | None = field(default=None, metadata={
        "help": "Default: best with evaluation (a checkpoint whenever STS-B dev improves), steps without.",
        "choices": [s.value for s in SaveStrategy]})
    save_total_limit: int | None = field(default=1, metadata={"help": "Checkpoints kept on disk (the best one "
                                                                       "is never deleted)."})
    metric_for_best_model: str | None = field(default="stsb_spearman", metadata={
        "help": "Model selection metric (stsb_spearman | sickr_spearman | avg_sts)."})
    greater_is_better: bool | None = field(default=True, metadata={"help": "Whether a higher metric is better."})
    load_best_model_at_end: bool | None = field(default=None, metadata={
        "help": "Reload the best checkpoint before exporting. Default: true with evaluation, false without."})
    logging_steps: float = field(default=25, metadata={"help": "Log loss and method metrics every N steps."})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay."})
    warmup_steps: float = field(default=0, metadata={"help": "Linear warmup steps (or a ratio if < 1)."})
    lr_scheduler_type: SchedulerType | str = field(default="linear", metadata={"help": "Learning rate schedule."})
    seed: int = field(default=42, metadata={
        "help": "Seed of the projector's initialisation, the data order, dropout and augmentations."})
    remove_unused_columns: bool = field(default=False, metadata={
        "help": "Keep false: the collators read the raw text columns."})
    report_to: None | str | list[str] = field(default=None, metadata={
        "help": "Logging integrations. Default: tensorboard when installed (logs in <output_dir>/runs), else none."})
    logging_nan_inf_filter: bool = field(default=False, metadata={
        "help": "Skip non-finite step losses in the logged mean. Off here: the Trainer's check reads the loss on the "
                "host after every step (a host-device sync per step on GPU)."})
    bf16: bool | None = field(
        default=None, metadata={"help": "bf16 autocast for training (evaluation: --eval_dtype). Default: accelerate "
                                        "launch's --mixed_precision bf16|fp16 if set, else on with a bf16 GPU or "
                                        "a CPU with native bf16 (trainers/precision.py), else fp32."})
    tf32: bool | None = field(default=None, metadata={"help": "TF32 matmuls; default: on with an Ampere+ GPU."})
    eval_dtype: str = field(default="fp32", metadata={
        "help": "Every evaluation's precision (STS-B dev, final scores; recorded): fp32 (autocast, TF32 off: as "
                "the papers evaluated) or bf16 autocast.",
        "choices": ["fp32", "bf16"]})
    eval_max_tokens: int = field(default=DEV_MAX_TOKENS, metadata={
        "help": "Padded tokens per forward pass of the dev evaluation (length-sorted sentences, as many as fit); 0: "
                "per_device_eval_batch_size x 16 sentences a pass. The scores agree up to float rounding."})
    eval_packing: bool = field(default=True, metadata={
        "help": "Pack the dev evaluation's sentences side by side in rows of its longest (eval/packing.py: no "
                "padding, each sentence attends to itself) where the backbone allows; false: padded passes. The "
                "scores agree up to float rounding."})
    check_senteval_sizes: bool | None = field(default=None, metadata={
        "help": "Require SentEval's line counts in every STS file evaluation reads (false: your own STS-format "
                "files). Default: true unless SENTEVAL_CHECK_SIZES=0."})
    eval_transfer: bool = field(
        default=False, metadata={"help": "Also evaluate SentEval transfer dev accuracies (fasttest) at each eval."})
    evaluate_at_start: bool = field(
        default=True, metadata={"help": "Evaluate STS-B dev before the first step (the 'before' number)."})
    export_dir: str | None = field(
        default=None, metadata={"help": "Where the plain HF + sentence-transformers exports go (default: "
                                        "<output_dir>/export)."})
    dataloader_num_workers: int | None = field(default=None, metadata={
        "help": "Processes that tokenise and collate batches. Default: 2 on a GPU (off the training loop's thread, "
                "which a fast GPU step waits on; the batches are the same), 0 on a CPU (whose cores compute the step)."})
    torch_compile: bool | None = field(default=None, metadata={
        "help": "The fast path (trainers/fast_path.py, docs/benchmarks.md): views padded to fixed widths, the backbone "
                "compiled (CUDA graphs on one GPU), no host-device sync in the loop; the same loss as the eager step. "
                "Default: on for one GPU training in bf16, off elsewhere (a CPU, several processes, fp32). "
                "--torch_compile_mode / --torch_compile_backend pick the compile mode / backend."})
    #: Set from --torch_compile (and --torch_compile_mode / _backend) in __post_init__, which then clears those: the
    #: Trainer would otherwise compile the whole model (and recompile at every new batch shape).
    fast_path: bool = field(default=False, init=False)
    fast_path_mode: str | None = field(default=None, init=False)
    fast_path_backend: str = field(default="inductor", init=False)
    torch_compile_regions: str | None = field(default=None, metadata={
        "choices": COMPILE_REGIONS,
        "help": "What the fast path compiles as one region: the whole backbone, or each of its repeated layers "
                "(one layer traced and lowered, its graph shared by the stack). Default: layers under the step graph "
                "(H100, SimCSE: compile warm-up 37.9 -> 16.8 s, steady 2.4 %% slower, a wiki1m epoch 4.1 -> 3.8 min; "
                "backbone for runs much longer than an epoch), backbone elsewhere. layers needs a mode without "
                "CUDA-graph trees (the step graph's, or --torch_compile_mode default); elsewhere the whole backbone "
                "is compiled (logged)."})
    step_graph: bool | None = field(default=None, metadata={
        "help": "Capture the whole training step (forward, backward, gradient clipping) as one CUDA graph and replay "
                "it every step (trainers/step_graph.py): one launch instead of the step's host work (H100, SimCSE: "
                "5,746 sentences/s in the real loop). Default: on wherever the fast path is on (one GPU in bf16) and "
                "nothing refuses it (gradient accumulation, gradient checkpointing, several processes, a CUDA-graph "
                "--torch_compile_mode; logged); true: refused with the reason where it cannot hold."})
    cache_chunk_size: int | None = field(default=None, metadata={
        "help": "Cached step (GradCache, docs/cached_training.md): encode N sentences at a time, the loss over the "
                "whole batch; implies --dropout_masks row_seeded (then equal to the uncached step, any N)."})

    def __post_init__(self) -> None:
        check_flag_ranges(self)
        refuse_single_process_launch()
        self.derive_evaluation_dependent_settings()
        if self.report_to is None:
            from transformers.integrations import is_tensorboard_available

            self.report_to = "tensorboard" if is_tensorboard_available() else "none"
        check_report_to(self.report_to)
        if not torch.accelerator.is_available():
            self.use_cpu = True  # the device it runs on anyway; the Trainer refuses bf16 on CPU unless told so
            self.dataloader_pin_memory = False  # nothing to pin for; torch would warn on every dataloader
        self.bf16, self.fp16, precision_warning = resolve_precision(self.bf16, bool(self.fp16),
                                                                    on_cpu=bool(self.use_cpu))
        #: What the command line resolved to that the run says at its start and repeats in its summary
        #: (``command_line.pipeline.train_and_export``): the launcher's precision overridden, a checkpoint as backbone.
        self.command_line_warnings = [precision_warning] if precision_warning else []
        if self.tf32 is None:
            self.tf32 = True if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else None
        if launched_world_size() > 1 and not torch.cuda.is_available():
            self.use_cpu = True  # accelerate only sets up multi-process CPU (gloo) training when asked for the CPU
        refuse_more_processes_than_gpus(bool(self.use_cpu))
        if self.dataloader_num_workers is None:
            self.dataloader_num_workers = default_dataloader_workers(on_cpu=bool(self.use_cpu))
        if self.dataloader_num_workers > 0:
            # the fast tokenizer's own threads in forked workers: off (its warning, and a deadlock risk, otherwise)
            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        self.take_over_torch_compile()
        self.adopt_activation_checkpointing()
        super().__post_init__()
        self.mixed_precision = mixed_precision_of(self.bf16, self.fp16)  # it read the launcher's, which may differ
        if self.fast_path:
            asynchronous_batches(self)
        refuse_data_parallel(self)
        refuse_silent_single_process(self)

    def adopt_activation_checkpointing(self) -> None:
        """``--gradient_checkpointing`` (and its ``_kwargs``), this repo's flag and transformers 5.20's only name, as
        ``activation_checkpointing`` where transformers has that name (5.23 on): given under the old name, the
        Trainer's arguments warned on every run that it is deprecated (removed in transformers 6, which
        requirements.txt excludes). The Trainer then mirrors the new name back into the old, which this repo reads.
        :attr:`checkpointing_flag` keeps the name the user typed, for the refusals that name it."""
        typed_new = getattr(self, "activation_checkpointing", None) is not None and self.gradient_checkpointing is None
        self.checkpointing_flag = "--activation_checkpointing" if typed_new else "--gradient_checkpointing"
        for old, new in (("gradient_checkpointing", "activation_checkpointing"),
                         ("gradient_checkpointing_kwargs", "activation_checkpointing_kwargs")):
            if hasattr(self, new) and getattr(self, new) is None and getattr(self, old) is not None:
                setattr(self, new, getattr(self, old))
                setattr(self, old, None)

    def to_dict(self) -> dict[str, Any]:
        """The Trainer's record of these arguments (``run_arguments.json``, the model card), with what
        ``--torch_compile`` resolved to (``fast_path``, ``fast_path_mode``, ``fast_path_backend``): the Trainer's own
        ``torch_compile``, which this class turns off on the fast path, alone would say a fast-path run did not
        compile, and a resume could not tell (``trainers.resume_settings.fast_path_change_warning``)."""
        return {**super().to_dict(), "fast_path": self.fast_path, "fast_path_mode": self.fast_path_mode,
                "fast_path_backend": self.fast_path_backend}

    def take_over_torch_compile(self) -> None:
        """``--torch_compile`` (or a ``--torch_compile_mode`` / ``_backend``) turns on the fast path
        (``trainers.fast_path``: the backbone compiled at fixed shapes) instead of the Trainer's compile of the whole
        model, which recompiles at every new batch width and at the epoch's short last batch. ``--torch_compile
        false`` beside a mode or backend is refused: which of the two the user meant cannot be told."""
        if self.torch_compile is False and (self.torch_compile_mode or self.torch_compile_backend):
            chosen = [f"--{name} {value}" for name, value in (
                ("torch_compile_mode", self.torch_compile_mode), ("torch_compile_backend", self.torch_compile_backend))
                if value]
            flags = " and ".join(chosen)
            raise UsageError(f"--torch_compile false turns the fast path off, but {flags} "
                             f"{'choose' if len(chosen) > 1 else 'chooses'} how it compiles: drop {flags} for the "
                             f"eager step, or --torch_compile false for the fast path")
        if self.torch_compile is None:
            self.torch_compile = default_fast_path(on_cpu=bool(self.use_cpu), bf16=bool(self.bf16),
                                                   processes=launched_world_size())
        self.fast_path = bool(self.torch_compile or self.torch_compile_mode or self.torch_compile_backend)
        if self.torch_compile_mode not in (None, *COMPILE_MODES):
            raise UsageError(f"--torch_compile_mode {self.torch_compile_mode!r}: choose one of "
                             f"{', '.join(COMPILE_MODES)} (default: reduce-overhead, i.e. CUDA graphs, on one GPU)")
        if self.torch_compile_regions == "layers" and not self.fast_path:
            raise UsageError("--torch_compile_regions layers chooses what the fast path compiles, and the fast path is "
                             "off (a CPU, fp32 or several processes): add --torch_compile true")
        self.fast_path_mode = self.torch_compile_mode
        self.fast_path_backend = self.torch_compile_backend or "inductor"
        self.torch_compile, self.torch_compile_mode, self.torch_compile_backend = False, None, None

    def derive_evaluation_dependent_settings(self) -> None:
        """``save_strategy`` and ``load_best_model_at_end`` left unset follow ``eval_strategy``: with evaluation,
        save the best and reload it; without, save every ``save_steps`` (the last kept) and export the final model.
        Set explicitly, they are kept (and a contradiction is the Trainer's error, shown as a one-line message)."""
        evaluating = str(getattr(self.eval_strategy, "value", self.eval_strategy)) != "no"
        if self.save_strategy is None:
            self.save_strategy = "best" if evaluating else "steps"
        if self.load_best_model_at_end is None:
            self.load_best_model_at_end = evaluating
        if evaluating:
            check_best_model_metric(self.metric_for_best_model, bool(self.eval_transfer))


def parse_args(dataclass_types: tuple[type, ...], argv: list[str] | None = None,
               description: str | None = None) -> tuple[Any, ...]:
    """Parse ``[config.yaml|config.json] [--flag value ...]`` into the given dataclasses.

    A leading config file supplies values like HfArgumentParser's ``parse_yaml_file``/``parse_json_file``; flags
    after it override single entries. Unknown keys are an error naming them.
    """
    argv = expand_config_file(list(sys.argv[1:] if argv is None else argv))
    parser = build_parser(dataclass_types, description)
    argv = method_training_defaults(argv, parser) + argv
    with reraise_as(UsageError, ValueError):  # the Trainer's checks of flag combinations
        *parsed, unknown = parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
    if unknown:
        raise UsageError(unknown_arguments_message(parser, unknown))
    return tuple(parsed)


def flag_value(argv: list[str], flag: str, default: str | None = None) -> str | None:
    """The last value given to ``flag`` in ``argv`` (``--flag value`` or ``--flag=value``), else ``default``."""
    value = default
    for index, token in enumerate(argv):
        if token == flag and index + 1 < len(argv):
            value = argv[index + 1]
        elif token.startswith(flag + "="):
            value = token.split("=", 1)[1]
    return value


def method_training_defaults(argv: list[str], parser: HfArgumentParser) -> list[str]:
    """The ``--method``'s own training-argument defaults (its class's ``training_defaults``: PromptBERT's lr 1e-5 and
    batch 256), as flags to place BEFORE ``argv`` so that any flag given wins (as ``--task_profile`` does in
    ``run_diffcse.py``); only flags this parser has."""
    method = flag_value(argv, "--method")
    if method not in METHODS:
        return []
    options = {option for action in parser._actions for option in action.option_strings}
    return [item for key, value in METHODS[method].model_class.training_defaults.items()
            if f"--{key}" in options for item in (f"--{key}", str(value))]


def unknown_arguments_message(parser: HfArgumentParser, unknown: list[str]) -> str:
    """``unknown argument(s): --lerning_rate 3 (did you mean --learning_rate?) ...``"""
    import difflib

    options = [option for action in parser._actions for option in action.option_strings]
    flags = [token.split("=", 1)[0] for token in unknown if token.startswith("--")]
    elsewhere = {flag: other_scripts_flag(flag) for flag in flags}
    guesses = [match for flag in flags if not elsewhere[flag]
               for match in difflib.get_close_matches(flag, options, n=1)]
    hint = f" (did you mean {', '.join(dict.fromkeys(guesses))}?)" if guesses else ""
    hint += "".join(f"; {flag} is a flag of {scripts}" for flag, scripts in elsewhere.items() if scripts)
    return f"unknown argument(s): {' '.join(unknown)}{hint}; --help lists the flags, --help_all all of them"


def other_scripts_flag(flag: str) -> str | None:
    """The training script(s) whose flag ``flag`` is when the parser at hand does not know it (a method setting of
    the other script: DiffCSE's ``--generator_name`` given to run_unsup.py; ``--method``, which run_diffcse.py does
    not take), e.g. ``run_diffcse.py (DiffCSE)``; ``None`` for a flag no script has (a typo)."""
    if flag == "--method":
        return f"{UNSUP}.py (run_diffcse.py trains DiffCSE only)"
    for name, declaration in SETTINGS.items():
        if flag in {f"--{spelling}" for spelling in setting_names(name)}:
            named = [f"{script}.py" + (" (DiffCSE)" if script == DIFFCSE else "")
                     for script in declaration.metadata["scripts"]]
            return " and ".join(named) or None
    return None


class ScriptArgumentParser(HfArgumentParser):
    """``HfArgumentParser`` whose refusals are the scripts' one-line :class:`UsageError`: a value of the wrong type
    or not among the choices names the flag, the value and what to pass; argparse's other errors (a flag without
    its value) keep argparse's text, without the usage line."""

    def _get_value(self, action: argparse.Action, arg_string: str) -> Any:
        try:
            return super()._get_value(action, arg_string)
        except argparse.ArgumentError:
            raise UsageError(wrong_type_message(action, arg_string)) from None

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        if action.choices is not None and value not in action.choices:
            shown = ", ".join(str(getattr(c, "value", c)) for c in action.choices)
            elsewhere = (f" (DiffCSE trains with {DIFFCSE}.py: {DIFFCSE}.py --generator_name "
                         "distilbert-base-uncased)" if action.dest == "method" and value == "diffcse" else "")
            raise UsageError(f"{action.option_strings[0]} {value!r}: choose one of {shown}{elsewhere}")

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message}; --help lists the flags")


def wrong_type_message(action: argparse.Action, value: str) -> str:
    """``--max_seq_length 'abc': expected an integer, e.g. --max_seq_length 32``."""
    flag = action.option_strings[0]
    if action.type is string_to_bool:
        return f"{flag} {value!r}: expected true or false"
    kind = {int: "an integer", float: "a number"}.get(action.type, "a valid value")
    example = SETTINGS[action.dest].default if action.dest in SETTINGS else action.default
    return f"{flag} {value!r}: expected {kind}" + (f", e.g. {flag} {example}" if example is not None else "")


def build_parser(dataclass_types: tuple[type, ...], description: str | None = None) -> HfArgumentParser:
    """The parser of the training scripts: one help group per dataclass, inherited Trainer flags behind --help_all.
    ``description``: the script's docstring (its first paragraph is shown)."""
    # allow_abbrev=False: a misspelt flag (or config key) is an error, not a prefix match
    parser = ScriptArgumentParser(dataclass_types, description=(description or "").split("\n\n")[0] or None,
                                  usage=USAGE, formatter_class=CompactHelpFormatter, allow_abbrev=False)
    hide_inherited_trainer_flags(parser, dataclass_types)
    for action in parser._actions:  # the papers' spelling first in --help (--temp, not --temperature)
        if action.dest in SETTINGS and SETTINGS[action.dest].metadata["flag"]:
            flag = f"--{SETTINGS[action.dest].metadata['flag']}"
            action.option_strings = [flag] + [o for o in action.option_strings if o != flag]
    move_to_front(parser, "method")
    move_group_first(parser, "learning_rate")  # the recipe first, then model, data and the method's flags
    return parser
