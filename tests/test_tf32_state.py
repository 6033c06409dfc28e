"""Evaluation in the torch state a GPU training run leaves: TF32 set through torch's per-backend API.

On an Ampere-or-newer GPU the Trainer turns TF32 on by default (``CLTrainingArguments``: ``tf32`` true), through
transformers' ``enable_tf32``, which sets ``torch.backends.fp32_precision = "tf32"`` (torch's new API); after that
torch's legacy getters (``torch.get_float32_matmul_precision()``, ``torch.backends.cuda.matmul.allow_tf32``) raise
"you have used mix of the legacy and new APIs". Evaluation forces fp32 (:func:`eval.fp32_precision.full_fp32`) and
must work, and restore exactly, whichever API set the state. The CPU simulation: the Trainer's own TF32 code path
runs (``--tf32 true`` with transformers told the device supports TF32), so the entry points meet exactly the state
the GPU's default run leaves.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import run_diffcse
import run_unsup
from eval import fp32_precision
from eval.cli import main as eval_main
from tests.cli import in_process
from tests.tiny import FAST_TRAINING_ARGS, save_tiny_backbone, save_tiny_generator, tiny_corpus

pytestmark = pytest.mark.usefixtures("torch_single_thread")


def legacy_reading() -> tuple[object, ...]:
    """What torch's legacy getters say now (``"refused"`` where torch refuses the mix of APIs)."""
    def read(getter):
        try:
            return getter()
        except RuntimeError as error:
            assert "mix of the legacy and new APIs" in str(error)
            return "refused"

    return (read(torch.get_float32_matmul_precision), read(lambda: torch.backends.cuda.matmul.allow_tf32),
            read(lambda: torch.backends.cudnn.allow_tf32))


@pytest.fixture
def restore_precision(pristine_fp32_state):
    """The test starts from a fresh process's fp32 state (whatever earlier tests set) and the next test finds the
    state this one found. The legacy values live beside the per-backend ones: both are reset."""
    found, legacy = fp32_precision.snapshot(), fp32_precision.legacy_settings()
    pristine, pristine_legacy = pristine_fp32_state
    fp32_precision.set_legacy(*pristine_legacy)
    fp32_precision.restore(pristine)
    yield
    fp32_precision.set_legacy(*pristine_legacy)
    fp32_precision.restore(pristine)
    fp32_precision.set_legacy(*legacy)
    fp32_precision.restore(found)


def set_by_legacy_matmul_precision() -> None:
    torch.set_float32_matmul_precision("high")


def set_by_legacy_allow_tf32() -> None:
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True


def set_by_transformers_enable_tf32() -> None:  # what the Trainer runs on an Ampere GPU (torch's new API)
    from transformers.utils.import_utils import enable_tf32

    enable_tf32.cache_clear()  # transformers runs it once per process (lru_cache); each test starts afresh
    fp32_precision.enable_tf32()


def set_by_one_backend() -> None:
    torch.backends.cuda.matmul.fp32_precision = "tf32"


def set_cpu_bf16() -> None:
    torch.backends.mkldnn.matmul.fp32_precision = "bf16"


STATES = [None, set_by_legacy_matmul_precision, set_by_legacy_allow_tf32, set_by_transformers_enable_tf32,
          set_by_one_backend, set_cpu_bf16]


@pytest.mark.skipif(not fp32_precision.has_per_backend_api(), reason="torch < 2.9 has only the legacy API")
@pytest.mark.parametrize("set_state", STATES, ids=lambda f: f.__name__ if f else "untouched")
def test_full_fp32_pins_every_backend_to_ieee_and_restores_exactly(set_state, restore_precision):
    if set_state is not None:
        set_state()
    before_new, before_legacy = fp32_precision.snapshot(), legacy_reading()
    with fp32_precision.full_fp32():
        inside = fp32_precision.snapshot()
        assert all(inside[leaf] == "ieee" for leaf in fp32_precision.FP32_LEAVES), inside
        assert fp32_precision.matmul_precision() == "ieee"
        # every getter answers (the two APIs agree), and says IEEE: also what kernels and inductor read
        assert legacy_reading() == ("highest", False, False)
        for device in ("cpu", "cuda") if torch.cuda.is_available() else ("cpu",):
            a = torch.randn(64, 64, device=device)
            torch.testing.assert_close(a @ a, (a.double() @ a.double()).float(), rtol=1e-5, atol=1e-4)
    assert fp32_precision.snapshot() == before_new
    assert legacy_reading() == before_legacy  # the legacy getters answer (or refuse) exactly as before


