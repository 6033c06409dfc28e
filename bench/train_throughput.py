"""Training throughput of every method, against sentence-transformers' SimCSE recipe, on random weights.

    python -m bench.train_throughput                                   # bert-base architecture, batch 64, length 32
    python -m bench.train_throughput --config minilm --methods simcse st_mnrl --steps 30
    python -m bench.train_throughput --device cuda --output_json bench.json   # + MFU and the epoch projection

What is timed, per method (``trainers.methods.METHODS``, DiffCSE included), is the repository's real training
step: the method's collator builds the batch from text rows (outside the timed region, as a DataLoader worker
would; its cost is reported separately), then ``model(**batch).loss.backward()``, gradient clipping at 1.0 (the
Trainer's default), a fused AdamW step (the Trainer's default optimizer, ``adamw_torch_fused``), the model's
``on_optimizer_step`` hook (ESimCSE's momentum update) and ``zero_grad(set_to_none=True)``. On CUDA: bf16 autocast
and TF32, as ``CLTrainingArguments`` enable them; per-step times come from CUDA events, so the loop itself never
waits for the device. On CPU: the training default too (bf16 autocast on a CPU with native bf16, fp32 elsewhere;
``--bf16`` / ``--no-bf16`` choose for every runner).

The reference, ``st_mnrl``, is what a user would pick instead: a ``SentenceTransformer`` (Transformer + CLS
Pooling) built from the *same* backbone weights, trained on (s, s) pairs with ``MultipleNegativesRankingLoss``
(scale 20 = 1 / 0.05, SimCSE's temperature), the same batch of the same token ids padded to the same length, the
same optimizer, clipping, autocast, device and threads; its features are tokenised ahead too, and its
forward/backward/step loop is timed directly.

Weights are random (speed does not depend on them) and the text is random words of a synthetic word-level
vocabulary of the config's size, so every sentence is exactly ``--seq_len`` tokens and nothing is downloaded.

By default every method runs in its own subprocess (``--isolate``), so the peak memory is that method's alone:
CUDA ``max_memory_allocated``, or on CPU the process's peak RSS (``resource.getrusage``). ``--no-isolate`` builds
every method in one process and interleaves their timed steps round-robin, so that on a shared machine every method
meets the same interference: use it for throughput ratios there (its memory column is the process's peak, shared).
``--repeats R`` runs everything R times and reports, per method, the repeat with the median median-step time.

Reported: sentences/s (training examples/s), tokens/s (input tokens of all views per second), median step time,
peak memory, collate time per batch, the ratio to ``st_mnrl``, and on CUDA the model FLOP utilisation: FLOPs of one
real step, counted with ``torch.utils.flop_counter`` (= 6 * non-embedding params * tokens + the attention term
12 * layers * hidden * length * tokens for SimCSE; the count also covers every method's extra networks), over the
median step time and the device's dense bf16 peak (:data:`PEAK_BF16_FLOPS`). For ``simcse`` it also projects one
SimCSE epoch (15,625 steps of 64 = wiki1m) with a dev evaluation (about 4,000 sentences) every 125 steps.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import random
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from eval.fp32_precision import enable_tf32

REFERENCE = "st_mnrl"
"""The sentence-transformers MultipleNegativesRankingLoss recipe's runner name."""

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

#: Dense (no sparsity) bf16 tensor-core peaks in FLOP/s, matched by substring of ``torch.cuda.get_device_name()``,
#: first match wins (so the specific variants come before the generic names). Vendor data sheets.
PEAK_BF16_FLOPS: tuple[tuple[str, float], ...] = (
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989.4e12),      # SXM
    ("H200", 989.4e12),
    ("GH200", 989.4e12),
    ("B200", 2250e12),
    ("A100", 312e12),
    ("L40S", 362.05e12),
    ("L4", 121e12),
    ("A10G", 70e12),
    ("A10", 125e12),
    ("RTX 4090", 165.2e12),
    ("RTX 3090", 71e12),
)


