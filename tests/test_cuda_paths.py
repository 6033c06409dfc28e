"""CPU simulations of code branches that only run on CUDA (docs/cuda_paths.md lists every such branch and its test).

Each test puts torch in the state a GPU run sees (``torch.cuda`` answering as an initialised, bf16-capable GPU
would) and runs the branch's own code, so a broken CUDA branch fails here, on a machine without a GPU, the way
tests/test_tf32_state.py runs the Trainer's TF32 code path. What a CPU cannot simulate (kernels, device placement,
NCCL) is checked on the device by tests/test_cuda.py.
"""
from __future__ import annotations

import pytest
import torch

import trainers.cached_step as cached_step
from tests.test_cached_step import (  # noqa: F401  (paths: the tiny encoders, a module fixture)
    assert_same_step, cached, paths, twins, uncached_at_chunk_masks)
from tests.test_tf32_state import restore_precision  # noqa: F401  (a fixture: the Trainer's TF32 switch is global)

pytestmark = pytest.mark.usefixtures("torch_single_thread")


# ------------------------------------------------------------------------------- the cached step's CUDA RNG states
class SimulatedCudaGenerator:
    """``torch.cuda``'s RNG API on a GPU run: CUDA initialised, one device whose generator draws the dropout masks.

    On a GPU the masks come from the CUDA generator, so only ``torch.cuda.set_rng_state_all`` makes a replayed chunk
    draw its first pass's masks. Simulated: the CUDA calls read and write the generator that really draws here (the
    CPU's), while restoring the CPU state (``torch.set_rng_state``) does nothing, as it would not on a GPU."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.captured: list[torch.Tensor] = []
        self.restored: list[torch.Tensor] = []
        self._set_state = torch.set_rng_state
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_rng_state_all", self.get_rng_state_all)
        monkeypatch.setattr(torch.cuda, "set_rng_state_all", self.set_rng_state_all)
        monkeypatch.setattr(torch, "set_rng_state", lambda state: None)

    def get_rng_state_all(self) -> list[torch.Tensor]:
        state = torch.get_rng_state()
        self.captured.append(state)
        return [state]

    def set_rng_state_all(self, states: list[torch.Tensor]) -> None:
        (state,) = states
        self.restored.append(state)
        self._set_state(state)


@pytest.mark.parametrize("case", ["simcse", "s_simcse"])  # S-SimCSE: its sampled rates come from the generator too
def test_the_cached_step_replays_each_chunk_on_its_captured_cuda_rng_state(paths, case, monkeypatch):
    """Stream masks, 3 chunks of a batch of 8: the step equals the uncached step at the chunks' masks only if every
    replay restores its chunk's CUDA generator state (then the state after the loss, so the next step draws what it
    would have drawn uncached). The first chunk, encoded once with its graph, is not replayed."""
    model, twin, batch = twins(paths, case)
    want = uncached_at_chunk_masks(model, batch, 3)
    generator = SimulatedCudaGenerator(monkeypatch)
    got = cached(twin, batch, 3)
    assert_same_step(got, want)
    assert len(generator.captured) == 3  # one state per replayed chunk, then the state after the loss
    assert [id(s) for s in generator.restored] == [id(s) for s in generator.captured]  # in capture order


def test_a_replay_without_the_cuda_rng_state_is_caught(paths, monkeypatch):
    """The check above can fail: with the CUDA state not restored, the replay draws fresh masks."""
    model, twin, batch = twins(paths, "simcse")
    want = uncached_at_chunk_masks(model, batch, 3)
    SimulatedCudaGenerator(monkeypatch)
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", lambda states: None)
    with pytest.raises(AssertionError):
        assert_same_step(cached(twin, batch, 3), want)


def test_without_cuda_in_use_no_cuda_state_is_taken(monkeypatch):
    """CUDA present but never initialised (a CPU run on a GPU machine): reading its states would initialise it."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: pytest.fail("CUDA initialised by the cached step"))
    assert cached_step.capture_rng().cuda is None


# ------------------------------------------------------------------------------- the Trainer's settings on a GPU
def simulate_gpu(monkeypatch: pytest.MonkeyPatch, bf16: bool, count: int = 1) -> None:
    """torch and transformers answer as on a machine with ``count`` CUDA GPUs (``bf16``: Ampere or newer, with
    TF32)."""
    import transformers.training_args as training_args

    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: bf16)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)  # the Trainer's device set-up: cuda:0
    monkeypatch.setattr(training_args, "is_torch_tf32_available", lambda: bf16)
    training_args.enable_tf32.cache_clear()  # it runs once per process (lru_cache): each test starts afresh


@pytest.mark.usefixtures("restore_precision")
@pytest.mark.parametrize("bf16", [True, False], ids=["ampere", "pre_ampere"])
def test_the_training_arguments_on_a_gpu(bf16, monkeypatch):
    """``CLTrainingArguments`` with no flags on a GPU: the Trainer's own device (no forced ``use_cpu``), pinned
    dataloader memory, fused AdamW; bf16 autocast and TF32 exactly when the GPU has them."""
    from command_line.arguments import CLTrainingArguments

    simulate_gpu(monkeypatch, bf16)
    args = CLTrainingArguments(output_dir="x", report_to="none")
    assert args.device == torch.device("cuda:0") and args.n_gpu == 1  # the Trainer believes in the GPU
    assert not args.use_cpu and args.dataloader_pin_memory
    assert args.bf16 is bf16 and args.tf32 is (True if bf16 else None)
    assert str(getattr(args.optim, "value", args.optim)) == "adamw_torch_fused"
    assert CLTrainingArguments(output_dir="x", report_to="none", bf16=False, tf32=False).bf16 is False


