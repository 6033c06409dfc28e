"""The whole step as one CUDA graph (``--step_graph true``, trainers/step_graph.py), on a CPU simulation of a CUDA
graph (tests/op_tape.py: the recorded operations replayed on the captured tensors, host values frozen).

- The simulation itself: a replay reads its inputs afresh, draws new random numbers, keeps a host value as captured,
  refuses a host read during the capture and leaves no trace of the capture.
- Every method replays its eager steps exactly (losses, gradient norms, gradients; dropout 0.1, four replays),
  ESimCSE with its queue once the queue is full (its ring then advances from the device's position), and with
  row-seeded masks the key staged on the device before each replay gives the eager steps' masks, DiffCSE's sampled
  tokens and S-SimCSE's rates; captured while its queue fills, ESimCSE's replays would write every batch to the
  captured slots (why the capture waits for the model's shapes to settle).
- Through ``run_unsup.py`` / ``run_diffcse.py``: ``--step_graph true`` logs the steps the fast path without it logs,
  bit for bit (2 warm-up steps, the capture, 4 replays, the short last batch eager; SimCSE evaluating between
  replays, DiffCSE row-seeded, ESimCSE after its queue fills, the cached step with all its chunks' passes in the
  graph); a run resumed from a checkpoint captures again and
  logs the uninterrupted run's steps; a capture that fails leaves the run on its compiled step with a warning; where
  it cannot hold, the run stops with the reason.
"""
from __future__ import annotations

import copy
import random

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import AutoTokenizer

import run_diffcse
import run_unsup
import trainers.step_graph as step_graph
from bench.backbone_sweep import run_method, simulated_cuda_graphs, simulated_gpu_argv
from tests.cli import in_process
from tests.op_tape import HostReadInCapture, OpTape
from tests.tiny import FAST_TRAINING_ARGS, save_tiny_backbone, save_tiny_generator, tiny_corpus
from trainers.cl_trainer import CLTrainer
from trainers.fast_path import compile_mode, fixed_shape_collator
from trainers.keyed_dropout import keyed_step
from trainers.methods import build_collator, build_model
from trainers.step_graph import StepGraph, StepOutputs

ROWS = [{"text": t, "sent0": t, "sent1": t[::-1], "hard_neg": t.upper()} for t in (
    "the cat sits on the big red chair", "a dog runs in the park", "music is good",
    "the old king reads a new book in the house", "a man plays the guitar", "water is blue")]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("step_graph")
    return {"encoder": save_tiny_backbone(root / "encoder", seed=0, dropout=0.1),
            "roberta": save_tiny_backbone(root / "roberta", arch="roberta", seed=0, dropout=0.1),
            "distilbert": save_tiny_backbone(root / "distilbert", arch="distilbert", seed=0, dropout=0.1),
            "modernbert": save_tiny_backbone(root / "modernbert", arch="modernbert", seed=0, dropout=0.1),
            "ibert": save_tiny_backbone(root / "ibert", arch="ibert", seed=0, dropout=0.1),
            "deberta-v2": save_tiny_backbone(root / "deberta-v2", arch="deberta-v2", seed=0, dropout=0.1),
            "gte": save_tiny_backbone(root / "gte", arch="gte", seed=0, dropout=0.1),
            "roc_bert": save_tiny_backbone(root / "roc_bert", arch="roc_bert", seed=0, dropout=0.1),
            "generator": save_tiny_generator(root / "generator"),
            "corpus": tiny_corpus(root / "corpus.txt", n=60)}  # batch 8: 7 full batches, then a short one of 4


@pytest.fixture
def simulated_graphs():
    """CUDA graphs simulated on this CPU (the run's graph backend is the op tape)."""
    with simulated_cuda_graphs():
        yield


