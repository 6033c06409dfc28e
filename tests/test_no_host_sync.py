"""No host-device synchronisation in a training step of any method (Developers' guide: "no host-device syncs in
the step").

On CPU nothing blocks, but the operations that would block on a GPU are visible at dispatch: reading a tensor's
value on the host (``aten::_local_scalar_dense``: ``.item()``, ``bool(t)``, ``if t.any():``), data-dependent shapes
(``aten::nonzero``, ``aten::masked_select``, ``aten::unique*``) and boolean-mask indexing (``t[mask]``,
``t[mask] = v``, which run ``nonzero`` inside the kernel). A dispatch mode records them during the forward, the
backward and the per-optimizer-step hook (ESimCSE's EMA and queue); every method must record none. The recorder
itself is checked to catch each kind.
"""
from __future__ import annotations

import inspect

import pytest
import torch
from transformers import AutoModelForMaskedLM, AutoTokenizer


from models.masks import PLAIN_BIDIRECTIONAL_MODEL_TYPES
from tests.tiny import tiny_config, tiny_tokenizer
from trainers.host_reads import HostReadRecorder
from trainers.methods import build_collator, build_model

ROWS = [{"text": "the cat sits on the big red chair"}, {"text": "a dog runs in the park"},
        {"text": "music is good"}, {"text": "the old king reads a new book in the house"}]


class HostSyncRecorder(HostReadRecorder):
    """The step graph's recorder (:class:`trainers.host_reads.HostReadRecorder`), its reads by operation."""

    @property
    def syncs(self) -> list[str]:
        return [read.operation for read in self.reads]


@pytest.mark.parametrize("snippet, expected", [
    (lambda x: x.sum().item(), "aten::_local_scalar_dense"),
    (lambda x: bool((x > 0).any()), "aten::_local_scalar_dense"),
    (lambda x: x[x > 0], "aten::index with a boolean mask"),
    (lambda x: x.masked_fill(x > 0, 0.0), None),
    (lambda x: torch.where(x > 0, x, 0.0).sum(), None),
])
def test_the_recorder_catches_each_kind_of_sync(snippet, expected):
    recorder = HostSyncRecorder()
    with recorder:
        snippet(torch.randn(5, 3))
    assert recorder.syncs == ([expected] if expected else [])


def test_the_recorder_names_the_line_that_read_and_counts_copies_off_the_device():
    """Each read names the line outside torch that made it (the warning of a step graph that is not captured), and a
    copy out of a device that is not the host counts (the meta device stands in for a GPU: the copy itself fails)."""
    recorder = HostSyncRecorder()
    with recorder:
        torch.equal(torch.ones(2), torch.ones(2))
        line = inspect.currentframe().f_lineno - 1
        with pytest.raises(NotImplementedError):
            torch.empty(3, device="meta").to("cpu")
        torch.ones(3).to("cpu", copy=True)  # host to host: no read
    assert [str(read) for read in recorder.reads] == [
        f"aten::equal at tests/test_no_host_sync.py:{line} in "
        "test_the_recorder_names_the_line_that_read_and_counts_copies_off_the_device",
        "aten::_to_copy at tests/test_no_host_sync.py:"
        f"{line + 3} in test_the_recorder_names_the_line_that_read_and_counts_copies_off_the_device"]


@pytest.fixture(scope="module")
def generator_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("generator")
    tokenizer = tiny_tokenizer(directory)
    torch.manual_seed(1)
    AutoModelForMaskedLM.from_config(tiny_config("distilbert", vocab_size=len(tokenizer))).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


