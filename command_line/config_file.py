"""Reading a run's yaml/json config file: the one reader both training scripts use.

A config file is a mapping of flag names to values; it becomes ``--key value`` tokens placed BEFORE the
command-line flags, so a flag given after the file wins. Unknown keys are then refused by the parser like unknown
flags (naming them, with a did-you-mean), and method settings are checked against their declaration
(``models.config``).
"""
from __future__ import annotations

from pathlib import Path

from trainers.errors import UsageError

CONFIG_SUFFIXES = (".yaml", ".yml", ".json")


def config_file_to_argv(path: str) -> list[str]:
    """A yaml/json config file -> ``--key value`` tokens (so explicit command-line flags placed after it win)."""
    import json

    import yaml

    text = Path(path).read_text(encoding="utf-8")
    values = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    if not isinstance(values, dict):
        raise UsageError(f"{path}: expected a mapping of argument names to values, got {type(values).__name__}")
    argv: list[str] = []
    for key, value in values.items():
        items = value if isinstance(value, list) else [value]
        argv += [f"--{key}", *(str(item) for item in items)]
    return argv




def expand_config_file(argv: list[str]) -> list[str]:
    """``[config file] flags`` -> flags (the file's entries first)."""
    if argv and argv[0].endswith(CONFIG_SUFFIXES) and not argv[0].startswith("-"):
        return config_file_to_argv(argv[0]) + argv[1:]
    return argv


__all__ = ["CONFIG_SUFFIXES", "config_file_to_argv", "expand_config_file"]
