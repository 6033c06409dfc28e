"""Two gloo processes (torchrun) train the same objective as one process with the global batch.

Each rank sees half the batch; negatives are gathered with ``models.distributed.gather_with_grad``. The loss on every
rank and the DDP-averaged gradients must equal the single-process global-batch loss and gradients: with dropout 0
(both runs deterministic), and, through the entry points with dropout on, under row-seeded masks (every method,
cached and uncached, lines of different lengths).
"""
import json
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch


import run_diffcse
import run_unsup
from tests.launch import ENTRY_POINTS_WORKER, run_torchrun
from tests.shared_folders import built_once
from tests.tiny import WORDS, method_script, save_tiny_backbone, save_tiny_generator, tiny_corpus
from tests.weights import assert_resumed_run_ends_on_the_uninterrupted_runs_weights
from trainers.methods import build_model

WORKER = Path(__file__).parent / "workers" / "ddp_step.py"
SCRIPTS = {"run_unsup": run_unsup.main, "run_diffcse": run_diffcse.main}


def train_two_and_one(two_processes: list[list], one_process: list[list]) -> None:
    """Trainings through the entry points, each ``[script, argv]`` (script ``run_unsup`` or ``run_diffcse``): those
    of 2 processes all in one torchrun launch (each launch costs two interpreters and a process group), then those
    of 1 process in this process on one intra-op thread."""
    run_torchrun([str(ENTRY_POINTS_WORKER)], env={"ENTRY_POINT_RUNS": json.dumps(two_processes)})
    for script, argv in one_process:
        in_one_thread(lambda: SCRIPTS[script](argv))


def run_two_processes(tmp_path: Path, model_dir: Path, batch_file: Path, method: str = "simcse",
                      backend: str = "gloo") -> list[dict]:
    output = run_torchrun([str(WORKER)], env={"DDP_MODEL_DIR": str(model_dir), "DDP_BATCH": str(batch_file),
                                              "DDP_OUT": str(tmp_path), "DDP_METHOD": method, "DDP_BACKEND": backend})
    # torch.distributed.nn's differentiable all_gather, which the gather used, warned on every process (torch 2.13)
    assert "is deprecated" not in output, output[-3000:]
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


#: (method, cached) of the 2-vs-1 runs with dropout 0 and the defaults' stream masks and AdamW.
DEFAULT_MASK_CASES = [("simcse", False), ("esimcse", False), ("simcse", True), ("esimcse", True)]


@pytest.fixture(scope="module")
def default_mask_runs(tmp_path_factory):
    """Each :data:`DEFAULT_MASK_CASES` case trained 2 steps through run_unsup.py (:func:`train_two_and_one`):
    2 processes x batch 4 and 1 process x batch 8, saving a checkpoint at step 2. Returns the root folder; runs
    ``<method>-<cached>/<two|one>``."""
    return built_once(tmp_path_factory, "ddp_default_masks", train_default_mask_runs)


def train_default_mask_runs(root: Path) -> None:
    model_dir = save_tiny_backbone(root / "model", dropout=0.0)
    corpus = tiny_corpus(root / "corpus.txt", n=32)

    def argv(method: str, cached: bool, run: str, batch: int, extra: tuple[str, ...] = ()) -> list[str]:
        return ["--method", method, "--model_name_or_path", str(model_dir), "--train_file", str(corpus),
                "--max_steps", "2", "--eval_strategy", "no", "--save_strategy", "steps", "--save_steps", "2",
                "--load_best_model_at_end", "false", "--disable_tqdm", "true", "--dataloader_pin_memory", "false",
                "--use_cpu", "true", "--report_to", "none", "--bf16", "false",
                "--per_device_train_batch_size", str(batch), "--output_dir", str(root / f"{method}-{cached}" / run),
                *extra]

    two = [["run_unsup", argv(method, cached, "two", 4, ("--cache_chunk_size", "3") if cached else ())]
           for method, cached in DEFAULT_MASK_CASES]
    train_two_and_one(two, [["run_unsup", argv(method, cached, "one", 8)] for method, cached in DEFAULT_MASK_CASES])