# ------------------------------------------------------------------------------------------------ the simulation
def test_the_simulated_graph_replays_kernels_not_host_code():
    weight = torch.ones(3)
    host_counter = [1.0]
    static_input = torch.zeros(3)
    buffer = torch.zeros(3)
    tape = OpTape(torch.nn.Module())
    torch.manual_seed(0)
    state = torch.get_rng_state()
    with tape.capturing():
        noise = torch.rand(3)
        out = (static_input + weight) * host_counter[0] + noise
        buffer.add_(1)  # not a module buffer: the capture's run changes it, as a CUDA graph's would not
    assert torch.equal(torch.get_rng_state(), state)  # the capture leaves the generator where it was
    host_counter[0] = 100.0  # host state: frozen at the captured 1.0
    static_input.copy_(torch.tensor([1.0, 2.0, 3.0]))  # a static input: read afresh
    tape.replay()
    first_noise = noise.clone()
    assert torch.allclose(out, torch.tensor([2.0, 3.0, 4.0]) + noise)
    tape.replay()
    assert not torch.equal(noise, first_noise)  # new random numbers at every replay
    assert torch.equal(buffer, torch.full((3,), 3.0))  # an in-place op runs at every replay
    with pytest.raises(HostReadInCapture, match="_local_scalar_dense"):
        with OpTape(torch.nn.Module()).capturing():
            (static_input.sum() > 0).item()


# ------------------------------------------------------------------------------------------------ every method
ROW_SEEDED = {"dropout_masks": "row_seeded"}
#: case: (method, its settings, backbone). Row-seeded masks: the step's key staged on the device before each replay
#: (DiffCSE's generator samples its tokens from keyed uniforms in eager code, S-SimCSE draws its rates keyed); other
#: backbones through AutoModel: RoBERTa's positions from the ids, DistilBERT's own attention and dropout.
CASES = {"simcse": ("simcse", {}, "encoder"), "sup_simcse": ("sup_simcse", {}, "encoder"),
         "s_simcse": ("s_simcse", {}, "encoder"), "simcse_pp": ("simcse_pp", {}, "encoder"),
         "promptbert": ("promptbert", {}, "encoder"), "diffcse": ("diffcse", {}, "encoder"),
         "esimcse": ("esimcse", {"queue_size": 18}, "encoder"), "esimcse_no_queue": ("esimcse", {"queue_size": 0},
                                                                                     "encoder"),
         "simcse_row_seeded": ("simcse", ROW_SEEDED, "encoder"), "s_simcse_row_seeded": ("s_simcse", ROW_SEEDED,
                                                                                          "encoder"),
         "diffcse_row_seeded": ("diffcse", ROW_SEEDED | {"generator_dropout": True}, "encoder"),
         "simcse_roberta": ("simcse", {}, "roberta"), "simcse_distilbert": ("simcse", {}, "distilbert")}
#: Steps each case runs before its capture: ESimCSE's queue of 18 fills in three batches of 6 (the trainer captures
#: once ``model.step_shapes_settled()``).
EAGER_STEPS = {"esimcse": 3}


def method_model(case: str, files):
    method, settings, backbone = CASES[case]
    extra = {"generator_name": str(files["generator"])} if method == "diffcse" else {}
    torch.manual_seed(0)
    model = build_model(method, str(files[backbone]), **settings, **extra).train()
    collate = fixed_shape_collator(build_collator(model, AutoTokenizer.from_pretrained(str(files[backbone])), 12),
                                   model.fixed_width_keys())
    return model, [collate(ROWS[i % 6:] + ROWS[:i % 6]) for i in range(EAGER_STEPS.get(case, 0) + 5)]


def step_body(model):
    """The trainer's captured step (trainers/cl_trainer.py ``step_body``): forward, backward, clipping to 1."""
    parameters = list(model.parameters())

    def body(batch) -> StepOutputs:
        outputs = model(**batch)
        outputs.loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(parameters, 1.0)
        return StepOutputs(outputs.loss.detach(), None, norm, [p.grad for p in parameters])
    return parameters, body


def eager_and_graph_steps(model, batches, capture_at: int = 0):
    """The steps of ``model`` eagerly and of a copy through a :class:`StepGraph` (the steps before ``capture_at``
    eager, that one captured, the later ones replayed), from the same random state, with ESimCSE's momentum update
    between steps: each step's loss, norm and gradients. Each step runs in its :func:`keyed_step`; the graph's steps
    stage the key (row-seeded masks: read on the device), the eager ones draw from the Python integers."""
    twin = copy.deepcopy(model)
    runs = {}
    for network in (model, twin):
        parameters, body = step_body(network)
        graph = StepGraph(network, parameters) if network is twin else None
        torch.manual_seed(3)
        random.seed(3)
        runs[network] = []
        for index, batch in enumerate(batches):
            with keyed_step(network, batch["input_ids"].size(0)) as draws:
                if graph is None or index < capture_at:
                    outputs = body(batch)
                else:
                    if draws is not None:
                        draws.stage(batch["input_ids"].device)
                    outputs = graph.capture(batch, body) if index == capture_at else graph.replay(batch)
            runs[network].append((outputs.loss.clone(), outputs.grad_norm.clone(),
                                  [p.grad.clone() for p in parameters if p.grad is not None]))
            network.zero_grad()
            network.on_optimizer_step()
    assert graph.replays == len(batches) - capture_at - 1 and graph.failure is None
    return runs[model], runs[twin]


