"""models/module_lists.py behind ``ContrastiveModel.train`` / ``zero_grad`` (and the Trainer's clipping): the model is
walked once, the lists are re-checked in flat passes, and nothing the walk would have seen is missed: a submodule
switched on its own, a parameter or module replaced or added, DiffCSE's generator rule, the fast path's compiled
stand-in."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from models.module_lists import listed_modules, listed_parameters, training_modes_hold
from tests.tiny import save_tiny_backbone, save_tiny_generator
from trainers.methods import build_model


@pytest.fixture(scope="module")
def tiny_backbone(tmp_path_factory) -> str:
    return str(save_tiny_backbone(tmp_path_factory.mktemp("bert"), seed=0))


def _no_walk(monkeypatch, cls, name):
    monkeypatch.setattr(cls, name, lambda *a, **k: (_ for _ in ()).throw(AssertionError(f"{cls.__name__}.{name} ran")))


def test_the_lists_are_the_walks(tiny_backbone):
    model = build_model("esimcse", tiny_backbone)
    assert listed_modules(model) == list(model.modules())
    assert listed_parameters(model) == list(model.parameters())


def test_train_skips_the_walk_when_nothing_would_change(tiny_backbone, monkeypatch):
    model = build_model("simcse", tiny_backbone)
    model.eval()
    model.train()
    assert all(module.training for module in model.modules())
    _no_walk(monkeypatch, nn.Module, "train")  # the second call must not reach nn.Module.train (the recursion)
    assert model.train() is model
    assert training_modes_hold(model)


def test_train_still_reaches_a_submodule_switched_on_its_own(tiny_backbone):
    model = build_model("simcse", tiny_backbone)
    model.train()
    model.encoder.eval()
    model.train()
    assert all(module.training for module in model.modules())


def test_train_reaches_a_module_added_or_replaced_since(tiny_backbone):
    model = build_model("simcse", tiny_backbone)
    model.train()
    model.projector = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.1)).eval()  # replaced, in eval mode
    model.extra_head = nn.Dropout(0.1).eval()  # added
    model.train()
    assert model.projector.training and model.projector[1].training and model.extra_head.training


def test_eval_is_always_the_full_walk(tiny_backbone):
    model = build_model("simcse", tiny_backbone)
    model.train()
    model.eval()
    assert not any(module.training for module in model.modules())


def test_esimcse_keeps_its_momentum_encoder_in_eval(tiny_backbone):
    model = build_model("esimcse", tiny_backbone)
    for _ in range(2):
        model.train()
        assert model.encoder.training and not any(m.training for m in model.momentum_encoder.modules())


@pytest.mark.parametrize("generator_dropout", [True, False])
def test_diffcse_generator_follows_its_rule_on_every_call(tmp_path, tiny_backbone, generator_dropout):
    generator = save_tiny_generator(tmp_path / "generator")
    model = build_model("diffcse", tiny_backbone, generator_name=str(generator), generator_dropout=generator_dropout)
    for _ in range(2):
        model.eval()
        assert not model.generator.training
        model.train()
        model.train()
        assert model.generator.training == generator_dropout and model.encoder.training
        assert all(m.training == generator_dropout for m in model.generator.modules())


def test_the_fast_paths_compiled_stand_in_keeps_the_lists(tiny_backbone, monkeypatch):
    """The fast path swaps ``torch.compile(encoder)`` in for each step, and the Trainer calls ``model.train()`` inside
    it: the stand-in's ``_orig_mod`` is the listed encoder, so the lists stand and the walk is skipped."""
    model = build_model("simcse", tiny_backbone)
    model.train()
    eager = model.encoder
    model.encoder = torch.compile(eager, backend="eager")
    try:
        _no_walk(monkeypatch, nn.Module, "train")
        model.train()
        assert listed_parameters(model) == [p for p in model.parameters()]
    finally:
        monkeypatch.undo()
        model.encoder = eager


def test_zero_grad_clears_every_gradient_a_walk_would(tiny_backbone):
    model = build_model("simcse", tiny_backbone)
    for parameter in model.parameters():
        parameter.grad = torch.ones_like(parameter)
    model.zero_grad()
    assert all(parameter.grad is None for parameter in model.parameters())
    # a parameter replaced and one added since the list was made: their gradients are cleared too
    model.projector[0].weight = nn.Parameter(torch.zeros_like(model.projector[0].weight))
    model.extra = nn.Linear(2, 2)
    for parameter in model.parameters():
        parameter.grad = torch.ones_like(parameter)
    model.zero_grad()
    assert all(parameter.grad is None for parameter in model.parameters())


def test_zero_grad_reaches_the_parameters_of_a_module_added_since(tiny_backbone):
    """A module added (no listed parameter replaced): its parameters are the model's too, and their gradients are
    cleared (the Trainer's clipping reads the same list)."""
    model = build_model("simcse", tiny_backbone)
    model.zero_grad()  # lists the parameters
    model.extra = nn.Linear(2, 2)
    for parameter in model.parameters():
        parameter.grad = torch.ones_like(parameter)
    model.zero_grad()
    assert all(parameter.grad is None for parameter in model.parameters())
    assert listed_parameters(model) == list(model.parameters())


def test_zero_grad_without_set_to_none_is_modules(tiny_backbone):
    model = build_model("simcse", tiny_backbone)
    for parameter in model.parameters():
        parameter.grad = torch.ones_like(parameter)
    model.zero_grad(set_to_none=False)
    assert all(parameter.grad is not None and not parameter.grad.any() for parameter in model.parameters())
