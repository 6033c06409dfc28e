"""The default training precision (trainers/precision.py): bf16 autocast on a bf16-capable GPU or a CPU with native
bf16, fp32 elsewhere, ``--bf16`` always winning. Through the command line, tests/test_run_report.py checks that the
run summary, all_results.json, run_arguments.json and the model card record what the run used."""
from __future__ import annotations

import platform

import pytest
import torch

import trainers.precision as precision
from command_line.arguments import CLTrainingArguments


def test_torch_still_reports_the_x86_bf16_instructions():
    """The one place that reads torch's private probes: a torch release without them must fail here, loudly,
    rather than silently train every x86 CPU in fp32."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip(f"x86 probes; this machine is {platform.machine()}")
    missing = [probe for probe in precision.X86_BF16_PROBES if not callable(getattr(torch.cpu, probe, None))]
    assert not missing, (f"torch {torch.__version__} no longer has torch.cpu.{', '.join(missing)}: update "
                         "trainers/precision.native_cpu_bf16 to torch's new way of reporting AVX512-BF16 / AMX")
    assert precision.native_cpu_bf16() == any(getattr(torch.cpu, p)() for p in precision.X86_BF16_PROBES)


def test_arm_cpuinfo_features():
    graviton3 = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics bf16 i8mm sve\n"
    graviton2 = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp\n"
    assert precision.arm_cpuinfo_has_bf16(graviton3)
    assert not precision.arm_cpuinfo_has_bf16(graviton2)
    assert not precision.arm_cpuinfo_has_bf16("Features\t: fp asimd sve2 svebf16\n")  # SVE's, not the base BF16


@pytest.mark.parametrize("native", [True, False])
def test_the_cpu_default_follows_native_bf16_and_flags_win(native, monkeypatch):
    monkeypatch.setattr(precision, "native_cpu_bf16", lambda: native)
    assert CLTrainingArguments(output_dir="x", use_cpu=True, report_to="none").bf16 is native
    assert CLTrainingArguments(output_dir="x", use_cpu=True, report_to="none", bf16=False).bf16 is False
    assert CLTrainingArguments(output_dir="x", use_cpu=True, report_to="none", bf16=True).bf16 is True


def test_training_precision_names():
    assert precision.training_precision(bf16=True, fp16=False) == "bf16"
    assert precision.training_precision(bf16=False, fp16=False) == "fp32"
    assert precision.training_precision(bf16=False, fp16=True) == "fp16"


@pytest.mark.skipif(torch.accelerator.is_available(), reason="an accelerator is present: use_cpu is not implied")
@pytest.mark.parametrize("bf16", [None, True])
def test_bf16_on_a_cpu_only_machine_needs_no_use_cpu_flag(bf16, monkeypatch):
    """The Trainer refuses bf16 without a GPU unless ``use_cpu`` is set ("Your setup doesn't support bf16/gpu"):
    on a machine without an accelerator the arguments set it, so the quickstart (no --use_cpu) trains in bf16."""
    monkeypatch.setattr(precision, "native_cpu_bf16", lambda: True)
    args = CLTrainingArguments(output_dir="x", report_to="none", bf16=bf16)
    assert args.bf16 is True and args.use_cpu is True
