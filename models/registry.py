"""Method name -> model class, and loading a trained checkpoint as the class it was trained with."""
from __future__ import annotations

from pathlib import Path

from transformers import AutoConfig, AutoModel

from .base import ContrastiveModel
from .config import ContrastiveConfig
from .simcse import SimCSEModel, SupervisedSimCSEModel

MODEL_CLASSES: dict[str, type[ContrastiveModel]] = {
    "simcse": SimCSEModel,
    "sup_simcse": SupervisedSimCSEModel,
}


def register(method: str, model_class: type[ContrastiveModel]) -> None:
    """Add a method (used by the other method modules at import time)."""
    MODEL_CLASSES[method] = model_class


def model_class_for(method: str) -> type[ContrastiveModel]:
    if method not in MODEL_CLASSES:
        raise ValueError(f"unknown method {method!r}; available: {', '.join(sorted(MODEL_CLASSES))}")
    return MODEL_CLASSES[method]


def load_contrastive_model(path: str | Path) -> ContrastiveModel:
    """Load a checkpoint written by this repo (``config.json`` with ``model_type: cse_contrastive``)."""
    config = ContrastiveConfig.from_pretrained(path)
    return model_class_for(config.method).from_pretrained(path, config=config)


# Let AutoConfig / AutoModel open this repo's checkpoints too (no remote code: the classes are registered here).
AutoConfig.register(ContrastiveConfig.model_type, ContrastiveConfig, exist_ok=True)
AutoModel.register(ContrastiveConfig, ContrastiveModel, exist_ok=True)
