"""Where a real training step's time goes: the script a user types, with ``torch.profiler`` over a window of steps.

    python -m bench.step_profile --steps 40:60 --output_json prof.json -- run_unsup.py --method simcse ...

Runs the training script (``run_unsup.py`` / ``run_diffcse.py``, then its flags) in this process with a
:class:`StepProfiler` callback added to every ``CLTrainer``: it profiles the optimizer steps ``START`` to ``END``
(after the compile warm-up), then reports per step: the wall time (between synchronised clocks), the device's busy
time (the sum of its kernels' durations: when it is well below the wall time the step waits on the host), the host
time of the step's parts (data loading, forward, backward, optimizer, the Trainer's own work), the ten operators
with the most host time, and the device kernels with the most device time (what the busy time is made of: the
kernels run inside CUDA graphs are counted one by one) with the kernels launched per step. All go to the terminal
and to ``--output_json``.
"""
from __future__ import annotations

import argparse
import json
import runpy
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import torch
from torch.autograd import DeviceType
from transformers import TrainerCallback

__all__ = ["StepProfiler", "main", "summarise"]

#: The device kernels reported (by their own device time), and the characters of a kernel's name kept (templated
#: GEMM names run to hundreds).
TOP_KERNELS = 15
KERNEL_NAME_CHARACTERS = 160

#: The step's parts: the ``CLTrainer`` methods :func:`mark_parts` wraps in ``record_function`` regions, and torch's
#: own optimizer regions.
MARKED = {"data": "get_batch_samples", "forward": "compute_loss", "backward+step": "training_step",
          "clip_grad_norm": "_clip_grad_norm"}
PARTS = {**{part: (f"cse::{part}",) for part in MARKED}, "optimizer": ("Optimizer.step#", "Optimizer.zero_grad#")}


class StepProfiler(TrainerCallback):
    """Profiles optimizer steps ``start`` (exclusive: the profile begins when step ``start`` ends) to ``end``."""

    def __init__(self, start: int, end: int, output_json: Path | None) -> None:
        self.start, self.end, self.output_json = start, end, output_json
        self.profiler: torch.profiler.profile | None = None
        self.started_at = 0.0
        self.report: dict[str, Any] | None = None

    def on_step_end(self, args, state, control, **kwargs):  # noqa: D102
        if state.global_step == self.start:
            activities = [torch.profiler.ProfilerActivity.CPU]
            if torch.cuda.is_available():
                activities.append(torch.profiler.ProfilerActivity.CUDA)
                torch.cuda.synchronize()
            self.profiler = torch.profiler.profile(activities=activities)
            self.profiler.start()
            self.started_at = time.perf_counter()
        elif state.global_step == self.end and self.profiler is not None:
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            wall = time.perf_counter() - self.started_at
            self.profiler.stop()
            self.report = summarise(self.profiler, self.end - self.start, wall)
            print(format_report(self.report), flush=True)
            if self.output_json:
                self.output_json.write_text(json.dumps(self.report, indent=1))
            self.profiler = None


def mark_parts(trainer_class: type) -> None:
    """Wrap the :data:`MARKED` methods of ``trainer_class`` in ``record_function`` regions named ``cse::<part>``
    (``backward+step`` is the whole ``training_step``: forward and backward)."""
    for part, name in MARKED.items():
        method = getattr(trainer_class, name)

        def marked(self, *args, __method=method, __region=f"cse::{part}", **kwargs):
            with torch.profiler.record_function(__region):
                return __method(self, *args, **kwargs)

        setattr(trainer_class, name, marked)


def summarise(profiler: torch.profiler.profile, steps: int, wall_seconds: float) -> dict[str, Any]:
    """Per-step milliseconds: wall, device busy (kernels), the parts' host time, the top host operators, the top
    device kernels, and the kernels launched per step."""
    averages = profiler.key_averages()
    per_step = lambda microseconds: round(microseconds / 1000 / steps, 3)  # noqa: E731
    # the kernels' own rows only: an operator's row also carries the device time of the kernels it launched
    kernels = [e for e in averages if e.device_type == DeviceType.CUDA]
    device_busy = sum(e.self_device_time_total for e in kernels)
    parts = {}
    for part, names in PARTS.items():
        parts[part] = per_step(sum(e.cpu_time_total for e in averages if e.key.startswith(names)))
    top = sorted(averages, key=lambda e: e.self_cpu_time_total, reverse=True)[:10]
    top_kernels = sorted(kernels, key=lambda e: e.self_device_time_total, reverse=True)[:TOP_KERNELS]
    return {"steps": steps, "wall_ms_per_step": round(wall_seconds * 1000 / steps, 3),
            "device_busy_ms_per_step": per_step(device_busy), "host_ms_per_step_by_part": parts,
            "top_host_operators_ms_per_step": {e.key: per_step(e.self_cpu_time_total) for e in top},
            "device_kernels_per_step": round(sum(e.count for e in kernels) / steps, 1),
            "top_device_kernels_ms_per_step": {e.key[:KERNEL_NAME_CHARACTERS]: per_step(e.self_device_time_total)
                                               for e in top_kernels}}


def format_report(report: dict[str, Any]) -> str:
    lines = [f"[step_profile] {report['steps']} steps: wall {report['wall_ms_per_step']} ms/step, device busy "
             f"{report['device_busy_ms_per_step']} ms/step; host by part (ms/step): "
             f"{report['host_ms_per_step_by_part']}"]
    lines += [f"  {ms:8.3f} ms  {name}" for name, ms in report["top_host_operators_ms_per_step"].items()]
    if report["top_device_kernels_ms_per_step"]:
        lines.append(f"device kernels: {report['device_kernels_per_step']} per step; the most device time (ms/step):")
        lines += [f"  {ms:8.3f} ms  {name}" for name, ms in report["top_device_kernels_ms_per_step"].items()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.step_profile", description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", default="40:60", help="START:END, optimizer steps (profiled: START+1 .. END)")
    parser.add_argument("--output_json", type=Path, default=None)
    parser.add_argument("script", help="run_unsup.py or run_diffcse.py")
    parser.add_argument("script_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    start, end = (int(part) for part in args.steps.split(":"))
    if not 0 <= start < end:
        parser.error(f"--steps {args.steps}: START:END with 0 <= START < END")

    from trainers.cl_trainer import CLTrainer

    original_init = CLTrainer.__init__

    def init_with_profiler(self, *init_args, **init_kwargs):
        original_init(self, *init_args, **init_kwargs)
        self.add_callback(StepProfiler(start, end, args.output_json))

    CLTrainer.__init__ = init_with_profiler
    mark_parts(CLTrainer)
    sys.argv = [args.script, *args.script_args]
    runpy.run_path(args.script, run_name="__main__")


if __name__ == "__main__":
    main()
