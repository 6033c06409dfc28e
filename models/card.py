"""The model card of an export: the Hub's YAML metadata, how to pool, the scores labelled with their split, the
method's hyperparameters, a training summary, and every training argument in a collapsed ``<details>`` section."""
from __future__ import annotations

import json
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

from .poolers import test_time_pooler

if TYPE_CHECKING:
    from .base import ContrastiveModel


def model_card(model: ContrastiveModel, *, scores: dict[str, Any] | None, training: dict[str, Any] | None,
               kind: str) -> str:
    """Markdown card: the Hub's YAML metadata, the pooling to use, the scores (labelled with their split), the
    method's hyperparameters, a training summary, and every training argument in a collapsed section."""
    config = model.config
    pooler = test_time_pooler(config)
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
        if (scores or {}).get("eval_dtype"):
            lines += ["", f"Evaluation precision: `eval_dtype: {scores['eval_dtype']}` (fp32 = autocast and TF32 "
                          "off, as the papers evaluated)."]
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
    sentence_transformers = kind == "sentence-transformers"
    lines = ["---", f"library_name: {'sentence-transformers' if sentence_transformers else 'transformers'}",
             f"pipeline_tag: {'sentence-similarity' if sentence_transformers else 'feature-extraction'}", "tags:"]
    tags = (["sentence-transformers"] if sentence_transformers else []) + [
        "sentence-similarity", "feature-extraction", "contrastive-learning", method.replace("_", "-"), "cse-repro"]
    lines += [f"- {tag}" for tag in tags]
    base = _argument(training, "model_name_or_path")
    if isinstance(base, str) and is_hub_name(base):
        lines.append(f"base_model: {base}")
    train_file = _argument(training, "train_file")
    dataset = HUB_DATASETS.get(PurePath(str(train_file)).name) if train_file else None
    if dataset:
        lines += ["datasets:", f"- {dataset}"]
    return "\n".join(lines + ["---", ""])


def is_hub_name(name: str) -> bool:
    """Whether ``name`` reads as a Hugging Face Hub model name (``bert-base-uncased``, ``org/model``) rather than a
    local path (an existing one, or one starting with ``.``, ``/`` or ``~``)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if name.startswith((".", "/", "~")) or Path(name).expanduser().exists():
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
    precision = "fp16" if _argument(training, "fp16") else "bf16 autocast" if _argument(training, "bf16") else "fp32"
    return [f"- backbone: `{values['model_name_or_path']}`; corpus: `{values['train_file']}`",
            f"- learning rate {values['learning_rate']}, batch {values['per_device_train_batch_size']} per process, "
            f"{length}, max length {values['max_seq_length']}, seed {values['seed']}",
            f"- training precision: {precision}"]


__all__ = ["HUB_DATASETS", "card_metadata", "is_hub_name", "model_card", "score_table", "training_summary"]
