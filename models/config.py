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

    ESimCSE (``dup_*``, ``resample_repetition``, ``truncate_positive``, ``length_extension``,
    ``insert_mlm_name_or_path``, ``momentum_contrast``, ``momentum``, ``queue_*``, ``gather_queue``; docs/esimcse.md), SimCSE++ (``off_dropout*``,
    ``pos_neg_tradeoff``, ``dcl_*``, ``noise_*``, ``barlow_*``; any method; docs/simcse_pp.md), S-SimCSE
    (``dropout_dist``, ``dropout_low``/``high``, ``sentence_wise_dropout``, ``dropout_sample_per_op``;
    docs/s_simcse.md); ``fidelity`` records the ``--fidelity`` preset the run used (models/presets.py).
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
    # SimCSE++ ablations: Table 1 noise study, Table 2 BarlowTwins with artificial padding (docs/simcse_pp.md)
    noise_study: str = "none"
    noise_variance: float = 0.1
    noise_samples: int = 10
    barlow_weight: float = 0.0
    barlow_lambda: float = 0.0051
    barlow_pad: int = 0

    # --- ESimCSE (Wu et al., 2022) ---
    momentum: float = 0.995
    queue_size: int = 160
    queue_through_mlp: bool = True
    gather_queue: bool = False
    # ESimCSE positives and ablations (models/esimcse.py, data/augment.py; docs/esimcse.md)
    dup_rate: float = 0.32
    dup_type: str = "subword"
    dup_length_rule: str = "paper"
    resample_repetition: bool = True
    truncate_positive: bool = False
    length_extension: str = "repetition"
    insert_mlm_name_or_path: str | None = None
    momentum_contrast: bool = True

    # --- S-SimCSE (Zhang & Lan) ---
    dropout_dist: str = "none"
    dropout_low: float = 0.05
    dropout_high: float = 0.15
    sentence_wise_dropout: bool = False
    dropout_sample_per_op: bool = True

    # --- reproduction fidelity preset applied at parse time (models/presets.py); recorded for the model card ---
    fidelity: str | None = None

    # --- DiffCSE (Chuang et al., 2022) ---
    generator_name: str | None = None
    masking_ratio: float = 0.30
    lambda_weight: float = 0.005
    condition_before_projector: bool = False
    sample_generator: bool = True
    generator_dropout: bool = False
    # DiffCSE: generator structure, edits, conditioning and ablations (models/diffcse.py checks them;
    # docs/diffcse.md). generator_config = the generator's own config dict (filled by DiffCSEModel.from_encoder).
    generator_config: dict | None = None
    rtd_edit: str = "replace"
    mask_style: str = "mask"
    generator_all_positions: bool = False
    rtd_all_views: bool = False
    rtd_source: str = "same"
    rtd_include_padding: bool = False
    rtd_condition_site: str = "inputs_embeds"
    use_contrastive_loss: bool = True

    def __post_init__(self, **kwargs):
        if self.pooler_type not in POOLER_TYPES:
            raise ValueError(f"pooler_type={self.pooler_type!r}; choose one of {', '.join(POOLER_TYPES)}")
        if self.projector not in PROJECTOR_TYPES:
            raise ValueError(f"projector={self.projector!r}; choose one of {', '.join(PROJECTOR_TYPES)}")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        check_method_choices(self)
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


# --- ESimCSE / SimCSE++ / S-SimCSE field checks (choices and ranges) ---
METHOD_CHOICES: dict[str, tuple] = {
    "dup_type": ("subword", "word"),
    "dup_length_rule": ("paper", "code"),
    "length_extension": ("repetition", "stopword", "mask", "mlm_prediction", "none"),
    "off_dropout_form": ("code", "paper"),
    "dcl_form": ("code", "paper"),
    "noise_study": ("none", "pos_plus", "pos_minus", "neg_plus", "neg_minus"),
    "dropout_dist": ("none", "uniform", "normal"),
    "fidelity": (None, "paper", "official_code"),
}


def check_method_choices(config: "ContrastiveConfig") -> None:
    """Refuse unknown choices and out-of-range values of the ESimCSE / SimCSE++ / S-SimCSE fields."""
    for name, choices in METHOD_CHOICES.items():
        if getattr(config, name) not in choices:
            raise ValueError(f"{name}={getattr(config, name)!r}; choose one of {', '.join(map(str, choices))}")
    if not 0.0 <= config.dup_rate <= 1.0:
        raise ValueError(f"dup_rate must be in [0, 1], got {config.dup_rate}")
    if not 0.0 <= config.momentum < 1.0:
        raise ValueError(f"momentum must be in [0, 1), got {config.momentum}")
    if config.queue_size < 0 or config.noise_samples < 1 or config.barlow_pad < 0:
        raise ValueError("queue_size and barlow_pad must be >= 0 and noise_samples >= 1")
    if not 0.0 <= config.dropout_low <= config.dropout_high < 1.0:
        raise ValueError(f"need 0 <= dropout_low <= dropout_high < 1, got {config.dropout_low}, {config.dropout_high}")
    if config.dcl_temp <= 0 or config.dcl_weight < 0 or config.pos_neg_tradeoff <= 0:
        raise ValueError("dcl_temp and pos_neg_tradeoff must be > 0 and dcl_weight >= 0")
    if config.off_dropout and config.noise_study != "none":
        raise ValueError("off_dropout and noise_study both replace the negatives; use one at a time")
    if config.length_extension == "mlm_prediction" and not config.insert_mlm_name_or_path:
        raise ValueError("length_extension='mlm_prediction' needs insert_mlm_name_or_path (a masked-LM checkpoint)")


__all__ = ["ContrastiveConfig", "PROJECTOR_TYPES"]
