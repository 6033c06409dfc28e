"""Export a trained model as (1) a plain ``AutoModel`` folder and (2) a sentence-transformers folder, each with a
model card stating the pooling, so nobody evaluates an unsupervised checkpoint with the wrong pooler (REFERENCE.md:
users got ~57 instead of ~76 that way).

Plain folder: the backbone's weights. Where the architecture has a BERT-style pooler slot (Linear h->h + tanh),
the trained MLP projector is written there, so ``pooler_output`` is "[CLS] + MLP" and
``last_hidden_state[:, 0]`` is "[CLS] before the MLP"; the card says which one the method uses at test time.
Sentence-transformers folder: Transformer + Pooling (+ Dense/Tanh when the method keeps the MLP at test time).
Everything auxiliary (momentum encoder, DiffCSE generator/discriminator, heads) is dropped.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import AutoModel, PreTrainedTokenizerBase

from .base import ContrastiveModel, has_linear_tanh_pooler
from .heads import MLPProjector

logger = logging.getLogger(__name__)

# Our pooler -> sentence-transformers Pooling mode (avg_first_last / avg_top2 have no ST equivalent).
ST_POOLING = {"cls": "cls", "cls_before_pooler": "cls", "avg": "mean"}


def test_time_pooler(model: ContrastiveModel) -> str:
    """The ``--pooler`` value that reproduces the model's test-time embedding from the plain export."""
    config = model.config
    if config.pooler_type == "cls":
        return "cls" if config.projects_at_test else "cls_before_pooler"
    return config.pooler_type


def export_plain(model: ContrastiveModel, tokenizer: PreTrainedTokenizerBase, out_dir: str | Path) -> Path:
    """Write the backbone (+ MLP in the pooler slot where one exists) as a plain ``AutoModel`` folder."""
    out_dir = Path(out_dir)
    plain = AutoModel.from_config(model.config.encoder_config)
    missing, unexpected = plain.load_state_dict(model.encoder.state_dict(), strict=False)
    if unexpected or any(not key.startswith("pooler.") for key in missing):
        raise RuntimeError(f"export: backbone weights do not match a fresh {type(plain).__name__}: "
                           f"missing={missing} unexpected={unexpected}")
    if has_linear_tanh_pooler(plain) and isinstance(model.projector, MLPProjector):
        plain.pooler.dense.load_state_dict(model.projector[0].state_dict())
    plain.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def export_sentence_transformers(
    model: ContrastiveModel, tokenizer: PreTrainedTokenizerBase, plain_dir: str | Path, out_dir: str | Path
) -> Path | None:
    """Write a sentence-transformers folder reproducing the test-time embedding; ``None`` (with a log line)
    when the pooler has no sentence-transformers equivalent."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers import models as st_models

    pooler = test_time_pooler(model)
    if pooler not in ST_POOLING:
        logger.warning("no sentence-transformers export: pooler %r has no sentence-transformers Pooling mode", pooler)
        return None
    transformer = st_models.Transformer(str(plain_dir), max_seq_length=tokenizer.model_max_length
                                        if tokenizer.model_max_length < 10_000 else 512)
    dim = model.config.hidden_size
    modules: list[nn.Module] = [transformer, st_models.Pooling(dim, pooling_mode=ST_POOLING[pooler])]
    if pooler == "cls" and isinstance(model.projector, MLPProjector):
        dense = st_models.Dense(dim, dim, bias=True, activation_function=nn.Tanh())
        dense.linear.load_state_dict(model.projector[0].state_dict())
        modules.append(dense)
    SentenceTransformer(modules=modules, device="cpu").save(str(out_dir))
    return Path(out_dir)


def model_card(model: ContrastiveModel, *, scores: dict[str, Any] | None, training: dict[str, Any] | None,
               kind: str) -> str:
    """Markdown card: the Hub's YAML metadata, the pooling to use, the scores (labelled with their split), the
    method's hyperparameters, a training summary, and every training argument in a collapsed section."""
    config = model.config
    pooler = test_time_pooler(model)
    usage = {
        "plain": (f"Load with `AutoModel.from_pretrained(path)` and pool with **`{pooler}`**: "
                  + ("`outputs.pooler_output` ([CLS] + the trained MLP)." if pooler == "cls" else
                     "`outputs.last_hidden_state[:, 0]` ([CLS] without the MLP; do NOT use `pooler_output`)."
                     if pooler == "cls_before_pooler" else "see `models/poolers.py`.")
                  + f"\nEvaluate: `python -m eval --model_name_or_path PATH --pooler {pooler} --mode test`"),
        "sentence-transformers": "Load with `SentenceTransformer(path)`; the folder's modules apply the right "
                                 "pooling (and the MLP where the method keeps it).",
    }[kind]
    hyper = {k: getattr(config, k) for k in (
        "method", "pooler_type", "mlp_only_train", "projector", "temperature", "hard_negative_weight")}
    # + the method's own settings, and every other method field set away from its default (e.g. SimCSE++ parts)
    for name in type(config).__annotations__:
        if name != "encoder_config" and name not in hyper and hasattr(config, name) and (
                name in type(model).method_defaults or getattr(config, name) != getattr(type(config), name, None)):
            hyper[name] = getattr(config, name)
    lines = [card_metadata(config.method, training, kind), f"# cse-repro export: {config.method}", "",
             f"- test-time pooler: `{pooler}`", "", usage]
    table = score_table(scores or {})
    if table:
        lines += ["", "## Scores (STS: Spearman x 100)", "", *table]
    lines += ["", "## Method hyperparameters", "```json", json.dumps(hyper, indent=2), "```"]
    if training:
        lines += ["", "## Training", "", *training_summary(training), "", "<details>",
                  "<summary>Every training argument (run_arguments.json)</summary>", "", "```json",
                  json.dumps(training, indent=2, default=str), "```", "", "</details>"]
    return "\n".join(lines) + "\n"


