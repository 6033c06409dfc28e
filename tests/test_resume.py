"""A resume never silently starts part of its state over (issue 33): through run_unsup.py / run_diffcse.py, a
checkpoint missing anything a resume loads (weights, optimizer, scheduler, RNG states, trainer state, a method's
own tensors) is refused in one line naming what is missing and the newest complete checkpoint; ``latest`` / ``true``
take the newest complete one; the "resume it" hint names only complete ones; a kill at any point of a save leaves
no folder that is accepted; the summary counts the steps the resumed process ran."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

import run_diffcse
import run_unsup
from tests.cli import in_process
from tests.tiny import FAST_TRAINING_ARGS, method_script, tiny_corpus, tiny_nli_csv
from tests.weights import assert_resumed_run_ends_on_the_uninterrupted_runs_weights
from trainers.checkpoints import (MARKER, checkpoint_problems, processes_change_error, write_completion_marker,
                                  written_processes)

#: What Trainer._save_checkpoint writes, in its order (save_model: config, weights, tokenizer, training
#: arguments; then optimizer, scheduler, RNG state, trainer state), before this repo's marker.
WRITE_ORDER = ["config.json", "model.safetensors", "tokenizer_config.json", "tokenizer.json", "training_args.bin",
               "optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json", "run_arguments.json"]


def run_args(backbone: Path, corpus: Path, out: Path, max_steps: int = 4) -> list[str]:
    return ["--model_name_or_path", str(backbone), "--train_file", str(corpus), "--output_dir", str(out),
            "--max_steps", str(max_steps), "--eval_strategy", "no", "--save_strategy", "steps", "--save_steps", "2",
            "--save_total_limit", "10", "--load_best_model_at_end", "false", *FAST_TRAINING_ARGS]


@pytest.fixture(scope="module")
def finished(tmp_path_factory, tiny_bert_dir) -> dict[str, Path]:
    """One 4-step SimCSE run with checkpoint-2 and checkpoint-4 (the tests copy them, never change them)."""
    root = tmp_path_factory.mktemp("finished")
    corpus = tiny_corpus(root / "corpus.txt", n=96)
    run_unsup.main(run_args(tiny_bert_dir, corpus, root / "run"))
    return {"run": root / "run", "corpus": corpus, "backbone": tiny_bert_dir}


def unfinished_run(finished: dict[str, Path], out: Path) -> Path:
    """``out`` holding copies of the finished run's checkpoint-2 and checkpoint-4 (no results, no export)."""
    for name in ("checkpoint-2", "checkpoint-4"):
        shutil.copytree(finished["run"] / name, out / name)
    return out


def edit_run_arguments(checkpoint: Path, edit) -> None:
    """``edit`` the checkpoint's run_arguments.json in place, and its size in the completion marker."""
    path = checkpoint / "run_arguments.json"
    arguments = json.loads(path.read_text())
    edit(arguments)
    path.write_text(json.dumps(arguments))
    marker = json.loads((checkpoint / MARKER).read_text())
    marker["files"]["run_arguments.json"] = path.stat().st_size
    (checkpoint / MARKER).write_text(json.dumps(marker))


def halfway_resume(finished: dict[str, Path], out: Path, recorded: str, value: Any,
                   *flags: str) -> tuple[Path, list[str]]:
    """A copy of the finished run in ``out`` (:func:`unfinished_run`), its checkpoint-2 (whose ``run_arguments.json``
    records the training argument ``recorded`` as ``value``) and the command that resumes it, ``flags`` included."""
    checkpoint = unfinished_run(finished, out) / "checkpoint-2"
    assert json.loads((checkpoint / "run_arguments.json").read_text())["CLTrainingArguments"][recorded] == value
    return checkpoint, run_args(finished["backbone"], finished["corpus"], out) + [
        *flags, "--resume_from_checkpoint", str(checkpoint)]


def trains_on(command: list[str], capsys) -> str:
    """What ``run_unsup.py command`` prints, having trained (exit 0)."""
    result = in_process(run_unsup.main, command, capsys)
    assert result.code == 0, result.err
    return result.out


def entry_point(method: str, tmp_path: Path) -> tuple:
    """(main, prog, the method's flags) of the script that trains ``method`` (:func:`tests.tiny.method_script`)."""
    script, flags = method_script(method, tmp_path)
    return {"run_unsup": run_unsup.main, "run_diffcse": run_diffcse.main}[script], f"{script}.py", flags


def one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("run_unsup.py: error: ") and "Traceback" not in err, err
    return lines[0]


# ------------------------------------------------------------------------------------------------ refusals
@pytest.mark.parametrize("piece, expected", [
    ("optimizer.pt", "missing optimizer.pt"),
    ("scheduler.pt", "missing scheduler.pt"),
    ("rng_state.pth", "missing rng_state.pth"),
    ("trainer_state.json", "missing trainer_state.json"),
    ("model.safetensors", "missing model.safetensors"),
    ("tokenizer.json", "missing tokenizer.json"),  # not loaded, but listed in the marker: an interrupted deletion
    ("issue_33", "missing optimizer.pt, scheduler.pt, rng_state.pth"),  # what the kill left in the issue
])
def test_a_checkpoint_missing_a_piece_is_refused_naming_it_and_the_newest_complete(piece, expected, finished,
                                                                                   tmp_path, capsys):
    out = unfinished_run(finished, tmp_path / "out")
    broken = out / "checkpoint-4"
    if piece == "issue_33":
        for path in broken.iterdir():
            if path.name not in ("config.json", "model.safetensors", "trainer_state.json"):
                path.unlink()
    else:
        (broken / piece).unlink()
    result = in_process(run_unsup.main, run_args(finished["backbone"], finished["corpus"], out, max_steps=6) + [
        "--resume_from_checkpoint", str(broken)], capsys)
    assert result.code == 1
    line = one_line_error(result.err)
    assert f"--resume_from_checkpoint {broken}: an incomplete checkpoint ({expected}" in line
    assert f"The newest complete checkpoint in {out} is {out / 'checkpoint-2'}: resume from it" in line
    assert not (out / "checkpoint-6").exists() and not (out / "export").exists()


def as_written_by(checkpoint: Path, processes: int, marker: bool) -> None:
    """``checkpoint`` as a run of ``processes`` processes leaves it: an ``rng_state_<rank>.pth`` for each, and a
    completion marker counting them (``marker`` false: none, an older run's checkpoint)."""
    state = checkpoint / "rng_state.pth"
    for rank in range(processes):
        shutil.copy(state, checkpoint / f"rng_state_{rank}.pth")
    state.unlink()
    (checkpoint / MARKER).unlink()
    if marker:
        write_completion_marker(checkpoint, processes)


