"""Backbones that cannot work are refused before anything trains, through the real entry points (issue 33, item 2
and the backbone half of item 4): a folder without tokenizer files or with another model's (ids past the embedding
table), a causal backbone under a position-0 pooler, a
tokenizer that puts no [CLS] token at position 0 (XLNet's, T5's) under one, an encoder-decoder model (T5), a
backbone whose forward cannot run under bf16 autocast (DeBERTa v1), DiffCSE on factorised embeddings (ALBERT), a
``--max_seq_length`` (plus PromptBERT's template) past the position table, a truncated ``model.safetensors``,
``--gradient_checkpointing`` on a backbone transformers has none for (ALBERT, MPNet, XLNet), per-row dropout on a
backbone that holds its rows in another dimension than the first (XLNet) or draws dropout outside its modules
(Longformer, Bloom), a backbone that is not a text encoder (Bros, CANINE) or takes one input length only
(Nyströmformer). One line, a non-zero exit, no traceback;
docs/errors.md lists the messages."""
from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import torch
from transformers import (AutoModel, AutoModelForMaskedLM, BloomConfig, BrosConfig, CanineConfig, DebertaConfig,
                          GPT2Config, LayoutLMConfig, LongformerConfig, MarkupLMConfig, NystromformerConfig, OPTConfig,
                          T5Config, T5Tokenizer, TrainingArguments, XLNetConfig, XLNetTokenizer)

import eval.cli
import run_diffcse
import run_unsup
from tests.cli import in_process
from tests.test_user_errors import base_args
from eval.backbone import cls_position_problem
from tests.tiny import (SPECIAL, WORDS, save_tiny_backbone, save_tiny_generator, tiny_config, tiny_corpus,
                        tiny_tokenizer, zero_last_layer_norm)


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    return tiny_corpus(tmp_path / "corpus.txt")


def without_tokenizer(folder: Path, model) -> Path:
    """``model`` saved alone: config.json and model.safetensors, no tokenizer files."""
    model.save_pretrained(folder)
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors"]
    return folder


