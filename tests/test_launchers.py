"""Both launchers through the real run_unsup.py: ``accelerate launch --cpu --num_processes 2`` (accelerate starts ONE
process there) is refused with a torchrun command, and that very command trains with two processes."""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.launch import REPO_ROOT, run_torchrun, torchrun_timeout
from tests.tiny import tiny_corpus


def test_accelerate_cpu_two_processes_is_refused_and_the_suggested_torchrun_works(backbone, tmp_path):
    accelerate = shutil.which("accelerate", path=str(Path(sys.executable).parent)) or shutil.which("accelerate")
    if accelerate is None:
        pytest.skip("accelerate's launcher is not installed next to the interpreter")
    out = tmp_path / "run"
    args = ["run_unsup.py", "--model_name_or_path", str(backbone), "--train_file", str(tiny_corpus(tmp_path / "c.txt")),
            "--output_dir", str(out), "--max_steps", "2", "--eval_strategy", "no", "--per_device_train_batch_size",
            "4", "--disable_tqdm", "true"]
    refused = subprocess.run([accelerate, "launch", "--cpu", "--num_processes", "2", "--num_machines", "1",
                              "--mixed_precision", "no", "--dynamo_backend", "no", *args], cwd=REPO_ROOT,
                             env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"},
                             capture_output=True, text=True, timeout=torchrun_timeout())
    assert refused.returncode != 0
    assert "run_unsup.py: error: `accelerate launch --num_processes 2` started ONE process" in refused.stderr
    assert not out.exists()  # the lone process trained nothing

    suggestion = refused.stderr.split("instead (gloo on CPU, NCCL on GPUs):\n", 1)[1].splitlines()[0].strip()
    command = shlex.split(suggestion)
    assert command[:4] == ["torchrun", "--nproc_per_node", "2", "run_unsup.py"] and command[4:] == args[1:]
    output = run_torchrun(command[3:])  # torchrun --nproc_per_node 2 (+ a free port) run_unsup.py ...
    assert "=== simcse: run summary ===" in output
    assert (out / "export" / "hf" / "model.safetensors").is_file()
