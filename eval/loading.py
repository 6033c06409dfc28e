"""Turn a model name or folder into a :class:`~eval.encoder.SentenceEncoder`.

Three kinds of model are recognised, in this order:

1. **this repo's checkpoint** - ``config.json`` has ``"model_type": "cse_contrastive"``: loaded with
   :class:`models.base.ContrastiveModel` and embedded with ``model.embed(..., pooler_type=pooler)``
   (``pooler=None`` = the method's own test-time embedding).
2. **a sentence-transformers folder** - it has ``modules.json``. With ``pooler=None`` the folder's own pipeline
   runs (its Pooling/Dense/Normalize modules); with an explicit pooler, the underlying transformer module is
   loaded with ``AutoModel`` and pooled with :func:`models.poolers.pool`.
3. **a plain Hugging Face model** (folder or hub name) - ``AutoModel`` with SDPA attention when the architecture
   supports it. The default pooler is ``cls``, which for a plain model means its own ``pooler_output`` (BERT's
   Linear+Tanh over [CLS]) - exactly what SimCSE's ``evaluation.py --pooler cls`` reads; for this repo's plain export
   it is the run's test-time pooler, which its ``config.json`` names (``sentence_embedding``, ``models/export.py``).

Remote code is never trusted. The model is put in eval mode (dropout off) here.
"""
from __future__ import annotations

import contextlib
import inspect
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Literal

import torch
from safetensors import SafetensorError

from eval.backbone import (TEXT_ENCODER_ADVICE, IncompleteWeightsError, ModelLoadingError, bf16_forward_problem,
                           cls_position_problem, encoder_decoder_problem, fixed_length_problem, load_backbone,
                           position_limit, position_zero_sees_only_itself, resolve_run_folder, text_encoder_problem,
                           tokenizer_problem, transformer_module_path, vocabulary_problem, weights_file_problem)
from eval.encoder import EmbedFn, SentenceEncoder, resolve_device
from models.masks import prepare_attention_mask
from models.poolers import POOLER_TYPES, POSITION_ZERO_POOLERS, needs_hidden_states, pool

logger = logging.getLogger(__name__)

ModelKind = Literal["cse_contrastive", "sentence_transformers", "huggingface"]

_LOADING_ERRORS = (OSError, ValueError, ImportError, KeyError, SafetensorError)


@dataclass
class _Backend:
    """What a loader produces: the module (to place and set to eval), its embedding function and tokenizer, and the
    backbone that function hands the sentences' own tokens to (``None``: none known; the encoder then never packs)."""

    module: torch.nn.Module
    embed_fn: EmbedFn
    tokenizer: Any
    max_length: int | None = None
    preprocess: Callable[[str], str] | None = None
    backbone: torch.nn.Module | None = None
    #: What the sentence embedding is, as the loader resolved it (``pooler avg``), for the results record.
    embedding: str = ""


# ----------------------------------------------------------------------------------------------- detection


def _fetch_file(model_name_or_path: str, filename: str) -> Path | None:
    """A file of a local folder, or of a hub repository when it is reachable (or cached); ``None`` if absent."""
    local = Path(model_name_or_path)
    if local.is_dir():
        candidate = local / filename
        return candidate if candidate.is_file() else None
    try:
        from huggingface_hub import hf_hub_download

        return Path(hf_hub_download(model_name_or_path, filename))
    except Exception:  # noqa: BLE001 - a best-effort probe: absent file, offline, invalid id all mean "no"
        return None


