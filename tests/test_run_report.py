"""What a new user sees: a short --help with the recipe's defaults, an end-of-run summary at the default log level,
evaluation progress, TensorBoard logs when it is installed, and model cards with the Hub's metadata."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import run_diffcse
import run_unsup
from tests.cli import in_process
from tests.tiny import tiny_corpus
from trainers.methods import build_model
from trainers.precision import native_cpu_bf16

# ------------------------------------------------------------------------------------------------ --help
CORE_DEFAULTS = {"--output_dir": "outputs/simcse", "--learning_rate": "3e-05", "--per_device_train_batch_size": "64",
                 "--num_train_epochs": "1.0", "--eval_steps": "125", "--seed": "42", "--max_seq_length": "32",
                 "--method": "simcse"}


def help_entries(text: str) -> dict[str, str]:
    """``--flag`` -> its help text (the lines up to the next flag), from argparse's output."""
    entries: dict[str, str] = {}
    flag = None
    for line in text.splitlines():
        stripped = line.strip()
        if line.startswith("  --"):
            flag = stripped.split()[0]
            entries[flag] = stripped
        elif flag and line.startswith("    ") and stripped:
            entries[flag] += " " + stripped
        else:
            flag = None
    return entries


def test_help_is_short_and_shows_the_recipe_with_its_defaults(capsys):
    result = in_process(run_unsup.main, ["--help"], capsys)
    assert result.code == 0
    lines = result.out.splitlines()
    assert len(lines) < 200, len(lines)  # the inherited Trainer flags are behind --help_all (was 727 lines)
    entries = help_entries(result.out)
    for flag, default in CORE_DEFAULTS.items():
        assert f"(default: {default})" in entries[flag], entries.get(flag)
        assert len(entries[flag]) > len(flag) + len(default) + 15, f"{flag} has no help text"
    assert "--adam_beta1" not in entries and "--queue_size" in entries
    groups = [line for line in lines if line and not line.startswith(" ") and line.endswith(":")]
    assert groups[1].startswith("training (the paper recipe") and groups[-1].startswith("method")

    everything = in_process(run_unsup.main, ["--help_all"], capsys)
    assert everything.code == 0 and "--adam_beta1" in everything.out and len(everything.out.splitlines()) > 300


def test_diffcse_help_shows_its_own_recipe(capsys):
    result = in_process(run_diffcse.main, ["--help"], capsys, prog="run_diffcse.py")
    entries = help_entries(result.out)
    assert "(default: 7e-06)" in entries["--learning_rate"] and "(default: 2.0)" in entries["--num_train_epochs"]
    assert "(default: distilbert-base-uncased)" in entries["--generator_name"]
    assert len(result.out.splitlines()) < 200


# ------------------------------------------------------------------------------------------------ a whole run
@pytest.fixture
def finished_run(tmp_path, monkeypatch):
    """A corpus with 2 blank lines and the small SentEval fixture (own STS-format files: the size check is off)."""
    from conftest import own_sts_format_files, write_sts_fixture

    own_sts_format_files(monkeypatch)
    corpus = tiny_corpus(tmp_path / "corpus.txt")
    corpus.write_text(corpus.read_text() + "\n  \n")
    return tmp_path, corpus, write_sts_fixture(tmp_path / "senteval")


@pytest.mark.draws_curves
def test_a_nan_dev_score_is_explained_and_the_curves_are_drawn(finished_run, backbone, capsys):
    """A backbone whose last LayerNorm has zero weights gives every token its bias: every dev pair the same cosine, a
    nan Spearman. The summary said ``before nan`` without a word, and drawing the curves failed (StopIteration)."""
    from shutil import copytree

    from tests.tiny import zero_last_layer_norm

    tmp, corpus, senteval = finished_run
    flat = zero_last_layer_norm(copytree(backbone, tmp / "flat"))
    out = tmp / "run"
    result = in_process(run_unsup.main, [
        "--model_name_or_path", str(flat), "--train_file", str(corpus), "--senteval_dir", str(senteval),
        "--output_dir", str(out), "--max_steps", "2", "--eval_steps", "2", "--per_device_train_batch_size", "8",
        "--learning_rate", "1e-9", "--pooler_type", "avg", "--use_cpu", "true", "--dataloader_pin_memory", "false"],
        capsys)
    assert result.code == 0, result.err[-3000:]
    summary = result.out[result.out.index("=== simcse: run summary ==="):]
    assert "STS-B dev Spearman x100: before nan -> " in summary
    assert ("nan: the model gives every dev pair the same cosine similarity (or a non-finite one), so Spearman's "
            "correlation is undefined: its embeddings do not tell the sentences apart.") in summary
    assert "could not draw" not in result.err and (out / "training_curves.png").is_file()


