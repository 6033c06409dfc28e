"""`ContrastiveConfig`: the backbone's own config plus every method hyperparameter.

Everything a trained checkpoint needs to be re-created or evaluated lives here and is saved in ``config.json``
(the original SimCSE code kept method settings in the argparse namespace only, so checkpoints forgot them).
Defaults are the SimCSE paper's unsupervised BERT-base recipe (Gao et al., 2021, Sec. 3 / Appendix A); each
method's own defaults are applied by its model class (see ``models/registry.py``) and by the run scripts.
"""
from __future__ import annotations

from huggingface_hub.dataclasses import strict
from transformers import AutoConfig, PreTrainedConfig
from transformers.configuration_utils import SubConfigSpec

from .poolers import POOLER_TYPES

PROJECTOR_TYPES = ("mlp", "batchnorm", "none")


@strict(accept_kwargs=True)
class ContrastiveConfig(PreTrainedConfig):
    """Configuration of a contrastive sentence encoder.

    ``encoder_config`` is the backbone's config (any ``AutoModel`` architecture); the rest are method fields.

    Shared (SimCSE, Gao et al. 2021):
        method: which paper's objective (``simcse``, ``sup_simcse``, ``esimcse``, ``simcse_pp``, ``s_simcse``,
            ``diffcse``).
        pooler_type: one of ``models.poolers.POOLER_TYPES``.
        mlp_only_train: keep the projector only during training (unsupervised SimCSE's ``cls`` recipe).
        projector: ``mlp`` (Linear+Tanh, SimCSE), ``batchnorm`` (DiffCSE's BN projector) or ``none``.
        temperature: tau of Eq. 1.
        hard_negative_weight: log-weight added to hard-negative logits (supervised SimCSE, Eq. 5 / Appendix).
        gather_negatives: all-gather embeddings across processes so N processes see the global batch.
    """

    model_type = "cse_contrastive"
    sub_configs_defaults = {"encoder_config": SubConfigSpec(config_class=AutoConfig, model_type="bert")}

    encoder_config: PreTrainedConfig | dict | None = None

    # --- shared (SimCSE) ---
    method: str = "simcse"
    pooler_type: str = "cls"
    mlp_only_train: bool = True
    projector: str = "mlp"
    temperature: float = 0.05
    hard_negative_weight: float = 0.0
    gather_negatives: bool = True

    # --- SimCSE++ (Xu et al., 2023); usable on any method ---
    off_dropout: bool = False
    pos_neg_tradeoff: float = 0.9
    off_dropout_form: str = "code"
    dcl_weight: float = 0.0
    dcl_temp: float = 5.0
    dcl_form: str = "code"

    # --- ESimCSE (Wu et al., 2022) ---
    momentum: float = 0.995
    queue_size: int = 160
    queue_through_mlp: bool = True
    gather_queue: bool = False

    # --- S-SimCSE (Zhang & Lan) ---
    dropout_dist: str = "none"
    dropout_low: float = 0.05
    dropout_high: float = 0.15
    sentence_wise_dropout: bool = False

    # --- DiffCSE (Chuang et al., 2022) ---
    generator_name: str | None = None
    masking_ratio: float = 0.30
    lambda_weight: float = 0.005
    condition_before_projector: bool = False
    sample_generator: bool = True

    def __post_init__(self, **kwargs):
        if self.pooler_type not in POOLER_TYPES:
            raise ValueError(f"pooler_type={self.pooler_type!r}; choose one of {', '.join(POOLER_TYPES)}")
        if self.projector not in PROJECTOR_TYPES:
            raise ValueError(f"projector={self.projector!r}; choose one of {', '.join(PROJECTOR_TYPES)}")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        super().__post_init__(**kwargs)

    @property
    def hidden_size(self) -> int:
        """The backbone's hidden size, read from whichever attribute its config uses (BERT ``hidden_size``,
        DistilBERT ``dim``): ``PreTrainedConfig`` maps these through ``attribute_map``."""
        return self.encoder_config.hidden_size

    @property
    def projects_at_test(self) -> bool:
        """Whether the projector is part of the test-time embedding (supervised SimCSE keeps it; unsupervised
        ``cls`` with ``mlp_only_train`` drops it; SimCSE Sec. 6.3)."""
        return self.pooler_type == "cls" and not self.mlp_only_train and self.projector != "none"


__all__ = ["ContrastiveConfig", "PROJECTOR_TYPES"]