def tiny_gpt2(folder: Path) -> Path:
    """A tiny random GPT-2 (causal) backbone with the tiny word-level tokenizer."""
    tokenizer = tiny_tokenizer(folder)
    config = GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=2, n_head=2, n_positions=64,
                        bos_token_id=2, eos_token_id=3, pad_token_id=0)
    AutoModel.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def tiny_xlnet(folder: Path) -> Path:
    """A tiny random XLNet backbone with a word-level XLNet tokenizer, which ends a sentence with ``<sep> <cls>``;
    its config's ``max_position_embeddings`` is -1 (relative positions: no table)."""
    special = ["<unk>", "<s>", "</s>", "<cls>", "<sep>", "<pad>", "<mask>"]
    tokenizer = XLNetTokenizer(vocab=[(token, 0.0) for token in special] + [
        ("\u2581" + word, -1.0) for word in dict.fromkeys(WORDS)])
    config = XLNetConfig(vocab_size=len(tokenizer), d_model=32, n_layer=2, n_head=2, d_inner=37, pad_token_id=5)
    assert config.max_position_embeddings == -1
    AutoModel.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def tiny_t5(folder: Path) -> Path:
    """A tiny random T5 (encoder-decoder) with a word-level T5 tokenizer."""
    tokenizer = T5Tokenizer(vocab=[("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)] + [
        ("\u2581" + word, -1.0) for word in dict.fromkeys(WORDS)], extra_ids=0)
    config = T5Config(vocab_size=len(tokenizer), d_model=32, num_layers=2, num_heads=2, d_ff=37, d_kv=16,
                      decoder_start_token_id=0)
    AutoModel.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def truncated_weights(backbone: Path, folder: Path) -> tuple[Path, int]:
    """A copy of ``backbone`` whose model.safetensors lost its second half; returns the file and its full size."""
    shutil.copytree(backbone, folder)
    weights = folder / "model.safetensors"
    size = weights.stat().st_size
    with weights.open("r+b") as handle:
        handle.truncate(size // 2)
    return weights, size


EVAL = "error: "  # python -m eval's prefix


def one_line_error(result, prefix: str = "run_unsup.py: error: ") -> str:
    """The one error line (transformers' loading progress bars may come before it), and no traceback."""
    errors = [line for line in result.err.splitlines() if "error: " in line]
    assert len(errors) == 1 and errors[0].startswith(prefix) and "Traceback" not in result.err, result.err
    return errors[0]


# ------------------------------------------------------------------------------------------ tokenizer files
def test_a_folder_without_tokenizer_files_is_refused(corpus, tmp_path, capsys, sts_fixture_dir):
    folder = without_tokenizer(tmp_path / "no_tokenizer", AutoModel.from_config(tiny_config("bert", vocab_size=130)))
    out = tmp_path / "out"
    result = in_process(run_unsup.main, base_args(folder, corpus, out) + ["--eval_strategy", "no"], capsys)
    assert result.code == 1
    assert (f"--model_name_or_path {folder}: its tokenizer knows only its 5 special tokens" in one_line_error(result)
            and "so every word would become [UNK]: the folder has no tokenizer files" in result.err)
    assert not out.exists()

    evaluation = in_process(eval.cli.main, ["--model_name_or_path", str(folder), "--pooler", "avg", "--mode", "dev",
                                            "--senteval_dir", str(sts_fixture_dir)], capsys, prog="python -m eval")
    assert evaluation.code == 1 and "its tokenizer knows only its 5 special tokens" in one_line_error(evaluation, EVAL)


def test_a_tokenizer_with_ids_past_the_embedding_table_is_refused(backbone, corpus, tmp_path, capsys,
                                                                  sts_fixture_dir):
    """Another model's tokenizer files in the folder: 100 more tokens than the tiny BERT's 83 embedding rows. Before,
    the first step stopped with "IndexError: index out of range in self" (on a GPU: a device-side assert)."""
    from transformers import BertTokenizerFast

    folder = Path(shutil.copytree(backbone, tmp_path / "mismatched"))
    for stale in [*folder.glob("tokenizer*"), folder / "vocab.txt", folder / "special_tokens_map.json"]:
        stale.unlink(missing_ok=True)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(SPECIAL + [f"filler{i}" for i in range(100)] + list(dict.fromkeys(WORDS))) + "\n")
    BertTokenizerFast(vocab=str(vocab), do_lower_case=True).save_pretrained(folder)
    expected = (f"--model_name_or_path {folder}: its tokenizer has 183 tokens (ids up to 182) but the model's token "
                "embeddings hold 83 rows (vocab_size 83), so the first sentence with a token past them would stop the "
                "run with an index error (on a GPU, a device-side assert): the folder's tokenizer files are not this "
                "model's. Copy the tokenizer the model was trained with into it")
    out = tmp_path / "out"
    result = in_process(run_unsup.main, base_args(folder, corpus, out) + ["--eval_strategy", "no"], capsys)
    assert result.code == 1 and one_line_error(result) == "run_unsup.py: error: " + expected
    assert not out.exists()
    evaluation = in_process(eval.cli.main, ["--model_name_or_path", str(folder), "--pooler", "avg", "--mode", "dev",
                                            "--senteval_dir", str(sts_fixture_dir)], capsys, prog="python -m eval")
    assert evaluation.code == 1 and one_line_error(evaluation, EVAL) == "error: " + expected


def test_a_generator_without_tokenizer_files_is_refused(backbone, corpus, tmp_path, capsys):
    generator = AutoModelForMaskedLM.from_config(tiny_config("distilbert", vocab_size=130))
    folder = without_tokenizer(tmp_path / "generator", generator)
    result = in_process(run_diffcse.main, base_args(backbone, corpus, tmp_path / "out") + [
        "--eval_strategy", "no", "--generator_name", str(folder)], capsys, prog="run_diffcse.py")
    assert result.code == 1
    assert (f"--generator_name {folder}: its tokenizer knows only its 5 special tokens"
            in one_line_error(result, "run_diffcse.py: error: "))


# ------------------------------------------------------------------------------------------ position 0
#: backbone -> (its builder, why position 0 is not the sentence in training's message and in python -m eval's).
POSITION_ZERO_CASES = {
    # causal: position 0 sees only the first token
    "gpt2": (tiny_gpt2,
             "{path} (GPT2Model): its position 0 sees only the first token (a causal backbone, as decoder-only "
             "ones are), so --pooler_type {pooler} would give every sentence that starts with the same token the "
             "same vector. Pass --pooler_type avg (the mean over the sentence's tokens).",
             "{path} (GPT2Model): its position 0 sees only the first token (a causal model, as decoder-only ones "
             "are), so --pooler cls_before_pooler gives every sentence that starts with the same token the same "
             "vector; use --pooler avg (the mean over the sentence's tokens)"),
    # XLNet's tokenizer puts <cls> last: before this check such a run trained the first word's state silently (and
    # before, the position check read XLNet's -1 table as a limit, so even --pooler_type avg was refused)
    "xlnet": (tiny_xlnet,
              "{path}: its tokenizer (XLNetTokenizer) puts its <cls> token at position 4, not 0 ('the cat sat' -> "
              "\u2581the \u2581cat <unk> <sep> <cls>); --pooler_type {pooler} reads position 0, so it would train the "
              "first word's state as the sentence's embedding. Pass --pooler_type avg (the mean over the sentence's "
              "tokens).",
              "{path}: its tokenizer (XLNetTokenizer) puts its <cls> token at position 4, not 0 ('the cat sat' -> "
              "\u2581the \u2581cat <unk> <sep> <cls>); --pooler cls_before_pooler reads position 0, so every sentence "
              "would be scored by its first word's state; use --pooler avg"),
}


@pytest.mark.parametrize("name", list(POSITION_ZERO_CASES))
def test_a_position_zero_pooler_is_refused_where_position_zero_is_no_summary_and_avg_trains(name, corpus, tmp_path,
                                                                                           capsys):
    build, expected, _ = POSITION_ZERO_CASES[name]
    path = build(tmp_path / name)
    out = tmp_path / "out"
    args = base_args(path, corpus, out) + ["--eval_strategy", "no"]
    for pooler in ("cls", "cls_before_pooler"):
        refused = in_process(run_unsup.main, args + ["--pooler_type", pooler], capsys)
        assert refused.code == 2
        assert one_line_error(refused) == ("run_unsup.py: error: --model_name_or_path "
                                           + expected.format(path=path, pooler=pooler))
        assert not (out / "export").exists()
    trained = in_process(run_unsup.main, args + ["--pooler_type", "avg"], capsys)
    assert trained.code == 0, trained.err
    assert (out / "export" / "hf" / "model.safetensors").is_file()


def test_diffcse_is_refused_where_position_zero_holds_a_word_whatever_it_pools(corpus, tmp_path, capsys):
    """DiffCSE's discriminator takes h in place of the [CLS] token at position 0: under XLNet's tokenizer, which puts
    <cls> last, h overwrote the sentence's first word, with --pooler_type avg too, silently. Refused in one line
    (the generator here a masked LM sharing XLNet's tokenizer, as the vocabulary check asks)."""
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    backbone = tiny_xlnet(tmp_path / "xlnet")
    tokenizer = AutoTokenizer.from_pretrained(str(backbone))
    generator = tmp_path / "generator"
    BertForMaskedLM(BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                               intermediate_size=37, pad_token_id=5)).save_pretrained(generator)
    tokenizer.save_pretrained(generator)
    out = tmp_path / "out"
    refused = in_process(run_diffcse.main, base_args(backbone, corpus, out) + [
        "--generator_name", str(generator), "--pooler_type", "avg", "--eval_strategy", "no"], capsys,
        prog="run_diffcse.py")
    assert refused.code == 2, refused.err
    assert one_line_error(refused, "run_diffcse.py: error: ") == (
        f"run_diffcse.py: error: --model_name_or_path {backbone}: its tokenizer (XLNetTokenizer) puts its <cls> token "
        "at position 4, not 0 ('the cat sat' -> \u2581the \u2581cat <unk> <sep> <cls>), and DiffCSE's discriminator "
        "takes the sentence embedding h in place of the [CLS] token at position 0 (Sec. 3), so h would replace the "
        "sentence's first word. Pass a backbone whose tokenizer puts its [CLS] token first (BERT, RoBERTa, "
        "DistilBERT, MiniLM, ...).")
    assert not out.exists()


