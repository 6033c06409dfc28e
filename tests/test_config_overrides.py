"""A backbone without dropout (a ModernBERT's config sets every rate to 0) makes the unsupervised methods' two
dropout views one encoding: the run says so, in its log and summary, and names the ``--config_overrides`` that gives
the papers' p = 0.1; ``--config_overrides`` sets backbone config settings before the backbone is built (from a
model folder or from this repo's checkpoint), typed as the config types them, and refuses what the config lacks."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from torch import nn

import run_unsup
from command_line.backbone_checks import config_override_values
from command_line.pipeline import no_dropout_warning
from eval.backbone import checkpoint_encoder
from models.dropout import applies_dropout
from tests.tiny import FAST_TRAINING_ARGS, save_tiny_backbone, tiny_corpus
from trainers.errors import UsageError
from trainers.methods import build_model

MODERNBERT_ZERO = "attention_dropout, embedding_dropout, mlp_dropout are 0 in its config"
PAPERS_P = "--config_overrides attention_dropout=0.1,embedding_dropout=0.1,mlp_dropout=0.1"


@pytest.fixture(scope="module")
def modernbert_without_dropout(tmp_path_factory):
    return save_tiny_backbone(tmp_path_factory.mktemp("modernbert"), arch="modernbert", dropout=0.0)


def test_applies_dropout():
    assert applies_dropout(nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.1)))
    assert not applies_dropout(nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.0), nn.Identity()))
    assert not applies_dropout(nn.Linear(2, 2))


@pytest.mark.parametrize("method, warned", [("simcse", True), ("esimcse", True), ("promptbert", True),
                                            ("simcse_pp", True), ("s_simcse", False), ("sup_simcse", False)])
def test_the_warning_names_the_zero_rates_and_the_flag(modernbert_without_dropout, method, warned):
    """s_simcse draws its rates (they replace the config's 0); supervised SimCSE's positives are NLI pairs."""
    model = build_model(method, str(modernbert_without_dropout), attn_implementation="eager")
    warning = no_dropout_warning(model)
    assert (warning is not None) is warned
    if warned:
        assert f"the backbone applies no dropout ({MODERNBERT_ZERO}), and {method}'s positive pair" in warning
        assert warning.endswith(f"For the papers' p = 0.1 add {PAPERS_P}.")
    assert ("differ only by the repetition" in (warning or "")) is (method == "esimcse")


def test_a_backbone_with_dropout_and_one_set_by_the_flag_are_not_warned_of(tmp_path, modernbert_without_dropout):
    assert no_dropout_warning(build_model("simcse", str(save_tiny_backbone(tmp_path / "bert")))) is None
    bert = build_model("simcse", str(save_tiny_backbone(tmp_path / "bert0", dropout=0.0)))
    assert "(hidden_dropout_prob, attention_probs_dropout_prob are 0" in no_dropout_warning(bert)
    overrides = {"attention_dropout": 0.1, "embedding_dropout": 0.1, "mlp_dropout": 0.1}
    model = build_model("simcse", str(modernbert_without_dropout), config_overrides=overrides)
    assert no_dropout_warning(model) is None
    assert {key: getattr(model.encoder.config, key) for key in overrides} == overrides
    assert {m.p for m in model.encoder.modules() if isinstance(m, nn.Dropout)} == {0.1}


def args(name, overrides):
    return SimpleNamespace(model_name_or_path=str(name), cache_dir=None, config_overrides=overrides)


def test_overrides_are_typed_as_the_config_types_them(modernbert_without_dropout):
    assert config_override_values(args(modernbert_without_dropout, None)) == {}
    values = config_override_values(args(modernbert_without_dropout, "mlp_dropout=0.2,attention_dropout=0.1"))
    assert values == {"mlp_dropout": 0.2, "attention_dropout": 0.1}
    assert all(isinstance(value, float) for value in values.values())


@pytest.mark.parametrize("overrides, message", [
    ("nope=1", "--config_overrides 'nope=1': key nope isn't in the original config dict"),
    ("mlp_dropout=abc", "--config_overrides 'mlp_dropout=abc': could not convert string to float: 'abc'"),
    ("mlp_dropout", "--config_overrides 'mlp_dropout': expected key=value pairs separated by commas"),
    ("mlp_dropout=0.1,", "--config_overrides 'mlp_dropout=0.1,', '': expected key=value pairs"),
])
def test_bad_overrides_are_refused_naming_the_dropout_settings(modernbert_without_dropout, overrides, message):
    with pytest.raises(UsageError) as refused:
        config_override_values(args(modernbert_without_dropout, overrides))
    assert str(refused.value).startswith(message)
    assert str(refused.value).endswith("its dropout settings: attention_dropout, embedding_dropout, mlp_dropout, "
                                       "classifier_dropout)")


def test_a_checkpoint_as_backbone_takes_the_overrides(tmp_path):
    model = build_model("simcse", str(save_tiny_backbone(tmp_path / "bert")))
    model.save_pretrained(tmp_path / "checkpoint")
    encoder, _ = checkpoint_encoder(tmp_path / "checkpoint", {"hidden_dropout_prob": 0.3})
    assert encoder.config.hidden_dropout_prob == 0.3
    assert 0.3 in {m.p for m in encoder.modules() if isinstance(m, nn.Dropout)}


def test_the_run_says_it_and_the_flag_fixes_it(tmp_path, modernbert_without_dropout, capsys):
    """Through run_unsup.py: the warning in the summary; with the flag it names, none, and the export's config
    holds the rates the run trained with; a key the backbone's config lacks exits 2 before anything loads."""
    import json

    from tests.cli import in_process

    corpus = tiny_corpus(tmp_path / "corpus.txt")

    def run(name: str, *flags: str):
        return in_process(run_unsup.main, [
            "--model_name_or_path", str(modernbert_without_dropout), "--train_file", str(corpus), "--max_steps", "1",
            "--eval_strategy", "no", "--output_dir", str(tmp_path / name), *FAST_TRAINING_ARGS, *flags], capsys)

    without = run("without")
    assert without.code == 0, without.err
    summary = without.out.split("run summary ===", 1)[1]
    assert f"warning: the backbone applies no dropout ({MODERNBERT_ZERO})" in summary and PAPERS_P in summary
    fixed = run("with", *PAPERS_P.split())
    assert fixed.code == 0 and "applies no dropout" not in fixed.out
    exported = json.loads((tmp_path / "with" / "export" / "hf" / "config.json").read_text())
    assert (exported["attention_dropout"], exported["embedding_dropout"], exported["mlp_dropout"]) == (0.1, 0.1, 0.1)
    refused = run("refused", "--config_overrides", "hidden_dropout_prob=0.1")
    assert refused.code == 2
    assert "run_unsup.py: error: --config_overrides 'hidden_dropout_prob=0.1': key hidden_dropout_prob isn't in" in (
        refused.err)
    assert not (tmp_path / "refused").exists()


def test_a_resume_without_the_runs_overrides_is_refused(tmp_path, modernbert_without_dropout, capsys):
    """The overrides are part of what a run trains: a resume without them (it would train on without dropout) is
    refused naming the flag that sets them back; with them it resumes."""
    from tests.cli import in_process

    corpus = tiny_corpus(tmp_path / "corpus.txt")

    def run(steps: int, *flags: str):
        return in_process(run_unsup.main, [
            "--model_name_or_path", str(modernbert_without_dropout), "--train_file", str(corpus), "--max_steps",
            str(steps), "--eval_strategy", "no", "--save_strategy", "steps", "--save_steps", "1", "--output_dir",
            str(tmp_path / "run"), *FAST_TRAINING_ARGS, *flags], capsys)

    assert run(1, "--config_overrides", "mlp_dropout=0.1").code == 0
    refused = run(2, "--resume_from_checkpoint", "latest")
    assert refused.code == 2
    assert "(config_overrides: 'mlp_dropout=0.1' there, None here)" in refused.err
    assert "set them back: --config_overrides mlp_dropout=0.1)" in refused.err
    resumed = run(2, "--resume_from_checkpoint", "latest", "--config_overrides", "mlp_dropout=0.1")
    assert resumed.code == 0, resumed.err


def test_a_rate_in_the_config_counts_where_no_module_holds_it(tmp_path):
    """An architecture may apply a config rate functionally (no ``nn.Dropout`` module holds it): a rate above 0 in
    the backbone's config is dropout applied, not warned of."""
    model = build_model("simcse", str(save_tiny_backbone(tmp_path / "bert0", dropout=0.0)))
    model.encoder.config.attention_probs_dropout_prob = 0.1  # as if a functional dropout read it
    assert not applies_dropout(model.encoder) and no_dropout_warning(model) is None
