"""bench/gpu_e2e.py, the GPU check's end-to-end stage: on a CPU its plan types the README's commands, its runner stops
a run at its first complete checkpoint and records failures, and a tiny run of what users type (train, kill, resume,
``python -m eval``) goes through the real entry points with ``--launcher python`` (the GPU check itself uses
``accelerate launch``)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bench import gpu_e2e
from bench.gpu_e2e import Command, plan, run, training_figures

pytestmark = pytest.mark.usefixtures("torch_single_thread")


def test_the_plan_types_the_readmes_commands(tmp_path):
    commands = {c.name: c.shell for c in plan(tmp_path, steps=150, senteval_dir=tmp_path / "se", mteb=True)}
    for method in ("simcse", "esimcse", "simcse_pp", "s_simcse", "promptbert"):
        assert f"accelerate launch run_unsup.py --method {method} " in commands[method]
    assert "accelerate launch run_unsup.py --method esimcse --dup_rate 0.32 " in commands["esimcse"]  # verbatim
    assert "run_unsup.py --method simcse --torch_compile true " in commands["simcse_fast_path"]
    assert "run_diffcse.py --generator_name " in commands["diffcse"]
    assert "--method sup_simcse" in commands["sup_simcse_cached"] and "--cache_chunk_size" in commands[
        "sup_simcse_cached"]
    assert commands["simcse_resumed"].endswith(f"--resume_from_checkpoint {tmp_path}/runs/simcse_resume/checkpoint-100")
    assert "--overwrite_output_dir" not in commands["simcse_resumed"]
    for name in ("eval_sts_test", "eval_transfer_fasttest", "eval_mteb"):
        assert " -m eval " in commands[name] and "/runs/simcse/export/" in commands[name]
    assert "--mode fasttest --task_set transfer" in commands["eval_transfer_fasttest"]
    assert all("--max_steps 150" in c and "--eval_steps 100" in c for n, c in commands.items()
               if not n.startswith("eval"))


def test_without_senteval_the_runs_train_without_evaluation_and_nothing_is_scored(tmp_path):
    commands = plan(tmp_path, steps=150, senteval_dir=None)
    assert not any(c.name.startswith("eval") for c in commands)
    assert all("--eval_strategy no" in c.shell for c in commands)


def test_the_runner_kills_at_the_first_complete_checkpoint_and_records_failures(tmp_path):
    out = tmp_path / "run"
    writes_then_hangs = (f"import pathlib, time; p = pathlib.Path({str(out)!r}) / 'checkpoint-2'; "
                         "p.mkdir(parents=True); (p / 'checkpoint_complete.json').write_text('{}'); time.sleep(120)")
    stopped = Command("stopped", [sys.executable, "-c", writes_then_hangs], str(out))
    run(stopped, tmp_path / "logs", stop_at_checkpoint=2)
    assert stopped.exit == 0 and stopped.seconds < 60 and "SIGKILL" in stopped.figures["stopped_by"]
    failing = Command("failing", [sys.executable, "-c", "raise SystemExit(3)"])
    run(failing, tmp_path / "logs")
    assert failing.exit == 3


def test_training_figures_read_what_the_run_wrote(tmp_path):
    (tmp_path / "train_results.json").write_text(json.dumps({"train_steps_per_second": 12.5,
                                                             "train_samples_per_second": 800.0}))
    (tmp_path / "all_results.json").write_text(json.dumps({"evaluation_seconds": 1.5, "peak_gpu_memory_mib": 3000.0,
                                                           "eval_stsb_spearman": 70.1, "step_graph_replays": 97}))
    history = [{"step": 25, "loss": 1.0, "sentences_per_second": 100.0}, {"step": 50, "sentences_per_second": 900.0},
               {"step": 75, "sentences_per_second": 1100.0}, {"step": 100, "eval_stsb_spearman": 70.1}]
    (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    figures = training_figures(tmp_path)
    assert figures == {"train_steps_per_second": 12.5, "train_samples_per_second": 800.0, "evaluation_seconds": 1.5,
                       "peak_gpu_memory_mib": 3000.0, "eval_stsb_spearman": 70.1, "step_graph_replays": 97,
                       "first_window_sentences_per_second": 100.0, "steady_sentences_per_second": 1000.0,
                       "global_step": 100}


def test_a_tiny_end_to_end_stage_trains_kills_resumes_and_evaluates(tmp_path, sts_fixture_dir, monkeypatch):
    """The stage for real, tiny: train with evaluation, a run killed at its first checkpoint and resumed, and
    ``python -m eval`` on the export; the JSON and the table say what each command gave."""
    monkeypatch.setenv("SENTEVAL_DIR", str(sts_fixture_dir))
    output = tmp_path / "e2e.json"
    code = gpu_e2e.main(["--work_dir", str(tmp_path / "work"), "--config", "tiny", "--steps", "4", "--every", "2",
                         "--launcher", "python", "--output_json", str(output), "--only", "simcse", "simcse_stopped",
                         "simcse_resumed", "eval_sts_test"])
    report = json.loads(output.read_text())
    by_name = {c["name"]: c for c in report["commands"]}
    assert code == 0, {n: (c["exit"], c["figures"]) for n, c in by_name.items()}
    assert list(by_name) == ["simcse", "simcse_stopped", "simcse_resumed", "eval_sts_test"]
    assert "stopped_by" in by_name["simcse_stopped"]["figures"]
    assert by_name["simcse_resumed"]["figures"]["global_step"] == 4
    assert "eval_stsb_spearman" in by_name["simcse"]["figures"] and by_name["simcse"]["figures"]["global_step"] == 4
    assert json.loads((tmp_path / "work" / "eval_sts_test.json").read_text())["avg"] is not None
    assert "| simcse_resumed | 0 |" in gpu_e2e.markdown(report)
    assert "steps replayed" not in gpu_e2e.markdown(report)  # a CPU run has no step graph
    report["commands"][0]["figures"]["step_graph_replays"] = 1234
    table = gpu_e2e.markdown(report)
    assert "| STS-B dev | steps replayed (step graph) |" in table and " | 1,234 |\n" in table