def _read_json(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelLoadingError(f"cannot read {path}: {exc}") from None


def detect_model_kind(model_name_or_path: str) -> ModelKind:
    """Which of the three supported kinds ``model_name_or_path`` is (see the module docstring)."""
    if _read_json(_fetch_file(model_name_or_path, "config.json")).get("model_type") == "cse_contrastive":
        return "cse_contrastive"
    if _fetch_file(model_name_or_path, "modules.json") is not None:
        return "sentence_transformers"
    return "huggingface"


@contextlib.contextmanager
def _loading_errors(model_name_or_path: str) -> Iterator[None]:
    """Re-raise library loading errors as one :class:`ModelLoadingError` naming the model."""
    missing = missing_model(model_name_or_path)
    if missing:
        raise ModelLoadingError(missing)
    folder = Path(model_name_or_path)
    broken = weights_file_problem(folder) if folder.is_dir() else None
    if broken:
        raise ModelLoadingError(f"could not load {model_name_or_path!r}: {broken}")
    try:
        yield
    except IncompleteWeightsError as exc:
        raise ModelLoadingError(str(exc)) from exc
    except _LOADING_ERRORS as exc:
        raise ModelLoadingError(f"could not load {model_name_or_path!r}: {exc}") from exc


def missing_model(model_name_or_path: str) -> str | None:
    """Why a model that is not a local path cannot load, said before any library tries (and words its failure):
    no such folder, or a Hub name that is not in the cache while the Hub is offline (the training scripts' check,
    :func:`eval.backbone.model_problem`). ``None`` for an existing path or a Hub name that can still be fetched."""
    if Path(model_name_or_path).expanduser().exists():
        return None
    from .backbone import model_problem

    return model_problem("--model_name_or_path", model_name_or_path)


# ----------------------------------------------------------------------------------------------- backends


def _load_tokenizer(model_name_or_path: str, subfolder: str = "") -> Any:
    from transformers import AutoTokenizer

    kwargs: dict[str, Any] = {"trust_remote_code": False}
    if subfolder:
        kwargs["subfolder"] = subfolder
    return AutoTokenizer.from_pretrained(model_name_or_path, **kwargs)


def _transformer_embed_fn(model: torch.nn.Module, tokenizer: Any, pooler: str, name: str,
                          pooler_missing: bool = False) -> EmbedFn:
    """Pool a plain transformer's outputs; ``cls`` reads the model's own ``pooler_output`` (computed from position
    0, like ``cls_before_pooler``: both refused where position 0 is no [CLS] token), refused where the model has no
    pooler layer or its weights held none (``pooler_missing``: a randomly initialised one)."""
    if pooler == "cls" and getattr(model, "pooler", None) is None:
        raise ModelLoadingError(
            f"{name} ({type(model).__name__}) has no pooler layer, so --pooler cls (its pooler_output) is undefined; "
            f"use --pooler cls_before_pooler (the raw [CLS] vector) or --pooler avg"
        )
    if pooler == "cls" and pooler_missing:
        raise ModelLoadingError(
            f"{name}: its weights hold no pooler layer, so --pooler cls (the pooler_output, the default for a plain "
            f"model) would read a randomly initialised one; use --pooler cls_before_pooler (the raw [CLS] vector) or "
            f"--pooler avg")
    if pooler == "cls_before_pooler" and position_zero_sees_only_itself(model):
        raise ModelLoadingError(
            f"{name} ({type(model).__name__}): its position 0 sees only the first token (a causal model, as "
            f"decoder-only ones are), so --pooler cls_before_pooler gives every sentence that starts with the same "
            f"token the same vector; use --pooler avg (the mean over the sentence's tokens)"
        )
    problem = cls_position_problem(tokenizer) if pooler in POSITION_ZERO_POOLERS else None
    if problem:
        raise ModelLoadingError(f"{name}: {problem}; --pooler {pooler} reads position 0, so every sentence would "
                                f"be scored by its first word's state; use --pooler avg")
    accepted = set(inspect.signature(model.forward).parameters)
    hidden_states = needs_hidden_states(pooler)

    def embed(**features: torch.Tensor) -> torch.Tensor:
        inputs = {key: value for key, value in features.items() if key in accepted}
        if "attention_mask" in inputs:  # the backbone's own mask, built without reading the padding on the host
            inputs["attention_mask"] = prepare_attention_mask(model, inputs["attention_mask"])
        outputs = model(**inputs, output_hidden_states=hidden_states, return_dict=True)
        if pooler == "cls":
            return outputs.pooler_output
        return pool(pooler, features["attention_mask"], outputs.last_hidden_state, outputs.hidden_states)

    return embed


def _prompt_sentences(embedding: dict[str, Any], name: str, kind: str,
                      detail: str = "") -> Callable[[str], str] | None:
    """A PromptBERT ``sentence_embedding`` entry (``ContrastiveModel.export_config``; a checkpoint's or a plain
    export's ``config.json``): log how its embedding is made, and return the official evaluation's '.' rule when
    the entry asks for it (``None``: sentences as given)."""
    from data.prompt_templates import add_period

    period = bool(embedding.get("eval_add_period"))
    logger.info("%s: PromptBERT %s: the sentence inside the template %s%s, the [MASK] state, %s, %s", name, kind,
                embedding.get("template"), detail,
                "template denoising" if embedding.get("test_denoising") else "no template denoising",
                "'.' appended as the official evaluation does" if period else "sentences as given")
    return add_period if period else None


def _prompt_backend(model: torch.nn.Module, embedding: dict[str, Any], name: str) -> tuple[EmbedFn, Any]:
    """A plain export of PromptBERT (its ``config.json`` ``sentence_embedding`` entry, ``models/export.py``): the
    sentence inside the stored template, the [MASK] state (``models.promptbert.prompt_embedding``), and the
    official evaluation's '.' when the entry asks for it."""
    from models.promptbert import TemplateIds, prompt_embedding

    ids = embedding["prompt_token_ids"]
    template = TemplateIds.from_config(ids["templates"][0], int(ids["mask_token_id"]))
    preprocess = _prompt_sentences(embedding, name, "export", f" from its config.json (token ids "
                                   f"{list(template.prefix)} + sentence + {list(template.suffix)})")
    denoise = bool(embedding.get("test_denoising"))

    def embed(**features: torch.Tensor) -> torch.Tensor:
        return prompt_embedding(model, template, features["input_ids"], features["attention_mask"],
                                mask_token_id=int(ids["mask_token_id"]), pad_token_id=int(ids["pad_token_id"]),
                                denoise=denoise)

    return embed, preprocess


def _huggingface_backend(
    model_name_or_path: str, pooler: str | None, device: torch.device | None = None, subfolder: str = ""
) -> _Backend:
    loaded = load_backbone(model_name_or_path, subfolder)
    model = loaded.model
    problem = encoder_decoder_problem(model.config)
    if problem:
        raise ModelLoadingError(f"{model_name_or_path} ({type(model).__name__}) is {problem}")
    embedding = getattr(model.config, "sentence_embedding", None)
    if isinstance(embedding, dict) and embedding.get("pooling") == "mask_token":
        if pooler is None:
            embed, preprocess = _prompt_backend(model, embedding, model_name_or_path)
            return _Backend(model, embed, _load_tokenizer(model_name_or_path, subfolder), preprocess=preprocess,
                            embedding="the [MASK] state of its PromptBERT template")
        logger.warning("%s is a PromptBERT export (the [MASK] state in its template); --pooler %s ignores the "
                       "template", model_name_or_path, pooler)
    own = embedding.get("pooling") if isinstance(embedding, dict) else None
    if own in POOLER_TYPES and pooler in (None, own):
        pooler, source = own, f" (this repo's {embedding.get('method')} export: the run's test-time pooler)"
    elif own in POOLER_TYPES:
        source = f" (given; the run that exported it encodes with --pooler {own})"
    else:
        pooler, source = pooler or "cls", ""
    logger.info("%s: Hugging Face %s, pooler %s%s", model_name_or_path, type(model).__name__, pooler, source)
    tokenizer = _load_tokenizer(model_name_or_path, subfolder)
    embed = _transformer_embed_fn(model, tokenizer, pooler, model_name_or_path, loaded.pooler_missing)
    return _Backend(model, embed, tokenizer, backbone=model, embedding=f"pooler {pooler}")


def _st_transformer_subfolder(model_name_or_path: str) -> str:
    """The folder (relative, ``""`` = the root) of the ``Transformer`` module listed in ``modules.json``."""
    subfolder = transformer_module_path(_read_json(_fetch_file(model_name_or_path, "modules.json")))
    if subfolder is not None:
        return subfolder
    raise ModelLoadingError(
        f"{model_name_or_path}/modules.json lists no sentence_transformers Transformer module, so --pooler cannot "
        f"be applied to it; run without --pooler to use the folder's own pipeline"
    )


def _sentence_transformers_backend(model_name_or_path: str, pooler: str | None, device: torch.device) -> _Backend:
    if pooler is not None:
        subfolder = _st_transformer_subfolder(model_name_or_path)
        backend = _huggingface_backend(model_name_or_path, pooler, device, subfolder)
        st_config = _fetch_file(model_name_or_path, f"{subfolder}/sentence_bert_config.json" if subfolder
                                else "sentence_bert_config.json")
        backend.max_length = _read_json(st_config).get("max_seq_length")
        return backend

    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(model_name_or_path, device=str(device), trust_remote_code=False)
    pipeline = " -> ".join(type(module).__name__ for module in model)
    logger.info("%s: sentence-transformers folder, using the folder's own pooling (%s)", model_name_or_path, pipeline)
    prompt, prompt_length = default_prompt(model)
    if prompt:
        pipeline += f", its default prompt {prompt!r} before every sentence"
        logger.info("%s: its default prompt %r goes before every sentence, as its encode() puts it", model_name_or_path,
                    prompt)

    def embed(**features: torch.Tensor) -> torch.Tensor:
        inputs = dict(features) if prompt_length is None else {**features, "prompt_length": prompt_length}
        return model(inputs)["sentence_embedding"]

    return _Backend(model, embed, model.tokenizer, model.max_seq_length,
                    preprocess=(lambda sentence: prompt + sentence) if prompt else None,
                    embedding=f"the sentence-transformers folder's own pipeline ({pipeline})")


def default_prompt(model: Any) -> tuple[str, int | None]:
    """A sentence-transformers model's default prompt (``default_prompt_name`` in its
    ``config_sentence_transformers.json``; ``""``: none), which its ``encode()`` puts before every sentence (before,
    the SentEval suite called the pipeline on the bare sentences: a folder with a ``query: `` prompt scored otherwise
    than its own ``encode``), and the prompt's length in tokens without a closing special token, which a ``Pooling``
    with ``include_prompt=False`` leaves out of its mean (as ``encode`` measures it; ``None`` without a prompt)."""
    name = getattr(model, "default_prompt_name", None)
    prompt = (getattr(model, "prompts", None) or {}).get(name, "") if name else ""
    if not prompt:
        return "", None
    ids = model.tokenizer(prompt)["input_ids"]
    return prompt, len(ids) - (1 if ids and ids[-1] in model.tokenizer.all_special_ids else 0)


def _contrastive_backend(model_name_or_path: str, pooler: str | None, device: torch.device) -> _Backend:
    try:
        from trainers.methods import load_contrastive_model
    except ImportError as exc:
        raise ModelLoadingError(
            f"{model_name_or_path} is a cse_contrastive checkpoint but models.base cannot be imported: {exc}"
        ) from exc
    model = load_contrastive_model(model_name_or_path)  # the method's own class, from config.method
    embedding_name = f"pooler {pooler}" if pooler else f"{model.config.method}'s own test-time embedding"
    logger.info("%s: cse_contrastive checkpoint, %s", model_name_or_path, embedding_name)
    embedding = model.export_config().get("sentence_embedding")
    preprocess = None if embedding is None else _prompt_sentences(embedding, model_name_or_path, "checkpoint")

    def embed(**features: torch.Tensor) -> torch.Tensor:
        return model.embed(**features, pooler_type=pooler)

    return _Backend(model, embed, _load_tokenizer(model_name_or_path), preprocess=preprocess,
                    backbone=model.embedding_backbone(), embedding=embedding_name)


def transformer_of(module: torch.nn.Module) -> torch.nn.Module | None:
    """The transformers backbone that encodes the sentences inside a loaded ``module``: a contrastive checkpoint's
    encoder, a sentence-transformers pipeline's model, a plain model itself; ``None`` if there is none."""
    from transformers import PreTrainedModel

    from models.base import ContrastiveModel

    if isinstance(module, ContrastiveModel):
        return module.encoder
    return next((part for part in module.modules() if isinstance(part, PreTrainedModel)), None)


def check_max_length(module: torch.nn.Module, model_name_or_path: str, max_length: int | None) -> None:
    """Refuse a ``--max_length`` longer than the backbone's position table (:func:`eval.backbone.position_limit`):
    the first sentence that long stopped the evaluation with a tensor size error and a traceback."""
    encoder = transformer_of(module)
    limit = position_limit(encoder.config) if encoder is not None and max_length is not None else None
    if limit is not None and max_length > limit[0]:
        raise ModelLoadingError(f"--max_length {max_length} is more than {model_name_or_path} reads: {limit[0]} "
                                f"positions ({limit[1]}); a sentence that long would stop the evaluation with a "
                                f"tensor size error. Pass --max_length {limit[0]} or less")


def check_bf16_forward(module: torch.nn.Module, model_name_or_path: str) -> None:
    """Refuse ``--eval_dtype bf16`` for a backbone whose forward cannot run under bf16 autocast
    (:func:`eval.backbone.bf16_forward_problem`: transformers' DeBERTa v1), before any sentence is encoded, rather
    than with a traceback from its first batch."""
    encoder = transformer_of(module)
    problem = bf16_forward_problem(encoder) if encoder is not None else None
    if problem:
        raise ModelLoadingError(f"{model_name_or_path} ({type(encoder).__name__}) cannot run under bf16 autocast "
                                f"(--eval_dtype bf16): its forward stops with \"{problem}\". Pass --eval_dtype fp32 "
                                "(the default).")


# Each backend takes (model_name_or_path, pooler, device); load_encoder moves the module to the device and sets
# eval mode afterwards, so only sentence-transformers (which places its model itself) reads ``device``.
_BACKENDS = {
    "cse_contrastive": _contrastive_backend,
    "sentence_transformers": _sentence_transformers_backend,
    "huggingface": _huggingface_backend,
}


def load_encoder(
    model_name_or_path: str | os.PathLike[str],
    pooler: str | None = None,
    *,
    device: str | torch.device | None = None,
    batch_size: int = 128,
    max_tokens: int | None = None,
    max_length: int | None = None,
    eval_dtype: str = "fp32",
    packing: bool = True,
) -> SentenceEncoder:
    """Load a model (see the module docstring for the kinds) as an eval-mode :class:`SentenceEncoder`.

    Args:
        model_name_or_path: a local folder or a hub name.
        pooler: one of :data:`models.poolers.POOLER_TYPES`, or ``None`` for the model's default (the method's
            test-time embedding; a sentence-transformers folder's own pipeline; ``cls`` for a plain model).
        device: ``None`` = CUDA when available, else CPU.
        batch_size: sentences per forward pass.
        max_tokens: padded tokens per forward pass instead of ``batch_size`` sentences (:class:`SentenceEncoder`).
        max_length: truncation length; ``None`` = the sentence-transformers ``max_seq_length`` when there is one,
            else the tokenizer's ``model_max_length``.
        eval_dtype: ``fp32`` (default: autocast and TF32 off) or ``bf16`` autocast
            (:func:`eval.encoder.evaluation_precision`).
        packing: with ``max_tokens``, pack the sentences side by side in rows where the backbone allows
            (:mod:`eval.packing`); ``False``: padded passes.

    Raises:
        ModelLoadingError: the model cannot be loaded or has no layer for the requested pooler.
    """
    if pooler is not None and pooler not in POOLER_TYPES:
        raise ValueError(f"unknown pooler {pooler!r}; choose one of {', '.join(POOLER_TYPES)}")
    model_name_or_path = resolve_run_folder(str(model_name_or_path))
    device = resolve_device(device)
    with _loading_errors(model_name_or_path):
        kind = detect_model_kind(model_name_or_path)
        backend = _BACKENDS[kind](model_name_or_path, pooler, device)
    fixed_length = fixed_length_problem(backend.backbone.config) if backend.backbone is not None else None
    if fixed_length:
        problem, setting = fixed_length
        raise ModelLoadingError(f"{model_name_or_path} ({type(backend.backbone).__name__}) {problem}. Set {setting} "
                                f"in its config.json (run_unsup.py --config_overrides {setting} trains and exports "
                                f"it so).")
    problem = text_encoder_problem(backend.backbone) if backend.backbone is not None else None
    if problem:
        raise ModelLoadingError(f"{model_name_or_path} ({type(backend.backbone).__name__}) {problem}. "
                                f"{TEXT_ENCODER_ADVICE}")
    embeddings = backend.backbone.get_input_embeddings() if backend.backbone is not None else None
    unreadable = tokenizer_problem("--model_name_or_path", model_name_or_path, backend.tokenizer) or (
        vocabulary_problem("--model_name_or_path", model_name_or_path, backend.tokenizer,
                           None if embeddings is None else embeddings.weight.shape[0]))
    if unreadable:
        raise ModelLoadingError(unreadable)
    check_max_length(backend.module, model_name_or_path, max_length)
    backend.module.to(device).eval()
    if eval_dtype == "bf16":
        check_bf16_forward(backend.module, model_name_or_path)
    return SentenceEncoder(
        backend.embed_fn,
        backend.tokenizer,
        device=device,
        batch_size=batch_size,
        max_tokens=max_tokens,
        max_length=max_length if max_length is not None else backend.max_length,
        eval_dtype=eval_dtype,
        preprocess=backend.preprocess,
        backbone=backend.backbone,
        packing=packing,
        embedding=backend.embedding,
    )
