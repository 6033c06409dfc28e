"""A run whose loss goes NaN stops with a message naming the step, exits 3, and writes no checkpoint or export with
non-finite weights; the detection adds no host-device sync to the step."""
from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file

import run_unsup
from tests.cli import in_process, subprocess_run
from tests.test_no_host_sync import HostSyncRecorder
from tests.tiny import FAST_TRAINING_ARGS, tiny_corpus
from trainers.divergence import DivergenceMonitor
from trainers.methods import build_collator, build_model

DIVERGING = ["--learning_rate", "1e10"]  # the tiny BERT's loss is NaN from step 2 (as MiniLM's in the issue)


def test_the_monitor_records_the_first_bad_step_without_a_host_sync():
    monitor = DivergenceMonitor()
    recorder = HostSyncRecorder()
    with recorder:
        for step, loss in enumerate([1.0, 2.0, float("nan"), float("inf"), 3.0], start=1):
            monitor.record(torch.tensor(loss, requires_grad=True) * 1, step)
    assert recorder.syncs == []
    assert int(monitor.first_bad_step) == 3


def test_the_trainer_step_records_the_loss_without_a_host_sync(backbone, tmp_path):
    from transformers import AutoTokenizer


    from tests.test_no_host_sync import ROWS
    from tests.tiny import tiny_trainer

    model = build_model("simcse", str(backbone)).train()
    trainer = tiny_trainer(model, backbone, tmp_path / "out", tiny_corpus(tmp_path / "c.txt"))
    batch = build_collator(model, AutoTokenizer.from_pretrained(str(backbone)), 16)(ROWS)
    recorder = HostSyncRecorder()
    with recorder:
        trainer.compute_loss(model, batch)
    assert recorder.syncs == []
    assert trainer.divergence.first_bad_step is not None  # the loss was recorded (on the device)


def test_non_finite_weights_behind_a_finite_loss_are_caught_before_a_write(backbone, tmp_path):
    import pytest


    from tests.tiny import tiny_trainer
    from trainers.errors import TrainingDiverged

    model = build_model("simcse", str(backbone))
    trainer = tiny_trainer(model, backbone, tmp_path / "out", tiny_corpus(tmp_path / "c.txt"))
    trainer.check_finite(weights=True, before="the export")  # finite: nothing raised
    with torch.no_grad():
        next(model.parameters())[0] = float("nan")
    with pytest.raises(TrainingDiverged, match="the weights hold NaN or inf after step 0; stopped before the export"):
        trainer.check_finite(weights=True, before="the export")


def test_a_nan_run_stops_before_writing_and_keeps_the_last_checkpoint(backbone, tmp_path):
    """The NaN is first seen when step 2 would be saved: checkpoint-1 stays (finite), nothing else is written."""
    out = tmp_path / "run"
    result = subprocess_run("run_unsup.py", [
        "--model_name_or_path", str(backbone), "--train_file", str(tiny_corpus(tmp_path / "c.txt")),
        "--output_dir", str(out), "--max_steps", "4", "--eval_strategy", "no", "--save_strategy", "steps",
        "--save_steps", "1", *FAST_TRAINING_ARGS, "--logging_steps", "100", *DIVERGING])
    assert result.code == 3, result.out[-2000:] + result.err[-2000:]
    assert "Traceback" not in result.err
    assert ("run_unsup.py: error: training diverged: the training loss became NaN or inf at step 2; stopped before "
            "writing checkpoint-2") in result.err
    assert f"The last checkpoint, {out / 'checkpoint-1'}, was written before and is untouched" in result.err
    assert "Likely cause: the learning rate is too high (--learning_rate 1e+10" in result.err
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-1"]  # no checkpoint-2, no export, no results
    weights = load_file(out / "checkpoint-1" / "model.safetensors")
    assert all(torch.isfinite(tensor).all() for tensor in weights.values())


def test_a_nan_seen_at_a_log_line_stops_the_run_without_an_export(backbone, tmp_path, capsys):
    out = tmp_path / "run"
    result = in_process(run_unsup.main, [
        "--model_name_or_path", str(backbone), "--train_file", str(tiny_corpus(tmp_path / "c.txt")),
        "--output_dir", str(out), "--max_steps", "4", "--eval_strategy", "no", "--save_strategy", "no",
        *FAST_TRAINING_ARGS, *DIVERGING], capsys)
    assert result.code == 3
    assert "training diverged: the training loss became NaN or inf at step 2; stopped at step 2," in result.err
    assert not (out / "export").exists() and not (out / "all_results.json").exists()


