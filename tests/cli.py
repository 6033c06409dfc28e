"""Run the training scripts' command-line entry points the way a user does, and capture what they print.

``in_process`` runs ``run_cli(main)`` (exactly what ``python run_unsup.py`` runs under ``__main__``) in this process
(fast: no interpreter start, no re-import of torch); ``subprocess_run`` starts a real ``python run_unsup.py ...``
when the test is about the process itself (its exit status, the absence of a traceback, the environment).
"""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Result:
    """Exit status and output of one command."""

    code: int
    out: str
    err: str


def in_process(main: Callable[[list[str]], Any], argv: list[str], capsys, prog: str = "run_unsup.py") -> Result:
    """``run_cli(main)`` with ``argv``: a user error exits with its status after one ``prog: error: ...`` line."""
    from trainers.errors import run_cli

    code = 0
    try:
        run_cli(lambda: main(argv), prog=prog)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    captured = capsys.readouterr()
    return Result(code, captured.out, captured.err)


def subprocess_run(script: str, argv: list[str], *, cwd: Path = REPO_ROOT, env: dict[str, str] | None = None,
                   timeout: float = 600) -> Result:
    """``python <script> argv...`` (``script`` relative to the repository, or ``-m module``)."""
    command = [sys.executable, *(script.split() if script.startswith("-m ") else [str(REPO_ROOT / script)]), *argv]
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                   "PYTHONPATH": str(REPO_ROOT), **(env or {})}
    completed = subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True, timeout=timeout)
    return Result(completed.returncode, completed.stdout, completed.stderr)
