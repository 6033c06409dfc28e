#!/usr/bin/env python
"""Train DiffCSE (Chuang et al., NAACL 2022): SimCSE + conditional replaced-token detection, on stock transformers.

    accelerate launch run_diffcse.py --model_name_or_path bert-base-uncased \\
        --generator_name distilbert-base-uncased --train_file data/wiki1m_for_simcse.txt   # paper STS recipe
    python run_diffcse.py --task_profile transfer ...                  # Table 13: lr 2e-6, lambda 0.05, mask 0.15
    python run_diffcse.py --fidelity official_code ...                 # the released code's choices
    python run_diffcse.py --rtd_edit insert ...                        # Table 4 ablation (see docs/diffcse.md)

Parse flat dataclasses -> DiffCSE model (encoder + frozen generator + discriminator copied from the loaded encoder)
-> corpus -> CLTrainer (STS-B dev every 125 steps, best checkpoint kept) -> export the sentence encoder only (plain
HF folder + sentence-transformers folder; generator, discriminator and RTD head are dropped) -> print a summary.
Checks run before anything is loaded or written (command_line/preflight.py); a user error prints one message and exits
non-zero (docs/errors.md; CSE_DEBUG=1 shows the traceback).
"""
from __future__ import annotations

from transformers import set_seed

from data.corpus import UNSUP_HINT
from command_line.arguments import DataArguments, ModelArguments, parse_args
from command_line.diffcse_arguments import DiffCSEArguments, DiffCSETrainingArguments, expand_argv
from trainers.errors import UsageError, reraise_as, run_cli
from trainers.methods import resolve_settings
from command_line.pipeline import build_and_train, setup_logging
from command_line.preflight import preflight, resolve_backbone


def main(argv: list[str] | None = None) -> dict[str, float]:
    model_args, data_args, diffcse_args, training_args = parse_args(
        (ModelArguments, DataArguments, DiffCSEArguments, DiffCSETrainingArguments), expand_argv(argv),
        description=__doc__)
    setup_logging(training_args)
    with reraise_as(UsageError, ValueError):
        settings = diffcse_args.explicit_settings()
        generator_name = resolve_settings("diffcse", settings)["generator_name"]
    resolve_backbone(model_args, training_args)
    preflight(training_args, data_args, {"--model_name_or_path": model_args.model_name_or_path,
                                         "--generator_name": generator_name},
              corpus_hint=UNSUP_HINT, cache_dir=model_args.cache_dir)
    set_seed(training_args.seed)  # the RTD head's initialisation and the collator's edits follow the run's seed
    return build_and_train("diffcse", settings, model_args, data_args, diffcse_args, training_args, argv,
                           generator_name)


if __name__ == "__main__":
    run_cli(main)
