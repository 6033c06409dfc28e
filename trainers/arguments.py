"""Flat argument dataclasses for ``run_unsup.py`` / ``run_diffcse.py``, parsed by ``HfArgumentParser``.

Defaults are the SimCSE paper's unsupervised BERT-base recipe (Gao et al., 2021, Sec. 3 and Appendix A;
REFERENCE.md "Training recipes"): bert-base-uncased, lr 3e-5, batch 64, max length 32, 1 epoch, STS-B dev every
125 steps, tau 0.05, ``cls`` pooler with the MLP in training only, seed 42, no warmup, linear decay.

Method fields default to ``None`` = "the method's own paper default" (``method_defaults`` of its model class,
then ``ContrastiveConfig``), so ``--method esimcse`` alone gives the ESimCSE paper's settings and any flag given
explicitly wins.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
from transformers import HfArgumentParser, TrainingArguments
from transformers.trainer_utils import IntervalStrategy, SaveStrategy, SchedulerType
from transformers.training_args import ParallelMode

from .cli_help import USAGE, CompactHelpFormatter, hide_inherited_trainer_flags, move_group_first, move_to_front
from .errors import UsageError, reraise_as
from .launch import refuse_single_process_launch


TEMP_RANGE = (1e-3, 10.0)
"""Accepted ``--temp``. The logits are cos/tau with |cos| <= 1, and the loss and its gradients grow like 1/tau
(measured on a tiny BERT: the first loss is ~13 at tau 0.01, ~1e3 at 1e-4, ~1e11 at 1e-12). Every paper uses 0.05;
the lower bound 1e-3 (50x lower) keeps the logits <= 1e3, far inside float16's 65504 (they overflow it, to inf and
then NaN, below tau ~1.5e-5). Above 10 every logit is within 0.1 of 0 and the softmax carries almost no signal."""


@dataclass
class ModelArguments:
    _argument_group_name = "model"

    model_name_or_path: str = field(
        default="bert-base-uncased", metadata={"help": "Backbone: any AutoModel name or local folder."})
    pooler_type: str | None = field(
        default=None, metadata={"help": "cls | cls_before_pooler | avg | avg_first_last | avg_top2 (default: cls)."})
    mlp_only_train: bool | None = field(
        default=None, metadata={"help": "Use the MLP projector in training only (unsupervised SimCSE: true)."})
    projector: str | None = field(default=None, metadata={"help": "mlp | batchnorm | none (default: mlp)."})
    temp: float | None = field(default=None, metadata={
        "help": f"Temperature tau of the InfoNCE loss (0.05), in [{TEMP_RANGE[0]:g}, {TEMP_RANGE[1]:g}]."})
    attn_implementation: str | None = field(default="sdpa", metadata={"help": "Backbone attention kernel."})
    cache_dir: str | None = field(default=None, metadata={"help": "Hugging Face cache directory."})

    def __post_init__(self) -> None:
        low, high = TEMP_RANGE
        if self.temp is not None and not low <= self.temp <= high:
            effect = "makes them overflow (the run trains to NaN)" if self.temp < low else "flattens the softmax"
            raise UsageError(f"--temp {self.temp:g} is outside the valid range [{low:g}, {high:g}]: the logits are "
                             f"cos/temp, and this temperature {effect}. The papers use 0.05.")


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
        if self.senteval_dir is None:
            self.senteval_dir = os.environ.get("SENTEVAL_DIR", "data/senteval")


@dataclass
class SharedObjectiveArguments:
    """Flags of the objective parts every method can use (models/parts.py): gathering negatives across processes and
    SimCSE++'s two parts. :class:`MethodArguments` and DiffCSE's arguments both extend it."""

    gather_negatives: bool | None = field(
        default=None, metadata={"help": "All-gather negatives across processes (default true)."})

    # --- SimCSE++ (Xu et al., 2023) on any method: docs/simcse_pp.md ---
    off_dropout: bool | None = field(default=None, metadata={
        "help": "SimCSE++: negatives from a dropout-off encoding of the anchors (on any method)."})
    pos_neg_tradeoff: float | None = field(default=None, metadata={"help": "SimCSE++: trade-off m (0.9)."})
    off_dropout_form: str | None = field(default=None, metadata={
        "help": "SimCSE++: m scales the positive logit (code, default: models_re.py) or the negative sum (paper Eq. 3).",
        "choices": ["code", "paper"]})
    dcl_weight: float | None = field(default=None, metadata={
        "help": "SimCSE++: weight lambda of the dimension-wise contrastive loss (0.1 for simcse_pp, else 0)."})
    dcl_temp: float | None = field(default=None, metadata={"help": "SimCSE++: DCL temperature (5)."})
    dcl_form: str | None = field(default=None, metadata={
        "help": "SimCSE++: DCL as in the code (BatchNorm, /N, mean; default) or as printed (Eq. 5).",
        "choices": ["code", "paper"]})


@dataclass
class MethodArguments(SharedObjectiveArguments):
    _argument_group_name = "method (--method and the flags of its paper; default None = the paper's value)"

    method: str = field(default="simcse", metadata={"help": "simcse | sup_simcse | esimcse | simcse_pp | s_simcse"})
    hard_negative_weight: float | None = field(
        default=None, metadata={"help": "Supervised SimCSE: log-weight added to the own hard-negative logit."})

    # --- reproduction fidelity (models/presets.py) ---
    fidelity: str | None = field(default=None, metadata={
        "help": "paper | official_code: set every paper-vs-code switch at once (explicit flags still win). Default: "
                "each field's own default (the paper's, except SimCSE++'s loss forms: the code's).",
        "choices": ["paper", "official_code"]})

    # --- ESimCSE (Wu et al., 2022; docs/esimcse.md) ---
    dup_rate: float | None = field(default=None, metadata={"help": "ESimCSE: maximal repetition rate (0.32)."})
    dup_type: str | None = field(default=None, metadata={
        "help": "ESimCSE: repeat sub-words (default) or whole words.", "choices": ["subword", "word"]})
    dup_length_rule: str | None = field(default=None, metadata={
        "help": "ESimCSE: dup_len ~ U{0..max(2, int(dup_rate*N))}, N = sub-words (paper, default) or "
                "randrange(min(10, int(dup_rate*len))), len incl. [CLS]/[SEP] (code).", "choices": ["paper", "code"]})
    resample_repetition: bool | None = field(default=None, metadata={
        "help": "ESimCSE: new repetition every time a sentence is seen (default true; false = the code's "
                "repeat-once cache)."})
    truncate_positive: bool | None = field(default=None, metadata={
        "help": "ESimCSE: cut the repeated positive back to max_seq_length (default false: the positive is the "
                "truncated anchor plus its repetitions, as in the released code; true = a same-length ablation)."})
    length_extension: str | None = field(default=None, metadata={
        "help": "ESimCSE Table 4/5: repetition (default) | stopword | mask | mlm_prediction insertion after the picked "
                "units | none (momentum contrast alone).",
        "choices": ["repetition", "stopword", "mask", "mlm_prediction", "none"]})
    insert_mlm_name_or_path: str | None = field(default=None, metadata={
        "help": "ESimCSE Table 5: masked LM predicting inserted [MASK]s (same vocabulary as the encoder)."})
    momentum_contrast: bool | None = field(default=None, metadata={
        "help": "ESimCSE: momentum encoder + queue negatives (default true; false = repetition alone, Table 4)."})
    momentum: float | None = field(default=None, metadata={"help": "ESimCSE: EMA coefficient lambda (0.995)."})
    queue_size: int | None = field(default=None, metadata={
        "help": "ESimCSE: queue length (160 = 2.5 x batch 64; Table 10 tries 1/1.5/2/2.5/3 x batch)."})
    queue_through_mlp: bool | None = field(default=None, metadata={
        "help": "ESimCSE: queue = momentum [CLS] through the ONLINE MLP (code) instead of the momentum MLP "
                "(default false)."})
    gather_queue: bool | None = field(default=None, metadata={
        "help": "ESimCSE: every process enqueues the gathered global batch (default true; code: false)."})

    # --- SimCSE++ ablations (docs/simcse_pp.md) ---
    noise_study: str | None = field(default=None, metadata={
        "help": "SimCSE++ Table 1: +/- noise in the positive or negative pairs.",
        "choices": ["none", "pos_plus", "pos_minus", "neg_plus", "neg_minus"]})
    noise_variance: float | None = field(default=None, metadata={"help": "Table 1: Gaussian noise variance (0.1)."})
    noise_samples: int | None = field(default=None, metadata={"help": "Table 1: K dropout samples averaged (10)."})
    barlow_weight: float | None = field(default=None, metadata={
        "help": "SimCSE++ Table 2: weight of an added BarlowTwins loss (0 = off)."})
    barlow_lambda: float | None = field(default=None, metadata={
        "help": "Table 2: BarlowTwins off-diagonal weight (0.0051)."})
    barlow_pad: int | None = field(default=None, metadata={
        "help": "Table 2: M artificial standard-Gaussian embeddings padded into the batch (100/300/704)."})

    # --- S-SimCSE (Zhang & Lan; docs/s_simcse.md) ---
    dropout_dist: str | None = field(default=None, metadata={
        "help": "S-SimCSE: distribution of dropout rates (uniform for s_simcse, none = fixed rate).",
        "choices": ["none", "uniform", "normal"]})
    dropout_low: float | None = field(default=None, metadata={"help": "S-SimCSE: lowest rate (0.05)."})
    dropout_high: float | None = field(default=None, metadata={"help": "S-SimCSE: highest rate (0.15)."})
    sentence_wise_dropout: bool | None = field(default=None, metadata={
        "help": "S-SimCSE: a rate per sentence ('w/ sd', default for s_simcse) instead of per forward pass."})
    dropout_sample_per_op: bool | None = field(default=None, metadata={
        "help": "S-SimCSE: redraw at every dropout operation (default true) instead of once per pass."})

    def config_overrides(self) -> dict[str, Any]:
        """The explicitly given method fields, as ``ContrastiveConfig`` keyword arguments, on top of the
        ``--fidelity`` preset's values (``models.presets``)."""
        from models.presets import fidelity_overrides

        explicit = {f.name: getattr(self, f.name) for f in fields(self)
                    if f.name not in ("method", "fidelity") and getattr(self, f.name) is not None}
        return {**fidelity_overrides(self.fidelity), **explicit}


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
        default=None, metadata={"help": "bf16 autocast; default: on when a bf16-capable GPU is present."})
    tf32: bool | None = field(default=None, metadata={"help": "TF32 matmuls; default: on with an Ampere+ GPU."})
    eval_dtype: str = field(default="fp32", metadata={
        "help": "Precision of every evaluation of the run (STS-B dev during training, the final scores): fp32 "
                "(default: autocast and TF32 off, as the papers evaluated, whatever bf16/tf32 training uses) or bf16 "
                "autocast. Recorded in all_results.json and the model card.", "choices": ["fp32", "bf16"]})
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
    cache_chunk_size: int | None = field(default=None, metadata={
        "help": "Cached step (GradCache, docs/cached_training.md): the backbone encodes at most N sentences at a "
                "time, the loss still sees the whole batch, and the gradients equal the uncached step's (the replay "
                "re-draws the same dropout). Off by default."})

    def __post_init__(self) -> None:
        refuse_single_process_launch()
        self.derive_evaluation_dependent_settings()
        if self.report_to is None:
            from transformers.integrations import is_tensorboard_available

            self.report_to = "tensorboard" if is_tensorboard_available() else "none"
        gpu_bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        if self.bf16 is None:
            self.bf16 = gpu_bf16 and not self.fp16
        if self.tf32 is None:
            self.tf32 = True if gpu_bf16 else None
        if not torch.accelerator.is_available():
            self.dataloader_pin_memory = False  # nothing to pin for; torch would warn on every dataloader
        if launched_world_size() > 1 and not torch.cuda.is_available():
            self.use_cpu = True  # accelerate only sets up multi-process CPU (gloo) training when asked for the CPU
        super().__post_init__()
        refuse_data_parallel(self)
        refuse_silent_single_process(self)

    def derive_evaluation_dependent_settings(self) -> None:
        """``save_strategy`` and ``load_best_model_at_end`` left unset follow ``eval_strategy``: with evaluation,
        save the best and reload it; without, save every ``save_steps`` (the last kept) and export the final model.
        Set explicitly, they are kept (and a contradiction is the Trainer's error, shown as a one-line message)."""
        evaluating = str(getattr(self.eval_strategy, "value", self.eval_strategy)) != "no"
        if self.save_strategy is None:
            self.save_strategy = "best" if evaluating else "steps"
        if self.load_best_model_at_end is None:
            self.load_best_model_at_end = evaluating


