"""PromptBERT's template-denoising pass of one training step, forward + backward: the rows of both templates in ONE
encoder pass (``models.promptbert.templates_mask_states``, what training runs) against one pass per template (the
official ``get_delta``'s form, ``template_mask_states`` per template), interleaved in one process.

    python -m bench.promptbert_template_pass --config tiny --widths 26 42 --iters 60 --threads 1
    python -m bench.promptbert_template_pass --device cuda --config bert-base --widths 42 --iters 200

Random weights of the config's shape, in training mode (stream dropout on, as in a step), the paper's two templates
(BERT ids, 10 tokens each: ``This sentence of "[X]" means [MASK].`` and ``This sentence : "[X]" means [MASK].``);
a batch padded to ``width`` tokens needs ``width - 9`` rows of each. Each timing is one call of a form (forward, sum,
backward), the device synchronised before and after (a GPU's launch overhead is inside the measured interval); the
median over ``--iters`` calls per form, after 3 untimed calls of each.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Callable

import torch
from transformers import AutoModel

from bench.train_throughput import bert_config
from models.promptbert import TemplateIds, template_mask_states, templates_mask_states

#: The default templates of ``--prompt_template`` / ``--prompt_template_positive`` as bert-base-uncased's ids.
TEMPLATES = (TemplateIds((101, 2023, 6251, 1997, 1000), (1000, 2965, 103, 1012, 102), 2),
             TemplateIds((101, 2023, 6251, 1024, 1000), (1000, 2965, 103, 1012, 102), 2))


def template_pass_forms(encoder: torch.nn.Module, width: int) -> dict[str, Callable[[], None]]:
    """The two forms of the step's template pass (forward, sum of the states, backward) for a batch of ``width``."""
    device = next(encoder.parameters()).device
    ids = [torch.tensor(t.prefix + t.suffix, device=device) for t in TEMPLATES]
    rows = [width - len(t) + 1 for t in TEMPLATES]

    def one_pass() -> None:
        sum(s.sum() for s in templates_mask_states(encoder, TEMPLATES, rows, None, ids)).backward()

    def pass_per_template() -> None:
        sum(template_mask_states(encoder, t, r, None, i).sum() for t, r, i in zip(TEMPLATES, rows, ids)).backward()

    return {"one_pass": one_pass, "pass_per_template": pass_per_template}


def median_ms(forms: dict[str, Callable[[], None]], encoder: torch.nn.Module, iters: int,
              device: torch.device) -> dict[str, float]:
    """Median milliseconds of each form, the forms interleaved call by call."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(3):
        for form in forms.values():
            form()
    times: dict[str, list[float]] = {name: [] for name in forms}
    for _ in range(iters):
        for name, form in forms.items():
            encoder.zero_grad(set_to_none=True)
            sync()
            start = time.perf_counter()
            form()
            sync()
            times[name].append(time.perf_counter() - start)
    return {name: 1e3 * statistics.median(values) for name, values in times.items()}


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", choices=("bert-base", "minilm", "tiny"), default="tiny")
    parser.add_argument("--widths", type=int, nargs="+", default=[42], help="padded batch widths (template included)")
    parser.add_argument("--iters", type=int, default=60)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--output_json", type=Path, default=None)
    args = parser.parse_args(argv)
    if min(args.widths) < max(len(t) for t in TEMPLATES):
        parser.error(f"--widths: a batch is at least a template wide ({max(len(t) for t in TEMPLATES)} tokens)")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(0)
    encoder = AutoModel.from_config(bert_config(args.config)).to(device).train()
    results = []
    for width in args.widths:
        ms = median_ms(template_pass_forms(encoder, width), encoder, args.iters, device)
        results.append({"config": args.config, "device": str(device), "width": width, "rows": width - 9,
                        "iters": args.iters, **{f"{name}_ms": value for name, value in ms.items()}})
        print(f"{args.config} {device} width {width} ({width - 9} rows per template): one pass "
              f"{ms['one_pass']:.2f} ms, a pass per template {ms['pass_per_template']:.2f} ms "
              f"(median of {args.iters})", flush=True)
    if args.output_json:
        args.output_json.write_text(json.dumps(results, indent=1) + "\n")
    return results


if __name__ == "__main__":
    main()
