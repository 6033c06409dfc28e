"""A ``--help`` a new user can read: this project's flags first, in groups, with their (paper-recipe) defaults.

``HfArgumentParser`` puts each dataclass with an ``_argument_group_name`` in its own argparse group and prints
``(default: ...)`` after every flag that has help text. ``TrainingArguments`` brings ~150 inherited Trainer flags;
:func:`hide_inherited_trainer_flags` keeps the recipe's (those ``CLTrainingArguments`` redeclares, plus
:data:`SHOWN_TRAINER_FLAGS`) and hides the rest from ``--help``. ``--help_all`` prints every flag.
"""
from __future__ import annotations

import argparse
from dataclasses import fields
from transformers import TrainingArguments

SHOWN_TRAINER_FLAGS = frozenset({
    "max_steps", "save_steps", "resume_from_checkpoint", "gradient_accumulation_steps", "per_device_eval_batch_size",
    "max_grad_norm", "fp16", "use_cpu", "disable_tqdm", "log_level", "dataloader_num_workers",
})
"""Inherited Trainer flags that a training recipe commonly sets, shown in ``--help`` beside the redeclared ones."""

HIDDEN_REDECLARED = frozenset({"remove_unused_columns", "logging_nan_inf_filter", "greater_is_better",
                               "torch_compile", "eval_max_tokens", "eval_packing", "step_graph",
                               "torch_compile_regions", "config_overrides"})
"""Redeclared only to pin a value the pipeline needs, or a speed knob that changes no score (``eval_max_tokens``,
``eval_packing``, ``step_graph``, ``torch_compile_regions``, declared here), or a backbone knob that the run names
where it is needed (``config_overrides``: the no-dropout warning): hidden from ``--help`` like the inherited flags;
``--help_all`` lists them."""

SHORT_HELP = {
    "max_steps": "Train exactly N optimizer steps (overrides --num_train_epochs; -1: use epochs).",
    "save_steps": "Checkpoint every N steps (with --save_strategy steps).",
    "resume_from_checkpoint": "Continue a run from its checkpoint-N folder, or latest (the newest complete one).",
    "gradient_accumulation_steps": "Accumulate N micro-batches per step (negatives still come from one micro-batch).",
    "per_device_eval_batch_size": "Evaluation batch per process (x16 sentences per encoding batch).",
    "max_grad_norm": "Gradient clipping (0: off).",
    "fp16": "float16 mixed precision (prefer --bf16 where supported).",
    "use_cpu": "Train on the CPU even when a GPU is visible.",
    "disable_tqdm": "No progress bars (training and evaluation).",
    "log_level": "Log level of the main process (passive: warnings; info: every log line).",
    "dataloader_num_workers": "Data-loading worker processes (0: in the main process).",
}
"""One-line help for the inherited Trainer flags ``--help`` shows (the Trainer's own texts run to several lines)."""


USAGE = "%(prog)s [config.yaml|config.json] [--flag value ...]"
"""The usage line (argparse would list all ~100 shown flags in it)."""


class CompactHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """One option string per flag (not HfArgumentParser's dashed alias too), wider lines, and ``(default: X)`` only
    where there is a default to show (``None`` means "the method's paper value", which the help text names)."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=34, width=118)

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if not action.option_strings:
            return super()._format_action_invocation(action)
        option = action.option_strings[0]
        return option if action.nargs == 0 else f"{option} {self._format_args(action, action.dest.upper())}"

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None or action.default is argparse.SUPPRESS:
            return action.help or ""
        return super()._get_help_string(action)


def move_to_front(parser: argparse.ArgumentParser, dest: str) -> None:
    """List the flag ``dest`` first in its help group (e.g. ``--method`` before the methods' own flags)."""
    for group in parser._action_groups:
        for action in group._group_actions:
            if action.dest == dest:
                group._group_actions.remove(action)
                group._group_actions.insert(0, action)
                return


def move_group_first(parser: argparse.ArgumentParser, dest: str) -> None:
    """Show the help group holding ``dest`` first (after argparse's "options")."""
    groups = parser._action_groups
    for group in groups[2:]:  # positional arguments, options, then the dataclasses' groups
        if any(action.dest == dest for action in group._group_actions):
            groups.remove(group)
            groups.insert(2, group)
            return


class HelpAllAction(argparse.Action):
    """``--help_all``: print the help with every flag (the inherited Trainer flags too), then exit."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):  # noqa: A002
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        for action in parser._actions:
            if hasattr(action, "full_help"):
                action.help = action.full_help
        parser.print_help()
        parser.exit()


def redeclared_fields(training_class: type) -> set[str]:
    """Fields a ``TrainingArguments`` subclass declares itself (its recipe), i.e. not inherited unchanged."""
    names: set[str] = set()
    for cls in training_class.__mro__:
        if cls is TrainingArguments or not issubclass(cls, TrainingArguments):
            break
        names.update(vars(cls).get("__annotations__", {}))
    return names


def hide_inherited_trainer_flags(parser: argparse.ArgumentParser, dataclass_types: tuple[type, ...]) -> None:
    """Hide from ``--help`` the inherited Trainer flags that are neither redeclared nor in
    :data:`SHOWN_TRAINER_FLAGS` (they still parse), and add ``--help_all``."""
    trainer_fields = {f.name for f in fields(TrainingArguments)}
    shown = set(SHOWN_TRAINER_FLAGS)
    for cls in dataclass_types:
        if issubclass(cls, TrainingArguments):
            shown |= redeclared_fields(cls)
    shown -= HIDDEN_REDECLARED
    hidden = 0
    for action in parser._actions:
        if action.help is argparse.SUPPRESS:
            continue
        complement = any(o.startswith("--no_") for o in action.option_strings)  # --no_X: same help as --X
        if complement or (action.dest in trainer_fields | HIDDEN_REDECLARED and action.dest not in shown):
            action.full_help = action.help
            action.help = argparse.SUPPRESS
            hidden += not complement
        elif action.dest in SHORT_HELP:
            action.full_help = action.help
            action.help = SHORT_HELP[action.dest]
    parser.add_argument("--help_all", action=HelpAllAction,
                        help=f"show every flag, with the {hidden} inherited Trainer flags hidden here")


__all__ = ["SHORT_HELP", "SHOWN_TRAINER_FLAGS", "USAGE", "CompactHelpFormatter", "HelpAllAction",
           "hide_inherited_trainer_flags", "move_group_first", "move_to_front", "redeclared_fields"]
