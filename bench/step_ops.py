"""Host-side work of a training step: how many ATen operations it dispatches (on a GPU each is at least one kernel
launch, and a launch-bound step costs about its host time) and the host milliseconds until the step's Python
returns (before any device synchronisation).

A call into the compiled keyed-mask kernel (``models.row_seeded.fused_keep_mask``) counts as ONE operation, named
``compiled keep-mask``: under a dispatch mode ``torch.compile``'d code would run op by op, so :func:`count_ops` runs
the kernel with the mode switched off and counts the call instead (what a GPU launches for it: one or two fused
kernels behind one guard check).

    python -m bench.step_ops --config tiny --batch 64 --seq_len 32

prints, for SimCSE: the uncached step with stream masks, with row-seeded masks, and the cached step (chunks of
batch/4, row-seeded), each with its op count, host ms and the ops attributed to the repository function that issued
them (``--by_source``).
"""
from __future__ import annotations

import argparse
import contextlib
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Callable, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

import models.row_seeded as row_seeded

COMPILED = "compiled keep-mask"
_REPOSITORY = str(Path(__file__).resolve().parents[1])


class OpCounter(TorchDispatchMode):
    """Counts every ATen operation dispatched inside it, by name; with ``by_source``, also by the innermost function
    of this repository on the stack (``file:function``; ``autograd`` for the backward's ops)."""

    def __init__(self, by_source: bool = False) -> None:
        super().__init__()
        self.ops: Counter = Counter()
        self.sources: Counter = Counter()
        self.by_source = by_source

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func._overloadpacket.__name__] += 1
        if self.by_source:
            self.sources[_source()] += 1
        return func(*args, **(kwargs or {}))

    def add_compiled_call(self) -> None:
        self.ops[COMPILED] += 1
        if self.by_source:
            self.sources[f"{_source()} ({COMPILED})"] += 1

    @property
    def total(self) -> int:
        return sum(self.ops.values())


def make_batch(method: str, batch_size: int, seq_len: int, vocab_size: int) -> dict[str, torch.Tensor]:
    """Random token ids [batch, views, seq_len] (SimCSE: view 1 = view 0; sup-SimCSE: 3 views), all attended."""
    g = torch.Generator().manual_seed(0)
    views = 3 if method == "sup_simcse" else 2
    ids = torch.randint(1000, vocab_size, (batch_size, views, seq_len), generator=g)
    if method != "sup_simcse":
        ids[:, 1] = ids[:, 0]
    ids[:, :, 0] = 101  # [CLS]
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def _source() -> str:
    frames = [frame for frame in traceback.extract_stack()[:-2]
              if frame.filename.startswith(_REPOSITORY) and not frame.filename.endswith("step_ops.py")
              and "site-packages" not in frame.filename]  # a virtual environment inside the checkout is not ours
    if not frames:
        return "autograd"
    frame = frames[-1]
    return f"{Path(frame.filename).name}:{frame.name}"


@contextlib.contextmanager
def count_ops(device_type: str = "cpu", by_source: bool = False) -> Iterator[OpCounter]:
    """Within the block, count the ATen operations dispatched (:class:`OpCounter`), a compiled keep-mask call as
    one."""
    counter = OpCounter(by_source)
    kernel = row_seeded.fused_keep_mask(device_type)
    if kernel is not None:
        def counted(*args, **kwargs):
            counter.add_compiled_call()
            with _disable_current_modes():
                return kernel(*args, **kwargs)
        row_seeded._FUSED[device_type] = counted
    try:
        with counter:
            yield counter
    finally:
        if kernel is not None:
            row_seeded._FUSED[device_type] = kernel


def host_ms(step: Callable[[], None], repeats: int = 3) -> float:
    """Median host milliseconds of ``step`` (until it returns; no device synchronisation inside the timing)."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        step()
        times.append(1000 * (time.perf_counter() - started))
    return sorted(times)[len(times) // 2]


def simcse_steps(config_name: str, batch: int, seq_len: int, device: str = "cpu") -> dict[str, Callable[[], None]]:
    """SimCSE training steps (forward + backward, gradients dropped) of a random model of ``config_name``: uncached
    with stream masks, uncached with row-seeded masks, cached in chunks of ``batch // 4`` with row-seeded masks."""
    from bench.train_throughput import bert_config, build_method_model
    from trainers.cached_step import cached_forward_backward
    from trainers.keyed_dropout import keyed_step

    config = bert_config(config_name)
    data = {k: v.to(device) for k, v in make_batch("simcse", batch, seq_len, config.vocab_size).items()}
    steps = {}
    for name, masks, chunk in (("uncached stream", "stream", 0), ("uncached row_seeded", "row_seeded", 0),
                               (f"cached {batch // 4} row_seeded", "row_seeded", batch // 4)):
        torch.manual_seed(0)
        model = build_method_model("simcse", config, dropout_masks=masks).to(device).train()

        def step(model=model, chunk=chunk) -> None:
            if chunk:
                cached_forward_backward(model, data, chunk)
            else:
                with keyed_step(model, batch):
                    model(**data).loss.backward()
            model.zero_grad(set_to_none=True)
        steps[name] = step
    return steps


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(prog="python -m bench.step_ops", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="tiny", choices=("bert-base", "minilm", "tiny"))
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seq_len", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--by_source", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = []
    for name, step in simcse_steps(args.config, args.batch, args.seq_len).items():
        step(), step()  # warm-up: compilation, allocator
        with count_ops(by_source=args.by_source) as counter:
            step()
        rows.append({"step": name, "ops": counter.total, "host_ms": host_ms(step, args.repeats),
                     "compiled_calls": counter.ops[COMPILED]})
        print(f"{name:24s} {counter.total:6d} ops ({counter.ops[COMPILED]} compiled keep-mask calls), "
              f"{rows[-1]['host_ms']:.1f} host ms", flush=True)
        if args.by_source:
            for source, count in counter.sources.most_common():
                print(f"    {count:6d}  {source}")
    return rows


if __name__ == "__main__":
    main()