@pytest.mark.parametrize("method, cached", DEFAULT_MASK_CASES)
def test_torchrun_training_equals_single_process_training(default_mask_runs, method, cached):
    """End to end through run_unsup.py and the Trainer: 2 processes x batch 4 end with the same weights as
    1 process x batch 8 (dropout 0, so the only difference could be the objective or the data split). ESimCSE's
    views are random beyond dropout (its repetition): each sentence's draw must not depend on how the global batch
    is split, and the momentum queue holds the gathered keys. ``cached``: the 2 processes run cached steps
    (``--cache_chunk_size 3``: chunks 3 + 1, docs/cached_training.md) and still end where 1 uncached process does."""
    from safetensors.torch import load_file

    runs = default_mask_runs / f"{method}-{cached}"
    two_w = load_file(runs / "two" / "checkpoint-2" / "model.safetensors")
    one_w = load_file(runs / "one" / "checkpoint-2" / "model.safetensors")
    for name in one_w:
        torch.testing.assert_close(two_w[name], one_w[name], atol=2e-5, rtol=1e-4, msg=name)
    initial = load_file(default_mask_runs / "model" / "model.safetensors")
    shared = [n for n in initial if "encoder." + n in one_w]
    assert len(shared) > 10
    moved = [n for n in shared if not torch.equal(initial[n], one_w["encoder." + n])]
    assert moved, "training did not change the weights, so the comparison above proves nothing"
    assert_complete_for(runs / "two" / "checkpoint-2", processes=2)


def assert_complete_for(checkpoint: Path, processes: int) -> None:
    """The completion marker was written after every process's RNG state (a barrier), and a resume by this many
    processes finds everything it loads (trainers/checkpoints.py); one by another count is refused as such."""
    import json

    from trainers.checkpoints import MARKER, checkpoint_problems, processes_change_error, rng_state_files

    listed = json.loads((checkpoint / MARKER).read_text())["files"]
    assert {name: (checkpoint / name).stat().st_size for name in rng_state_files(processes)}.items() <= listed.items()
    assert checkpoint_problems(checkpoint, processes) == []
    assert processes_change_error(str(checkpoint), processes) is None
    assert f"its run trained on {processes} processes and this resume runs on 1 process." in str(
        processes_change_error(str(checkpoint), 1))


# ------------------------------------------------------------------------- row-seeded masks, dropout on, 2 vs 1
#: Words per line of each block of 8 lines: the global batch of one step. Rank 0 holds 3, 3, 9, 9 (padded to 11
#: tokens with [CLS] and [SEP]), rank 1 holds 6, 6, 6, 6 (padded to 8), one process all 8 (padded to 11); both
#: halves hold 32 tokens (DiffCSE's per-process RTD mean is then the global batch's).
BLOCK_WORDS = (3, 3, 9, 9, 6, 6, 6, 6)
#: method -> (entry point, its flags) of the 2-vs-1 runs under row-seeded masks.
ROW_SEEDED_METHODS = {
    "simcse": ("run_unsup", ["--method", "simcse"]),
    "sup_simcse": ("run_unsup", ["--method", "sup_simcse"]),
    "esimcse": ("run_unsup", ["--method", "esimcse", "--queue_size", "12"]),
    "simcse_pp": ("run_unsup", ["--method", "simcse_pp"]),
    "s_simcse": ("run_unsup", ["--method", "s_simcse"]),
    "promptbert": ("run_unsup", ["--method", "promptbert"]),
    # DiffCSE trains a per-process objective by design (docs/diffcse.md): its RTD loss is each process's token mean
    # and its BatchNorm projector's statistics are each process's. So its batches are dealt in corpus order (each
    # rank's half holds 32 tokens, so the mean of the two means is the global mean) and the projector is the MLP.
    "diffcse": ("run_diffcse", ["--projector", "mlp", "--train_sampling_strategy", "sequential"]),
}


def varying_lines(rng, blocks: int) -> list[str]:
    return [" ".join(rng.choices(WORDS, k=words)) for _ in range(blocks) for words in BLOCK_WORDS]


#: The fast path under two processes (``two_fast``): the compiled backbones' keyed masks read each process's first
#: sentence from the staged step key (rank x batch), and its batches are padded to the fixed width.
FAST_PATH_METHODS = ("simcse", "diffcse")
FAST_PATH = ("--torch_compile", "true", "--torch_compile_backend", "aot_eager")


