"""Encoder families beyond BERT train through run_unsup.py and their exports score as their checkpoints: ELECTRA
(factorised embeddings), DeBERTa-v2 (relative positions, eager attention), MPNet (positions from pad + 1) and
ModernBERT (local attention in every other layer). What cannot work is refused in one line instead
(tests/test_unusable_backbones.py). Tiny random models built in code (:func:`tests.tiny.tiny_config`)."""
from __future__ import annotations

import logging

import pytest
import torch

import run_unsup
from eval.loading import load_encoder
from eval.sts import evaluate_sts
from tests.tiny import FAST_TRAINING_ARGS, save_tiny_backbone, tiny_corpus, token_batch


@pytest.mark.parametrize("arch", ["electra", "deberta-v2", "mpnet", "modernbert"])
def test_an_encoder_family_trains_and_its_export_scores_as_its_checkpoint(arch, tmp_path, sts_fixture_dir):
    backbone = save_tiny_backbone(tmp_path / arch, arch=arch)
    out = tmp_path / "run"
    run_unsup.main(["--model_name_or_path", str(backbone), "--train_file", str(tiny_corpus(tmp_path / "corpus.txt")),
                    "--max_steps", "2", "--learning_rate", "1e-2", "--eval_strategy", "no", "--save_strategy",
                    "steps", "--save_steps", "2", "--load_best_model_at_end", "false", "--output_dir", str(out),
                    *FAST_TRAINING_ARGS])
    checkpoint = evaluate_sts(load_encoder(str(out / "checkpoint-2"), device="cpu"), sts_fixture_dir)
    backbone_scores = evaluate_sts(load_encoder(str(backbone), "cls_before_pooler", device="cpu"), sts_fixture_dir)
    assert checkpoint != pytest.approx(backbone_scores, abs=1e-6)  # the two steps moved the embeddings
    exports = ((out / "export" / "hf", "cls_before_pooler"), (out / "export" / "sentence-transformers", None))
    for path, pooler in exports:
        exported = evaluate_sts(load_encoder(str(path), pooler, device="cpu"), sts_fixture_dir)
        assert exported == pytest.approx(checkpoint, abs=1e-3), (path, arch)


@pytest.mark.parametrize("site", ["inputs_embeds", "embeddings_output"])
@pytest.mark.parametrize("arch", ["deberta-v2", "mpnet", "modernbert", "ibert"])
def test_diffcse_trains_on_an_encoder_family(arch, site, tmp_path):
    """Its discriminator (a copy of the backbone) takes h at position 0 at either site; ELECTRA and ALBERT, whose
    token embeddings are narrower than h, are refused (tests/test_unusable_backbones.py). I-BERT's embeddings return
    ``(embeddings, scaling factor)`` and its table has no ``embedding_dim``: its runs stopped with a traceback."""
    import run_diffcse
    from tests.tiny import save_tiny_generator

    out = tmp_path / "run"
    metrics = run_diffcse.main([
        "--model_name_or_path", str(save_tiny_backbone(tmp_path / arch, arch=arch)), "--generator_name",
        str(save_tiny_generator(tmp_path / "generator")), "--train_file", str(tiny_corpus(tmp_path / "corpus.txt")),
        "--max_steps", "2", "--eval_strategy", "no", "--rtd_condition_site", site, "--output_dir", str(out),
        *FAST_TRAINING_ARGS])
    assert metrics["train_loss"] > 0 and (out / "export" / "hf" / "model.safetensors").is_file()


# ------------------------------------------------------------------------ per-row dropout on the attention probabilities
#: Backbones whose dropout sees the batch's rows first (XLNet's does not: refused, tests/test_unusable_backbones.py).
ROWS_FIRST_ARCHS = ["bert", "roberta", "distilbert", "albert", "electra", "deberta-v2", "mpnet", "modernbert", "gpt2"]


def tiny_rows_first_backbone(arch: str, folder):
    from tests.test_unusable_backbones import tiny_gpt2

    return tiny_gpt2(folder) if arch == "gpt2" else save_tiny_backbone(folder, arch=arch)


