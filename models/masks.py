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
prepared mask there would silently replace that attention with a plain bidirectional one. ModernBERT gets its own
mapping instead (:data:`LAYER_TYPE_MASKS`: each kind of layer's mask, built with its own function, the skip off;
checked likewise). Any other backbone, a
decoder (``config.is_decoder``), or an attention implementation without a mask function (e.g. flash attention, which
takes the 2D mask) gets the 2D mask unchanged: its own masks, at the cost of transformers' host read.

A backbone compiled by ``torch.compile`` (the fast path's, ``trainers/fast_path.py``) gets the 2D mask too: its
modeling code builds the 4D mask inside the compiled graph, where transformers never reads a tensor on the host (it
skips the ``all()`` check while dynamo traces: ``transformers.utils.is_tracing``), so the mask is the same one
built here, made by the graph's own kernels instead of ~30 operations launched one by one before every backbone call
(on a GPU, where the fast path's step waits on the host).
"""
from __future__ import annotations

import inspect
import sys
from typing import Any, Callable

import torch
from torch import nn
from transformers.masking_utils import (ALL_MASK_ATTENTION_FUNCTIONS, create_bidirectional_mask,
                                        create_bidirectional_sliding_window_mask, create_causal_mask)


#: The model types whose self-attention is bidirectional over the whole sentence and whose modeling code builds its
#: mask with ``create_bidirectional_mask`` alone (for an encoder, ``config.is_decoder`` false), so that a prepared 4D
#: mask is the mask they build themselves (``tests/test_no_host_sync.py``: the same hidden states as their 2D-mask
#: call, eager and SDPA). Not listed, on purpose: GPT-2 and XGLM (causal), ModernBERT (sliding-window local layers),
#: Longformer and BigBird (their own windowed and block-sparse attention), ESM (its embeddings read the 2D mask).
#: BERT-generation, RoBERTa-PreLayerNorm, XLM-R XL and X-MOD added 2026-12-03: from transformers 5.25 their mask-less
#: PromptBERT template pass would infer packed sequences (:func:`masks_rows_without_padding`). Added 2026-12-04: the
#: rotary embedding encoders EuroBERT, GTE, Jina embeddings v3 and Nomic BERT (in transformers 5.20 to 5.25), whose 2D
#: mask was read on the host at every forward, and RoCBert, likewise, whose mask-less template pass also inferred packed
#: sequences (5.25).
PLAIN_BIDIRECTIONAL_MODEL_TYPES: frozenset[str] = frozenset({
    "albert", "bert", "bert-generation", "camembert", "data2vec-text", "distilbert", "electra", "ernie", "eurobert",
    "gte", "jina_embeddings_v3", "megatron-bert", "mobilebert", "mpnet", "nomic_bert", "rembert", "roberta",
    "roberta-prelayernorm", "roc_bert", "roformer", "xlm-roberta", "xlm-roberta-xl", "xmod",
})


#: The encoders whose modeling code builds one mask per kind of layer, each with one transformers mask function,
#: and takes the mapping ``{layer type: mask}`` as already prepared: ModernBERT's global layers attend over the whole
#: sentence, its local layers in a sliding window (its ``attention_mask_mapping``; transformers 5.20 to 5.24). Its
#: 2D mask would be read on the host twice per forward (both functions' skip check), and a step graph could not
#: capture that step (``tests/test_no_host_sync.py``: the prepared mapping gives its own 2D-mask hidden states).
LAYER_TYPE_MASKS: dict[str, dict[str, Callable[..., Any]]] = {
    "modernbert": {"full_attention": create_bidirectional_mask,
                   "sliding_attention": create_bidirectional_sliding_window_mask},
}


def builds_bidirectional_masks(model_class: type) -> bool:
    """Whether ``model_class``'s modeling module builds its masks with transformers' ``create_bidirectional_mask``
    (and so takes a prepared 4D mask as is): that module imports the function by name, so its namespace holds the
    very same object. Decided from the loaded module's namespace, not by reading any source text."""
    return module_holds(model_class, create_bidirectional_mask)


def module_holds(model_class: type, function: Callable[..., Any]) -> bool:
    """Whether ``model_class``'s modeling module holds ``function`` itself under its name (it imported it to call)."""
    return getattr(sys.modules.get(model_class.__module__), function.__name__, None) is function


def takes_prepared_mask(backbone: nn.Module) -> bool:
    """Whether ``backbone`` takes prepared masks as the very masks it would build itself (the module docstring;
    :func:`mask_builders`)."""
    return mask_builders(backbone) is not None


def mask_builders(backbone: nn.Module) -> dict[str, Callable[..., Any]] | None:
    """The transformers function of each mask ``backbone`` builds itself from a 2D padding mask, ``{"": function}``
    for a plain bidirectional encoder (:data:`PLAIN_BIDIRECTIONAL_MODEL_TYPES`: one mask, passed as is) or
    ``{layer type: function}`` (:data:`LAYER_TYPE_MASKS`: the mapping passed), each the very function its modeling
    module calls; ``None`` where it takes no prepared mask (a decoder, another model type, an attention
    implementation without a mask function)."""
    config = getattr(backbone, "config", None)
    model_type = getattr(config, "model_type", None)
    if (config is None or getattr(config, "is_decoder", False)
            or config._attn_implementation not in ALL_MASK_ATTENTION_FUNCTIONS._global_mapping):
        return None
    if model_type in PLAIN_BIDIRECTIONAL_MODEL_TYPES:
        builders = {"": create_bidirectional_mask}
    else:
        builders = LAYER_TYPE_MASKS.get(model_type)
    if builders is None or not all(module_holds(type(backbone), build) for build in builders.values()):
        return None
    return builders


def checks_padding_without_mask(backbone: nn.Module) -> bool:
    """Whether ``backbone``'s forward, given ``input_ids`` and no attention mask, looks for the pad token in their
    first and last columns (transformers' ``PreTrainedModel.warn_if_padding_and_no_attention_mask``, called by 32
    model types of transformers 5.24, DeBERTa(-v2), RoFormer, MegatronBERT and RemBERT among them): a host read of a
    device tensor, i.e. a host-device synchronisation, and a step a CUDA graph cannot capture. Only with a pad token
    in the config (the check returns before reading otherwise); ``False`` for a ``torch.compile`` wrapper (the check
    is skipped while dynamo traces) and where the call sits outside the model's own ``forward``."""
    forward = getattr(inspect.unwrap(type(backbone).forward), "__code__", None)
    return (forward is not None and "warn_if_padding_and_no_attention_mask" in forward.co_names
            and getattr(getattr(backbone, "config", None), "pad_token_id", None) is not None)


def infers_packing_without_mask(backbone: nn.Module) -> bool:
    """Whether ``backbone``, given ``position_ids`` and no attention mask, may build a packed-sequence mask from them:
    from transformers 5.25, ``create_bidirectional_mask`` takes the position ids and, without a 2D mask, reads any
    step other than +1 between neighbours in a row as the start of another sequence, which the tokens before it do not
    attend to (``masking_utils.find_packed_sequence_indices``), and reads on the host whether it found one. Decided
    from the loaded modules: the backbone's module holds that function, and the function takes ``position_ids``.

    An over-approximation: it holds wherever the module holds the function (every type of
    :data:`PLAIN_BIDIRECTIONAL_MODEL_TYPES` and ModernBERT among them), but in
    transformers 5.25 only some pass their position ids to the function (a mask-less call on template rows differs
    from an all-ones-mask call: the BERT, ERNIE, RoBERTa, CamemBERT, data2vec-text, RoBERTa-PreLayerNorm, XLM-R
    (-XL), ELECTRA, BERT-generation, X-MOD and RoCBert models); ALBERT, DistilBERT, MobileBERT, MPNet, EuroBERT,
    GTE, Jina v3, Nomic BERT, MegatronBERT, RemBERT, RoFormer and ModernBERT do not (the same states). The all-ones
    mask it leads to (:func:`masks_rows_without_padding`) is harmless for those: the states of their mask-less call,
    and no host read (the mask is prepared)."""
    return (module_holds(type(backbone), create_bidirectional_mask)
            and "position_ids" in inspect.signature(create_bidirectional_mask).parameters)


def masks_rows_without_padding(backbone: nn.Module) -> bool:
    """Whether rows without padding go into ``backbone`` with an all-ones mask rather than none (PromptBERT's
    template pass, whose position ids skip n places after the prefix), each case a mask taken without a host read:

    - it takes a prepared mask (:func:`takes_prepared_mask`: BERT, RoBERTa, ModernBERT...) and, given no mask, may
      treat the prefix and the suffix as two packed sequences (:func:`infers_packing_without_mask`, transformers
      5.25 on): the prepared all-ones mask keeps the whole-row attention of the official code's mask-less call
      (transformers 4), and the states of the mask-less call of a transformers without that inference;
    - its forward would read the host without a mask (:func:`checks_padding_without_mask`) and takes the all-ones
      mask, either prepared (RoFormer, MegatronBERT, RemBERT) or into an attention that builds its own mask from
      it, as it does from the all-ones mask it makes when given none (DeBERTa(-v2), LayoutLM: no transformers mask
      function in its module): the states of its mask-less call.

    Checked in ``tests/test_no_host_sync.py``. Not masked: a model whose mask function would read the 2D mask instead
    (ConvBERT, BigBird), and GPT-2, whose causal mask without a 2D mask also follows its position ids; they keep the
    mask-less call, and so what their mask functions infer from the position ids. A ``torch.compile`` wrapper is
    decided by the model it wraps for the first case (its graph would infer the packing, unconditionally while
    traced), gets the 2D mask (:func:`prepare_attention_mask`), and never the second (no host read while traced)."""
    model = getattr(backbone, "_orig_mod", backbone)  # a compiled backbone infers the packing in its graph
    if takes_prepared_mask(model) and infers_packing_without_mask(model):
        return True
    if not checks_padding_without_mask(backbone):
        return False
    return takes_prepared_mask(backbone) or not any(
        module_holds(type(backbone), function) for function in (create_bidirectional_mask, create_causal_mask))


def prepare_attention_mask(backbone: nn.Module,
                           attention_mask: torch.Tensor) -> torch.Tensor | dict[str, torch.Tensor]:
    """[N, L] padding mask (1 = token) -> the mask ``backbone`` takes, built without reading it on the host: the
    4D mask of the backbone's attention implementation (bool for SDPA, additive for eager) where it
    :func:`takes_prepared_mask` (for :data:`LAYER_TYPE_MASKS`, ``{layer type: 4D mask}``), else the 2D mask itself,
    as also where the compiled backbone builds it in its graph (see the module docstring)."""
    if getattr(backbone, "_orig_mod", None) is not None:  # torch.compile's wrapper: the graph builds it (docstring)
        return attention_mask
    builders = mask_builders(backbone) if attention_mask.dim() == 2 else None
    if builders is None:
        return attention_mask
    dtype = backbone.get_input_embeddings().weight.dtype
    shape_only = torch.empty((*attention_mask.shape, 0), dtype=dtype, device=attention_mask.device)
    masks = {layer_type: build(config=backbone.config, inputs_embeds=shape_only, attention_mask=attention_mask,
                               allow_is_bidirectional_skip=False) for layer_type, build in builders.items()}
    return masks.pop("") if "" in masks else masks


__all__ = [
    "LAYER_TYPE_MASKS", "PLAIN_BIDIRECTIONAL_MODEL_TYPES", "builds_bidirectional_masks", "checks_padding_without_mask",
    "infers_packing_without_mask", "mask_builders", "masks_rows_without_padding", "module_holds",
    "prepare_attention_mask", "takes_prepared_mask",
]
