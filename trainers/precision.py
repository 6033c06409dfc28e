"""The training precision a device gets by default: bf16 autocast where the hardware computes in bf16 natively,
fp32 elsewhere. ``--bf16 true|false`` always wins; evaluation stays fp32 either way (``--eval_dtype``).

- CUDA: a bf16-capable GPU (Ampere or newer): bf16 autocast and TF32 matmuls (``CLTrainingArguments``).
- CPU: bf16 where the cores have bf16 instructions: x86 with AVX512-BF16 or AMX (Intel Xeon since Cooper Lake /
  Sapphire Rapids, AMD EPYC since Zen 4), Arm with the BF16 extension (Neoverse V1/N2, Graviton3+). There, bf16
  autocast runs the matrix products through oneDNN's bf16 kernels: measured 1.4-2.7x per training step
  (docs/benchmarks.md). On other CPUs torch would emulate bf16 in software, slower than fp32, so fp32 stays.

``accelerate launch --mixed_precision X`` (or its config file's ``mixed_precision``) reaches the script as the
environment variable ``ACCELERATE_MIXED_PRECISION``, which the Trainer trains in whenever neither ``--bf16`` nor
``--fp16`` is on: :func:`resolve_precision` takes it in, so that the precision the run records is the one it trains in.

torch says whether the x86 instructions exist through ``torch.cpu._is_avx512_bf16_supported`` and
``torch.cpu._is_amx_tile_supported`` (cpuinfo-based; underscore names in torch 2.3 - 2.13, the only place torch
reports them): they are read here and nowhere else, and tests/test_precision.py fails with a clear message if a
torch release removes them. On Arm, Linux lists the extension as ``bf16`` in ``/proc/cpuinfo``'s Features.
"""
from __future__ import annotations

import os
import platform
from functools import lru_cache
from pathlib import Path

import torch

from .errors import UsageError

#: torch.cpu's probes of the x86 bf16 instructions (see the module docstring).
X86_BF16_PROBES = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")


@lru_cache(maxsize=1)
def native_cpu_bf16() -> bool:
    """Whether this CPU computes bf16 matrix products in hardware (so bf16 autocast is faster than fp32)."""
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64", "i686", "x86"):
        return any(getattr(torch.cpu, probe, lambda: False)() for probe in X86_BF16_PROBES)
    if machine in ("aarch64", "arm64"):
        try:
            return arm_cpuinfo_has_bf16(Path("/proc/cpuinfo").read_text())
        except OSError:  # not Linux (macOS): no reliable report, keep fp32
            return False
    return False


def arm_cpuinfo_has_bf16(cpuinfo: str) -> bool:
    """Whether Linux's ``/proc/cpuinfo`` text lists the Arm BF16 extension (the word ``bf16`` in ``Features``)."""
    return any(line.startswith("Features") and "bf16" in line.split(":", 1)[-1].split()
               for line in cpuinfo.splitlines())


def default_bf16(on_cpu: bool) -> bool:
    """``--bf16``'s value when not given: a bf16-capable GPU, or a CPU with native bf16 (:func:`native_cpu_bf16`)."""
    if not on_cpu and torch.cuda.is_available():
        return torch.cuda.is_bf16_supported()
    return native_cpu_bf16()


#: Where ``accelerate launch`` passes its ``--mixed_precision`` (its config file's ``mixed_precision``; ``no`` unless
#: set): the Trainer's Accelerator trains in it when neither ``--bf16`` nor ``--fp16`` is on.
LAUNCHER_PRECISION = "ACCELERATE_MIXED_PRECISION"


def resolve_precision(bf16: bool | None, fp16: bool, on_cpu: bool) -> tuple[bool, bool, str | None]:
    """``(bf16, fp16, warning)``: the run's precision from ``--bf16`` (``None``: not given), ``--fp16`` and the
    launcher's :data:`LAUNCHER_PRECISION`, and what to warn about it.

    - The launcher's ``no`` (accelerate's default, set whether or not it was typed): the flags, else
      :func:`default_bf16`.
    - ``fp16`` or ``bf16`` from the launcher and neither flag: that precision. (Before, with ``--bf16`` defaulting to
      false, e.g. on a CPU without native bf16 or a GPU without bf16, the Trainer trained in it while the summary,
      ``all_results.json`` and the model card said fp32.)
    - A flag that says otherwise: the flag, with a warning naming both. (``--bf16 false`` under ``accelerate launch
      --mixed_precision bf16`` trained in bf16 and recorded fp32.) The caller sets the Trainer's ``mixed_precision``
      (which it read from the launcher) to the result (:func:`mixed_precision_of`).
    - Anything else (``fp8``) and neither flag: refused; this project trains in bf16, fp16 or fp32."""
    launcher = os.environ.get(LAUNCHER_PRECISION, "no").strip().lower() or "no"
    if bf16 is None and not fp16:
        if launcher == "no":
            return default_bf16(on_cpu), fp16, None
        if launcher not in ("fp16", "bf16"):
            raise UsageError(f"{LAUNCHER_PRECISION}={launcher} (accelerate launch --mixed_precision {launcher}, or "
                             f"its config file's mixed_precision): this project trains in bf16, fp16 or fp32 only. "
                             f"Launch with --mixed_precision no (the script then trains in bf16 where the hardware "
                             f"has it) or bf16, or choose with --bf16 / --fp16")
        return launcher == "bf16", launcher == "fp16", None
    bf16 = bool(bf16)  # both on: the Trainer's own refusal follows
    asked = training_precision(bf16, fp16)
    if launcher == "no" or launcher == asked:
        return bf16, fp16, None
    flags = "--fp16 true" if fp16 else f"--bf16 {str(bf16).lower()}"
    return bf16, fp16, (f"accelerate's mixed precision is {launcher} ({LAUNCHER_PRECISION}: accelerate launch "
                        f"--mixed_precision {launcher}, or its config file's mixed_precision) and {flags} asks for "
                        f"{asked}: this run trains in {asked}, as the flag says")


def mixed_precision_of(bf16: bool, fp16: bool) -> str:
    """The Accelerator's ``mixed_precision`` (``TrainingArguments.mixed_precision``) of a run in this precision: its
    :func:`training_precision`, with accelerate's ``no`` for fp32."""
    precision = training_precision(bf16, fp16)
    return "no" if precision == "fp32" else precision


def training_precision(bf16: bool, fp16: bool) -> str:
    """``bf16`` / ``fp16`` / ``fp32``: what ``all_results.json``, the run summary and the model card record."""
    return "fp16" if fp16 else "bf16" if bf16 else "fp32"


__all__ = ["LAUNCHER_PRECISION", "X86_BF16_PROBES", "arm_cpuinfo_has_bf16", "default_bf16", "mixed_precision_of",
           "native_cpu_bf16", "resolve_precision", "training_precision"]