def test_a_resume_with_the_runs_global_batch_is_refused_where_the_objective_depends_on_the_split(finished, tmp_path,
                                                                                                 capsys):
    """The run's global batch on another number of processes continues the run (tests/test_ddp.py) where the
    objective is the global batch's; where it depends on how the batch is split (each process's own queue, its own
    negatives, its BatchNorm statistics, DiffCSE's RTD mean) the resume is refused in one line naming what. Through
    run_unsup.py: ESimCSE with each process's own queue, its checkpoint as 2 processes x 4 left it, resumed by one
    process x 8."""
    out = tmp_path / "own_queues"
    argv = ["--method", "esimcse", "--queue_size", "8", "--gather_queue", "false",
            *run_args(finished["backbone"], finished["corpus"], out)]
    run_unsup.main(argv)
    for name in ("export", "checkpoint-4"):
        shutil.rmtree(out / name)
    as_written_by(out / "checkpoint-2", 2, marker=True)
    edit_run_arguments(out / "checkpoint-2", lambda arguments: arguments["CLTrainingArguments"].update(
        per_device_train_batch_size=4))
    capsys.readouterr()  # the training run's output
    result = in_process(run_unsup.main, argv + ["--resume_from_checkpoint", "latest"], capsys)
    errors = [line for line in result.err.splitlines() if "error:" in line]  # after the model's loading bar
    assert result.code == 2 and "Traceback" not in result.err and errors == [
        f"run_unsup.py: error: --resume_from_checkpoint {out / 'checkpoint-2'}: its run trained on 2 processes and "
        f"this resume runs on 1, with the same global batch, but esimcse's objective depends on how that batch is "
        f"split over the processes: the queue of negatives (each process's own: --gather_queue false). Resume it on "
        f"2 processes (torchrun --nproc_per_node 2, or accelerate launch --num_processes 2), or start a new run in "
        f"another --output_dir."]
    assert not (out / "checkpoint-4").exists() and not (out / "export").exists()


@pytest.mark.parametrize("method, settings, named", [
    ("simcse", {}, None),
    ("esimcse", {"queue_size": 8}, None),  # a gathered queue: the same on every process
    ("simcse", {"gather_negatives": False}, "the in-batch negatives (each process's own batch"),
    ("simcse", {"projector": "batchnorm"}, "the BatchNorm projector's statistics"),
    ("esimcse", {"queue_size": 8, "gather_queue": False}, "the queue of negatives (each process's own"),
])
def test_what_of_each_objective_depends_on_the_process_split(method, settings, named, tiny_bert_dir):
    from trainers.methods import build_model

    notes = build_model(method, str(tiny_bert_dir), **settings).process_split_notes()
    assert notes == [] if named is None else any(note.startswith(named) for note in notes), notes


def test_diffcses_rtd_loss_depends_on_the_process_split(tiny_bert_dir, tmp_path):
    from tests.tiny import save_tiny_generator
    from trainers.methods import build_model

    model = build_model("diffcse", str(tiny_bert_dir), generator_name=str(save_tiny_generator(tmp_path / "g")))
    assert "the RTD loss (each process's mean over its own tokens)" in model.process_split_notes()


@pytest.mark.parametrize("marker", [True, False], ids=["marker", "older_checkpoint"])
def test_a_resume_on_another_number_of_processes_is_refused_naming_the_runs_launch(marker, finished, tmp_path,
                                                                                   capsys):
    """A run's processes share each step's batch: another count trains another global batch and skips another part
    of the resumed epoch. Through run_unsup.py, a checkpoint of 2 processes resumed by one (named, or as ``latest``)
    is refused in one line naming the run's launch; it was called an incomplete checkpoint, with "no complete
    checkpoint: start again". The count is the checkpoint's (its marker, else its RNG-state files), not what this
    run loads: 3 processes resumed by 2 found the rng_state_0/1.pth those 2 load and trained on, silently."""
    out = unfinished_run(finished, tmp_path / "out")
    checkpoint = out / "checkpoint-4"
    as_written_by(checkpoint, 2, marker)
    argv = run_args(finished["backbone"], finished["corpus"], out, max_steps=6)
    for value in (str(checkpoint), "latest"):
        result = in_process(run_unsup.main, argv + ["--resume_from_checkpoint", value], capsys)
        assert result.code == 1
        assert one_line_error(result.err) == (
            f"run_unsup.py: error: --resume_from_checkpoint {checkpoint}: its run trained on 2 processes x 8 "
            f"sentences (a global batch of 16) and this resume runs on 1 process x 8 (8). A resume continues the "
            f"run's global batch: the processes share each step's batch (and their negatives), so another global "
            f"batch would train another objective and skip another part of the resumed epoch. Resume it on 2 "
            f"processes (torchrun --nproc_per_node 2, or accelerate launch --num_processes 2), or on 1 process with "
            f"--per_device_train_batch_size 16 (the run's global batch), or start a new run in another "
            f"--output_dir.")
        assert not (out / "checkpoint-6").exists() and not (out / "export").exists()
    three = shutil.copytree(finished["run"] / "checkpoint-2", tmp_path / "three" / "checkpoint-2")
    as_written_by(three, 3, marker)
    assert written_processes(three) == 3 and checkpoint_problems(three, 2) == []  # complete, for 3 processes
    refusal = str(processes_change_error(str(three), 2, 8))
    assert ("its run trained on 3 processes x 8 sentences (a global batch of 24) and this resume runs on 2 processes "
            "x 8 (16).") in refusal and "or on 2 processes with --per_device_train_batch_size 12 (the run's" in refusal
    assert "--per_device_train_batch_size" not in str(processes_change_error(str(three), 5, 8))  # 24 / 5: no batch
    # the run's global batch on another number of processes passes here (the method's part comes once it is built)
    assert processes_change_error(str(three), 3, 8) is None and processes_change_error(str(three), 2, 12) is None
    if marker:  # a file of the 3 processes gone: incomplete (the marker lists it), for any count resuming it
        (three / "rng_state_2.pth").unlink()
        assert checkpoint_problems(three, 3) == checkpoint_problems(three, 2) == ["missing rng_state_2.pth"]


def drop_tensors(checkpoint: Path, prefixes: list[str]) -> None:
    """The weights without the tensors under ``prefixes`` (an older run's checkpoint: no marker)."""
    weights = load_file(checkpoint / "model.safetensors")
    for prefix in prefixes:
        assert any(name.startswith(prefix) for name in weights), prefix  # the test can fail: the method saves them
    save_file({k: v for k, v in weights.items() if not k.startswith(tuple(prefixes))},
              checkpoint / "model.safetensors", metadata={"format": "pt"})
    (checkpoint / MARKER).unlink(missing_ok=True)  # (absent before the marker existed)


