"""Cached steps (trainers/cached_step.py, GradCache): for every method, with dropout ON, the cached step's loss and
every parameter gradient equal the uncached step's on the same batch (float64 models, 1e-6 relative).

"The same batch" includes the same random draws:

- row-seeded masks (``--dropout_masks row_seeded``, what ``--cache_chunk_size`` turns on; models/row_seeded.py): each
  mask is keyed by (step, dropout module, row, element), so for ANY chunking the cached step must equal
  ``model(**batch).loss.backward()`` itself, for every method; also through CLTrainer (accumulation, bf16),
  with gradient checkpointing, and across 2 processes;
- stream masks, one chunk (``cache_chunk_size >= batch``): the cached step draws in the uncached step's order, so it
  must equal ``model(**batch)`` itself;
- stream masks, several chunks: each chunk draws its own masks, so the reference is the uncached step at those
  masks (every chunk encoded WITH a graph, all activations held, the model's own ``compute_loss`` on the full set,
  one backward); with dropout off it must equal ``model(**batch)`` again.

Each comparison is shown to fail when the replay draws fresh masks (``test_fresh_*``), and two processes running
cached steps equal one process running the uncached step on the global batch.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import random
import weakref
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForMaskedLM, BertTokenizerFast

import trainers.cached_step as cached_step
from trainers.methods import build_collator, build_model
from models.diffcse import DiffCSEModel
from tests.launch import run_torchrun
from tests.tiny import (WORDS, official_diffcse_settings, save_tiny_backbone, tiny_config, tiny_corpus, tiny_tokenizer,
                        token_batch, tiny_trainer)
from trainers.cached_step import cached_forward_backward
from trainers.fast_path import fixed_shape_collator
from trainers.keyed_dropout import keyed_step, pass_sentences, step_draws

BATCH = 8
#: case -> (method, config overrides): every method at its defaults, plus the compositions with their own rows.
CASES = {
    "simcse": ("simcse", {}),
    "sup_simcse": ("sup_simcse", {"hard_negative_weight": 0.5}),
    "esimcse": ("esimcse", {"queue_size": 12}),
    "esimcse_plus_simcse_pp": ("esimcse", {"queue_size": 12, "off_dropout": True, "dcl_weight": 0.1}),
    "simcse_pp": ("simcse_pp", {}),
    "s_simcse": ("s_simcse", {}),
    "s_simcse_per_pass": ("s_simcse", {"sentence_wise_dropout": False, "dropout_sample_per_op": False}),
    "simcse_noise_neg_minus": ("simcse", {"noise_study": "neg_minus", "noise_samples": 3}),
    "simcse_noise_pos_plus": ("simcse", {"noise_study": "pos_plus"}),  # Gaussian noise drawn in the loss, once
    "simcse_barlow": ("simcse", {"barlow_weight": 0.1, "barlow_pad": 4}),
    "diffcse": ("diffcse", {}),
    "diffcse_official_code": ("diffcse", {"rtd_all_views": True, "condition_before_projector": True,
                                          "rtd_include_padding": True}),
    # --fidelity official_code on the fast path's batch: edit rows padded past the batch's own width, which the loss
    # over padding counts alone (each chunk's share: over the batch's positions within it); h put in after the
    # embeddings by their hook
    "diffcse_official_code_fixed_width": ("diffcse", official_diffcse_settings()),
    "diffcse_plus_simcse_pp": ("diffcse", {"off_dropout": True, "dcl_weight": 0.1, "lambda_weight": 0.05}),
    "diffcse_code_generator": ("diffcse", {"sample_generator": False, "generator_dropout": True,
                                           "generator_all_positions": True, "mask_style": "bert"}),
    # PromptBERT: its template-only denoising pass runs once per step on the full set, with keyed rows of its own
    "promptbert": ("promptbert", {}),
    "promptbert_plus_simcse_pp": ("promptbert", {"off_dropout": True, "dcl_weight": 0.1}),
}
ROWS = [{"text": " ".join(WORDS[(7 * i + j) % len(WORDS)] for j in range(4 + i % 5))} for i in range(BATCH)]


pytestmark = pytest.mark.usefixtures("torch_single_thread")  # tiny models: fastest single-threaded here


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    """Tiny BERT encoders (dropout 0.1, and 0) and a tiny DistilBERT generator over the same vocabulary."""
    root = tmp_path_factory.mktemp("cached")
    encoder = save_tiny_backbone(root / "encoder", seed=0)
    quiet = save_tiny_backbone(root / "encoder_no_dropout", seed=0, dropout=0.0)
    generator = root / "generator"
    tokenizer = tiny_tokenizer(generator)
    torch.manual_seed(1)
    AutoModelForMaskedLM.from_config(tiny_config("distilbert", vocab_size=len(tokenizer))).save_pretrained(generator)
    tokenizer.save_pretrained(generator)
    return {"encoder": encoder, "quiet": quiet, "generator": generator}


def build(paths, case: str, encoder: str = "encoder", **extra):
    method, config = CASES[case]
    torch.manual_seed(0)
    kwargs = {**config, **extra}
    if method == "diffcse":
        kwargs["generator_name"] = str(paths["generator"])
    model = build_model(method, str(paths[encoder]), **kwargs).double()
    model.train()
    return model


def make_batch(model, case: str, paths) -> dict:
    """The method's own collator on ROWS (DiffCSE: its rtd_* rows; ESimCSE: its repetition), or random ids."""
    method = CASES[case][0]
    if method in ("diffcse", "esimcse", "promptbert"):
        collator = build_collator(model, BertTokenizerFast.from_pretrained(str(paths["encoder"])), 16)
        if case.endswith("_fixed_width"):
            collator = fixed_shape_collator(collator, model.fixed_width_keys())
        torch.manual_seed(5)
        return {k: v for k, v in collator(ROWS).items() if torch.is_tensor(v)}
    ids, mask = token_batch(BATCH, 3 if method == "sup_simcse" else 2, seed=1, same_views=method != "sup_simcse")
    return {"input_ids": ids, "attention_mask": mask}