# ----------------------------------------------------------------------------------------------- settings


def bert_config(name: str):
    """The backbone configs: ``bert-base`` = ``BertConfig()`` defaults (bert-base-uncased: 12 x 768, 12 heads,
    3072, vocab 30522); ``minilm`` = 6 x 384, 12 heads, 1536 (all-MiniLM-L6 / the stand-in encoder); ``tiny`` =
    2 x 128, 2 heads, 512."""
    from transformers import BertConfig

    shapes = {
        "bert-base": {},
        "minilm": {"num_hidden_layers": 6, "hidden_size": 384, "num_attention_heads": 12, "intermediate_size": 1536},
        "tiny": {"num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 2, "intermediate_size": 512},
    }
    if name not in shapes:
        raise ValueError(f"unknown config {name!r}; choose one of {', '.join(shapes)}")
    return BertConfig(**shapes[name])


def generator_config(encoder_config):
    """DiffCSE's generator for a backbone: a DistilBERT of the same width and half the depth (for ``bert-base`` this
    is distilbert-base-uncased's shape, the paper's generator)."""
    from transformers import DistilBertConfig

    return DistilBertConfig(vocab_size=encoder_config.vocab_size, dim=encoder_config.hidden_size,
                            n_layers=max(1, encoder_config.num_hidden_layers // 2),
                            n_heads=encoder_config.num_attention_heads, hidden_dim=encoder_config.intermediate_size,
                            pad_token_id=encoder_config.pad_token_id)


@dataclass
class BenchSettings:
    """One benchmark run's settings (shared by every method, so every number compares)."""

    config: str = "bert-base"
    batch_size: int = 64
    seq_len: int = 32
    steps: int = 20
    warmup: int = 3
    device: str = "cpu"
    bf16: bool | None = None
    compile: bool = False
    threads: int | None = None
    learning_rate: float = 3e-5
    max_grad_norm: float = 1.0
    seed: int = 0
    epoch_steps: int = 15625
    eval_every: int = 125
    eval_sentences: int = 4000


@dataclass
class Measurement:
    """What one method's run measured. Times in seconds, memory in MiB."""

    name: str
    step_times: list[float]
    batch_size: int
    tokens_per_step: int
    collate_seconds: float
    peak_memory_mib: float
    flops_per_step: float | None = None
    analytic_encoder_flops: float | None = None
    peak_flops: float | None = None
    eval_seconds: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def median_step(self) -> float:
        return statistics.median(self.step_times)

    @property
    def sentences_per_second(self) -> float:
        return self.batch_size / self.median_step

    @property
    def tokens_per_second(self) -> float:
        return self.tokens_per_step / self.median_step

    @property
    def mfu(self) -> float | None:
        """Model FLOP utilisation (0..1), when the device's peak is known."""
        if not self.flops_per_step or not self.peak_flops:
            return None
        return self.flops_per_step / self.median_step / self.peak_flops

    def epoch_projection(self, settings: BenchSettings) -> float | None:
        """Seconds for ``epoch_steps`` steps + a dev evaluation before training, every ``eval_every`` steps and at
        the end (what ``run_unsup.py`` does), from the median step and the measured evaluation time."""
        if self.eval_seconds is None:
            return None
        evaluations = settings.epoch_steps // settings.eval_every + 2
        return settings.epoch_steps * self.median_step + evaluations * self.eval_seconds

    def summary(self, settings: BenchSettings) -> dict[str, Any]:
        return {**asdict(self), "median_step_seconds": self.median_step,
                "sentences_per_second": self.sentences_per_second, "tokens_per_second": self.tokens_per_second,
                "mfu": self.mfu, "epoch_projection_seconds": self.epoch_projection(settings)}


# ----------------------------------------------------------------------------------------------- inputs


def synthetic_tokenizer(vocab_size: int, directory: Path):
    """A word-level ``BertTokenizerFast`` whose vocabulary is the special tokens then ``w5 .. w{vocab_size-1}``:
    one word = one token, so a sentence of n words is exactly n + 2 tokens."""
    from transformers import BertTokenizerFast

    directory.mkdir(parents=True, exist_ok=True)
    vocab = directory / "vocab.txt"
    words = [f"w{i}" for i in range(len(SPECIAL_TOKENS), vocab_size)]
    vocab.write_text("\n".join([*SPECIAL_TOKENS, *words]) + "\n", encoding="utf-8")
    return BertTokenizerFast(vocab=str(vocab), do_lower_case=True, model_max_length=512)  # vocab=: transformers 5


def random_sentences(count: int, seq_len: int, vocab_size: int, rng: random.Random) -> list[str]:
    """``count`` sentences of ``seq_len - 2`` random words (= ``seq_len`` tokens with [CLS] and [SEP])."""
    first = len(SPECIAL_TOKENS)
    return [" ".join(f"w{rng.randrange(first, vocab_size)}" for _ in range(seq_len - 2)) for _ in range(count)]


def random_rows(columns: Sequence[str], settings: BenchSettings, vocab_size: int,
                rng: random.Random) -> list[dict[str, str]]:
    """One batch of dataset rows with a random sentence in each of the method's view columns."""
    distinct = list(dict.fromkeys(columns))
    texts = {column: random_sentences(settings.batch_size, settings.seq_len, vocab_size, rng) for column in distinct}
    return [{column: texts[column][i] for column in distinct} for i in range(settings.batch_size)]


# ----------------------------------------------------------------------------------------------- device helpers


def use_bf16(settings: BenchSettings, device: torch.device) -> bool:
    """``--bf16``/``--no-bf16``, else the training default (``trainers.precision.default_bf16``): on for a
    bf16-capable GPU or a CPU with native bf16, fp32 elsewhere."""
    from trainers.precision import default_bf16

    if settings.bf16 is not None:
        return settings.bf16
    return default_bf16(on_cpu=device.type != "cuda")


def autocast(settings: BenchSettings, device: torch.device) -> contextlib.AbstractContextManager:
    """bf16 autocast when :func:`use_bf16`, for every runner alike."""
    if use_bf16(settings, device):
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def configure_device(settings: BenchSettings) -> torch.device:
    """Threads, TF32 (CUDA) and the device."""
    if settings.threads:
        torch.set_num_threads(settings.threads)
    device = torch.device(settings.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("--device cuda but no CUDA device is visible")
        enable_tf32()  # as the Trainer does (torch's per-backend API): never the legacy allow_tf32 flags
    return device


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    model = platform.processor() or "cpu"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{model} ({os.cpu_count()} cores, {torch.get_num_threads()} torch threads)"


def peak_bf16_flops(name: str) -> float | None:
    for key, flops in PEAK_BF16_FLOPS:
        if key in name:
            return flops
    return None


def peak_memory_mib(device: torch.device) -> float:
    """CUDA: ``max_memory_allocated``; CPU: the process's peak resident set (Linux reports KiB)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ----------------------------------------------------------------------------------------------- runners


@dataclass
class StepRunner:
    """A prepared training loop: ``step(batch)`` does one full optimisation step on a pre-collated batch."""

    name: str
    step: Callable[[dict[str, Any]], None]
    batches: list[Any]
    tokens_per_step: int
    collate_seconds: float
    backbones: list[torch.nn.Module]
    analytic_encoder_flops: float | None = None
    embed: Callable[[dict[str, torch.Tensor]], torch.Tensor] | None = None


def to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {key: to_device(value, device) for key, value in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(value, device) for value in batch)
    return batch


def optimizer_step_fn(parameters: list[torch.nn.Parameter], settings: BenchSettings,
                      after_step: Callable[[], None] | None = None) -> tuple[torch.optim.Optimizer, Callable[[], None]]:
    """Fused AdamW (the Trainer's default ``adamw_torch_fused``; weight decay 0 as in the SimCSE recipe) with
    gradient clipping at ``max_grad_norm``; returns the optimizer and a function doing clip + step + hook + zero."""
    optimizer = torch.optim.AdamW(parameters, lr=settings.learning_rate, weight_decay=0.0, fused=True)

    def update() -> None:
        if settings.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(parameters, settings.max_grad_norm, foreach=True)
        optimizer.step()
        if after_step is not None:
            after_step()
        optimizer.zero_grad(set_to_none=True)

    return optimizer, update


def encoder_flops(backbone: torch.nn.Module, tokens: int, seq_len: int) -> float:
    """6 * non-embedding parameters * tokens + 12 * layers * hidden * length * tokens (attention scores and
    weighted values, forward + backward): the usual model-FLOPs formula for one trained pass of ``backbone`` over
    ``tokens`` tokens of sequences of ``seq_len``."""
    config = backbone.config
    non_embedding = sum(p.numel() for name, p in backbone.named_parameters()
                        if not name.startswith(("embeddings.", "pooler.")))
    return 6.0 * non_embedding * tokens + 12.0 * config.num_hidden_layers * config.hidden_size * seq_len * tokens


def build_method_model(method: str, backbone_config, tokenizer=None, **settings):
    """The method's model around a random backbone (and a random generator for DiffCSE), assembled by the scripts'
    own builder (``trainers.methods.assemble_model``: the method's defaults, settings derived from ``tokenizer``
    such as PromptBERT's template ids, auxiliary networks synced); ``settings`` override them (e.g.
    ``dropout_masks``)."""
    from transformers import AutoModel, AutoModelForMaskedLM

    from trainers.methods import assemble_model

    encoder = AutoModel.from_config(backbone_config, attn_implementation="sdpa")
    generator = (AutoModelForMaskedLM.from_config(generator_config(backbone_config)) if method == "diffcse" else None)
    return assemble_model(method, encoder, generator=generator, tokenizer=tokenizer, **settings)


def collate_batches(collate: Callable[[list[dict[str, str]]], Any], columns: Sequence[str], count: int,
                    settings: BenchSettings, vocab_size: int) -> tuple[list[Any], float]:
    """``count`` collated batches and the mean collate time per batch (seconds)."""
    rng = random.Random(settings.seed)
    rows = [random_rows(columns, settings, vocab_size, rng) for _ in range(count)]
    started = time.perf_counter()
    batches = [collate(batch_rows) for batch_rows in rows]
    return batches, (time.perf_counter() - started) / count


def repo_runner(method: str, settings: BenchSettings, backbone_config, tokenizer, device: torch.device) -> StepRunner:
    """The repository's training step for ``method``."""
    from models.views import ViewLayout
    from trainers.keyed_dropout import keyed_step
    from trainers.methods import build_collator

    torch.manual_seed(settings.seed)
    model = build_method_model(method, backbone_config, tokenizer).to(device).train()
    collator = build_collator(model, tokenizer, settings.seq_len)
    batches, collate_seconds = collate_batches(collator, model.view_columns, settings.warmup + settings.steps,
                                               settings, backbone_config.vocab_size)
    parameters = [p for p in model.parameters() if p.requires_grad]
    _, update = optimizer_step_fn(parameters, settings, model.on_optimizer_step)

    def step(batch: dict[str, Any]) -> None:
        batch = to_device(batch, device)
        with keyed_step(model, batch["input_ids"].size(0)):  # row-seeded masks: the step's seed
            with autocast(settings, device):
                loss = model(**batch).loss
            loss.backward()
        update()

    def embed(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        with autocast(settings, device):
            return model.embed(**batch)

    rows = ViewLayout.from_config(model.config, batches[0]["input_ids"].shape[1]).num_rows
    analytic = encoder_flops(model.encoder, settings.batch_size * rows * settings.seq_len, settings.seq_len)
    backbones = [module for module in (model.encoder, getattr(model, "discriminator", None)) if module is not None]
    return StepRunner(method, step, batches, int(batches[0]["attention_mask"].sum()), collate_seconds, backbones,
                      analytic_encoder_flops=analytic, embed=embed if method == "simcse" else None)


def st_runner(settings: BenchSettings, backbone_config, tokenizer, device: torch.device,
              workdir: Path) -> StepRunner:
    """sentence-transformers' SimCSE recipe: Transformer + CLS Pooling, MNRL(scale=20) on (s, s) pairs."""
    from transformers import AutoModel

    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    torch.manual_seed(settings.seed)
    backbone_dir = workdir / "st_backbone"
    AutoModel.from_config(backbone_config, attn_implementation="sdpa").save_pretrained(backbone_dir)
    tokenizer.save_pretrained(backbone_dir)
    transformer = Transformer(str(backbone_dir), model_kwargs={"attn_implementation": "sdpa"},
                              max_seq_length=settings.seq_len)
    pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode="cls")
    st_model = SentenceTransformer(modules=[transformer, pooling], device=str(device))
    st_model.train()
    loss_fn = MultipleNegativesRankingLoss(st_model, scale=20.0)

    def collate(rows: list[dict[str, str]]) -> list[dict[str, Any]]:
        texts = [row["text"] for row in rows]
        features = {key: value for key, value in st_model.preprocess(texts).items() if isinstance(value, torch.Tensor)}
        return [features, dict(features)]  # the (s, s) pair: two columns of the same sentences

    batches, collate_seconds = collate_batches(collate, ("text",), settings.warmup + settings.steps, settings,
                                               backbone_config.vocab_size)
    parameters = [p for p in st_model.parameters() if p.requires_grad]
    _, update = optimizer_step_fn(parameters, settings)

    def step(pair: list[dict[str, torch.Tensor]]) -> None:
        pair = to_device(pair, device)
        with autocast(settings, device):
            loss = loss_fn(pair, None)
        loss.backward()
        update()

    tokens = int(sum(features["attention_mask"].sum() for features in batches[0]))
    analytic = encoder_flops(transformer.auto_model, 2 * settings.batch_size * settings.seq_len, settings.seq_len)
    return StepRunner(REFERENCE, step, batches, tokens, collate_seconds, [transformer.auto_model],
                      analytic_encoder_flops=analytic)


# ----------------------------------------------------------------------------------------------- measuring


def count_flops(runner: StepRunner) -> float:
    """FLOPs of one real step (forward, backward; the optimizer's are negligible and not matmuls)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        runner.step(runner.batches[0])
    return float(counter.get_total_flops())


def count_syncs(runner: StepRunner, device: torch.device) -> int | None:
    """Host-device synchronisations in one step (CUDA only): ``torch.cuda.set_sync_debug_mode("warn")`` warns
    at every synchronising call (``.item()``, ``bool(tensor)``, ``nonzero`` ...), which stalls the CPU's run-ahead."""
    if device.type != "cuda":
        return None
    import warnings

    torch.cuda.synchronize(device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            runner.step(runner.batches[0])
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum(is_sync_warning(str(warning.message)) for warning in caught)


def is_sync_warning(message: str) -> bool:
    """A warning of ``set_sync_debug_mode("warn")`` about one synchronising call, not torch's notice that the mode
    itself is a prototype ("... does not yet detect all synchronizing operations"), which every step would count."""
    return "synchroniz" in message and "prototype" not in message


def timed_step(runner: StepRunner, batch: Any, device: torch.device) -> Callable[[], float]:
    """Run one step; returns a function giving its duration in seconds. On CUDA the step is bracketed by events that
    are read only after the loop, so timing adds no host-device synchronisation to it."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        runner.step(batch)
        end.record()
        return lambda: start.elapsed_time(end) / 1000
    started = time.perf_counter()
    runner.step(batch)
    elapsed = time.perf_counter() - started
    return lambda: elapsed


def time_interleaved(runners: Sequence[StepRunner], settings: BenchSettings,
                     device: torch.device) -> list[list[float]]:
    """Warm every runner up, then time ``steps`` steps of each, round-robin (runner order rotating every step), so
    that on a shared machine every runner meets the same interference. One runner = a plain timing loop."""
    for runner in runners:
        for batch in runner.batches[: settings.warmup]:
            runner.step(batch)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    pending: list[list[Callable[[], float]]] = [[] for _ in runners]
    for step in range(settings.steps):
        for offset in range(len(runners)):
            index = (step + offset) % len(runners)
            pending[index].append(timed_step(runners[index], runners[index].batches[settings.warmup + step], device))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return [[duration() for duration in durations] for durations in pending]


@torch.no_grad()
def time_evaluation(runner: StepRunner, settings: BenchSettings, tokenizer, vocab_size: int,
                    device: torch.device) -> float | None:
    """Seconds to embed ``eval_sentences`` sentences in batches of 128 (``CLTrainer``'s evaluation batch), the
    cost of one STS-B + SICK-R dev evaluation; ``None`` for runners without an ``embed``."""
    if runner.embed is None or settings.eval_sentences <= 0:
        return None
    texts = random_sentences(settings.eval_sentences, settings.seq_len, vocab_size, random.Random(settings.seed))
    batches = [dict(tokenizer(texts[i:i + 128], return_tensors="pt", padding=True)) for i in range(0, len(texts), 128)]
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    started = time.perf_counter()
    for batch in batches:
        runner.embed(to_device(batch, device))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - started


def build_runner(name: str, settings: BenchSettings, backbone_config, tokenizer, device: torch.device,
                 workdir: Path) -> StepRunner:
    if name == REFERENCE:
        return st_runner(settings, backbone_config, tokenizer, device, workdir)
    return repo_runner(name, settings, backbone_config, tokenizer, device)


def measure(names: Sequence[str], settings: BenchSettings) -> list[Measurement]:
    """Build the runners of ``names`` in this process and time them, interleaved (:func:`time_interleaved`).

    Per runner, before timing: its FLOPs per step (one counted step; on CUDA, and for SimCSE and the reference
    everywhere, where the test compares them with the formula), ``torch.compile`` of its backbone(s) if asked,
    and on CUDA its host-device synchronisations per step. Peak memory is the process's, so it is one method's
    alone only when ``names`` has one name (``--isolate``)."""
    device = configure_device(settings)
    backbone_config = bert_config(settings.config)
    with tempfile.TemporaryDirectory(prefix="cse_bench_") as workdir:
        tokenizer = synthetic_tokenizer(backbone_config.vocab_size, Path(workdir) / "tokenizer")
        runners = [build_runner(name, settings, backbone_config, tokenizer, device, Path(workdir)) for name in names]
        flops, syncs = [], []
        for runner in runners:
            flops.append(count_flops(runner) if device.type == "cuda" or runner.name in ("simcse", REFERENCE) else None)
            if settings.compile:
                for backbone in runner.backbones:
                    backbone.compile()
            syncs.append(count_syncs(runner, device))
        step_times = time_interleaved(runners, settings, device)
        memory = peak_memory_mib(device)
        eval_seconds = [time_evaluation(runner, settings, tokenizer, backbone_config.vocab_size, device)
                        for runner in runners]
    peak = peak_bf16_flops(device_name(device)) if device.type == "cuda" else None
    return [Measurement(name=runner.name, step_times=times, batch_size=settings.batch_size,
                        tokens_per_step=runner.tokens_per_step, collate_seconds=runner.collate_seconds,
                        peak_memory_mib=memory, flops_per_step=count, analytic_encoder_flops=runner.analytic_encoder_flops,
                        peak_flops=peak, eval_seconds=evaluation,
                        extra={"syncs_per_step": sync, "memory_shared_by": len(runners)})
            for runner, times, count, sync, evaluation in zip(runners, step_times, flops, syncs, eval_seconds)]


def measure_isolated(name: str, settings: BenchSettings) -> Measurement:
    """:func:`measure` of one method in a fresh subprocess, so its peak memory is this method's alone."""
    with tempfile.TemporaryDirectory(prefix="cse_bench_worker_") as workdir:
        out = Path(workdir) / "result.json"
        command = [sys.executable, "-m", "bench.train_throughput", *settings_to_argv(settings),
                   "--_worker", name, "--_worker_out", str(out)]
        subprocess.run(command, check=True, cwd=Path(__file__).resolve().parents[1])
        return Measurement(**json.loads(out.read_text()))


def merge_repeats(runs: list[Measurement]) -> Measurement:
    """One measurement from R repeats of a method: the repeat with the median median-step time, with every
    repeat's median step time under ``extra['repeat_medians']`` and the largest peak memory."""
    ordered = sorted(runs, key=lambda m: m.median_step)
    chosen = ordered[len(ordered) // 2]
    chosen.extra["repeat_medians"] = [m.median_step for m in runs]
    chosen.peak_memory_mib = max(m.peak_memory_mib for m in runs)
    return chosen


def run_all(names: Sequence[str], settings: BenchSettings, isolate: bool, repeats: int) -> list[Measurement]:
    """Every method, ``repeats`` times. Isolated: one subprocess per method, methods alternating within a repeat.
    Not isolated: all methods in this process, their steps interleaved."""
    runs: dict[str, list[Measurement]] = {name: [] for name in names}
    for repeat in range(repeats):
        print(f"[bench] repeat {repeat + 1}/{repeats}: {', '.join(names)}", file=sys.stderr, flush=True)
        measured = [measure_isolated(name, settings) for name in names] if isolate else measure(names, settings)
        for measurement in measured:
            runs[measurement.name].append(measurement)
    return [merge_repeats(runs[name]) for name in names]


# ----------------------------------------------------------------------------------------------- reporting


def format_table(measurements: Sequence[Measurement], settings: BenchSettings) -> str:
    """A Markdown table, one row per method, with the throughput ratio to ``st_mnrl``."""
    reference = next((m for m in measurements if m.name == REFERENCE), None)
    header = ["method", "sentences/s", "tokens/s", "step ms (median)", "peak mem MiB", "collate ms", "MFU",
              f"x {REFERENCE}"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for m in measurements:
        ratio = f"{m.sentences_per_second / reference.sentences_per_second:.2f}x" if reference else "n/a"
        mfu = f"{100 * m.mfu:.1f}%" if m.mfu is not None else "n/a"
        shared = "*" if m.extra.get("memory_shared_by", 1) > 1 else ""
        cells = [m.name, f"{m.sentences_per_second:,.1f}", f"{m.tokens_per_second:,.0f}", f"{1000 * m.median_step:.1f}",
                 f"{m.peak_memory_mib:,.0f}{shared}", f"{1000 * m.collate_seconds:.1f}", mfu, ratio]
        lines.append("| " + " | ".join(cells) + " |")
    if any(m.extra.get("memory_shared_by", 1) > 1 for m in measurements):
        lines.append("\n\\* peak memory of the whole process, all methods together (--no-isolate); --isolate gives "
                     "each method's own")
    syncs = {m.name: m.extra.get("syncs_per_step") for m in measurements}
    if any(value is not None for value in syncs.values()):
        lines.append("\nhost-device synchronisations per step: "
                     + ", ".join(f"{name} {value}" for name, value in syncs.items()))
    for m in measurements:
        projection = m.epoch_projection(settings)
        if projection is not None:
            lines.append(f"\n{m.name}: one epoch of {settings.epoch_steps:,} steps with a dev evaluation every "
                         f"{settings.eval_every} steps ({m.eval_seconds:.2f} s each) projects to "
                         f"{projection / 60:.1f} min")
    return "\n".join(lines)


def default_methods() -> list[str]:
    """Every method of the registry (``trainers.methods.METHODS``) + the reference."""
    from trainers.methods import METHODS

    return [*METHODS, REFERENCE]


def settings_to_argv(settings: BenchSettings) -> list[str]:
    argv = []
    for key, value in asdict(settings).items():
        if key == "bf16" and value is not None:
            argv += ["--bf16" if value else "--no-bf16"]
        elif isinstance(value, bool):
            argv += [f"--{key}"] if value else []
        elif value is not None:
            argv += [f"--{key}", str(value)]
    return argv


def build_parser() -> argparse.ArgumentParser:
    defaults = BenchSettings()
    parser = argparse.ArgumentParser(prog="python -m bench.train_throughput", description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", nargs="+", default=None,
                        help=f"default: every registered method and {REFERENCE} (sentence-transformers MNRL)")
    parser.add_argument("--config", choices=("bert-base", "minilm", "tiny"), default=defaults.config)
    parser.add_argument("--batch_size", type=int, default=defaults.batch_size)
    parser.add_argument("--seq_len", type=int, default=defaults.seq_len)
    parser.add_argument("--steps", type=int, default=defaults.steps, help="timed steps")
    parser.add_argument("--warmup", type=int, default=defaults.warmup, help="untimed steps first")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None,
                        help="bf16 autocast for every runner (default: on for a bf16-capable GPU, off on CPU, as in "
                             "training)")
    parser.add_argument("--compile", action="store_true", help="torch.compile the backbone(s) of every runner")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--learning_rate", type=float, default=defaults.learning_rate)
    parser.add_argument("--max_grad_norm", type=float, default=defaults.max_grad_norm)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--epoch_steps", type=int, default=defaults.epoch_steps)
    parser.add_argument("--eval_every", type=int, default=defaults.eval_every)
    parser.add_argument("--eval_sentences", type=int, default=defaults.eval_sentences,
                        help="sentences per dev evaluation in the epoch projection (0: no projection)")
    parser.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=True,
                        help="one subprocess per method (its own peak memory); --no-isolate: every method in this "
                             "process, timed steps interleaved round-robin (robust ratios on a shared machine)")
    parser.add_argument("--repeats", type=int, default=1, help="run the method list this many times, alternating")
    parser.add_argument("--output_json", type=Path, default=None)
    parser.add_argument("--_worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--_worker_out", type=Path, default=None, help=argparse.SUPPRESS)
    return parser


def parse_settings(args: argparse.Namespace) -> BenchSettings:
    return BenchSettings(**{key: getattr(args, key) for key in BenchSettings.__dataclass_fields__})


def main(argv: Sequence[str] | None = None) -> list[Measurement]:
    args = build_parser().parse_args(argv)
    settings = parse_settings(args)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args._worker:
        measurements = measure([args._worker], settings)
        args._worker_out.write_text(json.dumps(asdict(measurements[0])))
        return measurements
    names = args.methods or default_methods()
    measurements = run_all(names, settings, args.isolate, args.repeats)
    device = configure_device(settings)
    print(f"\n{device_name(device)}; config {settings.config}, batch {settings.batch_size}, length {settings.seq_len}, "
          f"{settings.steps} timed steps after {settings.warmup} warm-up, bf16={use_bf16(settings, device)}, "
          f"compile={settings.compile}")
    print(format_table(measurements, settings))
    if args.output_json is not None:
        report = {"date": datetime.date.today().isoformat(), "device": device_name(device),
                  "command": "python -m bench.train_throughput " + " ".join(map(shlex.quote, sys.argv[1:] if argv is None else argv)),
                  "settings": asdict(settings), "bf16": use_bf16(settings, device), "torch": torch.__version__,
                  "results": [m.summary(settings) for m in measurements]}
        args.output_json.parent.mkdir(parents=True, exist_ok=True)
        args.output_json.write_text(json.dumps(report, indent=2) + "\n")
    return measurements


if __name__ == "__main__":
    main()
