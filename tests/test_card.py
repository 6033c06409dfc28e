"""The export's model card: its YAML passes the metadata checks ``huggingface_hub`` runs on a model card (offline:
``ModelCard`` parsing into ``ModelCardData``, ``model-index`` <-> ``EvalResult`` conversion, repo-id rules for
``base_model`` / ``datasets``), dev and test never share a ``model-index`` entry, the backbone's scores stay out of
it, and the body carries the license note, the training log, framework versions and citations."""
from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest
import yaml
from huggingface_hub import ModelCard
from huggingface_hub.repocard_data import eval_results_to_model_index, model_index_to_eval_results
from huggingface_hub.utils import validate_repo_id

from models.card import best_step, framework_versions, model_card, training_log_table
from models.card_metadata import hub_id
from models.citations import METHOD_BIBTEX, PAPER_OF, REPO_BIBTEX, citations
from trainers.backbone_card import read_backbone_license
from trainers.methods import METHODS, build_model

REPO = Path(__file__).resolve().parents[1]
SCORES = {"before_stsb_spearman": 70.0, "before_sickr_spearman": 71.0, "eval_stsb_spearman": 80.0,
          "eval_sickr_spearman": 81.0, "eval_avg_sts": 80.5, "eval_runtime": 3.2, "test_STS12": 60.0,
          "test_STSBenchmark": 62.0, "test_SICKRelatedness": 63.0, "test_avg": 61.5,
          "best_model_checkpoint": "out/checkpoint-4"}
HUB_TRAINING = {"ModelArguments": {"model_name_or_path": "bert-base-uncased"},
                "DataArguments": {"train_file": "data/wiki1m_for_simcse.txt"}}
HISTORY = [{"before_stsb_spearman": 70.0, "step": 0}, {"loss": 0.5, "step": 2}, {"loss": 0.25, "step": 4},
           {"eval_stsb_spearman": 80.0, "step": 4}, {"loss": 0.125, "step": 6}, {"eval_stsb_spearman": 79.0, "step": 6},
           {"train_loss": 0.3, "step": 6}]


@pytest.fixture(scope="module")
def simcse(backbone):
    return build_model("simcse", str(backbone))


def front_matter(card: str) -> dict:
    match = re.match(r"---\n(.*?)\n---\n", card, flags=re.DOTALL)
    assert match, card[:300]
    return yaml.safe_load(match.group(1))


def test_the_yaml_passes_huggingface_hubs_model_card_checks(simcse):
    for kind in ("plain", "sentence-transformers"):
        text = model_card(simcse, scores=SCORES, training=HUB_TRAINING, kind=kind, log_history=HISTORY,
                          model_name="simcse-test")
        card = ModelCard(text)  # yaml.safe_load + ModelCardData(**metadata): raises on a malformed model-index
        data = card.data
        assert data.base_model == "bert-base-uncased" and data.datasets == ["princeton-nlp/datasets-for-simcse"]
        assert data.license == "apache-2.0" and data.language == "en"
        assert data.library_name == ("sentence-transformers" if kind != "plain" else "transformers")
        validate_repo_id(data.base_model)
        for dataset in data.datasets:
            validate_repo_id(dataset)
        raw = front_matter(text)["model-index"]
        # the Hub client's own conversion both ways gives back exactly the committed model-index
        name, results = model_index_to_eval_results(raw)
        assert name == "simcse-test" == data.model_name
        assert eval_results_to_model_index(name, results) == raw
        measured = {(r.dataset_type, r.dataset_split): r.metric_value for r in data.eval_results}
        assert measured == {("mteb/stsbenchmark-sts", "validation"): 80.0, ("mteb/sts12-sts", "test"): 60.0,
                            ("mteb/stsbenchmark-sts", "test"): 62.0, ("sick", "test"): 63.0}
        assert all(r.task_type == "sentence-similarity" and r.metric_type == "cosine_spearman" for r in results)


def test_dev_and_test_never_share_an_entry_and_the_backbone_is_not_this_model(simcse):
    raw = front_matter(model_card(simcse, scores=SCORES, training=HUB_TRAINING, kind="plain"))["model-index"]
    entries = raw[0]["results"]
    assert len(entries) == 4  # one per (dataset, split)
    for entry in entries:
        split = entry["dataset"]["split"]
        assert split in ("validation", "test")
        assert ("dev" if split == "validation" else "test") in entry["dataset"]["name"]
    values = [metric["value"] for entry in entries for metric in entry["metrics"]]
    assert 70.0 not in values and 71.0 not in values  # before_*: the backbone's scores
    assert 80.5 not in values and 61.5 not in values  # averages are no dataset
    assert 81.0 not in values  # SICK-R dev: no Hub set of exactly SentEval's trial pairs


def test_without_scores_there_is_no_model_index(simcse):
    text = model_card(simcse, scores={"eval_runtime": 1.0}, training=HUB_TRAINING, kind="plain")
    assert "model-index" not in front_matter(text)
    ModelCard(text)


