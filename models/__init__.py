"""Contrastive sentence-embedding models: one shared base, one small subclass per paper; no file is read here.

Layout and import rules: docs/architecture.md. The method table (model class + collator factory) and the model
builder are in ``trainers/methods.py``.
"""
from transformers import AutoConfig, AutoModel

from .base import ContrastiveModel, ContrastiveOutput
from .config import ContrastiveConfig
from .diffcse import DiffCSEModel
from .esimcse import ESimCSEModel
from .s_simcse import SSimCSEModel
from .simcse import SimCSEModel, SupervisedSimCSEModel
from .simcse_pp import SimCSEPlusPlusModel
from .views import ViewEmbeddings

# Let AutoConfig / AutoModel open this repo's checkpoints too (no remote code: the classes are registered here).
AutoConfig.register(ContrastiveConfig.model_type, ContrastiveConfig, exist_ok=True)
AutoModel.register(ContrastiveConfig, ContrastiveModel, exist_ok=True)

__all__ = [
    "ContrastiveConfig", "ContrastiveModel", "ContrastiveOutput", "DiffCSEModel", "ESimCSEModel", "SSimCSEModel",
    "SimCSEModel", "SimCSEPlusPlusModel", "SupervisedSimCSEModel", "ViewEmbeddings",
]