@pytest.mark.parametrize("arch", ROWS_FIRST_ARCHS)
def test_dropout_off_rows_see_no_dropout_on_every_backbone(arch, tmp_path):
    """SimCSE++'s dropout-off negatives ride in the views' pass with every dropout off, the attention probabilities'
    included: their embeddings are the eval-mode encoding. transformers hands the attention function only the rate
    of that dropout, which ALBERT keeps under ``attention_dropout``, GPT-2 under ``attn_dropout`` and ModernBERT as a
    bare float: on those three it was drawn from the stream at that rate for every row, the off rows included."""
    from trainers.methods import build_model

    model = build_model("simcse_pp", str(tiny_rows_first_backbone(arch, tmp_path / arch)), pooler_type="avg")
    ids, mask = token_batch(same_views=True)
    embeddings = model.train().embed_views(ids, mask)
    with torch.no_grad():
        clean = model.eval().projector(model.encode(ids[:, 0], mask[:, 0]))
    torch.testing.assert_close(embeddings.off_dropout, clean, atol=1e-6, rtol=1e-5)
    # dropout on for the views' rows (ModernBERT's final norm and the average over tokens keep it near 1e-4)
    assert (embeddings.views[:, 0] - clean).abs().max() > 1e-5


@pytest.mark.parametrize("arch", ROWS_FIRST_ARCHS)
def test_row_seeded_masks_do_not_depend_on_the_padded_width_on_every_backbone(arch, tmp_path):
    """Each process pads its own share of the global batch to its own width: row-seeded masks key every element by
    its coordinates, so the same sentences padded to 9 and to 13 positions get the same training-mode embeddings.
    On ALBERT and ModernBERT the attention-probability dropout came from the stream (see above): two processes x 4
    sentences trained 2e-4 (ALBERT) and 3e-5 (ModernBERT) away from one process x 8 after 3 SGD steps, 1e-8 on
    BERT."""
    import random

    from trainers.keyed_dropout import keyed_step
    from trainers.methods import build_model

    model = build_model("simcse", str(tiny_rows_first_backbone(arch, tmp_path / arch)), pooler_type="avg",
                        dropout_masks="row_seeded").train()
    ids, mask = token_batch(same_views=True)
    pad = torch.zeros(*ids.shape[:2], 4, dtype=ids.dtype)
    encodings = []
    for batch_ids, batch_mask in ((ids, mask), (torch.cat([ids, pad], -1), torch.cat([mask, pad], -1))):
        random.seed(3)  # the step's seed
        with keyed_step(model, ids.size(0)):
            encodings.append(model.embed_views(batch_ids, batch_mask).views)
    torch.testing.assert_close(encodings[1], encodings[0], atol=1e-6, rtol=1e-5)
    with torch.no_grad():
        clean = model.eval().projector(model.encode(ids[:, 0], mask[:, 0]))
    assert (encodings[0][:, 0] - clean).abs().max() > 1e-5  # dropout on


def test_row_seeded_masks_on_albert_s_shared_layer_say_that_its_depths_share_masks(tmp_path, capsys):
    """ALBERT applies one layer at every depth, its dropout modules with it, and a row-seeded mask is keyed by its
    module, row and element: every depth draws the same masks for a sentence (stream masks draw new ones per call).
    Through run_unsup.py the run says so, in its log and summary, with the way out it names; stream-mask ALBERT runs,
    uncached and cached, and a row-seeded BERT run say nothing."""
    from tests.cli import in_process

    corpus = tiny_corpus(tmp_path / "corpus.txt")

    def run(arch: str, *flags: str):
        result = in_process(run_unsup.main, [
            "--model_name_or_path", str(save_tiny_backbone(tmp_path / arch, arch=arch)), "--train_file", str(corpus),
            "--max_steps", "1", "--eval_strategy", "no", "--output_dir", str(tmp_path / f"{arch}{len(flags)}"),
            *FAST_TRAINING_ARGS, *flags], capsys)
        assert result.code == 0, result.err
        return result.out + result.err

    shared = run("albert", "--dropout_masks", "row_seeded")
    summary = shared.split("run summary ===", 1)[1]
    assert ("warning: AlbertModel (the encoder) calls 2 of its dropout modules 2 times in a pass "
            "(encoder.albert_layer_groups.0.albert_layers.0.attention.attention_dropout: 2 calls;") in summary
    advice = summary.split("row-seeded masks (--dropout_masks row_seeded, --cache_chunk_size's default)", 1)[1]
    assert advice.startswith(
        " key a mask by its module, row and element: each call draws the same masks for a sentence, where the papers' "
        "stream masks draw new ones. --dropout_masks stream draws them anew, with --cache_chunk_size too (each chunk's "
        "masks replayed from its RNG state).")
    assert "draws the same masks" not in (run("albert") + run("albert", "--cache_chunk_size", "4", "--dropout_masks",
                                                               "stream") + run("bert", "--dropout_masks", "row_seeded"))


