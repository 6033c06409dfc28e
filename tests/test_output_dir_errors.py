"""An ``--output_dir`` that cannot be created is refused before anything loads, in one line (issue 33, item 4):
before, the Trainer found out in its ``__init__``, after the model loaded, with an 18-line traceback."""
from __future__ import annotations

from pathlib import Path

import pytest

import run_diffcse
import run_unsup
from tests.cli import in_process
from tests.test_user_errors import base_args
from tests.tiny import save_tiny_generator, tiny_corpus


def unwritable(case: str, tmp_path: Path) -> tuple[Path, str]:
    """An output folder that cannot be made, and why the message says so."""
    a_file = tmp_path / "a_file"
    a_file.write_text("not a folder\n")
    if case == "under_proc":
        return Path("/proc/cse-repro-out"), "no folder can be created in /proc"
    if case == "under_a_file":
        return a_file / "out", f"{a_file} is a file, so no folder can be made under it"
    return a_file, f"{a_file} is a file, not a folder"


@pytest.mark.parametrize("case", ["under_proc", "under_a_file", "an_existing_file"])
@pytest.mark.parametrize("script", [run_unsup, run_diffcse])
def test_an_output_dir_that_cannot_be_created_is_one_line(case, script, backbone, tmp_path_factory, capsys):
    if case == "under_proc" and not Path("/proc/self").is_dir():
        pytest.skip("no /proc on this system")
    inputs, tmp_path = tmp_path_factory.mktemp("inputs"), tmp_path_factory.mktemp("outputs")
    out, reason = unwritable(case, tmp_path)
    prog = Path(script.__file__).name
    argv = base_args(backbone, tiny_corpus(inputs / "corpus.txt"), out) + ["--eval_strategy", "no"]
    if script is run_diffcse:
        argv += ["--generator_name", str(save_tiny_generator(inputs / "generator"))]
    capsys.readouterr()  # the generator's save progress bar
    result = in_process(script.main, argv, capsys, prog=prog)
    assert result.code == 1
    (line,) = result.err.strip().splitlines()  # /proc's reason ends with the system's words: "(No such file ...)"
    assert line.startswith(f"{prog}: error: --output_dir {out}: {reason}"), line
    assert line.endswith("; choose a folder you can write to."), line
    assert [p.name for p in tmp_path.iterdir()] == ["a_file"]  # nothing made or left
