"""scripts/gpu_check.sh, the one command for a CUDA machine: on CPU its dry run lists what it would run, a real run
refuses with one line, and its report renders from a results file (the committed H100 one)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench.gpu_check import REPO_ROOT, device_slug, junit_counts, markdown, mnrl_sentences_per_second, plan

SCRIPT = REPO_ROOT / "scripts" / "gpu_check.sh"


def run_script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHON": sys.executable})


def test_the_dry_run_lists_every_step_and_passes(tmp_path):
    done = run_script("--dry_run", "--work_dir", str(tmp_path / "raw"), "--results_dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    for number, name in enumerate(["end_to_end", "real_loop_fast", "real_loop_step_graph", "real_loop_eager",
                                   "real_loop_step_graph_backbone", "real_loop_fast_esimcse", "real_loop_fast_promptbert", "real_loop_fast_diffcse",
                                   "real_loop_fast_simcse_pp", "real_loop_fast_s_simcse", "real_loop_fast_row_seeded",
                                   "real_loop_fast_b512", "real_loop_fast_b512_cached",
                                   "real_loop_fast_diffcse_official_code", "real_loop_step_graph_esimcse",
                                   "real_loop_step_graph_promptbert",
                                   "real_loop_step_graph_diffcse", "real_loop_step_graph_simcse_pp",
                                   "real_loop_step_graph_s_simcse", "real_loop_step_graph_row_seeded",
                                   "real_loop_step_graph_b512", "real_loop_step_graph_b512_row_seeded",
                                   "real_loop_step_graph_b512_cached", "real_loop_step_graph_b512_cached_256",
                                   "step_profile", "step_profile_graph", "step_profile_graph_b512_row_seeded",
                                   "step_profile_graph_b512_cached", "mnrl_b64", "optimizer_step", "eval_speed",
                                   "cuda_tests", "throughput_b64", "throughput_b512", "cached_memory", "keyed_masks"], 1):
        assert f"  {number}. {name}: " in done.stdout
    # what users run comes first, as they type it (bench/gpu_e2e.py's own dry run, tests/test_gpu_e2e.py)
    assert "accelerate launch run_unsup.py --method esimcse --dup_rate 0.32 " in done.stdout
    assert "--output_json " + str(tmp_path / "raw" / "real_loop_fast_row_seeded.json") + " -- --dropout_masks row_seeded" \
        " --step_graph false" in done.stdout
    assert re.search(r"--method simcse --fast_path true --steps 200 --batch_size 512 .*real_loop_fast_b512_cached.json "
                     r"-- --cache_chunk_size 128 --step_graph false\n", done.stdout)
    assert re.search(r"--method diffcse --fast_path true --steps 300 .*real_loop_fast_diffcse_official_code.json "
                     r"-- --fidelity official_code --step_graph false\n", done.stdout)
    # the fast path alone (the step graph is the GPU default)
    assert re.search(r"--steps 1000 .*real_loop_fast.json -- --step_graph false\n", done.stdout)
    assert re.search(r"--profile_steps 80:120 .*step_profile.json -- --step_graph false\n", done.stdout)
    assert re.search(r"--method promptbert --fast_path true --steps 300 .*real_loop_step_graph_promptbert.json "
                     r"-- --step_graph true\n", done.stdout)
    assert re.search(r"--profile_steps 80:120 .*step_profile_graph.json -- --step_graph true\n", done.stdout)
    assert re.search(r"--steps 60 --batch_size 512 --profile_steps 40:60 .*step_profile_graph_b512_cached.json -- "
                     r"--cache_chunk_size 128 --step_graph true\n", done.stdout)  # the cached step's kernels
    assert re.search(r"--steps 60 --batch_size 512 --profile_steps 40:60 .*step_profile_graph_b512_row_seeded.json "
                     r"-- --dropout_masks row_seeded --step_graph true\n", done.stdout)
    assert re.search(r"--steps 200 --batch_size 512 .*real_loop_step_graph_b512_cached.json -- --cache_chunk_size 128 "
                     r"--step_graph true\n", done.stdout)
    assert re.search(r"--steps 200 --batch_size 512 .*real_loop_step_graph_b512_row_seeded.json -- --dropout_masks "
                     r"row_seeded --step_graph true\n", done.stdout)  # the cached step's masks, uncached
    assert re.search(r"--steps 200 --batch_size 512 .*real_loop_step_graph_b512_cached_256.json -- --cache_chunk_size "
                     r"256 --step_graph true\n", done.stdout)
    # each real-loop run its own folder and log in the shared work directory (23 loops and the 4 profiled runs)
    run_names = re.findall(r"--workdir \S+/real_loop --run_name (\S+) ", done.stdout)
    assert len(set(run_names)) == len(run_names) == 27 and "real_loop_fast_b512_cached" in run_names
    assert "-m pytest -q -m cuda tests/test_cuda.py -n 8 -rs" in done.stdout  # pytest-xdist is installed here
    assert "--device cuda --config bert-base" in done.stdout and "--batch_size 512" in done.stdout
    assert f"{tmp_path}/gpu_<device>.json" in done.stdout
    assert not list(tmp_path.iterdir())  # nothing written


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present: the real check would run")
def test_without_a_gpu_it_refuses_in_one_line(tmp_path):
    done = run_script("--work_dir", str(tmp_path / "raw"), "--results_dir", str(tmp_path))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "no CUDA device" in done.stderr and "--dry_run" in done.stderr
    assert not list(tmp_path.iterdir())


def test_quick_keeps_what_users_run_the_cuda_tests_and_the_step_at_batch_64(tmp_path):
    done = run_script("--dry_run", "--quick", "--work_dir", str(tmp_path / "raw"), "--results_dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert re.findall(r"^  \d+\. (\w+): ", done.stdout, flags=re.MULTILINE) == [
        "end_to_end", "cuda_tests", "throughput_b64"]


def test_only_keeps_the_steps_named_in_their_order_and_refuses_an_unknown_one(tmp_path):
    done = run_script("--dry_run", "--only", "real_loop_eager", "cuda_tests", "real_loop_fast", "--work_dir",
                      str(tmp_path / "raw"), "--results_dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert re.findall(r"^  \d+\. (\w+): ", done.stdout, flags=re.MULTILINE) == [
        "real_loop_eager", "cuda_tests", "real_loop_fast"]  # not the plan's order: the most wanted first
    wrong = run_script("--dry_run", "--only", "real_loops")
    assert wrong.returncode == 2 and "--only: no step named real_loops" in wrong.stderr


def test_the_deadline_cuts_each_steps_time_to_what_is_left_and_starts_none_too_late():
    """``--deadline_seconds``: a step gets ``--step_seconds`` or the time left, whichever is less; with under
    SHORTEST_STEP_SECONDS left it is not started; the report lists it as not run, not as failed."""
    from bench.gpu_check import NOT_RUN, SHORTEST_STEP_SECONDS, seconds_for_step

    assert seconds_for_step(None, None, 1e6) is None and seconds_for_step(90.0, None, 1e6) == 90.0
    assert seconds_for_step(90.0, 500.0, 100.0) == 90.0 and seconds_for_step(None, 500.0, 100.0) == 400.0
    assert seconds_for_step(90.0, 500.0, 450.0) == 50.0
    assert seconds_for_step(90.0, 500.0, 500.0 - SHORTEST_STEP_SECONDS + 1) == 0.0
    report = {"date": "2026-11-26", "commit": "abc", "environment": {"device": "NVIDIA H200", "torch": "2.11",
                                                                    "cuda": "13.0", "transformers": "5.24"},
              "steps": [{"name": "real_loop_fast", "exit": 0, "seconds": 80.0},
                        {"name": "eval_speed", "exit": NOT_RUN, "seconds": 0.0}]}
    text = markdown(report)
    assert "Every step that ran passed." in text and "Not run (no time left of --deadline_seconds): eval_speed" in text
    report["steps"][0].update(exit=124, timed_out=True)  # stopped at the deadline: no verdict, not a failure
    text = markdown(report)
    assert "Steps failed" not in text and "Every step that ran to its end passed." in text
    assert "Stopped at their time limit" in text and text.split("Stopped at their time limit")[1].split("\n")[0] \
        .endswith(": real_loop_fast")
    report["steps"][0].update(exit=1, timed_out=False)
    assert "Steps failed: real_loop_fast\n" in markdown(report)
    report["steps"][0] = {"name": "real_loop_fast", "exit": 124, "seconds": 80.0}  # an older report: 124 = stopped
    assert "Steps failed" not in markdown(report)


def test_the_check_runs_the_named_steps_in_order_until_its_deadline(tmp_path, monkeypatch):
    """``main`` itself (a GPU simulated: the device query and the plan stubbed): the steps run in ``--only``'s order,
    the second is stopped where the deadline falls (exit 124), the third is not started, and the report says so."""
    import bench.gpu_check as gpu_check

    steps = [gpu_check.Step(name, (sys.executable, "-c", code), tmp_path / f"{name}.json")
             for name, code in (("slow", "import time; time.sleep(30)"), ("quick", "pass"), ("last", "pass"))]
    monkeypatch.setattr(gpu_check, "plan", lambda *args, **kwargs: steps)
    monkeypatch.setattr(gpu_check, "environment", lambda: {"device": "Simulated GPU", "torch": torch.__version__,
                                                           "cuda": "13.0", "transformers": "5"})
    monkeypatch.setattr(gpu_check, "SHORTEST_STEP_SECONDS", 1.0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    code = gpu_check.main(["--only", "quick", "slow", "last", "--deadline_seconds", "3", "--work_dir",
                           str(tmp_path / "raw"), "--results_dir", str(tmp_path)])
    report = json.loads((tmp_path / "gpu_simulated_gpu.json").read_text())
    assert [(s["name"], s["exit"]) for s in report["steps"]] == [
        ("quick", 0), ("slow", gpu_check.TIMED_OUT), ("last", gpu_check.NOT_RUN)]
    assert 1.5 < report["steps"][1]["seconds"] < 3.5 and code == 1
    assert report["steps"][1]["timed_out"] and not report["steps"][0]["timed_out"]
    text = (tmp_path / "gpu_simulated_gpu.md").read_text()
    assert "Not run (no time left of --deadline_seconds): last" in text
    assert "Stopped at their time limit" in text and "Steps failed" not in text


def test_the_steps_write_where_the_report_reads(tmp_path):
    steps = plan(tmp_path)
    assert [s.output.parent for s in steps] == [tmp_path] * len(steps)
    for step in steps:
        assert str(step.output) in " ".join(step.argv)


def test_junit_counts(tmp_path):
    xml = tmp_path / "r.xml"
    xml.write_text('<testsuites><testsuite tests="5" failures="1" errors="0" skipped="2">'
                   '<testcase name="a"><skipped message="needs two CUDA devices"/></testcase></testsuite>'
                   '</testsuites>')
    assert junit_counts(xml) == {"passed": 2, "failed": 1, "errors": 0, "skipped": 2}


def test_the_committed_gpu_report_renders():
    reports = sorted((REPO_ROOT / "bench" / "results").glob("gpu_*.json"))
    if not reports:
        pytest.skip("no GPU report committed yet")
    for path in reports:
        report = json.loads(path.read_text())
        assert path.stem.startswith(f"gpu_{device_slug(report['environment']['device'])}")
        text = markdown(report)
        assert text.startswith(f"# GPU check: {report['environment']['device']}")
        if "tests" in report:
            assert f"{report['tests']['passed']} passed" in text
        else:  # a check whose steps left the CUDA tests out says nothing of them
            assert "CUDA tests" not in text
        sections = {"throughput_b64": "| simcse | 64 |", "cached_memory": "| 64 | uncached |",
                    "keyed_masks": "| bert-base | 64 | bf16 | stream |", "end_to_end": "## What users run",
                    "real_loop_fast": "| fast path (--torch_compile true) |",
                    "optimizer_step": "## The end of the step: clipping + AdamW"}
        step_graph_loops = [key for key in report if key.startswith("real_loop_step_graph")]
        assert any(key in report for key in sections) or step_graph_loops
        for key, row in sections.items():
            assert (row in text) == (key in report), (path.name, key)
        loops = [key for key in report if key.startswith("real_loop_") and report[key]]
        if loops:  # one row for each, a loop that an older plan named too (41eb5f0's step_graph_layers)
            section = text.split("## The real loop")[1].split("\n## ")[0]
            assert len([line for line in section.splitlines() if line.startswith("| ")]) == 1 + len(loops), path.name
        for key in step_graph_loops:  # e.g. "| simcse | fast path (--torch_compile true) --step_graph true (997 ..."
            replays = report[key]["step_graph_replays"]
            assert f"--step_graph true ({replays} steps replayed) |" in text, (path.name, key)
        assert path.with_suffix(".md").read_text() == text  # the committed table is this report's


def test_device_slug():
    assert device_slug("NVIDIA H100 80GB HBM3") == "nvidia_h100_80gb_hbm3"


def test_a_step_past_its_seconds_is_stopped_with_its_children_and_recorded(tmp_path):
    """``--step_seconds``: a step that runs too long is killed (its whole process group) and recorded with exit 124;
    the check goes on with the next step."""
    from bench.gpu_check import TIMED_OUT, Step, run_step

    marker = tmp_path / "child_alive"
    child = f"import time, pathlib; time.sleep(3); pathlib.Path({str(marker)!r}).write_text('x')"
    parent = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {child!r}]); time.sleep(60)"
    outcome = run_step(Step("slow", (sys.executable, "-c", parent), tmp_path / "out.json"), seconds_allowed=1)
    assert outcome["exit"] == TIMED_OUT and outcome["seconds"] < 10
    import time

    time.sleep(4)
    assert not marker.exists()  # the child went with its parent
    assert run_step(Step("quick", (sys.executable, "-c", "pass"), tmp_path / "o.json"), seconds_allowed=30)["exit"] == 0


def test_the_real_loops_ratio_to_mnrl_reads_the_mnrl_only_step_when_the_whole_list_did_not_run():
    loop = {"method": "simcse", "fast_path": True, "steps": 1000, "batch_size": 64,
            "steady_sentences_per_second": 3000.0}
    report = {"date": "d", "commit": "c", "environment": {"device": "GPU", "torch": "t", "cuda": "c",
              "transformers": "x"}, "steps": [], "real_loop_fast": loop,
              "mnrl_b64": {"results": [{"name": "simcse", "sentences_per_second": 2000.0},
                                       {"name": "st_mnrl", "sentences_per_second": 1000.0}]}}
    assert "| 3,000.0 | 3.00x |" in markdown(report)
    report["throughput_b64"] = {"results": [{"name": "st_mnrl", "sentences_per_second": 1500.0}]}
    assert mnrl_sentences_per_second(report, 64) == 1500.0  # the whole list's, when it ran
    del report["throughput_b64"], report["mnrl_b64"]
    assert "| 3,000.0 | - |" in markdown(report)


def test_the_optimizer_step_table_shows_each_variant_and_its_error():
    report = {"date": "d", "commit": "c", "environment": {"device": "GPU", "torch": "t", "cuda": "c",
              "transformers": "x"}, "steps": [],
              "optimizer_step": {"results": [
                  {"variant": "eager", "host_ms_per_step": 2.5, "device_ms_per_step_with_gradient_copies": 1.25,
                   "first_call_seconds": 0.1, "max_abs_difference_from_eager": 0.0},
                  {"variant": "compiled_cuda_graphs", "error": "RuntimeError: boom"}]}}
    text = markdown(report)
    assert "| eager | 2.5 | 1.25 | 0.1 | 0 |  |" in text
    assert "| compiled_cuda_graphs | - | - | - | - | RuntimeError: boom |" in text


def test_the_step_profile_section_shows_the_host_operators_and_the_device_kernels():
    """The report's step-profile section: wall, busy and the host parts, the top host operators, and (reports since
    the kernels were recorded) what the device's busy time is made of; an older report without them still renders."""
    profile = {"steps": 40, "wall_ms_per_step": 26.2, "device_busy_ms_per_step": 20.7,
               "host_ms_per_step_by_part": {"forward": 6.0, "optimizer": 2.1},
               "top_host_operators_ms_per_step": {"cudaGraphLaunch": 1.96}}
    report = {"date": "2026-11-27", "commit": "abc", "environment": {"device": "NVIDIA H100", "torch": "2.11",
                                                                    "cuda": "13.0", "transformers": "5.24"},
              "steps": [{"name": "step_profile", "exit": 0, "seconds": 80.0}],
              "step_profile": {"step_profile": profile}}
    old = markdown(report)
    assert "Wall 26.20 ms/step; the GPU busy 20.70 ms/step" in old and "| `cudaGraphLaunch` | 1.960 |" in old
    assert "device kernel" not in old
    profile |= {"device_kernels_per_step": 812.0, "top_device_kernels_ms_per_step": {"sm90_xmma_gemm": 6.5}}
    text = markdown(report)
    assert "812.0 device kernels per step" in text and "| `sm90_xmma_gemm` | 6.500 |" in text
    assert "## Where the fast path's step goes" in text and "the step graph's step" not in text
    report["step_profile_graph"] = {"step_profile": profile | {"wall_ms_per_step": 11.0}}
    both = markdown(report)
    assert "## Where the step graph's step goes" in both and "Wall 11.00 ms/step" in both
    assert both.index("the fast path's step goes") < both.index("the step graph's step goes")
    report["step_profile_graph_b512_cached"] = {"step_profile": profile | {"wall_ms_per_step": 88.9}}
    cached = markdown(report)
    assert "## Where the step graph's cached step at batch 512 (chunks of 128) goes" in cached
    assert "Wall 88.90 ms/step" in cached