@pytest.fixture(scope="module")
def row_seeded_runs(tmp_path_factory):
    """Every method trained 3 steps with dropout on under row-seeded masks, through its entry point: 2 processes x
    4 sentences uncached and cached (``--cache_chunk_size 3``: chunks of 3 + 1) and, for :data:`FAST_PATH_METHODS`, on
    the fast path uncached, cached (``--cache_chunk_size 2``: equal chunks compile fewer graphs, 15 -> 8 s for SimCSE
    and 21 -> 12 s for DiffCSE; a short chunk compiled is the one-process tests' of tests/test_fast_path.py) and layer
    by layer, all 20 runs in one torchrun launch, and 1 process x 8 sentences uncached. Returns the root folder; run ``<method>/<run>``, run one of two, two_cached, two_fast, two_fast_cached,
    two_fast_layers, one."""
    return built_once(tmp_path_factory, "row_seeded_ddp", train_row_seeded_runs)


def train_row_seeded_runs(root: Path) -> None:
    import random

    model_dir = save_tiny_backbone(root / "model", seed=0)  # dropout 0.1: hidden states and attention probabilities
    generator = save_tiny_generator(root / "generator")
    rng = random.Random(0)
    (root / "corpus.txt").write_text("\n".join(varying_lines(rng, 4)) + "\n")
    pairs = zip(varying_lines(rng, 4), varying_lines(rng, 4), varying_lines(rng, 4))
    (root / "nli.csv").write_text("sent0,sent1,hard_neg\n" + "".join(",".join(row) + "\n" for row in pairs))
    common = ["--model_name_or_path", str(model_dir), "--max_steps", "3", "--optim", "sgd", "--learning_rate", "0.1",
              "--eval_strategy", "no", "--save_strategy", "no", "--disable_tqdm", "true",
              "--dataloader_pin_memory", "false", "--use_cpu", "true", "--report_to", "none", "--bf16", "false",
              "--dropout_masks", "row_seeded"]

    def argv(method: str, run: str, batch: int, extra: tuple[str, ...] = ()) -> list[str]:
        script, flags = ROW_SEEDED_METHODS[method]
        data = ["--train_file", str(root / ("nli.csv" if method == "sup_simcse" else "corpus.txt")),
                *(["--generator_name", str(generator)] if script == "run_diffcse" else [])]
        return [*common, *data, *flags, "--per_device_train_batch_size", str(batch),
                "--output_dir", str(root / method / run), *extra]

    two = [[ROW_SEEDED_METHODS[m][0], argv(m, run, 4, extra)] for m in ROW_SEEDED_METHODS
           for run, extra in (("two", ()), ("two_cached", ("--cache_chunk_size", "3")))]
    two += [[ROW_SEEDED_METHODS[m][0], argv(m, run, 4, FAST_PATH + extra)] for m in FAST_PATH_METHODS
            for run, extra in (("two_fast", ()), ("two_fast_cached", ("--cache_chunk_size", "2")),
                               ("two_fast_layers", ("--torch_compile_regions", "layers")))]
    train_two_and_one(two, [[script, argv(method, "one", 8)] for method, (script, _) in ROW_SEEDED_METHODS.items()])


@pytest.mark.parametrize("run", ["two", "two_cached"], ids=["uncached", "cached"])
@pytest.mark.parametrize("method", list(ROW_SEEDED_METHODS))
def test_two_processes_train_the_one_process_objective_under_row_seeded_masks(row_seeded_runs, method, run):
    """Issue 33: with dropout on (hidden states and attention probabilities) and lines of different lengths, each
    process pads its own half of the global batch to its own width (11 and 8 tokens; one process: 11). Row-seeded
    masks are keyed by coordinates, not by offsets from the padded width, so 2 processes x 4 sentences, uncached or
    cached, export the weights of 1 process x 8 sentences after 3 SGD steps at lr 0.1 (measured: at most 6e-8 apart;
    SGD, not AdamW, whose normalised steps would blow float32 rounding in near-zero gradients up to lr-sized
    moves). On e921ce2, whose keys used the padded width: 8e-5 (SimCSE++) to 4.3e-4 (PromptBERT) apart."""
    assert_two_processes_export_one_process_weights(row_seeded_runs, method, run)


@pytest.mark.parametrize("run", ["two_fast", "two_fast_cached", "two_fast_layers"],
                         ids=["uncached", "cached", "layers"])
