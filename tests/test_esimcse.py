"""ESimCSE: Eq. 6 against a written-out loop; the queue keeps the newest entries in order; the momentum encoder
equals the online encoder at step 0, follows the EMA after a step, stays dropout-free and out of the optimizer, and
updates once per optimizer step under gradient accumulation; a resumed run with a full queue reproduces the
uninterrupted one; the queue is gathered under DDP; ablation switches; training through CLTrainer and run_unsup."""
from __future__ import annotations

import math
from collections import deque

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

import run_unsup
from models import ESimCSEModel
from models.losses import info_nce
from models.esimcse import EmbeddingQueue
from tests.launch import run_ddp_cases
from tests.tiny import FAST_TRAINING_ARGS, cosine, save_tiny_backbone, tiny_corpus, tiny_trainer, token_batch
from trainers.methods import build_collator, build_model, load_contrastive_model






# --------------------------------------------------------------------------------------------------- loss / queue
@pytest.mark.parametrize("queue_rows", [0, 1, 5])
@pytest.mark.parametrize("tau", [0.05, 0.5])
def test_info_nce_with_a_queue_matches_eq6(queue_rows, tau):
    g = torch.Generator().manual_seed(queue_rows)
    z1, z2, queue = (torch.randn(n, 6, generator=g, dtype=torch.float64) for n in (5, 5, queue_rows))
    a, b, q = z1.tolist(), z2.tolist(), queue.tolist()
    expected = 0.0
    for i in range(5):
        numerator = math.exp(cosine(a[i], b[i]) / tau)
        denominator = sum(math.exp(cosine(a[i], b[j]) / tau) for j in range(5))
        denominator += sum(math.exp(cosine(a[i], q[m]) / tau) for m in range(queue_rows))
        expected += -math.log(numerator / denominator)
    assert info_nce(z1, z2, tau, extra_negatives=queue).item() == pytest.approx(expected / 5, abs=1e-6)


def test_queue_keeps_the_newest_entries_in_order():
    queue, reference = EmbeddingQueue(7, 1), deque(maxlen=7)
    counter = 0
    for size in [3, 2, 4, 1, 9, 0, 5, 7, 2]:
        batch = torch.arange(counter, counter + size, dtype=torch.float32)[:, None]
        counter += size
        queue.enqueue(batch)
        reference.extend(batch[:, 0].tolist())
        assert queue.entries()[:, 0].tolist() == list(reference)
    assert {"embeddings", "ptr", "count"} <= set(queue.state_dict())


# --------------------------------------------------------------------------------------------------- momentum
@pytest.mark.parametrize("through_mlp", [False, True])
def test_momentum_encoder_starts_equal_and_follows_the_ema(backbone, through_mlp):
    model = build_model("esimcse", str(backbone), queue_through_mlp=through_mlp, momentum=0.9)
    online = dict(model.encoder.named_parameters())
    momentum = dict(model.momentum_encoder.encoder.named_parameters())
    assert online.keys() == momentum.keys()
    assert all(torch.equal(momentum[n], p) for n, p in online.items())  # step 0: a copy of the loaded encoder
    assert (model.momentum_encoder.projector is None) == through_mlp
    pairs = [(model.momentum_encoder.encoder, model.encoder)]
    if not through_mlp:
        pairs.append((model.momentum_encoder.projector, model.projector))
    start = [{n: p.detach().clone() for n, p in m.named_parameters()} for m, _ in pairs]

    model.train()
    assert not model.momentum_encoder.training and not any(p.requires_grad for p in model.momentum_encoder.parameters())
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1.0)
    ids, mask = token_batch()
    model(input_ids=ids, attention_mask=mask).loss.backward()
    optimizer.step()
    model.on_optimizer_step()
    for (m, o), before in zip(pairs, start):
        current = dict(o.named_parameters())
        for name, param in m.named_parameters():
            torch.testing.assert_close(param, 0.9 * before[name] + 0.1 * current[name], atol=1e-6, rtol=0)
        assert any(not torch.equal(p, before[n]) for n, p in m.named_parameters())


def _ema_step(model, sources, start, momentum=0.9):
    """After ``model.on_optimizer_step()``: each momentum parameter is Eq. 5 of its start and ``sources``' current."""
    for name, param in model.momentum_encoder.encoder.named_parameters():
        torch.testing.assert_close(param, momentum * start[name] + (1 - momentum) * sources[name], atol=1e-6, rtol=0)