#: Training files of the SimCSE papers -> their Hugging Face dataset (data/download_wiki1m.sh, download_nli.sh).
HUB_DATASETS = {"wiki1m_for_simcse.txt": "princeton-nlp/datasets-for-simcse",
                "nli_for_simcse.csv": "princeton-nlp/datasets-for-simcse"}


def _argument(training: dict[str, Any] | None, name: str) -> Any:
    """One argument from ``run_arguments``'s nested dict (``{"ModelArguments": {...}, ...}``)."""
    for group in (training or {}).values():
        if isinstance(group, dict) and name in group:
            return group[name]
    return None


def card_metadata(method: str, training: dict[str, Any] | None, kind: str) -> str:
    """The YAML front matter the Hub reads: library, pipeline tag, tags, base model and datasets where known (a
    local backbone folder or corpus file has no Hub name, so it is left out)."""
    from pathlib import PurePath

    sentence_transformers = kind == "sentence-transformers"
    lines = ["---", f"library_name: {'sentence-transformers' if sentence_transformers else 'transformers'}",
             f"pipeline_tag: {'sentence-similarity' if sentence_transformers else 'feature-extraction'}", "tags:"]
    tags = (["sentence-transformers"] if sentence_transformers else []) + [
        "sentence-similarity", "feature-extraction", "contrastive-learning", method.replace("_", "-"), "cse-repro"]
    lines += [f"- {tag}" for tag in tags]
    base = _argument(training, "model_name_or_path")
    if isinstance(base, str) and _is_hub_name(base):
        lines.append(f"base_model: {base}")
    train_file = _argument(training, "train_file")
    dataset = HUB_DATASETS.get(PurePath(str(train_file)).name) if train_file else None
    if dataset:
        lines += ["datasets:", f"- {dataset}"]
    return "\n".join(lines + ["---", ""])


def _is_hub_name(name: str) -> bool:
    from pathlib import Path

    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if name.startswith((".", "/", "~")) or Path(name).exists():
        return False
    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


SCORE_NAMES = {"stsb_spearman": "STS-B", "sickr_spearman": "SICK-R", "avg_sts": "mean of STS-B and SICK-R"}
SCORE_STAGES = {"before": ("the backbone, before training", "dev"), "eval": ("this model", "dev"),
                "test": ("this model", "test")}
NOT_SCORES = ("_runtime", "_samples_per_second", "_steps_per_second", "epoch")


def score_table(scores: dict[str, Any]) -> list[str]:
    """Markdown rows ``| task | split | model | score |`` of the ``before_*`` / ``eval_*`` (dev) and ``test_*``
    scores; timings and training statistics are left out."""
    rows = []
    for key, value in scores.items():
        stage, _, name = key.partition("_")
        if stage not in SCORE_STAGES or key.endswith(NOT_SCORES) or not isinstance(value, (int, float)):
            continue
        model_label, split = SCORE_STAGES[stage]
        rows.append(f"| {SCORE_NAMES.get(name, name)} | {split} | {model_label} | {value:.2f} |")
    if not rows:
        return []
    return ["| task | split | model | score |", "|---|---|---|---|", *rows]


def training_summary(training: dict[str, Any]) -> list[str]:
    """A few bullet points: the backbone, corpus and recipe values a reader compares first."""
    values = {name: _argument(training, name) for name in (
        "model_name_or_path", "train_file", "learning_rate", "per_device_train_batch_size", "num_train_epochs",
        "max_steps", "max_seq_length", "seed")}
    steps = values["max_steps"]
    length = f"{steps} steps" if isinstance(steps, int) and steps > 0 else f"{values['num_train_epochs']} epoch(s)"
    return [f"- backbone: `{values['model_name_or_path']}`; corpus: `{values['train_file']}`",
            f"- learning rate {values['learning_rate']}, batch {values['per_device_train_batch_size']} per process, "
            f"{length}, max length {values['max_seq_length']}, seed {values['seed']}"]


def export_model(
    model: ContrastiveModel,
    tokenizer: PreTrainedTokenizerBase,
    out_dir: str | Path,
    *,
    scores: dict[str, Any] | None = None,
    training: dict[str, Any] | None = None,
) -> dict[str, Path | None]:
    """Write ``out_dir/hf`` (plain AutoModel) and ``out_dir/sentence-transformers``, each with a README card."""
    out_dir = Path(out_dir)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        plain = export_plain(model, tokenizer, out_dir / "hf")
        (plain / "README.md").write_text(model_card(model, scores=scores, training=training, kind="plain"))
        st_dir = export_sentence_transformers(model, tokenizer, plain, out_dir / "sentence-transformers")
        if st_dir is not None:
            (st_dir / "README.md").write_text(
                model_card(model, scores=scores, training=training, kind="sentence-transformers"))
    model.train(was_training)
    logger.info("exported %s (pooler %s) and %s", plain, test_time_pooler(model), st_dir)
    return {"hf": plain, "sentence-transformers": st_dir}
