"""End to end on tiny models: run_unsup.py trains, keeps the best checkpoint, exports; the exports evaluate like the
training-time model; a resumed run ends with the same weights as an uninterrupted one; misuse is refused."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import run_unsup
from eval.loading import load_encoder
from eval.sts import evaluate_sts
from trainers.methods import load_contrastive_model
from tests.tiny import FAST_TRAINING_ARGS, tiny_corpus, tiny_nli_csv
from tests.weights import assert_resumed_run_ends_on_the_uninterrupted_runs_weights
from trainers.errors import UsageError, UserError




def train(args: list[str]) -> dict:
    return run_unsup.main(args + FAST_TRAINING_ARGS)


@pytest.mark.parametrize("method", ["simcse", "sup_simcse"])
def test_train_select_best_export_and_round_trip(tmp_path, backbone, sts_fixture_dir, method):
    corpus = tiny_corpus(tmp_path / "corpus.txt") if method == "simcse" else tiny_nli_csv(tmp_path / "nli.csv")
    out = tmp_path / "run"
    metrics = train(["--method", method, "--model_name_or_path", str(backbone), "--train_file", str(corpus),
                     "--senteval_dir", str(sts_fixture_dir), "--max_steps", "4", "--eval_steps", "2",
                     "--output_dir", str(out)])
    assert {"eval_stsb_spearman", "eval_sickr_spearman", "eval_avg_sts"} <= set(metrics)
    state = json.loads((Path(metrics["best_model_checkpoint"]) / "trainer_state.json").read_text())
    evals = [e for e in state["log_history"] if "eval_stsb_spearman" in e]
    assert "before_stsb_spearman" in metrics  # evaluated before training (the "before" number)
    assert metrics["eval_dtype"] == "fp32"  # every score of the run was computed in fp32 (the default)
    assert json.loads((out / "all_results.json").read_text())["eval_dtype"] == "fp32"
    assert metrics["best_stsb_spearman"] == max(e["eval_stsb_spearman"] for e in evals)

    trained = load_contrastive_model(metrics["best_model_checkpoint"])
    card = (out / "export" / "hf" / "README.md").read_text()
    pooler = "cls" if method == "sup_simcse" else "cls_before_pooler"
    assert f"test-time pooler: `{pooler}`" in card and '"method": "' + method in card
    assert "`eval_dtype: fp32`" in card
    reference = evaluate_sts(load_encoder(metrics["best_model_checkpoint"], device="cpu"), sts_fixture_dir)
    for path, pool in [(out / "export" / "hf", pooler), (out / "export" / "sentence-transformers", None)]:
        scores = evaluate_sts(load_encoder(str(path), pool, device="cpu"), sts_fixture_dir)
        for task, value in reference.items():
            assert value == pytest.approx(scores[task], abs=1e-3), (path, task)
    assert trained.config.method == method


@pytest.mark.parametrize("arch", ["albert", "big_bird", "distilbert"])
def test_an_export_keeps_the_trained_mlp_where_the_backbone_can_hold_it(arch, tmp_path, sts_fixture_dir, caplog):
    """Supervised SimCSE embeds with [CLS] + the trained MLP. ALBERT's pooler (``pooler`` + ``pooler_activation``,
    not BERT's ``pooler.dense``) and BigBird's (``pooler`` + ``activation``) hold the MLP in the plain export, as
    BERT's does: its ``pooler`` tensors are the MLP's and ``--pooler cls`` on it scores as the checkpoint does
    (before, BigBird's export kept the backbone's untrained pooler, which ``python -m eval`` scored). DistilBERT has
    no pooler: the run warns, and the plain folder's card sends the user to the sentence-transformers folder, which
    scores as the checkpoint does, instead of to a pooler it lacks."""
    from tests.tiny import save_tiny_backbone

    backbone = save_tiny_backbone(tmp_path / arch, arch=arch)
    out = tmp_path / "run"
    with caplog.at_level("WARNING", logger="models.export"):
        train(["--method", "sup_simcse", "--model_name_or_path", str(backbone), "--train_file",
               str(tiny_nli_csv(tmp_path / "nli.csv")), "--max_steps", "2", "--learning_rate", "1e-2",
               "--eval_strategy", "no", "--save_strategy", "steps", "--save_steps", "2", "--load_best_model_at_end",
               "false", "--output_dir", str(out)])
    reference = evaluate_sts(load_encoder(str(out / "checkpoint-2"), device="cpu"), sts_fixture_dir)
    card = (out / "export" / "hf" / "README.md").read_text()
    lacks_mlp = "has no pooler layer to hold the trained MLP"
    if arch != "distilbert":
        assert lacks_mlp not in caplog.text and "`outputs.pooler_output` ([CLS] + the trained MLP)" in card
        mlp = load_contrastive_model(str(out / "checkpoint-2")).projector[0]
        pooler = load_file(out / "export" / "hf" / "model.safetensors")
        assert torch.equal(pooler["pooler.weight"], mlp.weight) and torch.equal(pooler["pooler.bias"], mlp.bias)
        exported = evaluate_sts(load_encoder(str(out / "export" / "hf"), "cls", device="cpu"), sts_fixture_dir)
    else:
        assert lacks_mlp in caplog.text and "**not** this method's embedding" in card
        assert "--model_name_or_path ../sentence-transformers" in card
        exported = evaluate_sts(load_encoder(str(out / "export" / "sentence-transformers"), device="cpu"),
                                sts_fixture_dir)
    assert exported == pytest.approx(reference, abs=1e-3)


def test_dev_scores_in_training_equal_the_checkpoint_loaded_later(tmp_path, backbone, sts_fixture_dir):
    out = tmp_path / "run"
    metrics = train(["--model_name_or_path", str(backbone), "--train_file", str(tiny_corpus(tmp_path / "c.txt")),
                     "--senteval_dir", str(sts_fixture_dir), "--max_steps", "2", "--eval_steps", "2",
                     "--output_dir", str(out)])
    reloaded = evaluate_sts(load_encoder(metrics["best_model_checkpoint"], device="cpu"), sts_fixture_dir,
                            tasks=("STSBenchmark", "SICKRelatedness"), split="dev")
    assert reloaded["STSBenchmark"] == pytest.approx(metrics["best_stsb_spearman"], abs=1e-3)


@pytest.mark.parametrize("extra", [[], ["--cache_chunk_size", "3"]], ids=["plain", "cached_row_seeded"])
def test_resume_gives_the_same_final_weights(tmp_path, backbone, extra):
    """Also for a cached run with row-seeded masks: their step seeds come from Python's ``random``, whose state the
    checkpoint restores."""
    corpus = tiny_corpus(tmp_path / "corpus.txt", n=96)
    common = ["--model_name_or_path", str(backbone), "--train_file", str(corpus), "--max_steps", "6",
              "--eval_strategy", "no", "--save_strategy", "steps", "--save_steps", "3", "--save_total_limit", "10",
              "--load_best_model_at_end", "false", *extra]
    train(common + ["--output_dir", str(tmp_path / "full")])
    train(common + ["--output_dir", str(tmp_path / "resumed"),
                    "--resume_from_checkpoint", str(tmp_path / "full" / "checkpoint-3")])
    assert_resumed_run_ends_on_the_uninterrupted_runs_weights(tmp_path / "full", tmp_path / "resumed", 3, 6)


def test_refuses_to_train_with_evaluation_but_no_senteval_data(tmp_path, backbone):
    with pytest.raises(UserError, match="SentEval data not found.*download_senteval.sh"):
        train(["--model_name_or_path", str(backbone), "--train_file", str(tiny_corpus(tmp_path / "c.txt")),
               "--senteval_dir", str(tmp_path / "nowhere"), "--output_dir", str(tmp_path / "o")])


def test_config_file_with_overrides(tmp_path, backbone):
    config = tmp_path / "run.yaml"
    config.write_text(f"model_name_or_path: {backbone}\ntrain_file: {tiny_corpus(tmp_path / 'c.txt')}\n"
                      f"max_steps: 1\neval_strategy: 'no'\nsave_strategy: 'no'\nload_best_model_at_end: false\n"
                      f"temp: 0.1\noutput_dir: {tmp_path / 'o'}\n")
    argv = [str(config), "--temp", "0.07", "--method", "esimcse", "--fidelity", "official_code",
            "--dup_length_rule", "paper"] + FAST_TRAINING_ARGS
    run_unsup.main(argv)
    saved = json.loads((tmp_path / "o" / "run_arguments.json").read_text())
    assert saved["MethodArguments"]["temperature"] == 0.07 and saved["CLTrainingArguments"]["max_steps"] == 1
    # what a results JSON copies (eval/provenance.py): the command line as given, and the settings it resolved to:
    # the preset's (queue through the online MLP), the explicit flag over the preset's, the declared defaults
    assert saved["argv"] == argv
    settings = saved["settings"]
    assert (settings["fidelity"], settings["queue_through_mlp"], settings["dup_length_rule"]) == (
        "official_code", True, "paper")
    assert settings["temperature"] == 0.07 and settings["dup_rate"] == 0.32 and settings["method"] == "esimcse"


def test_data_parallel_is_refused_with_the_launch_command():
    from types import SimpleNamespace

    from transformers.training_args import ParallelMode

    from command_line.arguments import refuse_data_parallel

    with pytest.raises(UsageError, match="accelerate launch --num_processes 4"):
        refuse_data_parallel(SimpleNamespace(parallel_mode=ParallelMode.NOT_DISTRIBUTED, n_gpu=4))
    refuse_data_parallel(SimpleNamespace(parallel_mode=ParallelMode.DISTRIBUTED, n_gpu=1))  # a DDP launch is fine
    refuse_data_parallel(SimpleNamespace(parallel_mode=ParallelMode.NOT_DISTRIBUTED, n_gpu=1))


def test_supervised_simcse_trains_on_a_corpus_of_pairs_and_says_so(tmp_path, backbone, capsys):
    """``sent0,sent1`` without ``hard_neg`` (what the corpus loader accepts, and the official code trains as pairs):
    the run trains on two views, warns in its log and summary that this is Table 4's no-hard-negative row, not
    Eq. 5, and refuses ``--hard_negative_weight``, which would have nothing to weight."""
    from transformers import AutoTokenizer

    from tests.cli import in_process
    from trainers.methods import build_collator

    triples = tiny_nli_csv(tmp_path / "nli.csv", n=16)
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("\n".join(",".join(line.split(",")[:2]) for line in triples.read_text().splitlines()) + "\n")

    def run(corpus: Path, name: str, *flags: str):
        return in_process(run_unsup.main, [
            "--method", "sup_simcse", "--model_name_or_path", str(backbone), "--train_file", str(corpus),
            "--max_steps", "2", "--eval_strategy", "no", "--output_dir", str(tmp_path / name), *flags,
            *FAST_TRAINING_ARGS], capsys)

    result = run(pairs, "run")
    assert result.code == 0, result.err
    summary = result.out.split("run summary ===", 1)[1]
    assert "warning: the corpus has no hard_neg column, so supervised SimCSE trains on its (sent0, sent1) pairs" in (
        summary)
    trained = load_contrastive_model(tmp_path / "run" / "checkpoint-2")
    assert trained.config.method == "sup_simcse"
    card = (tmp_path / "run" / "export" / "hf" / "README.md").read_text()
    assert '"view_columns": [\n    "sent0",\n    "sent1"\n  ]' in card
    trained.read_views_from(["sent0", "sent1"])  # what the run did once it read the corpus: its batches hold 2 views
    collate = build_collator(trained, AutoTokenizer.from_pretrained(str(backbone)), 16)
    assert collate([{"sent0": "the cat", "sent1": "a dog"}] * 3)["input_ids"].shape[:2] == (3, 2)
    refused = run(pairs, "refused", "--hard_negative_weight", "0.5")
    assert refused.code == 2, refused.err
    assert (f"error: --hard_negative_weight 0.5 weights each anchor's hard negative, and {pairs} has no hard_neg "
            "column") in refused.err
    on_triples = run(triples, "triples")
    assert on_triples.code == 0 and "no hard_neg column" not in on_triples.out
    assert '"view_columns"' not in (tmp_path / "triples" / "export" / "hf" / "README.md").read_text()


def test_gradient_accumulation_says_that_negatives_come_from_one_micro_batch(tmp_path, backbone, capsys):
    """A step of 2 micro-batches of 8 trains on 16 rows, but each micro-batch's loss contrasts its own 8: the run
    said nothing (a researcher reaching batch 512 this way trains batch 64's objective). The log and the summary say
    it, with the cached step's flags that train the step's objective; no accumulation, nothing said."""
    from tests.cli import in_process

    corpus = tiny_corpus(tmp_path / "corpus.txt")

    def run(name: str, *flags: str):
        return in_process(run_unsup.main, [
            "--method", "simcse", "--model_name_or_path", str(backbone), "--train_file", str(corpus), "--max_steps",
            "1", "--eval_strategy", "no", "--output_dir", str(tmp_path / name), *FAST_TRAINING_ARGS, *flags], capsys)

    result = run("accumulated", "--gradient_accumulation_steps", "2")
    assert result.code == 0, result.err
    summary = result.out.split("run summary ===", 1)[1]
    assert ("warning: --gradient_accumulation_steps 2: each step averages the gradients of 2 micro-batches, and each "
            "micro-batch's loss contrasts only its own 8 corpus rows (per-device batch x processes), so the in-batch "
            "negatives are those of batch 8, not of batch 16. For the loss of batch 16 in a micro-batch's memory use "
            "--per_device_train_batch_size 16 --cache_chunk_size 8") in summary
    plain = run("plain")
    assert plain.code == 0 and "gradient_accumulation_steps" not in plain.out


@pytest.mark.parametrize("processes, gather, contrast, accumulated", [
    (2, True, 16, 64),  # the negatives span the processes
    (2, False, 8, 32),  # --gather_negatives false: each process's own
    (1, True, 8, 32),
])
def test_the_accumulation_warning_counts_the_contrast_batch(processes, gather, contrast, accumulated):
    from types import SimpleNamespace

    from command_line.pipeline import accumulation_warning

    model = SimpleNamespace(config=SimpleNamespace(gather_negatives=gather))
    args = SimpleNamespace(gradient_accumulation_steps=4, per_device_train_batch_size=8, world_size=processes)
    warning = accumulation_warning(model, args)
    assert f"its own {contrast} corpus rows" in warning and f"not of batch {accumulated}." in warning, warning
    assert (f"For the loss of batch {accumulated} in a micro-batch's memory use --per_device_train_batch_size 32 "
            "--cache_chunk_size 8") in warning
    assert accumulation_warning(model, SimpleNamespace(**{**vars(args), "gradient_accumulation_steps": 1})) is None


def test_a_gzip_compressed_corpus_trains_through_the_script(tmp_path, backbone, capsys):
    """``--train_file wiki1m_for_simcse.txt.gz`` was refused as not UTF-8 (byte 0x8b), with advice to convert it from
    Latin-1; it trains on its sentences."""
    import gzip

    from tests.cli import in_process

    plain = tiny_corpus(tmp_path / "corpus.txt", n=24)
    packed = tmp_path / "corpus.txt.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    result = in_process(run_unsup.main, [
        "--method", "simcse", "--model_name_or_path", str(backbone), "--train_file", str(packed), "--max_steps", "1",
        "--eval_strategy", "no", "--output_dir", str(tmp_path / "run"), *FAST_TRAINING_ARGS], capsys)
    assert result.code == 0, result.err
    assert f"corpus: 24 rows of {packed} (skipped 0 blank lines)" in result.out


def test_the_best_checkpoint_is_named_by_the_metric_that_picked_it(tmp_path, backbone, sts_fixture_dir, capsys):
    """``--metric_for_best_model avg_sts``: the summary and ``all_results.json`` give the best checkpoint's score of
    that metric under its own name (it was reported as "STS-B dev" and ``best_stsb_spearman``)."""
    from tests.cli import in_process

    out = tmp_path / "run"
    result = in_process(run_unsup.main, [
        "--model_name_or_path", str(backbone), "--train_file", str(tiny_corpus(tmp_path / "corpus.txt")),
        "--senteval_dir", str(sts_fixture_dir), "--max_steps", "4", "--eval_steps", "2", "--output_dir", str(out),
        "--metric_for_best_model", "avg_sts", *FAST_TRAINING_ARGS], capsys)
    assert result.code == 0, result.err
    results = json.loads((out / "all_results.json").read_text())
    state = json.loads((Path(results["best_model_checkpoint"]) / "trainer_state.json").read_text())
    best = max(entry["eval_avg_sts"] for entry in state["log_history"] if "eval_avg_sts" in entry)
    assert results["best_avg_sts"] == best and "best_stsb_spearman" not in results
    assert f"best checkpoint: {results['best_model_checkpoint']} (STS-B and SICK-R dev mean {best:.2f})" in result.out


def test_gradient_checkpointing_recomputes_the_layers_without_a_deprecation_warning(tmp_path, backbone, monkeypatch):
    """``--gradient_checkpointing true``, this repo's flag (transformers 5.20's only name): from transformers 5.23 the
    Trainer's arguments warned on every such run that it is deprecated in favour of ``activation_checkpointing``
    (which 5.20 lacks). It is handed over under the new name where there is one: no warning, and the backbone's
    layers are still recomputed in the backward pass (each layer's forward through ``checkpoint``)."""
    import warnings

    import transformers.modeling_utils

    calls = []
    checkpoint = transformers.modeling_utils.checkpoint

    def counted(*args, **kwargs):
        calls.append(1)
        return checkpoint(*args, **kwargs)

    monkeypatch.setattr(transformers.modeling_utils, "checkpoint", counted)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train(["--model_name_or_path", str(backbone), "--train_file", str(tiny_corpus(tmp_path / "c.txt")),
               "--output_dir", str(tmp_path / "run"), "--max_steps", "1", "--eval_strategy", "no",
               "--per_device_train_batch_size", "4", "--gradient_checkpointing", "true"])
    assert not [w for w in caught if "checkpointing" in str(w.message)], [str(w.message) for w in caught]
    assert len(calls) >= 2  # both layers of the tiny backbone, in the training step
