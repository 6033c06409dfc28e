"""Worker for tests/test_ddp.py: several trainings through the entry points' ``main(argv)`` in ONE torchrun launch
(each launch costs two interpreters and a process group; the runs share them).

``$ENTRY_POINT_RUNS`` is a JSON list of ``[script, argv]`` pairs, script ``run_unsup`` or ``run_diffcse``; each runs
to its end (training, export) on every rank, in order. Then every rank meets and exits, as the scripts do.
"""
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import run_diffcse  # noqa: E402
import run_unsup  # noqa: E402
from trainers.errors import exit_distributed_run  # noqa: E402

SCRIPTS = {"run_unsup": run_unsup.main, "run_diffcse": run_diffcse.main}


def main() -> None:
    for script, argv in json.loads(os.environ["ENTRY_POINT_RUNS"]):
        SCRIPTS[script](argv)
    exit_distributed_run()


if __name__ == "__main__":
    main()
