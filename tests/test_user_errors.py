"""Bad input through the real entry points: one message (what, where, what to do), the documented exit status, no
traceback, and nothing written or lost (docs/errors.md lists every case)."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import run_diffcse
import run_unsup
from tests.cli import in_process, subprocess_run
from tests.tiny import FAST_TRAINING_ARGS, tiny_corpus


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    return tiny_corpus(tmp_path / "corpus.txt")


def base_args(backbone: Path, corpus: Path, out: Path) -> list[str]:
    return ["--model_name_or_path", str(backbone), "--train_file", str(corpus), "--output_dir", str(out),
            "--max_steps", "2", *FAST_TRAINING_ARGS]


# ------------------------------------------------------------------------------------------ the process itself
def test_a_user_error_is_one_line_without_traceback_unless_debugging(tmp_path):
    plain = subprocess_run("run_unsup.py", ["--temp", "1e-12"], cwd=tmp_path)
    assert plain.code == 2, plain.err
    assert plain.err.strip().splitlines() == [
        "run_unsup.py: error: --temp 1e-12 is outside the valid range [0.001, 10]: the logits are cos/temp, and this "
        "temperature makes them overflow (the run trains to NaN). The papers use 0.05."]
    debug = subprocess_run("run_unsup.py", ["--temp", "1e-12"], cwd=tmp_path, env={"CSE_DEBUG": "1"})
    assert debug.code != 0 and "Traceback" in debug.err and "UsageError" in debug.err


def test_no_arguments_say_what_is_missing_and_point_at_the_quickstart(tmp_path, sts_fixture_dir):
    result = subprocess_run("run_unsup.py", [], cwd=tmp_path, env={"SENTEVAL_DIR": str(sts_fixture_dir)})
    assert result.code == 1
    assert "Traceback" not in result.err
    assert "--train_file data/wiki1m_for_simcse.txt: no such file" in result.err
    assert "--model_name_or_path bert-base-uncased: no such local folder, and not in the Hugging Face cache" in result.err
    assert "bash scripts/quickstart.sh" in result.err
    assert not (tmp_path / "outputs").exists()


# ------------------------------------------------------------------------------------------ parse time (exit 2)
@pytest.mark.parametrize("argv, message", [
    (["--temp", "1e-12"], "--temp 1e-12 is outside the valid range [0.001, 10]"),
    (["--temp", "50"], "--temp 50 is outside the valid range [0.001, 10]"),
    (["--lerning_rate", "1e-5"], "unknown argument(s): --lerning_rate 1e-5 (did you mean --learning_rate?)"),
    (["--eval_strategy", "no", "--save_strategy", "steps", "--load_best_model_at_end", "true"],
     "--load_best_model_at_end requires the save and eval strategy to match"),
    (["--torch_compile_mode", "turbo"], "--torch_compile_mode 'turbo': choose one of default, reduce-overhead"),
    # the Trainer looked the metric up at the first evaluation only, and stopped there with a KeyError traceback
    (["--metric_for_best_model", "stsb"], "--metric_for_best_model stsb: the dev evaluation reports stsb_spearman, "
                                          "sickr_spearman, avg_sts; pick one of them"),
    (["--metric_for_best_model", "eval_MR"], "reports stsb_spearman, sickr_spearman, avg_sts (the transfer tasks' "
                                             "with --eval_transfer true)"),
])
def test_invalid_flags_are_refused_at_parse_time(argv, message, capsys, tmp_path):
    result = in_process(run_unsup.main, argv + ["--output_dir", str(tmp_path / "out")], capsys)
    assert result.code == 2
    assert result.err.startswith("run_unsup.py: error: ") and message in result.err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("integration, message", [
    ("tensorbord", "--report_to tensorbord: not a logging integration; choose among azure_ml, "),
    ("tensorboard", "--report_to tensorboard: its package is not installed here, so the Trainer could not start; "
                    "pip install tensorboard, or drop --report_to"),
    ("wandb", "--report_to wandb: its package is not installed here"),
])
def test_a_logging_integration_that_cannot_start_is_refused_at_parse_time(integration, message, backbone, corpus,
                                                                          tmp_path, capsys, monkeypatch):
    """The Trainer starts its ``--report_to`` callbacks after the model and the corpus are loaded, and one whose
    package is missing (tensorboard, optional here) raised there with a traceback; an unknown name likewise."""
    from transformers.integrations import integration_utils

    monkeypatch.setattr(integration_utils, "get_available_reporting_integrations", lambda: [])  # none installed
    result = in_process(run_unsup.main, base_args(backbone, corpus, tmp_path / "out") + ["--report_to", integration],
                        capsys)
    assert result.code == 2 and "Traceback" not in result.err
    assert result.err.startswith(f"run_unsup.py: error: {message}"), result.err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["nonsense", "cse_row_dropout"])  # unknown; this repo's own, installed by it
def test_an_attention_transformers_does_not_know_is_refused_at_parse_time(name, backbone, corpus, tmp_path, capsys):
    """The loader fell back to the architecture's default attention when transformers refused the name, so a typo
    trained with sdpa and said nothing."""
    result = in_process(run_unsup.main, base_args(backbone, corpus, tmp_path / "out") + ["--attn_implementation",
                                                                                         name], capsys)
    assert result.code == 2 and "Traceback" not in result.err
    assert result.err.startswith(f"run_unsup.py: error: --attn_implementation {name!r}: choose one of eager, "), (
        result.err)
    assert "sdpa" in result.err and "cse_row_dropout, " not in result.err and not (tmp_path / "out").exists()


def test_an_attention_that_cannot_load_here_is_said_not_silently_replaced(backbone, corpus, tmp_path, capsys,
                                                                          caplog):
    """``--attn_implementation flash_attention_2`` without its package (any CPU machine): the backbone falls back to
    its default attention, which was logged at INFO only; asked for by name, its absence is a warning."""
    from transformers.utils.import_utils import is_flash_attn_2_available

    if is_flash_attn_2_available():
        pytest.skip("flash-attn is installed here")
    with caplog.at_level("INFO", logger="eval.backbone"):
        result = in_process(run_unsup.main, base_args(backbone, corpus, tmp_path / "out") + [
            "--attn_implementation", "flash_attention_2", "--eval_strategy", "no", "--max_steps", "1"], capsys)
    assert result.code == 0, result.err
    fallbacks = [record for record in caplog.records if "attention unavailable" in record.getMessage()]
    assert fallbacks and all(record.levelname == "WARNING" for record in fallbacks)
    assert fallbacks[0].getMessage().startswith("flash_attention_2 attention unavailable for ")


@pytest.mark.parametrize("script, argv, message", [
    # the typo guess was "--generator_name ... (did you mean --temperature?)"
    ("run_unsup", ["--generator_name", "g"], "unknown argument(s): --generator_name g; --generator_name is a flag of "
                                             "run_diffcse.py (DiffCSE); --help lists"),
    ("run_diffcse", ["--dup_rate", "0.3"], "unknown argument(s): --dup_rate 0.3; --dup_rate is a flag of "
                                           "run_unsup.py; --help lists"),
    ("run_diffcse", ["--method", "simcse"], "--method is a flag of run_unsup.py (run_diffcse.py trains DiffCSE only)"),
    ("run_unsup", ["--method", "diffcse"], "--method 'diffcse': choose one of simcse, sup_simcse, esimcse, simcse_pp, "
                                           "s_simcse, promptbert (DiffCSE trains with run_diffcse.py: run_diffcse.py "
                                           "--generator_name distilbert-base-uncased)"),
    ("run_unsup", ["--lerning_rate", "1"], "(did you mean --learning_rate?); --help lists"),  # a typo stays a typo
])
def test_a_flag_of_the_other_training_script_names_that_script(script, argv, message, capsys, tmp_path):
    main = run_unsup.main if script == "run_unsup" else run_diffcse.main
    result = in_process(main, argv + ["--output_dir", str(tmp_path / "out")], capsys, prog=f"{script}.py")
    assert result.code == 2 and result.err.startswith(f"{script}.py: error: "), result.err
    assert message in result.err, result.err
    assert not (tmp_path / "out").exists()


def test_invalid_method_settings_and_config_files_are_usage_errors(backbone, corpus, tmp_path, capsys):
    args = base_args(backbone, corpus, tmp_path / "out") + ["--eval_strategy", "no"]
    pooler = in_process(run_unsup.main, args + ["--pooler_type", "nope"], capsys)
    assert pooler.code == 2 and "run_unsup.py: error: --pooler_type 'nope': choose one of cls," in pooler.err
    config = tmp_path / "run.yaml"
    config.write_text("- a list\n")
    listed = in_process(run_unsup.main, [str(config)], capsys)
    assert listed.code == 2 and f"{config}: expected a mapping of argument names to values, got list" in listed.err
    profile = in_process(run_diffcse.main, ["--task_profile", "nope"], capsys, prog="run_diffcse.py")
    assert profile.code == 2 and "--task_profile 'nope'; choose one of sts, transfer" in profile.err
    assert not (tmp_path / "out").exists()


def test_a_config_file_s_nulls_are_defaults_and_a_key_given_twice_is_refused(backbone, corpus, tmp_path, capsys,
                                                                              monkeypatch):
    """Through run_unsup.py: ``export_dir: null`` became the text 'None' and the run exported to ./None; a YAML null
    now means "not given", as HfArgumentParser reads it. A key given twice (or a setting under two of its names,
    ``temp`` and ``temperature``) trained the last value silently: refused in one line, naming it."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    config = tmp_path / "run.yaml"
    config.write_text(f"model_name_or_path: {backbone}\ntrain_file: {corpus}\noutput_dir: {out}\nmax_steps: 1\n"
                      "eval_strategy: 'no'\nexport_dir: null\nrun_name: ~\ncache_dir:\n")
    trained = in_process(run_unsup.main, [str(config), *FAST_TRAINING_ARGS], capsys)
    assert trained.code == 0, trained.err
    assert (out / "export" / "hf" / "model.safetensors").is_file() and not (tmp_path / "None").exists()
    for text, line in (("temp: 0.05\nlearning_rate: 3e-5\ntemp: 0.1\n", "line 3: 'temp' is given twice"),
                       ("temp: 0.05\ntemperature: 0.1\n",
                        "'temp' and 'temperature' name one setting, given 0.05 and 0.1")):
        config.write_text(text)
        refused = in_process(run_unsup.main, [str(config)], capsys)
        assert refused.code == 2, refused.err
        separator = ", " if line.startswith("line") else ": "
        assert refused.err.strip().splitlines()[-1].startswith(f"run_unsup.py: error: {config}{separator}{line}")