def warm_queue(model, batch) -> None:
    """ESimCSE: enqueue one batch first, so the compared step contrasts with a non-empty queue."""
    if getattr(model, "queue", None) is not None:
        with torch.no_grad(), keyed_step(model, BATCH):
            torch.manual_seed(11)
            model(**batch)


def grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def uncached(model, batch, seed: int = 7):
    torch.manual_seed(seed)
    random.seed(seed)  # row-seeded masks: the step's seed
    with keyed_step(model, BATCH):
        out = model(**batch)
        out.loss.backward()
    return out.loss.detach(), out.metrics, grads(model)


def uncached_at_chunk_masks(model, batch, chunk: int, seed: int = 7):
    """The uncached step with the masks a chunked pass draws: every chunk encoded WITH a graph, in order, all
    activations held; the model's own projector and compute_loss on the full set; one backward."""
    torch.manual_seed(seed)
    rows = [model.encode_views(b["input_ids"], b["attention_mask"], b.get("token_type_ids"))
            for b in (cached_step.slice_rows(batch, s, e, BATCH) for s, e in cached_step.chunk_bounds(BATCH, chunk))]
    loss, metrics = model.compute_loss(model.project_views(torch.cat(rows), batch["attention_mask"]), batch)
    loss.backward()
    return loss.detach(), metrics, grads(model)


def cached(model, batch, chunk: int, seed: int = 7):
    torch.manual_seed(seed)
    random.seed(seed)
    loss, metrics = cached_forward_backward(model, batch, chunk)
    return loss, metrics, grads(model)


def assert_same_step(got, want) -> None:
    (loss, metrics, g), (loss_ref, metrics_ref, g_ref) = got, want
    torch.testing.assert_close(loss, loss_ref, rtol=1e-6, atol=1e-12)
    assert g.keys() == g_ref.keys()
    assert len(g) > 10
    for name in g_ref:
        torch.testing.assert_close(g[name], g_ref[name], rtol=1e-6, atol=1e-10, msg=name)
    for name in metrics_ref:
        torch.testing.assert_close(metrics[name].double(), metrics_ref[name].double(), rtol=1e-6, atol=1e-9,
                                   msg=name)


def twins(paths, case: str, **kwargs):
    model = build(paths, case, **kwargs)
    batch = make_batch(model, case, paths)
    warm_queue(model, batch)
    return model, copy.deepcopy(model), batch


@pytest.mark.parametrize("case", list(CASES))
def test_one_chunk_is_the_uncached_step_dropout_on(paths, case):
    model, twin, batch = twins(paths, case)
    got, after_cached = cached(twin, batch, chunk=BATCH), torch.get_rng_state()
    want, after_uncached = uncached(model, batch), torch.get_rng_state()
    assert_same_step(got, want)
    assert torch.equal(after_cached, after_uncached)  # the next step draws what it would have drawn uncached
    assert_same_step(cached(twin, batch, chunk=BATCH + 5), uncached(model, batch))  # gradients accumulate alike
    if getattr(model, "queue", None) is not None:  # enqueued once per step, the same keys
        torch.testing.assert_close(twin.queue.embeddings, model.queue.embeddings)
        assert twin.queue.host_state() == model.queue.host_state()