@pytest.mark.usefixtures("restore_precision")
def test_the_fast_path_is_the_default_of_one_gpu_training_in_bf16(monkeypatch):
    """``--torch_compile`` unset: the fast path on one GPU in bf16 (its summary says so); the eager step on a CPU, in
    fp32 and under several processes, and whenever ``--torch_compile false`` is given."""
    from argparse import Namespace

    from command_line.arguments import CLTrainingArguments, default_fast_path
    from command_line.summary import describe_step

    assert not CLTrainingArguments(output_dir="x", report_to="none").fast_path  # this CPU
    simulate_gpu(monkeypatch, bf16=True)
    args = CLTrainingArguments(output_dir="x", report_to="none")
    assert args.fast_path and not args.torch_compile  # ours, not the Trainer's whole-model compile
    assert "the fast path: fixed shapes, compiled backbones" in describe_step(Namespace(dropout_masks="stream"), args)
    cached = CLTrainingArguments(output_dir="x", report_to="none", cache_chunk_size=16)
    assert "the fast path: fixed shapes, compiled backbones" in describe_step(Namespace(dropout_masks="row_seeded"),
                                                                              cached)
    assert "the fast path: fixed shapes, the backbone eager (the cached step replays each chunk's stream" in (
        describe_step(Namespace(dropout_masks="stream"), cached))
    assert "the backbone eager (its compiled step failed: InductorError at step 1: boom)" in describe_step(
        Namespace(dropout_masks="stream"), args, "InductorError at step 1: boom")
    assert not CLTrainingArguments(output_dir="x", report_to="none", torch_compile=False).fast_path
    assert not CLTrainingArguments(output_dir="x", report_to="none", bf16=False).fast_path
    assert not default_fast_path(on_cpu=False, bf16=True, processes=2)
    assert describe_step(Namespace(dropout_masks="stream"), Namespace(fast_path=False)) is None


def test_a_run_on_cuda_records_its_peak_gpu_memory(monkeypatch):
    """all_results.json's ``peak_gpu_memory_mib`` is read from CUDA's allocator once CUDA is in use, never before."""
    from command_line.pipeline import peak_accelerator_memory

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert peak_accelerator_memory() == {}
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *args: 3 * 2**20 + 2**19)
    assert peak_accelerator_memory() == {"peak_gpu_memory_mib": 3.5}


def test_evaluation_defaults_to_the_gpu(monkeypatch):
    """The encoder and the transfer classifier pick CUDA when it is there, the CPU otherwise; only the CPU's
    classifier changes torch's thread count."""
    from eval.classifier import _cpu_threads, default_device
    from eval.encoder import resolve_device

    for available, device in ((True, "cuda"), (False, "cpu")):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
        assert resolve_device(None) == torch.device(device) == default_device()
    threads = torch.get_num_threads()
    with _cpu_threads(torch.device("cuda"), threads + 1):
        assert torch.get_num_threads() == threads


@pytest.mark.usefixtures("restore_precision")
def test_the_transfer_classifier_trains_in_ieee_fp32_inside_a_gpu_training_run(monkeypatch):
    """``--eval_transfer`` in a GPU run: the Trainer has turned TF32 on (transformers' ``enable_tf32``, as
    tests/test_tf32_state.py simulates); the classifier still trains in IEEE float32, like the embeddings it reads,
    and the run's TF32 state is back afterwards."""
    import numpy as np

    import eval.classifier as classifier
    from eval import fp32_precision
    from tests.test_tf32_state import set_by_transformers_enable_tf32

    seen = []
    fit = classifier._fit_many
    monkeypatch.setattr(classifier, "_fit_many", lambda *args: seen.append(fp32_precision.matmul_precision()) or
                        fit(*args))
    set_by_transformers_enable_tf32()
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 4)).astype(np.float32)
    classifier.fit_many(X, (X[:, 0] > 0).astype(np.int64), [classifier.FitSpec(np.arange(30), np.arange(30, 40), 1e-5)],
                        2, classifier.SENTEVAL_CONFIGS["fasttest"], device="cpu")
    assert seen == ["ieee"]
    assert fp32_precision.matmul_precision() == "tf32"


def test_every_test_docs_cuda_paths_names_exists():
    """docs/cuda_paths.md names the test covering each branch (``file.py::name``, or ``::name`` in the file named
    before it in the same row): each must be a test function of that file."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    rows = [line for line in (root / "docs" / "cuda_paths.md").read_text().splitlines() if line.startswith("| ")]
    named = 0
    for row in rows:
        file = None
        for found_file, name in re.findall(r"`(test_\w+\.py)?::(\w+)", row):
            file = found_file or file
            assert file, row
            assert re.search(rf"^def {name}\(", (root / "tests" / file).read_text(), re.M), f"{file}::{name}"
            named += 1
    assert named > 40
