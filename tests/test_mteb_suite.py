"""``python -m eval --suite mteb``: the one-line message without mteb, the export folder it scores, the offline
tasks built from SentEval's files (SICK-R pooled as MTEB's), and - where mteb is installed - mteb's own evaluator
on a tiny export giving the same scores as this repo's SentEval evaluation on the same pairs."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import spearmanr
from sklearn.metrics.pairwise import paired_cosine_distances

from eval.mteb_suite import (MISSING_MTEB, MTEB_NAMES, MTEBSuiteError, senteval_pairs,
                             sentence_transformers_folder)
from eval.sts import STS_TASKS, load_sts

MTEB_SKIP = ("mteb is not installed: it is optional (not in requirements.txt, so CI does not install it) because "
             "mteb 2.26 adds ~270 MB to the install (polars' runtime, pytrec-eval) for this one command; "
             "pip install 'mteb>=2.26,<2.27' to run this test")


def test_without_mteb_the_command_says_how_to_install_it(monkeypatch, tmp_path, capsys):
    from eval.cli import main

    monkeypatch.setitem(sys.modules, "mteb", None)  # `import mteb` raises ImportError
    with pytest.raises(SystemExit) as exit_:
        main(["--suite", "mteb", "--model_name_or_path", str(tmp_path)])
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    assert err == f"error: {MISSING_MTEB}\n" and err.count("\n") == 1
    assert "pip install 'mteb>=2.26,<2.27'" in err


def test_the_folder_it_scores(tmp_path):
    run = tmp_path / "run"
    folder = run / "export" / "sentence-transformers"
    folder.mkdir(parents=True)
    (folder / "modules.json").write_text("[]")
    assert sentence_transformers_folder(run) == folder
    assert sentence_transformers_folder(run / "export") == folder
    assert sentence_transformers_folder(folder) == folder
    (run / "export" / "hf").mkdir()  # the plain folder the README's SentEval example evaluates: its sibling is scored
    assert sentence_transformers_folder(run / "export" / "hf") == folder
    with pytest.raises(MTEBSuiteError, match=r"no sentence-transformers folder .* scores an export's "):
        sentence_transformers_folder(tmp_path)


def test_given_an_exports_hf_folder_the_cli_scores_its_sentence_transformers_sibling(monkeypatch, tmp_path, capsys):
    """``python -m eval --suite mteb --model_name_or_path <run>/export/hf`` (issue 33): the sibling
    ``sentence-transformers/`` folder is scored, and the output says so (the run stops at the next check here:
    ``--mteb_data hub`` offline, so that the test needs neither mteb nor the network)."""
    import eval.mteb_suite
    from eval.cli import main

    monkeypatch.setattr(eval.mteb_suite, "import_mteb", lambda: object())
    monkeypatch.setattr(eval.mteb_suite, "hub_reachable", lambda: False)
    export = tmp_path / "run" / "export"
    (export / "hf").mkdir(parents=True)
    (export / "sentence-transformers").mkdir()
    (export / "sentence-transformers" / "modules.json").write_text("[]")
    with pytest.raises(SystemExit):
        main(["--suite", "mteb", "--mteb_data", "hub", "--model_name_or_path", str(export / "hf")])
    captured = capsys.readouterr()
    assert (f"scoring {export / 'sentence-transformers'}: the sentence-transformers folder of --model_name_or_path "
            f"{export / 'hf'} (--suite mteb needs the pooling built in)") in captured.out
    assert captured.err.startswith("error: --mteb_data hub: the Hugging Face Hub is not reachable here")


def test_mteb_data_hub_offline_is_refused_with_the_alternative(monkeypatch, tmp_path, capsys):
    import eval.mteb_suite
    from eval.cli import main

    monkeypatch.setattr(eval.mteb_suite, "import_mteb", lambda: object())  # runs without mteb installed
    (tmp_path / "modules.json").write_text("[]")
    with pytest.raises(SystemExit):
        main(["--suite", "mteb", "--mteb_data", "hub", "--model_name_or_path", str(tmp_path)])
    assert capsys.readouterr().err == ("error: --mteb_data hub: the Hugging Face Hub is not reachable here "
                                       "(HF_HUB_OFFLINE=1 or no network); --mteb_data senteval (or auto) builds the "
                                       "same tasks from the SentEval files\n")


def test_offline_sick_r_pools_train_trial_and_test_as_mtebs(sts_fixture_dir):
    pooled = senteval_pairs("SICKRelatedness", sts_fixture_dir)
    parts = [load_sts("SICKRelatedness", sts_fixture_dir, split) for split in ("train", "dev", "test")]
    assert len(pooled) == sum(map(len, parts)) == 15
    assert pooled.sent1 == [s for part in parts for s in part.sent1]
    assert len(senteval_pairs("STS12", sts_fixture_dir)) == len(load_sts("STS12", sts_fixture_dir))


@pytest.fixture
def tiny_export(backbone, tmp_path) -> Path:
    from transformers import AutoTokenizer

    from models.export import export_model
    from trainers.methods import build_model

    exported = export_model(build_model("simcse", str(backbone)), AutoTokenizer.from_pretrained(backbone),
                            tmp_path / "run" / "export")
    return exported["sentence-transformers"]


def test_mtebs_evaluator_agrees_with_senteval_on_the_same_pairs(tiny_export, sts_fixture_dir, capsys):
    pytest.importorskip("mteb", reason=MTEB_SKIP)
    from eval.cli import build_parser
    from eval.loading import load_encoder
    from eval.mteb_suite import run_mteb

    # batch size 1: no padding, so a sentence's embedding is the same bits in both evaluations (the tiny random
    # model's cosines all lie within 1e-5 of 1, where any float difference reorders pairs)
    args = build_parser().parse_args(["--suite", "mteb", "--model_name_or_path", str(tiny_export.parent.parent),
                                      "--senteval_dir", str(sts_fixture_dir), "--device", "cpu", "--batch_size", "1"])
    assert args.mteb_data == "auto"  # HF_HUB_OFFLINE=1 (conftest): auto = the SentEval files
    results = run_mteb(args)
    out = capsys.readouterr().out
    assert f"MTEB data: built from the SentEval files in {sts_fixture_dir} (offline: the Hugging Face Hub is not " \
           "reachable)" in out
    assert "  SICK-R: 15 pairs (mteb: 9927)" in out
    assert results["mteb_data"] == "senteval" and list(results)[:8] == [*STS_TASKS, "avg"]

    # mteb's STS score, recomputed on the pairs SentEval's files give (SICK-R: all three files): its cosine is
    # sklearn's paired cosine distance on float32 embeddings (ours is float64: docs/evaluation.md, "MTEB")
    encoder = load_encoder(str(tiny_export), None, device="cpu", batch_size=1)
    for task in STS_TASKS:
        pairs = senteval_pairs(task, sts_fixture_dir)
        cosine = 1 - paired_cosine_distances(encoder.encode(pairs.sent1), encoder.encode(pairs.sent2))
        assert results[task] == pytest.approx(spearmanr(cosine, pairs.scores).statistic * 100, abs=1e-6), task
    assert len(senteval_pairs("SICKRelatedness", sts_fixture_dir)) == 15 != len(load_sts("SICKRelatedness",
                                                                                         sts_fixture_dir))
    assert results["avg"] == pytest.approx(np.mean([results[task] for task in STS_TASKS]))
    assert set(MTEB_NAMES) == set(STS_TASKS)


def test_the_cli_prints_mtebs_table_and_source(tiny_export, sts_fixture_dir, tmp_path, capsys):
    pytest.importorskip("mteb", reason=MTEB_SKIP)
    import json

    from eval.cli import main

    out_json = tmp_path / "mteb.json"
    main(["--suite", "mteb", "--mteb_data", "senteval", "--model_name_or_path", str(tiny_export),
          "--senteval_dir", str(sts_fixture_dir), "--device", "cpu", "--output_json", str(out_json)])
    out = capsys.readouterr().out
    assert "(offline: --mteb_data senteval)" in out and "suite: mteb" in out
    assert "STS12 | STS13 | STS14 | STS15 | STS16 |" in out and "on SentEval files (offline)" in out
    saved = json.loads(out_json.read_text())
    assert saved["mteb_data"] == "senteval" and isinstance(saved["STS12"], float)