def identical(eager, replayed) -> bool:
    return all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and len(a[2]) == len(b[2]) > 30
               and all(map(torch.equal, a[2], b[2])) for a, b in zip(eager, replayed))


@pytest.mark.parametrize("case", list(CASES))
def test_every_method_the_step_graph_takes_replays_its_eager_steps(case, files, simulated_graphs):
    model, batches = method_model(case, files)
    assert model.step_graph_refusal() is None
    eager, replayed = eager_and_graph_steps(model, batches, capture_at=EAGER_STEPS.get(case, 0))
    assert identical(eager, replayed)
    assert len({float(loss) for loss, _, _ in replayed}) == len(batches)  # each replay a step of its own batch
    assert model.step_shapes_settled()


class ReadsNothing(TorchDispatchMode):
    """A stand-in for trainers.host_reads.HostReadRecorder that records no read."""

    reads: list = []

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def test_an_esimcse_step_captured_while_its_queue_fills_would_replay_the_captured_slots(files, simulated_graphs,
                                                                                       monkeypatch):
    """Captured at the first step (an empty queue of 18, batches of 6), ESimCSE's replays write every batch where the
    captured step wrote (the host's fill count is frozen) and contrast with an empty queue: the steps differ from the
    eager ones. The trainer captures only once the model's shapes are settled (the queue full). The graph's twin (a
    deep copy) reads its queue's new buffers once on the host in the warm-up step, which would keep the step graph
    from capturing it (trainers.host_reads): that check is turned off here, to show what a capture would replay."""
    monkeypatch.setattr(step_graph, "HostReadRecorder", ReadsNothing)
    model, batches = method_model("esimcse", files)
    assert not model.step_shapes_settled()
    eager, replayed = eager_and_graph_steps(model, batches)
    assert torch.equal(eager[0][0], replayed[0][0])  # the captured step itself ran eagerly
    assert not identical(eager, replayed)


# ------------------------------------------------------------------------------------------------ the scripts
def run_script(method: str, files, out, extra: list[str]) -> tuple[list[dict], CLTrainer, dict]:
    """The method's script for 8 steps (batch 8, the 8th short), compiled with ``aot_eager`` (whose operations the
    simulation records); its logged rows, the trainer and its final metrics."""
    argv = [*simulated_gpu_argv(files["encoder"], files["corpus"], 8), "--output_dir", str(out), *extra]
    return run_method(method, argv, files["generator"])


#: SimCSE's run also evaluates STS-B dev at steps 4 and 8 (the model in eval mode between replays) with clipping off
#: (the graph's norm alone is logged).
EVALUATED = ["--eval_strategy", "steps", "--eval_steps", "4", "--load_best_model_at_end", "false", "--max_grad_norm",
             "0"]


@pytest.mark.parametrize("method, extra", [("simcse", EVALUATED), ("diffcse", ["--dropout_masks", "row_seeded"]),
                                           ("esimcse", ["--queue_size", "8"]),
                                           # the cached step (row-seeded): chunks, loss and replay in one graph
                                           ("simcse", ["--cache_chunk_size", "3"])],
                         ids=["simcse_evaluated", "diffcse_row_seeded", "esimcse", "simcse_cached"])
