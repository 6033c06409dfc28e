"""Reading a run's yaml/json config file: the one reader both training scripts use.

A config file is a mapping of flag names to values; it becomes ``--key value`` tokens placed BEFORE the
command-line flags, so a flag given after the file wins. Unknown keys are then refused by the parser like unknown
flags (naming them, with a did-you-mean), and method settings are checked against their declaration
(``models.config``). A ``null`` (``~``, an empty value) means "not given", as ``HfArgumentParser.parse_yaml_file``
reads it: the flag keeps its default (it became the text ``None``: ``export_dir: null`` exported to ``./None``).
A key given twice in the file, or under two of its names (``temp`` and ``temperature``), is refused: YAML and JSON
readers keep the last one silently, and the value read first is not the one that trains.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from trainers.errors import UsageError

CONFIG_SUFFIXES = (".yaml", ".yml", ".json")


def _given_twice(path: str, key: Any, line: int | None = None) -> UsageError:
    where = f", line {line}" if line is not None else ""
    return UsageError(f"{path}{where}: {key!r} is given twice; keep one (a reader keeps the last one silently)")


def _read_mapping(path: str, text: str) -> Any:
    """The file's top-level value; a key repeated in one mapping raises :class:`UsageError` naming it (and its line,
    in YAML)."""
    import json

    import yaml

    if path.endswith(".json"):
        def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
            mapping: dict[str, Any] = {}
            for key, value in pairs:
                if key in mapping:
                    raise _given_twice(path, key)
                mapping[key] = value
            return mapping

        return json.loads(text, object_pairs_hook=unique)

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):  # noqa: ANN001 - PyYAML's signature
            self.flatten_mapping(node)
            mapping = {}
            for key_node, value_node in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in mapping:
                    raise _given_twice(path, key, key_node.start_mark.line + 1)
                mapping[key] = self.construct_object(value_node, deep=deep)
            return mapping

    return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass


def _names_of_one_setting(keys: list[str]) -> list[tuple[str, str]]:
    """Pairs of ``keys`` that name one method setting (its name, its papers' flag, its aliases:
    ``models.config``)."""
    from models.config import SETTINGS, setting_names

    owner = {spelling: name for name in SETTINGS for spelling in setting_names(name)}
    first: dict[str, str] = {}
    pairs = []
    for key in keys:
        name = owner.get(key)
        if name is not None and name in first:
            pairs.append((first[name], key))
        elif name is not None:
            first[name] = key
    return pairs


def config_file_to_argv(path: str) -> list[str]:
    """A yaml/json config file -> ``--key value`` tokens (so explicit command-line flags placed after it win); a
    ``null`` value is left out (the flag's default), a key repeated or named twice is refused."""
    values = _read_mapping(path, Path(path).read_text(encoding="utf-8"))
    if not isinstance(values, dict):
        raise UsageError(f"{path}: expected a mapping of argument names to values, got {type(values).__name__}")
    for first, second in _names_of_one_setting([str(key) for key in values]):
        raise UsageError(f"{path}: {first!r} and {second!r} name one setting, given {values[first]!r} and "
                         f"{values[second]!r}; keep one")
    argv: list[str] = []
    for key, value in values.items():
        if value is None:  # "not given": the default, as HfArgumentParser reads a yaml null
            continue
        items = value if isinstance(value, list) else [value]
        argv += [f"--{key}", *(str(item) for item in items)]
    return argv


def expand_config_file(argv: list[str]) -> list[str]:
    """``[config file] flags`` -> flags (the file's entries first)."""
    if argv and argv[0].endswith(CONFIG_SUFFIXES) and not argv[0].startswith("-"):
        return config_file_to_argv(argv[0]) + argv[1:]
    return argv


__all__ = ["CONFIG_SUFFIXES", "config_file_to_argv", "expand_config_file"]
