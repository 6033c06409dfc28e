"""Backbones that cannot work are refused before anything trains, through the real entry points (issue 33, item 2
and the backbone half of item 4): a folder without tokenizer files, a causal backbone under a position-0 pooler, a
``--max_seq_length`` (plus PromptBERT's template) past the position table, a truncated ``model.safetensors``. One
line, a non-zero exit, no traceback; docs/errors.md lists the messages."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from transformers import AutoModel, AutoModelForMaskedLM, GPT2Config

import eval.cli
import run_diffcse
import run_unsup
from tests.cli import in_process
from tests.test_user_errors import base_args
from tests.tiny import save_tiny_backbone, tiny_config, tiny_corpus, tiny_tokenizer


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    return tiny_corpus(tmp_path / "corpus.txt")


def without_tokenizer(folder: Path, model) -> Path:
    """``model`` saved alone: config.json and model.safetensors, no tokenizer files."""
    model.save_pretrained(folder)
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors"]
    return folder


def tiny_gpt2(folder: Path) -> Path:
    """A tiny random GPT-2 (causal) backbone with the tiny word-level tokenizer."""
    tokenizer = tiny_tokenizer(folder)
    config = GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=2, n_head=2, n_positions=64,
                        bos_token_id=2, eos_token_id=3, pad_token_id=0)
    AutoModel.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def truncated_weights(backbone: Path, folder: Path) -> tuple[Path, int]:
    """A copy of ``backbone`` whose model.safetensors lost its second half; returns the file and its full size."""
    shutil.copytree(backbone, folder)
    weights = folder / "model.safetensors"
    size = weights.stat().st_size
    with weights.open("r+b") as handle:
        handle.truncate(size // 2)
    return weights, size


EVAL = "error: "  # python -m eval's prefix


def one_line_error(result, prefix: str = "run_unsup.py: error: ") -> str:
    """The one error line (transformers' loading progress bars may come before it), and no traceback."""
    errors = [line for line in result.err.splitlines() if "error: " in line]
    assert len(errors) == 1 and errors[0].startswith(prefix) and "Traceback" not in result.err, result.err
    return errors[0]


# ------------------------------------------------------------------------------------------ tokenizer files
def test_a_folder_without_tokenizer_files_is_refused(corpus, tmp_path, capsys, sts_fixture_dir):
    folder = without_tokenizer(tmp_path / "no_tokenizer", AutoModel.from_config(tiny_config("bert", vocab_size=130)))
    out = tmp_path / "out"
    result = in_process(run_unsup.main, base_args(folder, corpus, out) + ["--eval_strategy", "no"], capsys)
    assert result.code == 1
    assert (f"--model_name_or_path {folder}: its tokenizer knows only its 5 special tokens" in one_line_error(result)
            and "so every word would become [UNK]: the folder has no tokenizer files" in result.err)
    assert not out.exists()

    evaluation = in_process(eval.cli.main, ["--model_name_or_path", str(folder), "--pooler", "avg", "--mode", "dev",
                                            "--senteval_dir", str(sts_fixture_dir)], capsys, prog="python -m eval")
    assert evaluation.code == 1 and "its tokenizer knows only its 5 special tokens" in one_line_error(evaluation, EVAL)


def test_a_generator_without_tokenizer_files_is_refused(backbone, corpus, tmp_path, capsys):
    generator = AutoModelForMaskedLM.from_config(tiny_config("distilbert", vocab_size=130))
    folder = without_tokenizer(tmp_path / "generator", generator)
    result = in_process(run_diffcse.main, base_args(backbone, corpus, tmp_path / "out") + [
        "--eval_strategy", "no", "--generator_name", str(folder)], capsys, prog="run_diffcse.py")
    assert result.code == 1
    assert (f"--generator_name {folder}: its tokenizer knows only its 5 special tokens"
            in one_line_error(result, "run_diffcse.py: error: "))


# ------------------------------------------------------------------------------------------ causal backbones
def test_a_causal_backbone_is_refused_under_a_position_zero_pooler_and_trains_with_avg(corpus, tmp_path, capsys):
    gpt2 = tiny_gpt2(tmp_path / "gpt2")
    out = tmp_path / "out"
    args = base_args(gpt2, corpus, out) + ["--eval_strategy", "no"]
    for pooler in ("cls", "cls_before_pooler"):
        refused = in_process(run_unsup.main, args + ["--pooler_type", pooler], capsys)
        assert refused.code == 2
        assert (f"--model_name_or_path {gpt2} (GPT2Model) is a causal (decoder-only) backbone: its position 0 sees "
                f"only the first token, so --pooler_type {pooler} would give every sentence that starts with the "
                "same token the same vector. Pass --pooler_type avg" in one_line_error(refused))
        assert not (out / "export").exists()
    trained = in_process(run_unsup.main, args + ["--pooler_type", "avg"], capsys)
    assert trained.code == 0, trained.err
    assert (out / "export" / "hf" / "model.safetensors").is_file()


def test_eval_refuses_a_position_zero_vector_of_a_causal_model(tmp_path, capsys, sts_fixture_dir):
    gpt2 = tiny_gpt2(tmp_path / "gpt2")
    result = in_process(eval.cli.main, ["--model_name_or_path", str(gpt2), "--pooler", "cls_before_pooler",
                                        "--mode", "dev", "--senteval_dir", str(sts_fixture_dir)], capsys,
                        prog="python -m eval")
    assert result.code == 1
    assert one_line_error(result, EVAL) == (
        f"error: {gpt2} (GPT2Model) is a causal (decoder-only) model: its position 0 sees only the first token, so "
        "--pooler cls_before_pooler gives every sentence that starts with the same token the same vector; use "
        "--pooler avg (the mean over the sentence's tokens)")


# ------------------------------------------------------------------------------------------ position table
@pytest.mark.parametrize("arch, method, max_seq_length, positions, why", [
    ("bert", "simcse", 71, 70, "max_position_embeddings 70"),
    ("roberta", "simcse", 70, 69, "max_position_embeddings 70 minus the 1 its position ids skip (roberta counts "
                                  "positions from pad_token_id + 1 = 1)"),
    ("bert", "promptbert", 61, 70, "max_position_embeddings 70"),  # 61 fits; + 10 template tokens does not
])
def test_max_seq_length_past_the_position_table_is_refused(arch, method, max_seq_length, positions, why, corpus,
                                                           tmp_path, capsys):
    """The corpus' lines are short, so before the check these runs trained and exited 0: the crash waited for a
    line of more than ``positions`` tokens. PromptBERT's views are the sentence's ``--max_seq_length`` tokens plus
    its template's."""
    from data.prompt_templates import tokenize_template
    from models.config import SETTINGS

    folder = save_tiny_backbone(tmp_path / arch, arch=arch) if arch != "bert" else save_tiny_backbone(tmp_path / arch)
    result = in_process(run_unsup.main, base_args(folder, corpus, tmp_path / "out") + [
        "--eval_strategy", "no", "--method", method, "--max_seq_length", str(max_seq_length)], capsys)
    tokenizer = tiny_tokenizer(tmp_path / "tokenizer")
    added = max(len(t.prefix) + len(t.suffix) for t in (tokenize_template(SETTINGS[name].default, tokenizer)
                for name in ("prompt_template", "prompt_template_positive"))) if method == "promptbert" else 0
    longest = (f"--max_seq_length {max_seq_length} + {added} tokens of PromptBERT's template = "
               f"{max_seq_length + added} positions" if added else f"--max_seq_length {max_seq_length}")
    assert result.code == 2
    assert (f"{longest} is more than --model_name_or_path {folder} reads: {positions} positions ({why}); a line "
            f"that long would stop the run with a tensor size error. Pass --max_seq_length {positions - added} or "
            "less" in one_line_error(result))
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------ truncated weights
def test_a_truncated_backbone_is_refused_by_training_and_eval(backbone, corpus, tmp_path, capsys, sts_fixture_dir):
    weights, size = truncated_weights(backbone, tmp_path / "truncated")
    folder = weights.parent
    expected = (f"{weights} is truncated ({size // 2} bytes of {size}), so the model cannot load (an interrupted "
                "download or save?); download or save it again")
    out = tmp_path / "out"
    result = in_process(run_unsup.main, base_args(folder, corpus, out) + ["--eval_strategy", "no"], capsys)
    assert result.code == 1
    assert one_line_error(result) == f"run_unsup.py: error: --model_name_or_path {folder}: {expected}"
    assert not out.exists()

    generator = in_process(run_diffcse.main, base_args(backbone, corpus, out) + [
        "--eval_strategy", "no", "--generator_name", str(folder)], capsys, prog="run_diffcse.py")
    assert generator.code == 1 and f"--generator_name {folder}: {expected}" in one_line_error(
        generator, "run_diffcse.py: error: ")

    evaluation = in_process(eval.cli.main, ["--model_name_or_path", str(folder), "--pooler", "avg", "--mode", "dev",
                                            "--senteval_dir", str(sts_fixture_dir)], capsys, prog="python -m eval")
    assert evaluation.code == 1
    assert one_line_error(evaluation, EVAL) == f"error: could not load '{folder}': {expected}"
