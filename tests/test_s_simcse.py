"""S-SimCSE: per-row dropout rates are really applied (empirical drop fraction per row = its rate), sampled per
view ("w/o sd") or per sentence ("w/ sd"), per dropout operation; every backbone dropout (attention included) is
swapped; eval embeddings are unchanged; checkpoints round-trip; training through CLTrainer and run_unsup."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import run_unsup
from models import SSimCSEModel
from models.dropout import ROW_DROPOUT_ATTENTION, RowDropout, RowDropoutController
from tests.tiny import FAST_TRAINING_ARGS, save_tiny_backbone, tiny_corpus, tiny_trainer, token_batch
from trainers.methods import build_model, load_contrastive_model





# --------------------------------------------------------------------------------------------------- module
def test_each_row_drops_at_its_own_rate():
    torch.manual_seed(0)
    controller = RowDropoutController("uniform", 0.0, 0.9, sentence_wise=True)
    dropout = RowDropout(0.1, controller).train()
    x = torch.ones(12, 40, 500)
    with controller.plan(torch.arange(12)):
        y = dropout(x)
    rates = controller.last_rates
    assert rates.unique().numel() == 12 and rates.min() < 0.3 and rates.max() > 0.6
    dropped = (y == 0).float().mean(dim=(1, 2))
    torch.testing.assert_close(dropped, rates, atol=0.012, rtol=0)  # 20k draws a row: 4 sigma < 0.012
    for row in range(12):  # inverted dropout: kept values are scaled by 1 / (1 - rate)
        kept = y[row][y[row] != 0]
        torch.testing.assert_close(kept, torch.full_like(kept, 1 / (1 - rates[row].item())))


def test_off_rows_and_unplanned_calls():
    controller = RowDropoutController("uniform", 0.2, 0.4)
    dropout = RowDropout(0.1, controller).train()
    x = torch.ones(4, 30, 300)
    with controller.plan(torch.tensor([0, 1, 0, 1]), off=torch.tensor([False, True, False, True])):
        y = dropout(x)
    assert torch.equal(y[1], x[1]) and torch.equal(y[3], x[3])  # rate 0: identity
    assert ((y[0] == 0).float().mean() - 0.3).abs() < 0.1
    plain = dropout(x)  # no plan: the module's own p
    assert abs((plain == 0).float().mean().item() - 0.1) < 0.01
    assert torch.equal(dropout.eval()(x), x)


@pytest.mark.parametrize("dist", ["uniform", "normal"])
def test_rates_per_view_or_per_sentence_and_per_operation(dist):
    views = torch.tensor([0, 1, 0, 1, 0, 1])
    x = torch.ones(6, 4)
    per_view = RowDropoutController(dist, 0.05, 0.15, sentence_wise=False)
    with per_view.plan(views):
        first = per_view.rates(6, 0.1, x.device)
        second = per_view.rates(6, 0.1, x.device)
    assert torch.equal(first[0::2], first[0].repeat(3)) and torch.equal(first[1::2], first[1].repeat(3))
    assert first[0] != first[1] and not torch.equal(first, second)  # two views differ; each operation redraws
    per_row = RowDropoutController(dist, 0.05, 0.15, sentence_wise=True, per_op=False)
    with per_row.plan(views):
        first = per_row.rates(6, 0.1, x.device)
        second = per_row.rates(6, 0.1, x.device)
    assert first.unique().numel() == 6 and torch.equal(first, second)  # one draw per pass when per_op is off
    many = RowDropoutController(dist, 0.05, 0.15).sample(10000, "cpu")
    assert many.min() >= 0.05 and many.max() <= 0.15 and abs(many.mean().item() - 0.1) < 0.003


# --------------------------------------------------------------------------------------------------- model
def test_every_dropout_of_the_backbone_is_swapped_and_follows_its_row_rate(backbone):
    model = build_model("s_simcse", str(backbone), dropout_low=0.0, dropout_high=0.9)
    assert (model.config.dropout_dist, model.config.sentence_wise_dropout) == ("uniform", True)
    assert not any(type(m) is nn.Dropout for m in model.modules())
    swapped = [m for m in model.encoder.modules() if isinstance(m, RowDropout)]
    assert len(swapped) == 1 + 3 * 2  # embeddings + (attention probs, attention output, FFN output) x 2 layers
    assert model.encoder.config._attn_implementation == ROW_DROPOUT_ATTENTION
    calls = []

    def record(module, args, output):
        calls.append((args[0].detach(), output.detach(), model.dropout_controller.last_rates.clone()))

    for module in swapped:
        module.register_forward_hook(record)
    torch.manual_seed(0)
    ids, mask = token_batch(b=8)
    model.train()(input_ids=ids, attention_mask=mask)
    assert len(calls) == len(swapped) and any(inp.dim() == 4 for inp, _, _ in calls)  # attention probs included
    points = []
    for inp, out, rates in calls:
        flat_in, flat_out = inp.flatten(1), out.flatten(1)
        alive = flat_in != 0
        fraction = ((flat_out == 0) & alive).sum(1) / alive.sum(1)
        points += list(zip(rates.tolist(), fraction.tolist()))
        expected = (rates * alive.sum(1)).sum()
        sd = (rates * (1 - rates) * alive.sum(1)).sum().sqrt()
        assert abs(((flat_out == 0) & alive).sum() - expected) < 5 * sd + 1
    rates, fractions = torch.tensor(points).T
    assert torch.corrcoef(torch.stack([rates, fractions]))[0, 1] > 0.95
    assert len({round(r, 6) for r in rates.tolist()}) > len(points) // 2  # drawn per row and per operation


@pytest.mark.parametrize("arch,swapped", [("roberta", 7), ("distilbert", 5)])
def test_other_backbones_route_attention_dropout_through_the_rows(tmp_path, arch, swapped):
    directory = save_tiny_backbone(tmp_path / arch, arch=arch)
    model = build_model("s_simcse", str(directory))
    modules = [m for m in model.encoder.modules() if isinstance(m, RowDropout)]
    assert len(modules) == swapped and not any(type(m) is nn.Dropout for m in model.modules())
    shapes = []
    for module in modules:
        module.register_forward_hook(lambda module, args, output: shapes.append(args[0].dim()))
    ids, mask = token_batch(b=3)
    model.train()(input_ids=ids, attention_mask=mask).loss.backward()
    assert len(shapes) == swapped and shapes.count(4) == 2  # attention probabilities of both layers
    torch.manual_seed(0)
    plain = build_model("simcse", str(directory)).eval()
    torch.manual_seed(0)
    sampled = build_model("s_simcse", str(directory)).eval()
    torch.testing.assert_close(sampled.embed(ids[:, 0], mask[:, 0]), plain.embed(ids[:, 0], mask[:, 0]),
                               atol=1e-5, rtol=1e-5)


def test_without_sd_both_views_get_different_rates(backbone):
    model = build_model("s_simcse", str(backbone), sentence_wise_dropout=False).train()
    ids, mask = token_batch(b=8)
    model(input_ids=ids, attention_mask=mask)
    rates = model.dropout_controller.last_rates.view(8, 2)
    assert torch.equal(rates[:, 0], rates[0, 0].repeat(8)) and torch.equal(rates[:, 1], rates[0, 1].repeat(8))
    assert rates[0, 0] != rates[0, 1]


def test_eval_embeddings_are_unchanged_and_checkpoints_round_trip(backbone, tmp_path):
    torch.manual_seed(0)
    s_model = build_model("s_simcse", str(backbone)).eval()
    torch.manual_seed(0)
    plain = build_model("simcse", str(backbone)).eval()
    ids, mask = token_batch(b=8)
    torch.testing.assert_close(s_model.embed(ids[:, 0], mask[:, 0]), plain.embed(ids[:, 0], mask[:, 0]),
                               atol=1e-5, rtol=1e-5)
    s_model.save_pretrained(tmp_path)
    loaded = load_contrastive_model(tmp_path)
    assert type(loaded) is SSimCSEModel and loaded.config.dropout_dist == "uniform"
    assert loaded.encoder.config._attn_implementation == ROW_DROPOUT_ATTENTION
    assert sum(isinstance(m, RowDropout) for m in loaded.modules()) == 7
    torch.testing.assert_close(loaded.eval().embed(ids[:, 0], mask[:, 0]), s_model.embed(ids[:, 0], mask[:, 0]))


def test_trains_through_cltrainer_and_run_unsup(tmp_path, backbone):
    corpus = tiny_corpus(tmp_path / "corpus.txt", n=48)
    model = build_model("s_simcse", str(backbone))
    trainer = tiny_trainer(model, backbone, tmp_path / "trainer", corpus)
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logs) == 3 and all(math.isfinite(e["loss"]) for e in logs)

    metrics = run_unsup.main(["--method", "s_simcse", "--model_name_or_path", str(backbone), "--train_file",
                              str(corpus), "--max_steps", "2", "--eval_strategy", "no", "--save_strategy", "no",
                              "--load_best_model_at_end", "false", "--output_dir", str(tmp_path / "run"),
                              "--dropout_dist", "normal", "--sentence_wise_dropout", "false", *FAST_TRAINING_ARGS])
    assert metrics["train_loss"] > 0
    assert '"dropout_dist": "normal"' in (tmp_path / "run" / "export" / "hf" / "README.md").read_text()
