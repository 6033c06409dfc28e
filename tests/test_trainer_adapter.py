"""trainers/trainer_adapter.py, the one module that leans on Trainer internals: each member it relies on still exists
with the parameters it was written for, else a message says which and where to adapt; and the training core uses no
other private Trainer member nor ``torch._C``."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
import torch
import transformers

from trainers.trainer_adapter import RELIED_ON, WRITTEN_FOR

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("owner, member, parameters", RELIED_ON, ids=lambda v: getattr(v, "__name__", str(v)))
def test_the_library_still_has_what_the_adapter_relies_on(owner, member, parameters):
    import importlib

    library = importlib.import_module(owner.__module__.split(".")[0])  # transformers, or torch for DDP's
    installed = f"{library.__name__} {library.__version__}"
    function = getattr(owner, member, None)
    assert function is not None, (
        f"{installed} has no {owner.__name__}.{member}; trainers/trainer_adapter.py was written for transformers "
        f"{WRITTEN_FOR} and must be adapted")
    found = tuple(inspect.signature(function).parameters)
    assert found == parameters, (
        f"{installed} changed {owner.__name__}.{member}{found} (was {parameters} in transformers {WRITTEN_FOR}'s "
        "time); adapt trainers/trainer_adapter.py")


def test_the_tensorboard_callback_still_reads_its_folder_from_logging_dir():
    pytest.importorskip("tensorboard")
    from transformers.integrations import TensorBoardCallback

    assert "logging_dir" in vars(TensorBoardCallback()), (
        f"transformers {transformers.__version__}'s TensorBoardCallback has no logging_dir (it had in {WRITTEN_FOR}); "
        "adapt trainers/trainer_adapter.py's pin_tensorboard_dir")


PRIVATE_TRAINER_MEMBERS = {"_prepare_inputs", "loss_is_scaled_for_ga", "model_accepts_loss_kwargs",
                           "_save_checkpoint", "_maybe_log_save_evaluate", "_inner_training_loop",
                           "_clip_grad_norm", "_get_grad_norm", "_has_mixed_mesh_grads", "_mixed_mesh_grad_norm"}


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


# ------------------------------------------------------------------------------------------------ gradient clipping
def _trainer_with_gradients(tmp_path, backbone, method: str = "esimcse", **training_args):
    """A CLTrainer over a tiny ``method`` model whose trainable parameters hold large random gradients (clipped), one
    frozen parameter too (ESimCSE's momentum encoder: no gradient, as in training)."""
    import torch

    from tests.tiny import tiny_corpus, tiny_trainer
    from trainers.methods import build_model

    model = build_model(method, str(backbone))
    trainer = tiny_trainer(model, backbone, tmp_path / "run", tiny_corpus(tmp_path / "corpus.txt"), **training_args)
    generator = torch.Generator().manual_seed(0)
    for parameter in model.parameters():
        parameter.grad = (torch.randn(parameter.shape, generator=generator) * 3 if parameter.requires_grad else None)
    return trainer, model


def test_the_clipping_is_accelerates_bit_for_bit_without_walking_the_model(tmp_path, backbone, monkeypatch):
    """The Trainer's clipping route is ``accelerator.clip_grad_norm_(model.parameters(), max_grad_norm)``: the adapter
    returns the same norm and leaves the same clipped gradients, and after its first call it never walks the model."""
    import torch

    trainer, model = _trainer_with_gradients(tmp_path, backbone)
    frozen = [p for p in model.parameters() if not p.requires_grad]
    assert frozen, "the check needs a parameter without a gradient (ESimCSE's momentum encoder)"
    saved = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    want_norm = trainer.accelerator.clip_grad_norm_(model.parameters(), trainer.args.max_grad_norm)
    want = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    assert want_norm > trainer.args.max_grad_norm * 10, "the gradients must be clipped for the check to bite"
    for name, p in model.named_parameters():
        if name in saved:
            p.grad = saved[name].clone()

    got_norm = trainer._clip_grad_norm(model)
    assert torch.equal(got_norm, want_norm)
    for name, p in model.named_parameters():
        if name in want:
            assert torch.equal(p.grad, want[name]), name

    for name, p in model.named_parameters():
        if name in saved:
            p.grad = saved[name].clone()
    monkeypatch.setattr(type(model), "parameters", lambda *a, **k: (_ for _ in ()).throw(
        AssertionError("the clipping walked model.parameters() again")))
    assert torch.equal(trainer._clip_grad_norm(model), want_norm)


def test_the_logged_norm_without_clipping_is_accelerates(tmp_path, backbone):
    """``--max_grad_norm 0``: no clipping, and the logged ``grad_norm`` is the norm accelerate computes (with an
    infinite bound), over the listed parameters."""
    import torch

    trainer, model = _trainer_with_gradients(tmp_path, backbone, "simcse", max_grad_norm=0.0)
    saved = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    want = trainer.accelerator.clip_grad_norm_(model.parameters(), float("inf"))
    got = trainer._get_grad_norm(model)
    assert torch.equal(got, want)
    for name, p in model.named_parameters():
        if name in saved:
            assert torch.equal(p.grad, saved[name]), name  # not clipped


def test_runs_the_trainer_treats_apart_take_its_own_route(tmp_path, backbone, monkeypatch):
    """Gradients on several device meshes (tensor parallelism): the Trainer's own clipping, not the listed one."""
    trainer, model = _trainer_with_gradients(tmp_path, backbone, "simcse")
    called = []
    monkeypatch.setattr(type(trainer), "_has_mixed_mesh_grads", lambda self, m: True)
    monkeypatch.setattr(type(trainer), "_mixed_mesh_grad_norm", lambda self, m, norm: called.append(norm) or "theirs")
    assert trainer._clip_grad_norm(model) == "theirs" and called == [trainer.args.max_grad_norm]


def test_a_resume_in_another_layout_restores_the_first_processs_rng_state_cuda_included(tmp_path, monkeypatch):
    """A 2-process checkpoint resumed by one process (the run's global batch): every process takes the first
    process's state (``rng_state_0.pth``), through the Trainer's own restore. The Trainer saves a multi-process
    run's CUDA states as a list (one per device) and restores a one-process run's with ``set_rng_state`` (one
    tensor): handed the list, it failed and logged an error. Simulated CUDA (no GPU here): what reaches
    ``torch.cuda.random`` is device 0's state, in the form the resuming layout restores; the Python state too."""
    import random
    from types import SimpleNamespace

    import torch
    from transformers.training_args import ParallelMode

    from trainers.checkpoints import write_completion_marker
    from trainers.trainer_adapter import TrainerAdapter, rng_state_for_layout

    random.seed(5)
    python_state = random.getstate()
    devices = [torch.full((4,), float(device)) for device in range(2)]
    state = {"python": python_state, "numpy": __import__("numpy").random.get_state(),
             "cpu": torch.get_rng_state(), "cuda": devices}
    checkpoint = tmp_path / "checkpoint-2"
    checkpoint.mkdir()
    for rank in range(2):
        torch.save(state, checkpoint / f"rng_state_{rank}.pth")
    write_completion_marker(checkpoint, 2)
    restored: list = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda.random, "set_rng_state", lambda value: restored.append(("one", value)))
    monkeypatch.setattr(torch.cuda.random, "set_rng_state_all", lambda values: restored.append(("all", values)))
    adapter = TrainerAdapter.__new__(TrainerAdapter)
    adapter.args = SimpleNamespace(world_size=1, process_index=0, parallel_mode=ParallelMode.NOT_DISTRIBUTED)
    random.seed(6)
    adapter._load_rng_state(str(checkpoint))
    assert random.getstate() == python_state
    assert len(restored) == 1 and restored[0][0] == "one" and torch.equal(restored[0][1], devices[0]), restored
    # the other way: a one-process run's single tensor, for every device of a process of several
    one = rng_state_for_layout({"cuda": devices[1]}, distributed=True)["cuda"]
    assert len(one) == 2 and all(torch.equal(value, devices[1]) for value in one)
    assert rng_state_for_layout({"cpu": devices[0]}, distributed=False) == {"cpu": devices[0]}  # no CUDA state