def test_the_ema_keeps_its_parameter_pairs_and_follows_a_replaced_parameter_or_buffer(backbone, monkeypatch):
    model = build_model("esimcse", str(backbone), queue_through_mlp=True, momentum=0.9)
    momentum = model.momentum_encoder
    model.on_optimizer_step()
    pairs = momentum._param_pairs
    walks = []
    real_named_parameters = torch.nn.Module.named_parameters
    monkeypatch.setattr(torch.nn.Module, "named_parameters",
                        lambda self, *a, **k: walks.append(self) or real_named_parameters(self, *a, **k))
    model.on_optimizer_step()
    assert momentum._param_pairs is pairs and walks == []  # the second step walks neither network by name
    monkeypatch.undo()
    # a parameter replaced in the online encoder (a user's surgery, a reload): the next step's EMA reads the new one
    layer = model.encoder.encoder.layer[0].output.dense
    layer.weight = torch.nn.Parameter(torch.randn_like(layer.weight))
    start = {n: p.detach().clone() for n, p in momentum.encoder.named_parameters()}
    model.on_optimizer_step()
    _ema_step(model, {n: p.detach() for n, p in model.encoder.named_parameters()}, start)
    assert momentum._param_pairs is not pairs
    # a buffer replaced (as .to() does) is copied from the current one
    embeddings = model.encoder.embeddings
    name = next(iter(embeddings._buffers))
    embeddings._buffers[name] = embeddings._buffers[name].clone().fill_(1)
    model.on_optimizer_step()
    assert torch.equal(momentum.encoder.embeddings._buffers[name], embeddings._buffers[name])


def test_queue_holds_dropout_free_momentum_embeddings_used_from_the_next_batch(backbone):
    model = build_model("esimcse", str(backbone), queue_size=6).train()
    ids, mask = token_batch()
    out = model(input_ids=ids, attention_mask=mask)
    assert model.queue.count.item() == 4 and out.metrics["queue_fill"].item() == 0
    expected = model.momentum_embeddings(ids[:, 0], mask[:, 0])
    torch.testing.assert_close(model.queue.entries(), expected)
    torch.testing.assert_close(model.momentum_embeddings(ids[:, 0], mask[:, 0]), expected)  # no dropout
    old_queue = model.queue.entries()
    ids2, mask2 = token_batch(seed=1)
    torch.manual_seed(5)
    out = model(input_ids=ids2, attention_mask=mask2)
    torch.manual_seed(5)
    z = model.embed_views(ids2, mask2).views
    torch.testing.assert_close(out.loss, info_nce(z[:, 0], z[:, 1], 0.05, extra_negatives=old_queue))  # queue as it stood
    assert model.queue.entries().shape == (6, 32)  # 8 enqueued, the 2 oldest left


def test_optimizer_ignores_momentum_and_ema_runs_once_per_optimizer_step(tmp_path, backbone):
    model = build_model("esimcse", str(backbone), queue_size=100)
    calls = []
    original = model.on_optimizer_step
    model.on_optimizer_step = lambda: (calls.append(1), original())[1]
    trainer = tiny_trainer(model, backbone, tmp_path, tiny_corpus(tmp_path / "c.txt"), max_steps=2,
                           per_device_train_batch_size=4, gradient_accumulation_steps=3)
    trainer.train()
    optimized = {id(p) for group in trainer.optimizer.param_groups for p in group["params"]}
    assert not optimized & {id(p) for p in model.momentum_encoder.parameters()}
    assert len(calls) == 2 and model.queue.count.item() == 2 * 3 * 4  # 6 micro-batches enqueued, 2 EMA updates
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logs) == 2 and all(math.isfinite(e["loss"]) for e in logs)


# --------------------------------------------------------------------------------------------------- data
def test_collator_repeats_tokens_of_the_sentence(backbone):
    tokenizer = AutoTokenizer.from_pretrained(str(backbone))
    model = build_model("esimcse", str(backbone), dup_rate=0.5)
    collator = build_collator(model, tokenizer, 32)
    rows = [{"text": "the cat sits on the table with a dog and a man"}, {"text": "big red car"}]
    batch = collator(rows)
    extender = collator.view_augmenters[1]
    for row in range(2):
        original = batch["input_ids"][row, 0][batch["attention_mask"][row, 0].bool()].tolist()
        repeated = batch["input_ids"][row, 1][batch["attention_mask"][row, 1].bool()].tolist()
        inserted = extender.last_inserted[row]
        assert [t for p, t in enumerate(repeated) if p not in inserted] == original
        assert all(repeated[p] == repeated[p - 1] for p in inserted)
    assert extender.last_inserted[0]  # U{0..max(2, 0.5*12)}: almost surely something is repeated for this batch


