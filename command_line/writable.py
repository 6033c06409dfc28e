"""Whether the folders a run writes can be created, checked before anything loads: otherwise the Trainer finds out
in its ``__init__``, after the model loaded, with an 18-line traceback."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from trainers.errors import UserError


def creatable_problem(path: Path) -> str | None:
    """Why a folder ``path`` cannot be created or written (``None``: it can). An existing file on the way is found
    by looking; the nearest existing folder is then tried with a uniquely named folder (removed at once), which
    finds what permission bits do not show (a read-only mount, ``/proc``, a root user)."""
    if path.exists() and not path.is_dir():
        return f"{path} is a file, not a folder"
    existing = next(parent for parent in (path, *path.absolute().parents) if parent.exists())
    if not existing.is_dir():
        return f"{existing} is a file, so no folder can be made under it"
    try:
        shutil.rmtree(tempfile.mkdtemp(prefix=".cse-write-check-", dir=existing))
    except OSError as error:
        reason = error.strerror or type(error).__name__
        return f"no folder can be created in {existing} ({reason})"
    return None


def check_creatable(flag: str, path: str | None) -> None:
    """Raise one :class:`UserError` naming ``flag`` when its folder cannot be created or written."""
    if not path:
        return
    problem = creatable_problem(Path(path))
    if problem:
        raise UserError(f"{flag} {path}: {problem}; choose a folder you can write to.")


__all__ = ["check_creatable", "creatable_problem"]
