"""The GPU's default training run on each backbone type, simulated on a CPU: does the step graph capture the step,
and do its steps equal the run without the graph?

    python -m bench.backbone_sweep --output_json bench/results/cpu_backbone_sweep.json
    python -m bench.backbone_sweep --archs deberta-v2 ibert --settings promptbert simcse

For each backbone type (a tiny random model of it, built in code: ``tests/tiny.py``) and each method setting, the
method's script (``run_unsup.py`` / ``run_diffcse.py``, in this process) trains ``--steps`` steps of batch 8 twice,
as a GPU run does by default: the fast path (fixed shapes, the layers compiled one at a time, ``aot_eager`` so that
the simulation sees every operation), once with the step graph, whose CUDA graph is simulated by
``tests/op_tape.OpTape`` (a replay re-runs the recorded operations on the captured tensors, as a CUDA graph its
kernels; a host read inside the capture fails, as on a GPU), and once with ``--step_graph false``. A row says:

- ``captured``: the step graph captured the step and replayed it; ``equal`` whether every logged loss and gradient
  norm is the run without the graph's, bit for bit;
- ``not captured``: the run went on without the graph, and the reason it logged (e.g. a host read, and its line);
- ``refused``: the script stopped with a usage error before training (its one line), as it would on a GPU;
- ``failed``: anything else raised (its type and message): a bug to look at.

This is the sweep behind docs/cuda_paths.md's host-read row (9 backbone types x 7 settings, 2026-12-02/03); the
suite runs two of its rows (``tests/test_bench.py``). On a GPU the real graph runs: ``scripts/gpu_check.sh``.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

#: The backbone types swept by default: ``tests.tiny.tiny_config``'s architectures (RoFormer's, in
#: ``tests/test_promptbert.py``, aside).
ARCHS = ("bert", "roberta", "distilbert", "albert", "electra", "deberta-v2", "mpnet", "modernbert", "ibert")

#: More encoders (transformers 5.20 to 5.25 have them) swept on request (``--archs``; 2026-12-04): EuroBERT, GTE,
#: Jina embeddings v3 and Nomic BERT (rotary positions), RoCBert.
MORE_ARCHS = ("eurobert", "gte", "jina_embeddings_v3", "nomic_bert", "roc_bert")

#: The table's backbone column: the longest name.
ARCH_WIDTH = max(map(len, ARCHS + MORE_ARCHS))

#: Method settings: name -> (method, flags). Stream masks are the default; the row-seeded ones are the keyed masks.
SETTINGS: dict[str, tuple[str, list[str]]] = {
    "simcse": ("simcse", []),
    "simcse_row_seeded": ("simcse", ["--dropout_masks", "row_seeded"]),
    "esimcse": ("esimcse", ["--queue_size", "20"]),  # 2.5 x batch 8, the paper's 160 at batch 64: full at step 3
    "simcse_pp": ("simcse_pp", []),
    "s_simcse_row_seeded": ("s_simcse", ["--dropout_masks", "row_seeded"]),
    "promptbert": ("promptbert", []),
    "diffcse_row_seeded": ("diffcse", ["--dropout_masks", "row_seeded"]),
}


@dataclass
class SweepRow:
    """One backbone type under one method setting (the module docstring)."""
    arch: str
    setting: str
    outcome: str  # "captured" | "not captured" | "refused" | "failed"
    replays: int = 0
    equal: bool | None = None  # the logged steps are the run without the graph's (None: nothing to compare)
    reason: str = ""


@contextlib.contextmanager
def recorded_trainer_logs() -> Iterator[tuple[list[dict], list[Any]]]:
    """While open, every training log row a ``CLTrainer`` writes (the rows with a loss) and the last trainer that
    logged: ``(rows, [trainer])``."""
    from trainers.cl_trainer import CLTrainer

    logged: list[dict] = []
    trainers: list[Any] = []
    original_log = CLTrainer.log

    def record(self, logs, start_time=None):
        if "loss" in logs:
            logged.append(dict(logs))
        trainers[:] = [self]
        return original_log(self, logs, start_time)

    CLTrainer.log = record
    try:
        yield logged, trainers
    finally:
        CLTrainer.log = original_log


def run_method(method: str, argv: list[str], generator: str | Path | None = None) -> tuple[list[dict], Any, dict]:
    """``run_unsup.py --method method`` (``run_diffcse.py`` for diffcse, its generator ``generator``) with ``argv``,
    in this process -> its logged rows, its trainer and its final metrics."""
    import run_diffcse
    import run_unsup

    with recorded_trainer_logs() as (logged, trainers):
        if method == "diffcse":
            metrics = run_diffcse.main([*argv, "--generator_name", str(generator)])
        else:
            metrics = run_unsup.main([*argv, "--method", method])
    return logged, trainers[0], metrics


@contextlib.contextmanager
def simulated_cuda_graphs() -> Iterator[None]:
    """The step graph's backend replaced by the op tape (``tests/op_tape.py``) while open: a CPU run captures."""
    import trainers.step_graph as step_graph
    from tests.op_tape import OpTape

    original = step_graph.new_backend
    step_graph.new_backend = OpTape
    try:
        yield
    finally:
        step_graph.new_backend = original


