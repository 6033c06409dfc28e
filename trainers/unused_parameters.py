"""DDP's ``find_unused_parameters``, decided from the model instead of the Trainer's blanket ``True``.

The Trainer hands DDP ``find_unused_parameters=True`` for any ``PreTrainedModel`` trained without gradient
checkpointing. DDP then walks the autograd graph from the outputs after every forward, looking for parameters the
loss never reached, and every process warns that it found none (torch: "this flag results in an extra traversal of
the autograd graph every iteration"). Every method's own modules reach its loss (``tests/test_ddp.py`` trains each
method under torchrun with the value decided here); only a backbone can hold a parameter its forward never uses
(XLNet's ``mask_emb``, read only with a permutation mask), and then DDP without the search stops at the second step.

So one forward of a four-token row through each trainable backbone of the model, with the inputs training gives it
(``token_type_ids`` when the tokenizer produces them: XLNet's segment parameters are used only then), in eval mode
(no dropout draw) and differentiated with ``torch.autograd.grad`` (no ``.grad`` written), lists the backbone
parameters left without a gradient: the search stays on exactly when there are some. ``--ddp_find_unused_parameters``
given on the command line wins; ``false`` where a backbone parameter is unused is refused at the start instead of at
the second step.
"""
from __future__ import annotations

import logging
from typing import Any

import torch
from torch import nn

from eval.backbone import probe_forward, probe_ids

from .errors import UsageError
from .fast_path import typed_checkpointing_flag

logger = logging.getLogger("cse_repro")

def parameters_without_gradient(backbone: nn.Module, token_type_ids: bool = False) -> list[str]:
    """Names of the trainable parameters of ``backbone`` that one forward of 4 of its token ids (with all-zero
    ``token_type_ids`` if asked) leaves out of its last hidden state's autograd graph (what DDP would find unused).
    Leaves no trace: the checks' probe forward (:func:`eval.backbone.probe_forward`: eval mode, restored after, no
    dropout draw), differentiated with ``torch.autograd.grad`` (no ``.grad`` written)."""
    named = [(name, param) for name, param in backbone.named_parameters() if param.requires_grad]
    if not named:
        return []
    input_ids = torch.tensor([probe_ids(backbone, 4)], device=named[0][1].device)
    extra = {"token_type_ids": torch.zeros_like(input_ids)} if token_type_ids else {}
    hidden = probe_forward(backbone, input_ids, torch.ones_like(input_ids), with_grad=True, **extra)[0]
    gradients = torch.autograd.grad(hidden.float().sum(), [param for _, param in named], allow_unused=True)
    return [name for (name, _), gradient in zip(named, gradients) if gradient is None]


def unused_backbone_parameters(model: Any, token_type_ids: bool = False) -> list[str]:
    """:func:`parameters_without_gradient` of every backbone of
    :meth:`~models.base.ContrastiveModel.trainable_backbones`, named from the model."""
    return [f"{attribute}.{name}" for attribute, backbone in model.trainable_backbones().items()
            for name in parameters_without_gradient(backbone, token_type_ids)]


def choose_find_unused_parameters(model: Any, training_args: Any, tokenizer: Any) -> None:
    """Set ``training_args.ddp_find_unused_parameters`` for a multi-process run that leaves it to the Trainer:
    ``True`` exactly when a backbone parameter is unused (logged, named). Refuses ``false`` from the command line
    where one is. A single process, or gradient checkpointing (the Trainer's own ``False``), is left alone."""
    if training_args.world_size <= 1 or typed_checkpointing_flag(training_args):
        return
    given = training_args.ddp_find_unused_parameters
    if given is True:
        return
    unused = unused_backbone_parameters(model, "token_type_ids" in tokenizer.model_input_names)
    if given is False and unused:
        raise UsageError(f"--ddp_find_unused_parameters false: {describe(unused)}, so DDP would stop at the second "
                         "step ('Expected to have finished reduction in the prior iteration'); drop the flag (this "
                         "run decides it from the model) or pass true")
    if given is None:
        training_args.ddp_find_unused_parameters = bool(unused)
        if unused and training_args.should_log:
            logger.info("DDP looks for unused parameters at every step: %s", describe(unused))


def describe(names: list[str], shown: int = 3) -> str:
    """``5 backbone parameters receive no gradient (a, b, c and 2 more)``."""
    listed = ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")
    if len(names) == 1:
        return f"1 backbone parameter receives no gradient ({listed})"
    return f"{len(names)} backbone parameters receive no gradient ({listed})"
