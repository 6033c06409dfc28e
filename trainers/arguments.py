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


@dataclass
class ModelArguments:
    model_name_or_path: str = field(
        default="bert-base-uncased", metadata={"help": "Backbone: any AutoModel name or local folder."})
    pooler_type: str | None = field(
        default=None, metadata={"help": "cls | cls_before_pooler | avg | avg_first_last | avg_top2 (default: cls)."})
    mlp_only_train: bool | None = field(
        default=None, metadata={"help": "Use the MLP projector in training only (unsupervised SimCSE: true)."})
    projector: str | None = field(default=None, metadata={"help": "mlp | batchnorm | none (default: mlp)."})
    temp: float | None = field(default=None, metadata={"help": "Temperature tau of the InfoNCE loss (0.05)."})
    attn_implementation: str | None = field(default="sdpa", metadata={"help": "Backbone attention kernel."})
    cache_dir: str | None = field(default=None, metadata={"help": "Hugging Face cache directory."})


@dataclass
class DataArguments:
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
class MethodArguments:
    method: str = field(default="simcse", metadata={"help": "simcse | sup_simcse | esimcse | simcse_pp | s_simcse"})
    hard_negative_weight: float | None = field(
        default=None, metadata={"help": "Supervised SimCSE: log-weight added to the own hard-negative logit."})
    gather_negatives: bool | None = field(
        default=None, metadata={"help": "All-gather negatives across processes (default true)."})

    def config_overrides(self) -> dict[str, Any]:
        """The explicitly given method fields, as ``ContrastiveConfig`` keyword arguments."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name != "method" and getattr(self, f.name) is not None}


@dataclass
class CLTrainingArguments(TrainingArguments):
    """``TrainingArguments`` with the SimCSE recipe as defaults; best checkpoint by STS-B dev Spearman."""

    output_dir: str | None = field(default="outputs/simcse")
    learning_rate: float = field(default=3e-5)
    per_device_train_batch_size: int = field(default=64)
    num_train_epochs: float = field(default=1.0)
    eval_strategy: IntervalStrategy | str = field(default="steps")
    eval_steps: float | None = field(default=125)
    save_strategy: SaveStrategy | str = field(default="best")
    save_total_limit: int | None = field(default=1)
    metric_for_best_model: str | None = field(default="stsb_spearman")
    greater_is_better: bool | None = field(default=True)
    load_best_model_at_end: bool = field(default=True)
    logging_steps: float = field(default=25)
    weight_decay: float = field(default=0.0)
    warmup_steps: float = field(default=0)
    lr_scheduler_type: SchedulerType | str = field(default="linear")
    seed: int = field(default=42)
    remove_unused_columns: bool = field(default=False)
    report_to: None | str | list[str] = field(default="none")
    bf16: bool | None = field(
        default=None, metadata={"help": "bf16 autocast; default: on when a bf16-capable GPU is present."})
    tf32: bool | None = field(default=None, metadata={"help": "TF32 matmuls; default: on with an Ampere+ GPU."})
    eval_transfer: bool = field(
        default=False, metadata={"help": "Also evaluate SentEval transfer dev accuracies (fasttest) at each eval."})
    evaluate_at_start: bool = field(
        default=True, metadata={"help": "Evaluate STS-B dev before the first step (the 'before' number)."})
    export_dir: str | None = field(
        default=None, metadata={"help": "Where the plain HF + sentence-transformers exports go (default: "
                                        "<output_dir>/export)."})

    def __post_init__(self) -> None:
        gpu_bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        if self.bf16 is None:
            self.bf16 = gpu_bf16 and not self.fp16
        if self.tf32 is None:
            self.tf32 = True if gpu_bf16 else None
        super().__post_init__()
        refuse_data_parallel(self)


def refuse_data_parallel(args: TrainingArguments) -> None:
    """Several GPUs without a distributed launch make the Trainer use DataParallel, which never gathers negatives
    across replicas (each sees 1/N of the batch) and breaks the objective. Refuse it with the fix."""
    if args.parallel_mode == ParallelMode.NOT_DISTRIBUTED and args.n_gpu > 1:
        raise SystemExit(
            f"{torch.cuda.device_count()} GPUs are visible but this is not a distributed launch, so the Trainer "
            "would use DataParallel, which does not gather in-batch negatives across GPUs. Launch one process "
            f"per GPU instead:\n  accelerate launch --num_processes {args.n_gpu} {Path(sys.argv[0]).name} ...\n"
            f"  torchrun --nproc_per_node {args.n_gpu} {Path(sys.argv[0]).name} ...\n"
            "or use a single GPU: CUDA_VISIBLE_DEVICES=0 python ...")


CONFIG_SUFFIXES = (".yaml", ".yml", ".json")


def config_file_to_argv(path: str) -> list[str]:
    """A yaml/json config file -> ``--key value`` tokens (so explicit command-line flags placed after it win)."""
    import json

    import yaml

    text = Path(path).read_text(encoding="utf-8")
    values = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    if not isinstance(values, dict):
        raise SystemExit(f"{path}: expected a mapping of argument names to values, got {type(values).__name__}")
    argv: list[str] = []
    for key, value in values.items():
        items = value if isinstance(value, list) else [value]
        argv += [f"--{key}", *(str(item) for item in items)]
    return argv


def parse_args(dataclass_types: tuple[type, ...], argv: list[str] | None = None) -> tuple[Any, ...]:
    """Parse ``[config.yaml|config.json] [--flag value ...]`` into the given dataclasses.

    A leading config file supplies values like HfArgumentParser's ``parse_yaml_file``/``parse_json_file``; flags
    after it override single entries. Unknown keys are an error naming them.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0].endswith(CONFIG_SUFFIXES) and not argv[0].startswith("-"):
        argv = config_file_to_argv(argv[0]) + argv[1:]
    parser = HfArgumentParser(dataclass_types)
    return parser.parse_args_into_dataclasses(args=argv)