def test_a_run_ends_with_a_summary_cards_and_tensorboard_logs(finished_run, backbone, capsys, monkeypatch):
    tmp, corpus, senteval = finished_run
    monkeypatch.chdir(tmp)  # nothing may land in the working directory
    out = tmp / "run"
    result = in_process(run_unsup.main, [
        "--model_name_or_path", str(backbone), "--train_file", str(corpus), "--senteval_dir", str(senteval),
        "--output_dir", str(out), "--max_steps", "4", "--eval_steps", "2", "--per_device_train_batch_size", "8",
        "--logging_steps", "2", "--use_cpu", "true", "--dataloader_pin_memory", "false"], capsys)
    assert result.code == 0, result.err[-3000:]
    results = json.loads((out / "all_results.json").read_text())

    summary = result.out[result.out.index("=== simcse: run summary ==="):]
    assert (f"STS-B dev Spearman x100: before {results['before_stsb_spearman']:.2f} -> after "
            f"{results['eval_stsb_spearman']:.2f} (best checkpoint)") in summary
    assert f"best checkpoint: {results['best_model_checkpoint']}" in summary
    assert f"corpus: 64 rows of {corpus} (skipped 2 blank lines)" in summary
    assert "for 4 steps (" in summary and "of it evaluating), " in summary and "sentences/s" in summary
    assert "wall time:" in summary
    # precision left at its default: bf16 on a CPU with native bf16 (trainers/precision.py), else fp32; recorded
    expected = "bf16" if native_cpu_bf16() else "fp32"
    assert results["train_precision"] == expected and results["eval_dtype"] == "fp32"
    assert f"precision: {expected} training, fp32 evaluation" in summary
    run_arguments = json.loads((out / "run_arguments.json").read_text())
    assert run_arguments["CLTrainingArguments"]["bf16"] is (expected == "bf16")
    assert f"- training precision: {'bf16 autocast' if expected == 'bf16' else 'fp32'}" in (
        out / "export" / "hf" / "README.md").read_text()
    assert f"export: {out / 'export' / 'hf'} (AutoModel) and {out / 'export' / 'sentence-transformers'}" in summary
    assert "STS dev: 100%" in result.err  # evaluation shows its progress (the training bar is not frozen)

    for kind, library, pipeline in (("hf", "transformers", "feature-extraction"),
                                    ("sentence-transformers", "sentence-transformers", "sentence-similarity")):
        card = (out / "export" / kind / "README.md").read_text()
        front, body = card.split("\n---\n", 1)
        assert front.startswith("---\n") and f"library_name: {library}" in front
        assert f"pipeline_tag: {pipeline}" in front and "- contrastive-learning" in front and "- simcse" in front
        assert f"| STS-B | dev | this model | {results['eval_stsb_spearman']:.2f} |" in body
        assert f"| STS-B | dev | the backbone, before training | {results['before_stsb_spearman']:.2f} |" in body
        assert "runtime" not in body.split("## Method hyperparameters")[0]
        assert body.index("<details>") < body.index('"CLTrainingArguments"') < body.index("</details>")
        # the trainer hands the card its log and this model's STS-B dev for the Hub's model-index
        from huggingface_hub import ModelCard

        data = ModelCard(card).data
        assert [(r.dataset_split, r.metric_value) for r in data.eval_results] == [
            ("validation", round(results["eval_stsb_spearman"], 2))]
        assert data.model_name == "simcse-run" and "- license: **not set**" in body  # the tiny backbone has no card
        best = int(results["best_model_checkpoint"].rsplit("-", 1)[1])
        assert "| step | training loss | STS-B dev (Spearman x 100) |" in body and f"| **{best}** |" in body

    pytest.importorskip("tensorboard", reason="TensorBoard is optional; its logs are only written when installed")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (run_dir,) = (out / "runs").iterdir()
    events = EventAccumulator(str(run_dir))
    events.Reload()
    scalars = set(events.Tags()["scalars"])
    assert {"train/loss", "eval/stsb_spearman", "train/before_stsb_spearman"} <= scalars, scalars
    assert len(events.Scalars("eval/stsb_spearman")) == 3  # steps 2 and 4, and the best checkpoint's at the end
    assert not (tmp / "runs").exists()
    assert f"training curves: tensorboard --logdir {out / 'runs'}" in summary


def test_tensorboard_is_optional(monkeypatch):
    import transformers.integrations
    from transformers.integrations import integration_utils

    from command_line.arguments import CLTrainingArguments

    def tensorboard_installed(installed: bool) -> None:  # what the default reads, and what --report_to's check reads
        for module in (transformers.integrations, integration_utils):
            monkeypatch.setattr(module, "is_tensorboard_available", lambda: installed)

    tensorboard_installed(False)
    assert CLTrainingArguments(output_dir="x", use_cpu=True).report_to == []
    tensorboard_installed(True)
    assert CLTrainingArguments(output_dir="x", use_cpu=True).report_to == ["tensorboard"]
    assert CLTrainingArguments(output_dir="x", use_cpu=True, report_to="none").report_to == []