def simulated_gpu_argv(backbone: str | Path, corpus: str | Path, steps: int) -> list[str]:
    """The flags of a short CPU run of the GPU's default path (the module docstring): ``steps`` steps of batch 8 on
    ``backbone`` and ``corpus``, fp32, no evaluation or checkpoint, the fast path compiled with ``aot_eager``."""
    from tests.tiny import FAST_TRAINING_ARGS

    return ["--model_name_or_path", str(backbone), "--train_file", str(corpus), "--max_steps", str(steps),
            "--eval_strategy", "no", "--save_strategy", "no", "--seed", "7", "--max_seq_length", "12",
            "--torch_compile", "true", "--torch_compile_backend", "aot_eager", *FAST_TRAINING_ARGS]


def sweep_one(arch: str, setting: str, root: Path, steps: int, corpus: Path, generator: Path) -> SweepRow:
    """One row (the module docstring): the two runs of ``setting`` on a tiny ``arch`` backbone under ``root``."""
    import torch

    from tests.tiny import save_tiny_backbone
    from trainers.errors import UserError

    backbone = root / arch
    method, flags = SETTINGS[setting]
    argv = [*simulated_gpu_argv(backbone, corpus, steps), *flags]
    out = root / "runs" / f"{arch}-{setting}"
    runs_output = io.StringIO()  # the runs' summaries and progress bars: the row says what matters
    try:
        with contextlib.redirect_stdout(runs_output), contextlib.redirect_stderr(runs_output):
            if not backbone.exists():
                save_tiny_backbone(backbone, arch=arch, seed=0, dropout=0.1)
            torch._dynamo.reset()  # each run compiles afresh, as in a process of its own (no recompile limit shared)
            without, _, _ = run_method(method, [*argv, "--output_dir", str(out / "without"), "--step_graph", "false",
                                                "--torch_compile_regions", "layers"], generator)
            torch._dynamo.reset()
            with simulated_cuda_graphs():
                graphed, trainer, metrics = run_method(method, [*argv, "--output_dir", str(out / "graph")],
                                                       generator)
    except UserError as error:
        return SweepRow(arch, setting, "refused", reason=" ".join(str(error).split()))
    except SystemExit as error:  # argparse's refusal: its line, the last the run wrote
        last = (runs_output.getvalue().strip().splitlines() or [f"exited with status {error.code}"])[-1]
        return SweepRow(arch, setting, "refused", reason=last)
    except Exception as error:  # a bug, reported in its row: the sweep goes on
        return SweepRow(arch, setting, "failed", reason=f"{type(error).__name__}: {' '.join(str(error).split())}")
    graph = trainer.step_graph
    replays = int(metrics.get("step_graph_replays", 0))
    equal = ([(r["loss"], r["grad_norm"]) for r in graphed] == [(r["loss"], r["grad_norm"]) for r in without]
             and len(graphed) == steps)
    if graph is None or graph.failure is not None or not graph.captured:
        reason = ("the run took no step graph" if graph is None else graph.failure
                  or f"no step was captured in {steps} steps (the step's shapes never settled)")
        return SweepRow(arch, setting, "not captured", replays, equal, reason)
    return SweepRow(arch, setting, "captured", replays, equal)


def sweep(archs: list[str], settings: list[str], steps: int = 8,
          report: Callable[[SweepRow], None] = lambda row: None) -> list[SweepRow]:
    """Every (arch, setting) row, each reported as it ends."""
    from tests.tiny import save_tiny_generator, tiny_corpus

    rows = []
    with tempfile.TemporaryDirectory(prefix="backbone_sweep_") as folder:
        root = Path(folder)
        corpus = tiny_corpus(root / "corpus.txt", n=max(8 * steps, 16))
        with contextlib.redirect_stderr(io.StringIO()):  # its progress bar
            generator = save_tiny_generator(root / "generator")
        for arch in archs:
            for setting in settings:
                rows.append(sweep_one(arch, setting, root, steps, corpus, generator))
                report(rows[-1])
    return rows


def render(row: SweepRow) -> str:
    """One line of the table."""
    equal = {None: "", True: "steps equal", False: "STEPS DIFFER"}[row.equal]
    detail = f"replays: {row.replays}, {equal}" if row.outcome == "captured" else "; ".join(
        part for part in (equal, row.reason) if part)
    return f"{row.arch:<{ARCH_WIDTH}} {row.setting:<20} {row.outcome:<13} {detail}"


def main(argv: list[str] | None = None) -> list[SweepRow]:
    parser = argparse.ArgumentParser(prog="python -m bench.backbone_sweep", description=__doc__.split("\n\n")[0])
    parser.add_argument("--archs", nargs="+", default=list(ARCHS), choices=ARCHS + MORE_ARCHS)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--steps", type=int, default=8, help="training steps per run (batch 8)")
    parser.add_argument("--output_json", type=Path, help="write the rows there")
    args = parser.parse_args(argv)
    print(f"{'backbone':<{ARCH_WIDTH}} {'setting':<20} {'outcome':<13} detail", flush=True)
    logger = logging.getLogger("cse_repro")
    level = logger.level
    logger.setLevel(logging.ERROR)  # the runs' warnings: the reason is in the row
    try:
        rows = sweep(args.archs, args.settings, args.steps, report=lambda row: print(render(row), flush=True))
    finally:
        logger.setLevel(level)  # a caller in this process (a test) logs as before
    if args.output_json:
        args.output_json.parent.mkdir(parents=True, exist_ok=True)
        args.output_json.write_text(json.dumps([asdict(row) for row in rows], indent=1) + "\n")
    return rows


if __name__ == "__main__":
    main()
