"""The released-checkpoint check: the catalogue (results/released_checkpoints.json), the comparison of our
evaluation with the published numbers (eval/released.py), and scripts/check_released.sh: its dry run, a real run
on tiny local models standing in for hub ids, and its error when the hub cannot be reached."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from eval.released import Comparison, compare, format_comparison, hub_problem, load_catalogue, main, select

REPO = Path(__file__).resolve().parents[1]
CATALOGUE = REPO / "results" / "released_checkpoints.json"
STS_KEYS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness")
TRANSFER_KEYS = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")
UNSUP_BERT = "princeton-nlp/unsup-simcse-bert-base-uncased"
SUP_BERT = "princeton-nlp/sup-simcse-bert-base-uncased"


# ----------------------------------------------------------------------------------------------- the catalogue


def test_catalogue_has_the_released_checkpoints_with_their_poolers() -> None:
    from models.poolers import POOLER_TYPES

    catalogue = {entry.id: entry for entry in load_catalogue(CATALOGUE)}
    assert len(catalogue) == 16  # SimCSE 8, ESimCSE 4, DiffCSE 4
    assert (catalogue[UNSUP_BERT].pooler, catalogue[UNSUP_BERT].published["avg"]) == ("cls_before_pooler", 76.25)
    assert (catalogue[SUP_BERT].pooler, catalogue[SUP_BERT].published["avg"]) == ("cls", 81.57)
    for model_id in ("voidism/diffcse-bert-base-uncased-sts", "voidism/diffcse-bert-base-uncased-trans",
                     "voidism/diffcse-roberta-base-sts", "voidism/diffcse-roberta-base-trans"):
        assert catalogue[model_id].pooler == "cls_before_pooler"
    assert catalogue["voidism/diffcse-roberta-base-trans"].task_set == "transfer"
    for entry in catalogue.values():
        assert entry.pooler in POOLER_TYPES, entry.id
        assert entry.id.count("/") == 1 and entry.paper in ("SimCSE", "ESimCSE", "DiffCSE"), entry.id
        assert "@" in entry.source and (".md" in entry.source or ".ipynb" in entry.source), entry.id  # repo@commit file
        keys = (*STS_KEYS, "avg") if entry.task_set == "sts" else (*TRANSFER_KEYS, "transfer_avg")
        assert set(entry.published) <= set(keys), entry.id


def test_published_averages_are_the_mean_of_their_tasks() -> None:
    """Where a source gives every task, its average is their mean up to rounding (catches a mistyped number)."""
    for entry in load_catalogue(CATALOGUE):
        tasks = STS_KEYS if entry.task_set == "sts" else TRANSFER_KEYS
        if all(task in entry.published for task in tasks):
            mean = sum(entry.published[task] for task in tasks) / len(tasks)
            average = entry.published["avg" if entry.task_set == "sts" else "transfer_avg"]
            assert abs(mean - average) <= 0.011, (entry.id, mean, average)


def test_catalogue_agrees_with_the_paper_tables() -> None:
    """The released DiffCSE and ESimCSE checkpoints score what the papers' tables (results/paper_numbers.json) say."""
    numbers = json.loads((REPO / "results" / "paper_numbers.json").read_text())
    sets = numbers["column_sets"]
    pairs = {"voidism/diffcse-bert-base-uncased-sts": ("diffcse_table1", "diffcse_bert-base-uncased"),
             "voidism/diffcse-roberta-base-sts": ("diffcse_table1", "diffcse_roberta-base"),
             "voidism/diffcse-bert-base-uncased-trans": ("diffcse_table2", "diffcse_bert-base-uncased"),
             "voidism/diffcse-roberta-base-trans": ("diffcse_table2", "diffcse_roberta-base"),
             "ffgcc/esimcse-roberta-large": ("esimcse_table3", "roberta-large"),
             UNSUP_BERT: ("simcse_table_unsup", "bert-base-uncased")}
    catalogue = {entry.id: entry for entry in load_catalogue(CATALOGUE)}
    for model_id, (table, row) in pairs.items():
        spec = numbers["tables"][table]
        columns = {column["name"]: column["key"] for column in sets[spec["columns"]]}
        paper = {columns[name]: value for name, value in spec["rows"][row]["paper"].items()}
        assert catalogue[model_id].published == paper, model_id


