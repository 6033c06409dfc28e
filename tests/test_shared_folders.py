"""tests/shared_folders.py: a folder built once per run, whichever pytest-xdist worker asks first."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.shared_folders import BUILT, built_once


def test_a_folder_is_built_once_for_every_worker_and_again_after_a_failed_build(tmp_path, monkeypatch):
    """In the run's folder above the workers' own (here ``tmp_path``, above a worker's ``popen-gw0``)."""
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    tmp_path_factory = SimpleNamespace(getbasetemp=lambda: tmp_path / "popen-gw0")
    name = "probe"
    builds = []

    def fail(folder):
        builds.append("failed")
        (folder / "half").write_text("written before the failure")
        raise RuntimeError("the build failed")

    def build(folder):
        builds.append("built")
        (folder / "result").write_text("done")

    with pytest.raises(RuntimeError):
        built_once(tmp_path_factory, name, fail)
    folder = built_once(tmp_path_factory, name, build)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")  # the other worker finds it built
    assert built_once(tmp_path_factory, name, build) == folder
    assert builds == ["failed", "built"]
    assert sorted(path.name for path in folder.iterdir()) == [BUILT, "result"]  # the failed build's file is gone
    assert folder == tmp_path / name


def test_without_workers_each_fixture_gets_a_fresh_folder(tmp_path_factory, monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    first = built_once(tmp_path_factory, "probe", lambda folder: (folder / "result").write_text("1"))
    second = built_once(tmp_path_factory, "probe", lambda folder: (folder / "result").write_text("2"))
    assert first != second and (first / "result").read_text() == "1" and (second / "result").read_text() == "2"