def test_the_step_graph_run_logs_the_fast_runs_steps(method, extra, files, tmp_path, simulated_graphs, capsys,
                                                     sts_fixture_dir):
    """The step graph (the default on one GPU in bf16) logs the steps of the same fast path without it, bit for bit.
    Both runs compile the same regions, the layers (the step graph's default; the fast path's alone is the whole
    backbone, whose steps the layers' log: ``test_the_layers_compiled_one_by_one_log_the_whole_backbones_steps``), so
    the graph run reuses the first run's compiled graphs: 47 -> 21 s for the four cases alone on a 2-core CPU."""
    extra = [*extra, "--senteval_dir", str(sts_fixture_dir)]
    fast, _, _ = run_script(method, files, tmp_path / "fast",
                            [*extra, "--step_graph", "false", "--torch_compile_regions", "layers"])
    graphed, trainer, metrics = run_script(method, files, tmp_path / "graph", extra)  # the default: the graph
    assert len(graphed) == len(fast) == 8
    for step, (a, b) in enumerate(zip(fast, graphed), start=1):
        assert (a["loss"], a["grad_norm"]) == (b["loss"], b["grad_norm"]), step
    graph = trainer.step_graph
    # steps 1-2: the compiled regions' warm-up; 3: run and captured; 4-7 replayed; 8 (4 sentences) eager. ESimCSE's
    # step 1 fills its queue of 8 eagerly: warm-up 2-3, captured 4, replayed 5-7.
    replays = 3 if method == "esimcse" else 4
    assert graph.captured and graph.failure is None and graph.replays == metrics["step_graph_replays"] == replays
    assert trainer.compiled_backbone.mode == "default"  # no CUDA-graph trees inside the step's graph
    assert trainer.compiled_backbone.regions == "layers"  # the step graph's default
    evaluated = [row["step"] for row in trainer.state.log_history if "eval_stsb_spearman" in row]
    assert evaluated == ([4, 8, 8] if "--eval_strategy" in extra else [])  # during training, and the final evaluation
    summary = " ".join(capsys.readouterr().out.split())  # the summary wraps its lines
    assert ("the fast path: fixed shapes, compiled backbone layers, one at a time (--torch_compile_regions layers), "
            "and loss (--torch_compile false: the eager step); the whole step replayed as one CUDA graph "
            "(--step_graph)") in summary


def test_the_graph_replays_across_epochs_and_their_short_batches(files, tmp_path, simulated_graphs):
    """20 steps over 60 sentences in batches of 8: the graph captured in the first epoch (step 3) replays in the
    second and third (a new dataloader, the collator's next epoch), the short batches (steps 8 and 16) run the
    ordinary step between, and every logged step is the fast path's without the graph, bit for bit."""
    twenty = ["--max_steps", "20"]
    fast, _, _ = run_script("simcse", files, tmp_path / "fast", [*twenty, "--step_graph", "false"])
    graphed, trainer, metrics = run_script("simcse", files, tmp_path / "graph", twenty)
    assert len(graphed) == len(fast) == 20
    assert [(row["loss"], row["grad_norm"]) for row in graphed] == [(row["loss"], row["grad_norm"]) for row in fast]
    assert metrics["step_graph_replays"] == 20 - 2 - 1 - 2  # 2 warm-up steps, the capture, 2 short batches


def test_the_layers_compiled_one_by_one_log_the_whole_backbones_steps(files, tmp_path, simulated_graphs):
    """The step graph's default regions, ``layers`` (the layers compiled one at a time, the embeddings and pooler eager
    around them, all inside the graph), log the steps the whole backbone compiled (``--torch_compile_regions
    backbone``) logs, bit for bit, with as many replays. (DiffCSE's DistilBERT generator and discriminator layer by
    layer: tests/test_fast_path.py and tests/test_ddp.py.)"""
    whole, whole_trainer, whole_metrics = run_script("simcse", files, tmp_path / "whole",
                                                     ["--torch_compile_regions", "backbone"])
    layers, trainer, metrics = run_script("simcse", files, tmp_path / "layers", [])  # the step graph's default
    assert whole_trainer.compiled_backbone.regions == "backbone"
    assert len(layers) == len(whole) == 8
    assert [(row["loss"], row["grad_norm"]) for row in layers] == [(row["loss"], row["grad_norm"]) for row in whole]
    assert trainer.compiled_backbone.regions == "layers" and trainer.step_graph.failure is None
    assert metrics["step_graph_replays"] == whole_metrics["step_graph_replays"] > 0
    stack = trainer.model.encoder.encoder.layer
    assert [(owner, name) for owner, name, _, _ in trainer.compiled_backbone.slots][:2] == [(stack, "0"), (stack, "1")]


