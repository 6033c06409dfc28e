"""``python -m bench.train_throughput`` on the tiny config: every method and the sentence-transformers reference
take real training steps, and the report holds what docs/benchmarks.md quotes."""
from __future__ import annotations

import json
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
