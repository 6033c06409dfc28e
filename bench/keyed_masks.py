"""What the keyed (row-seeded) dropout masks cost in a training step: the share of the step spent generating masks
and rates, and the step time against torch's stream dropout.

    python -m bench.keyed_masks --config minilm --batches 64 256 --precisions fp32 bf16 --threads 1 \
        --output_json bench/results/cpu_keyed_masks_minilm.json
    python -m bench.keyed_masks --device cuda --config bert-base --batches 64 512 --precisions bf16

For each (batch, precision) the same SimCSE model (random weights of the config's shape, length ``--seq_len``)
takes uncached training steps (forward, backward, AdamW) with three kinds of dropout masks:

- ``stream``: torch's generator (``F.dropout``, SDPA attention), the papers' code;
- ``row_seeded``: keyed masks as trained (models/row_seeded.py): the ``torch.compile``'d kernel where it builds;
- ``row_seeded_int32``: the same masks through the op-by-op int32 route (the fallback without a compiler);
- ``row_seeded_int64``: the same masks through the int64 reference route (``keyed_element_bits >= threshold``), i.e. how
  they were computed before this work, so every speed-up is measured in the same run.

"mask s" is the time inside mask and rate generation (``keyed_keep_mask_from`` and ``keyed_uniforms`` as
trainers/keyed_dropout.py calls them), summed over the step: ``perf_counter`` on CPU, CUDA events around each call on a GPU
(read after the step, so the step is not synchronised); "share" = mask s / step s. "ops" is the number of ATen
operations one step dispatches (bench/step_ops.py; a compiled keep-mask call counts one) and "host ms" the time until
the step's Python returns, before the device is synchronised: on a GPU a launch-bound step costs about its host time,
so these show what the host does per step.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import time
from pathlib import Path
from typing import Callable, Iterator

import torch

import models.row_seeded as row_seeded
import trainers.keyed_dropout as keyed_module
from bench.step_ops import count_ops, make_batch
from bench.train_throughput import bert_config, build_method_model
from models.row_seeded import keyed_element_bits

MASK_FUNCTIONS = ("keyed_keep_mask_from", "keyed_uniforms")
VARIANTS = ("stream", "row_seeded", "row_seeded_int32", "row_seeded_int64")


def reference_keep_mask(seed: int, operands: row_seeded.KeepOperands, shape: torch.Size) -> torch.Tensor:
    """The int64 route: every 32-bit number from :func:`keyed_element_bits`, compared with ``ceil(rate * 2**32)``."""
    return keyed_element_bits(seed, operands.row_ids, shape) >= operands.thresholds.view(-1, *[1] * (len(shape) - 1))


class MaskTimer:
    """Wraps the mask functions trainers/keyed_dropout.py calls and sums the time spent in them."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.seconds = 0.0
        self.events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []

    def wrap(self, function: Callable) -> Callable:
        def timed(*args, **kwargs):
            if self.device.type == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                out = function(*args, **kwargs)
                end.record()
                self.events.append((start, end))
                return out
            started = time.perf_counter()
            out = function(*args, **kwargs)
            self.seconds += time.perf_counter() - started
            return out
        return timed

    def total(self) -> float:
        """Seconds in mask generation since the last call (CUDA: reads the events, after the step)."""
        seconds = self.seconds + sum(start.elapsed_time(end) / 1000 for start, end in self.events)
        self.seconds, self.events = 0.0, []
        return seconds


@contextlib.contextmanager
def timed_masks(timer: MaskTimer, variant: str) -> Iterator[None]:
    originals = {name: getattr(keyed_module, name) for name in MASK_FUNCTIONS}
    int64_route, fuse = variant == "row_seeded_int64", row_seeded.FUSE_MASKS
    row_seeded.FUSE_MASKS = variant == "row_seeded"
    try:
        for name, function in originals.items():
            if name == "keyed_keep_mask_from" and int64_route:
                function = reference_keep_mask
            setattr(keyed_module, name, timer.wrap(function))
        yield
    finally:
        for name, function in originals.items():
            setattr(keyed_module, name, function)
        row_seeded.FUSE_MASKS = fuse