def test_a_broken_catalogue_names_the_file(tmp_path: Path) -> None:
    broken = tmp_path / "c.json"
    broken.write_text(json.dumps({"checkpoints": [{"id": "a/b"}]}))
    with pytest.raises(SystemExit, match="c.json: not a released-checkpoint catalogue"):
        load_catalogue(broken)


# ----------------------------------------------------------------------------------------------- comparing


def write_result(directory: Path, model_id: str, results: dict) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / (model_id.replace("/", "__") + ".json")).write_text(json.dumps(results))


def test_compare_agrees_differs_and_not_evaluated(tmp_path: Path, capsys) -> None:
    catalogue = {entry.id: entry for entry in load_catalogue(CATALOGUE)}
    unsup = dict(catalogue[UNSUP_BERT].published)
    unsup.update(STS12=68.45, avg=76.35)  # +0.05 and +0.10 (the tolerance itself): agrees
    write_result(tmp_path, UNSUP_BERT, {**unsup, "extra": 1.0})
    sup = dict(catalogue[SUP_BERT].published)
    sup.update(avg=80.57, STS13=None)  # -1.00, and a task our results lack: differs
    write_result(tmp_path, SUP_BERT, sup)
    status = main(["--catalogue", str(CATALOGUE), "compare", "--results_dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert status == 1
    assert "2 agree" not in out and "1 agree with their published numbers" in out
    assert "1 differ, 14 not evaluated" in out
    assert f"#### {UNSUP_BERT} (SimCSE; --pooler cls_before_pooler; sts test): agrees" in out
    assert "| ours - published | +0.05 | +0.00 | +0.00 | +0.00 | +0.00 | +0.00 | +0.00 | +0.10 |" in out
    assert f"#### {SUP_BERT} (SimCSE; --pooler cls; sts test): differs" in out
    assert "| ours | 75.30 | — | 80.19 | 85.40 | 80.82 | 84.26 | 80.39 | 80.57 |" in out
    assert "-1.00 |" in out and "princeton-nlp/SimCSE@49fa580 README.md" in out
    assert "#### voidism/diffcse-roberta-base-trans (DiffCSE; --pooler cls_before_pooler; transfer test): not evaluated" in out


def test_just_over_the_tolerance_differs(tmp_path: Path) -> None:
    entry = select(load_catalogue(CATALOGUE), "^voidism/diffcse-roberta-base-trans$")
    published = entry[0].published
    write_result(tmp_path, entry[0].id, {**published, "MRPC": published["MRPC"] - 0.11})
    (comparison,) = compare(entry, tmp_path)
    assert comparison.status == "differs" and comparison.differences["MRPC"] == pytest.approx(-0.11)
    assert Comparison(entry[0], dict(published), 0.1).status == "agrees"
    assert "| published | 82.82 | 88.61 |" in format_comparison(comparison)


def test_unknown_only_is_refused() -> None:
    with pytest.raises(SystemExit, match="no checkpoint .* matches --only 'nothing-like-this'"):
        main(["--catalogue", str(CATALOGUE), "--only", "nothing-like-this", "list"])


def test_unreachable_hub_is_a_clear_error(monkeypatch) -> None:
    import huggingface_hub

    monkeypatch.setattr("eval.released._cached", lambda model_id: False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert "HF_HUB_OFFLINE is set and 2 of the 2 checkpoints" in hub_problem([UNSUP_BERT, SUP_BERT])
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")

    def no_network(self, repo_id, **kwargs):
        raise ConnectionError("Name or service not known")

    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", no_network)
    problem = hub_problem([UNSUP_BERT])
    assert "cannot reach the Hugging Face hub for princeton-nlp/unsup-simcse-bert-base-uncased" in problem
    assert "ConnectionError: Name or service not known" in problem and "RELEASED_ROOT" in problem
    monkeypatch.setattr("eval.released._cached", lambda model_id: True)
    assert hub_problem([UNSUP_BERT]) is None  # cached: nothing to fetch


# ----------------------------------------------------------------------------------------------- the script


def check_released(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items() if key not in ("ONLY", "FORCE", "RELEASED_ROOT")}
    environment.update({"RESULTS_DIR": str(tmp_path / "results"), "PYTHON": sys.executable,
                        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **env})
    return subprocess.run(["bash", str(REPO / "scripts" / "check_released.sh"), *args], capture_output=True,
                          text=True, env=environment, cwd=REPO, timeout=300)


def test_dry_run_prints_one_evaluation_per_checkpoint_then_the_comparison(tmp_path: Path) -> None:
    from eval.cli import build_parser, plan_tasks

    root = tmp_path / "models"
    completed = check_released(tmp_path, "--dry_run", RELEASED_ROOT=str(root))
    assert completed.returncode == 0, completed.stderr
    commands = [shlex.split(line[2:]) for line in completed.stdout.splitlines() if line.startswith("+ ")]
    catalogue = load_catalogue(CATALOGUE)
    assert len(commands) == len(catalogue) + 1
    for command, entry in zip(commands, catalogue):
        assert command[:3] == [sys.executable, "-m", "eval"]
        parser = build_parser()
        args = parser.parse_args(command[3:])
        plan = plan_tasks(args, parser)
        assert args.model_name_or_path == str(root / entry.id) and args.pooler == entry.pooler
        assert args.mode == "test" and args.task_set == entry.task_set and (plan.run_transfer == (entry.task_set == "transfer"))
        assert args.output_json == tmp_path / "results" / "released" / entry.result_name
    assert commands[-1] == [sys.executable, "-m", "eval.released", "compare", "--results_dir",
                            str(tmp_path / "results" / "released")]


def test_dry_run_with_only_and_a_finished_checkpoint(tmp_path: Path) -> None:
    write_result(tmp_path / "results" / "released", "voidism/diffcse-roberta-base-sts", {"avg": 78.0})
    completed = check_released(tmp_path, "--dry_run", "--only", "^voidism/")
    models = [shlex.split(line[2:])[4] for line in completed.stdout.splitlines() if line.startswith("+ ")
              and " -m eval " in line]
    assert models == ["voidism/diffcse-bert-base-uncased-sts", "voidism/diffcse-bert-base-uncased-trans",
                      "voidism/diffcse-roberta-base-trans"]  # hub ids without RELEASED_ROOT; one already done
    assert "diffcse-roberta-base-sts.json exists, skipped" in completed.stdout
    last = shlex.split(completed.stdout.strip().splitlines()[-1][2:])
    assert last[1:6] == ["-m", "eval.released", "--only", "^voidism/", "compare"]


def test_without_the_hub_the_run_stops_with_the_reason(tmp_path: Path) -> None:
    completed = check_released(tmp_path, "--only", "unsup-simcse-bert-base", HF_HOME=str(tmp_path / "hf"))
    assert completed.returncode == 1
    assert "HF_HUB_OFFLINE is set" in completed.stderr and "machine with internet" in completed.stderr
    assert "+ " not in completed.stdout  # nothing evaluated


def test_real_run_on_local_stand_ins(tmp_path: Path, sts_fixture_dir: Path) -> None:
    """Tiny random BERTs stand in for the two SimCSE BERT-base checkpoints (RELEASED_ROOT/<owner>/<name>): each is
    evaluated with its own pooler, and the comparison prints their (random-model) numbers against the published
    ones and fails."""
    from tests.tiny import save_tiny_backbone

    root = tmp_path / "models"
    for model_id in (UNSUP_BERT, SUP_BERT):
        save_tiny_backbone(root / model_id)
    completed = check_released(tmp_path, "--only", r"^princeton-nlp/(un)?sup-simcse-bert-base",
                               RELEASED_ROOT=str(root), SENTEVAL_DIR=str(sts_fixture_dir))
    assert completed.returncode == 1, completed.stderr  # a random model differs from the published numbers
    out = completed.stdout
    assert "--pooler cls_before_pooler --mode test --task_set sts" in out and "--pooler cls --mode test" in out
    assert f"#### {UNSUP_BERT} (SimCSE; --pooler cls_before_pooler; sts test): differs" in out
    assert "| published | 68.40 | 82.41 | 74.38 | 80.91 | 78.56 | 76.85 | 72.23 | 76.25 |" in out
    assert "0 agree with their published numbers (every number within 0.10), 2 differ, 0 not evaluated" in out
    for model_id in (UNSUP_BERT, SUP_BERT):
        results = json.loads((tmp_path / "results" / "released" / (model_id.replace("/", "__") + ".json")).read_text())
        assert set(STS_KEYS) <= set(results)
