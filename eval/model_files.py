"""Whether a saved model's weight files are whole, read from their headers and sizes without loading a tensor: an
interrupted download or save leaves a ``model.safetensors`` shorter than its header says, which the libraries
report only as a ``SafetensorError`` traceback once loading starts. Used before anything loads by the training
scripts (the backbone, DiffCSE's generator, ``--resume_from_checkpoint``) and by ``python -m eval``."""
from __future__ import annotations

import json
import struct
import zipfile
from pathlib import Path

def safetensors_header(path: Path) -> tuple[int, dict]:
    """(header length, header) of a safetensors file: an 8-byte length, then the JSON header; ``ValueError`` names
    the file when it is truncated or its header unreadable."""
    size = path.stat().st_size
    with path.open("rb") as handle:
        prefix = handle.read(8)
        if len(prefix) < 8:
            raise ValueError(f"{path} is truncated ({size} bytes)")
        (header_len,) = struct.unpack("<Q", prefix)
        if header_len > size - 8:
            raise ValueError(f"{path} is truncated ({size} bytes; its header alone needs {header_len + 8})")
        try:
            return header_len, json.loads(handle.read(header_len))
        except ValueError:
            raise ValueError(f"{path} is corrupt (its header is not valid JSON)") from None


def safetensors_problem(path: Path) -> str | None:
    """Why a safetensors file is not whole (its header gives the size it must have), or ``None``."""
    try:
        header_len, header = safetensors_header(path)
    except ValueError as error:
        return str(error)
    end = max((entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"), default=0)
    expected = 8 + header_len + end
    size = path.stat().st_size
    return f"{path} is truncated ({size} bytes of {expected})" if size < expected else None


def archive_problem(path: Path) -> str | None:
    """A torch archive (``pytorch_model.bin``, ``optimizer.pt``, ...) is a zip file whose directory is at its end."""
    return None if zipfile.is_zipfile(path) else f"{path} is truncated or corrupt (not a complete torch archive)"


#: The index of a sharded ``save_pretrained``.
SHARD_INDEX = "model.safetensors.index.json"


def shard_names(index: Path) -> list[str] | None:
    """The shard files a ``model.safetensors.index.json`` lists (sorted, once each); ``None`` when it is unreadable."""
    try:
        return sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
    except (ValueError, KeyError, AttributeError, UnicodeDecodeError):
        return None


def saved_weights_problem(folder: Path) -> str | None:
    """Why the weight files present in ``folder`` cannot load (``None``: whole, or none there): ``model.safetensors``,
    the shards a ``model.safetensors.index.json`` lists, ``pytorch_model.bin``."""
    files = [folder / "model.safetensors"]
    index = folder / SHARD_INDEX
    if index.is_file():
        shards = shard_names(index)
        if shards is None:
            return f"{index} is not a valid shard index (a truncated save?)"
        missing = [name for name in shards if not (folder / name).is_file()]
        if missing:
            return f"{index} lists {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} not in {folder}"
        files += [folder / name for name in shards]
    for path in files:
        problem = safetensors_problem(path) if path.is_file() else None
        if problem:
            return problem
    bin_file = folder / "pytorch_model.bin"
    return archive_problem(bin_file) if bin_file.is_file() else None


__all__ = ["SHARD_INDEX", "archive_problem", "safetensors_header", "safetensors_problem", "saved_weights_problem",
           "shard_names"]