@pytest.mark.parametrize("chunk", [3, 4])  # 3 does not divide the batch of 8
@pytest.mark.parametrize("case", list(CASES))
def test_chunked_step_equals_the_uncached_step_at_the_same_masks(paths, case, chunk):
    model, twin, batch = twins(paths, case)
    if isinstance(model, DiffCSEModel):  # the discriminator runs once per chunk (never replayed): its dropout is
        model.discriminator.eval()  # drawn per chunk, so the full-batch reference needs it off (the encoder's is on)
        twin.discriminator.eval()
    assert_same_step(cached(twin, batch, chunk), uncached_at_chunk_masks(model, batch, chunk))


@pytest.mark.parametrize("case", [c for c in CASES if CASES[c][0] != "s_simcse"])
def test_chunked_step_equals_the_uncached_step_without_dropout(paths, case):
    model, twin, batch = twins(paths, case, encoder="quiet")
    if isinstance(model, DiffCSEModel):
        model.discriminator.eval()
        twin.discriminator.eval()
    assert_same_step(cached(twin, batch, chunk=3), uncached(model, batch))


@pytest.mark.parametrize("chunk", [1, 3, 4])  # 3 does not divide the batch of 8; 1: every sentence alone
@pytest.mark.parametrize("case", list(CASES))
def test_row_seeded_chunked_step_is_the_uncached_step(paths, case, chunk):
    """``--dropout_masks row_seeded`` (models/row_seeded.py): every mask and sampled rate is keyed by (step, call,
    row, element), so the chunks draw the full batch's masks and the cached step IS ``model(**batch)``, dropout ON,
    for every method (DiffCSE's discriminator dropout included), for any chunk size."""
    model, twin, batch = twins(paths, case, dropout_masks="row_seeded")
    got, after_cached = cached(twin, batch, chunk), torch.get_rng_state()
    want, after_uncached = uncached(model, batch), torch.get_rng_state()
    assert_same_step(got, want)
    assert torch.equal(after_cached, after_uncached)
    if getattr(model, "queue", None) is not None:
        torch.testing.assert_close(twin.queue.embeddings, model.queue.embeddings)


@pytest.mark.parametrize("case", ["diffcse", "diffcse_code_generator"])
def test_row_seeded_generator_edits_chunk_by_chunk(paths, case):
    """DiffCSE's generator edit with row-seeded masks: sampled (inverse CDF of keyed uniforms) or argmax with the
    generator's dropout on, chunks of 3 sentences give the full pass's x'' and labels; it is an edit (tokens
    change) and another step edits differently."""
    model = build(paths, case, dropout_masks="row_seeded")
    batch = make_batch(model, case, paths)
    with keyed_step(model, BATCH) as draws:
        whole = model.edit(batch)
        parts = []
        for start, end in cached_step.chunk_bounds(BATCH, 3):
            with pass_sentences(draws, start, end):
                parts.append(model.edit(cached_step.slice_rows(batch, start, end, BATCH)))
    chunked = [torch.cat(part) for part in zip(*parts)]
    assert torch.equal(whole[0], chunked[0]) and torch.equal(whole[1], chunked[1])
    assert whole[1].sum() > 0
    with keyed_step(model, BATCH):
        assert not torch.equal(model.edit(batch)[0], whole[0])


def test_row_seeded_masks_are_on_and_fresh_per_step(paths):
    """The row-seeded step is a dropout step (not dropout off): two steps from different seeds differ, the same seed
    repeats, and the step differs from the dropout-free network's."""
    model, twin, batch = twins(paths, "simcse", dropout_masks="row_seeded")
    quiet = build(paths, "simcse", encoder="quiet", dropout_masks="row_seeded")
    first, again = uncached(model, batch, seed=7), uncached(twin, batch, seed=7)
    assert_same_step(again, first)
    other = uncached(copy.deepcopy(quiet), batch, seed=7)
    assert not torch.allclose(other[0], first[0])
    model.zero_grad()
    assert not torch.allclose(uncached(model, batch, seed=8)[0], first[0])