def test_a_nan_seen_at_an_evaluation_stops_before_it(backbone, sts_fixture_dir, tmp_path, capsys):
    """The default settings log every 25 steps but evaluate every 125: the evaluation is where the NaN shows."""
    out = tmp_path / "run"
    result = in_process(run_unsup.main, [
        "--model_name_or_path", str(backbone), "--train_file", str(tiny_corpus(tmp_path / "c.txt")),
        "--senteval_dir", str(sts_fixture_dir), "--output_dir", str(out), "--max_steps", "4", "--eval_steps", "3",
        "--evaluate_at_start", "false", *FAST_TRAINING_ARGS, "--logging_steps", "25", *DIVERGING], capsys)
    assert result.code == 3
    assert ("the training loss became NaN or inf at step 2; stopped before the evaluation at step 3, so no "
            "checkpoint or export holds non-finite weights") in result.err
    assert sorted(p.name for p in out.iterdir()) in ([], ["runs"])  # TensorBoard's folder, if it is installed


def test_a_finished_good_run_is_never_replaced_by_a_diverged_one(backbone, tmp_path, capsys):
    """Even with --overwrite_output_dir the old run is deleted only at the start; a diverging run then writes
    nothing, so the folder holds no NaN export (and the refusal without the flag keeps the good run)."""
    out = tmp_path / "run"
    common = ["--model_name_or_path", str(backbone), "--train_file", str(tiny_corpus(tmp_path / "c.txt")),
              "--output_dir", str(out), "--max_steps", "3", "--eval_strategy", "no", "--save_strategy", "no",
              *FAST_TRAINING_ARGS]
    assert in_process(run_unsup.main, common, capsys).code == 0
    good = load_file(out / "export" / "hf" / "model.safetensors")
    assert in_process(run_unsup.main, common + DIVERGING, capsys).code == 1  # refused: the folder holds a run
    assert all(torch.equal(good[k], v) for k, v in load_file(out / "export" / "hf" / "model.safetensors").items())
    diverged = in_process(run_unsup.main, common + DIVERGING + ["--overwrite_output_dir"], capsys)
    assert diverged.code == 3
    assert not Path(out / "export").exists()


def test_a_nan_run_under_two_processes_exits_3_on_every_rank_and_names_the_step_once(backbone, tmp_path):
    """torchrun, 2 gloo processes: both ranks see the NaN through the same collective, stop before writing
    checkpoint-2 and exit 3 (torchrun's failure report lists each rank's status; torchrun itself exits 1); the
    message is printed once (by rank 0), without a traceback; checkpoint-1 is finite, and there is no export or
    result file."""
    import re

    from tests.launch import run_torchrun

    out = tmp_path / "run"
    # torchrun stops the other workers (SIGTERM) at the first poll after one failed: polling every second (default
    # 0.1 s) leaves rank 1 time to exit on its own after the shared barrier, so its status is the run's, not -15
    output = run_torchrun([
        "--monitor-interval", "1", "run_unsup.py", "--model_name_or_path", str(backbone),
        "--train_file", str(tiny_corpus(tmp_path / "c.txt")),
        "--output_dir", str(out), "--max_steps", "4", "--eval_strategy", "no", "--save_strategy", "steps",
        "--save_steps", "1", *FAST_TRAINING_ARGS, "--per_device_train_batch_size", "4", "--logging_steps", "100",
        *DIVERGING], returncode=1)
    assert sorted(re.findall(r"rank\s*: (\d) \(local_rank: \d\)\s+exitcode\s*: (-?\d+)", output)) == \
        [("0", "3"), ("1", "3")], output[-3000:]
    message = ("run_unsup.py: error: training diverged: the training loss became NaN or inf at step 2; stopped "
               "before writing checkpoint-2")
    assert output.count("training diverged") == 1 and message in output, output[-3000:]
    workers = output.split("] failed (exitcode:", 1)[0]  # before the launcher's own report (and its traceback)
    assert "Traceback" not in workers, workers[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-1"]
    weights = load_file(out / "checkpoint-1" / "model.safetensors")
    assert all(torch.isfinite(tensor).all() for tensor in weights.values())
