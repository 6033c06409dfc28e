"""A training run's curves, from its log history: training loss, the method's logged terms, STS-B dev, the best step.

The Trainer keeps every ``logs`` dict it prints in ``TrainerState.log_history`` (each with its ``step``): training
lines (``loss``, ``learning_rate``, ``grad_norm``, and the model's own metrics that :class:`trainers.cl_trainer.CLTrainer`
averages, e.g. ``contrastive_loss``, ``dcl_loss``, ``rtd_loss``, ``rtd_acc``, ``queue_fill``) and evaluation lines
(``eval_stsb_spearman``: STS-B dev Spearman x 100, the papers' model-selection metric, every 125 steps; SimCSE
Sec. 3 / Appendix A). ``before_stsb_spearman`` is the untrained model's STS-B dev (step 0).

Where a run's history is: ``<run>/trainer_state.json`` (written at the end of training by
:class:`trainers.curves.TrainingCurvesCallback`), else the newest ``<run>/checkpoint-*/trainer_state.json`` (runs from
before that callback: with ``--save_strategy best`` it ends at the best checkpoint, so it can stop short of the
last step; :attr:`RunHistory.complete` says so, and the untrained model's STS-B dev is then taken from
``<run>/all_results.json``). Reading needs no plotting library; :mod:`eval.plots` draws.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

DEV_KEY = "eval_stsb_spearman"
BEFORE_PREFIX = "before_"  # command_line/pipeline.py: evaluate(metric_key_prefix="before") of the untrained model
BEFORE_KEY = BEFORE_PREFIX + "stsb_spearman"
LOSS_KEY = "loss"
#: Logged by every Trainer run, not by a method: left out of the per-method panels.
GENERIC_KEYS = frozenset({"loss", "learning_rate", "grad_norm", "epoch", "step", "sentences_per_second", "total_flos"})
#: Prefixes of evaluation and end-of-training summary keys (``train_runtime``, ``train_loss``, ...).
SUMMARY_PREFIXES = ("eval_", "before_", "train_")
SAME_AS_LOSS_TOLERANCE = 1e-4  # logged values are rounded to 4 decimals

Series = list[tuple[int, float]]


@dataclass
class Curves:
    """One run's curves: ``loss`` and each method ``terms[name]`` as (step, value) lists, STS-B ``dev`` (step 0 =
    before training, when evaluated), the ``best`` (step, STS-B dev) checkpoint, and the terms left out because
    they equal the loss at every step (SimCSE's ``contrastive_loss`` is its whole loss)."""

    loss: Series = field(default_factory=list)
    terms: dict[str, Series] = field(default_factory=dict)
    dev: Series = field(default_factory=list)
    best: tuple[int, float] | None = None
    same_as_loss: list[str] = field(default_factory=list)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def is_method_term(key: str) -> bool:
    """A logged scalar that is the method's own (not the Trainer's, not an evaluation or summary key)."""
    return key not in GENERIC_KEYS and not key.startswith(SUMMARY_PREFIXES)


def curves_from_history(log_history: Sequence[Mapping[str, Any]], best_step: int | None = None) -> Curves:
    """Split a ``log_history`` into :class:`Curves`. ``best_step``: the Trainer's ``best_global_step``; without it,
    the first step with the highest STS-B dev (the Trainer keeps the first of equal scores). An evaluation
    repeated at one step (the final ``evaluate()`` of the reloaded best model) counts once."""
    curves = Curves()
    before: dict[int, float] = {}
    evaluated: dict[int, float] = {}  # the evaluations the Trainer selects the best checkpoint from
    for entry in log_history:
        step = int(entry.get("step", 0))
        if (value := _number(entry.get(BEFORE_KEY))) is not None:
            before.setdefault(0, value)
        if (value := _number(entry.get(DEV_KEY))) is not None:
            evaluated.setdefault(step, value)
        if (loss := _number(entry.get(LOSS_KEY))) is None:
            continue
        curves.loss.append((step, loss))
        for key, raw in entry.items():
            if is_method_term(key) and (value := _number(raw)) is not None:
                curves.terms.setdefault(key, []).append((step, value))
    curves.dev = sorted({**before, **evaluated}.items())
    for name, series in list(curves.terms.items()):
        if len(series) == len(curves.loss) and all(
                abs(value - loss) <= SAME_AS_LOSS_TOLERANCE for (_, value), (_, loss) in zip(series, curves.loss)):
            curves.same_as_loss.append(name)
            del curves.terms[name]
    if best_step is not None and best_step in evaluated:
        curves.best = (best_step, evaluated[best_step])
    elif scored := {step: value for step, value in evaluated.items() if not math.isnan(value)}:
        top = max(scored.values())  # a nan score is never best (the Trainer's ``np.greater`` is false for it)
        curves.best = next((step, value) for step, value in sorted(scored.items()) if value == top)
    return curves


# ----------------------------------------------------------------------------------------------- run folders


@dataclass(frozen=True)
class RunHistory:
    """A run's log history and where it came from; ``complete`` is False when it stops before ``max_steps``."""

    log_history: list[dict[str, Any]]
    source: Path
    global_step: int
    max_steps: int
    best_step: int | None

    @property
    def complete(self) -> bool:
        return self.max_steps <= 0 or self.global_step >= self.max_steps


def _checkpoint_step(path: Path) -> int:
    match = re.fullmatch(r"checkpoint-(\d+)", path.parent.name)
    return int(match.group(1)) if match else -1


def load_run_history(run_dir: str | Path) -> RunHistory | None:
    """The log history of a training output folder (see the module docstring), or ``None`` if it has none."""
    run_dir = Path(run_dir)
    candidates = [run_dir / "trainer_state.json"]
    candidates += sorted(run_dir.glob("checkpoint-*/trainer_state.json"), key=_checkpoint_step, reverse=True)
    for path in candidates:
        if path.is_file():
            state = json.loads(path.read_text(encoding="utf-8"))
            history = list(state.get("log_history", []))
            final = run_dir / "all_results.json"  # command_line/pipeline.py's metrics, "before_*" included
            if final.is_file() and not any(BEFORE_KEY in entry for entry in history):
                before = {key: value for key, value in json.loads(final.read_text(encoding="utf-8")).items()
                          if key.startswith(BEFORE_PREFIX)}
                history = ([{**before, "step": 0}] if BEFORE_KEY in before else []) + history
            return RunHistory(history, path, int(state.get("global_step", 0)), int(state.get("max_steps", 0) or 0),
                              state.get("best_global_step"))
    return None


def history_note(history: RunHistory, root: Path | None = None) -> str:
    """Where the curves come from, and whether they stop early: for a figure's subtitle."""
    source = history.source.relative_to(root) if root is not None and history.source.is_relative_to(root) else history.source
    if history.complete:
        return f"from {source}"
    return f"to step {history.global_step} of {history.max_steps} only (from {source})"


# ----------------------------------------------------------------------------------------------- stand-in runs

RUN_NAME = re.compile(r"(?P<method>.+?)(?:_seed(?P<seed>\d+))?")
DEFAULT_SEED = 42  # scripts/standin.sh: <run> = METHOD for seed 42, METHOD_seedS otherwise


def parse_run_name(name: str) -> tuple[str, int]:
    """``simcse`` -> (simcse, 42); ``simcse_pp_seed43`` -> (simcse_pp, 43) (scripts/standin.sh's naming)."""
    match = RUN_NAME.fullmatch(name)
    assert match is not None  # the pattern matches every non-empty name
    return match.group("method"), int(match.group("seed") or DEFAULT_SEED)


@dataclass
class StandinRuns:
    """The stand-in runs of a folder, per method: each seed's log history and each seed's test results."""

    histories: dict[str, dict[int, RunHistory]] = field(default_factory=dict)
    tests: dict[str, dict[int, dict[str, Any]]] = field(default_factory=dict)


def find_standin_runs(standin_dir: str | Path) -> StandinRuns:
    """``<dir>/<run>/`` (training output) and ``<dir>/<run>_test.json`` (``python -m eval`` of its export), as
    ``scripts/standin.sh`` / ``standin_diffcse.sh`` write them."""
    standin_dir, runs = Path(standin_dir), StandinRuns()
    for path in sorted(standin_dir.iterdir()):
        if path.is_dir() and (history := load_run_history(path)) is not None:
            method, seed = parse_run_name(path.name)
            runs.histories.setdefault(method, {})[seed] = history
        elif path.is_file() and path.name.endswith("_test.json"):
            method, seed = parse_run_name(path.name[: -len("_test.json")])
            runs.tests.setdefault(method, {})[seed] = json.loads(path.read_text(encoding="utf-8"))
    return runs
