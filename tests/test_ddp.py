"""Two gloo processes (torchrun) train the same objective as one process with the global batch.

Dropout is 0 so both runs are deterministic; each rank sees half the batch; negatives are gathered with
``torch.distributed.nn.all_gather``. The loss on every rank and the DDP-averaged gradients must equal the
single-process global-batch loss and gradients.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch


from tests.launch import REPO_ROOT, run_torchrun, torchrun_timeout
from tests.tiny import save_tiny_backbone, tiny_corpus
from trainers.methods import build_model

WORKER = Path(__file__).parent / "workers" / "ddp_step.py"


def run_two_processes(tmp_path: Path, model_dir: Path, batch_file: Path, method: str = "simcse",
                      backend: str = "gloo") -> list[dict]:
    run_torchrun([str(WORKER)], env={"DDP_MODEL_DIR": str(model_dir), "DDP_BATCH": str(batch_file),
                                     "DDP_OUT": str(tmp_path), "DDP_METHOD": method, "DDP_BACKEND": backend})
    return [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(2)]


@pytest.mark.parametrize("views", [2, 3])  # unsupervised, and supervised with hard negatives
def test_two_processes_equal_one_process_with_global_batch(tmp_path, views):
    model_dir = save_tiny_backbone(tmp_path / "model", dropout=0.0)
    g = torch.Generator().manual_seed(3)
    batch = {"input_ids": torch.randint(5, 80, (8, views, 9), generator=g)}
    batch["attention_mask"] = torch.ones_like(batch["input_ids"])
    batch["attention_mask"][1::3, :, 6:] = 0
    torch.save(batch, tmp_path / "batch.pt")
    method = "simcse" if views == 2 else "sup_simcse"
    ranks = run_two_processes(tmp_path, model_dir, tmp_path / "batch.pt", method)

    torch.manual_seed(0)
    reference = build_model(method, str(model_dir), attn_implementation="eager")
    reference.train()
    loss = reference(**batch).loss
    loss.backward()
    for rank in ranks:
        assert rank["loss"].item() == pytest.approx(loss.item(), abs=1e-5)
    for name, param in reference.named_parameters():
        if param.grad is None:
            continue
        for rank in ranks:
            torch.testing.assert_close(rank["grads"][name], param.grad, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("method, cached", [("simcse", False), ("esimcse", False), ("simcse", True), ("esimcse", True)])
def test_torchrun_training_equals_single_process_training(tmp_path, method, cached):
    """End to end through run_unsup.py and the Trainer: 2 processes x batch 4 end with the same weights as
    1 process x batch 8 (dropout 0, so the only difference could be the objective or the data split). ESimCSE's
    views are random beyond dropout (its repetition): each sentence's draw must not depend on how the global batch
    is split, and the momentum queue holds the gathered keys. ``cached``: the 2 processes run cached steps
    (``--cache_chunk_size 3``: chunks 3 + 1, docs/cached_training.md) and still end where 1 uncached process does."""
    model_dir = save_tiny_backbone(tmp_path / "model", dropout=0.0)
    corpus = tiny_corpus(tmp_path / "corpus.txt", n=32)
    common = ["run_unsup.py", "--method", method, "--model_name_or_path", str(model_dir), "--train_file", str(corpus),
              "--max_steps", "2", "--eval_strategy", "no", "--save_strategy", "steps", "--save_steps", "2",
              "--load_best_model_at_end", "false", "--disable_tqdm", "true", "--dataloader_pin_memory", "false",
              "--use_cpu", "true", "--report_to", "none", "--bf16", "false"]
    run_torchrun([*common, "--per_device_train_batch_size", "4", "--output_dir", str(tmp_path / "two"),
                  *(["--cache_chunk_size", "3"] if cached else [])])
    one = subprocess.run([sys.executable, *common, "--per_device_train_batch_size", "8",
                          "--output_dir", str(tmp_path / "one")], cwd=REPO_ROOT, env={**os.environ,
                         "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=torchrun_timeout())
    assert one.returncode == 0, one.stdout[-3000:] + one.stderr[-3000:]
    from safetensors.torch import load_file

    two_w = load_file(tmp_path / "two" / "checkpoint-2" / "model.safetensors")
    one_w = load_file(tmp_path / "one" / "checkpoint-2" / "model.safetensors")
    for name in one_w:
        torch.testing.assert_close(two_w[name], one_w[name], atol=2e-5, rtol=1e-4, msg=name)
    initial = load_file(model_dir / "model.safetensors")
    shared = [n for n in initial if "encoder." + n in one_w]
    assert len(shared) > 10
    moved = [n for n in shared if not torch.equal(initial[n], one_w["encoder." + n])]
    assert moved, "training did not change the weights, so the comparison above proves nothing"
    assert_complete_for(tmp_path / "two" / "checkpoint-2", processes=2)


def assert_complete_for(checkpoint: Path, processes: int) -> None:
    """The completion marker was written after every process's RNG state (a barrier), and a resume by this many
    processes finds everything it loads (trainers/checkpoints.py); one by another count does not."""
    import json

    from trainers.checkpoints import MARKER, checkpoint_problems, rng_state_files

    listed = json.loads((checkpoint / MARKER).read_text())["files"]
    assert {name: (checkpoint / name).stat().st_size for name in rng_state_files(processes)}.items() <= listed.items()
    assert checkpoint_problems(checkpoint, processes) == []
    assert "missing rng_state.pth (its RNG states are those of 2 process(es)" in checkpoint_problems(checkpoint, 1)[0]
