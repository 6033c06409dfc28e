"""Whether the folders a run writes can be created, checked before anything loads: otherwise the Trainer finds out
in its ``__init__``, after the model loaded, with an 18-line traceback."""
from __future__ import annotations

from pathlib import Path

from eval.writable import creatable_problem
from trainers.errors import UserError


def check_creatable(flag: str, path: str | None) -> None:
    """Raise one :class:`UserError` naming ``flag`` when its folder cannot be created or written."""
    if not path:
        return
    problem = creatable_problem(Path(path))
    if problem:
        raise UserError(f"{flag} {path}: {problem}; choose a folder you can write to.")


__all__ = ["check_creatable", "creatable_problem"]  # the latter: eval.writable's, re-exported
