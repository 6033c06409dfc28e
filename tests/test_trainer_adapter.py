"""trainers/trainer_adapter.py, the one module that leans on Trainer internals: each member it relies on still exists
with the parameters it was written for, else a message says which and where to adapt; and the training core uses no
other private Trainer member nor ``torch._C``."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
import transformers

from trainers.trainer_adapter import RELIED_ON, WRITTEN_FOR

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("owner, member, parameters", RELIED_ON, ids=lambda v: getattr(v, "__name__", str(v)))
def test_the_library_still_has_what_the_adapter_relies_on(owner, member, parameters):
    function = getattr(owner, member, None)
    assert function is not None, (
        f"transformers {transformers.__version__} has no {owner.__name__}.{member}; trainers/trainer_adapter.py was "
        f"written for {WRITTEN_FOR} and must be adapted")
    found = tuple(inspect.signature(function).parameters)
    assert found == parameters, (
        f"transformers {transformers.__version__} changed {owner.__name__}.{member}{found} (was {parameters} in "
        f"{WRITTEN_FOR}); adapt trainers/trainer_adapter.py")


def test_the_tensorboard_callback_still_reads_its_folder_from_logging_dir():
    pytest.importorskip("tensorboard")
    from transformers.integrations import TensorBoardCallback

    assert "logging_dir" in vars(TensorBoardCallback()), (
        f"transformers {transformers.__version__}'s TensorBoardCallback has no logging_dir (it had in {WRITTEN_FOR}); "
        "adapt trainers/trainer_adapter.py's pin_tensorboard_dir")


PRIVATE_TRAINER_MEMBERS = {"_prepare_inputs", "loss_is_scaled_for_ga", "model_accepts_loss_kwargs",
                           "_save_checkpoint", "_maybe_log_save_evaluate", "_inner_training_loop"}


@pytest.mark.parametrize("path", sorted([*(ROOT / "trainers").glob("*.py"), *(ROOT / "models").glob("*.py")]),
                         ids=lambda p: p.name)
def test_no_private_trainer_member_nor_torch_internals_outside_the_adapter(path):
    if path.name == "trainer_adapter.py":
        return
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute):
            assert node.attr not in PRIVATE_TRAINER_MEMBERS, f"{path.name}:{node.lineno} uses {node.attr}"
            assert not (node.attr == "_C" and isinstance(node.value, ast.Name) and node.value.id == "torch"), (
                f"{path.name}:{node.lineno} uses torch._C")
        if isinstance(node, ast.FunctionDef):
            assert node.name not in PRIVATE_TRAINER_MEMBERS, f"{path.name}:{node.lineno} overrides {node.name}"
