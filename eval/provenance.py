"""How a result's model was trained: the ``--fidelity`` preset, the training command line and the settings it
resolved to, copied from the training run's ``run_arguments.json`` into a results JSON (``python -m eval
--training_run DIR``; the table scripts pass it for every row), and read back by ``python -m eval.results``.

A results JSON then carries::

    "fidelity": "official_code",            # or "paper", or null: trained without a preset (SimCSE, S-SimCSE)
    "training": {"run_arguments": "outputs/tables/.../seed42/run_arguments.json",
                 "argv": ["--output_dir", "...", "--fidelity", "official_code", ...],   # null: not recorded
                 "settings": {"dup_length_rule": "code", "resample_repetition": false, ...},  # null: not recorded
                 "launch": {"processes": 4, "sentences_per_step": 64}}  # null: not recorded

``argv`` is the command line exactly as the training script received it, ``settings`` every method setting as
the defaults, the preset and the explicit flags resolved it (``command_line.pipeline.describe_arguments``) and
``launch`` the processes it trained on and the sentences of each step
(``trainers.resume_settings.launch_record``: ``argv`` of a 4-process table row holds the batch per process alone);
a training run older than that records none of them, so they are ``null`` (its preset is still read from its parsed
arguments). A results JSON without a ``fidelity`` key was written before any of this: its preset is
:data:`UNRECORDED`.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

RUN_ARGUMENTS = "run_arguments.json"
UNRECORDED = "unrecorded"
"""The preset of a results JSON that does not record one (written before results recorded their preset)."""
NO_PRESET = "none"
"""The preset of a run trained without ``--fidelity`` (SimCSE, S-SimCSE, or a run that set none)."""


class ProvenanceError(ValueError):
    """A training run's record is missing or unreadable: one line saying which file and what to do."""


def training_record(run_dir: str | Path) -> dict[str, Any]:
    """``{"fidelity": ..., "training": {...}}`` for a results JSON, from ``run_dir/run_arguments.json`` (the file a
    training script writes into its ``--output_dir`` when it finishes)."""
    from models.card_metadata import run_argument  # models/ loads torch: only here, so eval.results stays light

    path = Path(run_dir) / RUN_ARGUMENTS
    if not path.is_file():
        raise ProvenanceError(f"--training_run {run_dir}: {path} not found; a training run writes it into its "
                              f"--output_dir when it finishes: pass that folder, or leave --training_run out (the "
                              f"results JSON then records no preset)")
    try:
        arguments = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ProvenanceError(f"--training_run {run_dir}: {path} is not valid JSON ({exc}); rerun the training or "
                              f"leave --training_run out") from None
    if not isinstance(arguments, dict):
        raise ProvenanceError(f"--training_run {run_dir}: {path} is not a training run's arguments (a JSON object "
                              f"of argument groups); pass the run's --output_dir")
    return {"fidelity": run_argument(arguments, "fidelity"),
            "training": {"run_arguments": str(path), "argv": arguments.get("argv"),
                         "settings": arguments.get("settings"), "launch": arguments.get("launch")}}


def preset_of(result: Mapping[str, Any]) -> str:
    """The preset a results JSON records: ``paper``, ``official_code``, :data:`NO_PRESET` or :data:`UNRECORDED`."""
    if "fidelity" not in result:
        return UNRECORDED
    return NO_PRESET if result["fidelity"] is None else str(result["fidelity"])


__all__ = ["NO_PRESET", "RUN_ARGUMENTS", "UNRECORDED", "ProvenanceError", "preset_of", "training_record"]