def test_positives_at_the_length_limit_are_longer_and_never_cut(backbone):
    """As the released recipe builds it: the anchor is truncated to max_seq_length, the positive is that anchor plus
    its repetitions and is never cut again, so sentences at the limit still get a longer positive; the batch is
    padded to its longest row. ``truncate_positive`` restores the cut (an ablation)."""
    tokenizer = AutoTokenizer.from_pretrained(str(backbone))
    words = "cat dog man woman car bank river tree city music film game book water food song".split()
    rows = [{"text": " ".join(words[i:] + words[:i])} for i in range(16)]  # 16 different 16-word sentences
    model = build_model("esimcse", str(backbone), dup_rate=0.5)
    collator = build_collator(model, tokenizer, 12)
    batch = collator(rows)
    anchor_lengths = batch["attention_mask"][:, 0].sum(-1)
    positive_lengths = batch["attention_mask"][:, 1].sum(-1)
    assert (anchor_lengths == 12).all()  # every anchor is truncated to max_seq_length
    assert (positive_lengths > 12).any() and batch["input_ids"].shape[-1] == int(positive_lengths.max())
    extender = collator.view_augmenters[1]
    for row in range(len(rows)):
        anchor = batch["input_ids"][row, 0][:12].tolist()
        positive = batch["input_ids"][row, 1][: int(positive_lengths[row])].tolist()
        assert [t for p, t in enumerate(positive) if p not in extender.last_inserted[row]] == anchor
    cut = build_collator(build_model("esimcse", str(backbone), dup_rate=0.5, truncate_positive=True), tokenizer, 12)
    assert cut(rows)["input_ids"].shape[-1] == 12


def test_ablation_switches(backbone, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(str(backbone))
    rows = [{"text": "the cat sits on the table with a dog"}, {"text": "a man plays the guitar in the park"}]
    alone = build_model("esimcse", str(backbone), length_extension="none")  # momentum contrast alone
    batch = build_collator(alone, tokenizer, 32)(rows)
    assert torch.equal(batch["input_ids"][:, 0], batch["input_ids"][:, 1])
    repetition_only = build_model("esimcse", str(backbone), momentum_contrast=False).train()
    assert repetition_only.momentum_encoder is None and repetition_only.queue is None
    assert not any(k.startswith(("momentum", "queue")) for k in repetition_only.state_dict())
    out = repetition_only(**build_collator(repetition_only, tokenizer, 32)(rows))
    assert set(out.metrics) == {"contrastive_loss"}
    for kind in ("stopword", "mask"):
        model = build_model("esimcse", str(backbone), length_extension=kind, dup_type="word", dup_rate=1.0)
        assert torch.isfinite(model.train()(**build_collator(model, tokenizer, 32)(rows)).loss)
    mlm_dir = tmp_path / "mlm"
    BertForMaskedLM(BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                               intermediate_size=37)).save_pretrained(mlm_dir)
    model = build_model("esimcse", str(backbone), length_extension="mlm_prediction",
                                      insert_mlm_name_or_path=str(mlm_dir))
    batch = build_collator(model, tokenizer, 32)(rows)
    assert tokenizer.mask_token_id not in batch["input_ids"].tolist()
    with pytest.raises(ValueError, match="insert_mlm_name_or_path"):
        build_model("esimcse", str(backbone), length_extension="mlm_prediction")


# --------------------------------------------------------------------------------------------------- checkpoints
def test_checkpoint_round_trip_keeps_momentum_and_queue(backbone, tmp_path):
    model = build_model("esimcse", str(backbone), queue_size=6).train()
    for seed in range(3):
        ids, mask = token_batch(seed=seed)
        model(input_ids=ids, attention_mask=mask)
        model.on_optimizer_step()
    model.save_pretrained(tmp_path)
    loaded = load_contrastive_model(tmp_path)
    assert type(loaded) is ESimCSEModel
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
    assert loaded.queue.entries().shape == (6, 32) and loaded.queue.ptr.item() == model.queue.ptr.item()