@pytest.mark.parametrize("method, prefixes, expected", [
    ("simcse", ["projector."], "projector.* ("),
    ("simcse_pp", ["encoder."], "encoder.* ("),
    ("s_simcse", ["encoder."], "encoder.* ("),
    ("promptbert", ["encoder."], "encoder.* ("),
    ("esimcse", ["queue.", "momentum_encoder."], "momentum_encoder.* (39 tensors), queue.* (3 tensors)"),
    ("diffcse", ["generator."], "generator.* ("),
])
def test_every_method_resumes_a_complete_checkpoint_and_refuses_one_lacking_its_tensors(method, prefixes, expected,
                                                                                       backbone, tmp_path, capsys):
    """A complete checkpoint of every method is accepted (every tensor of the model is in its weights, tied ones
    once); one lacking a part (ESimCSE's queue and momentum encoder, DiffCSE's generator, ...) is refused once
    the model is built, before any step."""
    corpus = tiny_corpus(tmp_path / "corpus.txt", n=96)
    main, prog, extra = entry_point(method, tmp_path)
    out = tmp_path / "out"
    assert in_process(main, run_args(backbone, corpus, out, max_steps=2) + extra, capsys, prog=prog).code == 0
    checkpoint = out / "checkpoint-2"
    whole = in_process(main, run_args(backbone, corpus, tmp_path / "whole", max_steps=3) + extra + [
        "--resume_from_checkpoint", str(checkpoint)], capsys, prog=prog)
    assert whole.code == 0, whole.err
    assert " for 1 step (resumed at step 2)" in whole.out

    drop_tensors(checkpoint, prefixes)
    resumed = in_process(main, run_args(backbone, corpus, tmp_path / "resumed") + extra + [
        "--resume_from_checkpoint", str(checkpoint)], capsys, prog=prog)
    assert resumed.code == 1
    errors = [line for line in resumed.err.splitlines() if "error:" in line]  # after the model's loading bar
    assert len(errors) == 1 and errors[0].startswith(f"{prog}: error: --resume_from_checkpoint "), resumed.err
    assert f"an incomplete checkpoint (model.safetensors lacks the model's {expected}" in errors[0]
    assert "Traceback" not in resumed.err and not (tmp_path / "resumed" / "checkpoint-4").exists()


def test_latest_with_no_complete_checkpoint_is_refused(finished, tmp_path, capsys):
    out = unfinished_run(finished, tmp_path / "out")
    for name in ("checkpoint-2", "checkpoint-4"):
        (out / name / "optimizer.pt").unlink()
    result = in_process(run_unsup.main, run_args(finished["backbone"], finished["corpus"], out, max_steps=6) + [
        "--resume_from_checkpoint", "latest"], capsys)
    assert result.code == 1
    assert (f"--resume_from_checkpoint latest: no complete checkpoint in --output_dir {out} (its checkpoints "
            f"(checkpoint-2, checkpoint-4) are incomplete)") in one_line_error(result.err)


# ------------------------------------------------------------------------------------------------ latest, hints
@pytest.mark.parametrize("value", ["latest", "true", "checkpoint-2"])
def test_latest_resumes_the_newest_complete_checkpoint_and_counts_its_own_steps(value, finished, tmp_path, capsys):
    out = unfinished_run(finished, tmp_path / "out")
    (out / "checkpoint-4" / "optimizer.pt").unlink()  # the newest folder is broken: latest is checkpoint-2
    resume = str(out / value) if value.startswith("checkpoint-") else value
    result = in_process(run_unsup.main, run_args(finished["backbone"], finished["corpus"], out) + [
        "--resume_from_checkpoint", resume], capsys)
    assert result.code == 0, result.err
    assert " for 2 steps (resumed at step 2)" in result.out  # this process ran steps 3 and 4, not 4 steps
    uninterrupted = load_file(finished["run"] / "checkpoint-4" / "model.safetensors")
    resumed = load_file(out / "checkpoint-4" / "model.safetensors")
    for name, tensor in uninterrupted.items():
        torch.testing.assert_close(resumed[name], tensor, rtol=0, atol=1e-6, msg=name)
    assert (out / "checkpoint-4" / MARKER).is_file() and (out / "checkpoint-4" / "optimizer.pt").is_file()


def test_the_resume_hint_names_only_complete_checkpoints(finished, tmp_path, capsys):
    out = unfinished_run(finished, tmp_path / "out")
    (out / "checkpoint-4" / "scheduler.pt").unlink()
    result = in_process(run_unsup.main, run_args(finished["backbone"], finished["corpus"], out), capsys)
    assert result.code == 1
    line = one_line_error(result.err)
    assert (f"Resume it with --resume_from_checkpoint {out / 'checkpoint-2'} (its newest complete checkpoint)"
            in line)
    assert f"--resume_from_checkpoint {out / 'checkpoint-4'}" not in line


