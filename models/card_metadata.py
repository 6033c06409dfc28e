"""The Hub's YAML front matter of an export's card: library, pipeline tag, tags, ``base_model``, ``datasets``,
``license`` and ``model-index`` (the structured results the Hub's pages and leaderboards read).

The metadata is built as :class:`huggingface_hub.ModelCardData` (its ``model-index`` by
:func:`huggingface_hub.repocard_data.eval_results_to_model_index`), so it has the shape the Hub's own client writes
and parses back. Spec: https://github.com/huggingface/hub-docs/blob/main/modelcard.md (``model-index``: task,
dataset with its split, metrics).

What goes in, and what stays out:

- ``base_model``: the backbone's Hub id (``bert-base-uncased``; a Hugging Face cache folder
  ``.../models--org--name/snapshots/<rev>`` is read as ``org/name``). A local folder has no Hub id and the Hub
  refuses a path there, so it is left out and the card's body names the folder (:class:`Provenance`).
- ``datasets``: the SimCSE papers' training files (:data:`HUB_DATASETS`); any other corpus is named in the body.
- ``license``: the backbone's (its card's ``license``, read by the training script, or :data:`BACKBONE_LICENSES`
  for the papers' backbones); unknown: left out, and the body says the user must set it.
- ``model-index``: this model's STS scores only (never the backbone's ``before_*`` scores), one entry per
  (dataset, split), so dev and test never share an entry: ``eval_*`` are STS-B dev (``validation``), ``test_*``
  the test sets. SICK-R dev and the averages stay in the body's table.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any, Mapping

#: Training files of the SimCSE papers -> their Hugging Face dataset (data/download_wiki1m.sh, download_nli.sh).
HUB_DATASETS = {"wiki1m_for_simcse.txt": "princeton-nlp/datasets-for-simcse",
                "nli_for_simcse.csv": "princeton-nlp/datasets-for-simcse"}

#: The papers' backbones -> the ``license`` of their Hub model cards (google-bert/*: apache-2.0; FacebookAI/*: mit).
BACKBONE_LICENSES = {
    **dict.fromkeys(("bert-base-uncased", "bert-large-uncased", "google-bert/bert-base-uncased",
                     "google-bert/bert-large-uncased"), "apache-2.0"),
    **dict.fromkeys(("roberta-base", "roberta-large", "FacebookAI/roberta-base", "FacebookAI/roberta-large"), "mit"),
}

STS_TASK_TYPE = ("sentence-similarity", "Semantic Textual Similarity")
METRIC = ("cosine_spearman", "Spearman correlation of cosine similarities x 100")

#: Our score names -> (a Hub dataset id, a readable name). STS12-16 and STS-B: the sets MTEB hosts, the same pairs
#: as SentEval's test files (docs/evaluation.md, "MTEB"). SICK-R: SentEval's SICK test split (4,927 pairs), which
#: MTEB's ``mteb/sickr-sts`` is not (it pools all 9,927 pairs), so the card names the SICK corpus (Marelli et al.,
#: 2014) by the canonical id ``sick``; only the id's form is checked here (offline).
SCORE_DATASETS: dict[str, tuple[str, str]] = {
    "STS12": ("mteb/sts12-sts", "STS12"), "STS13": ("mteb/sts13-sts", "STS13"),
    "STS14": ("mteb/sts14-sts", "STS14"), "STS15": ("mteb/sts15-sts", "STS15"),
    "STS16": ("mteb/sts16-sts", "STS16"), "STSBenchmark": ("mteb/stsbenchmark-sts", "STS Benchmark"),
    "stsb_spearman": ("mteb/stsbenchmark-sts", "STS Benchmark"),
    "SICKRelatedness": ("sick", "SICK-R"), "sickr_spearman": ("sick", "SICK-R"),
}
#: Score prefix -> the split it was measured on. ``before_*`` (the backbone) is deliberately absent.
SCORE_SPLITS = {"eval": "validation", "test": "test"}
#: Dev scores the model-index carries: STS-B dev is the papers' selection metric; SICK-R's dev split has no Hub set
#: of exactly SentEval's trial pairs, so it stays in the body.
DEV_SCORES = ("stsb_spearman",)

_CACHE_FOLDER = re.compile(r"models--(?P<org>[^/]+?)--(?P<name>[^/]+)/snapshots/[^/]+/?$")


@dataclass(frozen=True)
class Provenance:
    """Where the model came from, as the card states it: the backbone (as given), its Hub id, the training corpus
    and its Hub dataset, the license and where it was read."""

    backbone: str | None
    base_model: str | None
    train_file: str | None
    datasets: list[str] = field(default_factory=list)
    license: str | None = None
    license_source: str | None = None


def run_argument(training: Mapping[str, Any] | None, name: str) -> Any:
    """One argument from ``run_arguments``'s nested dict (``{"ModelArguments": {...}, ...}``)."""
    for group in (training or {}).values():
        if isinstance(group, dict) and name in group:
            return group[name]
    return None


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


