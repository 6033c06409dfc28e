"""SimCSE++: off-dropout InfoNCE (code and paper forms), DCL (code and paper forms) and the ablation losses against
written-out loops; dropout-off rows in the same backbone pass; the parts on other methods; the fidelity presets;
gathered DCL under DDP; training through CLTrainer and run_unsup."""
from __future__ import annotations

import json
import math

import pytest
import torch

import run_unsup
from models.losses import barlow_twins_loss, dcl_loss, decoupled_info_nce, off_dropout_info_nce
from models.views import ViewLayout
from tests.launch import run_ddp_cases
from tests.tiny import FAST_TRAINING_ARGS, cosine, save_tiny_backbone, tiny_corpus, tiny_trainer, token_batch
from command_line.arguments import MethodArguments, parse_args
from trainers.methods import build_model, resolve_settings




def rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)




# --------------------------------------------------------------------------------------------------- losses
def decoupled_loop(pa, pb, na, nb, tau, m, form, queue=None):
    """Eq. 3 (paper) / the code's form, written out: s_pos from (pa, pb), negatives from (na_i, nb_j), j != i."""
    pa, pb, na, nb = pa.tolist(), pb.tolist(), na.tolist(), nb.tolist()
    queue = [] if queue is None else queue.tolist()
    total = 0.0
    for i in range(len(pa)):
        s_pos = cosine(pa[i], pb[i]) / tau
        negatives = [cosine(na[i], nb[j]) / tau for j in range(len(nb)) if j != i] + [cosine(na[i], q) / tau for q in queue]
        neg_sum = sum(math.exp(s) for s in negatives)
        if form == "paper":
            total += -math.log(math.exp(s_pos) / (math.exp(s_pos) + m * neg_sum))
        else:  # cross-entropy whose positive logit is m * s_pos (numerator AND normaliser)
            total += -math.log(math.exp(m * s_pos) / (math.exp(m * s_pos) + neg_sum))
    return total / len(pa)


def official_off_dropout_loop(z1, z2, z0, tau, pos_ratio):
    """The released SimCSE++ loss written out step by step as ``simcse/models_re.py`` (``cl_forward``) computes it:
    ``dropout_norm = pos_ratio * sim(z1, z2)``, ``pos_loss = -dropout_norm``, ``neg_sim = [sim(z0_i, z0_j) +
    [i == j] * log(1e-45) for j] + [dropout_norm_i]``, ``loss = mean(pos_loss + logsumexp(neg_sim))``."""
    z1, z2, z0 = z1.tolist(), z2.tolist(), z0.tolist()
    small = math.log(1e-45)
    total = 0.0
    for i in range(len(z1)):
        dropout_norm = pos_ratio * cosine(z1[i], z2[i]) / tau
        neg_sim = [cosine(z0[i], z0[j]) / tau + (small if i == j else 0.0) for j in range(len(z0))]
        neg_sim.append(dropout_norm)
        peak = max(neg_sim)
        total += -dropout_norm + peak + math.log(sum(math.exp(s - peak) for s in neg_sim))
    return total / len(z1)


@pytest.mark.parametrize("form", ["code", "paper"])
@pytest.mark.parametrize("m", [0.5, 0.9, 1.0, 1.2])
@pytest.mark.parametrize("with_queue", [False, True])
def test_off_dropout_info_nce_matches_its_equation(form, m, with_queue):
    z1, z2, z_off, queue = rand(6, 5, seed=1), rand(6, 5, seed=2), rand(6, 5, seed=3), rand(4, 5, seed=4)
    queue = queue if with_queue else None
    got = off_dropout_info_nce(z1, z2, z_off, 0.1, m, form=form, queue=queue)
    assert got.item() == pytest.approx(decoupled_loop(z1, z2, z_off, z_off, 0.1, m, form, queue), abs=1e-6)