@pytest.mark.parametrize("method", FAST_PATH_METHODS)
def test_two_processes_on_the_fast_path_train_the_one_process_objective(row_seeded_runs, method, run):
    """The same on the fast path (``--torch_compile true``, aot_eager): 2 processes, their backbones compiled (DiffCSE's
    generator and discriminator too) with the keyed masks inside the graphs, uncached and cached (chunks of 2: each
    chunk's compiled passes, its key staged), and layer by layer (``--torch_compile_regions layers``: DDP's gradient hooks
    fire from each layer's compiled backward), export 1 eager process's weights."""
    assert_two_processes_export_one_process_weights(row_seeded_runs, method, run)


def assert_two_processes_export_one_process_weights(root, method: str, run: str) -> None:
    """``root/<method>/<run>``'s exported weights are within 1e-6 of the one-process run's, and training moved them."""
    from safetensors.torch import load_file

    one = load_file(root / method / "one" / "export" / "hf" / "model.safetensors")
    two = load_file(root / method / run / "export" / "hf" / "model.safetensors")
    assert one.keys() == two.keys()
    difference = max(float((two[name] - one[name]).abs().max()) for name in one)
    assert difference < 1e-6, f"{method}: 2 processes' export is {difference:.2e} from 1 process's"
    initial = load_file(root / "model" / "model.safetensors")
    moved = max(float((one[name] - initial[name]).abs().max()) for name in initial if name in one)
    assert moved > 1e-3, "training did not move the weights, so the comparison above proves nothing"


# ------------------------------------------------------------------------- the epoch's last step, completed
def test_every_process_picks_the_best_checkpoint_from_the_first_processs_dev_scores(tmp_path, sts_fixture_dir):
    """``--projector batchnorm --mlp_only_train false`` keeps the BatchNorm projector in the test-time embedding, and
    its running statistics are each process's own (updated by its own batch): the two processes scored the dev sets
    apart (23.79 and 23.53 at step 6), chose different best checkpoints, and the run stopped on a gloo collective
    mismatch. Every evaluation now returns the first process's scores on both."""
    model_dir = save_tiny_backbone(tmp_path / "model")
    argv = ["--model_name_or_path", str(model_dir), "--train_file", str(tiny_corpus(tmp_path / "corpus.txt", n=64)),
            "--output_dir", str(tmp_path / "run"), "--max_steps", "6", "--eval_steps", "2",
            "--per_device_train_batch_size", "4", "--learning_rate", "1e-3", "--projector", "batchnorm",
            "--mlp_only_train", "false", "--senteval_dir", str(sts_fixture_dir), "--disable_tqdm", "true",
            "--dataloader_pin_memory", "false", "--use_cpu", "true", "--report_to", "none", "--bf16", "false"]
    run_torchrun([str(ENTRY_POINTS_WORKER)], env={"ENTRY_POINT_RUNS": json.dumps([["run_unsup", argv]]),
                                                  "RECORD_EVALUATIONS": str(tmp_path)})
    first, second = ([{key: value for key, value in json.loads(line).items() if not key.endswith("_runtime")}
                      for line in (tmp_path / f"evaluations_{rank}.jsonl").read_text().splitlines()]
                     for rank in range(2))  # the time each process took is its own
    assert first == second and [entry["step"] for entry in first] == [0, 2, 4, 6, 6]
    scores = [entry.get("eval_stsb_spearman") for entry in first[1:]]
    assert len(set(scores)) > 1, "training did not move the scores, so their agreement proves little"
    state = json.loads((tmp_path / "run" / "trainer_state.json").read_text())
    assert state["best_model_checkpoint"] is not None


@pytest.mark.parametrize("rows, batch, processes", [(36, 4, 2), (32, 4, 2), (33, 4, 2), (5, 4, 2), (37, 3, 4),
                                                    (100, 7, 3), (8, 8, 1)])
