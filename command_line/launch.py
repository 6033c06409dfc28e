"""Catch a multi-process launch that started a single process.

``accelerate launch --cpu --num_processes 2 run_unsup.py ...`` (and ``--num_processes 2`` without ``--cpu`` on a
machine without GPUs) goes through accelerate's *simple* launcher, which starts several CPU processes only through
MPI (``--mpirun_hostfile``). Otherwise it starts ONE process and merely sets ``MASTER_ADDR``/``MASTER_PORT``: the
run trains alone with 1/N of the global batch and exits 0. :func:`refuse_single_process_launch` detects that
environment (accelerate's variables and a master address, but no ``WORLD_SIZE`` and no MPI rank variables) and
refuses with the torchrun command that does start N processes (gloo on CPU; tests/test_launchers.py runs both).

Also refused here: several GPUs without a distributed launch (DataParallel never gathers negatives) and N launched
processes that did not set up distributed training (N independent jobs).
"""
from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import torch
from transformers import TrainingArguments
from transformers.training_args import ParallelMode

from trainers.errors import UsageError

MPI_SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE", "PMIX_RANK")


def launcher_num_processes() -> int | None:
    """``--num_processes N`` of the parent ``accelerate launch`` command line, when it can be read."""
    try:
        import psutil

        command = psutil.Process(os.getppid()).cmdline()
    except Exception:  # noqa: BLE001 - no psutil, no permission, no parent: the count is only for the message
        return None
    for index, token in enumerate(command):
        value = None
        if token == "--num_processes" and index + 1 < len(command):
            value = command[index + 1]
        elif token.startswith("--num_processes="):
            value = token.split("=", 1)[1]
        if value is not None and value.isdigit():
            return int(value)
    return None


def single_process_accelerate_launch(environ: dict[str, str] | None = None) -> bool:
    """Whether this process was started by accelerate's simple launcher asked for several processes, without MPI."""
    env = os.environ if environ is None else environ
    started_by_accelerate = "ACCELERATE_DYNAMO_BACKEND" in env or "ACCELERATE_USE_CPU" in env
    return (started_by_accelerate and "MASTER_ADDR" in env and "WORLD_SIZE" not in env
            and not any(name in env for name in MPI_SIZE_VARIABLES))


def torchrun_command(processes: int | str, argv: list[str] | None = None) -> str:
    """``torchrun --nproc_per_node N <script> <the same arguments>``."""
    argv = list(sys.argv if argv is None else argv)
    script = argv[0] if argv else "run_unsup.py"
    try:
        script = str(Path(script).resolve().relative_to(Path.cwd()))
    except ValueError:
        pass
    return shlex.join(["torchrun", "--nproc_per_node", str(processes), script, *argv[1:]])


def refuse_single_process_launch() -> None:
    """Refuse an ``accelerate launch --num_processes N`` (N > 1) that started one process, with a working command."""
    if not single_process_accelerate_launch():
        return
    processes = launcher_num_processes()
    if processes is not None and processes < 2:
        return
    n = processes if processes is not None else "N"
    raise UsageError(
        f"`accelerate launch --num_processes {n}` started ONE process: on the CPU, accelerate starts several only "
        f"through MPI (--mpirun_hostfile), so this run would train alone on 1/{n} of the global batch. Start the "
        f"{n} processes with torchrun instead (gloo on CPU, NCCL on GPUs):\n  {torchrun_command(n)}")


def refuse_data_parallel(args: TrainingArguments) -> None:
    """Several GPUs without a distributed launch make the Trainer use DataParallel, which never gathers negatives
    across replicas (each sees 1/N of the batch) and breaks the objective. Refuse it with the fix."""
    if args.parallel_mode == ParallelMode.NOT_DISTRIBUTED and args.n_gpu > 1:
        raise UsageError(
            f"{torch.cuda.device_count()} GPUs are visible but this is not a distributed launch, so the Trainer "
            "would use DataParallel, which does not gather in-batch negatives across GPUs. Launch one process "
            f"per GPU instead:\n  accelerate launch --num_processes {args.n_gpu} {Path(sys.argv[0]).name} ...\n"
            f"  torchrun --nproc_per_node {args.n_gpu} {Path(sys.argv[0]).name} ...\n"
            "or use a single GPU: CUDA_VISIBLE_DEVICES=0 python ...")


def launched_world_size() -> int:
    """Processes started by the launcher (torchrun / accelerate launch set ``WORLD_SIZE``)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def refuse_more_processes_than_gpus(use_cpu: bool, environ: dict[str, str] | None = None) -> None:
    """A torchrun launch (``accelerate launch`` runs one too) of more processes on this machine than torch sees GPUs
    (``torchrun --nproc_per_node 2`` on one GPU, or under ``CUDA_VISIBLE_DEVICES=0``): accelerate puts process k on
    GPU k mod the count, so two processes share a GPU, and NCCL refuses them at DDP's first collective with a
    traceback ("ncclInvalidUsage ... Duplicate GPU detected : rank 1 and rank 0 both on CUDA device ..."). Refused
    in one line before any device is set up. Only under torchrun's agent (``TORCHELASTIC_RUN_ID``), whose processes
    all see the devices it saw: a scheduler that gives each task its own GPU (``srun --gpus-per-task 1``) starts
    processes that each see one. A ``--use_cpu`` run (gloo) is not about GPUs."""
    env = os.environ if environ is None else environ
    if use_cpu or "TORCHELASTIC_RUN_ID" not in env or not torch.cuda.is_available():
        return
    local = int(env.get("LOCAL_WORLD_SIZE") or int(env.get("LOCAL_RANK", "0")) + 1)
    gpus = torch.cuda.device_count()
    if local <= gpus:
        return
    visible = env.get("CUDA_VISIBLE_DEVICES")
    seen = f"{gpus} GPU{'s' if gpus != 1 else ''}" + (f" (CUDA_VISIBLE_DEVICES={visible})" if visible else "")
    script = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "run_unsup.py"
    one_each = (f"python {script} ..." if gpus == 1 else
                f"torchrun --nproc_per_node {gpus} {script} ..., or accelerate launch --num_processes {gpus} ...")
    raise UsageError(f"this launch started {local} processes on this machine but torch sees {seen}: each "
                     f"process needs a GPU of its own (NCCL refuses two processes on one). Launch one process per GPU "
                     f"({one_each}; keep the global batch with --per_device_train_batch_size), or make more GPUs "
                     f"visible.")


def refuse_silent_single_process(args: TrainingArguments) -> None:
    """N launched processes that each train alone on the full data would silently run N independent jobs."""
    if launched_world_size() > 1 and args.parallel_mode != ParallelMode.DISTRIBUTED:
        raise UsageError(f"launched with WORLD_SIZE={launched_world_size()} but the Trainer did not set up "
                         f"distributed training (parallel mode {args.parallel_mode}); check the launcher's "
                         "environment (MASTER_ADDR/PORT, backend) or launch a single process")


__all__ = ["launched_world_size", "launcher_num_processes", "refuse_data_parallel", "refuse_more_processes_than_gpus",
           "refuse_silent_single_process", "refuse_single_process_launch", "single_process_accelerate_launch",
           "torchrun_command"]
