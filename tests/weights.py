"""The weights that training runs' checkpoints hold, compared: a run resumed halfway against the uninterrupted run."""
from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file


def assert_resumed_run_ends_on_the_uninterrupted_runs_weights(full: Path, resumed: Path, halfway_step: int,
                                                              last_step: int, atol: float = 1e-6) -> None:
    """``resumed``'s checkpoint-``last_step`` holds the same tensors as ``full``'s (every tensor of the model,
    buffers included), and ``full``'s weights moved after its checkpoint-``halfway_step``, where ``resumed`` started
    (so the comparison can fail)."""
    uninterrupted = load_file(full / f"checkpoint-{last_step}" / "model.safetensors")
    again = load_file(resumed / f"checkpoint-{last_step}" / "model.safetensors")
    halfway = load_file(full / f"checkpoint-{halfway_step}" / "model.safetensors")
    assert uninterrupted.keys() == again.keys()
    for name, tensor in uninterrupted.items():
        torch.testing.assert_close(again[name], tensor, rtol=0, atol=atol, msg=name)
    assert any(not torch.equal(halfway[name], tensor) for name, tensor in uninterrupted.items())  # weights moved