def test_a_resumed_step_graph_run_captures_again_and_logs_the_uninterrupted_runs_steps(files, tmp_path,
                                                                                      simulated_graphs):
    """A step-graph run checkpointed at step 4 and resumed: the resumed run warms up, captures at step 7 and logs
    steps 5-8 as the uninterrupted run (whose steps 5-7 were replays) logged them, bit for bit."""
    checkpoints = ["--save_strategy", "steps", "--save_steps", "4", "--save_total_limit", "2", "--step_graph", "true"]
    whole, _, _ = run_script("simcse", files, tmp_path / "whole", checkpoints)
    resumed, trainer, _ = run_script("simcse", files, tmp_path / "resumed", [
        *checkpoints, "--resume_from_checkpoint", str(tmp_path / "whole" / "checkpoint-4")])
    assert [(row["loss"], row["grad_norm"]) for row in resumed] == [(row["loss"], row["grad_norm"])
                                                                  for row in whole[4:]]
    assert trainer.step_graph.captured and trainer.step_graph.replays == 0  # 5-6 warm-up, 7 captured, 8 short


def test_each_setting_the_step_graph_cannot_hold_has_its_reason(monkeypatch):
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    settings = dict(device=cuda, processes=1, accumulation_steps=1, cached_step=False, keyed_masks=False,
                    checkpointing_flag=None, compile_mode=None, model_refusal=None, fp16=False)
    assert step_graph.step_graph_refusal(**settings) is None
    reasons = {"device": (cpu, "this run trains on cpu"), "processes": (2, "several processes all-reduce"),
               "accumulation_steps": (4, "--gradient_accumulation_steps 4"),
               "cached_step": (True, "--cache_chunk_size with --dropout_masks stream"),
               "checkpointing_flag": ("--activation_checkpointing", "--activation_checkpointing reads the RNG state"),
               "compile_mode": ("max-autotune", "CUDA graphs of its own"), "fp16": (True, "--fp16's gradient scaler"),
               "model_refusal": ("the model's own", "the model's own")}
    for name, (value, reason) in reasons.items():
        assert reason in step_graph.step_graph_refusal(**(settings | {name: value})), name
    assert step_graph.step_graph_refusal(**(settings | {"compile_mode": "max-autotune-no-cudagraphs"})) is None
    assert step_graph.step_graph_refusal(**(settings | {"cached_step": True, "keyed_masks": True})) is None
    monkeypatch.setattr(step_graph, "new_backend", OpTape)  # a test's simulated graph runs on the CPU
    assert step_graph.step_graph_refusal(**(settings | {"device": cpu})) is None


def test_a_cached_step_without_rng_states_needs_row_seeded_masks(files):
    """The step graph runs the cached step without the chunks' RNG states (a CUDA graph can neither read nor set
    them): refused for stream masks, whose replay needs them."""
    from trainers.cached_step import cached_loss

    model, batches = method_model("simcse", files)
    with pytest.raises(ValueError, match="rng_states=False needs row-seeded masks"):
        cached_loss(model, batches[0], 3, rng_states=False)


class FailingCapture(OpTape):
    @staticmethod
    def capturing():
        raise RuntimeError("operation not permitted when stream is capturing")


def test_a_capture_that_fails_leaves_the_run_on_its_compiled_step(files, tmp_path, monkeypatch, caplog, capsys):
    monkeypatch.setattr(step_graph, "new_backend", FailingCapture)
    fast, _, _ = run_script("simcse", files, tmp_path / "fast", ["--step_graph", "false"])
    graphed, trainer, metrics = run_script("simcse", files, tmp_path / "graph", ["--step_graph", "true"])
    assert [(row["loss"], row["grad_norm"]) for row in graphed] == [(row["loss"], row["grad_norm"]) for row in fast]
    assert trainer.step_graph.failure == "its capture failed (RuntimeError: operation not permitted when stream is " \
                                         "capturing)"
    assert metrics["step_graph_replays"] == 0
    assert "step graph: not used, because its capture failed (RuntimeError" in caplog.text
    assert ("the step graph was not used, because its capture failed (RuntimeError"
            in " ".join(capsys.readouterr().out.split()))


@pytest.mark.parametrize("arch, method, host_read", [
    ("modernbert", "simcse", None),  # its two masks prepared (models/masks.py LAYER_TYPE_MASKS): its own code read them
    # its template pass gets an all-ones mask (models.masks.masks_rows_without_padding): without
    # a mask its forward looked for padding on the host (modeling_utils.py's warn_if_padding_and_no_attention_mask)
    ("deberta-v2", "promptbert", None),
    # encoders listed in models.masks.PLAIN_BIDIRECTIONAL_MODEL_TYPES since 2026-12-04: GTE (rotary) and RoCBert read
    # their 2D mask on the host (masking_utils' _ignore_bidirectional_mask_sdpa) before
    ("gte", "promptbert", None),
    ("roc_bert", "promptbert", None),
    ("ibert", "simcse", "aten::_local_scalar_dense at transformers/models/ibert/quant_modules.py:")])  # QuantAct