def test_an_attention_dropout_per_row_dropout_cannot_find_stops_instead_of_drawing_stream_masks():
    """An attention module under a per-row plan (a :class:`RowDropout` among its children) that asks the attention
    function for dropout but keeps no dropout module under the names the plan knows would be noised from the stream
    at one rate for every row: that stops the pass, naming the module. Asked for no dropout (eval mode, a rate of
    0) it runs; a module without a plan (a network that shares the config's attention function) gets plain
    dropout."""
    from torch import nn

    from models.dropout import RowDropout, RowDropoutController, row_dropout_attention

    class UnknownAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.output_dropout = RowDropout(0.1, RowDropoutController(masks="row_seeded"))

    module, query = UnknownAttention(), torch.randn(2, 2, 3, 4)
    with pytest.raises(RuntimeError, match="UnknownAttention asks for attention dropout 0.1 but keeps no dropout"):
        row_dropout_attention(module.train(), query, query, query, None, dropout=0.1)
    output, _ = row_dropout_attention(module.eval(), query, query, query, None, dropout=0.0)
    assert output.shape == (2, 3, 2, 4)
    torch.manual_seed(0)
    plain, _ = row_dropout_attention(nn.Module().train(), query, query, query, None, dropout=0.5)
    torch.manual_seed(0)
    expected = torch.nn.functional.dropout(torch.softmax(query @ query.transpose(2, 3) * 0.5, -1), 0.5) @ query
    torch.testing.assert_close(plain, expected.transpose(1, 2))


@pytest.mark.parametrize("arch, switched", [("deberta-v2", False), ("mpnet", False), ("bert", True)])
def test_per_row_dropout_asks_only_an_attention_interface_backbone_to_switch_its_attention(arch, switched, tmp_path):
    """Per-row dropout routes attention through its own function where the backbone takes transformers'
    AttentionInterface (BERT); DeBERTa-v2 and MPNet keep their own attention, whose probabilities' dropout is a
    module it replaced, so they are not asked to switch: asked, transformers logged to the user, at every run, that
    the model 'does not support setting its attention implementation dynamically'. Through run_unsup.py."""
    from transformers import AutoModel
    from transformers.utils import logging as transformers_logging

    from models.dropout import ROW_DROPOUT_ATTENTION, RowDropoutController, install_row_dropout

    class Messages(logging.Handler):  # what transformers' loggers write
        def __init__(self) -> None:
            super().__init__(logging.WARNING)
            self.messages: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.messages.append(record.getMessage())

    messages = Messages()
    backbone = save_tiny_backbone(tmp_path / arch, arch=arch)
    logging.getLogger("transformers").addHandler(messages)
    verbosity = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_warning()  # whatever an earlier test in this process left
    try:
        metrics = run_unsup.main([
            "--method", "s_simcse", "--dropout_masks", "row_seeded", "--model_name_or_path", str(backbone),
            "--train_file", str(tiny_corpus(tmp_path / "corpus.txt")), "--max_steps", "2", "--eval_strategy", "no",
            "--save_strategy", "no", "--output_dir", str(tmp_path / "run"), *FAST_TRAINING_ARGS])
    finally:
        logging.getLogger("transformers").removeHandler(messages)
        transformers_logging.set_verbosity(verbosity)
    assert metrics["train_loss"] > 0
    assert not [m for m in messages.messages if "does not support setting its attention implementation" in m]
    encoder = AutoModel.from_pretrained(str(backbone))
    assert install_row_dropout(encoder, RowDropoutController(masks="row_seeded")) > 0
    assert (encoder.config._attn_implementation == ROW_DROPOUT_ATTENTION) == switched
