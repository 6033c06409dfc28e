"""A model's modules and parameters, listed by one walk and re-checked in flat passes: what a training step does to all
of them at every step (``model.train()``, ``model.zero_grad()``, the gradient clipping) without walking the module
tree each time.

``model.modules()`` and ``model.parameters()`` are generators that recurse through every submodule (bert-base: 230
modules, 199 parameter tensors; ESimCSE twice that): a few hundred microseconds of Python per walk, and the Trainer
walks the model three times per step (``model.train()``, ``accelerate``'s clipping, ``model.zero_grad()``). On a GPU
the fast path's step waits on the host, so these walks are time the GPU idles (``bench/trainer_host.py``).

A list is only used while it is still the model's (:class:`ModelLists`): every parent still holds the children it
held (the fast path's compiled stand-in for a backbone, whose ``_orig_mod`` is the listed one, counts as it) and no
more, every module still holds the parameters it held and no more. A module or parameter added or replaced since
(transformers materialises loaded weights as new parameters; a user swaps a head) makes a fresh list. The check is
one flat pass over lists (tens of microseconds), not a recursion through generators.

``model.train()`` (:meth:`models.base.ContrastiveModel.train`) is skipped when every listed module still has the flag
the last full ``train(True)`` left (:func:`training_modes_hold`): a submodule switched on its own since
(``model.encoder.eval()``) is seen, and the full walk runs.
"""
from __future__ import annotations

import weakref

from torch import nn


def _ids(dictionaries: list[dict]) -> list[tuple[int, ...]]:
    """The identities of each dictionary's values (one C-level pass per dictionary)."""
    return [tuple(map(id, dictionary.values())) for dictionary in dictionaries]


class ModelLists:
    """One walk's record of ``root``: its modules (``root.modules()``'s order), parameters (``root.parameters()``'s:
    shared ones once) and what each module held (the identities of its children and parameters)."""

    def __init__(self, root: nn.Module) -> None:
        self.modules = list(root.modules())
        self.parameters = list(root.parameters())
        self._children = [module._modules for module in self.modules]
        self._children_ids = _ids(self._children)
        self._parameters = [module._parameters for module in self.modules]
        self._parameter_ids = _ids(self._parameters)
        #: each module's ``training`` flag after the last full ``train(True)`` (None: none since this walk)
        self.training_modes: list[bool] | None = None

    def modules_current(self) -> bool:
        """Whether every listed module holds the same children (or their compiled stand-ins) and no more."""
        return _ids(self._children) == self._children_ids or self._stand_ins_only()

    def _stand_ins_only(self) -> bool:
        """Whether every child that differs from the walk's is a compiled stand-in (``torch.compile``'s wrapper,
        whose ``_orig_mod`` is the listed child: the fast path swaps one in for each training step)."""
        for children, ids in zip(self._children, self._children_ids):
            if len(children) != len(ids):
                return False
            for child, listed in zip(children.values(), ids):
                if id(child) != listed and id(getattr(child, "_orig_mod", None)) != listed:
                    return False
        return True

    def parameters_current(self) -> bool:
        """Whether the modules are those listed (:meth:`modules_current`: a module added since brings parameters) and
        every one holds the same parameters and no more."""
        return self.modules_current() and _ids(self._parameters) == self._parameter_ids


_LISTS: "weakref.WeakKeyDictionary[nn.Module, ModelLists]" = weakref.WeakKeyDictionary()


def _lists(root: nn.Module, current: str) -> ModelLists:
    """``root``'s lists, made afresh unless the kept ones pass their ``current`` check."""
    lists = _LISTS.get(root)
    if lists is None or not getattr(lists, current)():
        lists = _LISTS[root] = ModelLists(root)
    return lists


def listed_modules(root: nn.Module) -> list[nn.Module]:
    """``list(root.modules())``, kept while :meth:`ModelLists.modules_current`."""
    return _lists(root, "modules_current").modules


def model_lists(root: nn.Module) -> ModelLists:
    """``root``'s :class:`ModelLists` (modules and parameters), kept while :meth:`ModelLists.parameters_current`: the
    same object while nothing was added or replaced, so a caller may key its own derived lists on its identity."""
    return _lists(root, "parameters_current")


def listed_parameters(root: nn.Module) -> list[nn.Parameter]:
    """``list(root.parameters())``, kept while :meth:`ModelLists.parameters_current`."""
    return _lists(root, "parameters_current").parameters


def remember_training_modes(root: nn.Module) -> None:
    """After a full ``root.train(True)``: keep each listed module's flag."""
    lists = _lists(root, "modules_current")
    lists.training_modes = [module.training for module in lists.modules]


def training_modes_hold(root: nn.Module) -> bool:
    """Whether ``root``'s modules are those listed and each still has the flag the last full ``train(True)`` left
    (:func:`remember_training_modes`; ``False`` when there was none since the list was made)."""
    lists = _LISTS.get(root)
    return (lists is not None and lists.training_modes is not None and lists.modules_current()
            and [module.training for module in lists.modules] == lists.training_modes)


__all__ = ["ModelLists", "listed_modules", "listed_parameters", "model_lists", "remember_training_modes",
           "training_modes_hold"]