def test_eval_strategy_no_alone_trains_and_exports(backbone, corpus, tmp_path, capsys):
    """The hint 'pass --eval_strategy no' is enough: save_strategy and load_best_model_at_end follow it."""
    out = tmp_path / "out"
    result = in_process(run_unsup.main, base_args(backbone, corpus, out) + [
        "--eval_strategy", "no", "--save_strategy", "steps", "--save_steps", "1"], capsys)
    assert result.code == 0, result.err
    assert (out / "checkpoint-2").is_dir() and (out / "export" / "hf" / "model.safetensors").is_file()
    assert "no STS-B dev evaluation (--eval_strategy no): the export is the final model" in result.out


def test_a_contrast_batch_of_one_is_refused_with_the_minimum(backbone, corpus, tmp_path, capsys):
    result = in_process(run_unsup.main, base_args(backbone, corpus, tmp_path / "out") + [
        "--eval_strategy", "no", "--per_device_train_batch_size", "1"], capsys)
    assert result.code == 2
    assert "--per_device_train_batch_size 1 on 1 process(es)" in result.err and "minimum is 2" in result.err
    assert not (tmp_path / "out" / "export").exists()


@pytest.mark.parametrize("method, extra, reason", [
    ("simcse", ["--cache_chunk_size", "4"], "with --cache_chunk_size, CUDA graphs replay one graph per chunk"),
    ("simcse", ["--gradient_accumulation_steps", "2"], "with --gradient_accumulation_steps 2, each micro-batch's"),
])
def test_cuda_graphs_asked_for_where_they_are_refused_stop_the_run_with_the_reason(method, extra, reason, backbone,
                                                                                     corpus, tmp_path, capsys):
    """``--torch_compile_mode reduce-overhead`` (CUDA graphs) with the cached step or with gradient accumulation: one
    line with the reason and the fix, exit 2, nothing exported."""
    result = in_process(run_unsup.main, base_args(backbone, corpus, tmp_path / "out") + [
        "--method", method, "--eval_strategy", "no", "--torch_compile", "true", "--torch_compile_mode",
        "reduce-overhead", *extra], capsys)
    assert result.code == 2, result.err
    assert f"--torch_compile_mode reduce-overhead: {reason}" in result.err
    assert "leave --torch_compile_mode unset" in result.err and "Traceback" not in result.err
    assert not (tmp_path / "out" / "export").exists()