def test_a_step_that_reads_the_host_is_not_captured_and_the_warning_names_the_line(arch, method, host_read, files,
                                                                                  tmp_path, simulated_graphs, caplog,
                                                                                  capsys):
    """The step graph's warm-up step runs under trainers.host_reads.HostReadRecorder: a backbone whose own code
    reads a tensor on the host at every forward (I-BERT's quantisation modules assert on their ranges) is not
    captured, for a capture would fail at that read, on a GPU in the middle of the stream's capture; the warning and
    the summary name the read and its line, and the run logs the fast path's steps. ModernBERT, whose mask functions
    read its 2D mask on the host, gets its masks prepared and is captured; so are DeBERTa-v2's, GTE's and RoCBert's
    PromptBERT steps."""
    backbone = ["--model_name_or_path", str(files[arch])]
    fast, _, _ = run_script(method, files, tmp_path / "fast", ["--step_graph", "false", *backbone])
    graphed, trainer, metrics = run_script(method, files, tmp_path / "graph", backbone)  # the default: the graph
    assert [(row["loss"], row["grad_norm"]) for row in graphed] == [(row["loss"], row["grad_norm"]) for row in fast]
    summary = " ".join(capsys.readouterr().out.split())
    if host_read is None:
        assert trainer.step_graph.failure is None and metrics["step_graph_replays"] == 4
        return
    reason = f"the step reads a tensor's value on the host ({host_read}"
    assert trainer.step_graph.failure.startswith(reason)
    assert trainer.step_graph.failure.endswith(" in forward), which a CUDA graph cannot capture")
    assert metrics["step_graph_replays"] == 0 and not trainer.step_graph.captured
    assert f"step graph: not used, because {reason}" in caplog.text
    assert f"the step graph was not used, because {reason}" in summary


@pytest.mark.parametrize("method, extra, reason", [
    ("simcse", [], "it captures a CUDA graph, and this run trains on cpu"),
    ("simcse", ["--simulated", "--gradient_accumulation_steps", "2"], "--gradient_accumulation_steps 2 adds each"),
    ("simcse", ["--simulated", "--cache_chunk_size", "4", "--dropout_masks", "stream"],
     "--cache_chunk_size with --dropout_masks stream replays each chunk's masks"),
    ("simcse", ["--simulated", "--torch_compile_mode", "reduce-overhead"],
     "--torch_compile_mode reduce-overhead records CUDA graphs of its own"),
])
def test_a_run_the_step_graph_cannot_hold_stops_with_the_reason(method, extra, reason, files, tmp_path, monkeypatch,
                                                                 capsys):
    if "--simulated" in extra:
        monkeypatch.setattr(step_graph, "new_backend", OpTape)
        extra = [flag for flag in extra if flag != "--simulated"]
    argv = ["--model_name_or_path", str(files["encoder"]), "--train_file", str(files["corpus"]), "--max_steps", "2",
            "--eval_strategy", "no", "--output_dir", str(tmp_path / "out"), "--method", method, "--torch_compile",
            "true", "--step_graph", "true", *FAST_TRAINING_ARGS, *extra]
    result = in_process(run_unsup.main, argv, capsys)
    assert result.code == 2, result.err
    assert f"--step_graph true: {reason}" in result.err and "leave --step_graph false" in result.err
    assert "Traceback" not in result.err and not (tmp_path / "out" / "export").exists()


