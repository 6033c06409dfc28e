"""The open logging window, kept in every checkpoint so that a resumed run logs what the uninterrupted run logs.

Every ``--logging_steps`` steps the Trainer logs the mean loss over the steps since its previous log (the sum it
accumulates on the device over the steps since that log's: ``TrainerAdapter.logging_window``), and
:class:`trainers.cl_trainer.CLTrainer` the mean of the model's metrics over them (its ``_metric_sums`` /
``_metric_count``). Neither is in a checkpoint: a resume started them at zero from the checkpoint's step, so where a
checkpoint fell inside a window (``--save_steps`` not a multiple of ``--logging_steps``, or a save at the best
evaluation) the first log after the resume was the mean of the resumed steps alone, under the window's step, and
``trainer_state.json``'s log history and ``training_curves.png`` differed from the uninterrupted run's while its
weights were the same (measured through run_unsup.py on a tiny BERT, ESimCSE, ``--logging_steps 4``, resumed at
step 2: the step-4 loss 3.4174 against 3.2337 uninterrupted, its queue fill 18.0 against 11.0).

:class:`LoggingWindow` is a stateful Trainer callback (``transformers.ExportableState``): the Trainer writes its state
into every checkpoint's ``trainer_state.json`` (``stateful_callbacks``). The trainer fills it before each checkpoint
(:meth:`LoggingWindow.capture`, every process: the sums are averaged over the processes, as the log averages them),
reads it back after a resume loads the checkpoint (:meth:`LoggingWindow.read`) and puts it back into the Trainer's
window at the resumed run's first step (:meth:`LoggingWindow.restore`, after the Trainer set its window to zero). A
checkpoint written before it held a window resumes as before. Each checkpoint's capture reads the device once (the
checkpoint itself waits on it anyway); the training steps read nothing.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState

from .checkpoints import TRAINER_STATE


class LoggingWindow(TrainerCallback, ExportableState):
    """The steps since the last training log at a checkpoint: the step of that log (``last_logged_step``; ``None``:
    nothing captured), the sum of their losses (``loss_sum``), the sums of the model's metrics over them and how many
    steps those sums hold (``metric_sums``, ``metric_count``); each sum the mean over the processes of each process's
    own. Its whole state is its constructor's arguments (what the Trainer's own restore of callbacks rebuilds it
    from)."""

    def __init__(self, last_logged_step: int | None = None, loss_sum: float = 0.0,
                 metric_sums: dict[str, float] | None = None, metric_count: int = 0) -> None:
        self.last_logged_step = last_logged_step
        self.loss_sum = loss_sum
        self.metric_sums = dict(metric_sums or {})
        self.metric_count = metric_count

    def state(self) -> dict[str, Any]:
        return {"args": {"last_logged_step": self.last_logged_step, "loss_sum": self.loss_sum,
                         "metric_sums": self.metric_sums, "metric_count": self.metric_count}, "attributes": {}}

    def capture(self, trainer) -> None:
        """Take ``trainer``'s open window (call it on every process before a checkpoint is written: it averages the
        sums over the processes)."""
        last_logged_step, losses = trainer.logging_window()
        names = sorted(trainer._metric_sums)
        sums = torch.stack([losses.detach().float().reshape(()),
                            *(trainer._metric_sums[name].reshape(()) for name in names)])
        loss_sum, *metric_sums = trainer.accelerator.reduce(sums, reduction="mean").tolist()
        self.last_logged_step = last_logged_step
        self.loss_sum = loss_sum
        self.metric_sums = dict(zip(names, metric_sums))
        self.metric_count = trainer._metric_count

    @classmethod
    def read(cls, checkpoint: str | Path) -> LoggingWindow | None:
        """The window ``checkpoint``'s ``trainer_state.json`` holds, or ``None`` where it holds none (a checkpoint
        written before it did) or nothing was captured."""
        try:
            state = json.loads((Path(checkpoint) / TRAINER_STATE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        stored = (state.get("stateful_callbacks") or {}).get(cls.__name__)
        if not isinstance(stored, dict):
            return None
        window = cls(**stored.get("args", {}))
        return window if window.last_logged_step is not None else None

    def restore(self, trainer) -> None:
        """Put this window back into ``trainer``'s (at the resumed run's first step: the Trainer has set its own to
        zero at the checkpoint's step; :meth:`trainers.trainer_adapter.TrainerAdapter.reopen_logging_window`)."""
        trainer.reopen_logging_window(self.last_logged_step, self.loss_sum)
        device = trainer.logging_window()[1].device
        trainer._metric_sums = {name: torch.tensor(value, device=device) for name, value in self.metric_sums.items()}
        trainer._metric_count = self.metric_count


__all__ = ["LoggingWindow"]