# ------------------------------------------------------------------------------------------ missing inputs (exit 1)
def truncated_checkpoint(folder: Path, *, state: bool = True) -> Path:
    """A checkpoint folder whose model.safetensors lost its end (an interrupted save), with or without its state."""
    folder.mkdir(parents=True)
    save_file({"weight": torch.zeros(1000)}, folder / "model.safetensors")
    (folder / "full_size").write_text(str((folder / "model.safetensors").stat().st_size))
    with (folder / "model.safetensors").open("r+b") as handle:
        handle.truncate(1000)
    if state:
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": 3}))
    return folder


@pytest.mark.parametrize("case", ["missing_model", "not_a_model_folder", "truncated_weights", "no_trainer_state",
                                  "no_checkpoint_folder"])
def test_missing_or_broken_inputs_name_what_and_where(case, backbone, corpus, tmp_path, capsys):
    out = tmp_path / "out"
    args = base_args(backbone, corpus, out) + ["--eval_strategy", "no"]
    if case == "missing_model":
        args += ["--model_name_or_path", str(tmp_path / "nope")]
        expected = f"--model_name_or_path {tmp_path / 'nope'}: no such folder (and not a Hub model name)"
    elif case == "not_a_model_folder":
        (tmp_path / "empty").mkdir()
        args += ["--model_name_or_path", str(tmp_path / "empty")]
        expected = "the folder has no config.json, so it is not a saved model"
    elif case == "truncated_weights":
        checkpoint = truncated_checkpoint(tmp_path / "old" / "checkpoint-3")
        args += ["--resume_from_checkpoint", str(checkpoint)]
        expected = (f"{checkpoint / 'model.safetensors'} is truncated "
                    f"(1000 bytes of {(checkpoint / 'full_size').read_text()})")
    elif case == "no_trainer_state":
        checkpoint = truncated_checkpoint(tmp_path / "old" / "checkpoint-3", state=False)
        args += ["--resume_from_checkpoint", str(checkpoint)]
        expected = f"--resume_from_checkpoint {checkpoint}: an incomplete checkpoint (missing trainer_state.json, "
    else:
        args += ["--resume_from_checkpoint", str(tmp_path / "old" / "checkpoint-7")]
        expected = f"--resume_from_checkpoint {tmp_path / 'old' / 'checkpoint-7'}: no such folder"
    result = in_process(run_unsup.main, args, capsys)
    assert result.code == 1
    assert result.err.startswith("run_unsup.py: error: ") and expected in result.err, result.err
    assert not out.exists()


