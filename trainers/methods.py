"""The method registry (one table) and the one model builder, used by the training scripts, the benchmark and the
tests.

:data:`METHODS` lists every method once: its model class (``models/``), the factory of the collator that makes its
views (``data/``), the script that trains it and, where it has one, the loader of its extra pretrained networks.
This is where files are read: ``models/`` takes loaded networks and tokenizers and never opens a file, and ``data/``
never imports ``models/``.

Settings resolve in one place and order (:func:`resolve_settings`): the declaration's defaults (``models.config``) <
the method's own defaults (``method_defaults`` of its class) < the ``--fidelity`` preset (``models.presets``) < the
cached step's default (row-seeded masks with ``--cache_chunk_size``) < explicit values. With row-seeded masks the
builder installs the training step's keyed draws (``trainers.keyed_dropout``): the model never imports them.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from transformers import AutoConfig, AutoModelForMaskedLM, AutoTokenizer, PreTrainedModel

from data.augment import LengthExtender, MaskedLMFiller
from data.collators import ContrastiveCollator
from data.diffcse_collator import DiffCSECollator
from data.prompt_templates import PromptCollator, template_token_ids, tokenize_template
from data.word_boundaries import WordBoundaryError
from eval.backbone import backbone_config, first_keys, load_auto_model, tokenizer_problem
from models.base import ContrastiveModel
from models.config import DIFFCSE, SETTINGS, UNSUP, ContrastiveConfig, check_settings
from models.diffcse import DiffCSEModel, check_generator_vocabulary
from models.esimcse import ESimCSEModel
from models.presets import fidelity_overrides
from models.promptbert import PromptBERTModel
from models.s_simcse import SSimCSEModel
from models.simcse import SimCSEModel, SupervisedSimCSEModel
from models.simcse_pp import SimCSEPlusPlusModel

from .errors import UsageError, UserError
from .keyed_dropout import install_keyed_draws

logger = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------------ collators
def contrastive_collator(model: ContrastiveModel, tokenizer, max_length: int) -> ContrastiveCollator:
    """Every view is the sentence itself (dropout makes them differ), or the supervised triple's columns."""
    return ContrastiveCollator(tokenizer, max_length=max_length, view_columns=model.view_columns)


def esimcse_collator(model: ContrastiveModel, tokenizer, max_length: int) -> ContrastiveCollator:
    """ESimCSE: view 0 the sentence, view 1 the sentence lengthened (word repetition, or a Table 5 insertion)."""
    config = model.config
    extender = None
    if config.length_extension != "none":
        filler = None
        if config.length_extension == "mlm_prediction":
            filler = MaskedLMFiller(load_masked_lm("--insert_mlm_name_or_path", config.insert_mlm_name_or_path),
                                    tokenizer)
        try:
            extender = LengthExtender(
                tokenizer, max_length if config.truncate_positive else None, dup_rate=config.dup_rate,
                dup_type=config.dup_type, rule=config.dup_length_rule, mode=config.length_extension,
                resample=config.resample_repetition, filler=filler)
        except WordBoundaryError as exc:
            raise UsageError(f"--dup_type word with the tokenizer of {tokenizer.name_or_path}: {exc}. Repeat "
                             "sub-words instead (--dup_type subword, the paper's default)") from None
        if extender.boundaries is not None:
            logger.info("--dup_type word: %s's words as its vocabulary marks them (%s)",
                        type(tokenizer).__name__, extender.boundaries.marks.describe())
    return ContrastiveCollator(tokenizer, max_length=max_length, view_columns=model.view_columns,
                               view_augmenters=(None, extender))


def diffcse_collator(model: ContrastiveModel, tokenizer, max_length: int) -> DiffCSECollator:
    """DiffCSE: SimCSE's two views plus the positions to edit (masking ratio, edit kind, mask style)."""
    config = model.config
    return DiffCSECollator(tokenizer, max_length=max_length, view_columns=model.view_columns,
                           masking_ratio=config.masking_ratio, edit=config.rtd_edit, mask_style=config.mask_style,
                           rtd_views=model.rtd_views, source=config.rtd_source, seed=torch.initial_seed())


def promptbert_collator(model: ContrastiveModel, tokenizer, max_length: int) -> PromptCollator:
    """PromptBERT: view 0 the sentence in ``prompt_template``, view 1 in ``prompt_template_positive``."""
    config = model.config
    templates = [tokenize_template(t, tokenizer) for t in (config.prompt_template, config.prompt_template_positive)]
    return PromptCollator(tokenizer, templates, max_length=max_length)