def test_the_warning_counts_what_accelerate_adds_to_the_last_step(rows, batch, processes):
    """The count the warning gives is what accelerate's batch sharding (``even_batches``, the Trainer's default)
    yields beyond the corpus: its own ``BatchSamplerShard`` run for every process, not a formula restated."""
    from types import SimpleNamespace

    from accelerate.data_loader import BatchSamplerShard
    from torch.utils.data import BatchSampler, SequentialSampler

    from command_line.pipeline import completed_last_batch_warning

    sampler = BatchSampler(SequentialSampler(range(rows)), batch, drop_last=False)
    shards = [list(BatchSamplerShard(sampler, processes, rank)) if processes > 1 else list(sampler)
              for rank in range(processes)]
    yielded = sum(len(b) for shard in shards for b in shard)
    last_step = sum(len(shard[-1]) for shard in shards)
    args = SimpleNamespace(world_size=processes, per_device_train_batch_size=batch, dataloader_drop_last=False)
    warning = completed_last_batch_warning(rows, args)
    added = yielded - rows
    if added == 0:
        assert warning is None
    else:
        assert f"leave {last_step - added} for each epoch's last step" in warning
        assert f"completes with {added} sentences from the epoch's start" in warning
    assert completed_last_batch_warning(rows, SimpleNamespace(**{**vars(args), "dataloader_drop_last": True})) is None


@pytest.mark.parametrize("max_steps, accumulation, warned", [(-1, 1, True), (4, 1, False), (5, 1, True),
                                                             (2, 2, False), (3, 2, True), (40, 1, True)])
def test_a_run_that_ends_before_the_epochs_last_step_is_not_warned_of_it(max_steps, accumulation, warned):
    """36 rows over 2 processes x 4 make 5 rounds, the last completed with 4 sentences from the epoch's start: a run
    of fewer rounds (``--max_steps`` x ``--gradient_accumulation_steps``) never trains that step, so it hears
    nothing of it; a run that reaches it (or trains whole epochs) does."""
    from types import SimpleNamespace

    from command_line.pipeline import completed_last_batch_warning

    args = SimpleNamespace(world_size=2, per_device_train_batch_size=4, dataloader_drop_last=False,
                           max_steps=max_steps, gradient_accumulation_steps=accumulation)
    assert (completed_last_batch_warning(36, args) is not None) is warned


def test_two_processes_warn_of_the_completed_last_step_and_drop_last_trains_one_process_objective(tmp_path):
    """36 rows, 2 processes x 4: the run says, once in its log and once in its summary, that the epoch's last step
    holds 4 sentences from the epoch's start. With ``--dataloader_drop_last true`` (what the warning offers) it says
    nothing and exports 1 process x 8's weights (dropout 0). Plain SGD: this tiny model's loss is ln 8 at dropout 0
    (gradient norms ~4e-3), and AdamW turns a near-zero gradient's float noise into a full step (1.4e-4 apart between
    two ATen capabilities of one process on an Intel Xeon, 2026-12-03), while SGD's step is the gradient itself,
    its noise as small (1e-6 apart there)."""
    from safetensors.torch import load_file

    model_dir = save_tiny_backbone(tmp_path / "model", dropout=0.0)
    corpus = tiny_corpus(tmp_path / "corpus.txt", n=36)

    def argv(run: str, batch: int, extra: tuple[str, ...] = ()) -> list[str]:
        return ["--method", "simcse", "--model_name_or_path", str(model_dir), "--train_file", str(corpus),
                "--num_train_epochs", "1", "--eval_strategy", "no", "--save_strategy", "no",
                "--load_best_model_at_end", "false", "--disable_tqdm", "true", "--dataloader_pin_memory", "false",
                "--use_cpu", "true", "--report_to", "none", "--bf16", "false", "--optim", "sgd", "--learning_rate", "1",
                "--per_device_train_batch_size", str(batch), "--output_dir", str(tmp_path / run), *extra]

    drop_last = ("--dataloader_drop_last", "true")
    output = run_torchrun([str(ENTRY_POINTS_WORKER)], env={"ENTRY_POINT_RUNS": json.dumps(
        [["run_unsup", argv("two", 4)], ["run_unsup", argv("two_drop_last", 4, drop_last)]])})
    warning = "2 processes x 4: the 36 training rows leave 4 for each epoch's last step, which accelerate completes"
    assert output.count(warning) == 2, output[-4000:]  # the log's line and the summary's
    assert "step: 2 processes x 4 sentences, negatives gathered: contrast batch 8" in output
    assert "--max_train_samples 32) or --dataloader_drop_last true" in output
    in_one_thread(lambda: run_unsup.main(argv("one_drop_last", 8, drop_last)))
    one = load_file(tmp_path / "one_drop_last" / "export" / "hf" / "model.safetensors")
    two = load_file(tmp_path / "two_drop_last" / "export" / "hf" / "model.safetensors")
    initial = load_file(tmp_path / "model" / "model.safetensors")
    for name in one:
        torch.testing.assert_close(two[name], one[name], atol=2e-5, rtol=1e-4, msg=name)
    # the backbone's own weights moved (the export's pooler is SimCSE's MLP, which starts elsewhere)
    assert max(float((one[n] - initial[n]).abs().max()) for n in initial if n in one and "pooler" not in n) > 1e-4


