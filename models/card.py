"""The model card of an export: the Hub's YAML metadata (:mod:`models.card_metadata`), how to pool, the base model,
corpus and license, the scores labelled with their split, the training log, the method's hyperparameters, the
framework versions, the citations (:mod:`models.citations`) and every training argument in a collapsed
``<details>`` section. The layout follows sentence-transformers' generated cards (training logs, framework
versions, citing)."""
from __future__ import annotations

import json
import platform
from importlib import metadata
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from .card_metadata import HUB_DATASETS, Provenance, card_metadata, is_hub_name, provenance, run_argument
from .citations import citations
from .distributed import processes_phrase

from .poolers import test_time_pooler

if TYPE_CHECKING:
    from .base import ContrastiveModel


def model_card(model: ContrastiveModel, *, scores: dict[str, Any] | None, training: dict[str, Any] | None,
               kind: str, log_history: Sequence[Mapping[str, Any]] | None = None,
               model_name: str | None = None, backbone_license: tuple[str | None, str | None] | None = None) -> str:
    """Markdown card: the Hub's YAML metadata, the pooling to use, provenance, the scores (labelled with their
    split), the training log, the method's hyperparameters, framework versions, citations, and every training
    argument in a collapsed section. ``log_history``: the Trainer's ``state.log_history``; ``model_name``: the
    ``model-index`` name (default ``<method>-<backbone>``); ``backbone_license``: ``(license, where it was read)``
    from the backbone's own card (``trainers/backbone_card.py``)."""
    config = model.config
    pooler = test_time_pooler(config)
    embedding = model.export_config().get("sentence_embedding")
    if embedding is not None:
        pooler = embedding["pooling"]
    usage = prompt_usage(embedding) if embedding is not None and kind == "plain" else {
        "plain": mlp_outside_usage(config) if kind == "plain" and pooler == "cls" and plain_folder_lacks_mlp(model) else
                 (f"Load with `AutoModel.from_pretrained(path)` and pool with **`{pooler}`**: "
                  + ("`outputs.pooler_output` ([CLS] + the trained MLP)." if pooler == "cls" else
                     "`outputs.last_hidden_state[:, 0]` ([CLS] without the MLP; do NOT use `pooler_output`)."
                     if pooler == "cls_before_pooler" else "see `models/poolers.py`.")
                  + f"\nEvaluate: `python -m eval --model_name_or_path PATH --pooler {pooler} --mode test`"),
        "sentence-transformers": "Load with `SentenceTransformer(path)`; the folder's modules apply the right "
                                 "pooling (and the MLP where the method keeps it).",
    }[kind]
    hyper = {k: getattr(config, k) for k in (
        "method", "pooler_type", "mlp_only_train", "projector", "temperature", "hard_negative_weight")}
    if model.view_columns != type(model).view_columns:  # the corpus lacked an optional view (no hard negatives)
        hyper["view_columns"] = list(model.view_columns)
    # + the method's own settings, and every other method field set away from its default (e.g. SimCSE++ parts)
    for name in type(config).__annotations__:
        if name != "encoder_config" and name not in hyper and hasattr(config, name) and (
                name in type(model).method_defaults or getattr(config, name) != getattr(type(config), name, None)):
            hyper[name] = getattr(config, name)
    facts = provenance(training, backbone_license)
    lines = [card_metadata(config.method, training, kind, scores, model_name, backbone_license),
             f"# cse-repro export: {config.method}", "", f"- test-time pooler: `{pooler}`", *provenance_lines(facts),
             "", usage]
    table = score_table(scores or {})
    if table:
        lines += ["", "## Scores (STS: Spearman x 100)", "", *table]
        if (scores or {}).get("eval_dtype"):
            lines += ["", f"Evaluation precision: `eval_dtype: {scores['eval_dtype']}` (fp32 = autocast and TF32 "
                          "off, as the papers evaluated)."]
        lines += ["", "The YAML `model-index` carries this model's STS-B dev score (split `validation`) and any test "
                      "score, one entry per dataset and split; the backbone's scores, SICK-R dev and the averages "
                      "stay in this table."]
    log = training_log_table(log_history or (), best_step((scores or {}).get("best_model_checkpoint")))
    if log:
        lines += ["", "## Training log", "", *log]
    lines += ["", "## Method hyperparameters", "```json", json.dumps(hyper, indent=2), "```"]
    if training:
        lines += ["", "## Training", "", *training_summary(training)]
    lines += ["", "## Framework versions", "", *framework_versions()]
    lines += ["", "## Citation", "", "The method's paper, SimCSE (which every method here builds on) and this "
              "repository:", "", "```bibtex", "\n\n".join(citations(config.method)), "```"]
    if training:
        lines += ["", "<details>", "<summary>Every training argument (run_arguments.json)</summary>", "", "```json",
                  json.dumps(training, indent=2, default=str), "```", "", "</details>"]
    return "\n".join(lines) + "\n"


