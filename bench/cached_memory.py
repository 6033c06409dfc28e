"""Peak memory and step time of cached (``--cache_chunk_size``) vs uncached training steps, and the achieved GFLOP/s
against this machine's GEMM ceiling measured in the same run on the step's own matrix shapes.

    python -m bench.cached_memory --configs tiny minilm --methods simcse sup_simcse --batches 64 256 1024 \
        --chunk 32 --threads 1 --output_json bench/results/cpu_cached_memory.json

Every (config, method, batch, mode) runs in a fresh subprocess, so its peak memory is its own: on CPU the process's
peak RSS (``ru_maxrss``) and its growth over the RSS after the model, batch and optimizer exist ("step MiB"); with
``--device cuda`` ``max_memory_allocated`` (and its growth over ``memory_allocated`` before the steps); fp32, or
bf16 autocast with ``--bf16``. A step = forward + backward (``model(**batch).loss.backward()`` or
``trainers.cached_step.cached_forward_backward``) + AdamW + ``zero_grad``, random weights of the config's shape,
random token ids (length ``--seq_len``, all views the same sentence; sup_simcse: 3 views).

Dropout masks (``--dropout_masks``, models/row_seeded.py): each row names its masks; by default the uncached step
with the default ``stream`` masks, and with ``row_seeded`` masks (what ``--cache_chunk_size`` uses, so the cached
step equals it), and the cached step with ``row_seeded`` masks. ``--masks_modes`` picks other (chunk, masks) pairs.

FLOPs: counted in a timed step by a dispatch mode (``torch.utils.flop_counter``'s per-op formulas: matmuls and
attention, forward and backward; the cached step's extra forward included), so "GFLOP/s" = executed FLOPs / step
time. Ceiling: the same dispatch mode records the shape of every GEMM (mm, addmm, bmm, baddbmm; SDPA as its two
batched GEMMs) of the step; after the steps each distinct shape is timed alone (fp32, same threads; the row count
capped at ``--ceiling_rows`` where throughput has long saturated) and the ceiling is the step's GEMM FLOPs / the
time those GEMMs take alone: what this machine can do on exactly this mix of shapes. "% ceiling" = GFLOP/s /
ceiling (the CPU analogue of MFU).

Host work: "ops" = the ATen operations one step dispatches (bench/step_ops.py; a compiled keep-mask call counts
one), counted in one more step after the timed ones, and "host ms" = the median time until a timed step's Python
returns, before the device is synchronised (on a GPU a launch-bound step costs about its host time).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

from bench.step_ops import count_ops, make_batch
from bench.train_throughput import bert_config, build_method_model

GEMMS = {"mm", "addmm", "bmm", "baddbmm"}


class StepCounter(TorchDispatchMode):
    """Counts the FLOPs of every op ``torch.utils.flop_counter`` knows and records GEMM shapes (M, K, N, batch)."""

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0
        self.gemms: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func._overloadpacket
        if packet in flop_registry:
            self.flops += flop_registry[packet](*args, **kwargs, out_val=out)
            name = packet.__name__
            if name in GEMMS:
                a, b = (args[1], args[2]) if name in ("addmm", "baddbmm") else (args[0], args[1])
                if a.dim() == 2:
                    self.gemms[(1, a.shape[0], a.shape[1], b.shape[1])] += 1
                else:
                    self.gemms[(a.shape[0], a.shape[1], a.shape[2], b.shape[2])] += 1
            elif "scaled_dot_product" in name and "backward" not in name:
                q, k = args[0], args[1]
                bh, lq, d, lk = q.shape[0] * q.shape[1], q.shape[2], q.shape[3], k.shape[2]
                self.gemms[(bh, lq, d, lk)] += 1  # scores = q k^T
                self.gemms[(bh, lq, lk, d)] += 1  # out = p v
        return out


def gemm_ceiling(gemms: Counter, cap_rows: int, device: torch.device = torch.device("cpu"),
                 repeats: int = 3, dtype: torch.dtype = torch.float32) -> tuple[float, float]:
    """(GEMM FLOPs of the step, the GFLOP/s this device reaches on those shapes alone in ``dtype``)."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    flops = seconds = 0.0
    for (batch, m, k, n), count in gemms.items():
        scale = 1.0
        if batch * m > cap_rows:  # measure a slice; time scales linearly once the rows saturate the cores
            if batch > 1:
                new_batch = max(1, cap_rows // m)
                scale, batch = batch / new_batch, new_batch
            else:
                scale, m = m / cap_rows, cap_rows
        a = torch.randn(*((batch,) if batch > 1 else ()), m, k, device=device, dtype=dtype)
        b = torch.randn(*((batch,) if batch > 1 else ()), k, n, device=device, dtype=dtype)
        op = torch.bmm if batch > 1 else torch.mm
        op(a, b)
        best = float("inf")
        for _ in range(repeats):
            sync()
            start = time.perf_counter()
            op(a, b)
            sync()
            best = min(best, time.perf_counter() - start)
        one = 2.0 * batch * m * k * n
        flops += one * scale * count
        seconds += best * scale * count
    return flops, flops / seconds / 1e9


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def one(args) -> dict:
    """One configuration in this process."""
    from trainers.cached_step import cached_forward_backward
    from trainers.keyed_dropout import keyed_step

    torch.manual_seed(0)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    config = bert_config(args.config)
    model = build_method_model(args.method, config, dropout_masks=args.masks).to(device)
    model.train()
    batch = {k: v.to(device) for k, v in make_batch(args.method, args.batch, args.seq_len, config.vocab_size).items()}
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-5, foreach=True)

    def step() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.bf16):
            if args.chunk:
                cached_forward_backward(model, batch, args.chunk)
            else:
                with keyed_step(model, batch["input_ids"].size(0)):  # row-seeded masks: the step's seed
                    model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    sync()
    baseline = torch.cuda.memory_allocated(device) / 2**20 if device.type == "cuda" else rss_mib()
    times, hosts, counter = [], [], None
    for index in range(args.warmup + args.steps):
        start = time.perf_counter()
        if index == args.warmup:  # the first timed step also counts FLOPs and GEMM shapes (a few % slower)
            counter = StepCounter()
            with counter:
                step()
        else:
            step()
        host = time.perf_counter() - start
        sync()
        if index >= args.warmup:
            times.append(time.perf_counter() - start)
            hosts.append(host)
    with count_ops(device.type) as ops:  # one more step, its ATen ops counted (not timed)
        step()
    sync()
    peak = (torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda"
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    step_seconds = sorted(times)[len(times) // 2]
    gemm_flops, ceiling = gemm_ceiling(counter.gemms, args.ceiling_rows, device,
                                       dtype=torch.bfloat16 if args.bf16 else torch.float32)
    gflops = counter.flops / step_seconds / 1e9
    return {"config": args.config, "method": args.method, "batch": args.batch, "chunk": args.chunk, "masks": args.masks,
            "bf16": args.bf16, "seq_len": args.seq_len, "threads": torch.get_num_threads(), "step_seconds": step_seconds,
            "step_times": times, "peak_rss_mib": peak, "baseline_rss_mib": baseline, "step_mib": peak - baseline,
            "flops": counter.flops, "gemm_flops": gemm_flops, "gflops": gflops, "ceiling_gflops": ceiling,
            "percent_of_ceiling": 100.0 * gflops / ceiling, "ops": ops.total,
            "host_ms": 1000 * sorted(hosts)[len(hosts) // 2]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", default=["tiny", "minilm"])
    parser.add_argument("--methods", nargs="+", default=["simcse", "sup_simcse"])
    parser.add_argument("--batches", nargs="+", type=int, default=[64, 256, 1024])
    parser.add_argument("--chunk", type=int, default=32)
    parser.add_argument("--seq_len", type=int, default=32)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--ceiling_rows", type=int, default=8192)
    parser.add_argument("--device", default="cpu", help="cpu, or cuda (memory = max_memory_allocated)")
    parser.add_argument("--bf16", action="store_true",
                        help="bf16 autocast around the step (as training on a bf16 GPU runs); the ceiling in bf16")
    parser.add_argument("--output_json", default=None)
    parser.add_argument("--modes", nargs="+", default=["uncached:stream", "uncached:row_seeded", "cached:row_seeded"],
                        help="MODE:MASKS pairs (MODE uncached or cached, MASKS stream or row_seeded)")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--masks", default="stream", help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    parser.add_argument("--method", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one(args)))
        return
    rows = []
    for config in args.configs:
        for method in args.methods:
            for batch in args.batches:
                for mode in args.modes:
                    cached, masks = mode.split(":")
                    chunk = args.chunk if cached == "cached" else 0
                    command = [sys.executable, "-m", "bench.cached_memory", "--one", "--config", config, "--method",
                               method, "--batch", str(batch), "--chunk", str(chunk), "--masks", masks,
                               "--seq_len", str(args.seq_len),
                               "--steps", str(args.steps), "--warmup", str(args.warmup), "--threads",
                               str(args.threads), "--ceiling_rows", str(args.ceiling_rows), "--device", args.device,
                               *(["--bf16"] if args.bf16 else [])]
                    done = subprocess.run(command, capture_output=True, text=True,
                                          cwd=Path(__file__).resolve().parents[1])
                    if done.returncode != 0:
                        print(done.stderr[-2000:], file=sys.stderr)
                        raise SystemExit(done.returncode)
                    row = json.loads(done.stdout.strip().splitlines()[-1])
                    rows.append(row)
                    print(format_row(row), flush=True)
                    if args.output_json:
                        Path(args.output_json).write_text(json.dumps(rows, indent=1))
    print()
    print(markdown(rows))


def format_row(row: dict) -> str:
    mode = (f"cached {row['chunk']}" if row["chunk"] else "uncached") + f" {row.get('masks', 'stream')}"
    return (f"{row['config']:7s} {row['method']:10s} B={row['batch']:5d} {mode:10s} step {row['step_seconds']:8.2f} s "
            f"peak RSS {row['peak_rss_mib']:7.0f} MiB (step +{row['step_mib']:6.0f}) {row['gflops']:6.1f} GFLOP/s "
            f"= {row['percent_of_ceiling']:4.1f}% of {row['ceiling_gflops']:.1f}, {row.get('ops', '-')} ops, host "
            f"{row.get('host_ms', float('nan')):.1f} ms")


def markdown(rows: list[dict]) -> str:
    """One line per (config, method, batch, mode, masks): memory, time, the time ratio to the uncached stream-mask
    step of the same batch, GFLOP/s vs the ceiling."""
    lines = ["| config | method | batch | step | masks | peak RSS MiB (step +) | s/step | time vs uncached stream "
             "| GFLOP/s (% ceiling) | ceiling GFLOP/s | ops/step | host ms |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    baseline = {(r["config"], r["method"], r["batch"]): r for r in rows
                if not r["chunk"] and r.get("masks", "stream") == "stream"}
    for row in rows:
        base = baseline.get((row["config"], row["method"], row["batch"]))
        ratio = f"{row['step_seconds'] / base['step_seconds']:.2f}" if base else "-"
        mode = f"cached {row['chunk']}" if row["chunk"] else "uncached"
        lines.append(
            f"| {row['config']} | {row['method']} | {row['batch']} | {mode} | {row.get('masks', 'stream')} | "
            f"{row['peak_rss_mib']:.0f} (+{row['step_mib']:.0f}) | {row['step_seconds']:.3f} | {ratio} | "
            f"{row['gflops']:.1f} ({row['percent_of_ceiling']:.0f}%) | {row['ceiling_gflops']:.1f} | "
            f"{row.get('ops', '-')} | {row.get('host_ms', float('nan')):.1f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