def test_a_local_backbone_names_its_folder_and_reads_its_license(simcse, backbone, tmp_path):
    training = {"ModelArguments": {"model_name_or_path": str(backbone)},
                "DataArguments": {"train_file": "data/cache/wiki_standin.txt"}}
    text = model_card(simcse, scores=SCORES, training=training, kind="plain")
    meta = front_matter(text)
    assert "base_model" not in meta and "license" not in meta and "datasets" not in meta
    assert f"- base model: the local folder `{backbone}` (no Hub id" in text
    assert "- license: **not set** - the backbone's license is unknown here" in text
    assert "- training corpus: `data/cache/wiki_standin.txt`" in text

    licensed = tmp_path / "licensed"
    shutil.copytree(backbone, licensed)
    assert read_backbone_license(str(licensed)) == (None, None)
    (licensed / "README.md").write_text("---\nlicense: mit\n---\n# a backbone\n")
    assert read_backbone_license(str(licensed)) == ("mit", f"`{licensed / 'README.md'}`")
    training["ModelArguments"]["model_name_or_path"] = str(licensed)
    text = model_card(simcse, scores=None, training=training, kind="plain",
                      backbone_license=read_backbone_license(str(licensed)))
    assert front_matter(text)["license"] == "mit"
    assert f"- license: `mit`, the backbone's (from `{licensed / 'README.md'}`)" in text
    ModelCard(text)


def test_a_hub_backbone_not_in_the_cache_has_no_card_to_read():
    assert read_backbone_license("some-org/not-cached-anywhere") == (None, None)
    assert read_backbone_license("/no/such/folder") == (None, None)


def test_the_hub_id_of_a_backbone():
    assert hub_id("bert-base-uncased") == "bert-base-uncased"
    assert hub_id("princeton-nlp/unsup-simcse-bert-base-uncased") == "princeton-nlp/unsup-simcse-bert-base-uncased"
    assert hub_id("/cache/hub/models--FacebookAI--roberta-base/snapshots/e2da8e2f") == "FacebookAI/roberta-base"
    assert hub_id("./my-model") is None and hub_id("/abs/folder") is None


def test_without_run_arguments_the_card_says_what_to_fill_in(simcse):
    text = model_card(simcse, scores=None, training=None, kind="plain")
    assert "not recorded (no run arguments were given)" in text and "license" not in front_matter(text)


def test_the_training_log_table():
    table = training_log_table(HISTORY, best=4)
    assert table[:2] == ["| step | training loss | STS-B dev (Spearman x 100) |", "|---:|---:|---:|"]
    assert table[2:6] == ["| 0 | - | 70.00 |", "| 2 | 0.5000 | - |", "| **4** | **0.2500** | **80.00** |",
                          "| 6 | 0.1250 | 79.00 |"]
    assert "Bold: the best checkpoint (step 4), the one exported." in table[-1]
    long = [{"loss": 1.0 / step, "step": step} for step in range(1, 101)] + [{"eval_stsb_spearman": 50.0, "step": 50}]
    thinned = training_log_table(long, best=None, max_rows=20)
    assert [row.split(" | ")[0] for row in thinned[2:4]] == ["| 50", "| 100"]
    assert "every logged step is in `trainer_state.json`" in thinned[-1]
    assert training_log_table([]) == []
    assert best_step("outputs/run/checkpoint-125") == 125 and best_step(None) is None and best_step("x/final") is None


def test_the_card_carries_the_training_log_versions_and_citations(simcse):
    import torch

    text = model_card(simcse, scores=SCORES, training=HUB_TRAINING, kind="plain", log_history=HISTORY)
    assert "## Training log" in text and "| **4** | **0.2500** | **80.00** |" in text
    assert f"- torch: {torch.__version__}" in text and f"- torch: {torch.__version__}" in framework_versions()
    assert METHOD_BIBTEX["simcse"] in text and REPO_BIBTEX in text
    assert text.index("## Citation") < text.index("<details>")


def test_every_method_cites_its_paper_simcse_and_this_repository():
    for method in METHODS:
        entries = citations(method)
        paper = METHOD_BIBTEX[PAPER_OF.get(method, method)]
        assert entries[0] == paper and METHOD_BIBTEX["simcse"] in entries and entries[-1] == REPO_BIBTEX
        assert len(entries) == len(set(entries))
    for entry in (*METHOD_BIBTEX.values(), REPO_BIBTEX):
        assert re.match(r"@\w+\{\w+,\n", entry) and entry.endswith("}") and entry.count("{") == entry.count("}")
        assert "title = {" in entry
    assert all("author = {" in entry for entry in METHOD_BIBTEX.values())


def test_an_export_writes_cards_that_parse(simcse, backbone, tmp_path):
    from transformers import AutoTokenizer

    from models.export import export_model

    exported = export_model(simcse, AutoTokenizer.from_pretrained(backbone), tmp_path / "myrun" / "export",
                            scores=SCORES, training=HUB_TRAINING, log_history=HISTORY)
    for folder in exported.values():
        card = ModelCard.load(folder / "README.md")
        assert card.data.model_name == "simcse-myrun" and card.data.base_model == "bert-base-uncased"
        assert "## Training log" in card.text


def test_card_does_not_import_export():
    """models/card.py <-> models/export.py was an import cycle; the card now owns test_time_pooler."""
    for module in ("card", "card_metadata", "citations"):
        tree = ast.parse((REPO / "models" / f"{module}.py").read_text())
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert not {"export", "models.export"} & imported, module
