"""Training from this repo's own outputs, as a user types it: ``--model_name_or_path`` a training checkpoint
(``checkpoint-N``: its encoder; the official SimCSE train.py loads its BertForCL from any folder), a finished run's
folder or its ``export/`` (its export, as ``python -m eval`` reads them), an unfinished run's folder (refused, naming
the checkpoint to start from or resume)."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig
from transformers.testing_utils import CaptureLogger
from transformers.trainer_utils import align_special_tokens
from transformers.utils import logging as transformers_logging

import run_unsup
from tests.cli import in_process
from tests.tiny import FAST_TRAINING_ARGS, tiny_corpus
from trainers.methods import build_model, load_contrastive_model


def run(argv: list[str], capsys):
    return in_process(run_unsup.main, argv + FAST_TRAINING_ARGS, capsys)


@pytest.fixture
def finished_run(tmp_path, backbone, sts_fixture_dir, capsys) -> Path:
    """A finished SimCSE run (4 steps, evaluated and saved every 2, the best checkpoint exported) under
    ``tmp_path/first``; ``tmp_path/corpus.txt`` its corpus."""
    out = tmp_path / "first"
    result = run(["--method", "simcse", "--model_name_or_path", str(backbone), "--train_file",
                  str(tiny_corpus(tmp_path / "corpus.txt")), "--senteval_dir", str(sts_fixture_dir), "--max_steps",
                  "4", "--eval_steps", "2", "--save_steps", "2", "--save_total_limit", "2", "--learning_rate", "1e-2",
                  "--output_dir", str(out)], capsys)
    assert result.code == 0, result.err
    return out


def dev_scores(run_folder: Path) -> dict[int, float]:
    """STS-B dev Spearman by step in ``run_folder``'s final trainer state (0: the "before" score)."""
    results = json.loads((run_folder / "all_results.json").read_text())
    state = json.loads((run_folder / "trainer_state.json").read_text())
    scores = {entry["step"]: entry["eval_stsb_spearman"] for entry in state["log_history"]
              if "eval_stsb_spearman" in entry}
    return {0: results["before_stsb_spearman"], **scores}


def test_a_checkpoints_config_loads_through_autoconfig(finished_run):
    """``AutoConfig.from_pretrained`` passes ``name_or_path``, which the config refused as an unknown setting (the
    first thing any library that reads a checkpoint's config did)."""
    checkpoint = next(finished_run.glob("checkpoint-*"))
    config = AutoConfig.from_pretrained(checkpoint)
    assert config.model_type == "cse_contrastive" and config.method == "simcse"


@pytest.mark.parametrize("method", ["simcse", "esimcse"])
def test_a_model_built_on_a_checkpoint_holds_its_encoders_weights(finished_run, method):
    checkpoint = finished_run / "checkpoint-2"
    trained = load_contrastive_model(checkpoint).encoder.state_dict()
    built = build_model(method, str(checkpoint))
    assert type(built.encoder) is type(load_contrastive_model(checkpoint).encoder)
    assert set(built.encoder.state_dict()) == set(trained)
    for name, tensor in built.encoder.state_dict().items():
        assert torch.equal(tensor, trained[name]), name
    assert built.encoder.config._attn_implementation == "sdpa"


def test_a_checkpoint_is_trained_from_its_encoder_with_a_warning(finished_run, tmp_path, sts_fixture_dir, capsys,
                                                                 caplog):
    """The new run's "before" score is the checkpoint's own dev score (not the raw backbone's), and the log says
    that this starts a new run from the encoder where ``--resume_from_checkpoint`` would continue that one."""
    checkpoint = finished_run / "checkpoint-2"
    out = tmp_path / "second"
    with caplog.at_level(logging.WARNING, logger="cse_repro"):
        result = run(["--method", "simcse", "--model_name_or_path", str(checkpoint), "--train_file",
                      str(tmp_path / "corpus.txt"), "--senteval_dir", str(sts_fixture_dir), "--max_steps", "1",
                      "--eval_steps", "1", "--output_dir", str(out)], capsys)
    assert result.code == 0, result.err
    assert f"--model_name_or_path {checkpoint} is a training checkpoint of a simcse run" in caplog.text
    assert f"--resume_from_checkpoint {checkpoint} would continue that run instead" in caplog.text
    assert f"warning: --model_name_or_path {checkpoint} is a training checkpoint" in result.out  # the summary's
    first = dev_scores(finished_run)
    assert dev_scores(out)[0] == first[2] != first[0]