def test_the_real_loop_table_says_how_many_steps_the_step_graph_replayed():
    loop = {"method": "simcse", "fast_path": True, "steps": 1000, "batch_size": 64, "flags": ["--step_graph", "true"],
            "steady_sentences_per_second": 6000.0, "step_graph_replays": 993}
    report = {"date": "2026-11-27", "commit": "abc", "environment": {"device": "NVIDIA H100", "torch": "2.11",
                                                                    "cuda": "13.0", "transformers": "5.24"},
              "steps": [], "real_loop_step_graph": loop}
    assert "| simcse | fast path (--torch_compile true) --step_graph true (993 steps replayed) | 64 | 1000 |" in \
        markdown(report)


def test_the_report_gives_the_cached_steps_time_over_each_uncached_steps_at_batch_512():
    def loop(rate: float | None, *flags: str) -> dict:
        return {"method": "simcse", "fast_path": True, "steps": 200, "batch_size": 512,
                "flags": [*flags, "--step_graph", "true"], "steady_sentences_per_second": rate}

    report = {"date": "2026-11-28", "commit": "abc", "steps": [],
              "environment": {"device": "NVIDIA H100", "torch": "2.11", "cuda": "13.0", "transformers": "5.24"},
              "real_loop_step_graph_b512": loop(9000.0), "real_loop_step_graph_b512_cached": loop(6000.0)}
    line = ("The cached step at batch 512 (chunks of 128), time per step: 1.50x the default uncached step (stream "
            "masks) (9,000.0 / 6,000.0 sentences/s).")
    assert line in markdown(report).splitlines()
    report["real_loop_step_graph_b512_row_seeded"] = loop(9900.0, "--dropout_masks", "row_seeded")
    assert ("time per step: 1.65x the uncached step with the same (row-seeded) masks (9,900.0 / 6,000.0 sentences/s); "
            "1.50x the default") in markdown(report)
    report["real_loop_step_graph_b512_cached_256"] = loop(7500.0, "--cache_chunk_size", "256")
    assert ("The cached step at batch 512 (chunks of 256), time per step: 1.32x the uncached step with the same "
            "(row-seeded) masks (9,900.0 / 7,500.0 sentences/s); 1.20x the default") in markdown(report)
    report["real_loop_step_graph_b512_cached"] = loop(None)  # stopped before its steady state: no ratio
    assert "(chunks of 128)" not in markdown(report) and "(chunks of 256)" in markdown(report)


def test_a_short_lease_can_run_only_some_cuda_tests(tmp_path):
    done = run_script("--dry_run", "--work_dir", str(tmp_path / "raw"), "--results_dir", str(tmp_path), "--only",
                      "cuda_tests", "--cuda_tests", "step_graph or esimcse")
    assert done.returncode == 0, done.stderr
    assert "tests/test_cuda.py -n 8 -k 'step_graph or esimcse' -rs" in done.stdout


def test_the_cuda_tests_run_in_worker_processes_only_where_pytest_xdist_is_installed(monkeypatch):
    import importlib.util

    from bench.gpu_check import CUDA_TEST_WORKERS, cuda_test_workers

    assert cuda_test_workers() == ("-n", str(CUDA_TEST_WORKERS))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert cuda_test_workers() == ()