def measure(args: argparse.Namespace, batch_size: int, precision: str, variant: str) -> dict:
    device = torch.device(args.device)
    torch.manual_seed(0)
    config = bert_config(args.config)
    masks = "stream" if variant == "stream" else "row_seeded"
    model = build_method_model("simcse", config, dropout_masks=masks).to(device).train()
    batch = {k: v.to(device) for k, v in make_batch("simcse", batch_size, args.seq_len, config.vocab_size).items()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-5, fused=device.type == "cuda")
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    timer = MaskTimer(device)
    steps, mask_seconds, host_seconds = [], [], []

    def step() -> None:
        with keyed_module.keyed_step(model, batch_size), \
                torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    with timed_masks(timer, variant):
        for index in range(args.warmup + args.steps):
            sync()
            started = time.perf_counter()
            step()
            host = time.perf_counter() - started
            sync()
            elapsed, masked = time.perf_counter() - started, timer.total()
            if index >= args.warmup:
                steps.append(elapsed)
                mask_seconds.append(masked)
                host_seconds.append(host)
        with count_ops(device.type) as counter:  # one more step, counted (not timed)
            step()
        sync()
        timer.total()
    step_time, mask = sorted(steps)[len(steps) // 2], sorted(mask_seconds)[len(mask_seconds) // 2]
    return {"config": args.config, "device": args.device, "batch": batch_size, "seq_len": args.seq_len,
            "precision": precision, "variant": variant, "threads": torch.get_num_threads(), "step_seconds": step_time,
            "mask_seconds": mask, "mask_share": mask / step_time, "step_times": steps, "ops": counter.total,
            "host_ms": 1000 * sorted(host_seconds)[len(host_seconds) // 2]}


def markdown(rows: list[dict]) -> str:
    """One line per (batch, precision, variant), with the step time against the stream step's."""
    stream = {(r["batch"], r["precision"]): r["step_seconds"] for r in rows if r["variant"] == "stream"}
    counted = all("ops" in r for r in rows)  # results recorded before the op count have no such columns
    lines = ["| config | batch | precision | masks | s/step | x stream | mask s/step | mask share |"
             + (" ops/step | host ms |" if counted else ""),
             "|---|---|---|---|---|---|---|---|" + ("---|---|" if counted else "")]
    for r in rows:
        base = stream.get((r["batch"], r["precision"]))
        ratio = f"{r['step_seconds'] / base:.2f}" if base else "-"
        share = "-" if r["variant"] == "stream" else f"{100 * r['mask_share']:.1f}%"
        mask = "-" if r["variant"] == "stream" else f"{r['mask_seconds']:.4f}"
        lines.append(f"| {r['config']} | {r['batch']} | {r['precision']} | {r['variant']} | {r['step_seconds']:.3f} "
                     f"| {ratio} | {mask} | {share} |" + (f" {r['ops']} | {r['host_ms']:.1f} |" if counted else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(prog="python -m bench.keyed_masks", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="minilm", choices=("bert-base", "minilm", "tiny"))
    parser.add_argument("--batches", nargs="+", type=int, default=[64, 256])
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=("fp32", "bf16"))
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--seq_len", type=int, default=32)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads on CPU (0: torch's default)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--output_json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = []
    for batch_size in args.batches:
        for precision in args.precisions:
            for variant in args.variants:
                rows.append(measure(args, batch_size, precision, variant))
                r = rows[-1]
                print(f"B={batch_size:5d} {precision} {variant:17s} step {r['step_seconds']:.3f} s, masks "
                      f"{r['mask_seconds']:.4f} s ({100 * r['mask_share']:.1f}%), {r['ops']} ops, host "
                      f"{r['host_ms']:.1f} ms", flush=True)
                if args.output_json:
                    args.output_json.parent.mkdir(parents=True, exist_ok=True)
                    args.output_json.write_text(json.dumps(rows, indent=1) + "\n")
    print()
    print(markdown(rows))
    return rows


if __name__ == "__main__":
    main()