def refuse_data_parallel(args: TrainingArguments) -> None:
    """Several GPUs without a distributed launch make the Trainer use DataParallel, which never gathers negatives
    across replicas (each sees 1/N of the batch) and breaks the objective. Refuse it with the fix."""
    if args.parallel_mode == ParallelMode.NOT_DISTRIBUTED and args.n_gpu > 1:
        raise UsageError(
            f"{torch.cuda.device_count()} GPUs are visible but this is not a distributed launch, so the Trainer "
            "would use DataParallel, which does not gather in-batch negatives across GPUs. Launch one process "
            f"per GPU instead:\n  accelerate launch --num_processes {args.n_gpu} {Path(sys.argv[0]).name} ...\n"
            f"  torchrun --nproc_per_node {args.n_gpu} {Path(sys.argv[0]).name} ...\n"
            "or use a single GPU: CUDA_VISIBLE_DEVICES=0 python ...")


def launched_world_size() -> int:
    """Processes started by the launcher (torchrun / accelerate launch set ``WORLD_SIZE``)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def refuse_silent_single_process(args: TrainingArguments) -> None:
    """N launched processes that each train alone on the full data would silently run N independent jobs."""
    if launched_world_size() > 1 and args.parallel_mode != ParallelMode.DISTRIBUTED:
        raise UsageError(f"launched with WORLD_SIZE={launched_world_size()} but the Trainer did not set up "
                         f"distributed training (parallel mode {args.parallel_mode}); check the launcher's "
                         "environment (MASTER_ADDR/PORT, backend) or launch a single process")


CONFIG_SUFFIXES = (".yaml", ".yml", ".json")


def config_file_to_argv(path: str) -> list[str]:
    """A yaml/json config file -> ``--key value`` tokens (so explicit command-line flags placed after it win)."""
    import json

    import yaml

    text = Path(path).read_text(encoding="utf-8")
    values = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    if not isinstance(values, dict):
        raise UsageError(f"{path}: expected a mapping of argument names to values, got {type(values).__name__}")
    argv: list[str] = []
    for key, value in values.items():
        items = value if isinstance(value, list) else [value]
        argv += [f"--{key}", *(str(item) for item in items)]
    return argv


def parse_args(dataclass_types: tuple[type, ...], argv: list[str] | None = None,
               description: str | None = None) -> tuple[Any, ...]:
    """Parse ``[config.yaml|config.json] [--flag value ...]`` into the given dataclasses.

    A leading config file supplies values like HfArgumentParser's ``parse_yaml_file``/``parse_json_file``; flags
    after it override single entries. Unknown keys are an error naming them.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0].endswith(CONFIG_SUFFIXES) and not argv[0].startswith("-"):
        argv = config_file_to_argv(argv[0]) + argv[1:]
    parser = build_parser(dataclass_types, description)
    with reraise_as(UsageError, ValueError):  # the Trainer's checks of flag combinations
        *parsed, unknown = parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
    if unknown:
        raise UsageError(unknown_arguments_message(parser, unknown))
    return tuple(parsed)


def unknown_arguments_message(parser: HfArgumentParser, unknown: list[str]) -> str:
    """``unknown argument(s): --lerning_rate 3 (did you mean --learning_rate?) ...``"""
    import difflib

    options = [option for action in parser._actions for option in action.option_strings]
    guesses = [match for token in unknown if token.startswith("--")
               for match in difflib.get_close_matches(token.split("=", 1)[0], options, n=1)]
    hint = f" (did you mean {', '.join(dict.fromkeys(guesses))}?)" if guesses else ""
    return f"unknown argument(s): {' '.join(unknown)}{hint}; --help lists the flags, --help_all all of them"


def build_parser(dataclass_types: tuple[type, ...], description: str | None = None) -> HfArgumentParser:
    """The parser of the training scripts: one help group per dataclass, inherited Trainer flags behind --help_all.
    ``description``: the script's docstring (its first paragraph is shown)."""
    parser = HfArgumentParser(dataclass_types, description=(description or "").split("\n\n")[0] or None,
                              usage=USAGE, formatter_class=CompactHelpFormatter)
    hide_inherited_trainer_flags(parser, dataclass_types)
    move_to_front(parser, "method")
    move_group_first(parser, "learning_rate")  # the recipe first, then model, data and the method's flags
    return parser
