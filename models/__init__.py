"""Contrastive sentence-embedding models: one shared base, one small subclass per paper."""
from .base import ContrastiveModel, ContrastiveOutput, load_backbone
from .config import ContrastiveConfig
from .registry import MODEL_CLASSES, load_contrastive_model, model_class_for
from .simcse import SimCSEModel, SupervisedSimCSEModel

__all__ = [
    "ContrastiveConfig", "ContrastiveModel", "ContrastiveOutput", "MODEL_CLASSES", "SimCSEModel",
    "SupervisedSimCSEModel", "load_backbone", "load_contrastive_model", "model_class_for",
]
