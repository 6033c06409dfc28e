"""Export a trained model as (1) a plain ``AutoModel`` folder and (2) a sentence-transformers folder, each with a
model card stating the pooling, so nobody evaluates an unsupervised checkpoint with the wrong pooler (REFERENCE.md:
users got ~57 instead of ~76 that way).

Plain folder: the backbone's weights. Where the architecture has a BERT-style pooler slot (Linear h->h + tanh),
the trained MLP projector is written there, so ``pooler_output`` is "[CLS] + MLP" and
``last_hidden_state[:, 0]`` is "[CLS] before the MLP"; the card says which one the method uses at test time.
Sentence-transformers folder: Transformer + Pooling (+ Dense/Tanh when the method keeps the MLP at test time);
none for a method whose embedding no sentence-transformers module computes without remote code (PromptBERT's [MASK]
state inside a template: its ``config.json`` and card state the template instead, ``model.export_config()``).
Everything auxiliary (momentum encoder, DiffCSE generator/discriminator, heads) is dropped.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from torch import nn
from transformers import AutoModel, PreTrainedTokenizerBase

from .base import ContrastiveModel, has_linear_tanh_pooler, pooler_dense
from .card import model_card
from .heads import MLPProjector
from .poolers import test_time_pooler

logger = logging.getLogger(__name__)

# Our pooler -> sentence-transformers Pooling mode (avg_first_last / avg_top2 have no ST equivalent).
ST_POOLING = {"cls": "cls", "cls_before_pooler": "cls", "avg": "mean"}


def plain_export_config(model: ContrastiveModel) -> dict[str, Any]:
    """The entries the plain folder's ``config.json`` adds (:meth:`ContrastiveModel.export_config`), its
    ``sentence_embedding`` entry always naming the method and the test-time pooler (``pooling``) that encode as the
    run's own embedding, so ``python -m eval`` on the folder, without ``--pooler``, scores what the run scored
    (for a plain model it reads ``pooler_output``: [CLS] + the MLP where the method drops it at test time)."""
    entries = dict(model.export_config())
    entries["sentence_embedding"] = {"method": model.config.method, "pooling": test_time_pooler(model.config),
                                     **entries.get("sentence_embedding", {})}
    return entries


def export_plain(model: ContrastiveModel, tokenizer: PreTrainedTokenizerBase, out_dir: str | Path) -> Path:
    """Write the backbone (+ MLP in the pooler slot where one exists) as a plain ``AutoModel`` folder."""
    out_dir = Path(out_dir)
    plain = AutoModel.from_config(model.config.encoder_config)
    missing, unexpected = plain.load_state_dict(model.encoder.state_dict(), strict=False)
    if unexpected or any(not key.startswith("pooler.") for key in missing):
        raise RuntimeError(f"export: backbone weights do not match a fresh {type(plain).__name__}: "
                           f"missing={missing} unexpected={unexpected}")
    if isinstance(model.projector, MLPProjector):
        if has_linear_tanh_pooler(plain):
            pooler_dense(plain).load_state_dict(model.projector[0].state_dict())
        elif test_time_pooler(model.config) == "cls":
            logger.warning("export: %s has no pooler layer to hold the trained MLP, so %s gives [CLS] without it; "
                           "the method's embedding ([CLS] + MLP) is the sentence-transformers folder's (its card "
                           "says so)", type(plain).__name__, out_dir)
    for key, value in plain_export_config(model).items():
        setattr(plain.config, key, value)
    plain.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def export_sentence_transformers(
    model: ContrastiveModel, tokenizer: PreTrainedTokenizerBase, plain_dir: str | Path, out_dir: str | Path
) -> Path | None:
    """Write a sentence-transformers folder reproducing the test-time embedding; ``None`` (with a log line)
    when the pooler has no sentence-transformers equivalent, or when sentence-transformers cannot load the plain
    export (MarkupLM: its Transformer module loads the model type's processor, whose feature extractor a text
    export has no file for; the run stopped with a traceback after training)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers import models as st_models

    if not model.sentence_transformers_export:
        logger.warning("no sentence-transformers export: %s's embedding has no sentence-transformers equivalent "
                       "without remote code (the hf/ card says how to encode)", model.config.method)
        return None
    pooler = test_time_pooler(model.config)
    if pooler not in ST_POOLING:
        logger.warning("no sentence-transformers export: pooler %r has no sentence-transformers Pooling mode", pooler)
        return None
    try:
        transformer = st_models.Transformer(str(plain_dir), max_seq_length=tokenizer.model_max_length
                                            if tokenizer.model_max_length < 10_000 else 512)
    except (OSError, ValueError) as error:  # its processor for the model type needs files a text export lacks
        logger.warning("no sentence-transformers export: sentence-transformers cannot load %s (%s); the hf/ folder "
                       "holds the model", plain_dir, (str(error).strip().splitlines() or [type(error).__name__])[0])
        return None
    dim = model.config.hidden_size
    modules: list[nn.Module] = [transformer, st_models.Pooling(dim, pooling_mode=ST_POOLING[pooler])]
    if pooler == "cls" and isinstance(model.projector, MLPProjector):
        dense = st_models.Dense(dim, dim, bias=True, activation_function=nn.Tanh())
        dense.linear.load_state_dict(model.projector[0].state_dict())
        modules.append(dense)
    SentenceTransformer(modules=modules, device="cpu").save(str(out_dir))
    return Path(out_dir)


def run_name(out_dir: Path) -> str:
    """The run's name for the card's ``model-index``: the export folder's name, or its run folder's name when the
    folder is the default ``<output_dir>/export``."""
    folder = out_dir.resolve()
    return folder.parent.name if folder.name == "export" else folder.name


def export_model(
    model: ContrastiveModel,
    tokenizer: PreTrainedTokenizerBase,
    out_dir: str | Path,
    *,
    scores: dict[str, Any] | None = None,
    training: dict[str, Any] | None = None,
    log_history: Sequence[Mapping[str, Any]] | None = None,
    backbone_license: tuple[str | None, str | None] | None = None,
) -> dict[str, Path | None]:
    """Write ``out_dir/hf`` (plain AutoModel) and ``out_dir/sentence-transformers``, each with a README card
    (:func:`models.card.model_card`; ``log_history``: the Trainer's, for the card's training log;
    ``backbone_license``: ``(license, source)`` read from the backbone's card)."""
    out_dir = Path(out_dir)
    card = {"scores": scores, "training": training, "log_history": log_history, "backbone_license": backbone_license,
            "model_name": f"{model.config.method.replace('_', '-')}-{run_name(out_dir)}"}
    was_training = model.training
    model.eval()
    with torch.no_grad():
        plain = export_plain(model, tokenizer, out_dir / "hf")
        (plain / "README.md").write_text(model_card(model, kind="plain", **card))
        st_dir = export_sentence_transformers(model, tokenizer, plain, out_dir / "sentence-transformers")
        if st_dir is not None:
            (st_dir / "README.md").write_text(model_card(model, kind="sentence-transformers", **card))
    model.train(was_training)
    pooling = model.export_config().get("sentence_embedding", {}).get("pooling") or test_time_pooler(model.config)
    logger.info("exported %s (pooler %s) and %s", plain, pooling, st_dir)
    return {"hf": plain, "sentence-transformers": st_dir}