def hub_id(backbone: str) -> str | None:
    """The backbone's Hub id: the name itself, or ``org/name`` of a Hugging Face cache snapshot folder."""
    if is_hub_name(backbone):
        return backbone
    match = _CACHE_FOLDER.search(Path(backbone).expanduser().as_posix())
    return f"{match['org']}/{match['name']}" if match else None


def known_license(base_model: str | None) -> tuple[str | None, str | None]:
    """``(license, where it comes from)`` of a papers' backbone (:data:`BACKBONE_LICENSES`), else ``(None, None)``.
    A local backbone's own card is read by the training script (``trainers/backbone_card.py``: models/ reads no
    file) and passed in as ``backbone_license``."""
    if base_model in BACKBONE_LICENSES:
        return BACKBONE_LICENSES[base_model], f"the Hub model card of `{base_model}`"
    return None, None


def provenance(training: Mapping[str, Any] | None,
               backbone_license: tuple[str | None, str | None] | None = None) -> Provenance:
    """The backbone, corpus and license of a run, from its ``run_arguments``; ``backbone_license``: ``(license,
    where it was read)`` from the backbone's own card, when the caller read one (else :func:`known_license`)."""
    backbone = run_argument(training, "model_name_or_path")
    train_file = run_argument(training, "train_file")
    backbone = str(backbone) if backbone else None
    base_model = hub_id(backbone) if backbone else None
    dataset = HUB_DATASETS.get(PurePath(str(train_file)).name) if train_file else None
    license_, source = (backbone_license if backbone_license and backbone_license[0] else
                        known_license(base_model) if backbone else (None, None))
    return Provenance(backbone, base_model, str(train_file) if train_file else None,
                      [dataset] if dataset else [], license_, source)


def eval_results(scores: Mapping[str, Any]):
    """This model's STS scores as :class:`huggingface_hub.EvalResult` objects, one per (dataset, split); the
    backbone's ``before_*`` scores, averages, timings and SICK-R dev are left out."""
    from huggingface_hub import EvalResult

    results = []
    for key, value in scores.items():
        prefix, _, name = key.partition("_")
        split = SCORE_SPLITS.get(prefix)
        if split is None or name not in SCORE_DATASETS or isinstance(value, bool) or \
                not isinstance(value, (int, float)) or (split == "validation" and name not in DEV_SCORES):
            continue
        dataset_type, dataset_name = SCORE_DATASETS[name]
        results.append(EvalResult(
            task_type=STS_TASK_TYPE[0], task_name=STS_TASK_TYPE[1], dataset_type=dataset_type,
            dataset_name=f"{dataset_name} ({'dev' if split == 'validation' else 'test'}, SentEval files)",
            dataset_split=split, metric_type=METRIC[0], metric_name=METRIC[1], metric_value=round(float(value), 2)))
    return results


def card_metadata(method: str, training: Mapping[str, Any] | None, kind: str,
                  scores: Mapping[str, Any] | None = None, model_name: str | None = None,
                  backbone_license: tuple[str | None, str | None] | None = None) -> str:
    """The YAML front matter (between ``---`` lines) of a ``kind`` (``plain`` / ``sentence-transformers``) card."""
    from huggingface_hub import ModelCardData

    sentence_transformers = kind == "sentence-transformers"
    facts = provenance(training, backbone_license)
    tags = (["sentence-transformers"] if sentence_transformers else []) + [
        "sentence-similarity", "feature-extraction", "contrastive-learning", method.replace("_", "-"), "cse-repro"]
    results = eval_results(scores or {})
    data = ModelCardData(
        library_name="sentence-transformers" if sentence_transformers else "transformers",
        pipeline_tag="sentence-similarity" if sentence_transformers else "feature-extraction",
        tags=tags, base_model=facts.base_model, datasets=facts.datasets or None, license=facts.license,
        language="en", eval_results=results or None,
        model_name=(model_name or default_model_name(method, facts)) if results else None)
    return f"---\n{data.to_yaml()}\n---\n"


def default_model_name(method: str, facts: Provenance) -> str:
    """``<method>-<backbone's last path part>`` (the ``model-index`` name, which leaderboards show)."""
    backbone = PurePath(facts.base_model or facts.backbone or "model").name
    return f"{method.replace('_', '-')}-{backbone}"


__all__ = ["BACKBONE_LICENSES", "HUB_DATASETS", "Provenance", "SCORE_DATASETS", "card_metadata",
           "default_model_name", "eval_results", "hub_id", "is_hub_name", "known_license", "provenance",
           "run_argument"]