def promptbert_token_ids(settings: dict[str, Any], tokenizer) -> dict[str, Any]:
    """PromptBERT: its templates' token ids (``prompt_token_ids``), made with the backbone's tokenizer."""
    return {"prompt_token_ids": template_token_ids(
        [settings.get("prompt_template", SETTINGS["prompt_template"].default),
         settings.get("prompt_template_positive", SETTINGS["prompt_template_positive"].default)], tokenizer)}


# ------------------------------------------------------------------------------------------------ extra networks
def load_diffcse_generator(model_name_or_path: str, settings: dict[str, Any], *, tokenizer=None,
                           cache_dir: str | None = None) -> dict[str, PreTrainedModel]:
    """DiffCSE's frozen generator ``generator_name``. The vocabularies are checked *before* the large model loads."""
    generator_name = settings.get("generator_name")
    if not generator_name:
        raise ValueError("DiffCSE needs a generator: pass generator_name (a masked-LM name or folder)")
    tokenizer = tokenizer or AutoTokenizer.from_pretrained(model_name_or_path, cache_dir=cache_dir)
    generator_tokenizer = AutoTokenizer.from_pretrained(generator_name, cache_dir=cache_dir)
    unreadable = tokenizer_problem("--generator_name", generator_name, generator_tokenizer)
    if unreadable:
        raise UserError(unreadable)
    check_generator_vocabulary(tokenizer, generator_tokenizer,
                               backbone_config(model_name_or_path, cache_dir=cache_dir),
                               AutoConfig.from_pretrained(generator_name, cache_dir=cache_dir))
    return {"generator": load_masked_lm("--generator_name", generator_name, cache_dir=cache_dir)}


def load_masked_lm(flag: str, name: str, *, cache_dir: str | None = None) -> PreTrainedModel:
    """The masked LM ``name`` (``AutoModelForMaskedLM``: DiffCSE's generator, ESimCSE's insertion filler), refused
    when its checkpoint lacks part of the masked-LM head: transformers initialises the missing tensors at random,
    prints a load report and goes on, and a random head's predictions are noise, so a plain encoder
    (``bert-base-uncased``'s ``BertModel`` saved alone, a contrastive export) would train with a random generator."""
    model, loading = AutoModelForMaskedLM.from_pretrained(name, cache_dir=cache_dir, output_loading_info=True)
    missing = sorted(loading.get("missing_keys") or ())
    if missing:
        raise UserError(
            f"{flag} {name}: not a trained masked LM: its checkpoint lacks {len(missing)} tensor(s) of "
            f"{type(model).__name__} ({first_keys(missing)}), which would be "
            "initialised at random, so its predictions would be noise. Pass a masked-LM checkpoint with the "
            "encoder's vocabulary, e.g. distilbert-base-uncased for bert-base-uncased")
    return model


# ------------------------------------------------------------------------------------------------ the table
@dataclass(frozen=True)
class Method:
    """One method: its model class, its collator factory, the script that trains it, a loader of pretrained
    networks it needs besides the encoder (``None``: none), and settings it derives from the backbone's tokenizer
    (``derive_settings(settings, tokenizer)``: PromptBERT's template token ids; ``None``: none)."""

    model_class: type[ContrastiveModel]
    make_collator: Callable[[ContrastiveModel, Any, int], Any]
    script: str
    load_networks: Callable[..., dict[str, PreTrainedModel]] | None = None
    derive_settings: Callable[..., dict[str, Any]] | None = None


METHODS: dict[str, Method] = {
    "simcse": Method(SimCSEModel, contrastive_collator, UNSUP),
    "sup_simcse": Method(SupervisedSimCSEModel, contrastive_collator, UNSUP),
    "esimcse": Method(ESimCSEModel, esimcse_collator, UNSUP),
    "simcse_pp": Method(SimCSEPlusPlusModel, contrastive_collator, UNSUP),
    "s_simcse": Method(SSimCSEModel, contrastive_collator, UNSUP),
    "diffcse": Method(DiffCSEModel, diffcse_collator, DIFFCSE, load_networks=load_diffcse_generator),
    "promptbert": Method(PromptBERTModel, promptbert_collator, UNSUP, derive_settings=promptbert_token_ids),
}


def method_spec(method: str) -> Method:
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; available: {', '.join(METHODS)}")
    return METHODS[method]


def resolve_settings(method: str, explicit: dict[str, Any], *, cache_chunk_size: int | None = None) -> dict[str, Any]:
    """The method's settings: its class's ``method_defaults``, the ``fidelity`` preset, the cached step's default
    (:func:`cached_step_defaults`), then ``explicit`` (``None`` values count as not given). Every name is checked
    against the declaration (``models.config``)."""
    explicit = {name: value for name, value in explicit.items() if value is not None}
    settings = {**method_spec(method).model_class.method_defaults, **fidelity_overrides(explicit.get("fidelity")),
                **cached_step_defaults(explicit, cache_chunk_size), **explicit, "method": method}
    check_settings(settings)
    return settings


