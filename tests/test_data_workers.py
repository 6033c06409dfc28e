"""Batches made in data-loading worker processes (``--dataloader_num_workers``, 2 by default on a GPU:
``command_line.arguments.default_dataloader_workers``) are the batches the main process makes: the same losses and
the same trained weights, also for the collators that draw per epoch (ESimCSE's repetition, DiffCSE's edits), over
two epochs. Persistent workers, which would repeat the first epoch's draws, are refused."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import run_diffcse
import run_unsup
from tests.test_cuda_paths import simulate_gpu
from tests.test_tf32_state import restore_precision  # noqa: F401  (a fixture: the Trainer's TF32 switch is global)
from trainers.errors import UsageError
from tests.tiny import FAST_TRAINING_ARGS, save_tiny_backbone, save_tiny_generator, tiny_corpus

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork() of a multi-threaded process


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    root = tmp_path_factory.mktemp("workers")
    return {"backbone": save_tiny_backbone(root / "backbone"), "generator": save_tiny_generator(root / "generator"),
            "corpus": tiny_corpus(root / "corpus.txt", n=20)}


def train(main, argv: list[str], output_dir: Path) -> tuple[list[float], dict[str, torch.Tensor]]:
    """Two epochs of 20 sentences in batches of 8 (the second epoch's draws differ from the first's); the logged
    losses and the exported weights."""
    main([*argv, "--output_dir", str(output_dir), "--num_train_epochs", "2", "--eval_strategy", "no",
          "--save_strategy", "no", "--load_best_model_at_end", "false", "--seed", "3", *FAST_TRAINING_ARGS])
    history = json.loads((output_dir / "trainer_state.json").read_text())["log_history"]
    return [row["loss"] for row in history if "loss" in row], load_file(output_dir / "export/hf/model.safetensors")


@pytest.mark.parametrize("method", ["esimcse", "diffcse"])
def test_batches_made_in_worker_processes_train_the_same_model(method, paths, tmp_path):
    main, argv = run_unsup.main, ["--method", "esimcse", "--dup_rate", "0.5"]
    if method == "diffcse":
        main, argv = run_diffcse.main, ["--generator_name", str(paths["generator"])]
    argv += ["--model_name_or_path", str(paths["backbone"]), "--train_file", str(paths["corpus"])]
    in_process = train(main, [*argv, "--dataloader_num_workers", "0"], tmp_path / "main")
    in_workers = train(main, [*argv, "--dataloader_num_workers", "2"], tmp_path / "workers")
    assert len(in_process[0]) == 6 and in_process[0] == in_workers[0]  # 3 steps per epoch, every loss equal
    assert in_process[1].keys() == in_workers[1].keys()
    assert all(torch.equal(in_process[1][name], in_workers[1][name]) for name in in_process[1])


def test_persistent_workers_are_refused_for_a_collator_that_draws_per_epoch(paths, tmp_path):
    with pytest.raises(UsageError, match="would keep the first epoch's augmentation draws"):
        train(run_unsup.main, ["--method", "esimcse", "--model_name_or_path", str(paths["backbone"]),
                               "--train_file", str(paths["corpus"]), "--dataloader_num_workers", "2",
                               "--dataloader_persistent_workers", "true"], tmp_path / "run")


@pytest.mark.usefixtures("restore_precision")
def test_a_gpu_run_loads_its_batches_in_two_workers_and_a_cpu_run_in_its_own_process(monkeypatch):
    from command_line.arguments import CLTrainingArguments

    assert CLTrainingArguments(output_dir="x", report_to="none").dataloader_num_workers == 0  # this CPU
    simulate_gpu(monkeypatch, bf16=True)
    assert CLTrainingArguments(output_dir="x", report_to="none").dataloader_num_workers == 2
    assert CLTrainingArguments(output_dir="x", report_to="none", dataloader_num_workers=0).dataloader_num_workers == 0
    assert CLTrainingArguments(output_dir="x", report_to="none", use_cpu=True).dataloader_num_workers == 0