def test_fresh_row_seeded_masks_in_the_replay_are_caught(paths, monkeypatch):
    """The comparison above can fail: a replay whose passes draw under a new seed (fresh masks) keeps the loss but
    changes the gradients."""
    model, twin, batch = twins(paths, "simcse", dropout_masks="row_seeded")
    want = uncached(model, batch)
    encode_views = twin.encode_views
    passes = []

    def fresh_in_the_replay(*args, **kwargs):
        passes.append(torch.is_grad_enabled())
        if len(passes) > 2:  # the replay
            step_draws(twin).seed += 1
        return encode_views(*args, **kwargs)

    monkeypatch.setattr(twin, "encode_views", fresh_in_the_replay)
    loss, _, g = cached(twin, batch, 3)
    # chunks 3 + 3 + 2: the first one's graph kept, not replayed; the other two in one pass without a graph, then each
    # replayed
    assert passes == [True, False, True, True]
    torch.testing.assert_close(loss, want[0], rtol=1e-6, atol=1e-12)
    with pytest.raises(AssertionError):
        assert_same_step((loss, want[1], g), want)


def test_fresh_dropout_in_the_replay_is_caught(paths, monkeypatch):
    """The proof that the comparisons above can fail: a replay that draws new masks (the sentence-transformers bug
    before its PR 3862) keeps the loss but changes the gradients."""
    model, twin, batch = twins(paths, "simcse")
    want = uncached_at_chunk_masks(model, batch, 3)
    monkeypatch.setattr(cached_step, "restore_rng", lambda state: None)
    loss, _, g = cached(twin, batch, 3)
    torch.testing.assert_close(loss, want[0], rtol=1e-6, atol=1e-12)  # the no-grad pass is unchanged
    with pytest.raises(AssertionError):
        assert_same_step((loss, want[1], g), want)


def enable_checkpointing(model) -> None:
    """What ``--gradient_checkpointing`` calls: ``activation_checkpointing_enable`` where transformers has it (5.23
    on; the old name warns that it is deprecated), else ``gradient_checkpointing_enable`` (5.20)."""
    (getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable)()


def test_gradient_checkpointing_composes(paths):
    model, twin, batch = twins(paths, "simcse")
    enable_checkpointing(twin.encoder)
    assert_same_step(cached(twin, batch, 3), uncached_at_chunk_masks(model, batch, 3))


def test_the_trainers_gradient_checkpointing_flag_composes(paths, tmp_path):
    """``--gradient_checkpointing`` (the Trainer's flag, on the whole model) logs the plain run's losses and gradient
    norms, uncached and cached (one chunk: the same draws); with per-row dropout (S-SimCSE, SimCSE++'s off rows)
    it is refused, since the recomputed layers would run outside the per-row plan."""
    corpus = tiny_corpus(tmp_path / "corpus.txt", n=64)
    logs = {}
    for name, settings in (("plain", {}), ("checkpointed", {"gradient_checkpointing": True}),
                           ("checkpointed_cached", {"gradient_checkpointing": True, "cache_chunk_size": 8})):
        torch.manual_seed(0)
        trainer = tiny_trainer(build_model("simcse", str(paths["encoder"])), paths["encoder"], tmp_path / name,
                               corpus, max_steps=2, seed=3, **settings)
        trainer.train()
        logs[name] = [value for e in trainer.state.log_history if "loss" in e for value in (e["loss"], e["grad_norm"])]
    assert len(logs["plain"]) == 4
    assert logs["checkpointed"] == pytest.approx(logs["plain"], rel=1e-5)
    assert logs["checkpointed_cached"] == pytest.approx(logs["plain"], rel=1e-5)
    for method in ("s_simcse", "simcse_pp"):
        with pytest.raises(ValueError, match="cannot be combined with per-row dropout"):
            enable_checkpointing(build_model(method, str(paths["encoder"])))


@pytest.mark.parametrize("case", ["simcse", "s_simcse", "simcse_pp", "diffcse"])
def test_gradient_checkpointing_recomputes_row_seeded_masks(paths, case):
    """With row-seeded masks the recomputation in backward re-makes the pass's keyed masks (and S-SimCSE's rates,
    SimCSE++'s off rows): checkpointed = plain, uncached and cached with 3 chunks, dropout on (the encoder's and
    DiffCSE's discriminator's layers all checkpointed)."""
    model, twin, batch = twins(paths, case, dropout_masks="row_seeded")
    want = uncached(model, batch)
    model.zero_grad()
    enable_checkpointing(twin)
    assert twin.encoder.encoder.layer[0].gradient_checkpointing
    assert_same_step(uncached(twin, batch), want)
    twin.zero_grad()
    assert_same_step(cached(twin, batch, 3), want)


