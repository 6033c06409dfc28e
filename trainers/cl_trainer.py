"""`CLTrainer`: the stock ``Trainer`` loop; only ``evaluate()`` (STS-B / SICK-R dev) and logging are ours.

The trainer never knows which method it trains: the model returns its loss and the metrics it wants logged, and
per-step method work (ESimCSE's momentum update) runs through :class:`OptimizerStepHook` calling the model's
``on_optimizer_step``. Training logs carry the model's metrics (averaged over steps and processes) and
``sentences_per_second``. Best-checkpoint selection is the Trainer's own (``metric_for_best_model="stsb_spearman"``,
``load_best_model_at_end``), fed by the metrics :meth:`CLTrainer.evaluate` returns.
"""
from __future__ import annotations

import logging
import time
from typing import Any, ClassVar

import torch
from transformers import Trainer, TrainerCallback

from .curves import TrainingCurvesCallback

logger = logging.getLogger(__name__)


class OptimizerStepHook(TrainerCallback):
    """Calls ``model.on_optimizer_step()`` after every optimizer step (once per step under gradient accumulation)."""

    def on_optimizer_step(self, args, state, control, model=None, **kwargs):  # noqa: D102
        hook = getattr(model, "on_optimizer_step", None)
        if hook is not None:
            hook()


class CLTrainer(Trainer):
    """``Trainer`` whose evaluation is SentEval-style STS dev: encodes STS-B dev + SICK-R dev only (about 4k
    sentences instead of the ~37k of all STS sets) and returns ``eval_stsb_spearman``, ``eval_sickr_spearman``,
    ``eval_avg_sts`` (Spearman x 100), plus transfer dev accuracies when ``args.eval_transfer``.

    Args (besides the Trainer's): ``senteval_dir``: SentEval's data directory. ``processing_class`` must be the
    tokenizer (used to encode evaluation sentences).
    """

    #: What ``evaluate()`` reads, as the Trainer's ``eval_dataset`` (the Trainer requires one for step-wise
    #: evaluation; ours names the SentEval dev sets instead of holding tensors).
    DEV_SETS: ClassVar[dict[str, list[str]]] = {"task": ["STSBenchmark/dev", "SICKRelatedness/dev"]}

    def __init__(self, *args: Any, senteval_dir: str | None = None, **kwargs: Any) -> None:
        if kwargs.get("eval_dataset") is None:
            kwargs["eval_dataset"] = self.DEV_SETS
        super().__init__(*args, **kwargs)
        self.senteval_dir = senteval_dir
        self._metric_sums: dict[str, torch.Tensor] = {}
        self._metric_count = 0
        self._throughput_mark: tuple[float, int] | None = None
        self.add_callback(OptimizerStepHook())
        self.add_callback(TrainingCurvesCallback())  # <output_dir>/training_curves.png at the end of training

    # ---------------------------------------------------------------- training-time metrics
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        outputs = model(**inputs)
        if outputs.metrics and model.training:
            for name, value in outputs.metrics.items():  # accumulated on device: no sync in the step
                self._metric_sums[name] = self._metric_sums.get(name, 0) + value.detach().float()
            self._metric_count += 1
        return (outputs.loss, outputs) if return_outputs else outputs.loss

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs:
            self._log_throughput(logs)
        if "loss" in logs and self._metric_count:
            names = sorted(self._metric_sums)
            stacked = torch.stack([self._metric_sums[n] for n in names]) / self._metric_count
            stacked = self.accelerator.reduce(stacked, reduction="mean")
            logs.update({name: round(value, 4) for name, value in zip(names, stacked.tolist())})
            self._metric_sums, self._metric_count = {}, 0
        super().log(logs, start_time)

    def _log_throughput(self, logs: dict[str, float]) -> None:
        """``sentences_per_second`` (global batch, all processes) since the previous training log line. Measured
        where the Trainer already synchronises to read the loss, so it adds no host-device sync to the step."""
        now, step = time.perf_counter(), self.state.global_step
        if self._throughput_mark is not None and step > self._throughput_mark[1]:
            then, last_step = self._throughput_mark
            args = self.args
            sentences = (step - last_step) * args.train_batch_size * args.gradient_accumulation_steps * args.world_size
            logs["sentences_per_second"] = round(sentences / max(now - then, 1e-9), 1)
        self._throughput_mark = (now, step)

    def training_step(self, model, inputs, num_items_in_batch=None):
        if self._throughput_mark is None:
            self._throughput_mark = (time.perf_counter(), self.state.global_step)
        return super().training_step(model, inputs, num_items_in_batch)

    # ---------------------------------------------------------------- evaluation
    def sentence_encoder(self):
        """A :class:`eval.encoder.SentenceEncoder` over the model's test-time embedding (``model.embed``)."""
        from eval.encoder import SentenceEncoder

        model = self.model
        return SentenceEncoder(lambda **batch: model.embed(**batch), self.processing_class,
                               device=self.args.device, batch_size=self.args.per_device_eval_batch_size * 16)

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval") -> dict[str, float]:
        """STS-B dev (+ SICK-R dev) Spearman x 100; every process computes it (4k sentences), so all agree on
        the best checkpoint without a broadcast."""
        from eval.sts import evaluate_sts_dev

        model, was_training = self.model, self.model.training
        model.eval()
        started = time.perf_counter()
        try:
            encoder = self.sentence_encoder()
            metrics = evaluate_sts_dev(encoder, self.senteval_dir)
            if getattr(self.args, "eval_transfer", False):
                from eval.transfer import evaluate_transfer_dev

                metrics.update(evaluate_transfer_dev(encoder, self.senteval_dir))
        finally:
            model.train(was_training)
        metrics = {f"{metric_key_prefix}_{name}": round(float(value), 4) for name, value in metrics.items()}
        metrics[f"{metric_key_prefix}_runtime"] = round(time.perf_counter() - started, 2)
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        self._throughput_mark = None  # evaluation time is not training throughput
        return metrics
