"""The training precision a device gets by default: bf16 autocast where the hardware computes in bf16 natively,
fp32 elsewhere. ``--bf16 true|false`` always wins; evaluation stays fp32 either way (``--eval_dtype``).

- CUDA: a bf16-capable GPU (Ampere or newer): bf16 autocast and TF32 matmuls (``CLTrainingArguments``).
- CPU: bf16 where the cores have bf16 instructions: x86 with AVX512-BF16 or AMX (Intel Xeon since Cooper Lake /
  Sapphire Rapids, AMD EPYC since Zen 4), Arm with the BF16 extension (Neoverse V1/N2, Graviton3+). There, bf16
  autocast runs the matrix products through oneDNN's bf16 kernels: measured 1.4-2.7x per training step
  (docs/benchmarks.md). On other CPUs torch would emulate bf16 in software, slower than fp32, so fp32 stays.

torch says whether the x86 instructions exist through ``torch.cpu._is_avx512_bf16_supported`` and
``torch.cpu._is_amx_tile_supported`` (cpuinfo-based; underscore names in torch 2.3 - 2.13, the only place torch
reports them): they are read here and nowhere else, and tests/test_precision.py fails with a clear message if a
torch release removes them. On Arm, Linux lists the extension as ``bf16`` in ``/proc/cpuinfo``'s Features.
"""
from __future__ import annotations

import platform
from functools import lru_cache
from pathlib import Path

import torch

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


def training_precision(bf16: bool, fp16: bool) -> str:
    """``bf16`` / ``fp16`` / ``fp32``: what ``all_results.json``, the run summary and the model card record."""
    return "fp16" if fp16 else "bf16" if bf16 else "fp32"


__all__ = ["X86_BF16_PROBES", "arm_cpuinfo_has_bf16", "default_bf16", "training_precision", "native_cpu_bf16"]
