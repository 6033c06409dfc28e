"""``run_diffcse.py``'s arguments: DiffCSE's flags (the original code's names where it had them) and its paper
defaults (Chuang et al., 2022, Appendix A, Table 12, BERT-base STS): lr 7e-6, batch 64, 2 epochs, STS-B dev every
125 steps, masking ratio 0.30, lambda 0.005, tau 0.05, BatchNorm projector, generator distilbert-base-uncased.

``--task_profile transfer`` switches to the transfer-task setting (Table 13): lr 2e-6, lambda 0.05, masking ratio
0.15. A profile only supplies defaults: flags given explicitly (or in a config file) still win.

``--fidelity official_code`` sets every place where the released code differs from the paper (REFERENCE.md):
argmax generator over every position, BERT's 80/10/10 masking, both dropout views edited, padding counted in the
RTD loss, h substituted after the embeddings' LayerNorm/dropout, plus SimCSE++'s code forms when its parts are on.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field, fields
from typing import Any

from .arguments import CONFIG_SUFFIXES, CLTrainingArguments, SharedObjectiveArguments, config_file_to_argv
from .errors import UsageError

TASK_PROFILES: dict[str, dict[str, str]] = {
    # Table 12 (STS, BERT-base) = the dataclass defaults; listed so the profile is explicit in run_arguments.json
    "sts": {"learning_rate": "7e-6", "lambda_weight": "0.005", "masking_ratio": "0.30"},
    # Table 13 (transfer, BERT-base)
    "transfer": {"learning_rate": "2e-6", "lambda_weight": "0.05", "masking_ratio": "0.15"},
}

#: DiffCSE's paper-vs-code switches (the config fields of models/diffcse.py).
DIFFCSE_FIDELITY: dict[str, dict[str, Any]] = {
    "paper": {"sample_generator": True, "generator_dropout": False, "mask_style": "mask",
              "generator_all_positions": False, "rtd_all_views": False, "rtd_include_padding": False,
              "rtd_condition_site": "inputs_embeds"},
    "official_code": {"sample_generator": False, "generator_dropout": True, "mask_style": "bert",
                      "generator_all_positions": True, "rtd_all_views": True, "rtd_include_padding": True,
                      "rtd_condition_site": "embeddings_output"},
}


@dataclass
class DiffCSEArguments(SharedObjectiveArguments):
    """DiffCSE's method flags, plus the objective parts every method has (SimCSE++'s on top of DiffCSE is the
    SimCSE++ paper's Table 4). ``None`` = the default named in the help (or the ``--fidelity`` preset's value)."""

    _argument_group_name = "DiffCSE (the flags of its paper; default None = the paper's value)"

    task_profile: str = field(default="sts", metadata={
        "help": "sts (Table 12: lr 7e-6, lambda 0.005, mask 0.30) | transfer (Table 13: lr 2e-6, lambda 0.05, "
                "mask 0.15). Supplies defaults; explicit flags win.", "choices": list(TASK_PROFILES)})
    generator_name: str = field(default="distilbert-base-uncased", metadata={
        "help": "Generator: any AutoModelForMaskedLM sharing the encoder's vocabulary (Table 6 compares sizes)."})
    masking_ratio: float = field(default=0.30, metadata={"help": "Share of tokens masked for the generator."})
    lambda_weight: float = field(default=0.005, metadata={"help": "Weight of the RTD loss: L = L_contrast + "
                                                                  "lambda * L_RTD."})
    batchnorm: bool | None = field(default=None, metadata={
        "help": "BatchNorm projector (default true; false = SimCSE's Linear+Tanh MLP; Table 5)."})
    condition_before_projector: bool | None = field(default=None, metadata={
        "help": "Condition the discriminator on [CLS] before the projector (the code's --before_mlp); default false."})
    sample_generator: bool | None = field(default=None, metadata={
        "help": "Sample replacements from the generator (paper, default true) or take its argmax (code)."})
    generator_dropout: bool | None = field(default=None, metadata={
        "help": "Generator dropout on during training (code: the generator is a submodule, model.train() reaches "
                "it); default false = the paper's fixed generator in eval mode. Never trained either way."})
    mask_style: str | None = field(default=None, metadata={
        "help": "mask: every masked token -> [MASK] (paper, default) | bert: 80/10/10 (code).",
        "choices": ["mask", "bert"]})
    generator_all_positions: bool | None = field(default=None, metadata={
        "help": "Use the generator's prediction at every position, not only the masked ones (code); default false."})
    rtd_all_views: bool | None = field(default=None, metadata={
        "help": "Edit both dropout views, each conditioned on its own h (code); default false = one per sentence."})
    rtd_include_padding: bool | None = field(default=None, metadata={
        "help": "Count padded positions as 'not replaced' in the RTD loss (code); default false."})
    rtd_condition_site: str | None = field(default=None, metadata={
        "help": "inputs_embeds: h replaces the position-0 word embedding (default) | embeddings_output: h replaces "
                "position 0 after the embeddings' LayerNorm/dropout (code).",
        "choices": ["inputs_embeds", "embeddings_output"]})
    rtd_edit: str | None = field(default=None, metadata={
        "help": "replace (MLM replacement, default) | insert | delete (Table 4).",
        "choices": ["replace", "insert", "delete"]})
    rtd_source: str | None = field(default=None, metadata={
        "help": "same (default) | next: the edited sentence is the next sentence of the document (Table 3); needs "
                "an ordered train file (documents separated by blank lines).", "choices": ["same", "next"]})
    use_contrastive_loss: bool | None = field(default=None, metadata={
        "help": "false = Table 3's 'w/o contrastive loss' (RTD alone); default true."})
    fidelity: str | None = field(default=None, metadata={
        "help": "paper | official_code: set every DiffCSE paper-vs-code switch (and SimCSE++'s forms) at once; "
                "explicit flags still win.", "choices": ["paper", "official_code"]})

    def config_overrides(self, projector: str | None = None) -> dict[str, Any]:
        """``ContrastiveConfig`` keyword arguments: the fidelity preset, then every explicitly given field."""
        from models.presets import fidelity_overrides

        skip = ("task_profile", "batchnorm", "fidelity")
        values: dict[str, Any] = {}
        if self.fidelity is not None:
            values.update({k: v for k, v in fidelity_overrides(self.fidelity).items()})
            values.update(DIFFCSE_FIDELITY[self.fidelity])
        values.update({f.name: getattr(self, f.name) for f in fields(self)
                       if f.name not in skip and getattr(self, f.name) is not None})
        values["projector"] = resolve_projector(projector, self.batchnorm)
        return values


def resolve_projector(projector: str | None, batchnorm: bool | None) -> str:
    """``--projector`` (any method's flag) and ``--batchnorm`` (DiffCSE's) must agree; default batchnorm."""
    if projector is None:
        return "mlp" if batchnorm is False else "batchnorm"
    if batchnorm is not None and (projector == "batchnorm") != batchnorm:
        raise UsageError(f"--projector {projector} contradicts --batchnorm {batchnorm}; give one of them")
    return projector


@dataclass
class DiffCSETrainingArguments(CLTrainingArguments):
    """SimCSE's trainer defaults with DiffCSE's lr (7e-6), 2 epochs and its own output folder."""

    output_dir: str | None = field(default="outputs/diffcse", metadata={
        "help": CLTrainingArguments.__dataclass_fields__["output_dir"].metadata["help"]})
    learning_rate: float = field(default=7e-6, metadata={"help": "Peak learning rate (linear decay); "
                                                                 "--task_profile sets it."})
    num_train_epochs: float = field(default=2.0, metadata={"help": "Passes over the corpus (--max_steps wins)."})


def expand_argv(argv: list[str] | None) -> list[str]:
    """``[config file] flags`` -> flags, with the task profile's defaults placed first (so any later flag wins)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0].endswith(CONFIG_SUFFIXES) and not argv[0].startswith("-"):
        argv = config_file_to_argv(argv[0]) + argv[1:]
    profile = "sts"
    for index, token in enumerate(argv):
        if token == "--task_profile" and index + 1 < len(argv):
            profile = argv[index + 1]
        elif token.startswith("--task_profile="):
            profile = token.split("=", 1)[1]
    if profile not in TASK_PROFILES:
        raise UsageError(f"--task_profile {profile!r}; choose one of {', '.join(TASK_PROFILES)}")
    defaults = [item for key, value in TASK_PROFILES[profile].items() for item in (f"--{key}", value)]
    return defaults + argv


__all__ = ["DIFFCSE_FIDELITY", "DiffCSEArguments", "DiffCSETrainingArguments", "TASK_PROFILES", "expand_argv",
           "resolve_projector"]