@pytest.mark.parametrize("suffix, module, name", [(".gz", "gzip", "gzip"), (".bz2", "bz2", "bzip2"),
                                                  (".xz", "lzma", "xz")])
def test_a_truncated_compressed_corpus_is_named_with_the_fix(suffix, module, name, backbone, corpus, tmp_path,
                                                             capsys):
    """An interrupted download of ``wiki1m_for_simcse.txt.gz``: the run ended in a traceback, "EOFError: Compressed
    file ended before the end-of-stream marker was reached", naming neither the file nor a fix."""
    import importlib

    archive = corpus.with_name(corpus.name + suffix)
    whole = importlib.import_module(module).compress(corpus.read_bytes())
    archive.write_bytes(whole[:len(whole) // 2])
    out = tmp_path / "out"
    result = in_process(run_unsup.main, base_args(backbone, archive, out) + ["--eval_strategy", "no"], capsys)
    assert result.code == 1 and "Traceback" not in result.err, result.err
    assert result.err.count("error: ") == 1 and result.err.strip().splitlines()[-1] == (  # after the progress bars
        f"run_unsup.py: error: {archive}: the {name} archive is truncated or corrupt (Compressed file ended before "
        f"the end-of-stream marker was reached); download it again, or compress the plain corpus again")
    assert not out.exists()


def test_corpora_joined_with_cat_and_lines_cut_by_a_lone_return_are_not_trained_unseen(backbone, corpus, tmp_path,
                                                                                         capsys):
    """Through run_unsup.py: a CSV corpus joined from two with ``cat`` (its second header mid-file) is refused naming
    the line; a text corpus whose lines hold lone carriage returns trains, and its summary says how many sentences they
    cut (the log said nothing before)."""
    sentences = corpus.read_text().splitlines()
    joined = tmp_path / "joined.csv"
    joined.write_text("text\n" + "\n".join(sentences[:8]) + "\ntext\n" + "\n".join(sentences[8:]) + "\n")
    out = tmp_path / "out"
    refused = in_process(run_unsup.main, base_args(backbone, joined, out) + ["--eval_strategy", "no"], capsys)
    assert refused.code == 1 and refused.err.strip().splitlines()[-1] == (
        f"run_unsup.py: error: {joined}, line 10: the row repeats the header 'text' (files joined with cat?), which "
        f"would train as a sentence; delete that line (the header belongs on line 1 only), or join the files with "
        f"`tail -n +2` on all but the first")
    assert not out.exists()
    returns = tmp_path / "returns.txt"
    returns.write_text("\n".join(sentences[:4]) + "\n" + "\r".join(sentences[4:7]) + "\n" + "\n".join(sentences[7:]))
    trained = in_process(run_unsup.main, base_args(backbone, returns, out) + ["--eval_strategy", "no"], capsys)
    assert trained.code == 0, trained.err
    summary = trained.out.split("run summary ===", 1)[1]
    assert (f"warning: {returns}: 2 lone carriage returns (\\r without \\n; the first on line 5) each end a "
            "sentence") in summary


def test_a_bucketed_corpus_trained_under_random_sampling_is_said_to_mix_its_buckets(backbone, corpus, tmp_path,
                                                                                     capsys):
    """Through run_unsup.py: ESimCSE Table 6's bucketed corpus under the Trainer's default random sampling trained on
    mixed batches without a word; its summary now says so, and with --train_sampling_strategy sequential and the
    batch it was bucketed for (8) nothing is said."""
    from data.length_buckets import main as bucket_main

    bucketed = bucket_main(["--train_file", str(corpus), "--output", str(tmp_path / "bucketed.txt"),
                            "--batch_size", "8"])
    said = f"warning: --train_file {bucketed} is length-bucketed for batches of 8 sentences"
    for flags, warned in (([], True), (["--train_sampling_strategy", "sequential"], False)):
        out = tmp_path / f"out{len(flags)}"
        trained = in_process(run_unsup.main, base_args(backbone, bucketed, out) + ["--eval_strategy", "no", *flags],
                             capsys)
        assert trained.code == 0, trained.err
        assert (said in trained.out.split("run summary ===", 1)[1]) == warned


def test_a_missing_generator_is_named(backbone, corpus, tmp_path, capsys):
    result = in_process(run_diffcse.main, base_args(backbone, corpus, tmp_path / "out") + [
        "--eval_strategy", "no", "--generator_name", str(tmp_path / "generator")], capsys, prog="run_diffcse.py")
    assert result.code == 1
    assert f"run_diffcse.py: error: --generator_name {tmp_path / 'generator'}: no such folder" in result.err


@pytest.mark.parametrize("script, flags", [
    ("run_diffcse", ["--generator_name"]),
    ("run_unsup", ["--method", "esimcse", "--length_extension", "mlm_prediction", "--insert_mlm_name_or_path"]),
])
def test_a_masked_lm_without_its_head_is_refused(script, flags, backbone, corpus, tmp_path, capsys):
    """A plain encoder's folder (the tiny BertModel, as ``bert-base-uncased`` saved by ``BertModel``) named as
    DiffCSE's generator or ESimCSE's insertion filler loaded as a masked LM with a random head (transformers' load
    report, then training on its noise); refused, naming the missing tensors. A real masked LM still trains."""
    from tests.tiny import save_tiny_generator

    main, prog = {"run_diffcse": (run_diffcse.main, "run_diffcse.py"), "run_unsup": (run_unsup.main, "run_unsup.py")}[
        script]
    common = base_args(backbone, corpus, tmp_path / "out") + ["--eval_strategy", "no", *flags]
    result = in_process(main, common + [str(backbone)], capsys, prog=prog)
    assert result.code == 1 and "Traceback" not in result.err
    assert (f"{prog}: error: {flags[-1]} {backbone}: not a trained masked LM: its checkpoint lacks 6 tensor(s) of "
            "BertForMaskedLM (cls.predictions.bias, ") in result.err, result.err
    assert "distilbert-base-uncased for bert-base-uncased" in result.err and not (tmp_path / "out").exists()
    trained = in_process(main, common + [str(save_tiny_generator(tmp_path / "mlm"))], capsys, prog=prog)
    assert trained.code == 0, trained.err


@pytest.mark.parametrize("flags, message", [
    (["--method", "s_simcse"], "--gradient_checkpointing cannot be combined with per-row dropout from the generator "
                               "stream (S-SimCSE's --dropout_dist, SimCSE++'s --off_dropout)"),
    (["--method", "simcse_pp", "--off_dropout", "true"], "--gradient_checkpointing cannot be combined with per-row "
                                                         "dropout"),
    (["--method", "promptbert", "--dropout_masks", "row_seeded"],
     "--gradient_checkpointing with PromptBERT's template denoising needs --dropout_masks stream"),
])
def test_gradient_checkpointing_that_would_train_another_network_is_refused_before_loading_the_corpus(
        flags, message, backbone, corpus, tmp_path, capsys):
    """These refusals were the model's ValueError, raised inside ``Trainer.train()`` (after the corpus loaded and the
    'before' evaluation ran) with a traceback: now one line, exit 2, nothing written."""
    result = in_process(run_unsup.main, base_args(backbone, corpus, tmp_path / "out") + [
        "--eval_strategy", "no", "--gradient_checkpointing", "true", *flags], capsys)
    assert result.code == 2 and "Traceback" not in result.err
    assert result.err.splitlines()[-1].startswith(f"run_unsup.py: error: {message}"), result.err
    assert not (tmp_path / "out").exists()


def test_weights_that_lack_tensors_of_their_config_are_refused_by_training_and_evaluation(backbone, corpus, tmp_path,
                                                                                          sts_fixture_dir, capsys):
    """A folder whose config.json describes more than its weights hold (here 3 layers over a 2-layer checkpoint: a
    config copied from another run, an interrupted save) loaded with the missing layer initialised at random, a load
    report, and trained (or scored) it; refused, naming the tensors, by both entry points, before anything is
    written. The pooler alone may be missing: training never reads it."""
    from eval.cli import main as evaluate

    folder = Path(shutil.copytree(backbone, tmp_path / "three_layers"))
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 3}))
    result = in_process(run_unsup.main, base_args(folder, corpus, tmp_path / "out") + ["--eval_strategy", "no"],
                        capsys)
    message = (f"--model_name_or_path {folder}: its weights lack 16 of BertModel's tensors "
               "(encoder.layer.2.attention.output.LayerNorm.bias, ")
    assert result.code == 1 and "Traceback" not in result.err
    assert result.err.splitlines()[-1].startswith(f"run_unsup.py: error: {message}"), result.err  # after the bar
    assert not (tmp_path / "out").exists()
    with pytest.raises(SystemExit) as exited:
        evaluate(["--model_name_or_path", str(folder), "--mode", "dev", "--task_set", "sts", "--device", "cpu",
                  "--senteval_dir", str(sts_fixture_dir)])
    assert exited.value.code == 1 and capsys.readouterr().err.splitlines()[-1].startswith(f"error: {message}")


