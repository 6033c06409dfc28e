"""What the end of a training step costs the host: the gradient clipping and AdamW over a backbone's parameters, as the
Trainer runs them now and compiled (issue 32: the fast path's step waits on the host, and the H100 profile of 52c6dd1
gave clipping and the optimizer about a quarter of the host's time per step, docs/benchmarks.md).

    python -m bench.optimizer_step --device cuda --config bert-base --output_json optimizer_step.json

Each variant runs the same ``--steps`` on the same parameters and gradients (fresh gradient tensors before every step,
as ``zero_grad(set_to_none=True)`` and the backward leave them), with ``--max_grad_norm`` 1.0 and a learning rate
that the linear schedule changes every step:

- ``eager``: the repository's route today: ``torch.nn.utils.clip_grad_norm_`` (foreach kernels) and
  ``torch.optim.AdamW(fused=True)`` with a float learning rate.
- ``compiled``: the clipping and ``AdamW(foreach=True, capturable=True)`` (a CPU: the per-parameter loop) with the
  learning rate a device tensor (so the schedule changes no guard), both in one ``torch.compile``d function
  (inductor's default mode).
- ``compiled_cuda_graphs`` (CUDA only): the same under ``mode="reduce-overhead"``; run last, since the CUDA-graph
  manager it creates stays in the process (on the H100, torch 2.11, the ``compiled`` variant run after it failed in
  dynamo's optimizer tracing with a bare ``AssertionError``, as it did itself; ``torch._dynamo.variables.optimizer``
  asks that manager for its current node).

Reported per variant: the host's milliseconds per step (the call alone, no synchronisation: what a step that waits on
the host pays), the device's (CUDA events over all steps), the first call's seconds (compilation), and how far its
parameters end from the eager variant's (max absolute difference after the same steps).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any, Callable

import torch

__all__ = ["VARIANTS", "main", "measure_variant"]

VARIANTS = ("eager", "compiled", "compiled_cuda_graphs")
LEARNING_RATE = 5e-5
MAX_GRAD_NORM = 1.0


def backbone_parameters(config_name: str, device: torch.device, seed: int = 0) -> list[torch.Tensor]:
    """A random BERT of ``config_name``'s shape (``bench.train_throughput.bert_config``): its parameters, fp32."""
    from transformers import BertModel

    from bench.train_throughput import bert_config

    torch.manual_seed(seed)
    return [p.detach().to(device) for p in BertModel(bert_config(config_name)).parameters()]


def step_function(variant: str, parameters: list[torch.nn.Parameter]) -> tuple[Callable[[float], None], Any]:
    """``(step(lr), optimizer)``: one clipped AdamW step of ``variant`` at learning rate ``lr``."""
    if variant == "eager":
        optimizer = torch.optim.AdamW(parameters, lr=LEARNING_RATE, fused=parameters[0].is_cuda)

        def eager_step(lr: float) -> None:
            optimizer.param_groups[0]["lr"] = lr
            torch.nn.utils.clip_grad_norm_(parameters, MAX_GRAD_NORM, foreach=True)
            optimizer.step()

        return eager_step, optimizer
    lr_tensor = torch.tensor(LEARNING_RATE, device=parameters[0].device)
    on_cuda = parameters[0].is_cuda  # a tensor learning rate needs capturable foreach kernels, or (CPU) the loop
    optimizer = torch.optim.AdamW(parameters, lr=lr_tensor, foreach=on_cuda, capturable=on_cuda)

    def clipped_step() -> None:
        grads = [p.grad for p in parameters]
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)
        torch._foreach_mul_(grads, torch.clamp(MAX_GRAD_NORM / (norm + 1e-6), max=1.0))
        optimizer.step()

    mode = "reduce-overhead" if variant == "compiled_cuda_graphs" else "default"
    compiled = torch.compile(clipped_step, mode=mode)

    def compiled_step(lr: float) -> None:
        lr_tensor.fill_(lr)
        if mode == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()
        compiled()

    return compiled_step, optimizer


def measure_variant(variant: str, config_name: str, device: torch.device, steps: int, warmup: int) -> dict[str, Any]:
    """Host and device milliseconds per step of ``variant``, its first call's seconds and its final parameters."""
    parameters = [torch.nn.Parameter(p) for p in backbone_parameters(config_name, device)]
    generator = torch.Generator(device="cpu").manual_seed(1)
    # two gradient sets of norms 10x apart, alternating: the clipping (every norm here is above 1) changes each step
    gradients = [[torch.randn(p.shape, generator=generator).to(device) * scale for p in parameters]
                 for scale in (1.0, 10.0)]
    step, _ = step_function(variant, parameters)
    learning_rates = [LEARNING_RATE * (1 - index / (warmup + steps)) for index in range(warmup + steps)]
    synchronize = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    host, first_seconds = [], None
    for index, lr in enumerate(learning_rates):
        for parameter, gradient in zip(parameters, gradients[index % 2]):
            parameter.grad = gradient.clone()
        if index == warmup:
            synchronize()
            if device.type == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
        began = time.perf_counter()
        step(lr)
        elapsed = time.perf_counter() - began
        if index == 0:
            synchronize()
            first_seconds = time.perf_counter() - began
        elif index >= warmup:
            host.append(elapsed)
    device_ms = None
    if device.type == "cuda":
        end.record()
        synchronize()
        device_ms = start.elapsed_time(end) / steps  # includes the gradient copies between steps
    return {"variant": variant, "host_ms_per_step": round(1e3 * statistics.median(host), 3),
            "device_ms_per_step_with_gradient_copies": None if device_ms is None else round(device_ms, 3),
            "first_call_seconds": round(first_seconds, 2), "parameter_tensors": len(parameters),
            "parameters": [p.detach().cpu() for p in parameters]}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--config", choices=("bert-base", "minilm", "tiny"), default="bert-base")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=None,
                        help="default: all (compiled_cuda_graphs on CUDA only)")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--output_json", type=Path, default=None)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    variants = args.variants or [v for v in VARIANTS if device.type == "cuda" or v != "compiled_cuda_graphs"]
    report: dict[str, Any] = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                              "config": args.config, "steps": args.steps, "warmup": args.warmup,
                              "torch": torch.__version__, "results": []}
    reference = None
    for variant in variants:
        try:
            result = measure_variant(variant, args.config, device, args.steps, args.warmup)
        except Exception as error:  # a variant that fails is reported, the others still run
            result = {"variant": variant, "error": " ".join(f"{type(error).__name__}: {error}".split())[:500]}
        final = result.pop("parameters", None)
        if final is not None:
            reference = final if reference is None and variant == "eager" else reference
            if reference is not None:
                result["max_abs_difference_from_eager"] = max(
                    float((a - b).abs().max()) for a, b in zip(final, reference))
        report["results"].append(result)
        print(json.dumps(result), flush=True)
        if args.output_json:  # after every variant: a run cut short keeps what it measured
            args.output_json.write_text(json.dumps(report, indent=1) + "\n")
    return report


if __name__ == "__main__":
    main()
