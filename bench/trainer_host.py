"""The host work a training step spends outside the model's forward and backward: the Trainer's gradient clipping
(``--max_grad_norm``), the step's row-seeded draws lookup (``trainers.keyed_dropout.keyed_step``), ``model.zero_grad()``
and ``model.train()``, and ESimCSE's momentum update (Eq. 5; before: both networks walked by name every step), each
timed alone on the host.

On a GPU the fast path's step waits on the host (docs/benchmarks.md: 15.6 ms/step on an H100, 3.1 of them in the
Trainer's clipping), and this work is Python and dispatcher time that does not depend on the device: measured here on
a backbone of bert-base's structure (12 layers: its 199 parameter tensors and 230 modules) at a width of 12, so the
arithmetic is negligible and what is timed is the walk over the model and the operations' dispatch. On a GPU each
operation is also a kernel launch (a few microseconds more).

    python -m bench.trainer_host --method esimcse --repeats 300

prints, per item, the median microseconds of the route the Trainer took before (``transformers.Trainer.
_clip_grad_norm``: ``accelerator.clip_grad_norm_(model.parameters(), ...)``; the walk for the step's draws;
``nn.Module.zero_grad`` and ``nn.Module.train``) and of this repository's (``trainers.trainer_adapter``,
``trainers.keyed_dropout``, ``models.module_lists`` behind ``ContrastiveModel.zero_grad`` / ``train``).
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import torch

__all__ = ["main", "measure", "median_microseconds"]


def median_microseconds(work: Callable[[], Any], before: Callable[[], Any] | None = None, repeats: int = 300) -> float:
    """Median host microseconds of ``work()`` over ``repeats`` calls, ``before()`` run untimed ahead of each."""
    times = []
    for _ in range(repeats):
        if before is not None:
            before()
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return round(statistics.median(times) * 1e6, 1)


def narrow_bert_base(root: Path) -> Path:
    """A random backbone of bert-base's structure (12 layers, 12 heads) at width 12, with a tokenizer, under ``root``."""
    from transformers import AutoModel, BertConfig

    from tests.tiny import tiny_tokenizer

    tokenizer = tiny_tokenizer(root / "backbone")
    config = BertConfig(num_hidden_layers=12, hidden_size=12, num_attention_heads=12, intermediate_size=12,
                        vocab_size=len(tokenizer))
    torch.manual_seed(0)
    AutoModel.from_config(config).save_pretrained(root / "backbone")
    return root / "backbone"


def measure(method: str, repeats: int, dropout_masks: str = "stream") -> dict[str, Any]:
    """The items' host microseconds (``Trainer`` = transformers' own route, ``ours`` = the repository's) for a CPU
    ``CLTrainer`` over a narrow bert-base-shaped ``method`` model."""
    from transformers import Trainer

    from tests.tiny import tiny_corpus, tiny_trainer
    from trainers.keyed_dropout import keyed_controllers, keyed_step
    from trainers.methods import build_model

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        backbone = narrow_bert_base(root)
        model = build_model(method, str(backbone), dropout_masks=dropout_masks)
        trainer = tiny_trainer(model, backbone, root / "run", tiny_corpus(root / "corpus.txt"))
    trainable = [p for p in model.parameters() if p.requires_grad]
    gradients = [torch.randn_like(p) for p in trainable]

    def give_gradients() -> None:
        for parameter, gradient in zip(trainable, gradients):
            parameter.grad = gradient.clone()

    def walked_draws() -> None:  # what keyed_step did before the install was remembered: a walk per step
        next((c.draws for c in keyed_controllers(model)), None)

    def our_step() -> None:
        with keyed_step(model, 64):
            pass

    def forget_momentum_pairs() -> None:  # ESimCSE's Eq. 5 as before its pairs were kept: both networks walked by name
        model.momentum_encoder._pairs_of = []

    model.train()
    rows = {
        "clip_grad_norm": (median_microseconds(lambda: Trainer._clip_grad_norm(trainer, model), give_gradients,
                                               repeats),
                           median_microseconds(lambda: trainer._clip_grad_norm(model), give_gradients, repeats)),
        "step draws lookup": (median_microseconds(walked_draws, None, repeats),
                              median_microseconds(our_step, None, repeats)),
        "model.zero_grad()": (median_microseconds(lambda: torch.nn.Module.zero_grad(model), give_gradients, repeats),
                              median_microseconds(model.zero_grad, give_gradients, repeats)),
        "model.train()": (median_microseconds(lambda: torch.nn.Module.train(model), None, repeats),
                          median_microseconds(model.train, None, repeats)),
    }
    if getattr(model, "momentum_encoder", None) is not None:
        update = model.on_optimizer_step
        rows["momentum update (Eq. 5)"] = (median_microseconds(update, forget_momentum_pairs, repeats),
                                           median_microseconds(update, None, repeats))
    return {"method": method, "dropout_masks": dropout_masks, "parameter_tensors": len(list(model.parameters())),
            "trainable_tensors": len(trainable), "modules": len(list(model.modules())), "repeats": repeats,
            "torch": torch.__version__, "microseconds": {name: {"trainer": t, "ours": o} for name, (t, o) in rows.items()}}


def format_report(report: dict[str, Any]) -> str:
    lines = [f"{report['method']} ({report['dropout_masks']} masks): {report['parameter_tensors']} parameter tensors "
             f"({report['trainable_tensors']} trainable), {report['modules']} modules; median host us over "
             f"{report['repeats']} calls",
             "| item | Trainer's route | ours |", "|---|---|---|"]
    for name, row in report["microseconds"].items():
        lines.append(f"| {name} | {row['trainer']:,.1f} | {row['ours']:,.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--method", default="simcse", choices=("simcse", "esimcse", "simcse_pp", "s_simcse", "promptbert"),
                        help="a run_unsup.py method (DiffCSE needs a generator checkpoint)")
    parser.add_argument("--dropout_masks", default="stream", choices=("stream", "row_seeded"))
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--output_json", type=Path, default=None)
    args = parser.parse_args(argv)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # host work: one thread, as the step's Python runs
    try:
        report = measure(args.method, args.repeats, args.dropout_masks)
    finally:
        torch.set_num_threads(threads)
    print(format_report(report), flush=True)
    if args.output_json:
        args.output_json.write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
