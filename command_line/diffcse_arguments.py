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
from dataclasses import dataclass, field, make_dataclass
from typing import Any

from models.config import DIFFCSE
from models.presets import TASK_PROFILES
from trainers.errors import UsageError

from .arguments import CLTrainingArguments, SettingArguments, flag_value, setting_fields
from .config_file import expand_config_file

@dataclass
class DiffCSEOnlyArguments:
    """Flags of ``run_diffcse.py`` that are not settings: the Table 12/13 profile and DiffCSE's ``--batchnorm``."""

    task_profile: str = field(default="sts", metadata={
        "help": "sts (Table 12: lr 7e-6, lambda 0.005, mask 0.30) | transfer (Table 13: lr 2e-6, lambda 0.05, "
                "mask 0.15). Supplies defaults; explicit flags win.", "choices": list(TASK_PROFILES)})
    batchnorm: bool | None = field(default=None, metadata={
        "help": "BatchNorm projector (default true; false = SimCSE's Linear+Tanh MLP; Table 5). The released "
                "code's name for --projector batchnorm."})

    def explicit_settings(self) -> dict[str, Any]:
        """The settings given, with ``--projector`` / ``--batchnorm`` resolved into one ``projector``."""
        values = super().explicit_settings()
        values["projector"] = resolve_projector(values.get("projector"), self.batchnorm)
        return values


DiffCSEArguments = make_dataclass(
    "DiffCSEArguments", setting_fields(DIFFCSE), bases=(DiffCSEOnlyArguments, SettingArguments),
    namespace={"_argument_group_name": "DiffCSE (the settings of its paper; default: the paper's value)",
               "__doc__": "``run_diffcse.py``'s method flags: DiffCSE's settings and the parts every method has "
                          "(SimCSE++'s on top of DiffCSE is the SimCSE++ paper's Table 4)."})


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
    argv = expand_config_file(list(sys.argv[1:] if argv is None else argv))
    profile = flag_value(argv, "--task_profile", "sts")
    if profile not in TASK_PROFILES:
        raise UsageError(f"--task_profile {profile!r}; choose one of {', '.join(TASK_PROFILES)}")
    defaults = [item for key, value in TASK_PROFILES[profile].items() for item in (f"--{key}", str(value))]
    return defaults + argv


__all__ = ["DiffCSEArguments", "DiffCSETrainingArguments", "expand_argv", "resolve_projector"]
