"""Worker for tests/test_ddp.py: several trainings through the entry points' ``main(argv)`` in ONE torchrun launch
(each launch costs two interpreters and a process group; the runs share them).

``$ENTRY_POINT_RUNS`` is a JSON list of ``[script, argv]`` pairs, script ``run_unsup`` or ``run_diffcse``; each runs
to its end (training, export) on every rank, in order. Then every rank meets and exits, as the scripts do. With
``$RECORD_EVALUATIONS`` (a folder), every rank appends what each ``CLTrainer.evaluate`` returned to
``evaluations_<rank>.jsonl`` there.

As in the suite's own process (tests/conftest.py), the runs leave their training curves undrawn, and what the imports
made is frozen out of the garbage collector's reach before the first run: every run's ``gc.collect()`` (the
Trainer's ``accelerator.free_memory()``) otherwise walks it, on both processes (tests/test_ddp.py's row-seeded
launch of 20 runs: 100 -> 80 s, measured 2026-11-29).
"""
import gc
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import run_diffcse  # noqa: E402
import run_unsup  # noqa: E402
import eval.plots  # noqa: E402
from trainers.errors import exit_distributed_run  # noqa: E402

SCRIPTS = {"run_unsup": run_unsup.main, "run_diffcse": run_diffcse.main}


def record_evaluations(folder: Path) -> None:
    """Wrap ``CLTrainer.evaluate`` to append each result, with its step, to ``folder/evaluations_<rank>.jsonl``."""
    from trainers.cl_trainer import CLTrainer

    evaluate = CLTrainer.evaluate

    def recorded(self, *args, **kwargs):
        metrics = evaluate(self, *args, **kwargs)
        with open(folder / f"evaluations_{os.environ['RANK']}.jsonl", "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"step": self.state.global_step, **metrics}) + "\n")
        return metrics

    CLTrainer.evaluate = recorded


def main() -> None:
    eval.plots.plot_training_curves = lambda runs, path, title: Path(path)
    gc.collect()
    gc.freeze()
    if os.environ.get("RECORD_EVALUATIONS"):
        record_evaluations(Path(os.environ["RECORD_EVALUATIONS"]))
    for script, argv in json.loads(os.environ["ENTRY_POINT_RUNS"]):
        SCRIPTS[script](argv)
    exit_distributed_run()


if __name__ == "__main__":
    main()
