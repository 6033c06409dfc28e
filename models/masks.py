"""The backbone's attention mask, prepared before the call so that transformers never reads it on the host.

Given a 2D padding mask, transformers' ``create_bidirectional_mask`` first checks ``attention_mask.all()`` so that
an SDPA call without padding can drop the mask (``masking_utils._ignore_bidirectional_mask_sdpa``); that check reads
a device tensor on the host, a host-device synchronisation in every backbone forward (two to four per training
step here). With dynamic padding nearly every batch has padding, so the skip it buys almost never applies.
:func:`prepare_attention_mask` builds the 4D mask with the same transformers function, the skip switched off; the
backbone then takes the 4D mask as already prepared. Backbones whose modeling code does not build its masks with
``create_bidirectional_mask``, or attention implementations without a mask function (e.g. flash attention, which
takes the 2D mask), get the 2D mask unchanged.

A backbone compiled by ``torch.compile`` (the fast path's, ``trainers/fast_path.py``) gets the 2D mask too: its
modeling code builds the 4D mask inside the compiled graph, where transformers never reads a tensor on the host (it
skips the ``all()`` check while dynamo traces: ``transformers.utils.is_tracing``), so the mask is the same one
built here, made by the graph's own kernels instead of ~30 operations launched one by one before every backbone call
(on a GPU, where the fast path's step waits on the host).
"""
from __future__ import annotations

import sys

import torch
from torch import nn
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, create_bidirectional_mask


def builds_bidirectional_masks(model_class: type) -> bool:
    """Whether ``model_class``'s modeling module builds its masks with transformers' ``create_bidirectional_mask``
    (and so takes a prepared 4D mask as is): that module imports the function by name, so its namespace holds the
    very same object. Decided from the loaded module's namespace, not by reading any source text."""
    module = sys.modules.get(model_class.__module__)
    return getattr(module, "create_bidirectional_mask", None) is create_bidirectional_mask


def prepare_attention_mask(backbone: nn.Module, attention_mask: torch.Tensor) -> torch.Tensor:
    """[N, L] padding mask (1 = token) -> the mask ``backbone`` takes, built without reading it on the host: the
    4D mask of the backbone's attention implementation (bool for SDPA, additive for eager), or the 2D mask itself
    where that cannot be done or the compiled backbone builds it in its graph (see the module docstring)."""
    if getattr(backbone, "_orig_mod", None) is not None:  # torch.compile's wrapper: the graph builds it (docstring)
        return attention_mask
    config = getattr(backbone, "config", None)
    if (attention_mask.dim() != 2 or config is None or getattr(config, "is_decoder", False)
            or config._attn_implementation not in ALL_MASK_ATTENTION_FUNCTIONS._global_mapping
            or not builds_bidirectional_masks(type(backbone))):
        return attention_mask
    dtype = backbone.get_input_embeddings().weight.dtype
    shape_only = torch.empty((*attention_mask.shape, 0), dtype=dtype, device=attention_mask.device)
    return create_bidirectional_mask(config=config, inputs_embeds=shape_only, attention_mask=attention_mask,
                                     allow_is_bidirectional_skip=False)


__all__ = ["builds_bidirectional_masks", "prepare_attention_mask"]
