"""``python -m eval`` with a model that is not there says only that: no such folder, or (a Hub name while the Hub
is offline) not in the cache; never transformers' repo-id validation text (issue 21)."""
from __future__ import annotations

import pytest

from eval.cli import main
from tests.cli import subprocess_run

LIBRARY_TEXT = ("Repo id", "repo_id", "huggingface.co", "HFValidationError", "Traceback")


def test_a_missing_folder_is_named_as_such(tmp_path, sts_fixture_dir):
    """The issue's command, as a user runs it."""
    missing = tmp_path / "nope"
    result = subprocess_run("-m eval", ["--model_name_or_path", str(missing), "--senteval_dir", str(sts_fixture_dir)])
    assert result.code == 1
    assert result.err.strip().splitlines() == [
        f"error: --model_name_or_path {missing}: no such folder (and not a Hub model name); pass an existing model "
        "folder or a Hub name such as bert-base-uncased"]


def test_an_uncached_hub_name_offline_says_it_is_not_cached(sts_fixture_dir, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SystemExit) as exit_:
        main(["--model_name_or_path", "cse-repro-tests/no-such-model", "--senteval_dir", str(sts_fixture_dir)])
    assert exit_.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: --model_name_or_path cse-repro-tests/no-such-model: no such local folder, and "
                          "not in the Hugging Face cache while the Hub is offline (HF_HUB_OFFLINE=1)"), err
    assert not any(text in err for text in LIBRARY_TEXT), err