@pytest.mark.parametrize("name", list(POSITION_ZERO_CASES))
def test_eval_refuses_a_position_zero_vector_where_position_zero_is_no_summary(name, tmp_path, capsys,
                                                                              sts_fixture_dir):
    build, _, expected = POSITION_ZERO_CASES[name]
    path = build(tmp_path / name)
    result = in_process(eval.cli.main, ["--model_name_or_path", str(path), "--pooler", "cls_before_pooler",
                                        "--mode", "dev", "--senteval_dir", str(sts_fixture_dir)], capsys,
                        prog="python -m eval")
    assert result.code == 1
    assert one_line_error(result, EVAL) == "error: " + expected.format(path=path)


def degenerate_bert(folder: Path) -> Path:
    """The tiny BERT whose states ignore every token (:func:`tests.tiny.zero_last_layer_norm`; tests/test_run_report.py
    trains one to a nan dev score)."""
    return zero_last_layer_norm(save_tiny_backbone(folder))


@pytest.mark.parametrize("build, causal", [(tiny_gpt2, True), (save_tiny_backbone, False), (degenerate_bert, False)],
                         ids=["gpt2", "bert", "degenerate_bert"])
def test_a_backbone_is_causal_where_position_zero_sees_its_first_token_only(build, causal, tmp_path):
    """GPT-2's position 0 sees its own token and no later one. A backbone whose states ignore every token (the
    degenerate BERT) was called causal too, and its position-0 poolers refused as such; it is not: its scores are
    nan whatever the pooler, which the evaluations explain."""
    from eval.backbone import position_zero_sees_only_itself

    encoder = AutoModel.from_pretrained(build(tmp_path / "backbone"))
    assert position_zero_sees_only_itself(encoder) is causal


def test_a_degenerate_backbone_is_not_refused_as_causal(corpus, tmp_path, capsys):
    """The degenerate BERT with ``--pooler_type cls`` trains (it was refused as "a causal (decoder-only) backbone")."""
    path = degenerate_bert(tmp_path / "degenerate")
    out = tmp_path / "out"
    trained = in_process(run_unsup.main, base_args(path, corpus, out) + ["--eval_strategy", "no", "--pooler_type",
                                                                         "cls"], capsys)
    assert trained.code == 0, trained.err
    assert "causal" not in trained.err and (out / "export" / "hf" / "model.safetensors").is_file()