def test_the_default_captures_the_step_wherever_nothing_refuses_it(caplog):
    """``--step_graph`` unset: on with the fast path and no refusal; a refusal turns it off (a warning with the
    reason on a GPU, nothing on a CPU, where it never applies); ``false`` is off; ``true`` where it cannot hold
    stops the run with the reason and the fix."""
    from trainers.errors import UsageError

    assert step_graph.step_graph_wanted(None, fast_path=True, refusal=None, on_gpu=True)
    assert not step_graph.step_graph_wanted(None, fast_path=False, refusal=None, on_gpu=True)
    assert not step_graph.step_graph_wanted(False, fast_path=True, refusal=None, on_gpu=True)
    assert step_graph.step_graph_wanted(True, fast_path=True, refusal=None, on_gpu=True)
    with caplog.at_level("WARNING", logger="trainers.step_graph"):
        assert not step_graph.step_graph_wanted(None, fast_path=True, refusal="--fp16's reason", on_gpu=False)
        assert caplog.text == ""
        assert not step_graph.step_graph_wanted(None, fast_path=True, refusal="--fp16's reason", on_gpu=True)
    assert "step graph: off, because --fp16's reason; the fast path runs the step" in caplog.text
    with pytest.raises(UsageError, match="--step_graph true: --fp16's reason; leave --step_graph false"):
        step_graph.step_graph_wanted(True, fast_path=True, refusal="--fp16's reason", on_gpu=True)
    with pytest.raises(UsageError, match="needs the fast path's fixed shapes: add --torch_compile true"):
        step_graph.step_graph_wanted(True, fast_path=False, refusal=None, on_gpu=True)


@pytest.mark.parametrize("extra, graph", [([], True), (["--gradient_accumulation_steps", "2"], False)],
                         ids=["default", "accumulation_refuses"])
def test_a_run_without_the_flag_takes_the_step_graph_where_it_holds(extra, graph, files, tmp_path, simulated_graphs):
    """Through ``run_unsup.py`` with no ``--step_graph`` (the simulated graph standing in for a GPU's): the graph
    is captured on the fast path; gradient accumulation, which it cannot hold, leaves it off and the run trains."""
    logged, trainer, metrics = run_script("simcse", files, tmp_path / "run", extra)
    assert logged and (trainer.step_graph is not None) == graph == trainer.args.step_graph
    assert ("step_graph_replays" in metrics) == graph


def test_the_step_graph_needs_the_fast_path(files, tmp_path, capsys):
    result = in_process(run_unsup.main, [
        "--model_name_or_path", str(files["encoder"]), "--train_file", str(files["corpus"]), "--max_steps", "2",
        "--eval_strategy", "no", "--output_dir", str(tmp_path / "out"), "--step_graph", "true", *FAST_TRAINING_ARGS],
        capsys)
    assert result.code == 2 and "--step_graph true needs the fast path's fixed shapes: add --torch_compile true" in \
        result.err


def test_the_layers_as_regions_need_the_fast_path(files, tmp_path, capsys):
    result = in_process(run_unsup.main, [
        "--model_name_or_path", str(files["encoder"]), "--train_file", str(files["corpus"]), "--max_steps", "2",
        "--eval_strategy", "no", "--output_dir", str(tmp_path / "out"), "--torch_compile_regions", "layers",
        *FAST_TRAINING_ARGS], capsys)
    assert result.code == 2 and "the fast path is off (a CPU, fp32 or several processes): add --torch_compile true" \
        in result.err and "Traceback" not in result.err
    assert not (tmp_path / "out").exists()  # refused before anything is written


@pytest.mark.parametrize("main, prog", [(run_unsup.main, "run_unsup.py"), (run_diffcse.main, "run_diffcse.py")])
def test_the_fast_path_turned_off_refuses_a_compile_backend_or_mode(main, prog, files, tmp_path, capsys):
    """``--torch_compile false --torch_compile_backend aot_eager`` (or a mode) ran the fast path: the backend turned it
    back on, silently. Now both scripts exit 2 with one line naming the flags, before anything is written."""
    result = in_process(main, [
        "--model_name_or_path", str(files["encoder"]), "--train_file", str(files["corpus"]), "--max_steps", "2",
        "--eval_strategy", "no", "--output_dir", str(tmp_path / "out"), "--torch_compile", "false",
        "--torch_compile_backend", "aot_eager", "--torch_compile_mode", "default", *FAST_TRAINING_ARGS], capsys, prog)
    assert result.code == 2 and "Traceback" not in result.err, result.err
    assert ("--torch_compile false turns the fast path off, but --torch_compile_mode default and "
            "--torch_compile_backend aot_eager choose how it compiles") in result.err
    assert not (tmp_path / "out").exists()


def test_a_step_graph_run_compiles_its_regions_without_cuda_graph_trees():
    cuda = torch.device("cuda")
    assert compile_mode(None, cuda, 1, bf16=True) == "reduce-overhead"
    assert compile_mode(None, cuda, 1, bf16=True, step_graph=True) == "default"