CASES = {
    "simcse": ("simcse", {}),
    "simcse_batchnorm_projector": ("simcse", {"projector": "batchnorm"}),
    "esimcse": ("esimcse", {"queue_size": 6}),
    "simcse_pp": ("simcse_pp", {}),
    "simcse_pp_paper_forms": ("simcse_pp", {"off_dropout_form": "paper", "dcl_form": "paper"}),
    "s_simcse": ("s_simcse", {}),
    "s_simcse_per_pass": ("s_simcse", {"sentence_wise_dropout": False}),
    "diffcse": ("diffcse", {}),
    "promptbert": ("promptbert", {}),
    # a positive template 3 tokens longer: the one template pass pads the first template's rows (a masked pass)
    "promptbert_unequal_templates": ("promptbert", {
        "prompt_template_positive": '*cls*_This_sentence_:_"*sent_0*"_means_in_one_word*mask*.*sep+*'}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_training_step_has_no_host_sync(case, backbone, generator_dir, torch_single_thread):
    method, config = CASES[case]
    config = {k: v for k, v in config.items() if v is not None}
    if method == "diffcse":
        config["generator_name"] = str(generator_dir)
    torch.manual_seed(0)
    model = build_model(method, str(backbone), **config).train()
    batch = build_collator(model, AutoTokenizer.from_pretrained(str(backbone)), 16)(ROWS)
    for step in range(2):  # the second step runs with a non-empty queue (ESimCSE)
        recorder = HostSyncRecorder()
        with recorder:
            output = model(**batch)
            output.loss.backward()
            model.on_optimizer_step()
        assert recorder.syncs == [], f"{case}, step {step}: {recorder.syncs}"


# ------------------------------------------------------------------------------- the pieces that remove the syncs
@pytest.mark.parametrize("arch", ["bert", "roberta", "distilbert"])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("padded", [True, False])
def test_prepared_attention_masks_give_the_same_hidden_states(arch, attn, padded, torch_single_thread):
    from transformers import AutoModel

    from models.masks import prepare_attention_mask

    torch.manual_seed(0)
    backbone = AutoModel.from_config(tiny_config(arch, vocab_size=80), attn_implementation=attn).eval()
    ids = torch.randint(5, 80, (3, 7))
    mask = torch.ones_like(ids)
    if padded:
        mask[0, 4:] = 0
        mask[2, 6:] = 0
    prepared = prepare_attention_mask(backbone, mask)
    assert prepared.dim() == 4
    expected = backbone(input_ids=ids, attention_mask=mask).last_hidden_state
    got = backbone(input_ids=ids, attention_mask=prepared).last_hidden_state
    real = mask.bool()
    torch.testing.assert_close(got[real], expected[real], atol=1e-6, rtol=1e-5)


#: Special token ids inside the tiny vocabulary of 100 for the model types whose defaults lie outside it.
TINY_SPECIAL_IDS = {"eurobert": {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "mask_token_id": 3,
                                 "num_key_value_heads": 2}}


def tiny_backbone_of(model_type: str, attn: str, **overrides) -> torch.nn.Module | None:
    """A tiny random ``model_type`` backbone (2 layers, hidden 32, vocabulary 100) with attention ``attn``; ``None``
    where the model type has no such attention implementation."""
    from transformers import AutoConfig, AutoModel

    config = AutoConfig.for_model(model_type)
    sizes = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 37,
             "vocab_size": 100, "dim": 32, "n_layers": 2, "n_heads": 2, "hidden_dim": 37, "n_embd": 32, "n_layer": 2,
             "n_head": 2, "embedding_size": 32, "true_hidden_size": 32, "intra_bottleneck_size": 32,
             "d_model": 32, "ffn_dim": 37, "attention_heads": 2, "num_layers": 2,
             "default_language": "en_XX",  # X-MOD's adapters: one language
             **TINY_SPECIAL_IDS.get(model_type, {}), **overrides}
    for name, value in sizes.items():
        if hasattr(config, name):
            setattr(config, name, value)
    torch.manual_seed(0)
    try:
        return AutoModel.from_config(config, attn_implementation=attn).eval()
    except ValueError as error:  # e.g. MPNet: no SDPA
        if "does not support an attention implementation" in str(error):
            return None
        raise


def padded_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Three rows of 12 token ids, two of them padded (7 and 3 real tokens)."""
    torch.manual_seed(1)
    ids = torch.randint(5, 90, (3, 12))
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    mask[2, 3:] = 0
    return ids, mask


@pytest.mark.parametrize("model_type", sorted(PLAIN_BIDIRECTIONAL_MODEL_TYPES))
def test_every_listed_model_type_takes_the_prepared_mask_as_its_own(model_type, torch_single_thread):
    """Each model type that gets the prepared 4D mask gives, with it, the hidden states of its own 2D-mask call,
    under each attention implementation it has: the list is checked against the modeling code it names."""
    from models.masks import prepare_attention_mask

    ids, mask = padded_batch()
    checked = []
    for attn in ("sdpa", "eager"):
        backbone = tiny_backbone_of(model_type, attn)
        if backbone is None:
            continue
        prepared = prepare_attention_mask(backbone, mask)
        assert prepared.dim() == 4, (model_type, attn)
        with torch.no_grad():
            expected = backbone(input_ids=ids, attention_mask=mask).last_hidden_state
            got = backbone(input_ids=ids, attention_mask=prepared).last_hidden_state
        real = mask.bool()
        torch.testing.assert_close(got[real], expected[real], atol=1e-6, rtol=1e-5)
        checked.append(attn)
    assert "eager" in checked


@pytest.mark.parametrize("model_type, overrides", [
    ("gpt2", {}),  # causal; its module imports create_bidirectional_mask for cross-attention
    ("xglm", {}),  # likewise
])
def test_backbones_that_attend_otherwise_keep_their_own_masks(model_type, overrides, torch_single_thread):
    """A backbone whose self-attention is not plain bidirectional (causal, or a sliding window in some layers) gets
    the 2D mask, so it builds its own masks; a bidirectional 4D mask would change its hidden states (checked here,
    so that the case stays one that matters), silently, in training, the evaluation and ``python -m eval``."""
    from transformers.masking_utils import create_bidirectional_mask

    from models.masks import prepare_attention_mask

    ids, mask = padded_batch()
    backbone = tiny_backbone_of(model_type, "eager", **overrides)
    assert prepare_attention_mask(backbone, mask) is mask
    shape_only = torch.empty((*mask.shape, 0))
    bidirectional = create_bidirectional_mask(config=backbone.config, inputs_embeds=shape_only, attention_mask=mask,
                                              allow_is_bidirectional_skip=False)
    with torch.no_grad():
        own = backbone(input_ids=ids, attention_mask=mask).last_hidden_state
        other = backbone(input_ids=ids, attention_mask=bidirectional).last_hidden_state
    assert (own - other)[mask.bool()].abs().max() > 1e-3


#: A tiny ModernBERT whose local layers' window (4) is shorter than :func:`padded_batch`'s rows (12 tokens).
MODERNBERT_LOCAL = {"local_attention": 4, "global_attn_every_n_layers": 2, "pad_token_id": 0}


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_modernbert_takes_each_layer_types_mask_prepared(attn, torch_single_thread):
    """ModernBERT (:data:`models.masks.LAYER_TYPE_MASKS`) gets the mapping of its own two masks, built without a
    host read: its hidden states are those of its 2D-mask call, which read the mask on the host twice (each mask
    function's skip check); one bidirectional 4D mask for every layer would change them (its local layers attend
    in a window), so the mapping is what matters."""
    from transformers.masking_utils import create_bidirectional_mask

    from models.masks import prepare_attention_mask

    ids, mask = padded_batch()
    backbone = tiny_backbone_of("modernbert", attn, **MODERNBERT_LOCAL)
    with HostSyncRecorder() as preparing:
        prepared = prepare_attention_mask(backbone, mask)
    assert set(prepared) == {"full_attention", "sliding_attention"} and preparing.syncs == []
    own_call, prepared_call = HostSyncRecorder(), HostSyncRecorder()
    with torch.no_grad():
        with own_call:
            own = backbone(input_ids=ids, attention_mask=mask).last_hidden_state
        with prepared_call:
            got = backbone(input_ids=ids, attention_mask=prepared).last_hidden_state
        bidirectional = create_bidirectional_mask(config=backbone.config, inputs_embeds=torch.empty((*mask.shape, 0)),
                                                  attention_mask=mask, allow_is_bidirectional_skip=False)
        other = backbone(input_ids=ids, attention_mask=bidirectional).last_hidden_state
    real = mask.bool()
    torch.testing.assert_close(got[real], own[real], atol=1e-6, rtol=1e-5)
    assert (other - own)[real].abs().max() > 1e-3
    assert own_call.syncs == ["aten::_local_scalar_dense"] * 2 and prepared_call.syncs == []


@pytest.mark.parametrize("model_type, attn, masked, overrides", [
    ("deberta-v2", "eager", True, {}), ("deberta", "eager", True, {}), ("roformer", "eager", True, {}),
    ("megatron-bert", "eager", True, {}), ("rembert", "eager", True, {}), ("layoutlm", "eager", True, {}),
    ("layoutlm", "sdpa", True, {}),
    ("convbert", "eager", False, {}),  # its mask function would read the all-ones 2D mask instead
    ("gpt2", "sdpa", False, {"pad_token_id": 0}),  # a causal mask function (and packed-sequence detection)
    ("bert", "sdpa", False, {}), ("bert", "eager", False, {})])  # no padding check (but packing, 5.25 on)
def test_the_template_pass_gives_a_backbone_that_checks_for_padding_the_mask_it_builds(model_type, attn, masked,
                                                                                        overrides,
                                                                                        torch_single_thread):
    """PromptBERT's template rows have no padding and go in without a mask (the code's ``get_delta``), but a backbone
    whose forward then looks for the pad token on the host (``models.masks.checks_padding_without_mask``:
    transformers' ``warn_if_padding_and_no_attention_mask``) and takes an all-ones mask without a read
    (``models.masks.masks_rows_without_padding``) gets that mask: the very states of its mask-less call, which read
    the host (at ``modeling_utils.py``), with no read at all. So does BERT from transformers 5.25, whose mask-less
    call would attend within the prefix and within the suffix only (packed sequences inferred from the position ids'
    jump, ``models.masks.infers_packing_without_mask``): its masked pass gives the whole rows' states (the code's,
    whose transformers 4 made an all-ones mask), no read. Any other backbone keeps the mask-less call: BERT before
    5.25 (no check), ConvBERT (its mask function would read the 2D mask), GPT-2 (its causal mask)."""
    from models.masks import infers_packing_without_mask, masks_rows_without_padding, takes_prepared_mask
    from models.promptbert import TemplateIds, templates_mask_states, template_rows

    backbone = tiny_backbone_of(model_type, attn, **overrides)
    templates = [TemplateIds((2, 11, 12), (13, 4, 14, 3), 1), TemplateIds((2, 21, 22), (23, 4, 24, 3), 1)]
    rows = [5, 4]
    ids, positions, _ = (torch.cat(parts) for parts in zip(*(
        template_rows(t, torch.tensor(t.prefix + t.suffix), r, len(t)) for t, r in zip(templates, rows))))
    own_call, template_pass = HostSyncRecorder(), HostSyncRecorder()
    with torch.no_grad():
        with own_call:
            own = backbone(input_ids=ids, position_ids=positions).last_hidden_state
        with template_pass:
            states = templates_mask_states(backbone, templates, rows)
        whole_rows = backbone(input_ids=ids, position_ids=positions, attention_mask=torch.ones_like(ids))
    packs = model_type == "bert" and infers_packing_without_mask(backbone)  # it passes its position ids (5.25 on)
    mask_state = slice(None), 3 + 1  # each row's [MASK]: prefix 3, mask index 1
    if not packs:
        assert torch.equal(torch.cat(states), own[mask_state])
    else:  # the mask-less call attends within the prefix and within the suffix only: the masked pass does not
        assert not torch.allclose(own[mask_state], whole_rows.last_hidden_state[mask_state], atol=1e-4)
    torch.testing.assert_close(torch.cat(states), whole_rows.last_hidden_state[mask_state], rtol=1e-6, atol=1e-6)
    assert masks_rows_without_padding(backbone) == (masked or packs)
    # compiled (the fast path's): decided by the model it wraps where the graph would infer packing (a mask-less
    # call there takes the packed mask unconditionally), never for the padding check (skipped while traced)
    may_pack = takes_prepared_mask(backbone) and infers_packing_without_mask(backbone)
    assert may_pack >= packs
    assert masks_rows_without_padding(torch.compile(backbone)) == may_pack
    padding_check = [read for read in own_call.reads if read.where.startswith("transformers/modeling_utils.py:")]
    assert len(padding_check) == (model_type != "bert")
    if masked or packs:
        assert template_pass.reads == []  # nor the mask functions' skip check (the mask is prepared)
    else:  # the same call
        assert [r.operation for r in template_pass.reads] == [r.operation for r in own_call.reads]


@pytest.mark.parametrize("model_type", sorted(PLAIN_BIDIRECTIONAL_MODEL_TYPES))
def test_every_template_row_attends_over_all_its_tokens(model_type, torch_single_thread):
    """PromptBERT's template pass gives, on every model type that takes a prepared mask, each row's [MASK] state of
    the row's whole-row attention (its call with an all-ones mask: the official code's mask-less call in
    transformers 4), whatever the installed transformers infers from the position ids of a mask-less call (from
    5.25, packed sequences: the jump after the prefix). From 5.25 every listed type gets the prepared all-ones mask
    (``models.masks.infers_packing_without_mask`` holds for each), so the pass makes no mask-less call here: a later
    transformers that changes what a mask-less call attends to does not fail here; one under which the prepared mask
    attends otherwise than the type's own all-ones-mask call does. The states follow n where the backbone follows
    the position ids (``template_states_follow_length``): every type but RoFormer."""
    from models.promptbert import TemplateIds, template_states_follow_length, templates_mask_states, template_rows

    templates = [TemplateIds((2, 11, 12), (13, 4, 14, 3), 1), TemplateIds((2, 21, 22), (23, 4, 24, 3), 1)]
    rows = [5, 4]
    ids, positions, _ = (torch.cat(parts) for parts in zip(*(
        template_rows(t, torch.tensor(t.prefix + t.suffix), r, len(t)) for t, r in zip(templates, rows))))
    checked = []
    for attn in ("sdpa", "eager"):
        backbone = tiny_backbone_of(model_type, attn)
        if backbone is None:
            continue
        with torch.no_grad():
            states = torch.cat(templates_mask_states(backbone, templates, rows))
            whole_rows = backbone(input_ids=ids, position_ids=positions, attention_mask=torch.ones_like(ids))
        torch.testing.assert_close(states, whole_rows.last_hidden_state[:, 3 + 1], rtol=1e-6, atol=1e-6)
        follows = template_states_follow_length(backbone, templates[0])
        assert follows == (model_type != "roformer")  # RoFormer's rotary positions: tests/test_promptbert.py warns
        if follows:  # n moves the state: the position ids are used (RoFormer's states: exactly equal; rotary tiny
            # models of long wavelengths, GTE's and Jina v3's, move by ~7e-5)
            assert (states[1:5] - states[:1]).abs().max() > 1e-5
        checked.append(attn)
    assert "eager" in checked


def test_a_compiled_backbone_builds_the_mask_in_its_graph(torch_single_thread, many_compiled_models):
    """The fast path's compiled backbone takes the 2D mask (no ~30 eager operations before each call); its graph
    builds the same 4D mask: the hidden states equal the eager backbone's on the prepared mask."""
    from transformers import AutoModel

    from models.masks import prepare_attention_mask

    torch.manual_seed(0)
    backbone = AutoModel.from_config(tiny_config("bert", vocab_size=80), attn_implementation="sdpa").eval()
    compiled = torch.compile(backbone, backend="aot_eager", dynamic=False)
    ids = torch.randint(5, 80, (3, 7))
    mask = torch.ones_like(ids)
    mask[0, 4:] = 0
    mask[2, 6:] = 0
    assert prepare_attention_mask(compiled, mask) is mask
    expected = backbone(input_ids=ids, attention_mask=prepare_attention_mask(backbone, mask)).last_hidden_state
    got = compiled(input_ids=ids, attention_mask=prepare_attention_mask(compiled, mask)).last_hidden_state
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-5)


def test_backbones_without_mask_functions_keep_the_2d_mask():
    from models.masks import prepare_attention_mask

    mask = torch.ones(2, 5, dtype=torch.long)
    assert prepare_attention_mask(torch.nn.Linear(2, 2), mask) is mask


def test_the_queue_reads_its_buffers_again_after_a_checkpoint_load():
    from models.esimcse import EmbeddingQueue

    source, resumed = EmbeddingQueue(5, 3), EmbeddingQueue(5, 3)
    for step in range(3):
        source.enqueue(torch.full((2, 3), float(step)))
    resumed.host_state()  # cached (0, 0) before the load
    resumed.load_state_dict(source.state_dict())
    assert resumed.host_state() == source.host_state() == (1, 5)
    torch.testing.assert_close(resumed.entries(), source.entries())
    resumed.enqueue(torch.full((1, 3), 9.0))
    source.enqueue(torch.full((1, 3), 9.0))
    torch.testing.assert_close(resumed.entries(), source.entries())
    assert int(resumed.ptr) == 2 and int(resumed.count) == 5
