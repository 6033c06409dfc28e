"""Encoder families beyond BERT train through run_unsup.py and their exports score as their checkpoints: ELECTRA
(factorised embeddings), DeBERTa-v2 (relative positions, eager attention), MPNet (positions from pad + 1) and
ModernBERT (local attention in every other layer). What cannot work is refused in one line instead
(tests/test_unusable_backbones.py). Tiny random models built in code (:func:`tests.tiny.tiny_config`)."""
from __future__ import annotations

import pytest

import run_unsup
from eval.loading import load_encoder
from eval.sts import evaluate_sts
from tests.tiny import FAST_TRAINING_ARGS, save_tiny_backbone, tiny_corpus


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
@pytest.mark.parametrize("arch", ["deberta-v2", "mpnet", "modernbert"])
def test_diffcse_trains_on_an_encoder_family(arch, site, tmp_path):
    """Its discriminator (a copy of the backbone) takes h at position 0 at either site; ELECTRA and ALBERT, whose
    token embeddings are narrower than h, are refused (tests/test_unusable_backbones.py)."""
    import run_diffcse
    from tests.tiny import save_tiny_generator

    out = tmp_path / "run"
    metrics = run_diffcse.main([
        "--model_name_or_path", str(save_tiny_backbone(tmp_path / arch, arch=arch)), "--generator_name",
        str(save_tiny_generator(tmp_path / "generator")), "--train_file", str(tiny_corpus(tmp_path / "corpus.txt")),
        "--max_steps", "2", "--eval_strategy", "no", "--rtd_condition_site", site, "--output_dir", str(out),
        *FAST_TRAINING_ARGS])
    assert metrics["train_loss"] > 0 and (out / "export" / "hf" / "model.safetensors").is_file()