def test_the_cached_step_takes_the_model_inside_the_wrappers_whatever_its_compiled_layers():
    """The cached step calls the bare model (``trainers.trainer_adapter.model_inside_wrappers``): a model whose layers
    the fast path swapped for compiled ones is the model itself, where accelerate 1.10-1.12's ``unwrap_model`` raised
    (KeyError '_orig_mod': the cached step's compiled warm-up failed and the whole run stepped eagerly; under those
    versions ``tests/test_step_graph.py``'s cached run, in the lower-bound suite of ``.ci/run``, fails without it)."""
    import accelerate
    from accelerate.utils import extract_model_from_parallel
    from packaging.version import Version
    from torch import nn

    from trainers.trainer_adapter import model_inside_wrappers

    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    model[1] = torch.compile(model[1], backend="eager")  # a layer of the fast path, swapped in for the step
    assert model_inside_wrappers(model) is model
    assert model_inside_wrappers(torch.compile(model, backend="eager")) is model
    assert model_inside_wrappers(nn.DataParallel(model)) is model  # the Trainer's on several GPUs without DDP
    if Version(accelerate.__version__) < Version("1.13"):
        with pytest.raises(KeyError, match="_orig_mod"):
            extract_model_from_parallel(model)
    else:
        assert extract_model_from_parallel(model) is model