def test_a_recomputation_without_the_plan_is_caught(paths, monkeypatch):
    """The comparison above can fail: a recomputation that does not find the pass's plan (here: another plan, with
    the first row's dropout off) changes the gradients."""
    from models.dropout import RowDropoutController

    model, twin, batch = twins(paths, "simcse", dropout_masks="row_seeded")
    want = uncached(model, batch)
    enable_checkpointing(twin)
    original = RowDropoutController._active_plan

    def shifted(self, rows, device):
        plan = original(self, rows, device)
        if plan is not None and self._plan is None:  # the recomputation in backward
            plan = dataclasses.replace(plan, off=torch.arange(rows, device=device) == 0)
        return plan

    monkeypatch.setattr(RowDropoutController, "_active_plan", shifted)
    got = uncached(twin, batch)
    torch.testing.assert_close(got[0], want[0], rtol=1e-6, atol=1e-12)
    with pytest.raises(AssertionError):
        assert_same_step(got, want)


@pytest.mark.parametrize("settings", [{}, {"gradient_accumulation_steps": 2}, {"bf16": True}],
                         ids=["plain", "accumulation", "bf16_autocast"])
def test_trainer_steps_cached_equal_uncached(paths, tmp_path, settings):
    """Through CLTrainer (the stock Trainer loop, AdamW, 3 optimizer steps): ``--cache_chunk_size 8`` (one chunk)
    logs the uncached run's losses and gradient norms, also under gradient accumulation (each micro-batch its own
    contrastive batch, the loss scaled by 1/steps as the stock step does) and bf16 autocast (the accelerator's);
    ``--cache_chunk_size 3`` (3 chunks) trains and its metrics reach the logs."""
    corpus = tiny_corpus(tmp_path / "corpus.txt", n=64)
    logs = {}
    for name, chunk in (("uncached", None), ("one_chunk", 8), ("three_chunks", 3)):
        torch.manual_seed(0)
        model = build_model("simcse", str(paths["encoder"]))
        trainer = tiny_trainer(model, paths["encoder"], tmp_path / name, corpus, max_steps=3, seed=3,
                               cache_chunk_size=chunk, **settings)
        trainer.train()
        logs[name] = [(e["loss"], e["grad_norm"], e["contrastive_loss"]) for e in trainer.state.log_history
                      if "loss" in e]
    assert len(logs["uncached"]) == 3
    for got, want in zip(logs["one_chunk"], logs["uncached"]):
        assert got == pytest.approx(want, rel=1e-5)
    assert len(logs["three_chunks"]) == 3
    assert all(torch.isfinite(torch.tensor(entry)).all() for entry in logs["three_chunks"])


@pytest.mark.parametrize("settings", [{}, {"gradient_accumulation_steps": 2}, {"bf16": True}],
                         ids=["plain", "accumulation", "bf16_autocast"])
def test_trainer_steps_cached_equal_uncached_with_row_seeded_masks(paths, tmp_path, settings):
    """Through CLTrainer, 3 optimizer steps, dropout on: ``--cache_chunk_size 3`` (3 chunks of a batch of 8) logs the
    losses and gradient norms of the uncached run with row-seeded masks, also under gradient accumulation and bf16
    autocast (bf16: to bf16's rounding, the chunks' matmuls have other shapes)."""
    corpus = tiny_corpus(tmp_path / "corpus.txt", n=64)
    logs = {}
    for name, chunk in (("uncached", None), ("three_chunks", 3)):
        torch.manual_seed(0)
        model = build_model("simcse", str(paths["encoder"]), dropout_masks="row_seeded")
        trainer = tiny_trainer(model, paths["encoder"], tmp_path / name, corpus, max_steps=3, seed=3,
                               cache_chunk_size=chunk, **settings)
        trainer.train()
        logs[name] = [(e["loss"], e["grad_norm"]) for e in trainer.state.log_history if "loss" in e]
    assert len(logs["uncached"]) == 3
    tolerance = 2e-2 if settings.get("bf16") else 1e-5
    for got, want in zip(logs["three_chunks"], logs["uncached"]):
        assert got == pytest.approx(want, rel=tolerance)


@pytest.mark.parametrize("masks", ["stream", "row_seeded"])
@pytest.mark.parametrize("case", ["simcse", "esimcse_plus_simcse_pp", "s_simcse", "diffcse", "promptbert"])
def test_a_cached_step_has_no_host_sync(paths, case, masks):
    """Like tests/test_no_host_sync.py for the uncached step: chunking, the RNG replay, row-seeded masks (the step's
    seed is a host-side draw) and DiffCSE's chunked RTD never make a GPU wait for the host (two steps: the second
    with a non-empty ESimCSE queue). A step on a copy runs first: what a process does once must not count as the
    step's, e.g. the fused kernel's build and its check against the rule on a probe (``models.row_seeded._mismatch``:
    three host reads, once per process), which this test failed on when run first in its process before the tiny
    model's inputs stopped building the kernel on a CPU (``models.row_seeded.CPU_FUSED_MIN_ELEMENTS``)."""
    from tests.test_no_host_sync import HostSyncRecorder

    model = build(paths, case, dropout_masks=masks)
    batch = make_batch(model, case, paths)
    cached_forward_backward(copy.deepcopy(model), batch, 3)
    for step in range(2):
        recorder = HostSyncRecorder()
        with recorder:
            cached_forward_backward(model, batch, 3)
            model.on_optimizer_step()
        assert recorder.syncs == [], f"{case}, step {step}: {recorder.syncs}"