# ------------------------------------------------------------------------------------------------ a kill at any point
def test_a_kill_at_any_point_of_a_save_leaves_no_folder_accepted_as_complete(finished, tmp_path, capsys):
    """Every prefix of the Trainer's write order (a kill between files), and every prefix with its next file cut in
    half (a kill inside a file), is refused; the folder with every file but no marker (a kill just before the
    marker, or a checkpoint of an older run), with or without the run's arguments written just before the marker, is
    accepted, because everything a resume loads is there and whole."""
    written = finished["run"] / "checkpoint-4"
    files = sorted(p.name for p in written.iterdir())
    assert sorted(WRITE_ORDER + [MARKER]) == files  # the test knows every file the save writes
    marker = json.loads((written / MARKER).read_text())
    assert marker == {"processes": 1, "files": {name: (written / name).stat().st_size for name in WRITE_ORDER}}
    assert (written / MARKER).stat().st_mtime_ns >= max((written / n).stat().st_mtime_ns for n in WRITE_ORDER)

    def resume_from(folder: Path):
        return in_process(run_unsup.main, run_args(finished["backbone"], finished["corpus"], folder.parent,
                                                   max_steps=6) + ["--resume_from_checkpoint", str(folder)], capsys)

    loaded = WRITE_ORDER[:-1]  # what a resume loads; the run's arguments, written last, are compared when present
    for count in range(len(loaded)):
        for cut in (False, True):
            folder = tmp_path / f"kill-{count}-{int(cut)}" / "checkpoint-4"
            folder.mkdir(parents=True)
            for name in WRITE_ORDER[:count]:
                shutil.copy(written / name, folder / name)
            if cut:
                data = (written / WRITE_ORDER[count]).read_bytes()
                (folder / WRITE_ORDER[count]).write_bytes(data[:len(data) // 2])
            result = resume_from(folder)
            assert result.code == 1 and "an incomplete checkpoint (" in one_line_error(result.err), (count, cut)

    for name, dropped in (("legacy", [MARKER]), ("before_run_arguments", [MARKER, "run_arguments.json"])):
        legacy = tmp_path / name / "checkpoint-4"
        shutil.copytree(written, legacy)
        for file in dropped:
            (legacy / file).unlink()
        accepted = resume_from(legacy)
        assert accepted.code == 0, accepted.err
        assert " for 2 steps (resumed at step 4)" in accepted.out
        assert (legacy.parent / "checkpoint-6" / MARKER).is_file()


# ------------------------------------------------------------------------------------------------ the same run
@pytest.mark.parametrize("flags, named, restoring", [
    (["--seed", "7"], ["seed: 42 there, 7 here"], "--seed 42"),
    (["--learning_rate", "1e-3", "--per_device_train_batch_size", "4"],
     ["learning_rate: 3e-05 there, 0.001 here", "per_device_train_batch_size: 8 there, 4 here"],
     "--per_device_train_batch_size 8, --learning_rate 3e-05"),
    (["--temp", "0.5", "--max_seq_length", "16"], ["temperature: 0.05 there, 0.5 here", "max_seq_length: 32 there"],
     "--temp 0.05, --max_seq_length 32"),
    (["--dropout_masks", "row_seeded"], ["dropout_masks: 'stream' there, 'row_seeded' here"], "--dropout_masks stream"),
    # no flag of this command names the masks: --cache_chunk_size turns row-seeded masks on
    (["--cache_chunk_size", "4"], ["dropout_masks: 'stream' there, 'row_seeded' here"], "--dropout_masks stream"),
    (["--data_seed", "5"], ["data_seed: None there, 5 here"], "no --data_seed"),
    (["--method", "esimcse"], ["method: 'simcse' there, 'esimcse' here"], "--method simcse"),
    (["--backbone", "roberta"], ["backbone model_type: 'bert' there, 'roberta' here"], "--model_name_or_path {tiny}"),
], ids=["seed", "learning_rate_and_batch", "temperature_and_length", "dropout_masks", "implied_dropout_masks",
        "unset_data_seed", "method", "backbone"])
def test_a_resume_that_would_train_something_else_is_refused_naming_each_change(flags, named, restoring, finished,
                                                                                 tmp_path, capsys):
    """Another seed or batch size would skip the wrong batches, another learning rate would be ignored (the restored
    schedule holds the old one) yet recorded, another method setting or backbone trains another model (a RoBERTa
    resuming a BERT checkpoint got the optimizer's moments of other shapes: NaN, then heap corruption). Each is
    refused in one line once the model is built, before any state loads or any step runs, naming what differs and
    the flags that set it back (also for a setting that another flag implied: ``--cache_chunk_size``'s masks),
    rather than called an incomplete checkpoint (the method) or left to a traceback."""
    from tests.tiny import save_tiny_backbone

    out = unfinished_run(finished, tmp_path / "out")
    backbone = finished["backbone"]
    if flags[0] == "--backbone":
        backbone, flags = save_tiny_backbone(tmp_path / "roberta", arch="roberta"), []
    result = in_process(run_unsup.main, run_args(backbone, finished["corpus"], out, max_steps=6) + flags + [
        "--resume_from_checkpoint", str(out / "checkpoint-2")], capsys)
    assert result.code == 2, result.err
    errors = [line for line in result.err.splitlines() if "error:" in line]  # after the model's loading bar
    assert len(errors) == 1 and errors[0].startswith("run_unsup.py: error: --resume_from_checkpoint "), result.err
    line = errors[0]
    assert "Traceback" not in result.err and "incomplete" not in line
    assert "a resume continues the run that wrote it, and this command differs from that run" in line
    for difference in named:
        assert difference in line, line
    assert f"(drop the changed flags or set them back: {restoring.format(tiny=finished['backbone'])}), " in line, line
    assert not (out / "checkpoint-6").exists() and not (out / "export").exists()


def test_the_flags_a_refused_resume_names_resume_the_run(finished, tmp_path, capsys):
    """The fix the refusal names is one that works: the command with the flags it lists appended resumes the run
    (here a cached step added to a resume: its row-seeded masks would train another objective than the run's stream
    masks, and ``--dropout_masks stream`` keeps them)."""
    out = unfinished_run(finished, tmp_path / "out")
    command = run_args(finished["backbone"], finished["corpus"], out, max_steps=6) + [
        "--cache_chunk_size", "4", "--resume_from_checkpoint", str(out / "checkpoint-4")]
    refused = in_process(run_unsup.main, command, capsys)
    assert refused.code == 2, refused.err
    line = [line for line in refused.err.splitlines() if "error:" in line][-1]
    named = line.split("set them back: ", 1)[1].split("), or start", 1)[0]
    assert named == "--dropout_masks stream", line
    resumed = in_process(run_unsup.main, command + named.split(), capsys)
    assert resumed.code == 0, resumed.err
    assert " for 2 steps (resumed at step 4)" in resumed.out
    assert "this resume encodes each batch in chunks of 4 sentences" in resumed.out  # stream masks: said, not refused


def test_a_longer_resume_of_the_same_corpus_moved_trains_on_and_says_what_it_does(finished, tmp_path, capsys):
    """A longer --max_steps is what a resume is often for: it trains on, saying what the schedule does. The same
    corpus at another path is the same run (its digest matches): no word of it."""
    out = unfinished_run(finished, tmp_path / "out")
    moved = Path(shutil.copy(finished["corpus"], tmp_path / "moved.txt"))
    result = in_process(run_unsup.main, run_args(finished["backbone"], moved, out, max_steps=6) + [
        "--resume_from_checkpoint", "latest"], capsys)
    assert result.code == 0, result.err
    assert " for 2 steps (resumed at step 4)" in result.out
    assert "warning: --resume_from_checkpoint " in result.out and "changes the run's length (--max_steps 4 -> 6)" in (
        result.out)
    assert "--train_file" not in result.out and "--train_file" not in result.err
    recorded = json.loads((out / "checkpoint-6" / "run_arguments.json").read_text())["corpus"]
    assert recorded == {"train_file_sha256": hashlib.sha256(moved.read_bytes()).hexdigest(), "train_rows": 96}


def test_a_resume_in_another_precision_trains_on_and_says_so(finished, tmp_path, capsys):
    """The run trained in fp32 (--bf16 false); a resume in bf16 (another machine's default, or the flag) trained its
    remaining steps in bf16 without a word. It still trains on (moving a run is legitimate), saying so with the flag
    that goes on in fp32; with that flag, nothing is said."""
    out = unfinished_run(finished, tmp_path / "out")
    command = run_args(finished["backbone"], finished["corpus"], out) + ["--resume_from_checkpoint",
                                                                        str(out / "checkpoint-2")]
    result = in_process(run_unsup.main, command + ["--bf16", "true"], capsys)
    assert result.code == 0, result.err
    said = (f"warning: --resume_from_checkpoint {out / 'checkpoint-2'}: its run trained in fp32, this resume trains "
            "in bf16 (this machine's default, or --bf16 / --fp16), so its remaining steps compute differently from "
            "the uninterrupted run's; --bf16 false goes on in fp32")
    assert said in result.out and "precision: bf16 training" in result.out
    shutil.rmtree(out)
    out = unfinished_run(finished, tmp_path / "out")
    same = in_process(run_unsup.main, command + ["--bf16", "true", "--bf16", "false"], capsys)
    assert same.code == 0, same.err
    assert "this resume trains in" not in same.out and "precision: fp32 training" in same.out


def test_a_resume_with_another_attention_implementation_trains_on_and_says_so(finished, tmp_path, capsys):
    """The run records the attention its encoder computed with (``backbone.attention``: SDPA here); a resume with
    ``--attn_implementation eager`` computed its remaining steps with another kernel without a word (on a GPU, SDPA
    draws the attention dropout itself: other masks). It trains on, saying so with the flag that goes on as it ran;
    resumed with the run's attention, nothing is said."""
    out = unfinished_run(finished, tmp_path / "out")
    checkpoint = out / "checkpoint-2"
    assert json.loads((checkpoint / "run_arguments.json").read_text())["backbone"] == {"attention": "sdpa"}
    command = run_args(finished["backbone"], finished["corpus"], out) + ["--resume_from_checkpoint", str(checkpoint)]
    printed = trains_on(command + ["--attn_implementation", "eager"], capsys)
    said = (f"warning: --resume_from_checkpoint {checkpoint}: its run's encoder computed attention with sdpa, this "
            "resume's with eager (--attn_implementation, or what this machine's backbone falls back to): the two round "
            "differently and, on a GPU, draw the dropout of the attention probabilities differently (SDPA's fused "
            "kernels draw their own), so its remaining steps differ from the uninterrupted run's; "
            "--attn_implementation sdpa goes on as it ran")
    assert said in printed
    assert json.loads((out / "checkpoint-4" / "run_arguments.json").read_text())["backbone"] == {"attention": "eager"}
    shutil.rmtree(out)
    out = unfinished_run(finished, tmp_path / "out")
    assert "computed attention with" not in trains_on(command, capsys)


def test_an_attention_change_is_said_only_where_both_are_recorded(tmp_path):
    """Row-seeded masks (and S-SimCSE's, SimCSE++'s per-row dropout) route every backbone with transformers'
    attention interface through this repo's own attention, whatever ``--attn_implementation`` says: the recorded
    attention is that one on both sides, and nothing is said; a checkpoint written before the record says nothing."""
    from trainers.resume_settings import CheckpointRecords, attention_change_warning

    def warning(theirs: dict, ours: dict) -> str | None:
        return attention_change_warning(CheckpointRecords(tmp_path, {}, {}, theirs), {"backbone": ours})

    row_dropout = {"attention": "cse_row_dropout"}
    assert warning({**row_dropout, "attn_implementation": "sdpa"}, row_dropout) is None
    assert warning({"attn_implementation": "sdpa"}, {"attention": "eager"}) is None
    fallback = warning({"attention": "eager", "attn_implementation": "sdpa"}, {"attention": "sdpa"})
    assert fallback is not None and fallback.endswith("; the --attn_implementation that gives eager goes on as it ran")


def test_a_resume_that_turns_the_fast_path_on_or_off_under_stream_masks_says_so(finished, tmp_path, capsys):
    """The fast path pads every batch to a fixed width, and stream dropout masks are drawn over the padded width: a
    resume on or off it (another machine's default: one GPU in bf16 runs it, a CPU does not) trained its remaining
    steps with other masks than the uninterrupted run's without a word (measured through run_unsup.py on a tiny BERT:
    checkpoint-4 1.1e-3 from the uninterrupted run's after 2 steps at lr 1e-3; resumed as it ran: 0). The run
    records its resolved fast path, and such a resume trains on, saying so with the flag that goes on as it ran."""
    checkpoint, command = halfway_resume(finished, tmp_path / "out", "fast_path", False)
    edit_run_arguments(checkpoint, lambda arguments: arguments["CLTrainingArguments"].update(fast_path=True))
    printed = trains_on(command, capsys)
    said = (f"warning: --resume_from_checkpoint {checkpoint}: its run trained on the fast path, this resume trains "
            "eagerly (this machine's default, or --torch_compile), and stream dropout masks (and DiffCSE's sampled "
            "tokens) are drawn over each batch's padded width, which the fast path fixes, so its remaining steps draw "
            "other masks than the uninterrupted run's; --torch_compile true goes on on the fast path")
    assert said in printed


def test_the_fast_path_is_recorded_and_a_change_of_it_under_row_seeded_masks_says_nothing(tmp_path):
    """``run_arguments.json`` records what ``--torch_compile`` resolved to (the Trainer's own ``torch_compile`` is
    off on the fast path, so it alone said a fast-path run did not compile); with row-seeded masks, keyed by
    coordinates, the fast path's steps are the eager ones within float rounding: no warning."""
    from command_line.arguments import CLTrainingArguments
    from trainers.resume_settings import CheckpointRecords, fast_path_change_warning

    recorded = CLTrainingArguments(output_dir=str(tmp_path), use_cpu=True, torch_compile=True,
                                   torch_compile_backend="aot_eager").to_dict()
    assert (recorded["torch_compile"], recorded["fast_path"], recorded["fast_path_backend"]) == (False, True,
                                                                                                  "aot_eager")
    records = CheckpointRecords(tmp_path, {}, {}, {"fast_path": True})
    for masks, warned in (("row_seeded", False), ("stream", True)):
        ours = {"CLTrainingArguments": {"fast_path": False}, "settings": {"dropout_masks": masks}}
        assert (fast_path_change_warning(records, ours) is not None) == warned
    assert fast_path_change_warning(CheckpointRecords(tmp_path, {}, {}, {}), ours) is None  # an older checkpoint


def test_a_resume_in_other_chunks_under_stream_masks_trains_on_and_says_so(finished, tmp_path, capsys):
    """Each chunk of a cached step draws its own stream dropout masks: a resume in other chunks than the run's (another
    --cache_chunk_size, or one added) trained its remaining steps with other masks than the uninterrupted run's
    without a word (measured through run_unsup.py on a tiny BERT: chunks of 3 resumed in chunks of 4, checkpoint-4
    1.1e-3 from the uninterrupted run's after 2 steps at lr 1e-3; resumed in chunks of 3: 0). It trains on, saying so
    with the flag that goes on as it ran; a chunk as large as the batch (8) is the uncached step's one pass."""
    checkpoint, command = halfway_resume(finished, tmp_path / "out", "cache_chunk_size", None, "--dropout_masks",
                                         "stream")
    printed = trains_on(command + ["--cache_chunk_size", "4"], capsys)
    said = (f"warning: --resume_from_checkpoint {checkpoint}: its run encoded each batch in one pass, this resume "
            "encodes each batch in chunks of 4 sentences (--cache_chunk_size 4), and with stream dropout masks each "
            "chunk of a cached step draws its own masks, so its remaining steps draw other masks than the "
            "uninterrupted run's; no --cache_chunk_size goes on as it ran")
    assert said in printed
    checkpoint, command = halfway_resume(finished, tmp_path / "again", "cache_chunk_size", None, "--dropout_masks",
                                         "stream")
    whole = trains_on(command + ["--cache_chunk_size", "8"], capsys)
    assert "chunk of a cached step draws its own masks" not in whole


def test_a_change_of_chunks_is_said_under_stream_masks_only(tmp_path):
    """The warning compares the sentences each backbone pass encodes (``--cache_chunk_size`` up to the batch) under
    stream masks; row-seeded masks are keyed by each row's index in the batch, so every chunk size trains the same
    steps; a checkpoint written before the run recorded its chunks says nothing."""
    from trainers.resume_settings import CheckpointRecords, cached_step_change_warning

    def warning(theirs: dict, ours: dict, masks: str = "stream") -> str | None:
        return cached_step_change_warning(
            CheckpointRecords(tmp_path, {}, {}, {"per_device_train_batch_size": 8, **theirs}),
            {"CLTrainingArguments": {"per_device_train_batch_size": 8, **ours}, "settings": {"dropout_masks": masks}})

    assert warning({"cache_chunk_size": 4}, {"cache_chunk_size": 4}) is None
    assert warning({"cache_chunk_size": None}, {"cache_chunk_size": 8}) is None
    assert warning({"cache_chunk_size": 8}, {"cache_chunk_size": 16}) is None
    assert warning({"cache_chunk_size": 3}, {"cache_chunk_size": 4}, masks="row_seeded") is None
    assert warning({}, {"cache_chunk_size": 4}) is None
    dropped = warning({"cache_chunk_size": 3}, {"cache_chunk_size": None})
    assert dropped is not None and dropped.endswith("; --cache_chunk_size 3 goes on as it ran"), dropped
    assert "its run encoded each batch in chunks of 3 sentences (--cache_chunk_size 3), this resume encodes each " \
        "batch in one pass" in dropped


def test_a_resume_that_turns_tf32_off_trains_on_and_says_so(finished, tmp_path, capsys):
    """On an Ampere+ GPU a run trains with TF32 matmuls by default (``--tf32`` resolves to true there): a resume with
    ``--tf32 false`` (or the run's ``--tf32 false`` resumed under the default) computed its remaining steps otherwise
    without a word. The checkpoint's record is the GPU run's (edited here: a CPU run records none); it trains on,
    saying so with the flag that goes on as it ran. A CPU run's record (none) against ``--tf32 false``: nothing."""
    from trainers.resume_settings import CheckpointRecords, precision_change_warning

    checkpoint, command = halfway_resume(finished, tmp_path / "out", "tf32", None)
    edit_run_arguments(checkpoint, lambda arguments: arguments["CLTrainingArguments"].update(tf32=True))
    printed = trains_on(command + ["--tf32", "false"], capsys)
    said = (f"warning: --resume_from_checkpoint {checkpoint}: its run trained in fp32 with TF32 matmuls on, this "
            "resume trains in fp32 with TF32 matmuls off (this machine's default, or --tf32), so its remaining steps "
            "compute differently from the uninterrupted run's; --tf32 true goes on in fp32 with TF32 matmuls on")
    assert said in printed

    def warning(theirs: dict, ours: dict) -> str | None:
        return precision_change_warning(CheckpointRecords(tmp_path, {}, {}, {"bf16": True, **theirs}),
                                        {"CLTrainingArguments": {"bf16": True, **ours}})

    assert warning({"tf32": None}, {"tf32": False}) is None and warning({"tf32": True}, {"tf32": None}) is None
    assert warning({"tf32": True}, {"tf32": True}) is None and warning({}, {"tf32": False}) is None
    both = warning({"tf32": False}, {"tf32": True, "bf16": False})
    assert both is not None and ("its run trained in bf16 with TF32 matmuls off, this resume trains in fp32 with TF32 "
                                 "matmuls on (this machine's default, or --bf16 / --fp16 / --tf32)") in both, both
    assert both.endswith("; --bf16 true --tf32 false goes on in bf16 with TF32 matmuls off"), both


def test_a_resume_inside_a_logging_window_logs_the_uninterrupted_runs_window(finished, tmp_path):
    """The Trainer logs the mean loss (and this trainer the model's metrics) over the steps since its last log, a
    window no checkpoint held: a run resumed from checkpoint-2 with --logging_steps 4 logged at step 4 the mean of
    steps 3-4 alone under step 4 (ESimCSE: loss 3.4174 against the uninterrupted run's 3.2337, its queue fill 18.0
    against 11.0). Each checkpoint now holds its open window (trainer_state.json's ``LoggingWindow``), and the resumed
    run's log is the uninterrupted run's; the weights were the same before and are."""
    argv = ["--method", "esimcse", "--queue_size", "20", *run_args(finished["backbone"], finished["corpus"],
                                                                   tmp_path / "full"), "--logging_steps", "4"]
    run_unsup.main(argv)
    full = tmp_path / "full"
    window = json.loads((full / "checkpoint-2" / "trainer_state.json").read_text())["stateful_callbacks"]
    assert window["LoggingWindow"]["args"]["last_logged_step"] == 0, window
    resumed = tmp_path / "resumed"
    run_unsup.main([*argv, "--output_dir", str(resumed), "--resume_from_checkpoint", str(full / "checkpoint-2")])
    assert_resumed_run_ends_on_the_uninterrupted_runs_weights(full, resumed, 2, 4)

    def logged(run: Path) -> list[dict]:
        history = json.loads((run / "checkpoint-4" / "trainer_state.json").read_text())["log_history"]
        return [{key: value for key, value in entry.items() if key != "sentences_per_second"}
                for entry in history if "loss" in entry]

    (uninterrupted,), (again,) = logged(full), logged(resumed)
    assert {"loss", "queue_fill", "step"} <= uninterrupted.keys(), uninterrupted
    assert again == pytest.approx(uninterrupted, rel=1e-6)


def test_a_resume_that_picks_its_best_checkpoint_by_another_metric_is_refused(finished, tmp_path, capsys):
    """A resume compares each new dev score with the run's best so far (trainer_state.json's best_metric): another
    --metric_for_best_model compared, say, STS-B and SICK-R means with the run's best STS-B score, and kept the
    wrong checkpoint without a word. Refused, naming the flag that sets it back; the Trainer's eval_ prefix is the
    same metric."""
    out = unfinished_run(finished, tmp_path / "out")
    command = run_args(finished["backbone"], finished["corpus"], out) + ["--resume_from_checkpoint",
                                                                        str(out / "checkpoint-2")]
    for flags, named in ((["--metric_for_best_model", "avg_sts"], "--metric_for_best_model stsb_spearman"),
                         (["--greater_is_better", "false"], "--greater_is_better true")):
        refused = in_process(run_unsup.main, command + flags, capsys)
        assert refused.code == 2, refused.err
        assert "differs from that run in what it trains or how it picks its best checkpoint" in refused.err
        assert f"set them back: {named})" in refused.err, refused.err
    same = in_process(run_unsup.main, command + ["--metric_for_best_model", "eval_stsb_spearman"], capsys)
    assert same.code == 0, same.err


def test_a_resume_on_another_corpus_is_refused_at_its_path_or_another(finished, tmp_path, capsys):
    """Another corpus would skip the wrong batches of the resumed epoch (sentences trained twice or never): refused,
    naming the two digests, whether the file was edited in place or another path names it. Before the run recorded
    its corpus's digest, an edit in place resumed silently."""
    out = unfinished_run(finished, tmp_path / "out")
    corpus = Path(shutil.copy(finished["corpus"], tmp_path / "corpus.txt"))
    for name in ("checkpoint-2", "checkpoint-4"):  # the checkpoints of a run on ``corpus``
        edit_run_arguments(out / name, lambda arguments: arguments["DataArguments"].update(train_file=str(corpus)))
    theirs = hashlib.sha256(corpus.read_bytes()).hexdigest()[:12]
    edited = corpus.read_text().splitlines()
    corpus.write_text("\n".join(edited[:-1] + ["a sentence that was not there"]) + "\n")
    other = tiny_corpus(tmp_path / "other.txt", n=96, seed=1)
    for train_file in (corpus, other):
        result = in_process(run_unsup.main, run_args(finished["backbone"], train_file, out, max_steps=6) + [
            "--resume_from_checkpoint", "latest"], capsys)
        assert result.code == 2, result.err
        line = [line for line in result.err.splitlines() if "error:" in line][-1]
        ours = hashlib.sha256(train_file.read_bytes()).hexdigest()[:12]
        assert line.startswith("run_unsup.py: error: --resume_from_checkpoint ") and (
            "this command differs from that run in what it trains or how it picks its best checkpoint (--train_file's "
            f"contents: '96 rows, sha256 {theirs}' there, '96 rows, sha256 {ours}' here)") in line, line
        # another path: the run's file is the flag that sets it back; the run's own file edited: none does
        restoring = f": --train_file {corpus}" if train_file == other else ""
        assert f"(drop the changed flags or set them back{restoring}), or start" in line, line
        assert not (out / "checkpoint-6").exists()


def test_a_checkpoint_without_a_corpus_digest_warns_of_another_corpus_path(finished, tmp_path, capsys):
    """A checkpoint written before runs recorded their corpus's digest: another path may be the same corpus moved,
    so the run trains on, saying what another corpus would do."""
    out = unfinished_run(finished, tmp_path / "out")
    for name in ("checkpoint-2", "checkpoint-4"):
        edit_run_arguments(out / name, lambda arguments: arguments.pop("corpus"))
    moved = Path(shutil.copy(finished["corpus"], tmp_path / "moved.txt"))
    result = in_process(run_unsup.main, run_args(finished["backbone"], moved, out, max_steps=6) + [
        "--resume_from_checkpoint", "latest"], capsys)
    assert result.code == 0, result.err
    assert f"--train_file {moved} is not its run's ({finished['corpus']}); if it is another corpus" in result.out


def test_resuming_the_last_checkpoint_trains_no_step_past_max_steps(finished, tmp_path, capsys):
    """A run killed in its final evaluation or export leaves checkpoint-4 of 4 steps (mid-epoch): the Trainer would
    resume it by training step 5 (its loop tests max_steps after a step). The resume trains nothing and exports the
    uninterrupted run's model."""
    out = unfinished_run(finished, tmp_path / "out")
    result = in_process(run_unsup.main, run_args(finished["backbone"], finished["corpus"], out) + [
        "--resume_from_checkpoint", "latest"], capsys)
    assert result.code == 0, result.err
    assert "training: no step (resumed at the run's last step, 4)" in result.out
    assert not (out / "checkpoint-5").exists()
    exported = load_file(out / "export" / "hf" / "model.safetensors")
    uninterrupted = load_file(finished["run"] / "export" / "hf" / "model.safetensors")
    assert exported.keys() == uninterrupted.keys()
    for name, tensor in uninterrupted.items():
        assert torch.equal(exported[name], tensor), name
    state = json.loads((out / "trainer_state.json").read_text()) if (out / "trainer_state.json").exists() else None
    assert state is None or state["global_step"] == 4


def test_older_checkpoints_are_rotated_away_only_once_the_new_one_is_complete(backbone, tmp_path, capsys,
                                                                             monkeypatch):
    """``--save_total_limit 1``: the Trainer deleted checkpoint-N-1 before the other processes had written their part
    of checkpoint-N (a kill there left nothing to resume); now the older one is still there when the new one's
    marker is written, and gone after."""
    import trainers.trainer_adapter as adapter

    seen: list[list[str]] = []
    write = adapter.write_completion_marker

    def recording(folder, processes):
        seen.append(sorted(p.name for p in Path(folder).parent.glob("checkpoint-*")))
        return write(folder, processes)

    monkeypatch.setattr(adapter, "write_completion_marker", recording)
    out = tmp_path / "out"
    argv = run_args(backbone, tiny_corpus(tmp_path / "corpus.txt", n=96), out, max_steps=3)
    argv[argv.index("--save_total_limit") + 1] = "1"
    argv[argv.index("--save_steps") + 1] = "1"
    assert in_process(run_unsup.main, argv, capsys).code == 0
    assert seen == [["checkpoint-1"], ["checkpoint-1", "checkpoint-2"], ["checkpoint-2", "checkpoint-3"]]
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-3"]
    assert json.loads((out / "checkpoint-3" / "run_arguments.json").read_text())["CLTrainingArguments"]["seed"] == 42


def test_a_resume_whose_best_checkpoint_is_gone_says_so(finished, tmp_path, capsys):
    """The newest checkpoint moved to another folder: the best one its run recorded is not there. The Trainer drops
    it and keeps its score, so the run can only end on a later checkpoint that beats it, else on its final model:
    the run says so in its log and summary."""
    out = unfinished_run(finished, tmp_path / "out")
    state_file = out / "checkpoint-4" / "trainer_state.json"
    state = json.loads(state_file.read_text())
    state.update(best_model_checkpoint=str(tmp_path / "elsewhere" / "checkpoint-2"), best_global_step=2,
                 best_metric=50.0)
    state_file.write_text(json.dumps(state))
    (out / "checkpoint-4" / MARKER).unlink()  # the state was edited (a marker would list its old size)
    result = in_process(run_unsup.main, run_args(finished["backbone"], finished["corpus"], out, max_steps=6) + [
        "--resume_from_checkpoint", str(out / "checkpoint-4")], capsys)
    assert result.code == 0, result.err
    expected = (f"its run's best checkpoint {tmp_path / 'elsewhere' / 'checkpoint-2'} (step 2, 50.0) is gone, so this "
                "run keeps a later checkpoint only if it scores above 50.0")
    assert f"warning: --resume_from_checkpoint {out / 'checkpoint-4'}: {expected}" in result.out


def test_a_resumed_run_reports_its_runs_scores_from_before_training(backbone, sts_fixture_dir, tmp_path, capsys):
    """The STS-B dev score of the model before any step is evaluated once, at the start of the run: a resume
    reports the one its checkpoint's run kept (in all_results.json and the summary's "before -> after"), as the
    uninterrupted run does, instead of none."""
    corpus = tiny_corpus(tmp_path / "corpus.txt", n=96)
    argv = run_args(backbone, corpus, tmp_path / "run")
    argv[argv.index("--eval_strategy") + 1] = "steps"
    argv += ["--eval_steps", "2", "--senteval_dir", str(sts_fixture_dir)]
    uninterrupted = in_process(run_unsup.main, argv, capsys)
    assert uninterrupted.code == 0, uninterrupted.err
    before = json.loads((tmp_path / "run" / "all_results.json").read_text())["before_stsb_spearman"]
    resumed_out = tmp_path / "resumed"
    shutil.copytree(tmp_path / "run" / "checkpoint-2", resumed_out / "checkpoint-2")
    argv[argv.index("--output_dir") + 1] = str(resumed_out)
    resumed = in_process(run_unsup.main, argv + ["--resume_from_checkpoint", "latest"], capsys)
    assert resumed.code == 0, resumed.err
    assert " for 2 steps (resumed at step 2)" in resumed.out
    results = json.loads((resumed_out / "all_results.json").read_text())
    assert results["before_stsb_spearman"] == before and "before_sickr_spearman" in results
    assert f"STS-B dev Spearman x100: before {before:.2f} -> after " in resumed.out


@pytest.mark.parametrize("method", ["sup_simcse", "simcse_pp", "s_simcse", "promptbert", "diffcse"])
def test_every_method_resumed_halfway_ends_on_the_uninterrupted_runs_weights(method, backbone, tmp_path, capsys):
    """Six steps in one run, and three resumed from that run's checkpoint-3: the same final weights (every tensor of
    the model, DiffCSE's generator included), so nothing a method draws or keeps starts over on a resume (SimCSE
    plain and cached: tests/test_training.py; ESimCSE with a full queue: tests/test_esimcse.py; with these, every
    method). Loading a checkpoint (the resume, the best model at the end) says nothing of keys it lacks: DiffCSE's
    generator's output layer is its word embeddings' tied copy, which a checkpoint holds once (the Trainer warned
    ``There were missing keys in the checkpoint model loaded: ['generator.vocab_projector.weight']``)."""
    import logging

    corpus = (tiny_nli_csv(tmp_path / "nli.csv", n=96) if method == "sup_simcse"
              else tiny_corpus(tmp_path / "corpus.txt", n=96))
    main, prog, extra = entry_point(method, tmp_path)
    argv = run_args(backbone, corpus, tmp_path / "full", max_steps=6)
    argv[argv.index("--save_steps") + 1] = "3"
    library_log = logging.getLogger("transformers")  # the library's handler keeps the stream it started with
    said: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: said.append(record.getMessage())
    library_log.addHandler(handler)
    try:
        assert in_process(main, argv + extra, capsys, prog=prog).code == 0
        argv[argv.index("--output_dir") + 1] = str(tmp_path / "resumed")
        resumed = in_process(main, argv + extra + ["--resume_from_checkpoint",
                                                   str(tmp_path / "full" / "checkpoint-3")], capsys, prog=prog)
    finally:
        library_log.removeHandler(handler)
    assert resumed.code == 0, resumed.err
    assert_resumed_run_ends_on_the_uninterrupted_runs_weights(tmp_path / "full", tmp_path / "resumed", 3, 6)
    assert not [message for message in said if "keys in the checkpoint" in message], said


def test_the_restoring_flags_name_no_flag_where_the_run_recorded_no_value(tmp_path):
    """A backbone difference with no recorded path, or a corpus whose recorded file is this command's own (edited
    since): no flag restores it, so none is named (not ``no --model_name_or_path``); a setting the run left unset is
    one to drop."""
    from trainers.resume_settings import CheckpointRecords, restoring_flags

    corpus = tmp_path / "corpus.txt"
    records = CheckpointRecords(tmp_path, config={}, state={}, arguments={"train_file": str(corpus)})
    ours = {"DataArguments": {"train_file": str(corpus)}}
    differences = [("backbone model_type", "bert", "roberta"), ("--train_file's contents", "a", "b"),
                   ("data_seed", None, 5), ("temperature", 0.05, 0.1)]
    assert restoring_flags(records, ours, differences) == ["no --data_seed", "--temp 0.05"]
