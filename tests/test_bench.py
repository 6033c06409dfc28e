"""``python -m bench.train_throughput`` on the tiny config: every method and the sentence-transformers reference
take real training steps, and the report holds what docs/benchmarks.md quotes."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from bench.train_throughput import (REFERENCE, Measurement, BenchSettings, default_methods, format_table, main,
                                    peak_bf16_flops)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Measurement], dict]:
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    threads = torch.get_num_threads()
    try:
        measurements = main(["--config", "tiny", "--batch_size", "8", "--seq_len", "16", "--steps", "2",
                             "--warmup", "1", "--eval_sentences", "16", "--threads", "1", "--no-isolate",
                             "--device", "cpu", "--output_json", str(out)])
    finally:
        torch.set_num_threads(threads)
    return measurements, json.loads(out.read_text())


def test_every_method_and_the_reference_train(report) -> None:
    measurements, _ = report
    names = [m.name for m in measurements]
    assert names == default_methods()
    assert {"simcse", "sup_simcse", "esimcse", "simcse_pp", "s_simcse", REFERENCE} <= set(names)
    for m in measurements:
        assert len(m.step_times) == 2 and all(t > 0 for t in m.step_times), m.name
        assert m.sentences_per_second > 0 and m.peak_memory_mib > 0
    by_name = {m.name: m for m in measurements}
    assert by_name["simcse"].tokens_per_step == 8 * 2 * 16  # two views of 8 sentences of exactly 16 tokens
    assert by_name[REFERENCE].tokens_per_step == 8 * 2 * 16  # the (s, s) pair
    assert by_name["sup_simcse"].tokens_per_step == 8 * 3 * 16  # + the hard negative


def test_counted_flops_match_the_formula(report) -> None:
    """SimCSE's and the reference's counted FLOPs = 6 N T + the attention term (+ a few percent: projector, loss)."""
    measurements, _ = report
    for m in measurements:
        if m.name in ("simcse", REFERENCE):
            assert m.flops_per_step == pytest.approx(m.analytic_encoder_flops, rel=0.1), m.name


def test_report_and_table(report) -> None:
    measurements, data = report
    assert data["settings"]["config"] == "tiny" and data["command"].startswith("python -m bench.train_throughput")
    simcse = next(r for r in data["results"] if r["name"] == "simcse")
    assert simcse["epoch_projection_seconds"] > simcse["median_step_seconds"] * 15625
    assert simcse["mfu"] is None  # no peak FLOP/s for a CPU
    table = format_table(measurements, BenchSettings(config="tiny"))
    assert f"x {REFERENCE}" in table and "| simcse |" in table and "1.00x" in table
    assert "projects to" in table


def test_peak_table() -> None:
    assert peak_bf16_flops("NVIDIA H100 80GB HBM3") == pytest.approx(989.4e12)
    assert peak_bf16_flops("NVIDIA H100 PCIe") == pytest.approx(756e12)
    assert peak_bf16_flops("NVIDIA H200") == pytest.approx(989.4e12)
    assert peak_bf16_flops("Some CPU") is None


def test_isolated_worker_round_trip(tmp_path: Path) -> None:
    """--isolate runs a method in a subprocess and reads its measurement back."""
    out = tmp_path / "one.json"
    measurements = main(["--config", "tiny", "--batch_size", "4", "--seq_len", "8", "--steps", "1", "--warmup", "0",
                         "--eval_sentences", "0", "--threads", "1", "--device", "cpu", "--methods", "simcse",
                         "--output_json", str(out)])
    assert [m.name for m in measurements] == ["simcse"]
    assert json.loads(out.read_text())["results"][0]["peak_memory_mib"] > 0


def test_the_sync_count_ignores_the_prototype_notice() -> None:
    """On CUDA the first ``set_sync_debug_mode`` call warns that the mode is a prototype; counting it made every
    method look like it synchronised once per step (bench/results/gpu_*.json before this fix)."""
    from bench.train_throughput import is_sync_warning

    notice = ("Synchronization debug mode is a prototype feature and does not yet detect all synchronizing "
              "operations (Triggered internally at /pytorch/torch/csrc/cuda/Module.cpp:1003.)")
    assert not is_sync_warning(notice)
    assert is_sync_warning("called a synchronizing CUDA operation (Triggered internally at "
                           "/pytorch/c10/cuda/CUDAFunctions.cpp:151.)")


# ------------------------------------------------------------------------------------ bench/real_loop.py
def test_the_real_loop_benchmark_runs_the_script_reads_its_log_and_profiles_a_window(tmp_path, monkeypatch) -> None:
    """``python -m bench.real_loop --device cpu --profile_steps 3:5``: run_unsup.py itself on a tiny random BERT
    (under ``bench.step_profile``, which reports steps 3-4), its windows' sentences/s read back from
    trainer_state.json, the first window apart from the steady state."""
    from bench.real_loop import main as real_loop

    monkeypatch.delenv("SENTEVAL_DIR", raising=False)  # no evaluation: seconds, not minutes
    out = tmp_path / "loop.json"
    result = real_loop(["--device", "cpu", "--config", "tiny", "--steps", "6", "--logging_steps", "2",
                        "--batch_size", "8", "--fast_path", "false", "--profile_steps", "3:5", "--workdir",
                        str(tmp_path / "work"), "--run_name", "mine", "--output_json", str(out)])
    assert (tmp_path / "work" / "mine" / "trainer_state.json").is_file() and (tmp_path / "work" / "mine.log").is_file()
    windows = result.window_sentences_per_second
    assert len(windows) == 3 and min(windows) > 0  # steps 1-2, 3-4, 5-6
    assert result.warmup_sentences_per_second == windows[0]
    assert result.steady_sentences_per_second == pytest.approx((windows[1] + windows[2]) / 2)
    assert result.evaluations == 0 and result.compile_warmup_seconds is None and result.final_loss is not None
    # a wiki1m epoch is 1,000,000 sentences at any batch (125,000 steps of 8); no evaluation in this run
    assert result.wiki1m_epoch_minutes == pytest.approx(1_000_000 / result.steady_sentences_per_second / 60, abs=0.1)
    assert "run_unsup.py --model_name_or_path" in json.loads(out.read_text())["command"]
    assert result.step_profile["steps"] == 2 and result.step_profile["host_ms_per_step_by_part"]["forward"] > 0


def test_the_real_loop_projection_counts_evaluations_and_warmup() -> None:
    """A wiki1m epoch = 1,000,000 sentences at the steady rate + a dev evaluation every --eval_steps steps (125 at
    batch 64: 15,625 steps; 15 at batch 512: 1,954 steps) + the compile warm-up."""
    import argparse

    from bench.real_loop import summarise

    record = {"windows": [500.0, 6400.0, 6000.0, 6800.0], "compile_warmup_seconds": 60.0,
              "evaluations": [0.3, 0.2, 0.25], "final_loss": 0.01}
    for batch_size, evaluations in ((64, 125), (512, 15)):
        args = argparse.Namespace(method="simcse", fast_path=True, device="cuda", steps=1000, batch_size=batch_size,
                                  eval_steps=125)
        result = summarise(args, record, 100.0, ["python", "run_unsup.py"])
        assert result.steady_sentences_per_second == 6400.0 and result.evaluation_seconds == 0.25
        assert result.wiki1m_epoch_minutes == pytest.approx((1_000_000 / 6400 + evaluations * 0.25 + 60) / 60,
                                                            abs=0.05)


def test_real_loop_runs_in_one_work_directory_share_their_inputs(tmp_path, monkeypatch) -> None:
    """A second method's run (diffcse, which needs the generator) reuses the first run's backbone and corpus, as does a
    shorter run; a longer one makes new ones."""
    import bench.real_loop as real_loop

    made = []
    monkeypatch.setattr(real_loop, "build_inputs", lambda root, *args, **kwargs: made.append(args) or
                        {"backbone": root / "backbone", "generator": root / "generator", "corpus": root / "c.txt"})
    (tmp_path / "inputs").mkdir()
    first = real_loop.reusable_inputs(tmp_path / "inputs", "tiny", 100, 42, diffcse=False)
    assert real_loop.reusable_inputs(tmp_path / "inputs", "tiny", 100, 42, diffcse=True) == first
    assert len(made) == 1
    assert real_loop.reusable_inputs(tmp_path / "inputs", "tiny", 50, 42, diffcse=False) == first  # fewer steps
    real_loop.reusable_inputs(tmp_path / "inputs", "tiny", 200, 42, diffcse=False)
    assert len(made) == 2


# ------------------------------------------------------------------------------------ bench/process_groups.py
#: A command that starts a worker of its own, as a training run does (data-loading and compile workers): each writes
#: its pid, then, after 2 s, a file saying it is still alive.
_COMMAND_WITH_A_WORKER = """
import os, pathlib, subprocess, sys, time
folder = pathlib.Path(sys.argv[1])
alive = "import os, pathlib, sys, time; time.sleep(2); pathlib.Path(sys.argv[1], f'alive_{os.getpid()}').write_text('')"
subprocess.Popen([sys.executable, "-c", alive, str(folder)])
(folder / "started").write_text(str(os.getpid()))
time.sleep(2)
(folder / f"alive_{os.getpid()}").write_text("")
time.sleep(60)
"""
#: The two benches' ways of running a command, each interrupted while it waits.
_RUNNERS = {
    "gpu_check": "from bench.gpu_check import Step, run_step; run_step(Step('s', ARGV, pathlib.Path('o.json')), None)",
    "gpu_e2e": "from bench.gpu_e2e import Command, run; run(Command('c', list(ARGV)), pathlib.Path(FOLDER))",
}


@pytest.mark.parametrize("runner, signal_name", [("gpu_check", "SIGINT"), ("gpu_e2e", "SIGTERM")])
def test_an_interrupted_bench_takes_its_running_command_with_it(tmp_path, runner, signal_name) -> None:
    """A bench stopped while its command runs (Ctrl-C; ``timeout``'s SIGTERM) kills the command and everything the
    command started, though they run in a session of their own: none of them lives on to write its file (an H200
    run's interrupted step trained on through the next measurements)."""
    import signal
    import subprocess
    import time

    argv = (sys.executable, "-c", _COMMAND_WITH_A_WORKER, str(tmp_path))
    # Ctrl-C as a shell delivers it (KeyboardInterrupt), whatever SIGINT disposition the test's process passes on (an
    # ignored SIGINT is inherited): a suite run on a loaded machine saw the bench live on past 30 s, cause unconfirmed.
    program = (f"import pathlib, signal, sys; ARGV = {argv!r}; FOLDER = {str(tmp_path / 'logs')!r}\n"
               "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
               f"from bench.process_groups import exit_on_sigterm; exit_on_sigterm()\n{_RUNNERS[runner]}")
    bench = subprocess.Popen([sys.executable, "-c", program], cwd=Path(__file__).resolve().parent.parent,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not (tmp_path / "started").exists():
        assert time.monotonic() < deadline and bench.poll() is None, "the command never started"
        time.sleep(0.05)
    bench.send_signal(getattr(signal, signal_name))
    assert bench.wait(timeout=90) != 0
    time.sleep(3)  # past the 2 s after which a living command or worker writes its file
    assert not list(tmp_path.glob("alive_*"))


# ------------------------------------------------------------------------------------ bench/step_profile.py
def test_the_step_profile_reports_a_window_of_real_training_steps(tmp_path, monkeypatch) -> None:
    """``python -m bench.step_profile --steps 2:4 -- run_unsup.py ...``: the script itself runs, steps 3-4 are
    profiled, and the host time of its parts (data, forward, optimizer) is reported per step."""
    import runpy

    from bench.step_profile import main as step_profile
    from tests.tiny import FAST_TRAINING_ARGS, save_tiny_backbone, tiny_corpus
    from trainers.cl_trainer import CLTrainer

    monkeypatch.setattr(CLTrainer, "__init__", CLTrainer.__init__)  # the profiler's patches end with the test
    for name in ("get_batch_samples", "compute_loss", "training_step", "_clip_grad_norm"):
        monkeypatch.setattr(CLTrainer, name, getattr(CLTrainer, name))
    monkeypatch.setattr(runpy, "run_path", lambda path, run_name: __import__("run_unsup").main(sys.argv[1:]))
    out = tmp_path / "profile.json"
    step_profile(["--steps", "2:4", "--output_json", str(out), "run_unsup.py", "--model_name_or_path",
                  str(save_tiny_backbone(tmp_path / "backbone")), "--train_file", str(tiny_corpus(tmp_path / "c.txt")),
                  "--output_dir", str(tmp_path / "run"), "--max_steps", "5", "--eval_strategy", "no",
                  "--save_strategy", "no", "--load_best_model_at_end", "false", *FAST_TRAINING_ARGS])
    report = json.loads(out.read_text())
    assert report["steps"] == 2 and report["wall_ms_per_step"] > 0
    parts = report["host_ms_per_step_by_part"]
    assert parts["data"] > 0 and parts["forward"] > 0 and parts["optimizer"] > 0
    assert parts["backward+step"] > parts["forward"]  # the training step holds the forward
    assert report["device_busy_ms_per_step"] == 0  # a CPU run has no device kernels
    assert report["device_kernels_per_step"] == 0 and report["top_device_kernels_ms_per_step"] == {}


def test_the_step_profile_counts_each_kernel_once() -> None:
    """The device's busy time is the kernels' own rows: an operator's row carries the device time of the kernels it
    launched too (summing both counted an H100 step's kernels twice: 27.6 ms 'busy' in a 15.6 ms step); the same
    rows, largest first, say what it is made of."""
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    from bench.step_profile import summarise

    def row(key, device_type, device_us, cpu_us=10.0, count=2):
        return SimpleNamespace(key=key, device_type=device_type, self_device_time_total=device_us,
                               cpu_time_total=cpu_us, self_cpu_time_total=cpu_us, count=count)

    events = [row("aten::mm", DeviceType.CPU, 4000.0), row("sm90_gemm_kernel", DeviceType.CUDA, 4000.0, 0.0),
              row("triton_poi_fused_dropout_0", DeviceType.CUDA, 1000.0, 0.0, count=6),
              row("cse::forward", DeviceType.CPU, 0.0, 500.0)]
    report = summarise(SimpleNamespace(key_averages=lambda: events), steps=2, wall_seconds=0.01)
    assert report["device_busy_ms_per_step"] == 2.5 and report["wall_ms_per_step"] == 5.0
    assert report["host_ms_per_step_by_part"]["forward"] == 0.25
    # what the busy time is made of: the kernels by their own time, most first, and the launches per step
    assert list(report["top_device_kernels_ms_per_step"].items()) == [("sm90_gemm_kernel", 2.0),
                                                                      ("triton_poi_fused_dropout_0", 0.5)]
    assert report["device_kernels_per_step"] == 4.0


def test_the_trainer_host_bench_times_each_item_on_bert_bases_structure(tmp_path) -> None:
    """``bench.trainer_host``: the narrow backbone has bert-base's 199 parameter tensors; every item is timed both
    ways; the report writes one row per item; the repository's draws lookup does not walk (it is far below the walk
    even on a loaded machine: a dictionary lookup against a recursion over 230 modules, the dropped pooler
    among them)."""
    import json

    from bench.trainer_host import format_report, main

    report = main(["--method", "simcse", "--repeats", "3", "--output_json", str(tmp_path / "host.json")])
    assert report["trainable_tensors"] == report["parameter_tensors"] == 199 and report["modules"] == 230
    assert set(report["microseconds"]) == {"clip_grad_norm", "step draws lookup", "model.zero_grad()",
                                           "model.train()"}
    assert all(row["trainer"] > 0 and row["ours"] > 0 for row in report["microseconds"].values())
    lookup = report["microseconds"]["step draws lookup"]
    assert lookup["ours"] * 10 < lookup["trainer"]
    assert json.loads((tmp_path / "host.json").read_text()) == report
    assert len(format_report(report).splitlines()) == 3 + len(report["microseconds"])


def test_the_trainer_host_bench_times_esimcses_momentum_update_both_ways() -> None:
    """ESimCSE's row: Eq. 5 with both networks walked by name (the route before its pairs were kept) and the model's
    own ``on_optimizer_step``."""
    from bench.trainer_host import measure

    report = measure("esimcse", 3)
    row = report["microseconds"]["momentum update (Eq. 5)"]
    assert row["trainer"] > 0 and row["ours"] > 0


def test_the_optimizer_step_bench_compiles_the_clipped_adamw_to_the_eager_result(tmp_path, monkeypatch) -> None:
    """``bench.optimizer_step``: the compiled clipping + AdamW (tensor learning rate, changed every step) ends where
    the eager route does; each variant's host time and first-call seconds are reported, the JSON after each."""
    import json

    import bench.optimizer_step as optimizer_step

    shapes = [(16, 8), (8,), (8, 8)]
    monkeypatch.setattr(optimizer_step, "backbone_parameters", lambda config, device, seed=0: [
        torch.randn(shape, generator=torch.Generator().manual_seed(seed + i)) for i, shape in enumerate(shapes)])
    report = optimizer_step.main(["--device", "cpu", "--steps", "4", "--warmup", "1",
                                  "--output_json", str(tmp_path / "o.json")])
    assert [r["variant"] for r in report["results"]] == ["eager", "compiled"]
    eager, compiled = report["results"]
    assert "error" not in compiled and compiled["parameter_tensors"] == 3
    assert eager["max_abs_difference_from_eager"] == 0 and compiled["max_abs_difference_from_eager"] < 1e-6
    assert compiled["host_ms_per_step"] > 0 and compiled["first_call_seconds"] > 0
    assert json.loads((tmp_path / "o.json").read_text()) == report


def test_the_backbone_sweep_names_what_it_captured_and_why_it_did_not(tmp_path, capsys) -> None:
    """``python -m bench.backbone_sweep`` (the GPU default simulated on the CPU, each row through run_unsup.py /
    run_diffcse.py): BERT's SimCSE step is captured and logs the run without the graph's steps; I-BERT's is not
    captured, for its quantisation modules' assert reads the host, and the row names that line; ALBERT's DiffCSE is
    refused (its embeddings are narrower than its hidden states). The rows go to the table and the JSON file."""
    import logging

    from bench.backbone_sweep import main as sweep_main

    level = logging.getLogger("cse_repro").level
    output = tmp_path / "sweep.json"
    rows = sweep_main(["--archs", "bert", "ibert", "--settings", "simcse", "--steps", "4",
                       "--output_json", str(output)])
    bert, ibert = rows
    assert (bert.outcome, bert.equal, bert.replays) == ("captured", True, 1)  # of 4 steps, the last replayed
    assert (ibert.outcome, ibert.equal, ibert.replays) == ("not captured", True, 0)
    assert "transformers/models/ibert/quant_modules.py:" in ibert.reason
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["backbone", "setting", "outcome", "detail"]
    assert table[1].split() == ["bert", "simcse", "captured", "replays:", "1,", "steps", "equal"]
    assert table[2].split()[:4] == ["ibert", "simcse", "not", "captured"] and "quant_modules.py:" in table[2]
    assert len(table) == 3  # the runs' own output stays out of the table
    assert [row["outcome"] for row in json.loads(output.read_text())] == ["captured", "not captured"]
    albert, = sweep_main(["--archs", "albert", "--settings", "diffcse_row_seeded", "--steps", "4"])
    assert albert.outcome == "refused" and "embedding_size" in albert.reason
    assert logging.getLogger("cse_repro").level == level  # later tests in this process log as before


@pytest.mark.parametrize("raised, outcome, reason", [
    (SystemExit(2), "refused", "run_unsup.py: error: argument --x: invalid value"),  # argparse's line, on stderr
    (RuntimeError("a bug\n in two lines"), "failed", "RuntimeError: a bug in two lines")])
def test_a_sweep_row_that_stops_says_how(raised, outcome, reason, tmp_path, monkeypatch) -> None:
    """A run that argparse stops gives a refused row with the line it wrote; anything else unexpected a failed row
    (its type and message), and the sweep goes on to the next row."""
    import bench.backbone_sweep as backbone_sweep

    def stops(method, argv, generator=None):
        print("run_unsup.py: error: argument --x: invalid value", file=sys.stderr)
        raise raised

    monkeypatch.setattr(backbone_sweep, "run_method", stops)
    row = backbone_sweep.sweep_one("bert", "simcse", tmp_path, 2, tmp_path / "corpus.txt", tmp_path / "generator")
    assert (row.outcome, row.reason) == (outcome, reason)