def test_resume_with_a_full_queue_reproduces_the_uninterrupted_run(tmp_path, backbone):
    corpus = tiny_corpus(tmp_path / "corpus.txt", n=96)
    common = ["--method", "esimcse", "--model_name_or_path", str(backbone), "--train_file", str(corpus),
              "--max_steps", "6", "--queue_size", "12", "--momentum", "0.9", "--eval_strategy", "no",
              "--save_strategy", "steps", "--save_steps", "3", "--save_total_limit", "10",
              "--load_best_model_at_end", "false", *FAST_TRAINING_ARGS]
    run_unsup.main(common + ["--output_dir", str(tmp_path / "full")])
    run_unsup.main(common + ["--output_dir", str(tmp_path / "resumed"),
                             "--resume_from_checkpoint", str(tmp_path / "full" / "checkpoint-3")])
    full = load_file(tmp_path / "full" / "checkpoint-6" / "model.safetensors")
    resumed = load_file(tmp_path / "resumed" / "checkpoint-6" / "model.safetensors")
    halfway = load_file(tmp_path / "full" / "checkpoint-3" / "model.safetensors")
    assert full.keys() == resumed.keys() and {"queue.embeddings", "queue.ptr", "queue.count"} <= full.keys()
    assert full["queue.count"].item() == 12 and halfway["queue.count"].item() == 12  # full before the resume
    assert any(k.startswith("momentum_encoder.encoder.") for k in full)
    for name in full:
        assert torch.equal(full[name], resumed[name]), name
    assert not torch.equal(full["queue.embeddings"], halfway["queue.embeddings"])


def test_trains_through_run_unsup_with_the_official_code_preset(tmp_path, backbone):
    metrics = run_unsup.main(["--method", "esimcse", "--model_name_or_path", str(backbone), "--train_file",
                              str(tiny_corpus(tmp_path / "c.txt")), "--max_steps", "2", "--eval_strategy", "no",
                              "--save_strategy", "no", "--load_best_model_at_end", "false", "--fidelity",
                              "official_code", "--output_dir", str(tmp_path / "run"), *FAST_TRAINING_ARGS])
    assert metrics["train_loss"] > 0
    card = (tmp_path / "run" / "export" / "hf" / "README.md").read_text()
    for setting in ('"dup_length_rule": "code"', '"resample_repetition": false', '"queue_through_mlp": true',
                    '"fidelity": "official_code"'):
        assert setting in card
    exported = set(load_file(tmp_path / "run" / "export" / "hf" / "model.safetensors"))
    assert not any("momentum" in k or "queue" in k for k in exported)  # the export is the plain encoder


# --------------------------------------------------------------------------------------------------- DDP
def test_gathered_queue_under_ddp_equals_one_process_with_the_global_batch(tmp_path):
    model_dir = save_tiny_backbone(tmp_path / "model", dropout=0.0)
    batches = []
    for seed in range(3):
        ids, mask = token_batch(b=8, seed=seed)
        ids[:, 1] = torch.randint(5, 60, ids[:, 1].shape, generator=torch.Generator().manual_seed(10 + seed))
        batches.append({"input_ids": ids, "attention_mask": mask})
    cases = [{"name": "esimcse", "method": "esimcse", "config": {"queue_size": 20, "momentum": 0.5}, "steps": 3},
             {"name": "esimcse_pp", "method": "esimcse",
              "config": {"queue_size": 12, "off_dropout": True, "dcl_weight": 0.5}, "steps": 3}]
    run_ddp_cases(tmp_path, model_dir, batches, cases)
    from tests.workers.methods_ddp_steps import run_steps

    for case in cases:
        torch.manual_seed(0)
        reference = build_model(case["method"], str(model_dir), **case["config"]).train()
        losses, grads = run_steps(reference, reference, batches, case["steps"])
        state = reference.state_dict()
        for rank in range(2):
            result = torch.load(tmp_path / f"{case['name']}.rank{rank}.pt", weights_only=True)
            torch.testing.assert_close(result["losses"], losses, atol=1e-5, rtol=1e-5)
            for name, grad in grads.items():
                torch.testing.assert_close(result["grads"][name], grad, atol=1e-5, rtol=1e-4, msg=name)
            for name in ("queue.embeddings", "queue.ptr", "queue.count"):
                torch.testing.assert_close(result["state"][name], state[name], atol=1e-5, rtol=1e-4, msg=name)
