"""The layout's rules, checked (docs/architecture.md): one declaration per hyperparameter from which the command
lines, the config and the presets derive; misspelt settings are errors; the papers' flag names work; one method
table; ``models/`` reads no file and imports no ``data/``; ``data/`` imports no ``models/``; following a flag from
the command line to where it acts crosses at most four files."""
from __future__ import annotations

import ast
import dataclasses
import functools
from pathlib import Path

import pytest

from models.base import ContrastiveModel
from models.config import BOTH, DIFFCSE, SETTINGS, UNSUP, ContrastiveConfig, check_settings
from models.presets import FIDELITY_PRESETS, TASK_PROFILES, TRAINING_KEYS
from command_line.arguments import MethodArguments, parse_args
from command_line.diffcse_arguments import DiffCSEArguments
from trainers.errors import UsageError
from trainers.methods import METHODS, build_model, resolve_settings

ROOT = Path(__file__).resolve().parents[1]


def module_tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


# ----------------------------------------------------------------------------------------- one declaration
def test_every_setting_is_declared_with_help_and_the_command_lines_derive_from_it():
    for name, declared in SETTINGS.items():
        meta = declared.metadata
        assert meta["help"].strip() and meta["group"], name
        assert set(meta["scripts"]) <= set(BOTH), name
        assert declared.default is None or meta["choices"] is None or declared.default in meta["choices"], name
        check_settings({name: declared.default})  # every default is valid by its own declaration
    for arguments, script in ((MethodArguments, UNSUP), (DiffCSEArguments, DIFFCSE)):
        flags = {f.name: f for f in dataclasses.fields(arguments) if f.name in SETTINGS and f.name != "method"}
        assert set(flags) == {n for n, d in SETTINGS.items() if script in d.metadata["scripts"]}, script
        for name, flag in flags.items():
            assert flag.default is None, name  # None = not given: the method's own default applies
            assert flag.metadata["help"].startswith(SETTINGS[name].metadata["help"]), name


def test_presets_and_method_defaults_name_declared_settings_with_valid_values():
    for preset in FIDELITY_PRESETS.values():
        check_settings(preset)
    for profile in TASK_PROFILES.values():
        check_settings({k: v for k, v in profile.items() if k not in TRAINING_KEYS})
    for method, spec in METHODS.items():
        check_settings(spec.model_class.method_defaults, where=method)
        assert not {k: v for k, v in spec.model_class.method_defaults.items() if SETTINGS[k].default == v}, (
            f"{method}'s method_defaults repeat a declared default")


def test_a_misspelt_setting_is_an_error_everywhere(tmp_path, backbone):
    with pytest.raises(ValueError, match=r"unknown setting\(s\) 'temprature' \(did you mean 'temperature'\?\)"):
        ContrastiveConfig(temprature=0.1)
    with pytest.raises(ValueError, match="did you mean 'dup_rate'"):
        check_settings({"dup_rat": 0.3})
    with pytest.raises(ValueError, match="unknown setting"):
        build_model("simcse", str(backbone), temprature=0.1)
    with pytest.raises(ValueError, match="unknown setting"):
        resolve_settings("esimcse", {"queue_sise": 3})
    config_file = tmp_path / "run.yaml"
    config_file.write_text("method: esimcse\ndup_rat: 0.2\n")
    with pytest.raises(UsageError, match="unknown argument.*--dup_rat.*did you mean --dup_rate"):
        parse_args((MethodArguments,), [str(config_file)])


def test_the_papers_flag_names_keep_working():
    (args,) = parse_args((MethodArguments,), ["--temp", "0.07", "--neg_size", "32", "--pos_ratio", "0.8",
                                              "--pooler_type", "avg", "--mlp_only_train", "false"])
    assert args.explicit_settings() == {"temperature": 0.07, "queue_size": 32, "pos_neg_tradeoff": 0.8,
                                        "pooler_type": "avg", "mlp_only_train": False}
    (args,) = parse_args((MethodArguments,), ["--temperature", "0.1"])
    assert args.explicit_settings() == {"temperature": 0.1}
    (args,) = parse_args((DiffCSEArguments,), ["--lambda_weight", "0.05", "--batchnorm", "false", "--temp", "0.05"])
    assert args.explicit_settings() == {"lambda_weight": 0.05, "temperature": 0.05, "projector": "mlp"}
    with pytest.raises(UsageError, match=r"--temp 0.0001 is outside the valid range \[0.001, 10\]"):
        parse_args((MethodArguments,), ["--temp", "1e-4"])


# ----------------------------------------------------------------------------------------- one table, clean layers
def test_the_registry_lists_every_method_class_once():
    classes = {spec.model_class for spec in METHODS.values()}
    assert len(classes) == len(METHODS) == 7
    assert all(issubclass(cls, ContrastiveModel) for cls in classes)
    assert {m for m, spec in METHODS.items() if spec.script == DIFFCSE} == {"diffcse"}