#: Two-process runs resumed halfway (:func:`resumed_runs`): name -> (method, its flags). ``esimcse_own_queues``: each
#: process keeps its own queue (``--gather_queue false``, the authors' code's), which no other process's may replace.
RESUMED_RUNS = {
    "simcse": ("simcse", ()),
    "esimcse": ("esimcse", ("--queue_size", "8")),
    "esimcse_own_queues": ("esimcse", ("--queue_size", "8", "--gather_queue", "false")),
    "diffcse": ("diffcse", ()),
}


@pytest.fixture(scope="module")
def resumed_runs(tmp_path_factory) -> Path:
    """Each :data:`RESUMED_RUNS` run trained by two processes with dropout on: four steps in one run
    (``<name>/full``), and steps 3-4 resumed by two processes from its checkpoint-2 (``<name>/resumed``), all
    eight runs through the entry points in one torchrun launch, each logging at step 4 (a logging window its
    checkpoint-2 falls inside). Returns the root folder."""
    return built_once(tmp_path_factory, "ddp_resumed", train_resumed_runs)


def train_resumed_runs(root: Path) -> None:
    model_dir = save_tiny_backbone(root / "model", seed=0)  # dropout 0.1
    corpus = tiny_corpus(root / "corpus.txt", n=48)
    runs = []
    for name, (method, flags) in RESUMED_RUNS.items():
        script, method_flags = method_script(method, root / name)
        common = [*method_flags, *flags, "--model_name_or_path", str(model_dir), "--train_file", str(corpus),
                  "--max_steps", "4", "--eval_strategy", "no", "--save_strategy", "steps", "--save_steps", "2",
                  "--save_total_limit", "2", "--load_best_model_at_end", "false", "--disable_tqdm", "true",
                  "--dataloader_pin_memory", "false", "--use_cpu", "true", "--report_to", "none", "--bf16", "false",
                  "--per_device_train_batch_size", "4", "--logging_steps", "4"]
        full = root / name / "full"
        runs += [[script, [*common, "--output_dir", str(full)]],
                 [script, [*common, "--output_dir", str(root / name / "resumed"), "--resume_from_checkpoint",
                           str(full / "checkpoint-2")]]]
    # the same global batch on another number of processes (:data:`LAYOUT`): 1 x 8 first, here
    layout = [*LAYOUT, "--model_name_or_path", str(model_dir), "--train_file", str(corpus)]
    in_one_thread(lambda: run_unsup.main([*layout, "--per_device_train_batch_size", "8", "--output_dir",
                                          str(root / "layout" / "one")]))
    runs += [["run_unsup", [*layout, "--per_device_train_batch_size", "4", "--output_dir",
                            str(root / "layout" / "two")]],
             ["run_unsup", [*layout, "--per_device_train_batch_size", "4", "--output_dir",
                            str(root / "layout" / "one_resumed_by_two"), "--resume_from_checkpoint",
                            str(root / "layout" / "one" / "checkpoint-2")]]]
    output = run_torchrun([str(ENTRY_POINTS_WORKER)], env={"ENTRY_POINT_RUNS": json.dumps(runs)})
    (root / "layout" / "torchrun.log").write_text(output)
    with capture_logs() as logs:
        in_one_thread(lambda: run_unsup.main([*layout, "--per_device_train_batch_size", "8", "--output_dir",
                                              str(root / "layout" / "two_resumed_by_one"), "--resume_from_checkpoint",
                                              str(root / "layout" / "two" / "checkpoint-2")]))
    (root / "layout" / "one.log").write_text(logs.getvalue())