def cached_step_defaults(explicit: dict[str, Any], cache_chunk_size: int | None) -> dict[str, Any]:
    """With ``--cache_chunk_size`` and no explicit ``--dropout_masks``, row-seeded masks (so the cached step equals
    the uncached step run with ``--dropout_masks row_seeded``, for any chunk size). An explicit ``--dropout_masks
    stream`` is kept, with a warning: each chunk then draws its own masks."""
    if not cache_chunk_size:
        return {}
    if "dropout_masks" not in explicit:
        logger.info("--cache_chunk_size %d: dropout masks are row-seeded (--dropout_masks row_seeded), so this run "
                    "trains exactly what the uncached step with --dropout_masks row_seeded trains", cache_chunk_size)
        return {"dropout_masks": "row_seeded"}
    if explicit["dropout_masks"] == "stream":
        logger.warning("--cache_chunk_size %d with --dropout_masks stream: each chunk draws its own dropout masks, "
                       "so with more than one chunk per batch the step is exact for those masks but is not the "
                       "uncached step (docs/cached_training.md)", cache_chunk_size)
    return {}


def load_backbone_tokenizer(model_name_or_path: str, cache_dir: str | None = None):
    """The backbone's tokenizer (for the settings a method derives from it)."""
    return AutoTokenizer.from_pretrained(model_name_or_path, cache_dir=cache_dir)


def build_model(method: str, model_name_or_path: str | Path, *, attn_implementation: str | None = "sdpa",
                cache_dir: str | None = None, tokenizer=None, cache_chunk_size: int | None = None,
                config_overrides: dict[str, Any] | None = None, **settings: Any) -> ContrastiveModel:
    """THE model builder of the scripts and tests: load the pretrained backbone ``model_name_or_path`` (a name or
    folder; ``config_overrides``: settings of its config changed before it is built) and the method's extra
    networks, then :func:`assemble_model`."""
    spec = method_spec(method)
    networks = {}
    if spec.derive_settings is not None:
        tokenizer = tokenizer or load_backbone_tokenizer(str(model_name_or_path), cache_dir=cache_dir)
    if spec.load_networks is not None:
        networks = spec.load_networks(str(model_name_or_path), resolve_settings(method, settings),
                                      tokenizer=tokenizer, cache_dir=cache_dir)
    encoder = load_auto_model(str(model_name_or_path), attn_implementation=attn_implementation, cache_dir=cache_dir,
                              config_overrides=config_overrides)
    return assemble_model(method, encoder, **networks, tokenizer=tokenizer, cache_chunk_size=cache_chunk_size,
                          **settings)


def assemble_model(method: str, encoder: PreTrainedModel, *, generator: PreTrainedModel | None = None,
                   tokenizer=None, cache_chunk_size: int | None = None, **settings: Any) -> ContrastiveModel:
    """The builder's core, reading no file (the benchmark assembles random networks with it): ``method`` around
    ``encoder`` (+ DiffCSE's ``generator``), ``settings`` resolved by :func:`resolve_settings`, plus those the method
    derives from ``tokenizer`` (PromptBERT's template ids). Auxiliary networks are synchronised *after* the
    pretrained weights are in place (the ESimCSE code built its momentum encoder before loading, so it started from
    random weights; DiffCSE's discriminator starts as the loaded encoder)."""
    spec = method_spec(method)
    if spec.derive_settings is not None and tokenizer is not None:
        settings = {**spec.derive_settings(resolve_settings(method, settings), tokenizer), **settings}
    settings = resolve_settings(method, settings, cache_chunk_size=cache_chunk_size)
    networks: dict[str, Any] = {}
    if generator is not None:
        networks["generator"] = generator
        settings["generator_config"] = generator.config.to_dict()
    config = ContrastiveConfig(encoder_config=encoder.config.to_dict(), **settings)
    model = spec.model_class(config, encoder=encoder, **networks)
    model.sync_auxiliary_networks()
    install_keyed_draws(model)
    return model


def build_collator(model: ContrastiveModel, tokenizer, max_length: int):
    """The collator that makes ``model``'s views from raw rows."""
    return method_spec(model.config.method).make_collator(model, tokenizer, max_length)


def load_contrastive_model(path: str | Path) -> ContrastiveModel:
    """Load a checkpoint written by this repo (``config.json`` with ``model_type: cse_contrastive``) as the class
    it was trained with."""
    config = ContrastiveConfig.from_pretrained(path)
    model = method_spec(config.method).model_class.from_pretrained(path, config=config)
    install_keyed_draws(model)
    return model


__all__ = ["METHODS", "Method", "assemble_model", "build_collator", "build_model", "cached_step_defaults",
           "load_contrastive_model", "load_masked_lm", "method_spec", "resolve_settings"]