def plain_folder_lacks_mlp(model: ContrastiveModel) -> bool:
    """Whether the method keeps its trained MLP at test time but the backbone has no pooler layer for the plain
    export to hold it in (``models/export.py``: DistilBERT, ELECTRA)."""
    from .base import config_has_pooler_dense
    from .heads import MLPProjector

    return isinstance(model.projector, MLPProjector) and not config_has_pooler_dense(model.config.encoder_config)


def mlp_outside_usage(config: Any) -> str:
    """How to encode when the plain folder cannot hold the trained MLP (:func:`plain_folder_lacks_mlp`)."""
    backbone = (getattr(config.encoder_config, "architectures", None) or [config.encoder_config.model_type])[0]
    return ("This method's embedding is [CLS] + the trained MLP, but the backbone "
            f"({backbone}) has no pooler layer to hold the MLP, so this folder alone gives [CLS] without it "
            "(`last_hidden_state[:, 0]`, `--pooler cls_before_pooler`): **not** this method's embedding. Use the "
            "sentence-transformers folder beside it, which applies the MLP.\nEvaluate: `python -m eval "
            "--model_name_or_path ../sentence-transformers --mode test` (the path of that folder).")


def prompt_usage(embedding: Mapping[str, Any]) -> str:
    """How to encode with a PromptBERT export (its ``config.json`` ``sentence_embedding`` entry): no pooler of
    ``AutoModel`` or sentence-transformers computes it, so the card spells it out."""
    ids = embedding["prompt_token_ids"]["templates"][0]
    return "\n".join([
        f"The embedding is the **[MASK] token's last hidden state** with the sentence inside the template "
        f"`{embedding['template']}` (`_` = space; `config.json` `sentence_embedding` holds it and its token ids: "
        f"prefix `{ids['prefix']}`, suffix `{ids['suffix']}`).",
        "Encode: tokenize the sentence WITHOUT special tokens, build `prefix + sentence_ids + suffix`, run "
        "`AutoModel`, and read `last_hidden_state` at the [MASK] position; neither `pooler_output` nor any "
        "sentence-transformers Pooling mode computes it, so no sentence-transformers folder is exported.",
        ("Append '.' to a sentence not ending in . ? \" ' first (the official evaluation does). "
         if embedding.get("eval_add_period") else "")
        + ("Subtract the template's own [MASK] state (template denoising) as `models/promptbert.py` does."
           if embedding.get("test_denoising") else "No template denoising at test time."),
        "Evaluate: `python -m eval --model_name_or_path PATH --mode test` (it reads the template from `config.json` "
        "and says so in its log)."])


def provenance_lines(facts: Provenance) -> list[str]:
    """Bullet points: base model, corpus and license, each saying where it came from or that it is unknown."""
    if facts.backbone is None:
        return ["- base model, training corpus and license: not recorded (no run arguments were given); set "
                "`base_model`, `datasets` and `license` in the YAML above before publishing"]
    base = (f"- base model: `{facts.base_model}`" if facts.base_model else
            f"- base model: the local folder `{facts.backbone}` (no Hub id, so no `base_model` in the YAML: add "
            "the id it was downloaded from before publishing)")
    corpus = (f"- training corpus: `{facts.train_file}` (Hub dataset `{facts.datasets[0]}`)" if facts.datasets else
              f"- training corpus: `{facts.train_file}`")
    license_ = (f"- license: `{facts.license}`, the backbone's (from {facts.license_source}); check that your "
                "training data allows it too" if facts.license else
                "- license: **not set** - the backbone's license is unknown here; choose one compatible with the "
                "backbone and the training data and add `license:` to the YAML above")
    return [base, corpus, license_]