@pytest.mark.parametrize("m", [0.5, 0.9, 1.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_off_dropout_code_form_is_the_released_loss(m, seed):
    """Form ``code`` equals the official SimCSE++ expression, computed independently in its own loop form."""
    z1, z2, z_off = rand(7, 5, seed=seed), rand(7, 5, seed=seed + 10), rand(7, 5, seed=seed + 20)
    got = off_dropout_info_nce(z1, z2, z_off, 0.05, m, form="code")
    assert got.item() == pytest.approx(official_off_dropout_loop(z1, z2, z_off, 0.05, m), rel=1e-9)


def positives_at_cosine(anchor: torch.Tensor, cos: torch.Tensor, seed: int) -> torch.Tensor:
    """Unit vectors p_i with cos(anchor_i, p_i) = cos_i exactly: cos_i * a_i + sqrt(1 - cos_i^2) * w_i, w_i a unit
    vector orthogonal to a_i. The loss depends on p only through s+_i = cos_i / tau, so d loss / d cos_i =
    (d loss / d s+_i) / tau."""
    a = torch.nn.functional.normalize(anchor, dim=-1)
    w = rand(*anchor.shape, seed=seed)
    w = torch.nn.functional.normalize(w - (w * a).sum(-1, keepdim=True) * a, dim=-1)
    return cos[:, None] * a + torch.sqrt(1 - cos[:, None] ** 2) * w


@pytest.mark.parametrize("m", [0.5, 0.9])
@pytest.mark.parametrize("seed", range(8))
def test_off_dropout_code_form_always_pulls_the_positive_together(m, seed):
    """d loss / d s+_i = -m (1 - p'_i) / N <= 0 for every row, p'_i the softmax share of the logit m * s+_i. Batches
    include rows whose positive already dominates (cos 0.999 against near-orthogonal negatives, p' close to 1 > m),
    where a normaliser holding the UNscaled e^{s+} would give the positive gradient p - m > 0 (pushing it apart)."""
    tau, n = 0.05, 6
    z1 = rand(n, 8, seed=seed)
    # orthogonal dropout-off embeddings (negative logits 0) plus noise: rows with cos 0.999 then dominate
    z_off = torch.linalg.qr(rand(8, 8, seed=seed + 100))[0][:n] + 0.05 * rand(n, 8, seed=seed + 300)
    cos = torch.linspace(-0.5, 0.999, n, dtype=torch.float64).roll(seed).requires_grad_(True)
    z2 = positives_at_cosine(z1, cos, seed + 200)
    loss = off_dropout_info_nce(z1, z2, z_off, tau, m, form="code")
    loss.backward()
    grad_s_pos = cos.grad * tau
    assert (grad_s_pos <= 0).all(), grad_s_pos
    # and it is exactly -m (1 - p') / N, with p' from the logits [m s+_i, s-_ij (j != i)]:
    s_neg = cosine_matrix(z_off, z_off) / tau
    logits = torch.cat([m * cos.detach()[:, None] / tau, s_neg.masked_fill(torch.eye(n, dtype=torch.bool), -math.inf)], 1)
    p_pos = torch.softmax(logits, 1)[:, 0]
    assert torch.allclose(grad_s_pos, -m * (1 - p_pos) / n, atol=1e-12)
    assert p_pos.max() > m  # the batch does contain a dominating positive


def cosine_matrix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.normalize(a, dim=-1) @ torch.nn.functional.normalize(b, dim=-1).T


def test_off_dropout_code_form_at_m_1_is_simcse_info_nce():
    """m = 1 with the negatives taken from the regular views themselves is SimCSE's Eq. 1."""
    from models.losses import info_nce

    z1, z2 = rand(6, 5, seed=5), rand(6, 5, seed=6)
    assert decoupled_info_nce(z1, z2, z1, z2, 0.05, m=1.0, form="code").item() == pytest.approx(
        info_nce(z1, z2, 0.05).item(), rel=1e-12)


def test_off_dropout_paper_form_is_unchanged():
    """Eq. 3 as printed (m on the negative sum): a value pinned from the written-out equation."""
    z1, z2, z_off = rand(5, 4, seed=1), rand(5, 4, seed=2), rand(5, 4, seed=3)
    got = off_dropout_info_nce(z1, z2, z_off, 0.1, 0.9, form="paper")
    assert got.item() == pytest.approx(decoupled_loop(z1, z2, z_off, z_off, 0.1, 0.9, "paper"), abs=1e-9)


def test_forms_agree_at_m_1_and_differ_otherwise():
    z1, z2, z_off = rand(5, 4, seed=1), rand(5, 4, seed=2), rand(5, 4, seed=3)
    code = off_dropout_info_nce(z1, z2, z_off, 0.05, 1.0, "code")
    assert code.item() == pytest.approx(off_dropout_info_nce(z1, z2, z_off, 0.05, 1.0, "paper").item(), abs=1e-9)
    assert abs(off_dropout_info_nce(z1, z2, z_off, 0.05, 0.5, "code").item()
               - off_dropout_info_nce(z1, z2, z_off, 0.05, 0.5, "paper").item()) > 1e-3


def test_decoupled_info_nce_matches_its_equation():
    tensors = [rand(5, 4, seed=s) for s in range(4)]
    got = decoupled_info_nce(*tensors, 0.2)
    assert got.item() == pytest.approx(decoupled_loop(*tensors, 0.2, 1.0, "code"), abs=1e-6)


def dcl_loop(z1, z2, tau, form, eps=1e-5):
    z1, z2 = z1.tolist(), z2.tolist()
    n, d = len(z1), len(z1[0])

    def standardise(z):
        columns = []
        for c in range(d):
            column = [z[i][c] for i in range(n)]
            mean = sum(column) / n
            var = sum((x - mean) ** 2 for x in column) / (n - 1 if form == "paper" else n)
            columns.append([(x - mean) / math.sqrt(var + eps) for x in column])
        return columns  # [d][n]

    a, b = standardise(z1), standardise(z2)
    scale = tau * (n if form == "code" else 1)
    s = [[sum(a[c][i] * b[e][i] for i in range(n)) / scale for e in range(d)] for c in range(d)]
    terms = [-s[c][c] + math.log(sum(math.exp(s[c][e]) for e in range(d))) for c in range(d)]
    return sum(terms) / d if form == "code" else sum(terms)


@pytest.mark.parametrize("form", ["code", "paper"])
@pytest.mark.parametrize("tau", [1.0, 5.0])
def test_dcl_matches_its_equation(form, tau):
    z1, z2 = rand(7, 5, seed=5), rand(7, 5, seed=6) * 3 + 1
    assert dcl_loss(z1, z2, tau, form=form).item() == pytest.approx(dcl_loop(z1, z2, tau, form), abs=1e-6)


def test_dcl_code_form_is_batchnorm_without_affine():
    z1, z2 = rand(8, 6, seed=7), rand(8, 6, seed=8)
    bn = torch.nn.BatchNorm1d(6, affine=False).double().train()
    c = bn(z1).T @ bn(z2) / 8 / 5.0
    reference = torch.nn.functional.cross_entropy(c, torch.arange(6))
    assert dcl_loss(z1, z2, 5.0, "code").item() == pytest.approx(reference.item(), abs=1e-9)


@pytest.mark.parametrize("pad", [0, 3])
def test_barlow_twins_matches_its_equation(pad):
    z1, z2, padding = rand(5, 4, seed=9), rand(5, 4, seed=10), rand(pad, 4, seed=11)
    a, b = torch.cat([z1, padding]).tolist(), torch.cat([z2, padding]).tolist()
    n, d, lam = len(a), 4, 0.3
    norm = lambda z, c: math.sqrt(sum(z[i][c] ** 2 for i in range(n)))  # noqa: E731
    corr = [[sum(a[i][c] * b[i][e] for i in range(n)) / (norm(a, c) * norm(b, e)) for e in range(d)] for c in range(d)]
    expected = sum((1 - corr[c][c]) ** 2 for c in range(d)) + lam * sum(
        corr[c][e] ** 2 for c in range(d) for e in range(d) if e != c)
    got = barlow_twins_loss(z1, z2, lam, padding if pad else None)
    assert got.item() == pytest.approx(expected, abs=1e-6)


# --------------------------------------------------------------------------------------------------- layout
def test_view_layout_expands_and_folds_back():
    layout = ViewLayout(num_views=2, off_dropout=True, samples=3)
    t = torch.arange(2 * 2).view(2, 2, 1)
    expanded = layout.expand(t)
    assert expanded[:, :, 0].tolist() == [[0, 1, 0, 0, 0, 1, 1], [2, 3, 2, 2, 2, 3, 3]]
    views, off = layout.row_plan(2, torch.device("cpu"))
    assert views.tolist() == list(range(7)) * 2 and off.tolist() == [v == 2 for v in range(7)] * 2
    z, pooled = torch.randn(2, 7, 4), torch.randn(2, 7, 5)
    out = layout.fold(z, pooled)
    assert torch.equal(out.views, z[:, :2]) and torch.equal(out.off_dropout, z[:, 2])
    assert torch.equal(out.pooled, pooled[:, :2])
    torch.testing.assert_close(out.sample_means[:, 0], (z[:, 0] + z[:, 3] + z[:, 4]) / 3)
    torch.testing.assert_close(out.sample_means[:, 1], (z[:, 1] + z[:, 5] + z[:, 6]) / 3)


# --------------------------------------------------------------------------------------------------- model
def test_off_dropout_rows_are_dropout_free_in_the_same_pass_and_keep_gradients(backbone):
    model = build_model("simcse_pp", str(backbone))
    assert (model.config.off_dropout, model.config.pos_neg_tradeoff, model.config.dcl_weight,
            model.config.dcl_temp, model.config.off_dropout_form, model.config.dcl_form) == (
        True, 0.9, 0.1, 5.0, "code", "code")
    ids, mask = token_batch(same_views=True)
    passes = []
    model.encoder.register_forward_hook(lambda *args: passes.append(1))
    model.train()
    embeddings = model.embed_views(ids, mask)
    assert embeddings.views.shape == (4, 2, 32) and embeddings.off_dropout.shape == (4, 32) and len(passes) == 1
    with torch.no_grad():
        model.eval()
        clean = model.projector(model.encode(ids[:, 0], mask[:, 0]))
    torch.testing.assert_close(embeddings.off_dropout, clean, atol=1e-5, rtol=1e-5)  # dropout off for those rows
    assert not torch.allclose(embeddings.views[:, 0], clean, atol=1e-3)  # dropout on for the others
    model.train()
    loss, _ = model.compute_loss(embeddings, {})
    (grad,) = torch.autograd.grad(loss, embeddings.off_dropout)
    assert grad.abs().sum() > 0  # negatives keep their gradient


@pytest.mark.parametrize("method", ["esimcse", "s_simcse", "simcse"])
def test_parts_work_on_any_method(backbone, method):
    model = build_model(method, str(backbone), off_dropout=True, dcl_weight=0.1).train()
    ids, mask = token_batch(same_views=True)
    out = model(input_ids=ids, attention_mask=mask)
    assert out.embeddings.off_dropout.shape == (4, 32) and {"contrastive_loss", "dcl_loss"} <= set(out.metrics)
    out.loss.backward()
    if method == "s_simcse":  # sampled rates for the dropout rows, 0 for the off rows
        rates = model.dropout_controller.last_rates.view(4, 3)
        assert (rates[:, 2] == 0).all() and ((rates[:, :2] >= 0.05) & (rates[:, :2] <= 0.15)).all()


def test_noise_study_uses_k_samples_in_one_pass(backbone):
    model = build_model("simcse", str(backbone), noise_study="neg_minus", noise_samples=3).train()
    rows = []
    model.encoder.register_forward_hook(lambda module, args, kwargs, out: rows.append(kwargs["input_ids"].shape[0]),
                                        with_kwargs=True)
    ids, mask = token_batch(same_views=True)
    out = model(input_ids=ids, attention_mask=mask)
    assert rows == [4 * 6] and out.embeddings.sample_means.shape == (4, 2, 32) and torch.isfinite(out.loss)
    for study in ("pos_plus", "neg_plus", "pos_minus"):
        other = build_model("simcse", str(backbone), noise_study=study, noise_samples=2).train()
        assert torch.isfinite(other(input_ids=ids, attention_mask=mask).loss)


def test_bad_part_settings_are_refused(backbone):
    with pytest.raises(ValueError, match="off_dropout and noise_study"):
        build_model("simcse", str(backbone), off_dropout=True, noise_study="pos_plus")
    with pytest.raises(ValueError, match="dcl_form"):
        build_model("simcse", str(backbone), dcl_form="printed")


def test_fidelity_presets_set_every_switch_and_explicit_flags_win(backbone):
    def config(*argv):
        (method_args,) = parse_args((MethodArguments,), ["--method", "simcse_pp", *argv])
        return build_model("simcse_pp", str(backbone), **method_args.explicit_settings()).config

    default = config()
    assert (default.off_dropout_form, default.dcl_form, default.fidelity) == ("code", "code", None)
    paper = config("--fidelity", "paper")
    assert (paper.off_dropout_form, paper.dcl_form, paper.dup_length_rule, paper.queue_through_mlp,
            paper.fidelity) == ("paper", "paper", "paper", False, "paper")
    code = config("--fidelity", "official_code")
    assert (code.off_dropout_form, code.dcl_form, code.dup_length_rule, code.resample_repetition,
            code.queue_through_mlp, code.gather_queue) == ("code", "code", "code", False, True, False)
    mixed = config("--fidelity", "paper", "--dcl_form", "code")
    assert (mixed.off_dropout_form, mixed.dcl_form) == ("paper", "code")


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_every_method_flag_is_readable_from_a_config_file(tmp_path, suffix):
    values = {"method": "esimcse", "fidelity": "official_code", "dup_rate": 0.3, "dup_type": "word",
              "dup_length_rule": "paper", "resample_repetition": True, "length_extension": "stopword",
              "momentum_contrast": True, "momentum": 0.99, "queue_size": 96, "queue_through_mlp": False,
              "gather_queue": True, "off_dropout": True, "pos_neg_tradeoff": 0.8, "off_dropout_form": "paper",
              "dcl_weight": 0.2, "dcl_temp": 2.0, "dcl_form": "paper", "noise_study": "none", "noise_variance": 0.2,
              "noise_samples": 4, "barlow_weight": 0.5, "barlow_lambda": 0.01, "barlow_pad": 100,
              "dropout_dist": "normal", "dropout_low": 0.02, "dropout_high": 0.2, "sentence_wise_dropout": True,
              "dropout_sample_per_op": False, "insert_mlm_name_or_path": "bert-base-uncased"}
    path = tmp_path / f"run{suffix}"
    if suffix == ".json":
        path.write_text(json.dumps(values))
    else:
        path.write_text("".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}\n" for k, v in values.items()))
    (method_args,) = parse_args((MethodArguments,), [str(path), "--queue_size", "64"])
    overrides = resolve_settings(method_args.method, method_args.explicit_settings())
    expected = {k: v for k, v in values.items() if k != "method"}
    expected["queue_size"] = 64  # a flag after the file wins
    expected["resample_repetition"] = True  # explicit value beats the preset's False
    assert {k: overrides[k] for k in expected} == expected
    assert overrides["queue_through_mlp"] is False and overrides["gather_queue"] is True


# --------------------------------------------------------------------------------------------------- DDP
def test_dcl_and_off_dropout_under_ddp_equal_one_process_with_the_global_batch(tmp_path):
    model_dir = save_tiny_backbone(tmp_path / "model", dropout=0.0)
    ids, mask = token_batch(b=8, seed=4, same_views=True)
    ids[:, 1] = torch.randint(5, 60, ids[:, 1].shape, generator=torch.Generator().manual_seed(5))
    batches = [{"input_ids": ids, "attention_mask": mask}]
    cases = [{"name": "pp", "method": "simcse_pp", "config": {"dcl_weight": 1.0}, "steps": 1},
             {"name": "pp_paper", "method": "simcse_pp", "config": {"dcl_form": "paper", "off_dropout_form": "paper"},
              "steps": 1}]
    run_ddp_cases(tmp_path, model_dir, batches, cases)
    from tests.workers.methods_ddp_steps import run_steps

    for case in cases:
        torch.manual_seed(0)
        reference = build_model(case["method"], str(model_dir), **case["config"]).train()
        losses, grads = run_steps(reference, reference, batches, case["steps"])
        for rank in range(2):
            result = torch.load(tmp_path / f"{case['name']}.rank{rank}.pt", weights_only=True)
            torch.testing.assert_close(result["losses"], losses, atol=1e-5, rtol=1e-5)
            for name, grad in grads.items():
                torch.testing.assert_close(result["grads"][name], grad, atol=1e-5, rtol=1e-4, msg=name)


# --------------------------------------------------------------------------------------------------- training
def test_trains_through_cltrainer_and_run_unsup(tmp_path, backbone):
    corpus = tiny_corpus(tmp_path / "corpus.txt", n=48)
    model = build_model("simcse_pp", str(backbone))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = tiny_trainer(model, backbone, tmp_path / "trainer", corpus)
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logs) == 3 and all(math.isfinite(e["loss"]) and "dcl_loss" in e for e in logs)
    assert any(not torch.equal(before[n], p) for n, p in model.named_parameters())

    metrics = run_unsup.main(["--method", "simcse_pp", "--model_name_or_path", str(backbone), "--train_file",
                              str(corpus), "--max_steps", "2", "--eval_strategy", "no", "--save_strategy", "no",
                              "--load_best_model_at_end", "false", "--output_dir", str(tmp_path / "run"),
                              "--fidelity", "paper", *FAST_TRAINING_ARGS])
    assert metrics["train_loss"] > 0
    card = (tmp_path / "run" / "export" / "hf" / "README.md").read_text()
    assert "simcse_pp" in card
