"""The whole evaluation through its two entry points: the CLI with --task_set full on the real data, and the
trainer's --eval_transfer (dev accuracies with fasttest settings, as in the original SimCSE)."""
from __future__ import annotations

import json

from eval.cli import main as eval_main
from eval.transfer import load_transfer_task
from tests.test_eval_transfer import write_transfer_fixture
from tests.tiny import tiny_corpus

TRANSFER = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")
STS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness")


def test_cli_full_fasttest_on_real_data(tmp_path, tiny_bert_dir, senteval_dir, torch_single_thread):
    out = tmp_path / "full.json"
    eval_main(["--model_name_or_path", str(tiny_bert_dir), "--pooler", "avg", "--mode", "fasttest",
               "--task_set", "full", "--senteval_dir", str(senteval_dir), "--output_json", str(out),
               "--device", "cpu"])
    results = json.loads(out.read_text())
    assert set(STS) | set(TRANSFER) | {"avg", "transfer_avg", "MRPC_F1"} <= set(results)
    assert all(0 <= results[t] <= 100 for t in TRANSFER)
    assert results["TREC"] > 30  # above chance (6 classes) even for a tiny random encoder: the classifier learns


def test_trainer_eval_transfer_logs_dev_accuracies(tmp_path, tiny_bert_dir, sts_fixture_dir, monkeypatch):
    import run_unsup

    senteval = sts_fixture_dir  # STS fixture + the transfer-task fixture in one SentEval folder
    write_transfer_fixture(senteval)
    monkeypatch.setattr("eval.transfer.load_transfer_task",
                        lambda name, d, check_sizes=True: load_transfer_task(name, d, check_sizes=False))
    metrics = run_unsup.main([
        "--model_name_or_path", str(tiny_bert_dir), "--train_file", str(tiny_corpus(tmp_path / "c.txt")),
        "--senteval_dir", str(senteval), "--max_steps", "1", "--eval_steps", "1", "--eval_transfer", "true",
        "--evaluate_at_start", "false", "--per_device_train_batch_size", "8", "--output_dir", str(tmp_path / "o"),
        "--disable_tqdm", "true", "--use_cpu", "true", "--dataloader_pin_memory", "false"])
    assert {f"eval_{t}" for t in TRANSFER} | {"eval_transfer_avg", "eval_stsb_spearman"} <= set(metrics)