# ------------------------------------------------------------------------------------------ output folders
def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_folder_holding_a_run_is_refused_until_resumed_or_overwritten(backbone, corpus, tmp_path, capsys):
    out = tmp_path / "out"
    common = base_args(backbone, corpus, out) + ["--eval_strategy", "no", "--save_strategy", "steps",
                                                 "--save_steps", "2"]
    assert in_process(run_unsup.main, common, capsys).code == 0
    exported = out / "export" / "hf" / "model.safetensors"
    before = {p.relative_to(out): digest(p) for p in out.rglob("*") if p.is_file()}

    again = in_process(run_unsup.main, common + ["--seed", "7"], capsys)
    assert again.code == 1
    assert f"--output_dir {out} holds a finished run (checkpoint-2, all_results.json" in again.err
    assert "pass --overwrite_output_dir to delete that run first" in again.err
    assert {p.relative_to(out): digest(p) for p in out.rglob("*") if p.is_file()} == before  # nothing lost

    unfinished = tmp_path / "unfinished"
    shutil.copytree(out / "checkpoint-2", unfinished / "checkpoint-2")
    refused = in_process(run_unsup.main, common + ["--output_dir", str(unfinished)], capsys)
    assert refused.code == 1
    assert f"Resume it with --resume_from_checkpoint {unfinished / 'checkpoint-2'}" in refused.err

    replaced = in_process(run_unsup.main, common + ["--seed", "7", "--overwrite_output_dir"], capsys)
    assert replaced.code == 0, replaced.err
    assert digest(exported) != before[exported.relative_to(out)]  # a new run (another seed) replaced the old one


