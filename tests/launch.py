"""Run a command as two gloo processes under torchrun, for the DDP tests.

Each launch gets a free port of its own (concurrent torchruns must not meet) and its own process group, so a run
that overruns the time limit is killed with its workers and fails the test with the end of its output. The limit
is ``$CSE_TORCHRUN_TIMEOUT`` seconds (default 600): on a small shared CPU machine two processes that wait on each
other at every collective can take minutes when other jobs hold the cores.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
METHODS_WORKER = Path(__file__).parent / "workers" / "methods_ddp_steps.py"
#: Several trainings through the entry points in one torchrun launch (``$ENTRY_POINT_RUNS``).
ENTRY_POINTS_WORKER = Path(__file__).parent / "workers" / "entry_point_runs.py"


def torchrun_timeout() -> float:
    return float(os.environ.get("CSE_TORCHRUN_TIMEOUT", "600"))


def run_torchrun(args: list[str], env: dict[str, str] | None = None, nproc: int = 2, returncode: int = 0) -> str:
    """``torchrun --nproc_per_node nproc args...`` from the repository root, one intra-op thread per process;
    returns its combined output, fails the test on another exit status than ``returncode`` (torchrun's own: 1 when
    a worker failed) or a timeout, skips it without torchrun."""
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun not found next to the interpreter or on PATH")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [torchrun, "--nnodes", "1", "--nproc_per_node", str(nproc), "--rdzv_backend", "c10d",
               "--rdzv_endpoint", f"127.0.0.1:{port}", *args]
    process = subprocess.Popen(command, cwd=REPO_ROOT, env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=torchrun_timeout())
    except subprocess.TimeoutExpired:
        kill_process_tree(process.pid)  # torchrun and its workers (they run in sessions of their own)
        output, _ = process.communicate()
        pytest.fail(f"torchrun did not finish in {torchrun_timeout():.0f} s (CSE_TORCHRUN_TIMEOUT):\n{output[-3000:]}")
    assert process.returncode == returncode, output[-6000:]
    return output


def kill_process_tree(pid: int) -> None:
    """SIGKILL ``pid`` and every descendant: torchrun starts each worker in a session of its own, so killing the
    launcher's process group would leave a hung worker holding the output pipe open (and the test waiting on it)."""
    import psutil

    try:
        parent = psutil.Process(pid)
        processes = [*parent.children(recursive=True), parent]
    except psutil.NoSuchProcess:
        return
    for process in processes:
        try:
            process.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass


def run_ddp_cases(tmp_path: Path, model_dir: Path, batches: list[dict], cases: list[dict]) -> None:
    """``tests/workers/methods_ddp_steps.py`` on ``batches`` for every case (its ranks save what the test
    compares under ``tmp_path``)."""
    torch.save(batches, tmp_path / "batches.pt")
    run_torchrun([str(METHODS_WORKER)], env={"DDP_MODEL_DIR": str(model_dir), "DDP_BATCH": str(tmp_path / "batches.pt"),
                                             "DDP_OUT": str(tmp_path), "DDP_CASES": json.dumps(cases)})