@pytest.mark.parametrize("folder", ["", "export"])
def test_a_finished_runs_folder_is_trained_from_its_export(folder, finished_run, tmp_path, sts_fixture_dir, capsys,
                                                           caplog):
    """A run's ``--output_dir`` (or its ``export/``) held no model: "the folder has no config.json". It is now read
    as its export, which holds the best checkpoint's encoder: the new run's "before" score is that checkpoint's."""
    out = tmp_path / "second"
    with caplog.at_level(logging.WARNING):
        result = run(["--method", "simcse", "--model_name_or_path", str(finished_run / folder), "--train_file",
                      str(tmp_path / "corpus.txt"), "--senteval_dir", str(sts_fixture_dir), "--max_steps", "1",
                      "--eval_steps", "1", "--output_dir", str(out)], capsys)
    assert result.code == 0, result.err
    assert f"training from its export {finished_run / 'export' / 'sentence-transformers'}" in caplog.text
    first = dev_scores(finished_run)
    best = json.loads((finished_run / "all_results.json").read_text())["best_stsb_spearman"]
    assert dev_scores(out)[0] == pytest.approx(best, abs=1e-9) and best != first[0]


def test_an_unfinished_runs_folder_is_refused_naming_its_newest_checkpoint(finished_run, tmp_path, capsys):
    for leftover in ("export", "all_results.json", "run_arguments.json", "trainer_state.json"):
        target = finished_run / leftover
        if target.is_dir():
            import shutil

            shutil.rmtree(target)
        else:
            target.unlink(missing_ok=True)
    newest = sorted(finished_run.glob("checkpoint-*"), key=lambda path: int(path.name.split("-")[1]))[-1]
    result = run(["--method", "simcse", "--model_name_or_path", str(finished_run), "--train_file",
                  str(tmp_path / "corpus.txt"), "--eval_strategy", "no", "--max_steps", "1", "--output_dir",
                  str(tmp_path / "second")], capsys)
    assert result.code == 1
    assert (f"but no export/ (the run did not finish): train from a checkpoint's encoder, e.g. --model_name_or_path "
            f"{newest}, or continue that run with --resume_from_checkpoint {newest}") in result.err
    assert "Traceback" not in result.err and not (tmp_path / "second").exists()


def test_an_older_sentence_transformers_folder_trains_from_its_transformer_module(tmp_path, backbone,
                                                                                   sts_fixture_dir, capsys, caplog):
    """An older sentence-transformers save keeps its transformer in a module folder (``0_Transformer/``) that
    ``modules.json`` names, with no ``config.json`` at the root: refused ("the folder has no config.json"), though
    ``python -m eval`` reads it. The run trains from that module folder, saying so; its "before" score is the
    transformer's own."""
    import shutil

    folder = tmp_path / "old-st"
    shutil.copytree(backbone, folder / "0_Transformer")
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 32,
                                                                  "pooling_mode_mean_tokens": True}))
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "0_Transformer", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    common = ["--method", "simcse", "--train_file", str(tiny_corpus(tmp_path / "corpus.txt")), "--senteval_dir",
              str(sts_fixture_dir), "--max_steps", "1", "--eval_steps", "1"]
    with caplog.at_level(logging.WARNING, logger="cse_repro"):
        result = run([*common, "--model_name_or_path", str(folder), "--output_dir", str(tmp_path / "old")], capsys)
    assert result.code == 0, result.err
    assert (f"--model_name_or_path {folder} is a sentence-transformers folder whose transformer is in "
            f"{folder / '0_Transformer'}: training from that folder") in caplog.text
    direct = run([*common, "--model_name_or_path", str(backbone), "--output_dir", str(tmp_path / "direct")], capsys)
    assert direct.code == 0, direct.err
    assert dev_scores(tmp_path / "old")[0] == dev_scores(tmp_path / "direct")[0]


def test_the_trainer_finds_the_tokenizers_special_tokens_in_the_backbones_config(backbone):
    """The Trainer aligns the model's text config with the tokenizer's pad/bos/eos ids before training. It read the
    contrastive config, which has none, set one there and warned on every run: "The tokenizer has new PAD/BOS/EOS
    tokens that differ from the model config ... Updated tokens: {'pad_token_id': 0}". The text config is now the
    backbone's, which has them."""
    from transformers import AutoTokenizer

    model = build_model("simcse", str(backbone))
    assert model.config.get_text_config() is model.config.encoder_config
    capture_logger = transformers_logging.get_logger("transformers.trainer_utils")
    with CaptureLogger(capture_logger) as captured:
        align_special_tokens(model, AutoTokenizer.from_pretrained(str(backbone)))
    assert "PAD/BOS/EOS" not in captured.out
    assert "pad_token_id" not in model.config.to_diff_dict()
