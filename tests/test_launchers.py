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


def simulate_gpus(monkeypatch, count: int, environ: dict[str, str]) -> None:
    """A machine with ``count`` GPUs (tests/test_cuda_paths.py), and the launcher's environment for a worker; setting
    up the process group fails the test (a worker without its launch's other processes would wait for them)."""
    import torch

    from tests.test_cuda_paths import simulate_gpu

    simulate_gpu(monkeypatch, bf16=True, count=count)

    def set_up(*args, **kwargs):
        raise AssertionError("the run went on to set up its process group")

    monkeypatch.setattr(torch.distributed, "init_process_group", set_up)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize("gpus, processes, visible, fix", [
    (1, 2, "0", "python run_unsup.py ..."),
    (2, 4, None, "torchrun --nproc_per_node 2 run_unsup.py ..., or accelerate launch --num_processes 2 ..."),
])
def test_more_processes_than_gpus_are_refused_in_one_line_before_a_device_is_set_up(
        gpus, processes, visible, fix, backbone, tmp_path, capsys, monkeypatch):
    """``torchrun --nproc_per_node 2 run_unsup.py`` on one GPU (or under CUDA_VISIBLE_DEVICES=0): accelerate puts
    process k on GPU k mod the count, and NCCL stopped two processes on one GPU at DDP's first collective with a
    traceback ("Duplicate GPU detected"). Simulated here (no GPU): the GPU state torch reports, and the environment
    torchrun gives the last process; the real entry point refuses in one line, exit 2, before a device is set up."""
    import run_unsup
    from tests.cli import in_process

    environ = {"TORCHELASTIC_RUN_ID": "simulated", "WORLD_SIZE": str(processes), "LOCAL_WORLD_SIZE": str(processes),
               "RANK": str(processes - 1),
               "LOCAL_RANK": str(processes - 1), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29599",
               **({"CUDA_VISIBLE_DEVICES": visible} if visible else {})}
    simulate_gpus(monkeypatch, gpus, environ)
    argv = ["--model_name_or_path", str(backbone), "--train_file", str(tiny_corpus(tmp_path / "corpus.txt")),
            "--output_dir", str(tmp_path / "run"), "--max_steps", "1"]
    monkeypatch.setattr("sys.argv", ["run_unsup.py", *argv])
    result = in_process(run_unsup.main, argv, capsys)
    seen = f"{gpus} GPU{'s' if gpus > 1 else ''}" + (f" (CUDA_VISIBLE_DEVICES={visible})" if visible else "")
    assert (result.code, result.err.strip().splitlines()) == (2, [
        f"run_unsup.py: error: this launch started {processes} processes on this machine but torch sees {seen}: "
        f"each process needs a GPU of its own (NCCL refuses two processes on one). Launch one process per GPU "
        f"({fix}; keep the global batch with --per_device_train_batch_size), or make more GPUs visible."])
    assert not (tmp_path / "run").exists()


def test_as_many_processes_as_gpus_or_a_cpu_run_pass_the_check(monkeypatch):
    from command_line.launch import refuse_more_processes_than_gpus

    simulate_gpus(monkeypatch, 2, {})
    torchrun = {"TORCHELASTIC_RUN_ID": "simulated"}
    refuse_more_processes_than_gpus(False, {**torchrun, "LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": "1"})
    refuse_more_processes_than_gpus(False, {**torchrun, "LOCAL_RANK": "1"})  # no LOCAL_WORLD_SIZE: the rank decides
    refuse_more_processes_than_gpus(True, {**torchrun, "LOCAL_WORLD_SIZE": "4"})  # --use_cpu: gloo, no GPU each
    refuse_more_processes_than_gpus(False, {})  # python run_unsup.py
    # a scheduler's tasks, each with a GPU of its own (srun --gpus-per-task 1: each sees one), not torchrun's workers
    simulate_gpus(monkeypatch, 1, {})
    refuse_more_processes_than_gpus(False, {"LOCAL_WORLD_SIZE": "4", "LOCAL_RANK": "3", "CUDA_VISIBLE_DEVICES": "3"})
    with pytest.raises(Exception, match="started 3 processes on this machine but torch sees 1 GPU: "):
        refuse_more_processes_than_gpus(False, {**torchrun, "LOCAL_RANK": "2"})
