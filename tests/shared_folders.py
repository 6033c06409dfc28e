"""A folder built once per test run and shared by every pytest-xdist worker (``scripts/run_tests.sh`` runs the suite
in 2 workers with ``--dist worksteal``, which may split a module's tests between them: a module-scoped fixture
would then build its folder once in each worker; the two-process training fixtures of tests/test_ddp.py take 15-150
s each)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable

import pytest
from filelock import FileLock

BUILT = ".built"


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """The folder ``name`` after ``build(folder)`` filled it: once per run under pytest-xdist (the run's base
    folder above the workers' own, under a file lock; the other worker waits for it and reads it), a fresh one in a
    run without workers. A build that raises leaves no mark, so the next worker that needs it builds it again."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        folder = tmp_path_factory.mktemp(name)
        build(folder)
        return folder
    run_folder = tmp_path_factory.getbasetemp().parent  # pytest-N, above popen-gw0, popen-gw1
    folder = run_folder / name
    with FileLock(str(run_folder / f"{name}.lock")):
        if not (folder / BUILT).exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            (folder / BUILT).touch()
    return folder
