"""Every flag refuses a bad value cleanly: out-of-range and wrong-type values of every declared setting
(``models/config.py``) and of the data and Trainer flags a recipe sets (``command_line.arguments.FLAG_RANGES``, plus the
choice and switch flags listed below) exit 2 with ONE line naming the flag, the value and the fix, before anything is
loaded or written, through both training scripts' entry points.

The cases are generated from the declarations: each range gives a value just past each end (the end itself where
it is open), every number flag a word and NaN, every switch a word that is not true/false, every choice a name that
is not one. The model and corpus given do not exist, so a value that got past the parser would exit 1 (missing
inputs), not 2.
"""
from __future__ import annotations

import argparse
from typing import Any, Mapping

import pytest
from transformers.hf_argparser import string_to_bool

import run_diffcse
import run_unsup
from models.config import DIFFCSE, SETTINGS, UNSUP, number
from tests.cli import in_process, subprocess_run
from command_line.arguments import (FLAG_RANGES, CLTrainingArguments, DataArguments, MethodArguments, ModelArguments,
                                build_parser)
from command_line.diffcse_arguments import DiffCSEArguments, DiffCSETrainingArguments

SCRIPTS = {UNSUP: ("run_unsup.py", run_unsup.main, (ModelArguments, DataArguments, MethodArguments,
                                                    CLTrainingArguments)),
           DIFFCSE: ("run_diffcse.py", run_diffcse.main, (ModelArguments, DataArguments, DiffCSEArguments,
                                                         DiffCSETrainingArguments))}

#: Trainer flags of a recipe that take a choice or a switch (their numbers are in FLAG_RANGES).
TRAINER_CHOICES_AND_SWITCHES = ("eval_strategy", "save_strategy", "lr_scheduler_type", "eval_dtype", "use_cpu",
                                "evaluate_at_start", "load_best_model_at_end", "overwrite_output_dir")


def past_the_ends(declared: Mapping[str, Any], integer: bool) -> list[str]:
    """A value just outside each end of a declared range (the end itself where it is open)."""
    values = []
    for end, open_, step in (("low", "open_low", -1), ("high", "open_high", 1)):
        bound = declared[end]
        if bound is None:
            continue
        if declared[open_]:
            values.append(bound)
        else:
            values.append(bound + step if integer else bound + step * (abs(bound) / 2 or 0.5))
    return [number(int(v) if integer else float(v)) for v in values if v not in declared.get("also", ())]


def wrong_values(action: argparse.Action, declared: Mapping[str, Any] | None) -> list[str]:
    """The bad values of one flag: out of range, NaN, of the wrong type, not a choice."""
    if action.type is string_to_bool:
        return ["maybe"]
    if action.choices is not None or declared is not None and declared.get("choices"):
        return ["nope"]
    if action.type in (int, float):
        values = past_the_ends(declared, action.type is int) if declared and "low" in declared else []
        return values + (["nan"] if action.type is float else ["2.5"]) + ["abc"]
    return []


def cases(script: str) -> list[tuple[str, str, str]]:
    """(script, flag, value) for every bad value of every declared flag of ``script``."""
    parser = build_parser(SCRIPTS[script][2])
    actions = {action.dest: action for action in parser._actions}
    declared: dict[str, Mapping[str, Any] | None] = {
        name: field.metadata for name, field in SETTINGS.items() if script in field.metadata["scripts"]}
    declared.update(FLAG_RANGES)
    declared.update(dict.fromkeys(TRAINER_CHOICES_AND_SWITCHES))
    found = []
    for name, declaration in declared.items():
        action = actions[name]  # a declared flag the script does not have fails here
        found += [(script, action.option_strings[0], value) for value in wrong_values(action, declaration)]
    return found


CASES = cases(UNSUP) + cases(DIFFCSE)


def test_the_generated_cases_cover_every_declared_flag_of_both_scripts():
    flags = {(script, flag) for script, flag, _ in CASES}
    for script in SCRIPTS:
        assert {("--" + name) for name in FLAG_RANGES} <= {flag for s, flag in flags if s == script}
    assert ("run_unsup", "--temp") in flags and ("run_diffcse", "--masking_ratio") in flags
    assert ("run_unsup", "--dup_rate") in flags and ("run_diffcse", "--dup_rate") not in flags
    assert len(CASES) > 150