FILE_READING_CALLS = {"open", "read_text", "read_bytes", "from_pretrained", "getsource", "load_file", "load"}


@pytest.mark.parametrize("path", sorted((ROOT / "models").glob("*.py")), ids=lambda p: p.name)
def test_models_never_read_files_nor_import_data(path):
    for node in ast.walk(module_tree(path)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            assert not any(n.split(".")[0] in ("data", "trainers", "eval", "bench") for n in names), (path, names)
        if isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            assert called not in FILE_READING_CALLS, f"{path.name}:{node.lineno} calls {called}()"


@pytest.mark.parametrize("path", sorted((ROOT / "models").glob("*.py")), ids=lambda p: p.name)
def test_models_never_import_the_keyed_masks(path):
    """Row-seeded masks are the training step's randomness: ``trainers/keyed_dropout.py`` installs them in the
    model's dropout controllers; no model module imports ``models/row_seeded.py``."""
    for node in ast.walk(module_tree(path)):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            named = {module, *(f"{module}.{a.name}" for a in node.names)} if not node.level else {
                module, *(a.name for a in node.names)}
            assert not ({"row_seeded", "models.row_seeded"} & named), (path.name, node.lineno)
        if isinstance(node, ast.Import):
            assert not any(a.name == "models.row_seeded" for a in node.names), (path.name, node.lineno)


@pytest.mark.parametrize("path", sorted((ROOT / "data").glob("*.py")), ids=lambda p: p.name)
def test_data_never_imports_models_or_trainers(path):
    for node in ast.walk(module_tree(path)):
        if isinstance(node, ast.ImportFrom) and node.module:
            assert node.module.split(".")[0] not in ("models", "trainers"), (path, node.module)
        if isinstance(node, ast.Import):
            assert not any(a.name.split(".")[0] in ("models", "trainers") for a in node.names), path


@pytest.mark.parametrize("path", sorted([*(ROOT / "trainers").glob("*.py"), *(ROOT / "models").glob("*.py"),
                                         *(ROOT / "data").glob("*.py"), *(ROOT / "eval").glob("*.py")]),
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_training_core_never_imports_the_command_line_front(path):
    """``command_line/`` (arguments, preflight, help, the scripts' pipeline, the summary) sits on top of the training
    core (``trainers/``) and the layers below it; nothing below imports it."""
    for node in ast.walk(module_tree(path)):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
        assert not any(n.split(".")[0] == "command_line" for n in names), (path, names)


# ----------------------------------------------------------------------------------------- following a flag
#: Modules that read a setting only to REPORT it (the model card's table, the divergence message, the run summary)
#: or to COMPARE a resume's with its checkpoint's (naming the few a resume may change), not on its path.
REPORTING_MODULES = {"models/card.py", "trainers/divergence.py", "command_line/summary.py",
                     "trainers/resume_settings.py"}


LOCAL_PACKAGES = ("models", "trainers", "command_line", "data", "eval")


@functools.cache
def training_path_files() -> tuple[Path, ...]:
    """The training scripts and every local module they import, directly or not (function-level imports too)."""
    seen: dict[str, Path] = {}
    todo = [ROOT / "run_unsup.py", ROOT / "run_diffcse.py"]
    while todo:
        path = todo.pop()
        if str(path) in seen:
            continue
        seen[str(path)] = path
        for node in ast.walk(module_tree(path)):
            modules = ([a.name for a in node.names] if isinstance(node, ast.Import)
                       else [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level
                       else [f"{path.parent.name}.{node.module}"] if isinstance(node, ast.ImportFrom) and node.level
                       and node.module else [])
            for module in modules:
                if module.split(".")[0] in LOCAL_PACKAGES:
                    candidate = ROOT / (module.replace(".", "/") + ".py")
                    package = ROOT / module.replace(".", "/") / "__init__.py"
                    todo += [p for p in (candidate, package) if p.exists()]
    return tuple(sorted(seen.values()))


@functools.cache
def names_in_code(path: Path) -> frozenset[str]:
    """What ``path``'s code - not docstrings or comments - names: attributes, keyword arguments, parameters,
    variables and string constants (read once per test process: every setting's test looks names up in every file)."""
    tree = module_tree(path)
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                  and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, (ast.keyword, ast.arg)) and node.arg is not None:
            names.add(node.arg)
        elif isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            names.add(node.value)
    return frozenset(names)


def files_naming(setting: str) -> set[str]:
    """Files on the training path (:func:`training_path_files`) whose code - not docstrings or comments - names
    ``setting``: an attribute, a keyword argument, a parameter, a variable or a string key."""
    found = {str(path.relative_to(ROOT)) for path in training_path_files() if setting in names_in_code(path)}
    return found - REPORTING_MODULES


@pytest.mark.parametrize("setting, path", [
    ("dup_rate", {"models/config.py", "trainers/methods.py", "data/augment.py"}),
    ("temperature", {"models/config.py", "models/losses.py"}),
    ("masking_ratio", {"models/config.py", "models/presets.py", "trainers/methods.py", "data/diffcse_collator.py"}),
    ("lambda_weight", {"models/config.py", "models/presets.py", "models/diffcse.py"}),
    ("dropout_masks", {"models/config.py", "trainers/methods.py", "models/dropout.py", "models/diffcse.py"}),
])
def test_following_a_flag_from_the_command_line_to_where_it_acts(setting, path):
    """Worked examples (docs/architecture.md): the command line is generated from the declaration
    (``command_line/arguments.py`` never names a setting), the builder / objective passes the value on, and one module
    acts on it."""
    assert files_naming(setting) == path


#: Settings whose name is named in more than four files on the training path, and why.
CROSSING_EXCEPTIONS = {
    "method": "not a hyperparameter but the key of the method table: the table, the argument parser that selects the "
              "script's class, and the run's reports and curves name the method",
    "projector": "the name is also the projector module's attribute (``model.projector``), which the base, ESimCSE's "
                 "momentum copy and the export use; the setting itself is read once, in models/heads.py's builder",
    "off_dropout": "SimCSE++'s dropout-off copy of view 0 acts in three places by nature: the pass's rows "
                   "(models/views.py), their rate 0 (models/dropout.py) and the loss (models/losses.py); plus the "
                   "declaration and SimCSE++'s own default (models/simcse_pp.py)",
}


@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_every_setting_crosses_at_most_four_files_on_the_training_path(setting):
    """Every declared setting, from the command line to where it acts: at most four files (the declaration among
    them), except the few listed in :data:`CROSSING_EXCEPTIONS` with their reason."""
    files = files_naming(setting)
    assert "models/config.py" in files or setting in CROSSING_EXCEPTIONS or not files, (setting, files)
    if setting in CROSSING_EXCEPTIONS:
        assert len(files) > 4, f"{setting} no longer needs its exception: {sorted(files)}"
    else:
        assert len(files) <= 4, f"--{setting} crosses {len(files)} files: {sorted(files)}"


def test_the_cached_step_flag_crosses_four_files():
    """``--cache_chunk_size`` (a training argument): declared in command_line/arguments.py, passed by the scripts'
    shared ``build_and_train`` (command_line/pipeline.py) to the builder (``resolve_settings``: its dropout-mask
    default), which the trainer runs as a cached step."""
    assert files_naming("cache_chunk_size") == {"command_line/arguments.py", "command_line/pipeline.py",
                                                "trainers/methods.py", "trainers/cl_trainer.py"}


def test_the_data_components_vocabularies_match_the_declared_choices():
    """``data/`` cannot import the declaration (it never imports ``models/``), so the modes its components implement
    are checked against the declared choices here: adding a mode on one side only fails."""
    from data.augment import LENGTH_EXTENSIONS
    from data.diffcse_collator import EDITS, MASK_STYLES, SOURCES

    choices = lambda name: set(SETTINGS[name].metadata["choices"])  # noqa: E731
    assert choices("length_extension") == {*LENGTH_EXTENSIONS, "none"}  # "none": no extender at all
    assert choices("rtd_edit") == set(EDITS)
    assert choices("mask_style") == set(MASK_STYLES)
    assert choices("rtd_source") == set(SOURCES)


# ----------------------------------------------------------------------------------------- each paper's equations
def equation_references() -> list[tuple[str, int, int, str]]:
    """``(path, first line, last line, name)`` of every ``path Lx-y `name``` reference in docs/architecture.md's
    table of equations (a bare ``Lx-y `name``` keeps the row's last named path)."""
    import re

    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = text[text.index("## Each paper's equations"):]
    table = table[:table.index("\n## ", 3)] if "\n## " in table[3:] else table
    found = []
    for row in table.splitlines():
        if not row.startswith("| ") or row.startswith("| paper") or row.startswith("| ---"):
            continue
        path = None
        for match in re.finditer(r"(?:`(?P<path>[\w/]+\.py)` )?L(?P<first>\d+)-(?P<last>\d+) `(?P<name>\w+)`", row):
            path = match["path"] or path
            found.append((path, int(match["first"]), int(match["last"]), match["name"]))
    return found


def test_the_table_of_equations_points_at_the_named_code():
    references = equation_references()
    assert len(references) >= 12
    for path, first, last, name in references:
        spans = {(node.lineno, node.end_lineno) for node in ast.walk(module_tree(ROOT / path))
                 if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name}
        assert (first, last) in spans, f"docs/architecture.md: {path} L{first}-{last} is not `{name}` (it is at {spans})"
