"""The license a backbone's own model card declares, for the export's card (models/ reads no file, so the
training script reads it and passes it to :func:`models.export.export_model`)."""
from __future__ import annotations

from pathlib import Path


def read_backbone_license(backbone: str) -> tuple[str | None, str | None]:
    """``(license, the README.md it was read from)``: the ``license`` of the YAML front matter of the backbone
    folder's ``README.md``, or of a Hub backbone's card in the local Hugging Face cache (never downloaded);
    ``(None, None)`` when there is no such card or it names no license."""
    from huggingface_hub import metadata_load, try_to_load_from_cache
    from huggingface_hub.utils import HFValidationError

    readme = Path(backbone).expanduser() / "README.md"
    if not readme.is_file():
        try:
            cached = try_to_load_from_cache(backbone, "README.md")
        except HFValidationError:  # a local path that is no Hub name
            cached = None
        if not isinstance(cached, str):
            return None, None
        readme = Path(cached)
    license_ = (metadata_load(readme) or {}).get("license")
    return (license_, f"`{readme}`") if isinstance(license_, str) and license_ else (None, None)


__all__ = ["read_backbone_license"]