def test_cls_position_problem_names_a_tokenizer_with_no_cls_and_passes_one_that_starts_with_it(tmp_path):
    t5 = T5Tokenizer(vocab=[("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("\u2581the", -1.0)], extra_ids=0)
    assert cls_position_problem(t5) == ("its tokenizer (T5Tokenizer) has no [CLS] token ('the cat sat' -> "
                                        "\u2581the <unk> <unk> </s>)")
    bert = tiny_tokenizer(tmp_path / "bert")
    assert cls_position_problem(bert) is None
    bert.cls_token = "[SEP]"  # a [CLS] the tokenizer never adds at position 0
    assert cls_position_problem(bert) == ("its tokenizer (BertTokenizer) puts its [SEP] token at position 4, "
                                          "not 0 ('the cat sat' -> [CLS] the cat [UNK] [SEP])")


# ------------------------------------------------------------------------------------------ encoder-decoder models
ENCODER_DECODER = ("is an encoder-decoder model (model_type t5): AutoModel builds its encoder and its decoder, whose "
                   "forward needs decoder inputs or returns the decoder's states, while a sentence embedding here is "
                   "an encoder's. Pass an encoder-only backbone (BERT, RoBERTa, DistilBERT, MiniLM, ...)")


def test_an_encoder_decoder_backbone_is_refused_before_its_weights_load(corpus, tmp_path, capsys, sts_fixture_dir):
    """Before, a T5 under --pooler_type avg loaded, then stopped in its first step with a traceback from the
    decoder ("You must specify exactly one of input_ids or inputs_embeds"); python -m eval likewise."""
    t5 = tiny_t5(tmp_path / "t5")
    out = tmp_path / "out"
    result = in_process(run_unsup.main, base_args(t5, corpus, out) + ["--eval_strategy", "no", "--pooler_type", "avg"],
                        capsys)
    assert result.code == 2
    assert one_line_error(result) == f"run_unsup.py: error: --model_name_or_path {t5} {ENCODER_DECODER}."
    assert not out.exists()
    evaluation = in_process(eval.cli.main, ["--model_name_or_path", str(t5), "--pooler", "avg", "--mode", "dev",
                                            "--senteval_dir", str(sts_fixture_dir)], capsys, prog="python -m eval")
    assert evaluation.code == 1
    assert one_line_error(evaluation, EVAL) == f"error: {t5} (T5Model) {ENCODER_DECODER}"


# ------------------------------------------------------------------------------------------ not a text encoder
def tiny_non_text_backbone(arch: str, folder: Path) -> Path:
    """A tiny random Bros (a layout model: its forward asks for boxes), CANINE (characters hashed into several
    tables: no token-embedding table), LayoutLM (boxes default to zeros) or MarkupLM (XPaths default to none) with
    the tiny tokenizer."""
    tokenizer = tiny_tokenizer(folder)
    config_class = {"bros": BrosConfig, "canine": CanineConfig, "layoutlm": LayoutLMConfig,
                    "markuplm": MarkupLMConfig}[arch]
    config = config_class(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                          intermediate_size=37, max_position_embeddings=70, pad_token_id=0)
    AutoModel.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.mark.parametrize("arch, model, problem", [
    ("bros", "BrosModel", "stops on token ids and an attention mask, the only inputs this repo gives a backbone: "
                          "\"You have to specify bbox\""),
    ("canine", "CanineModel", "has no token-embedding table (transformers' get_input_embeddings is not implemented "
                              "for it)"),
])
def test_a_backbone_that_is_not_a_text_encoder_is_refused_by_training_and_eval(arch, model, problem, corpus, tmp_path,
                                                                               capsys, sts_fixture_dir):
    """Both stopped the first probe (training) or batch (python -m eval) with a traceback from transformers."""
    path = tiny_non_text_backbone(arch, tmp_path / arch)
    out = tmp_path / "out"
    advice = ("Use a text encoder with a token-embedding table whose forward reads token ids alone (BERT, RoBERTa, "
              "ModernBERT...).")
    result = in_process(run_unsup.main, base_args(path, corpus, out) + ["--eval_strategy", "no"], capsys)
    assert result.code == 2
    assert one_line_error(result) == f"run_unsup.py: error: --model_name_or_path {path} ({model}) {problem}. {advice}"
    assert not (out / "export").exists()
    evaluation = in_process(eval.cli.main, ["--model_name_or_path", str(path), "--pooler", "avg", "--mode", "dev",
                                            "--senteval_dir", str(sts_fixture_dir)], capsys, prog="python -m eval")
    assert evaluation.code == 1
    assert one_line_error(evaluation, EVAL) == f"error: {path} ({model}) {problem}. {advice}"


def tiny_nystromformer(folder: Path, **config) -> Path:
    """A tiny random Nystromformer (``config``: its landmarks and segment length) with the tiny tokenizer."""
    tokenizer = tiny_tokenizer(folder)
    AutoModel.from_config(NystromformerConfig(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37,
        max_position_embeddings=140, pad_token_id=0, **config)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_a_backbone_that_takes_one_input_length_is_refused_naming_the_setting_that_trains_it(corpus, tmp_path, capsys,
                                                                                             sts_fixture_dir):
    """Nystromformer with fewer landmarks than its segment length (a config choice: transformers' default sets both to
    64) reshapes every input into its landmark segments: refused by training and python -m eval naming
    ``num_landmarks`` (it was refused as "no text encoder", quoting the reshape's error); with ``--config_overrides
    num_landmarks=128`` (exact softmax attention, any length) it trains, and its export, whose config says so,
    scores."""
    path = tiny_nystromformer(tmp_path / "nystromformer", segment_means_seq_len=128, num_landmarks=16)
    problem = ("(NystromformerModel) takes inputs of exactly segment_means_seq_len=128 tokens (its Nystrom attention "
               "averages them into num_landmarks=16 segments), and this repo does not pad its batches to that length; "
               "with num_landmarks=128 it runs the exact softmax attention that the Nystrom attention approximates, "
               "on inputs of any length.")
    args = base_args(path, corpus, tmp_path / "out") + ["--eval_strategy", "no", "--pooler_type", "avg"]
    refused = in_process(run_unsup.main, args, capsys)
    assert refused.code == 2
    assert one_line_error(refused) == (f"run_unsup.py: error: --model_name_or_path {path} {problem} Pass "
                                       f"--config_overrides num_landmarks=128 (recorded with the run and in its "
                                       f"export's config.json).")
    evaluation = in_process(eval.cli.main, ["--model_name_or_path", str(path), "--pooler", "avg", "--mode", "dev",
                                            "--senteval_dir", str(sts_fixture_dir)], capsys, prog="python -m eval")
    assert evaluation.code == 1
    assert one_line_error(evaluation, EVAL) == (f"error: {path} {problem} Set num_landmarks=128 in its config.json "
                                                f"(run_unsup.py --config_overrides num_landmarks=128 trains and exports "
                                                f"it so).")
    trained = in_process(run_unsup.main, args + ["--config_overrides", "num_landmarks=128"], capsys)
    assert trained.code == 0, trained.err[-2000:]
    export = tmp_path / "out" / "export" / "hf"
    assert json.loads((export / "config.json").read_text())["num_landmarks"] == 128
    scored = in_process(eval.cli.main, ["--model_name_or_path", str(export), "--mode", "dev",
                                        "--senteval_dir", str(sts_fixture_dir)], capsys, prog="python -m eval")
    assert scored.code == 0 and "STSB" in scored.out, scored.err[-2000:]


def test_layoutlm_trains_with_its_unused_pooler_dropped_and_its_export_scores(corpus, tmp_path, capsys,
                                                                             sts_fixture_dir):
    """LayoutLM's forward calls its pooler unconditionally: with the unused pooler set to ``None`` (BERT's forward
    skips it) its runs stopped with "'NoneType' object is not callable". The slot now holds a
    :class:`models.base.DroppedPooler` (no parameters, no output); ALBERT's bare pooler Linear still becomes
    ``None`` (its forward applies tanh to the pooler's output when there is a pooler)."""
    from models.base import DroppedPooler
    from trainers.methods import build_model

    path = tiny_non_text_backbone("layoutlm", tmp_path / "layoutlm")
    assert isinstance(build_model("simcse", str(path)).encoder.pooler, DroppedPooler)
    assert build_model("simcse", str(save_tiny_backbone(tmp_path / "albert", arch="albert"))).encoder.pooler is None
    out = tmp_path / "out"
    result = in_process(run_unsup.main, base_args(path, corpus, out) + ["--eval_strategy", "no"], capsys)
    assert result.code == 0, result.err
    evaluation = in_process(eval.cli.main, ["--model_name_or_path", str(out / "export" / "hf"), "--mode", "dev",
                                            "--senteval_dir", str(sts_fixture_dir)], capsys, prog="python -m eval")
    assert evaluation.code == 0, evaluation.err


def test_a_backbone_sentence_transformers_cannot_load_trains_and_exports_its_hf_folder(corpus, tmp_path, capsys,
                                                                                       caplog):
    """sentence-transformers loads MarkupLM's processor for its model type, which asks for a feature extractor
    file a text export has none of: the run stopped with a traceback after training, at the export. It now exports
    hf/, says why there is no sentence-transformers folder, and exits 0."""
    path = tiny_non_text_backbone("markuplm", tmp_path / "markuplm")
    out = tmp_path / "out"
    result = in_process(run_unsup.main, base_args(path, corpus, out) + ["--eval_strategy", "no"], capsys)
    assert result.code == 0, result.err
    assert (out / "export" / "hf" / "model.safetensors").is_file() and not (out / "export" / "sentence-transformers"
                                                                            ).exists()
    assert (f"no sentence-transformers export: sentence-transformers cannot load {out / 'export' / 'hf'} (Can't load "
            "feature extractor for") in caplog.text


# ------------------------------------------------------------------------------------------ bf16 autocast
@pytest.fixture
def deberta_v1(tmp_path: Path) -> tuple[Path, str | None]:
    """A tiny transformers DeBERTa (v1) folder, and the first line of what its padded forward raises under bf16
    autocast on this CPU (``None`` if this transformers' DeBERTa runs in bf16): DeBERTa v1 fills masked attention
    scores with float32's minimum, which a bf16 score cannot hold. Computed here, so that the tests expect what this
    version does."""
    import torch

    from models.masks import prepare_attention_mask

    folder = tmp_path / "deberta"
    tokenizer = tiny_tokenizer(folder)
    config = DebertaConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=37, max_position_embeddings=70, pad_token_id=0)
    encoder = AutoModel.from_config(config)
    encoder.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    encoder.eval()
    try:
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            encoder(input_ids=torch.tensor([[5, 6, 7, 8, 9], [5, 6, 7, 0, 0]]),
                    attention_mask=prepare_attention_mask(encoder, torch.tensor([[1] * 5, [1, 1, 1, 0, 0]])))
        return folder, None
    except RuntimeError as error:
        return folder, str(error).splitlines()[0]


BF16_TRAINING = "--bf16 true, given or this machine's default"


@pytest.mark.parametrize("flags, asked, fixes", [
    (["--bf16", "true"], BF16_TRAINING, "--bf16 false"),
    (["--bf16", "false", "--eval_dtype", "bf16"], "--eval_dtype bf16", "--eval_dtype fp32"),
    (["--bf16", "true", "--eval_dtype", "bf16"], f"{BF16_TRAINING}; --eval_dtype bf16",
     "--bf16 false --eval_dtype fp32"),
], ids=["training", "evaluation", "both"])
def test_a_backbone_whose_forward_fails_under_bf16_is_refused_and_trains_in_fp32(flags, asked, fixes, deberta_v1,
                                                                                  corpus, tmp_path, capsys,
                                                                                  sts_fixture_dir):
    """Under bf16 autocast in training (the default on a GPU or a CPU with native bf16) its first step stopped with
    a traceback; under ``--eval_dtype bf16`` (fp32 training) its first dev evaluation did. Each is refused before
    the corpus loads, naming the flags to change; a version whose DeBERTa runs in bf16 trains instead."""
    deberta, failure = deberta_v1
    out = tmp_path / "out"
    args = base_args(deberta, corpus, out) + ["--eval_strategy", "steps", "--eval_steps", "1",
                                              "--senteval_dir", str(sts_fixture_dir)]
    result = in_process(run_unsup.main, args + flags, capsys)
    if failure is None:
        assert result.code == 0, result.err
    else:
        assert result.code == 2
        assert one_line_error(result) == (
            f"run_unsup.py: error: --model_name_or_path {deberta} (DebertaModel) cannot run under bf16 autocast "
            f"({asked}): its forward stops with \"{failure}\". Pass {fixes} (fp32).")
        assert not out.exists()
    trained = in_process(run_unsup.main, args + ["--bf16", "false", "--overwrite_output_dir", "true"], capsys)
    assert trained.code == 0, trained.err
    assert (out / "export" / "hf" / "model.safetensors").is_file()


def test_eval_refuses_bf16_for_a_backbone_whose_forward_fails_under_it_and_scores_it_in_fp32(deberta_v1, capsys,
                                                                                             sts_fixture_dir):
    """``python -m eval --eval_dtype bf16`` on it stopped at its first batch with a traceback."""
    deberta, failure = deberta_v1
    args = ["--model_name_or_path", str(deberta), "--pooler", "avg", "--mode", "dev", "--task_set", "sts",
            "--senteval_dir", str(sts_fixture_dir)]
    result = in_process(eval.cli.main, args + ["--eval_dtype", "bf16"], capsys, prog="python -m eval")
    if failure is None:
        assert result.code == 0, result.err
    else:
        assert result.code == 1
        assert one_line_error(result, EVAL) == (
            f"error: {deberta} (DebertaModel) cannot run under bf16 autocast (--eval_dtype bf16): its forward stops "
            f"with \"{failure}\". Pass --eval_dtype fp32 (the default).")
    scored = in_process(eval.cli.main, args, capsys, prog="python -m eval")
    assert scored.code == 0, scored.err


# ------------------------------------------------------------------------------------------ DiffCSE's condition
def test_diffcse_on_factorised_embeddings_is_refused(corpus, tmp_path, capsys):
    """ALBERT's token embeddings hold 16 values (embedding_size), mapped to its hidden 32 after the embeddings: h
    cannot take position 0's place there. The first step stopped on "Sizes of tensors must match" before."""
    albert = save_tiny_backbone(tmp_path / "albert", arch="albert")
    for site in ("inputs_embeds", "embeddings_output"):
        result = in_process(run_diffcse.main, base_args(albert, corpus, tmp_path / "out") + [
            "--eval_strategy", "no", "--generator_name", str(save_tiny_generator(tmp_path / "generator")),
            "--rtd_condition_site", site], capsys, prog="run_diffcse.py")
        assert result.code == 2
        assert one_line_error(result, "run_diffcse.py: error: ") == (
            "run_diffcse.py: error: DiffCSE puts the sentence embedding h (32 values, the backbone's hidden size) in "
            "place of the discriminator's position-0 token embedding, which holds 16 values in AlbertModel (its "
            "embedding_size, mapped to the hidden size after the embeddings). Pass a backbone (--model_name_or_path) "
            "whose token embeddings are as wide as its hidden states (BERT, RoBERTa, DistilBERT, MiniLM, ...)")


# ------------------------------------------------------------------------------------------ gradient checkpointing
@pytest.mark.parametrize("arch", ["albert", "mpnet", "xlnet"])
def test_gradient_checkpointing_is_refused_on_a_backbone_transformers_has_none_for(arch, corpus, tmp_path, capsys):
    """transformers 5.x gives ALBERT, MPNet and XLNet no gradient checkpointing (their class sets
    ``supports_gradient_checkpointing = False``): the Trainer's call stopped the run inside ``train()``, after the
    corpus, with "SimCSEModel is not compatible with gradient checkpointing" and a traceback."""
    path = tiny_xlnet(tmp_path / arch) if arch == "xlnet" else save_tiny_backbone(tmp_path / arch, arch=arch)
    out = tmp_path / "out"
    args = base_args(path, corpus, out) + ["--eval_strategy", "no", "--pooler_type", "avg"]
    name = {"albert": "AlbertModel", "mpnet": "MPNetModel", "xlnet": "XLNetModel"}[arch]
    # PromptBERT's own refusal (denoising with row-seeded masks) would send the user to a flag that still fails, and
    # so would XLNet's refusal of row-seeded masks (its advice keeps --gradient_checkpointing)
    runs = [(["--method", "simcse"], "--gradient_checkpointing")]
    if arch != "xlnet":  # PromptBERT refuses XLNet's tokenizer first (tests/test_promptbert.py: its framing)
        runs.append((["--method", "promptbert", "--dropout_masks", "row_seeded"], "--gradient_checkpointing"))
    if "activation_checkpointing" in {field.name for field in dataclasses.fields(TrainingArguments)}:
        runs.append((["--method", "simcse"], "--activation_checkpointing"))  # transformers' name from 5.23, as typed
    for method, flag in runs:
        result = in_process(run_unsup.main, args + method + [flag, "true"], capsys)
        assert result.code == 2
        assert one_line_error(result) == (
            f"run_unsup.py: error: {flag}: transformers has none for {name} (the encoder), whose "
            "class sets supports_gradient_checkpointing = False, so the run would stop at its first step. Use "
            "--cache_chunk_size N to bound the backbone's memory instead (docs/cached_training.md).")
        assert not (out / "export").exists()


# ------------------------------------------------------------------------------------------ per-row dropout
def test_rows_first_problem_names_where_a_backbone_holds_its_rows(tmp_path):
    """BERT's dropout modules see [rows, ...]; XLNet's see [length, rows, hidden] (and [length, length, rows,
    heads] in its attention)."""
    from eval.backbone import rows_first_problem
    from models.dropout import RowDropout, RowDropoutController, install_row_dropout

    for path in (save_tiny_backbone(tmp_path / "bert"), tiny_xlnet(tmp_path / "xlnet")):
        encoder = AutoModel.from_pretrained(path)
        install_row_dropout(encoder, RowDropoutController(masks="row_seeded"))
        problem = rows_first_problem(encoder, RowDropout)
        if path.name == "bert":
            assert problem is None
        else:
            assert problem == "holds [3, 2, 32] at dropout for 2 rows of 3 tokens, its rows in dimension 1"


@pytest.mark.parametrize("flags, feature", [
    (["--method", "s_simcse"], "S-SimCSE's sampled rates (--dropout_dist uniform)"),
    (["--method", "simcse_pp"], "SimCSE++'s dropout-off negatives (--off_dropout)"),
    (["--cache_chunk_size", "4"], "row-seeded masks (--dropout_masks row_seeded, --cache_chunk_size's default)"),
])
def test_per_row_dropout_on_a_length_first_backbone_is_refused_and_stream_masks_train(flags, feature, corpus, tmp_path,
                                                                                      capsys):
    """XLNet holds its states [length, batch, hidden]: the first step stopped with "row dropout planned for 16 rows
    but a dropout call has 12" and a traceback, after the corpus and the first evaluation."""
    path = tiny_xlnet(tmp_path / "xlnet")
    assert refused_per_row_dropout(path, flags, corpus, tmp_path, capsys) == (
        f"run_unsup.py: error: --model_name_or_path {path}: XLNetModel holds [3, 2, 32] at dropout for 2 rows of 3 "
        f"tokens, its rows in dimension 1, so the per-row dropout of {feature} cannot tell its rows apart. Train it "
        "without per-row dropout (stream masks: --dropout_masks stream, with --cache_chunk_size too, whose chunks then "
        "replay their RNG states; --method simcse, esimcse or promptbert), or use a backbone that holds the batch "
        "first (BERT, RoBERTa, MPNet...).")


def refused_per_row_dropout(path: Path, flags: list[str], corpus: Path, tmp_path: Path, capsys) -> str:
    """The one-line refusal of a run of ``path`` with ``flags`` (per-row dropout), which exports nothing, after
    checking what it advises: stream-mask SimCSE trains the same backbone (``--pooler_type avg``), uncached and
    cached."""
    out = tmp_path / "out"
    args = base_args(path, corpus, out) + ["--eval_strategy", "no", "--pooler_type", "avg"]
    refused = in_process(run_unsup.main, args + flags, capsys)
    assert refused.code == 2, refused.err
    assert not (out / "export").exists()
    for stream in ([], ["--cache_chunk_size", "4", "--dropout_masks", "stream", "--overwrite_output_dir", "true"]):
        trained = in_process(run_unsup.main, args + stream, capsys)  # SimCSE with stream masks
        assert trained.code == 0, trained.err
    return one_line_error(refused)


def tiny_functional_dropout_backbone(arch: str, folder: Path) -> Path:
    """A tiny random Longformer (attention windows of 8), Bloom or OPT with the tiny tokenizer: each draws dropout
    with torch's functional dropout at a rate it holds as a number (Longformer's attention probabilities, Bloom's
    residual branches beside its dropout modules; OPT's every dropout, without a dropout module)."""
    tokenizer = tiny_tokenizer(folder)
    if arch == "longformer":
        config = LongformerConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=37, max_position_embeddings=70, attention_window=[8, 8],
                                  pad_token_id=0)
    elif arch == "bloom":
        config = BloomConfig(vocab_size=len(tokenizer), hidden_size=32, n_layer=2, n_head=2, attention_dropout=0.1,
                             hidden_dropout=0.1, pad_token_id=0, bos_token_id=2, eos_token_id=3)
    else:
        config = OPTConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                           ffn_dim=37, max_position_embeddings=70, word_embed_proj_dim=32, dropout=0.1,
                           attention_dropout=0.1, pad_token_id=0, bos_token_id=2, eos_token_id=3)
    AutoModel.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def opt_draws_layerdrop_only_when_set() -> bool:
    """Whether OPT's decoder draws its LayerDrop coin (``torch.rand([])`` per layer in training) only at a layerdrop
    above 0, as transformers 5.25 does; 5.20 draws it at every layer whatever the rate, and the probe reports it."""
    import inspect

    from transformers.models.opt.modeling_opt import OPTDecoder

    return "self.layerdrop > 0" in inspect.getsource(OPTDecoder.forward)


@pytest.mark.parametrize("arch, flags, where", [
    ("longformer", ["--cache_chunk_size", "4"],
     "LongformerModel draws dropout outside its dropout modules, at encoder.layer.0.attention.self (bernoulli_); "
     "encoder.layer.1.attention.self (bernoulli_)"),
    ("bloom", ["--method", "simcse_pp"],
     "BloomModel draws dropout outside its dropout modules, at h.0.self_attention (bernoulli_); h.0.mlp (bernoulli_); "
     "h.1.self_attention (bernoulli_) and 1 more modules"),
    ("opt", ["--method", "s_simcse"],
     "OPTModel draws dropout outside its dropout modules, at decoder.layers.0.self_attn (bernoulli_); "
     "decoder.layers.0 (bernoulli_); decoder.layers.1.self_attn (bernoulli_) and 1 more modules"),
])
def test_per_row_dropout_on_a_backbone_that_draws_dropout_outside_its_modules_is_refused(arch, flags, where, corpus,
                                                                                         tmp_path, capsys):
    """Longformer's attention probabilities, Bloom's residual branches and all of OPT's dropout go through torch's
    functional dropout, which no module replacement reaches: they trained with those draws from the stream, at one
    rate for every row and without a word (SimCSE++'s dropout-off rows 8e-4 from their eval-mode encoding on Bloom,
    2.4e-2 on OPT; row-seeded masks 5e-4 apart between a pass of 4 sentences and two of 2 on Longformer). OPT, with
    no dropout module at all, was not even probed. Refused in one line; stream-mask SimCSE trains them."""
    path = tiny_functional_dropout_backbone(arch, tmp_path / arch)
    if arch == "opt" and not opt_draws_layerdrop_only_when_set():  # transformers 5.20: the coin at layerdrop 0 too
        where = ("OPTModel draws dropout outside its dropout modules, at decoder (rand); decoder.layers.0.self_attn "
                 "(bernoulli_); decoder.layers.0 (bernoulli_) and 2 more modules")
    feature = {"longformer": "row-seeded masks (--dropout_masks row_seeded, --cache_chunk_size's default)",
               "bloom": "SimCSE++'s dropout-off negatives (--off_dropout)",
               "opt": "S-SimCSE's sampled rates (--dropout_dist uniform)"}[arch]
    assert refused_per_row_dropout(path, flags, corpus, tmp_path, capsys) == (
        f"run_unsup.py: error: --model_name_or_path {path}: {where} (torch's functional dropout at a rate it holds as "
        f"a number), so the per-row dropout of {feature} cannot plan it: those rows would get other masks and rates "
        "than planned. Train it without per-row dropout (stream masks: --dropout_masks stream, with --cache_chunk_size "
        "too, whose chunks then replay their RNG states; --method simcse, esimcse or promptbert), or use a backbone "
        "whose dropout is all modules (BERT, RoBERTa, BigBird...).")


def test_draws_outside_finds_no_draw_on_a_backbone_whose_dropout_is_all_modules(tmp_path):
    """BERT under per-row dropout: every draw is its row dropout's (identities for the probe), none outside; with
    plain ``nn.Dropout`` modules the probe sees each of them draw (the probe is not blind)."""
    from eval.backbone import draws_outside
    from models.dropout import RowDropout, RowDropoutController, install_row_dropout

    encoder = AutoModel.from_pretrained(save_tiny_backbone(tmp_path / "bert"))
    assert sorted(draws_outside(encoder, RowDropout)) == [  # attention.self: SDPA's dropout at its rate
        "embeddings.dropout", "encoder.layer.0.attention.output.dropout", "encoder.layer.0.attention.self",
        "encoder.layer.0.output.dropout", "encoder.layer.1.attention.output.dropout", "encoder.layer.1.attention.self",
        "encoder.layer.1.output.dropout"]
    install_row_dropout(encoder, RowDropoutController(masks="row_seeded"))
    modes, state = [module.training for module in encoder.modules()], torch.random.get_rng_state()
    assert draws_outside(encoder, RowDropout) == {}
    assert [module.training for module in encoder.modules()] == modes  # the probe's modes undone
    assert torch.equal(torch.random.get_rng_state(), state)


# ------------------------------------------------------------------------------------------ position table
@pytest.mark.parametrize("arch, method, max_seq_length, positions, why", [
    ("bert", "simcse", 71, 70, "max_position_embeddings 70"),
    ("roberta", "simcse", 70, 69, "max_position_embeddings 70 minus the 1 its position ids skip (roberta counts "
                                  "positions from pad_token_id + 1 = 1)"),
    ("bert", "promptbert", 61, 70, "max_position_embeddings 70"),  # 61 fits; + 10 template tokens does not
])
def test_max_seq_length_past_the_position_table_is_refused(arch, method, max_seq_length, positions, why, corpus,
                                                           tmp_path, capsys):
    """The corpus' lines are short, so before the check these runs trained and exited 0: the crash waited for a
    line of more than ``positions`` tokens. PromptBERT's views are the sentence's ``--max_seq_length`` tokens plus
    its template's."""
    from data.prompt_templates import tokenize_template
    from models.config import SETTINGS

    folder = save_tiny_backbone(tmp_path / arch, arch=arch) if arch != "bert" else save_tiny_backbone(tmp_path / arch)
    result = in_process(run_unsup.main, base_args(folder, corpus, tmp_path / "out") + [
        "--eval_strategy", "no", "--method", method, "--max_seq_length", str(max_seq_length)], capsys)
    tokenizer = tiny_tokenizer(tmp_path / "tokenizer")
    added = max(len(t.prefix) + len(t.suffix) for t in (tokenize_template(SETTINGS[name].default, tokenizer)
                for name in ("prompt_template", "prompt_template_positive"))) if method == "promptbert" else 0
    longest = (f"--max_seq_length {max_seq_length} + {added} tokens of PromptBERT's template = "
               f"{max_seq_length + added} positions" if added else f"--max_seq_length {max_seq_length}")
    assert result.code == 2
    assert (f"{longest} is more than --model_name_or_path {folder} reads: {positions} positions ({why}); a line "
            f"that long would stop the run with a tensor size error. Pass --max_seq_length {positions - added} or "
            "less" in one_line_error(result))
    assert not (tmp_path / "out").exists()


def test_an_esimcse_positive_past_the_position_table_is_refused(corpus, tmp_path, capsys):
    """ESimCSE's positive is the sentence with words repeated, never cut back to --max_seq_length (the released
    code): at --max_seq_length 70 on a table of 70 positions it reaches 91 tokens, and the run trained until a line
    long enough arrived, then stopped with "The size of tensor a (91) must match the size of tensor b (70)". Refused
    before training, naming the longest --max_seq_length whose positive fits and --truncate_positive; with that
    length, or the positive cut back, it trains."""
    from data.augment import LengthExtender

    folder = save_tiny_backbone(tmp_path / "bert")
    args = base_args(folder, corpus, tmp_path / "out") + ["--eval_strategy", "no", "--method", "esimcse"]
    result = in_process(run_unsup.main, args + ["--max_seq_length", "70"], capsys)
    extender = LengthExtender(tiny_tokenizer(tmp_path / "tokenizer"), dup_rate=0.32)  # the defaults: rule paper
    fits = max(length for length in range(2, 70) if extender.longest_output(length) <= 70)
    assert result.code == 2
    assert (f"--max_seq_length 70: ESimCSE's positive view (the sentence with words repeated) reaches "
            f"{extender.longest_output(70)} tokens, more than --model_name_or_path {folder} reads: 70 positions "
            f"(max_position_embeddings 70); a line that long would stop the run with a tensor size error. Pass "
            f"--max_seq_length {fits} or less, or --truncate_positive true") in one_line_error(result)
    assert not (tmp_path / "out").exists()
    for fix in (["--max_seq_length", str(fits)], ["--max_seq_length", "70", "--truncate_positive", "true"]):
        trained = in_process(run_unsup.main, args + fix + ["--overwrite_output_dir", "true"], capsys)
        assert trained.code == 0, trained.err


# ------------------------------------------------------------------------------------------ truncated weights
def test_a_truncated_backbone_is_refused_by_training_and_eval(backbone, corpus, tmp_path, capsys, sts_fixture_dir):
    weights, size = truncated_weights(backbone, tmp_path / "truncated")
    folder = weights.parent
    expected = (f"{weights} is truncated ({size // 2} bytes of {size}), so the model cannot load (an interrupted "
                "download or save?); download or save it again")
    out = tmp_path / "out"
    result = in_process(run_unsup.main, base_args(folder, corpus, out) + ["--eval_strategy", "no"], capsys)
    assert result.code == 1
    assert one_line_error(result) == f"run_unsup.py: error: --model_name_or_path {folder}: {expected}"
    assert not out.exists()

    generator = in_process(run_diffcse.main, base_args(backbone, corpus, out) + [
        "--eval_strategy", "no", "--generator_name", str(folder)], capsys, prog="run_diffcse.py")
    assert generator.code == 1 and f"--generator_name {folder}: {expected}" in one_line_error(
        generator, "run_diffcse.py: error: ")

    evaluation = in_process(eval.cli.main, ["--model_name_or_path", str(folder), "--pooler", "avg", "--mode", "dev",
                                            "--senteval_dir", str(sts_fixture_dir)], capsys, prog="python -m eval")
    assert evaluation.code == 1
    assert one_line_error(evaluation, EVAL) == f"error: could not load '{folder}': {expected}"
