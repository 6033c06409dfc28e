"""The backbone's attention mask, prepared before the call so that transformers never reads it on the host.

Given a 2D padding mask, transformers' ``create_bidirectional_mask`` first checks ``attention_mask.all()`` so that
an SDPA call without padding can drop the mask (``masking_utils._ignore_bidirectional_mask_sdpa``); that check reads
a device tensor on the host, a host-device synchronisation in every backbone forward (two to four per training
step here). With dynamic padding nearly every batch has padding, so the skip it buys almost never applies.
:func:`prepare_attention_mask` builds the 4D mask with the same transformers function, the skip switched off; the
backbone then takes the 4D mask as already prepared. Only the model types of
:data:`PLAIN_BIDIRECTIONAL_MODEL_TYPES` get it, each checked in the tests to give its own 2D-mask outputs: a modeling
module that imports ``create_bidirectional_mask`` may still attend otherwise (GPT-2 and XGLM import it for
cross-attention and build a causal mask for themselves; ModernBERT's local layers build a sliding-window mask), and a
prepared mask there would silently replace that attention with a plain bidirectional one. Any other backbone, a
decoder (``config.is_decoder``), or an attention implementation without a mask function (e.g. flash attention, which
takes the 2D mask) gets the 2D mask unchanged: its own masks, at the cost of transformers' host read.

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


#: The model types whose self-attention is bidirectional over the whole sentence and whose modeling code builds its
#: mask with ``create_bidirectional_mask`` alone (for an encoder, ``config.is_decoder`` false), so that a prepared 4D
#: mask is the mask they build themselves (``tests/test_no_host_sync.py``: the same hidden states as their 2D-mask
#: call, eager and SDPA). Not listed, on purpose: GPT-2 and XGLM (causal), ModernBERT (sliding-window local layers),
#: Longformer and BigBird (their own windowed and block-sparse attention).
PLAIN_BIDIRECTIONAL_MODEL_TYPES: frozenset[str] = frozenset({
    "albert", "bert", "camembert", "data2vec-text", "distilbert", "electra", "ernie", "megatron-bert", "mobilebert",
    "mpnet", "rembert", "roberta", "roformer", "xlm-roberta",
})


def builds_bidirectional_masks(model_class: type) -> bool:
    """Whether ``model_class``'s modeling module builds its masks with transformers' ``create_bidirectional_mask``
    (and so takes a prepared 4D mask as is): that module imports the function by name, so its namespace holds the
    very same object. Decided from the loaded module's namespace, not by reading any source text."""
    module = sys.modules.get(model_class.__module__)
    return getattr(module, "create_bidirectional_mask", None) is create_bidirectional_mask


def takes_prepared_mask(backbone: nn.Module) -> bool:
    """Whether ``backbone`` attends bidirectionally over the whole sentence and takes a prepared 4D mask as the very
    mask it would build itself (the module docstring): a listed model type, not a decoder, an attention
    implementation with a mask function, and modeling code that builds its mask with ``create_bidirectional_mask``."""
    config = getattr(backbone, "config", None)
    return (config is not None and getattr(config, "model_type", None) in PLAIN_BIDIRECTIONAL_MODEL_TYPES
            and not getattr(config, "is_decoder", False)
            and config._attn_implementation in ALL_MASK_ATTENTION_FUNCTIONS._global_mapping
            and builds_bidirectional_masks(type(backbone)))


def prepare_attention_mask(backbone: nn.Module, attention_mask: torch.Tensor) -> torch.Tensor:
    """[N, L] padding mask (1 = token) -> the mask ``backbone`` takes, built without reading it on the host: the
    4D mask of the backbone's attention implementation (bool for SDPA, additive for eager) where it
    :func:`takes_prepared_mask`, else the 2D mask itself, as also where the compiled backbone builds it in its graph
    (see the module docstring)."""
    if getattr(backbone, "_orig_mod", None) is not None:  # torch.compile's wrapper: the graph builds it (docstring)
        return attention_mask
    if attention_mask.dim() != 2 or not takes_prepared_mask(backbone):
        return attention_mask
    config = backbone.config
    dtype = backbone.get_input_embeddings().weight.dtype
    shape_only = torch.empty((*attention_mask.shape, 0), dtype=dtype, device=attention_mask.device)
    return create_bidirectional_mask(config=config, inputs_embeds=shape_only, attention_mask=attention_mask,
                                     allow_is_bidirectional_skip=False)


__all__ = [
    "PLAIN_BIDIRECTIONAL_MODEL_TYPES", "builds_bidirectional_masks", "prepare_attention_mask", "takes_prepared_mask",
]