@pytest.mark.parametrize("script, flag, value", CASES, ids=[f"{s}{f}={v}" for s, f, v in CASES])
def test_a_bad_value_exits_2_with_one_line_before_anything_loads(script, flag, value, tmp_path, capsys):
    prog, main, _ = SCRIPTS[script]
    out = tmp_path / "out"
    result = in_process(main, ["--model_name_or_path", str(tmp_path / "no_model"), "--train_file",
                               str(tmp_path / "no_corpus.txt"), "--output_dir", str(out), flag, value], capsys,
                        prog=prog)
    assert result.code == 2, result.err
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith((f"{prog}: error: {flag} {value} ", f"{prog}: error: {flag} {value!r}:")), line
    assert any(fix in line for fix in ("outside the valid range", "expected ", "choose one of ")), line
    assert not out.exists()


@pytest.mark.parametrize("prog, argv, message", [
    ("run_unsup.py", ["--max_seq_length", "0"], "--max_seq_length 0 is outside the valid range [3, inf)"),
    ("run_diffcse.py", ["--learning_rate", "-1"], "--learning_rate -1 is outside the valid range (0, inf)"),
])
def test_the_process_exits_2_with_one_stderr_line(prog, argv, message, tmp_path):
    """The issue's cases as a user runs them (before: exit 1 and a 42-line traceback, exit 1 and a 29-line one)."""
    result = subprocess_run(prog, [*argv, "--output_dir", str(tmp_path / "out")], cwd=tmp_path)
    assert result.code == 2, result.err
    assert result.err.strip().splitlines() == [f"{prog}: error: {result.err.split(': error: ', 1)[1].strip()}"]
    assert message in result.err and "Traceback" not in result.err
    assert not (tmp_path / "out").exists()


def test_max_steps_minus_one_still_trains_by_epochs_and_other_negatives_are_refused(tmp_path, capsys):
    """-1 is the Trainer's "use --num_train_epochs"; before, ``--max_steps -5`` silently did the same."""
    refused = in_process(run_unsup.main, ["--max_steps", "-5", "--output_dir", str(tmp_path / "out")], capsys)
    assert refused.code == 2
    assert ("--max_steps -5 is outside the valid range [1, inf) or -1: -1 trains for --num_train_epochs, and no "
            "other value below 1 is a number of steps. The default is -1.") in refused.err
    allowed = in_process(run_unsup.main, ["--max_steps", "-1", "--model_name_or_path", str(tmp_path / "no_model"),
                                          "--output_dir", str(tmp_path / "out")], capsys)
    assert allowed.code == 1 and "--model_name_or_path" in allowed.err  # past the parser: the missing model


@pytest.mark.parametrize("prog", ["run_unsup.py", "run_diffcse.py"])
def test_the_smallest_valid_max_seq_length_trains(prog, backbone, tmp_path, capsys):
    """The range's low end is a real minimum: 3 tokens train ESimCSE's repetition and DiffCSE's insertion edit (the
    length-changing augmentations), as they do SimCSE, S-SimCSE, SimCSE++ and DiffCSE's other edits (checked by
    hand, issue 21)."""
    from tests.tiny import FAST_TRAINING_ARGS, save_tiny_generator, tiny_corpus

    common = ["--model_name_or_path", str(backbone), "--train_file", str(tiny_corpus(tmp_path / "c.txt")),
              "--max_steps", "1", "--eval_strategy", "no", "--output_dir", str(tmp_path / "out"),
              "--max_seq_length", "3", *FAST_TRAINING_ARGS]
    if prog == "run_diffcse.py":
        argv = common + ["--generator_name", str(save_tiny_generator(tmp_path / "gen")), "--rtd_edit", "insert"]
    else:
        argv = common + ["--method", "esimcse"]
    result = in_process(SCRIPTS[DIFFCSE if prog == "run_diffcse.py" else UNSUP][1], argv, capsys, prog=prog)
    assert result.code == 0, result.err[-2000:]
