"""DiffCSE on tiny random models: the RTD loss, the replaced-token labels, the conditioning of the discriminator on
h, the auxiliary networks (discriminator = encoder at step 0, frozen generator), the vocabulary check, the edits of
the ablations, the argument profiles, a few training steps through run_diffcse.main and the encoder-only export."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file
from torch import nn
from transformers import AutoModel, AutoModelForMaskedLM, BertTokenizerFast

import run_diffcse
from data.corpus import load_next_sentence_corpus
from data.diffcse_collator import DiffCSECollator
from trainers.methods import build_collator, build_model, load_contrastive_model
from models.diffcse import DiffCSEModel, VocabularyMismatchError, rtd_statistics
from models.export import export_model
from models.diffcse import batch_width, rtd_loss
from tests.tiny import (FAST_TRAINING_ARGS, SPECIAL, WORDS, save_tiny_backbone, save_tiny_generator, tiny_config,
                        tiny_corpus, tiny_tokenizer)
from trainers.errors import UsageError

ROWS = [{"text": "the cat sits on the big red chair"}, {"text": "a dog runs in the park"},
        {"text": "music is good"}, {"text": "the old king reads a new book in the house"}]


@pytest.fixture(autouse=True)
def one_thread(torch_single_thread):
    """Tiny models run fastest single-threaded on the shared CPU box."""


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    """A tiny BERT encoder and a tiny DistilBERT masked LM (the generator) over the same vocabulary."""
    root = tmp_path_factory.mktemp("diffcse")
    encoder = save_tiny_backbone(root / "encoder", seed=0)
    generator_dir = save_tiny_generator(root / "generator")
    return SimpleNamespace(encoder=encoder, generator=generator_dir, root=root)


def build(paths, **config) -> DiffCSEModel:
    torch.manual_seed(0)
    return build_model("diffcse", str(paths.encoder), generator_name=str(paths.generator), **config)


def collate(model: DiffCSEModel, rows=ROWS, max_length: int = 16):
    tokenizer = BertTokenizerFast.from_pretrained(model.config.generator_name)
    return build_collator(model, tokenizer, max_length)(rows)


class StubGenerator(nn.Module):
    """A 'masked LM' whose prediction at position t is ``table[t]`` (huge logit margin: sampling = argmax)."""

    def __init__(self, table: list[int], vocab_size: int) -> None:
        super().__init__()
        self.table, self.vocab_size = table, vocab_size

    def forward(self, input_ids, attention_mask=None):
        logits = torch.full((*input_ids.shape, self.vocab_size), -1e4)
        for t, token in enumerate(self.table[: input_ids.size(1)]):
            logits[:, t, token] = 1e4
        return SimpleNamespace(logits=logits)


# ---------------------------------------------------------------------------------------------- the RTD loss
def test_rtd_loss_equals_a_written_out_cross_entropy():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 2, generator=g)
    labels = torch.tensor([[0, 1, 0, 1, 1], [1, 0, 0, 1, 1]])  # the 1s under padding must not count
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    total, count = 0.0, 0
    total_with_padding = 0.0
    for i in range(2):
        for t in range(5):
            a, b = logits[i, t].tolist()
            log_normaliser = torch.log(torch.exp(torch.tensor(a)) + torch.exp(torch.tensor(b))).item()
            if mask[i, t]:
                chosen = b if labels[i, t] == 1 else a
                total += -(chosen - log_normaliser)
                count += 1
                total_with_padding += -(chosen - log_normaliser)
            else:  # padding = "not replaced" (class 0) in the code's behaviour
                total_with_padding += -(a - log_normaliser)
    assert rtd_loss(logits, labels, mask).item() == pytest.approx(total / count, abs=1e-6)
    assert rtd_loss(logits, labels, mask, include_padding=True).item() == pytest.approx(total_with_padding / 10,
                                                                                       abs=1e-6)


def test_the_rtd_loss_over_padding_counts_the_batchs_own_width_only():
    """``--rtd_include_padding`` on rows padded past the batch's own width (the fast path's fixed width: 3 columns
    more): the loss is the written-out mean over the positions within that width (the padded ones as class 0), the
    natural-width rows' loss, and its columns past the width count in none of it (their logits and labels may be
    anything)."""
    g = torch.Generator().manual_seed(1)
    mask = torch.tensor([[1, 1, 1, 1, 0, 0, 0], [1, 1, 0, 0, 0, 0, 0]])  # the batch's own width: 4
    logits = torch.randn(2, 7, 2, generator=g)
    labels = torch.tensor([[0, 1, 1, 0, 1, 1, 1], [1, 0, 1, 1, 1, 1, 1]])
    width = batch_width(mask)
    assert width.item() == 4
    total = 0.0
    for i in range(2):
        for t in range(4):
            log_probabilities = torch.log_softmax(logits[i, t], -1).tolist()
            total -= log_probabilities[int(labels[i, t]) if mask[i, t] else 0]
    got = rtd_loss(logits, labels, mask, include_padding=True, width=width)
    assert got.item() == pytest.approx(total / 8, abs=1e-6)
    assert torch.equal(got, rtd_loss(logits[:, :4], labels[:, :4], mask[:, :4], include_padding=True))
    assert rtd_loss(logits, labels, mask, include_padding=True).item() != pytest.approx(total / 8, abs=1e-3)
    summed = rtd_loss(logits, labels, mask, include_padding=True, normaliser=torch.tensor(8), width=width)
    assert summed.item() == pytest.approx(total / 8, abs=1e-6)


# ---------------------------------------------------------------------------------------------- labels
def test_replaced_token_labels_for_a_hand_made_example(paths):
    model = build(paths)
    cls, sep, pad = 2, 3, 0
    original = torch.tensor([[cls, 10, 11, 12, sep, pad]])
    # the collator masked positions 1 and 2; the generator restores position 1 and replaces position 2
    batch = {"rtd_input_ids": torch.tensor([[cls, 4, 4, 12, sep, pad]]),
             "rtd_attention_mask": torch.tensor([[1, 1, 1, 1, 1, 0]]),
             "rtd_fill": torch.tensor([[False, True, True, False, False, False]]),
             "rtd_original_ids": original, "rtd_labels": torch.full_like(original, -1)}
    model.generator = StubGenerator([cls, 10, 20, 30, 40, 50], vocab_size=model.config.encoder_config.vocab_size)
    for sample in (True, False):
        model.config.sample_generator = sample
        edited, labels = model.edit(batch)
        assert edited.tolist() == [[cls, 10, 20, 12, sep, pad]]  # only filled positions change
        assert labels.tolist() == [[0, 0, 1, 0, 0, 0]]  # a generated token equal to the original is NOT replaced
    model.config.generator_all_positions = True  # the code: the generator's output everywhere but [CLS] / padding
    edited, labels = model.edit(batch)
    assert edited.tolist() == [[cls, 10, 20, 30, 40, pad]] and labels.tolist() == [[0, 0, 1, 1, 1, 0]]


def test_collator_never_masks_special_tokens_or_padding(paths):
    tokenizer = tiny_tokenizer(paths.root / "tok")
    specials = set(tokenizer.all_special_ids)
    for style in ("mask", "bert"):
        collator = DiffCSECollator(tokenizer, max_length=16, masking_ratio=0.9, mask_style=style, seed=3)
        batch = collator(ROWS * 8)
        fill, original = batch["rtd_fill"], batch["rtd_original_ids"]
        assert fill.any()
        assert not any(int(token) in specials for token in original[fill])  # never [CLS]/[SEP]/[PAD]
        assert torch.equal(batch["rtd_input_ids"][~fill], original[~fill])
        assert not fill[batch["rtd_attention_mask"] == 0].any()
        if style == "mask":
            assert (batch["rtd_input_ids"][fill] == tokenizer.mask_token_id).all()
    collator = DiffCSECollator(tokenizer, masking_ratio=0.3, seed=0)
    filled = 0.0
    for epoch in range(64):  # a sentence's edit is drawn per (seed, epoch, sentence): fresh every epoch
        collator.set_epoch(epoch)
        filled += collator(ROWS)["rtd_fill"].float().sum().item()
    body = sum(len(r["text"].split()) for r in ROWS) * 64
    assert filled / body == pytest.approx(0.3, abs=0.05)


def test_collator_edits_do_not_depend_on_the_batch_split(paths):
    """Each row's edit depends on (seed, epoch, view, sentence) only: two processes' halves edit as the whole."""
    tokenizer = tiny_tokenizer(paths.root / "tok")
    collator = DiffCSECollator(tokenizer, max_length=16, masking_ratio=0.3, rtd_views=2, seed=5)
    collator.set_epoch(2)
    whole = collator(ROWS)
    halves = [collator(ROWS[:2]), collator(ROWS[2:])]
    for key in ("rtd_input_ids", "rtd_fill"):
        rows = [row[: int(mask.sum())] for row, mask in zip(whole[key], whole["rtd_attention_mask"])]
        half_rows = [row[: int(mask.sum())] for half in halves for row, mask in zip(half[key], half["rtd_attention_mask"])]
        assert all(torch.equal(a, b) for a, b in zip(rows, half_rows)) and len(rows) == len(half_rows)
    fill = whole["rtd_fill"]  # rows: sentence-major, (sentence b, view v) at 2b + v: each view draws its own edit
    assert any(not torch.equal(fill[2 * b], fill[2 * b + 1]) for b in range(len(ROWS)))


def test_insert_and_delete_edits_and_their_labels(paths):
    tokenizer = tiny_tokenizer(paths.root / "tok")
    ids = tokenizer("the cat sits on the big red chair")["input_ids"]  # [CLS] 8 words [SEP]
    import random

    inserted = DiffCSECollator(tokenizer, masking_ratio=0.25, edit="insert").insert(ids, random.Random(0))
    assert len(inserted.input_ids) == len(ids) + 2 and sum(inserted.labels) == 2
    assert [t for t, label in zip(inserted.input_ids, inserted.labels) if not label] == ids  # originals, in order
    assert all(t == tokenizer.mask_token_id for t, f in zip(inserted.input_ids, inserted.fill) if f)
    assert inserted.fill == [bool(label) for label in inserted.labels]
    assert inserted.input_ids[0] == ids[0] and inserted.input_ids[-1] == ids[-1]

    deleted = DiffCSECollator(tokenizer, masking_ratio=0.25, edit="delete").delete(ids, random.Random(0))
    assert len(deleted.input_ids) == len(ids) - 2 and not any(deleted.fill) and 1 <= sum(deleted.labels) <= 2
    assert deleted.input_ids[0] == ids[0] and deleted.input_ids[-1] == ids[-1] and deleted.labels[0] == 0


def test_hand_made_deletion_labels(paths):
    tokenizer = tiny_tokenizer(paths.root / "tok")
    collator = DiffCSECollator(tokenizer, masking_ratio=0.25, edit="delete")

    class FixedChoice:
        def sample(self, population, k):
            return [population[1], population[2]]  # delete body tokens 2 and 3 (positions 2, 3)

    ids = [2, 10, 11, 12, 13, 3]
    row = collator.delete(ids, FixedChoice())
    assert row.input_ids == [2, 10, 13, 3] and row.labels == [0, 0, 1, 0]


# ---------------------------------------------------------------------------------------------- conditioning
@pytest.mark.parametrize("site", ["inputs_embeds", "embeddings_output"])
def test_h_reaches_position_zero_and_gradients_reach_the_encoder(paths, site):
    model = build(paths, rtd_condition_site=site)
    model.eval()  # no dropout: outputs differ only through h
    tokenizer = tiny_tokenizer(paths.root / "tok")
    batch = DiffCSECollator(tokenizer, max_length=16, masking_ratio=0.3, seed=0)(ROWS)
    ids, mask = batch["rtd_input_ids"], batch["rtd_attention_mask"]
    h = torch.randn(len(ROWS), 32)
    out = model.discriminate(h, ids, mask)
    assert not torch.allclose(out, model.discriminate(h + 1.0 * torch.randn_like(h), ids, mask))
    other_first = ids.clone()
    other_first[:, 0] = 7  # the token at position 0 is replaced by h: it must not matter
    assert torch.allclose(out, model.discriminate(h, other_first, mask), atol=1e-6)

    model.train()
    model.config.use_contrastive_loss = False  # only the RTD loss: encoder gradients can only come through h
    model.zero_grad()
    batch = DiffCSECollator(tokenizer, max_length=16, masking_ratio=0.3, seed=0)(ROWS)
    output = model(**batch)
    output.loss.backward()
    encoder_grads = [p.grad for p in model.encoder.parameters() if p.requires_grad]
    assert all(g is not None for g in encoder_grads)
    assert sum(g.abs().sum() for g in encoder_grads) > 0
    assert all(p.grad is None for p in model.generator.parameters())
    assert model.rtd_head.weight.grad.abs().sum() > 0


def test_the_code_sites_hook_is_registered_once_and_is_its_models_own(paths):
    """``embeddings_output``: one hook on the discriminator's embeddings for the model's life (a compiled
    discriminator's graph holds it), which puts h in while :meth:`discriminate` runs and nowhere else; a copy's hook
    (``copy.deepcopy``: the fast path's tests, a twin) reads the copy's h."""
    model = build(paths, rtd_condition_site="embeddings_output").eval()
    embeddings = model.discriminator.embeddings
    tokenizer = tiny_tokenizer(paths.root / "tok")
    batch = DiffCSECollator(tokenizer, max_length=16, masking_ratio=0.3, seed=0)(ROWS)
    ids, mask = batch["rtd_input_ids"], batch["rtd_attention_mask"]
    h = torch.randn(len(ROWS), 32)
    first = model.discriminate(h, ids, mask)
    assert torch.equal(first, model.discriminate(h, ids, mask)) and len(embeddings._forward_hooks) == 1
    assert model.rtd_condition is None
    seen = []
    handle = embeddings.register_forward_hook(lambda module, args, output: seen.append(output[:, 0].clone()))
    model.discriminate(h, ids, mask)
    embeddings(input_ids=ids)  # outside discriminate: the embeddings' own output
    handle.remove()
    assert torch.equal(seen[0], h) and not torch.allclose(seen[1], h)
    twin = copy.deepcopy(model)
    (hook,) = twin.discriminator.embeddings._forward_hooks.values()
    assert hook.__self__ is twin
    assert torch.equal(twin.discriminate(h, ids, mask), first)


def test_condition_before_projector_uses_the_pooled_cls(paths):
    model = build(paths, condition_before_projector=True)
    model.train()
    batch = collate(model)
    seen = []
    original = model.discriminate
    model.discriminate = lambda h, *args, **kwargs: (seen.append(h), original(h, *args, **kwargs))[1]
    model(**batch)
    pooled = model.encode(batch["input_ids"][:, 0], batch["attention_mask"][:, 0])
    assert seen[0].shape == pooled.shape and not torch.allclose(seen[0], model.projector(pooled))


# ---------------------------------------------------------------------------------------------- auxiliary networks
def test_discriminator_equals_encoder_at_step_zero_and_generator_is_frozen(paths):
    model = build(paths)
    encoder, discriminator = model.encoder.state_dict(), model.discriminator.state_dict()
    assert encoder.keys() == discriminator.keys()
    assert all(torch.equal(encoder[k], discriminator[k]) for k in encoder)
    reference = AutoModel.from_pretrained(str(paths.encoder)).state_dict()
    assert all(torch.equal(encoder[k], v) for k, v in reference.items() if not k.startswith("pooler."))
    pretrained = AutoModelForMaskedLM.from_pretrained(str(paths.generator)).state_dict()
    assert all(torch.equal(model.generator.state_dict()[k], v) for k, v in pretrained.items())
    model.train()
    assert not model.generator.training and model.discriminator.training
    assert not any(p.requires_grad for p in model.generator.parameters())


@pytest.mark.parametrize("generator_dropout", [False, True])
def test_generator_mode_follows_generator_dropout(paths, generator_dropout):
    """Paper: a fixed generator in eval mode. Official code (``--fidelity official_code``): the generator is a
    submodule, so ``model.train()`` turns its dropout on for the no-grad prediction. Frozen either way."""
    model = build(paths, generator_dropout=generator_dropout, sample_generator=False)
    batch = collate(model)
    before = {k: v.clone() for k, v in model.generator.state_dict().items()}
    model.train()
    assert model.generator.training is generator_dropout
    inputs, mask = batch["rtd_input_ids"], batch["rtd_attention_mask"]
    first, second = (model.generator(input_ids=inputs, attention_mask=mask).logits for _ in range(2))
    assert torch.equal(first, second) is not generator_dropout  # dropout draws new masks in training mode only
    out = model(**batch)
    out.loss.backward()
    assert all(p.grad is None and not p.requires_grad for p in model.generator.parameters())
    assert all(torch.equal(before[k], v) for k, v in model.generator.state_dict().items())
    model.eval()
    assert not model.generator.training


def test_vocabulary_mismatch_is_refused(paths, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    words = list(dict.fromkeys(WORDS))
    (other / "vocab.txt").write_text("\n".join(SPECIAL + words[::-1]) + "\n")  # same words, other ids
    tokenizer = BertTokenizerFast(vocab=str(other / "vocab.txt"), do_lower_case=True)
    AutoModelForMaskedLM.from_config(tiny_config("distilbert", vocab_size=len(tokenizer))).save_pretrained(other)
    tokenizer.save_pretrained(other)
    with pytest.raises(VocabularyMismatchError, match="map to another id"):
        build_model("diffcse", str(paths.encoder), generator_name=str(other))

    bigger = tmp_path / "bigger"
    bigger.mkdir()
    (bigger / "vocab.txt").write_text("\n".join(SPECIAL + words + ["zebra"]) + "\n")
    tokenizer = BertTokenizerFast(vocab=str(bigger / "vocab.txt"), do_lower_case=True)
    AutoModelForMaskedLM.from_config(tiny_config("distilbert", vocab_size=len(tokenizer))).save_pretrained(bigger)
    tokenizer.save_pretrained(bigger)
    with pytest.raises(VocabularyMismatchError, match="vocab_size"):
        build_model("diffcse", str(paths.encoder), generator_name=str(bigger))


# ---------------------------------------------------------------------------------------------- ablations
@pytest.mark.parametrize("config", [
    {"rtd_edit": "insert"}, {"rtd_edit": "delete"}, {"use_contrastive_loss": False},
    {"rtd_all_views": True, "mask_style": "bert", "generator_all_positions": True, "sample_generator": False,
     "rtd_include_padding": True, "rtd_condition_site": "embeddings_output"},  # the released code's choices
    {"off_dropout": True, "dcl_weight": 0.1},  # SimCSE++ on top of DiffCSE
    {"off_dropout": True, "rtd_all_views": True, "condition_before_projector": True},
    {"projector": "mlp"},
])
def test_every_variant_trains(paths, config):
    model = build(paths, **config)
    model.train()
    output = model(**collate(model))
    assert torch.isfinite(output.loss)
    output.loss.backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)  # DDP: no unused parameters
    assert {"contrastive_loss", "rtd_loss", "rtd_acc_replaced", "rtd_acc_kept", "rtd_acc"} <= set(output.metrics)
    if config.get("dcl_weight"):
        assert "dcl_loss" in output.metrics


@pytest.mark.parametrize("arch", ["roberta", "distilbert"])
@pytest.mark.parametrize("site", ["inputs_embeds", "embeddings_output"])
def test_other_backbones_as_encoder_and_discriminator(paths, arch, site):
    encoder = save_tiny_backbone(paths.root / f"encoder_{arch}", arch=arch, seed=0)
    torch.manual_seed(0)
    model = build_model("diffcse", str(encoder), generator_name=str(paths.generator), rtd_condition_site=site)
    model.train()
    output = model(**collate(model))
    output.loss.backward()
    assert torch.isfinite(output.loss)
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_next_sentence_corpus_and_edits(paths, tmp_path):
    corpus = tmp_path / "ordered.txt"
    corpus.write_text("the cat sits .\na dog runs .\nmusic is good .\n\nthe king reads .\nthe sun is red .\n")
    dataset = load_next_sentence_corpus(corpus)
    assert dataset["text"] == ["the cat sits .", "a dog runs .", "the king reads ."]
    assert dataset["next_text"] == ["a dog runs .", "music is good .", "the sun is red ."]
    shuffled = tmp_path / "shuffled.txt"
    shuffled.write_text("the cat sits .\na dog runs .\n")
    with pytest.raises(ValueError, match="ordered corpus"):
        load_next_sentence_corpus(shuffled)
    model = build(paths, rtd_source="next")
    batch = collate(model, rows=[dict(r) for r in dataset])
    tokenizer = tiny_tokenizer(paths.root / "tok")
    assert batch["rtd_original_ids"][0, :6].tolist() == tokenizer("a dog runs .")["input_ids"]
    model.train()
    assert torch.isfinite(model(**batch).loss)


def test_run_diffcse_reads_an_ordered_corpus_as_the_other_corpora_are_read(paths, tmp_path, capsys):
    """``--rtd_source next`` read its corpus outside the corpus checks: a Latin-1 byte stopped the run with a
    UnicodeDecodeError traceback, a shuffled corpus with a ValueError traceback, and the summary said "corpus: 3
    training rows" without the file or the dropped last sentences. Now the same one-line errors (exit 1) and the same
    summary line as every corpus."""
    from tests.cli import in_process

    ordered = tmp_path / "ordered.txt"
    # a BOM, and a line separator inside a sentence (str.splitlines() made it two sentences: 4 rows)
    ordered.write_text("\ufeffthe cat sits .\na dog runs .\nmusic is\u2028good .\n\nthe king reads .\n"
                       "the sun is red .\n", encoding="utf-8")

    def run(corpus: Path, name: str):
        return in_process(run_diffcse.main, [
            "--model_name_or_path", str(paths.encoder), "--generator_name", str(paths.generator), "--train_file",
            str(corpus), "--rtd_source", "next", "--max_steps", "1", "--eval_strategy", "no", "--output_dir",
            str(tmp_path / name), *FAST_TRAINING_ARGS, "--per_device_train_batch_size", "2"], capsys,
            prog="run_diffcse.py")

    result = run(ordered, "ordered")
    assert result.code == 0, result.err
    assert (f"corpus: 3 rows of {ordered} (skipped 2 last sentences of a document, which have no next sentence)"
            in result.out)
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("caf\xe9 au lait .\na dog .\n\nthe sun .\nthe moon .\n".encode("latin-1"))
    shuffled = tmp_path / "shuffled.txt"
    shuffled.write_text("the cat sits .\na dog runs .\n")
    for corpus, message in ((latin1, f"{latin1}, line 1: byte 0xe9 at byte offset 3"),
                            (shuffled, f"{shuffled}: source='next' needs an ordered corpus")):
        refused = run(corpus, corpus.stem)
        assert refused.code == 1 and "Traceback" not in refused.err, refused.err
        assert f"run_diffcse.py: error: {message}" in refused.err, refused.err


def test_task_profiles_and_flags():
    from command_line.arguments import DataArguments, ModelArguments, parse_args
    from command_line.diffcse_arguments import DiffCSEArguments, DiffCSETrainingArguments, expand_argv
    from trainers.methods import resolve_settings

    types = (ModelArguments, DataArguments, DiffCSEArguments, DiffCSETrainingArguments)

    def parse(*argv):
        *_, diffcse, training = parse_args(types, expand_argv(["--output_dir", "x", *argv]))
        return resolve_settings("diffcse", diffcse.explicit_settings()), training

    settings, training = parse()
    assert (training.learning_rate, settings.get("lambda_weight", 0.005), settings.get("masking_ratio", 0.30)) == (
        7e-6, 0.005, 0.30)  # Table 12 = the declared defaults
    assert training.num_train_epochs == 2 and training.per_device_train_batch_size == 64 and training.eval_steps == 125
    assert settings["projector"] == "batchnorm" and settings["generator_name"] == "distilbert-base-uncased"
    settings, training = parse("--task_profile", "transfer", "--masking_ratio", "0.2")
    assert (training.learning_rate, settings["lambda_weight"], settings["masking_ratio"]) == (2e-6, 0.05, 0.2)
    settings, _ = parse("--batchnorm", "false", "--fidelity", "official_code")
    assert settings["projector"] == "mlp" and settings["sample_generator"] is False
    assert settings["rtd_all_views"] is True and settings["off_dropout_form"] == "code"
    assert settings["generator_dropout"] is True  # the released code's generator runs in training mode
    settings, _ = parse("--fidelity", "paper")
    assert settings["generator_dropout"] is False
    settings, _ = parse("--off_dropout", "true", "--dcl_weight", "0.1")
    assert settings["off_dropout"] is True and settings["dcl_weight"] == 0.1
    with pytest.raises(UsageError, match="contradicts"):
        parse("--batchnorm", "false", "--projector", "batchnorm")


# ---------------------------------------------------------------------------------------------- end to end
def test_a_few_training_steps_and_an_encoder_only_export(paths, tmp_path):
    out = tmp_path / "run"
    run_diffcse.main(["--model_name_or_path", str(paths.encoder), "--generator_name", str(paths.generator),
                      "--train_file", str(tiny_corpus(tmp_path / "corpus.txt", n=32)), "--max_seq_length", "16",
                      "--eval_strategy", "no", "--save_strategy", "no", "--load_best_model_at_end", "false",
                      "--max_steps", "2", "--output_dir", str(out), *FAST_TRAINING_ARGS])
    state = json.loads((out / "run_arguments.json").read_text())
    assert state["DiffCSEArguments"]["generator_name"] == str(paths.generator)
    # the command line as given and the settings it resolved to (copied into results JSONs: eval/provenance.py)
    assert state["argv"][:2] == ["--model_name_or_path", str(paths.encoder)]
    assert state["settings"]["generator_name"] == str(paths.generator) and state["settings"]["fidelity"] is None
    assert state["settings"]["sample_generator"] is True  # the declared default, without a preset
    exported = load_file(str(out / "export" / "hf" / "model.safetensors"))
    plain = AutoModel.from_pretrained(str(paths.encoder)).state_dict()
    assert set(exported) <= set(plain)  # nothing but the backbone's own tensors
    assert not any(k.startswith(("generator", "discriminator", "rtd_head", "projector")) for k in exported)
    assert (out / "export" / "sentence-transformers" / "modules.json").is_file()


def test_training_with_dev_evaluation_keeps_and_reloads_the_best_checkpoint(paths, tmp_path, sts_fixture_dir):
    metrics = run_diffcse.main(["--model_name_or_path", str(paths.encoder), "--generator_name", str(paths.generator),
                                "--train_file", str(tiny_corpus(tmp_path / "corpus.txt", n=32)),
                                "--senteval_dir", str(sts_fixture_dir), "--max_steps", "4", "--eval_steps", "2",
                                "--learning_rate", "1e-3", "--output_dir", str(tmp_path / "run"), *FAST_TRAINING_ARGS])
    best = load_contrastive_model(metrics["best_model_checkpoint"])
    assert isinstance(best, DiffCSEModel) and metrics["best_stsb_spearman"] == pytest.approx(
        max(e["eval_stsb_spearman"] for e in json.loads((Path(metrics["best_model_checkpoint"]) /
                                                         "trainer_state.json").read_text())["log_history"]
            if "eval_stsb_spearman" in e))
    pretrained = AutoModelForMaskedLM.from_pretrained(str(paths.generator)).state_dict()
    assert all(torch.equal(best.generator.state_dict()[k], v) for k, v in pretrained.items())  # never trained


def test_checkpoint_round_trip_and_export_of_the_trained_encoder(paths, tmp_path):
    model = build(paths)
    model.train()
    output = model(**collate(model))
    output.loss.backward()
    with torch.no_grad():
        for p in model.encoder.parameters():
            p.add_(0.01)  # the encoder now differs from the discriminator and from the pretrained weights
    model.save_pretrained(tmp_path / "checkpoint")
    loaded = load_contrastive_model(tmp_path / "checkpoint")
    assert isinstance(loaded, DiffCSEModel)
    saved = model.state_dict()
    assert all(torch.equal(saved[k], v) for k, v in loaded.state_dict().items())  # generator included
    tokenizer = tiny_tokenizer(paths.root / "tok")
    export_model(model, tokenizer, tmp_path / "export")
    exported = AutoModel.from_pretrained(str(tmp_path / "export" / "hf")).state_dict()
    encoder = model.encoder.state_dict()
    assert all(torch.equal(exported[k], encoder[k]) for k in encoder)
    assert not torch.equal(exported["embeddings.word_embeddings.weight"],
                           model.discriminator.state_dict()["embeddings.word_embeddings.weight"])


# ---------------------------------------------------------------------------------------------- DDP metrics
def test_rtd_accuracies_are_global_batch_values_under_ddp(tmp_path):
    import torch.multiprocessing as mp

    from tests.workers.diffcse_statistics import statistics_case, worker

    mp.spawn(worker, args=(2, str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    reference = {k: v.item() for k, v in rtd_statistics(*statistics_case()).items()}
    for rank in range(2):
        got = torch.load(tmp_path / f"rank{rank}.pt")
        assert got == pytest.approx(reference, abs=1e-6), rank