def test_refusals(paths):
    model = build(paths, "simcse")
    with pytest.raises(ValueError, match="cache_chunk_size must be >= 1"):
        cached_forward_backward(model, make_batch(model, "simcse", paths), 0)
    with pytest.raises(TypeError, match="DDP wrapper"):
        cached_forward_backward(torch.nn.Linear(2, 2), {"input_ids": torch.zeros(2, 2, 3)}, 1)


# ---------------------------------------------------------------------------------------------- DDP
WORKER = Path(__file__).parent / "workers" / "cached_ddp_step.py"
DDP_CASES = ["simcse", "sup_simcse", "esimcse", "simcse_pp", "diffcse", "promptbert"]


@pytest.mark.parametrize("encoder, masks", [("quiet", "stream"), ("encoder", "row_seeded")])
def test_two_processes_cached_equal_one_process_uncached(paths, tmp_path, encoder, masks):
    """2 gloo processes x 4 sentences, cached with chunk 3 (4 = 3 + 1), = 1 process x 8 uncached, per method, and
    = the same 2 processes uncached under DistributedDataParallel. Stream masks: dropout off (1 and 2 processes
    cannot draw the same stream masks). Row-seeded masks: dropout ON, each row keyed by its index in the global
    batch (rank-major, as the all-gather concatenates), so 2 processes draw 1 process's masks."""
    cases = {c: (CASES[c][0], {**CASES[c][1], "dropout_masks": masks}) for c in DDP_CASES}
    batches = {}
    for case in DDP_CASES:
        model = build(paths, case, encoder=encoder)
        batches[case] = make_batch(model, case, paths)
    torch.save(batches, tmp_path / "batches.pt")
    run_torchrun([str(WORKER)], env={"CACHED_PATHS": json.dumps({k: str(v) for k, v in paths.items()}),
                                     "CACHED_CASES": json.dumps(cases), "CACHED_ENCODER": encoder,
                                     "CACHED_BATCHES": str(tmp_path / "batches.pt"), "CACHED_OUT": str(tmp_path)})
    for case in DDP_CASES:
        model = build(paths, case, encoder=encoder, dropout_masks=masks)
        batch = batches[case]
        warm_queue(model, batch)
        want = uncached(model, batch)
        for rank in range(2):
            got = torch.load(tmp_path / f"{case}.rank{rank}.pt", weights_only=False)
            # cached DDP = uncached DDP (the same processes, the wrapper's own gradient reduction)
            torch.testing.assert_close(got["loss"], got["ddp_loss"], rtol=1e-6, atol=1e-12, msg=case)
            for name, value in got["ddp_grads"].items():
                torch.testing.assert_close(got["grads"][name], value, rtol=1e-6, atol=1e-10, msg=f"{case} {name}")
            if case == "diffcse":  # its RTD loss is a per-process mean (as uncached), not the global batch's
                continue
            # 2 processes cached = 1 process uncached with the global batch
            torch.testing.assert_close(got["loss"], want[0], rtol=1e-6, atol=1e-12, msg=case)
            for name, value in want[2].items():
                torch.testing.assert_close(got["grads"][name], value, rtol=1e-6, atol=shared_rows_atol(case, want[2]),
                                           msg=f"{case} {name}")


def shared_rows_atol(case: str, gradients: dict[str, torch.Tensor]) -> float:
    """PromptBERT's template rows serve every sentence of a process, so their gradient is a sum over the process's
    sentences, which 2 processes split in two; the row-dropout attention takes its softmax in float32, so the split
    shows at float32's rounding (~1e-7) of the gradients' scale (the largest element of any), not float64's (a
    parameter whose true gradient is 0, a key bias, shows it most). Other methods: float64's."""
    if CASES[case][0] != "promptbert":
        return 1e-10
    return 1e-6 * max(float(g.abs().max()) for g in gradients.values())


class Saved:
    """A tensor autograd saved, in a box that can be watched for its release."""

    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor


