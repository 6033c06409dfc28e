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


LAUNCHER_CASES = [
    # (ACCELERATE_MIXED_PRECISION, --bf16, --fp16, native bf16) -> (bf16, fp16, warned)
    (None, None, False, True, (True, False, False)),
    ("no", None, False, False, (False, False, False)),  # accelerate's default: the machine's default stays
    ("no", None, False, True, (True, False, False)),
    ("fp16", None, False, True, (False, True, False)),  # the launcher's choice, where the summary said bf16
    ("bf16", None, False, False, (True, False, False)),  # where the summary said fp32 while the Trainer ran bf16
    ("bf16", False, False, True, (False, False, True)),  # --bf16 false wins, said
    ("fp16", True, False, False, (True, False, True)),
    ("fp16", None, True, True, (False, True, False)),  # the same choice twice: nothing to say
    ("bf16", None, True, True, (False, True, True)),
    ("fp8", False, False, True, (False, False, True)),  # the flag decides: fp8 is never used
]


@pytest.mark.parametrize("launcher, bf16, fp16, native, expected", LAUNCHER_CASES)
def test_accelerate_launchers_mixed_precision_is_taken_unless_a_flag_says_otherwise(launcher, bf16, fp16, native,
                                                                                     expected, monkeypatch):
    """``accelerate launch --mixed_precision X`` (or its config) reaches the script as ACCELERATE_MIXED_PRECISION,
    which the Trainer trained in whenever --bf16 and --fp16 were off, while the run recorded fp32."""
    monkeypatch.setattr(precision, "native_cpu_bf16", lambda: native)
    if launcher is None:
        monkeypatch.delenv(precision.LAUNCHER_PRECISION, raising=False)
    else:
        monkeypatch.setenv(precision.LAUNCHER_PRECISION, launcher)
    flags = {"bf16": bf16} if bf16 is not None else {}
    args = CLTrainingArguments(output_dir="x", use_cpu=True, report_to="none", fp16=fp16, **flags)
    want_bf16, want_fp16, warned = expected
    assert (args.bf16, args.fp16, bool(args.command_line_warnings)) == (want_bf16, want_fp16, warned)
    assert args.mixed_precision == ("fp16" if want_fp16 else "bf16" if want_bf16 else "no")  # what the Trainer uses
    if warned:
        asked = "fp16" if want_fp16 else "bf16" if want_bf16 else "fp32"
        [warning] = args.command_line_warnings
        assert f"accelerate's mixed precision is {launcher}" in warning
        assert warning.endswith(f"this run trains in {asked}, as the flag says")


def test_a_launcher_precision_this_project_does_not_train_in_is_refused(monkeypatch):
    from trainers.errors import UsageError

    monkeypatch.setenv(precision.LAUNCHER_PRECISION, "fp8")
    with pytest.raises(UsageError, match=r"ACCELERATE_MIXED_PRECISION=fp8 .* trains in bf16, fp16 or fp32 only"):
        CLTrainingArguments(output_dir="x", use_cpu=True, report_to="none")


@pytest.mark.parametrize("launcher, flags, trained", [("bf16", ["--bf16", "false"], "fp32"), ("fp16", [], "fp16")])
def test_the_run_trains_in_the_precision_it_records_under_a_launchers_mixed_precision(
        launcher, flags, trained, tmp_path, backbone, capsys, monkeypatch):
    """Through run_unsup.py: the Trainer's Accelerator trains in the precision that all_results.json and the summary
    record (``--bf16 false`` under ``accelerate launch --mixed_precision bf16`` trained in bf16 and said fp32), and a
    flag that overrides the launcher is said in the summary."""
    import json

    import run_unsup
    from tests.cli import in_process
    from tests.tiny import FAST_TRAINING_ARGS, tiny_corpus
    from trainers.cl_trainer import CLTrainer

    assert FAST_TRAINING_ARGS[-2:] == ["--bf16", "false"]
    monkeypatch.setenv(precision.LAUNCHER_PRECISION, launcher)
    accelerator_precision = []
    build = CLTrainer.__init__

    def recording_init(self, *args, **kwargs):
        build(self, *args, **kwargs)
        accelerator_precision.append(str(self.accelerator.mixed_precision))

    monkeypatch.setattr(CLTrainer, "__init__", recording_init)
    out = tmp_path / "run"
    argv = ["--method", "simcse", "--model_name_or_path", str(backbone), "--train_file",
            str(tiny_corpus(tmp_path / "corpus.txt")), "--max_steps", "1", "--eval_strategy", "no", "--output_dir",
            str(out), *FAST_TRAINING_ARGS[:-2], *flags]  # without its --bf16 false
    result = in_process(run_unsup.main, argv, capsys)
    assert result.code == 0, result.err
    assert accelerator_precision == [{"fp32": "no"}.get(trained, trained)]
    assert json.loads((out / "all_results.json").read_text())["train_precision"] == trained
    assert f"precision: {trained} training" in result.out
    assert (f"accelerate's mixed precision is {launcher}" in result.out) is bool(flags)
