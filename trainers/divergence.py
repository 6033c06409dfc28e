"""Stop a diverged run (NaN/inf loss or weights) before it writes a checkpoint or an export.

The step path stays free of host-device syncs: :meth:`DivergenceMonitor.record` keeps, in a device tensor, the first
optimizer step whose loss was not finite (``torch.where`` on the device, nothing read on the host). The value is
read by :meth:`DivergenceMonitor.check`, which the trainer calls where the Trainer synchronises anyway (every log
line, every evaluation) and before every write (checkpoints, the export), the latter with a check of every
parameter: a step can leave NaN weights behind a still-finite loss.
"""
from __future__ import annotations

import os
from typing import Any

import torch
from transformers.trainer_utils import get_last_checkpoint

from .errors import TrainingDiverged


class DivergenceMonitor:
    """The first step (1-based optimizer step) with a non-finite training loss, kept on the loss's device."""

    def __init__(self) -> None:
        self.first_bad_step: torch.Tensor | None = None  # 0 = every loss so far was finite

    def record(self, loss: torch.Tensor | None, step: int) -> None:
        """Note ``step`` if ``loss`` is NaN/inf and no earlier step was; device operations only (no sync)."""
        if loss is None:
            return
        if self.first_bad_step is None:
            self.first_bad_step = torch.zeros((), dtype=torch.long, device=loss.device)
        bad = ~torch.isfinite(loss.detach()).all() & (self.first_bad_step == 0)
        self.first_bad_step = torch.where(bad, step, self.first_bad_step)

    def bad_step(self, trainer: Any) -> int:
        """The first non-finite step over all processes (0 = none). Every process must call it (a collective)."""
        if self.first_bad_step is None:
            return 0
        steps = [int(s) for s in trainer.accelerator.gather(self.first_bad_step.reshape(1)).tolist() if s > 0]
        return min(steps, default=0)

    def check(self, trainer: Any, weights: bool = False, before: str | None = None) -> None:
        """Raise :class:`TrainingDiverged` if a loss (or, with ``weights``, a parameter) is not finite."""
        step = self.bad_step(trainer)
        if step:
            raise TrainingDiverged(divergence_message(trainer, f"the training loss became NaN or inf at step {step}",
                                                      before))
        if weights and not weights_finite(trainer):
            raise TrainingDiverged(divergence_message(
                trainer, f"the weights hold NaN or inf after step {trainer.state.global_step}", before))


def weights_finite(trainer: Any) -> bool:
    """Whether every parameter of the trainer's model is finite, on every process (one sync)."""
    params = [p.detach() for p in trainer.model.parameters()]
    finite = torch.stack([torch.isfinite(p).all() for p in params]).all() if params else torch.tensor(True)
    gathered = trainer.accelerator.gather(finite.reshape(1).to(trainer.args.device, torch.long))
    return bool(gathered.min().item())


#: Above / below these the learning rate / temperature is a likely cause of a divergence (the papers: 1e-5 to 5e-5
#: and 0.05).
HIGH_LEARNING_RATE = 1e-4
LOW_TEMPERATURE = 0.02


def likely_causes(learning_rate: float, temperature: float | None) -> str:
    """The run's settings that explain a divergence, or what else to try when both look normal."""
    causes = []
    if learning_rate > HIGH_LEARNING_RATE:
        causes.append(f"the learning rate is too high (--learning_rate {learning_rate:g}; the papers use 1e-5 to 5e-5)")
    if temperature is not None and temperature < LOW_TEMPERATURE:
        causes.append(f"the temperature is too low (--temp {temperature:g}; the papers use 0.05)")
    if causes:
        return f"Likely cause: {' and '.join(causes)}. Change it and start again (a resumed run keeps the " \
               "learning rate of its checkpoint)."
    return (f"The learning rate ({learning_rate:g}) and temperature ({temperature:g}) look normal: try a lower "
            "learning rate, float32 (--bf16 false --fp16 false), or gradient clipping (--max_grad_norm 1.0).")


def divergence_message(trainer: Any, what: str, before: str | None = None) -> str:
    """What happened, what was (not) written, the likely causes with this run's values, and what to do."""
    temperature = getattr(getattr(trainer.model, "config", None), "temperature", None)
    last = latest_checkpoint(trainer.args.output_dir)
    kept = f" The last checkpoint, {last}, was written before and is untouched." if last else ""
    stopped = f"stopped before {before}" if before else f"stopped at step {trainer.state.global_step}"
    return (f"training diverged: {what}; {stopped}, so no checkpoint or export holds non-finite weights.{kept} "
            + likely_causes(trainer.args.learning_rate, temperature))


def latest_checkpoint(output_dir: str | None) -> str | None:
    """The newest ``checkpoint-N`` folder of ``output_dir`` (``None`` if there is none)."""
    if not output_dir or not os.path.isdir(output_dir):
        return None
    return get_last_checkpoint(output_dir)


__all__ = ["DivergenceMonitor", "divergence_message", "weights_finite"]
