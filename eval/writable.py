"""Whether a folder can be created and written, found before the work that would write there: the training scripts'
``--output_dir`` (:mod:`command_line.writable`) and ``python -m eval``'s ``--output_json``."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path


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


__all__ = ["creatable_problem"]