class ActivationsPerPass:
    """The activations that autograd holds for backward, by the pass that saved them (a backbone pass or a
    per-sentence part's, numbered in call order): how many passes hold some at once, at most. Tensors that share a
    parameter's storage (weights, their transposes) are not activations."""

    def __init__(self, model) -> None:
        self.weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.live: dict[int, int] = {}
        self.most_at_once = 0
        self.running: int | None = None
        self.passes = 0

    def wrap(self, function):
        def run(*args, **kwargs):
            self.passes += 1
            outer, self.running = self.running, self.passes
            try:
                with torch.autograd.graph.saved_tensors_hooks(self.pack, lambda box: box.tensor):
                    return function(*args, **kwargs)
            finally:
                self.running = outer
        return run

    def pack(self, tensor: torch.Tensor) -> Saved:
        box = Saved(tensor.detach())  # as torch's save_on_cpu does: a saved output would hold its own node
        if self.running is not None and tensor.untyped_storage().data_ptr() not in self.weights:
            label = self.running
            self.live[label] = self.live.get(label, 0) + 1
            self.most_at_once = max(self.most_at_once, sum(1 for count in self.live.values() if count))
            weakref.finalize(box, self.release, label)
        return box

    def release(self, label: int) -> None:
        self.live[label] -= 1


def record_grad_modes(model, monkeypatch, wrap=lambda function: function) -> list[bool]:
    """Whether gradients were on at each backbone pass of ``model`` (``encode_views``, replaced by a recording
    twin; ``wrap`` wraps that twin in turn), in order, in the list returned."""
    grad_modes = []
    encode_views = model.encode_views

    def recorded(*args, **kwargs):
        grad_modes.append(torch.is_grad_enabled())
        return encode_views(*args, **kwargs)

    monkeypatch.setattr(model, "encode_views", wrap(recorded))
    return grad_modes


@pytest.mark.parametrize("case, passes", [("simcse", (1, 3)), ("esimcse", (1, 3)), ("s_simcse", (1, 3)),
                                          ("promptbert", (1, 3)), ("diffcse", (1, 3))])
def test_the_first_chunk_keeps_its_graph_and_one_chunk_holds_activations_at_a_time(paths, case, passes,
                                                                                   monkeypatch):
    """Chunks 3 + 3 + 2: the first chunk is encoded once, with its graph, which the replay backpropagates first, and
    the other two in one pass without a graph (row-seeded masks: up to ``NO_GRAD_PASS_CHUNKS`` chunks a pass): 1
    backbone pass without a graph and 3 with one (a pass per chunk made 2 and 3 before 2026-11-28). DiffCSE's
    per-sentence part (its discriminator, chunk by chunk in the backward) would hold activations beside a kept chunk,
    so DiffCSE encodes all three chunks in its pass without a graph and replays every chunk. Either way no two
    passes hold activations at once: the memory bound of a chunk (each discriminator chunk's graph, which its
    backward retains for the full set's shared part, is freed before the next pass: it was not before 2026-11-27,
    and 2 passes held activations at once). Without DiffCSE's exception two passes would (checked below); the result
    is the uncached step's."""
    model, twin, batch = twins(paths, case, dropout_masks="row_seeded")
    tracker = ActivationsPerPass(twin)
    grad_modes = record_grad_modes(twin, monkeypatch, tracker.wrap)
    if hasattr(twin, "discriminator"):
        monkeypatch.setattr(twin, "sentence_loss", tracker.wrap(twin.sentence_loss))
    got = cached(twin, batch, 3)
    assert (grad_modes.count(False), grad_modes.count(True)) == passes
    assert tracker.most_at_once == 1
    assert_same_step(got, uncached(model, batch))
    if case == "diffcse":  # the exception is needed: a kept first chunk would share the backward with a discriminator
        monkeypatch.setattr(cached_step, "keeps_first_chunk", lambda model: True)
        twin.zero_grad()
        tracker.most_at_once = 0
        cached(twin, batch, 3)
        assert tracker.most_at_once == 2


def test_passes_without_a_graph_take_up_to_four_chunks_with_row_seeded_masks_and_one_with_stream_masks():
    """Batch 512 in chunks of 128 (issue 32's cached step): the kept chunk, then the other 3 in one pass without a
    graph; in chunks of 64, 7 chunks in passes of 4 and 3; stream masks keep one pass per chunk, whose RNG state
    the replay restores. The fast path's recompile limit counts each size (``pass_sizes``)."""
    bounds = cached_step.chunk_bounds(512, 128)
    assert cached_step.no_grad_bounds(bounds[1:], True) == [(128, 512)]
    assert cached_step.no_grad_bounds(bounds[1:], False) == bounds[1:]
    assert cached_step.no_grad_bounds(cached_step.chunk_bounds(512, 64)[1:], True) == [(64, 320), (320, 512)]
    assert cached_step.no_grad_bounds(cached_step.chunk_bounds(8, 3), True) == [(0, 8)]
    # without a graph: 3 chunks after a kept one, DiffCSE's 4, and a chunk alone (DiffCSE's generator edit)
    assert cached_step.pass_sizes(512, 128) == ({128}, {128, 384, 512})
    assert cached_step.pass_sizes(8, 3) == ({3, 2}, {2, 3, 5, 8})
    assert cached_step.states_by_chunk(bounds, [(0, 128), (128, 512)], ["kept", "rest"]) == ["kept"] + ["rest"] * 3