#: SimCSE with row-seeded masks (keyed by sentence: the same whatever process encodes it) and SGD (AdamW's normalised
#: steps would blow the all-reduce's float32 rounding up to lr-sized moves), 4 steps, checkpoints at 2 and 4: 2 x 4
#: and 1 x 8, each resumed halfway by the other layout (:func:`train_resumed_runs`).
LAYOUT = ["--method", "simcse", "--dropout_masks", "row_seeded", "--optim", "sgd", "--learning_rate", "0.1",
          "--max_steps", "4", "--eval_strategy", "no", "--save_strategy", "steps", "--save_steps", "2",
          "--save_total_limit", "2", "--load_best_model_at_end", "false", "--disable_tqdm", "true",
          "--dataloader_pin_memory", "false", "--use_cpu", "true", "--report_to", "none", "--bf16", "false"]


def in_one_thread(run) -> None:
    """``run()`` on one intra-op thread, as each torchrun process runs (the same float32 sums)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run()
    finally:
        torch.set_num_threads(previous)


@contextmanager
def capture_logs():
    """The ``cse_repro`` logger's records in a StringIO while the block runs."""
    import io
    import logging

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = logging.getLogger("cse_repro")
    logger.addHandler(handler)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)


@pytest.mark.parametrize("name", RESUMED_RUNS)
def test_two_processes_resumed_halfway_end_on_the_uninterrupted_runs_weights(resumed_runs, name):
    """Two processes with dropout on (stream masks, each process's RNG state in its own ``rng_state_<rank>.pth``;
    ESimCSE's gathered queue and momentum encoder, or each process's own queue in its ``process_state_<rank>``;
    DiffCSE's generator sampling each process's edits): steps 3-4 resumed by two processes from checkpoint-2 end on
    the uninterrupted run's weights (:func:`resumed_runs`)."""
    runs = resumed_runs / name
    assert_resumed_run_ends_on_the_uninterrupted_runs_weights(runs / "full", runs / "resumed", 2, 4)
    assert_complete_for(runs / "full" / "checkpoint-2", processes=2)


@pytest.mark.parametrize("name", RESUMED_RUNS)
def test_two_processes_resumed_inside_a_logging_window_log_the_uninterrupted_runs_window(resumed_runs, name):
    """The log at step 4 averages steps 1-4 over both processes; the resume from checkpoint-2 logged the mean of steps
    3-4 alone. Each checkpoint holds the window's sums averaged over the processes (``trainers/logging_window.py``),
    and the resumed run's step-4 log (its loss and the model's metrics) is the uninterrupted run's."""
    def logged(run: Path) -> dict:
        history = json.loads((run / "checkpoint-4" / "trainer_state.json").read_text())["log_history"]
        (entry,) = [entry for entry in history if "loss" in entry]
        return {key: value for key, value in entry.items() if key != "sentences_per_second"}

    runs = resumed_runs / name
    uninterrupted, again = logged(runs / "full"), logged(runs / "resumed")
    assert uninterrupted["step"] == 4 and len(uninterrupted) > 5, uninterrupted  # the model's metrics too
    assert again == pytest.approx(uninterrupted, rel=1e-5), (again, uninterrupted)


@pytest.mark.parametrize("run, resumed", [("one", "one_resumed_by_two"), ("two", "two_resumed_by_one")])
def test_a_resume_on_another_number_of_processes_with_the_runs_global_batch_continues_the_run(resumed_runs, run,
                                                                                             resumed):
    """1 x 8 resumed halfway as 2 x 4 (torchrun), and 2 x 4 resumed as 1 x 8: the same global batch (the same
    batches, gathered negatives: the same objective), row-seeded masks keyed by sentence. Both end on the
    uninterrupted run's tensors (SGD, within float32 rounding of the all-reduce); a resume on another number of
    processes was refused whatever its batch. Each says what goes on from other states (the RNG's draws)."""
    root = resumed_runs / "layout"
    assert_resumed_run_ends_on_the_uninterrupted_runs_weights(root / run, root / resumed, 2, 4)
    log = (root / ("torchrun.log" if resumed == "one_resumed_by_two" else "one.log")).read_text()
    counts = "1 process and resumes on 2 x 4" if resumed == "one_resumed_by_two" else "2 processes and resumes on 1 x 8"
    assert (f"checkpoint-2: the run trained on {counts} sentences, the same global batch: the same batches and the "
            f"same objective, but the RNG states were each process's") in log, log[-3000:]


