"""The one place that leans on ``transformers.Trainer`` internals, for what its public API cannot express. Written
against transformers 5.23.0 (:data:`WRITTEN_FOR`); ``tests/test_trainer_adapter.py`` fails with a message naming the
member when the installed library changes one of them (:data:`RELIED_ON`).

- ``Trainer._save_checkpoint(model, trial)``: the only point that runs before every checkpoint is written. The public
  ``on_save`` callback runs after the folder exists, and with ``save_strategy="best"`` the decision to save is taken
  inside the loop after the evaluation, where no callback sees it; :meth:`TrainerAdapter.before_checkpoint` runs
  there (the divergence check of the weights: a non-finite checkpoint is never written). It is also the only point
  that runs after every file of a checkpoint is written (model, optimizer, scheduler, each process's RNG state,
  ``trainer_state.json``): there the main process writes the completion marker
  (:func:`trainers.checkpoints.write_completion_marker`) that a resume checks.
- ``TensorBoardCallback.logging_dir`` and ``transformers.integrations.integration_utils.default_logdir``: the
  callback picks its folder at ``on_train_begin``, but a run's 'before training' evaluation logs earlier;
  :func:`pin_tensorboard_dir` gives it the folder the Trainer would, up front.

Everything else the training core uses is public: ``compute_loss`` and ``training_step`` overrides, callbacks,
``accelerator.autocast`` / ``unwrap_model`` (the cached step is a loss whose backward replays the chunks,
``trainers/cached_step.py``, so the stock step scales and backpropagates it).
"""
from __future__ import annotations

import os
from typing import Any

from transformers import Trainer
from transformers.integrations import TensorBoardCallback
from transformers.integrations.integration_utils import default_logdir
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from .checkpoints import write_completion_marker

WRITTEN_FOR = "5.23.0"
#: (owner, member, its parameters) this module relies on; checked by tests/test_trainer_adapter.py.
RELIED_ON: tuple[tuple[Any, str, tuple[str, ...]], ...] = (
    (Trainer, "_save_checkpoint", ("self", "model", "trial")),
    (TensorBoardCallback, "__init__", ("self", "tb_writer")),
)


class TrainerAdapter(Trainer):
    """``Trainer`` with a hook before every checkpoint is written (:meth:`before_checkpoint`), whose checkpoints end
    with a completion marker once every process has written its part."""

    def before_checkpoint(self) -> None:
        """Hook: runs before every checkpoint is written (``checkpoint-<global_step>``). Does nothing here."""

    def _save_checkpoint(self, model, trial) -> None:
        self.before_checkpoint()
        super()._save_checkpoint(model, trial)
        self.accelerator.wait_for_everyone()  # every process's rng_state_<rank>.pth is written
        if self.args.should_save:
            folder = os.path.join(self.args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
            write_completion_marker(folder, processes=self.args.world_size)


def pin_tensorboard_dir(trainer: Trainer) -> None:
    """Give the TensorBoard callback its folder now (``<output_dir>/<default_logdir()>``, what the Trainer gives it
    at ``on_train_begin``): a writer opened by an earlier log would write every curve to ./runs."""
    for callback in trainer.callback_handler.callbacks:
        if isinstance(callback, TensorBoardCallback) and callback.logging_dir is None:
            callback.logging_dir = os.path.join(trainer.args.output_dir, default_logdir())


__all__ = ["RELIED_ON", "TrainerAdapter", "WRITTEN_FOR", "pin_tensorboard_dir"]