def test_the_card_names_the_hub_base_model_and_dataset(backbone):

    from models.card import model_card

    model = build_model("simcse", str(backbone))
    training = {"ModelArguments": {"model_name_or_path": "bert-base-uncased"},
                "DataArguments": {"train_file": "data/wiki1m_for_simcse.txt"}}
    front, body = model_card(model, scores={"eval_stsb_spearman": 80.0, "eval_runtime": 3.2, "test_STS12": 70.0},
                             training=training, kind="plain").split("\n---\n")
    assert "base_model: bert-base-uncased" in front and "datasets:\n- princeton-nlp/datasets-for-simcse" in front
    assert "| STS-B | dev | this model | 80.00 |" in body and "| STS12 | test | this model | 70.00 |" in body
    assert "runtime" not in body
    local = model_card(model, scores=None, training={"ModelArguments": {"model_name_or_path": str(backbone)}},
                       kind="plain")
    assert "base_model" not in local.split("\n---\n")[0]  # a local folder has no Hub name (the body names it)


def test_an_esimcse_run_without_a_queue_says_it_is_an_ablation(backbone, tmp_path, capsys, caplog):
    result = in_process(run_unsup.main, [
        "--method", "esimcse", "--queue_size", "0", "--model_name_or_path", str(backbone), "--train_file",
        str(tiny_corpus(tmp_path / "c.txt")), "--output_dir", str(tmp_path / "run"), "--max_steps", "1",
        "--eval_strategy", "no", "--per_device_train_batch_size", "8", "--use_cpu", "true", "--disable_tqdm", "true",
        "--dataloader_pin_memory", "false"], capsys)
    assert result.code == 0, result.err[-2000:]
    warning = "--queue_size 0 turns ESimCSE's momentum contrast off"
    assert any(warning in r.message and r.levelname == "WARNING" for r in caplog.records)  # logged at the start
    assert f"warning: {warning}" in result.out  # and repeated in the summary


@pytest.mark.parametrize("queue_size, batch, warned", [("4", "8", True), ("8", "8", False), ("160", "8", False)])
def test_an_esimcse_queue_shorter_than_a_steps_keys_is_said(backbone, tmp_path, capsys, queue_size, batch, warned):
    """A queue shorter than the keys one step enqueues holds only part of the previous step (none older): said in
    the summary with the queue of 2.5 batches; a queue as long as a step's keys, or longer, is not."""
    result = in_process(run_unsup.main, [
        "--method", "esimcse", "--queue_size", queue_size, "--model_name_or_path", str(backbone), "--train_file",
        str(tiny_corpus(tmp_path / "c.txt")), "--output_dir", str(tmp_path / "run"), "--max_steps", "1",
        "--eval_strategy", "no", "--per_device_train_batch_size", batch, "--use_cpu", "true", "--disable_tqdm",
        "true", "--dataloader_pin_memory", "false"], capsys)
    assert result.code == 0, result.err[-2000:]
    warning = ("warning: --queue_size 4 is less than the 8 momentum keys each step enqueues "
               "(--per_device_train_batch_size): the queue holds only the last 4 keys of the previous step, none "
               "older, where ESimCSE's holds 2.5 batches (Table 10 tries 1-3): for 2.5 x 8 pass --queue_size 20")
    assert (warning in result.out) is warned
    assert ("is less than the" in result.out) is warned


def test_the_queue_warning_counts_the_gathered_keys_of_every_process():
    from types import SimpleNamespace

    from command_line.pipeline import queue_warning

    model = SimpleNamespace(queue=SimpleNamespace(size=160), config=SimpleNamespace(gather_queue=True))
    args = SimpleNamespace(world_size=4, per_device_train_batch_size=64)
    assert queue_warning(model, args).startswith("--queue_size 160 is less than the 256 momentum keys each step "
                                                 "enqueues (4 processes x 64, gathered)")
    assert queue_warning(model, args).endswith("pass --queue_size 640")
    model.config.gather_queue = False  # each process enqueues its own 64
    assert queue_warning(model, args) is None
    assert queue_warning(SimpleNamespace(queue=None), args) is None


def test_the_step_line_names_the_processes_and_the_contrast_batch():
    from types import SimpleNamespace

    from command_line.summary import describe_step

    config = SimpleNamespace(dropout_masks="stream", gather_negatives=True)
    args = SimpleNamespace(world_size=2, per_device_train_batch_size=64)
    assert describe_step(config, args) == "2 processes x 64 sentences, negatives gathered: contrast batch 128"
    config.gather_negatives = False
    assert describe_step(config, args) == ("2 processes x 64 sentences, each contrasting its own "
                                           "(--gather_negatives false)")
    assert describe_step(config, SimpleNamespace(world_size=1, per_device_train_batch_size=64)) is None
