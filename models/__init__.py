"""Contrastive sentence-embedding models: one shared base, one small subclass per paper."""
from .base import ContrastiveModel, ContrastiveOutput, load_backbone
from .config import ContrastiveConfig
from .registry import MODEL_CLASSES, load_contrastive_model, model_class_for
from .simcse import SimCSEModel, SupervisedSimCSEModel
from .esimcse import ESimCSEModel  # registers esimcse
from .simcse_pp import SimCSEPlusPlusModel  # registers simcse_pp
from .s_simcse import SSimCSEModel  # registers s_simcse
from .diffcse import DiffCSEModel  # registers diffcse

__all__ = [
    "ContrastiveConfig", "ContrastiveModel", "ContrastiveOutput", "ESimCSEModel", "MODEL_CLASSES", "SSimCSEModel",
    "DiffCSEModel", "SimCSEModel", "SimCSEPlusPlusModel",
    "SupervisedSimCSEModel", "load_backbone", "load_contrastive_model", "model_class_for",
]