def best_step(checkpoint: Any) -> int | None:
    """The step of ``.../checkpoint-<step>`` (the best checkpoint), else ``None``."""
    name = str(checkpoint or "").rstrip("/").rsplit("/", 1)[-1]
    prefix, _, step = name.rpartition("-")
    return int(step) if prefix == "checkpoint" and step.isdigit() else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def training_log_table(log_history: Sequence[Mapping[str, Any]], best: int | None = None,
                       max_rows: int = 60) -> list[str]:
    """Markdown rows ``| step | training loss | STS-B dev |`` from the Trainer's ``log_history`` (step 0: the
    backbone's ``before_*`` score), the best checkpoint's row in bold. Over ``max_rows`` rows, only the evaluated
    steps and the last step are kept (the full log: ``trainer_state.json``)."""
    rows: dict[int, dict[str, float]] = {}
    for entry in log_history:
        step = entry.get("step")
        if not isinstance(step, int):
            continue
        for source, column in (("loss", "loss"), ("eval_stsb_spearman", "dev"), ("before_stsb_spearman", "dev")):
            value = _number(entry.get(source))
            if value is not None:
                rows.setdefault(step, {})[column] = value
    if not rows:
        return []
    steps = sorted(rows)
    notes = []
    if best is not None:
        notes.append(f"Bold: the best checkpoint (step {best}), the one exported.")
    if len(steps) > max_rows:
        steps = [step for step in steps if "dev" in rows[step] or step == steps[-1]]
        notes.append("Only the evaluated steps and the last are shown; every logged step is in `trainer_state.json`.")
    lines = ["| step | training loss | STS-B dev (Spearman x 100) |", "|---:|---:|---:|"]
    for step in steps:
        loss, dev = rows[step].get("loss"), rows[step].get("dev")
        cells = [str(step), "-" if loss is None else f"{loss:.4f}", "-" if dev is None else f"{dev:.2f}"]
        if step == best:
            cells = [f"**{cell}**" for cell in cells]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + (["", " ".join(notes)] if notes else [])


FRAMEWORKS = ("torch", "transformers", "sentence-transformers", "tokenizers", "datasets", "accelerate",
              "huggingface-hub")


def framework_versions() -> list[str]:
    """Bullet points: Python and the installed version of each of :data:`FRAMEWORKS` (``not installed``)."""
    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    return [f"- Python: {platform.python_version()}", *(f"- {name}: {version(name)}" for name in FRAMEWORKS)]


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
    values = {name: run_argument(training, name) for name in (
        "model_name_or_path", "train_file", "learning_rate", "per_device_train_batch_size", "num_train_epochs",
        "max_steps", "max_seq_length", "seed")}
    steps = values["max_steps"]
    length = f"{steps} steps" if isinstance(steps, int) and steps > 0 else f"{values['num_train_epochs']} epoch(s)"
    precision = ("fp16" if run_argument(training, "fp16") else "bf16 autocast" if run_argument(training, "bf16")
                 else "fp32")
    return [f"- backbone: `{values['model_name_or_path']}`; corpus: `{values['train_file']}`",
            f"- learning rate {values['learning_rate']}, batch {values['per_device_train_batch_size']} per process"
            f"{launch_phrase(training)}, {length}, max length {values['max_seq_length']}, seed {values['seed']}",
            f"- training precision: {precision}"]


def launch_phrase(training: dict[str, Any]) -> str:
    """`` x 4 processes (64 sentences a step)`` after the card's batch per process, from the run's ``launch`` record
    (``trainers.resume_settings.launch_record``; ``, resumed from a run on 2 processes`` where a resume changed
    them); empty for a record written before runs kept it."""
    launch = (training or {}).get("launch")
    if not isinstance(launch, dict) or "processes" not in launch:
        return ""
    phrase = f" x {processes_phrase(launch['processes'])} ({launch['sentences_per_step']} sentences a step)"
    if (run := launch.get("resumed_from_processes")) is not None:
        phrase += f", resumed from a run on {processes_phrase(run)}"
    return phrase


__all__ = ["HUB_DATASETS", "best_step", "card_metadata", "framework_versions", "is_hub_name", "model_card",
           "launch_phrase", "provenance_lines", "score_table", "training_log_table", "training_summary"]
