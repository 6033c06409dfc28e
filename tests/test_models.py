"""The shared base: backbone-agnostic (BERT, RoBERTa, DistilBERT), poolers, one pass for both views, config
round trip, pretrained weights kept, best-practice defaults."""
import pytest
import torch
from transformers import AutoModel

from models import SupervisedSimCSEModel
from models.poolers import POOLER_TYPES, pool
from tests.tiny import save_tiny_backbone
from trainers.methods import build_model, load_contrastive_model


@pytest.fixture(scope="module")
def backbones(tmp_path_factory):
    return {arch: save_tiny_backbone(tmp_path_factory.mktemp(arch), arch) for arch in ("bert", "roberta", "distilbert")}


def batch(vocab=60, b=3, v=2, length=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (b, v, length), generator=g)
    mask = torch.ones_like(ids)
    mask[0, :, -2:] = 0
    return ids, mask


@pytest.mark.parametrize("arch", ["bert", "roberta", "distilbert"])
@pytest.mark.parametrize("pooler", POOLER_TYPES)
def test_every_backbone_and_pooler_trains(backbones, arch, pooler):
    model = build_model("simcse", str(backbones[arch]), pooler_type=pooler)
    ids, mask = batch()
    out = model(input_ids=ids, attention_mask=mask)
    assert out.embeddings.views.shape == (3, 2, 32) and torch.isfinite(out.loss)
    out.loss.backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)  # no dead parameters (DDP-safe)


def test_pretrained_weights_are_kept(backbones):
    reference = AutoModel.from_pretrained(str(backbones["bert"]))
    model = build_model("simcse", str(backbones["bert"]))
    kept = model.encoder.state_dict()
    for name, tensor in reference.state_dict().items():
        if not name.startswith("pooler."):
            assert torch.equal(kept[name], tensor), name


def test_one_backbone_pass_for_all_views(backbones):
    model = build_model("simcse", str(backbones["bert"]))
    calls = []
    model.encoder.register_forward_hook(lambda m, args, kwargs_out: calls.append(1))
    ids, mask = batch()
    model(input_ids=ids, attention_mask=mask)
    assert len(calls) == 1


def test_views_differ_only_by_dropout(backbones):
    model = build_model("simcse", str(backbones["bert"]))
    ids, mask = batch()
    ids[:, 1] = ids[:, 0]
    mask[:, 1] = mask[:, 0]
    model.train()
    z = model(input_ids=ids, attention_mask=mask).embeddings.views
    assert not torch.allclose(z[:, 0], z[:, 1])
    model.eval()
    z = model(input_ids=ids, attention_mask=mask).embeddings.views
    assert torch.allclose(z[:, 0], z[:, 1], atol=1e-6)


def test_poolers_by_hand():
    last = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]]])
    first_layer = torch.tensor([[[0.0, 0.0], [1.0, 1.0], [50.0, 50.0]]])
    mask = torch.tensor([[1, 1, 0]])
    states = (torch.zeros_like(last), first_layer, last)
    assert pool("cls", mask, last).tolist() == [[1.0, 2.0]]
    assert pool("avg", mask, last).tolist() == [[2.0, 3.0]]
    assert pool("avg_first_last", mask, last, states).tolist() == [[1.25, 1.75]]  # mean of (0+1)/2.. per token
    assert pool("avg_top2", mask, last, states).tolist() == [[1.25, 1.75]]  # here layer -2 == first_layer
    with pytest.raises(ValueError, match="unknown pooler"):
        pool("max", mask, last)


def test_config_round_trip_keeps_method_settings(backbones, tmp_path):
    model = build_model("sup_simcse", str(backbones["roberta"]), temperature=0.1, hard_negative_weight=0.5)
    model.save_pretrained(tmp_path)
    loaded = load_contrastive_model(tmp_path)
    assert type(loaded) is SupervisedSimCSEModel
    assert (loaded.config.temperature, loaded.config.hard_negative_weight, loaded.config.mlp_only_train) == (0.1, 0.5, False)
    assert loaded.config.encoder_config.model_type == "roberta"
    ids, mask = batch(v=1)
    model.eval(), loaded.eval()
    assert torch.allclose(model.embed(ids[:, 0], mask[:, 0]), loaded.embed(ids[:, 0], mask[:, 0]), atol=1e-6)


def test_test_time_embedding_follows_the_recipe(backbones):
    ids, mask = batch(v=1)
    unsup = build_model("simcse", str(backbones["bert"])).eval()
    pooled = unsup.encode(ids[:, 0], mask[:, 0])
    assert torch.allclose(unsup.embed(ids[:, 0], mask[:, 0]), pooled)  # MLP dropped at test time
    assert torch.allclose(unsup.embed(ids[:, 0], mask[:, 0], pooler_type="cls"), unsup.projector(pooled))
    sup = build_model("sup_simcse", str(backbones["bert"])).eval()
    assert torch.allclose(sup.embed(ids[:, 0], mask[:, 0]), sup.projector(sup.encode(ids[:, 0], mask[:, 0])))


def test_bad_config_values_are_refused(backbones):
    with pytest.raises(ValueError, match="pooler_type"):
        build_model("simcse", str(backbones["bert"]), pooler_type="mean")
    with pytest.raises(ValueError, match="projector"):
        build_model("simcse", str(backbones["bert"]), projector="mlp2")


def test_supervised_simcse_on_pairs_is_eq_1_with_the_pair_as_positives(backbones):
    """A corpus of (sent0, sent1) pairs, no hard_neg column (the official code's two-column CSV; the SimCSE paper's
    Table 4 rows without hard negatives): the model's views drop the optional hard negative, and the loss is Eq. 1
    written out, with sent1's embedding as sent0's positive and the other pairs' sent1 as negatives."""
    model = build_model("sup_simcse", str(backbones["bert"]), temperature=0.1)
    assert model.read_views_from(["sent0", "sent1", "hard_neg"]) == () and len(model.view_columns) == 3
    assert model.read_views_from(["sent0", "sent1"]) == ("hard_neg",)
    assert model.view_columns == ("sent0", "sent1") and SupervisedSimCSEModel.view_columns[2] == "hard_neg"
    assert build_model("simcse", str(backbones["bert"])).read_views_from(["text"]) == ()
    model.eval()  # dropout off: the loss is a function of the two views alone
    ids, mask = batch(b=4, v=2)
    out = model(input_ids=ids, attention_mask=mask)
    z0, z1 = (model.projector(model.encode(ids[:, v], mask[:, v])) for v in (0, 1))  # [CLS] + the kept MLP
    similarity = torch.nn.functional.normalize(z0, dim=-1) @ torch.nn.functional.normalize(z1, dim=-1).T / 0.1
    written_out = -(similarity.diagonal() - similarity.logsumexp(dim=1)).mean()
    torch.testing.assert_close(out.loss, written_out, rtol=1e-5, atol=1e-6)