def test_a_stream_masked_step_encodes_each_chunk_alone(paths, monkeypatch):
    """Stream masks: each chunk's pass without a graph starts from its own RNG state, which its replay restores, so
    chunks are not grouped (3 + 3 + 2: the kept chunk, then 2 passes without a graph, then 2 replays)."""
    model, twin, batch = twins(paths, "simcse")
    grad_modes = record_grad_modes(twin, monkeypatch)
    assert_same_step(cached(twin, batch, 3), uncached_at_chunk_masks(model, batch, 3))
    assert grad_modes == [True, False, False, True, True]


# ---------------------------------------------------------------------------------------------- the benchmark
def test_benchmark_counts_one_extra_forward_and_renders():
    """bench/cached_memory.py on a tiny batch: the cached step in chunks of N of B sentences executes
    1 + (B - N) / 3B of the uncached step's FLOPs (an extra forward of every chunk but the first, a forward being a
    third of a forward+backward), the GEMM ceiling is positive, the table has the pair's row, and each row reports
    the step's ATen op count and host milliseconds."""
    import argparse

    from bench.cached_memory import markdown, one

    rows = [one(argparse.Namespace(config="tiny", method="simcse", batch=8, chunk=chunk, seq_len=8, steps=1,
                                   warmup=0, threads=1, ceiling_rows=256, device="cpu", masks=masks, bf16=False))
            for chunk, masks in ((0, "stream"), (3, "row_seeded"))]
    assert rows[1]["flops"] / rows[0]["flops"] == pytest.approx(1 + (8 - 3) / (3 * 8), rel=0.01)
    assert all(row["ceiling_gflops"] > 0 and row["gflops"] > 0 for row in rows)
    # the host's work per step beside the times (issue 32): ATen ops dispatched, a compiled keep-mask call as one
    assert all(row["ops"] > 100 and row["host_ms"] > 0 for row in rows)
    table = markdown(rows)
    assert "| ops/step | host ms |" in table.splitlines()[0]
    assert "| tiny | simcse | 8 | uncached | stream |" in table and "| tiny | simcse | 8 | cached 3 | row_seeded |" in table


# ---------------------------------------------------------------------------------------------- command lines
@pytest.mark.parametrize("script, flags", [
    ("run_unsup", ["--method", "esimcse", "--queue_size", "12"]),
    ("run_unsup", ["--method", "s_simcse"]),
    ("run_diffcse", []),
])
def test_the_flag_trains_every_script(paths, tmp_path, script, flags, capsys):
    """``--cache_chunk_size 3`` (batch 8: chunks 3 + 3 + 2) through the training scripts, to the export; it turns
    row-seeded masks on, which the run summary and the model card say."""
    import run_diffcse
    import run_unsup
    from tests.tiny import FAST_TRAINING_ARGS

    out = tmp_path / "run"
    extra = ["--generator_name", str(paths["generator"])] if script == "run_diffcse" else []
    main = run_diffcse.main if script == "run_diffcse" else run_unsup.main
    main([*flags, *extra, "--model_name_or_path", str(paths["encoder"]), "--train_file",
          str(tiny_corpus(tmp_path / "corpus.txt", n=32)), "--max_seq_length", "16", "--eval_strategy", "no",
          "--save_strategy", "no", "--load_best_model_at_end", "false", "--max_steps", "2", "--cache_chunk_size", "3",
          "--output_dir", str(out), *FAST_TRAINING_ARGS])
    assert json.loads((out / "run_arguments.json").read_text())["CLTrainingArguments" if script == "run_unsup"
                                                                 else "DiffCSETrainingArguments"]["cache_chunk_size"] == 3
    assert (out / "export" / "hf" / "model.safetensors").is_file()
    assert ("step: cached, 3 sentences per backbone pass (--cache_chunk_size); row_seeded dropout masks"
            in capsys.readouterr().out)
    assert '"dropout_masks": "row_seeded"' in (out / "export" / "hf" / "README.md").read_text()
