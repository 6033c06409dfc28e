"""`TrainingCurvesCallback`: at the end of every training run, the run's curves as a picture beside its outputs.

``<output_dir>/training_curves.png``: the training loss, every per-method term the model logs (contrastive, DCL,
Barlow and RTD losses, RTD accuracies, ESimCSE's queue fill) and STS-B dev over steps with the best checkpoint
marked (:func:`eval.plots.plot_training_curves`). ``<output_dir>/trainer_state.json``: the full log history behind
it (what ``Trainer.save_state`` writes; the best checkpoint's own copy stops at that checkpoint), which
``python -m eval.results`` reads for the stand-in figures (:mod:`eval.curves`).

The Trainer starts a fresh ``TrainerState`` in ``train()``, so the STS-B dev of the untrained model, evaluated just
before (``before_stsb_spearman``, command_line/pipeline.py), would be missing from the history: the callback keeps that
log line and puts it back at the head of the new history (step 0) when training begins.

Only the world process zero writes. A missing matplotlib, or any failure to draw, logs a warning and never fails
the run it comes after.
"""
from __future__ import annotations

import importlib
import logging
from pathlib import Path

from transformers import TrainerCallback

from eval.curves import BEFORE_PREFIX

logger = logging.getLogger(__name__)

CURVES_PNG = "training_curves.png"
STATE_JSON = "trainer_state.json"


class TrainingCurvesCallback(TrainerCallback):
    """Writes ``trainer_state.json`` and ``training_curves.png`` into ``args.output_dir`` on ``on_train_end``."""

    def __init__(self) -> None:
        self._before: dict | None = None

    def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: D102
        if logs and state.global_step == 0 and any(key.startswith(BEFORE_PREFIX) for key in logs):
            self._before = {**logs, "step": 0}

    def on_train_begin(self, args, state, control, **kwargs):  # noqa: D102
        if self._before is not None and not any(key.startswith(BEFORE_PREFIX) for entry in state.log_history
                                                for key in entry):  # not again on a resumed history
            state.log_history.insert(0, self._before)

    def on_train_end(self, args, state, control, **kwargs):  # noqa: D102
        if not state.is_world_process_zero:
            return
        output_dir = Path(args.output_dir)
        output_dir.mkdir(parents=True, exist_ok=True)
        state.save_to_json(str(output_dir / STATE_JSON))
        try:
            curves = importlib.import_module("eval.curves")
            plots = importlib.import_module("eval.plots")  # matplotlib
        except ImportError as exc:
            logger.warning("%s not written: %s (pip install matplotlib); the log history is in %s",
                           output_dir / CURVES_PNG, exc, output_dir / STATE_JSON)
            return
        try:
            run = curves.curves_from_history(state.log_history, state.best_global_step)
            title = f"{output_dir.name}: {state.global_step} steps"
            if run.best is not None:
                title += f", best STS-B dev {run.best[1]:.2f} at step {run.best[0]}"
            path = plots.plot_training_curves({output_dir.name: run}, output_dir / CURVES_PNG, title)
            logger.info("training curves: %s", path)
        except Exception:  # noqa: BLE001 - a picture must never fail a finished training run
            logger.warning("could not draw %s", output_dir / CURVES_PNG, exc_info=True)