@pytest.mark.skipif(not fp32_precision.has_per_backend_api(), reason="torch < 2.9 has only the legacy API")
def test_the_simulated_state_is_the_one_torch_refuses_to_read_with_the_legacy_getter(restore_precision):
    """The premise of the entry-point tests below: after transformers' enable_tf32 the legacy getter raises."""
    set_by_transformers_enable_tf32()
    assert legacy_reading()[0] == "refused"
    assert fp32_precision.matmul_precision() == "tf32"


def test_full_fp32_restores_when_the_body_raises(restore_precision):
    set_by_transformers_enable_tf32()
    before = fp32_precision.snapshot()
    with pytest.raises(KeyError), fp32_precision.full_fp32():
        raise KeyError("boom")
    assert fp32_precision.snapshot() == before


# --------------------------------------------------------------------------------- the entry points
@pytest.fixture
def ampere_trainer(monkeypatch, restore_precision):
    """The Trainer believes the device supports TF32 (an Ampere-or-newer GPU), so ``--tf32 true`` runs its own
    ``enable_tf32(True)``: exactly the torch state of the default GPU run."""
    import transformers.training_args as training_args

    monkeypatch.setattr(training_args, "is_torch_tf32_available", lambda: True)
    training_args.enable_tf32.cache_clear()  # it runs once per process (lru_cache): each test starts afresh
    return ["--tf32", "true"]


def assert_trained_evaluated_and_exported(result, out: Path) -> dict:
    assert result.code == 0, result.err + result.out
    assert fp32_precision.matmul_precision() == "tf32"  # the run really was in the GPU's TF32 state
    metrics = json.loads((out / "all_results.json").read_text())
    assert {"before_stsb_spearman", "eval_stsb_spearman", "best_model_checkpoint"} <= set(metrics)
    assert (out / "export" / "hf" / "model.safetensors").is_file()
    return metrics


@pytest.mark.parametrize("method", ["simcse", "esimcse", "promptbert"])
def test_run_unsup_trains_evaluates_and_exports_in_the_gpu_tf32_state(method, tmp_path, backbone, sts_fixture_dir,
                                                                      ampere_trainer, capsys):
    """One method of each family run_unsup.py trains: SimCSE's (dropout views), ESimCSE's (queue + momentum
    encoder), PromptBERT's (templates, its own dev embedding); evaluation before, during and after training."""
    out = tmp_path / "run"
    argv = ["--method", method, "--model_name_or_path", str(backbone), "--train_file",
            str(tiny_corpus(tmp_path / "corpus.txt")), "--senteval_dir", str(sts_fixture_dir), "--max_steps", "2",
            "--eval_steps", "2", "--max_seq_length", "24", "--output_dir", str(out), *FAST_TRAINING_ARGS,
            *ampere_trainer]
    if method == "esimcse":
        argv += ["--dup_rate", "0.32", "--queue_size", "8"]
    assert_trained_evaluated_and_exported(in_process(run_unsup.main, argv, capsys), out)


def test_run_diffcse_trains_evaluates_and_exports_in_the_gpu_tf32_state(tmp_path, sts_fixture_dir, ampere_trainer,
                                                                       capsys):
    encoder = save_tiny_backbone(tmp_path / "encoder", seed=0)
    generator = save_tiny_generator(tmp_path / "generator")
    out = tmp_path / "run"
    argv = ["--model_name_or_path", str(encoder), "--generator_name", str(generator), "--train_file",
            str(tiny_corpus(tmp_path / "corpus.txt", n=32)), "--senteval_dir", str(sts_fixture_dir),
            "--max_seq_length", "16", "--max_steps", "2", "--eval_steps", "2", "--output_dir", str(out),
            *FAST_TRAINING_ARGS, *ampere_trainer]
    assert_trained_evaluated_and_exported(in_process(run_diffcse.main, argv, capsys, prog="run_diffcse.py"), out)


def test_python_m_eval_scores_in_the_gpu_tf32_state(tmp_path, tiny_bert_dir, sts_fixture_dir, restore_precision,
                                                    capsys):
    """``python -m eval`` after the Trainer's TF32 (e.g. a notebook that trained, then evaluates): fp32 scores,
    equal to the untouched state's, and the TF32 state kept."""
    argv = ["--model_name_or_path", str(tiny_bert_dir), "--pooler", "avg", "--mode", "test", "--task_set", "sts",
            "--senteval_dir", str(sts_fixture_dir), "--device", "cpu"]
    untouched = in_process(eval_main, [*argv, "--output_json", str(tmp_path / "fp32.json")], capsys, prog="eval")
    set_by_transformers_enable_tf32()
    after_tf32 = in_process(eval_main, [*argv, "--output_json", str(tmp_path / "tf32.json")], capsys, prog="eval")
    assert untouched.code == 0 and after_tf32.code == 0, after_tf32.err
    assert json.loads((tmp_path / "tf32.json").read_text()) == json.loads((tmp_path / "fp32.json").read_text())
    assert fp32_precision.matmul_precision() == "tf32"