@pytest.mark.parametrize("run, launch, card", [
    ("one", {"processes": 1, "sentences_per_step": 8}, "batch 8 per process x 1 process (8 sentences a step), "),
    ("two", {"processes": 2, "sentences_per_step": 8}, "batch 4 per process x 2 processes (8 sentences a step), "),
    ("one_resumed_by_two", {"processes": 2, "sentences_per_step": 8, "resumed_from_processes": 1},
     "batch 4 per process x 2 processes (8 sentences a step), resumed from a run on 1 process, "),
    ("two_resumed_by_one", {"processes": 1, "sentences_per_step": 8, "resumed_from_processes": 2},
     "batch 8 per process x 1 process (8 sentences a step), resumed from a run on 2 processes, "),
])
def test_a_run_records_the_processes_it_trained_on(resumed_runs, run, launch, card):
    """No parsed argument holds the processes: a 2 x 4 run's run_arguments.json, its card and the results JSON of
    ``python -m eval --training_run`` read ``per_device_train_batch_size 4``, as a one-process run of batch 4 would
    (the table scripts divide the paper's batch by the processes). Each run records them in its ``launch`` section
    (and a resume on other processes the run's), and its card says them."""
    folder = resumed_runs / "layout" / run
    assert json.loads((folder / "run_arguments.json").read_text())["launch"] == launch
    for export in ("hf", "sentence-transformers"):
        assert card in (folder / "export" / export / "README.md").read_text()


def test_each_process_keeps_and_checkpoints_its_own_queue(resumed_runs, tmp_path):
    """``--gather_queue false`` under two processes: each process's queue holds its own keys. DDP broadcast every
    buffer from rank 0 at every forward, so both processes trained with rank 0's queue, and a checkpoint held rank
    0's alone. Now each process's queue is its own (the two differ), each checkpoint holds each process's, the
    weights file rank 0's, and a resume restores each (the resumed run's queues at step 4 are the uninterrupted
    run's). A checkpoint missing a process's file is refused for a resume by two processes."""
    import shutil

    from safetensors.torch import load_file

    from trainers.checkpoints import checkpoint_problems
    from trainers.process_state import process_state_file

    runs = resumed_runs / "esimcse_own_queues"
    full, resumed = runs / "full" / "checkpoint-4", runs / "resumed" / "checkpoint-4"
    own = [load_file(full / process_state_file(rank)) for rank in range(2)]
    assert sorted(own[0]) == ["queue.count", "queue.embeddings", "queue.ptr"]
    assert int(own[0]["queue.count"]) == 8 and int(own[1]["queue.count"]) == 8  # 4 steps x 4 keys, 8 kept
    # each process's own keys (the tiny random backbone's embeddings of different sentences are close: ~2e-3 apart
    # at most, against 0 exactly for the broadcast copy of rank 0's queue)
    assert (own[0]["queue.embeddings"] - own[1]["queue.embeddings"]).abs().max() > 1e-5
    weights = load_file(full / "model.safetensors")
    for name, tensor in own[0].items():
        assert torch.equal(weights[name], tensor), name
    for rank in range(2):
        again = load_file(resumed / process_state_file(rank))
        for name, tensor in own[rank].items():
            torch.testing.assert_close(again[name], tensor, rtol=0, atol=1e-6, msg=f"rank {rank}: {name}")
    model = build_model("esimcse", str(resumed_runs / "model"), attn_implementation="eager", queue_size=8,
                        gather_queue=False)
    assert checkpoint_problems(full, 2, model) == []
    copy = tmp_path / "checkpoint-4"
    shutil.copytree(full, copy)
    (copy / process_state_file(1)).unlink()
    assert checkpoint_problems(copy, 2, model)[0].startswith("missing process_state_1.safetensors")
    # a checkpoint written before the processes' own files (none, no marker) resumes with rank 0's queue everywhere
    from trainers.checkpoints import MARKER
    from trainers.process_state import load_process_state

    (copy / process_state_file(0)).unlink()
    (copy / MARKER).unlink()
    assert checkpoint_problems(copy, 2, model) == []
    assert load_process_state(model, copy, 1) is False and load_process_state(model, full, 1) is True
    torch.testing.assert_close(model.queue.embeddings, own[1]["queue.embeddings"], rtol=0, atol=0)
    assert not list((resumed_runs / "esimcse" / "full" / "checkpoint-4").glob("process_state_*"))  # one queue