# ------------------------------------------------------------------------------------------ SentEval data
def senteval_copy(senteval_dir: Path, root: Path) -> Path:
    """STS-B and SICK of the real data, copied (tests never touch the shared folder)."""
    (root / "STS").mkdir(parents=True)
    shutil.copytree(senteval_dir / "STS" / "STSBenchmark", root / "STS" / "STSBenchmark")
    shutil.copytree(senteval_dir / "SICK", root / "SICK")
    return root


def test_real_senteval_files_have_the_tabled_line_counts(senteval_dir, monkeypatch):
    from eval.senteval_sizes import SENTEVAL_LINE_COUNTS
    from eval.sts import STS_TASKS, load_sts

    monkeypatch.delenv("SENTEVAL_CHECK_SIZES", raising=False)
    for task in STS_TASKS:  # every file, checked against the table (raises on a mismatch)
        for split in (("train", "dev", "test") if task in ("STSBenchmark", "SICKRelatedness") else ("test",)):
            assert len(load_sts(task, senteval_dir, split)) > 0
    assert len(SENTEVAL_LINE_COUNTS) == 24 + 6


def test_a_truncated_dev_file_is_refused_before_training_and_by_eval(senteval_dir, backbone, corpus, tmp_path,
                                                                       capsys, monkeypatch):
    import eval.cli

    monkeypatch.delenv("SENTEVAL_CHECK_SIZES", raising=False)
    root = senteval_copy(senteval_dir, tmp_path / "senteval")
    dev = root / "STS" / "STSBenchmark" / "sts-dev.csv"
    dev.write_text("".join(dev.read_text(encoding="utf-8").splitlines(keepends=True)[:857]), encoding="utf-8")
    message = f"{dev} has 857 lines but SentEval's file has 1500: it is truncated or not SentEval's file"

    out = tmp_path / "out"
    result = in_process(run_unsup.main, base_args(backbone, corpus, out) + ["--senteval_dir", str(root)], capsys)
    assert result.code == 1 and message in result.err
    assert "Checked before training" in result.err and not out.exists()

    evaluation = ["--model_name_or_path", str(backbone), "--pooler", "avg", "--mode", "dev", "--senteval_dir",
                  str(root)]
    refused = in_process(eval.cli.main, evaluation, capsys, prog="python -m eval")
    assert refused.code == 1 and message in refused.err
    own_files = in_process(eval.cli.main, evaluation + ["--no_check_senteval_sizes"], capsys, prog="python -m eval")
    assert own_files.code == 0 and "STSB" in own_files.out  # a user's own STS-format files still evaluate


def test_a_missing_sick_folder_is_refused_before_the_first_step(sts_fixture_dir, backbone, corpus, tmp_path,
                                                                 capsys):
    shutil.rmtree(sts_fixture_dir / "SICK")
    out = tmp_path / "out"
    result = in_process(run_unsup.main, base_args(backbone, corpus, out) + ["--senteval_dir", str(sts_fixture_dir)],
                        capsys)
    assert result.code == 1
    assert f"SentEval file not found: {sts_fixture_dir / 'SICK' / 'SICK_trial.txt'}" in result.err
    assert not out.exists()  # refused before any training step (nothing trained, nothing lost)
