#!/usr/bin/env python
"""Train an unsupervised (or supervised) contrastive sentence encoder: SimCSE, ESimCSE, SimCSE++, S-SimCSE,
PromptBERT.

    accelerate launch run_unsup.py --method simcse                      # SimCSE paper recipe (BERT-base)
    accelerate launch run_unsup.py --method esimcse --dup_rate 0.32
    python run_unsup.py configs/my_run.yaml --learning_rate 1e-5        # a config file, then overrides

Parse flat dataclasses -> build the method's model around the backbone -> load the corpus -> CLTrainer (STS-B dev
every 125 steps, best checkpoint kept) -> export a plain HF folder and a sentence-transformers folder -> print a
summary. Checks run before anything is loaded or written (command_line/preflight.py); a user error prints one message
and exits non-zero (docs/errors.md; CSE_DEBUG=1 shows the traceback).
"""
from __future__ import annotations

from transformers import set_seed

from data.corpus import SUP_HINT, UNSUP_HINT
from command_line.arguments import CLTrainingArguments, DataArguments, MethodArguments, ModelArguments, parse_args
from trainers.errors import run_cli
from command_line.pipeline import build_and_train, setup_logging
from command_line.preflight import preflight, resolve_backbone


def main(argv: list[str] | None = None) -> dict[str, float]:
    model_args, data_args, method_args, training_args = parse_args(
        (ModelArguments, DataArguments, MethodArguments, CLTrainingArguments), argv, description=__doc__)
    setup_logging(training_args)
    settings = method_args.explicit_settings()
    resolve_backbone(model_args, training_args)
    preflight(training_args, data_args, {"--model_name_or_path": model_args.model_name_or_path,
                                         "--insert_mlm_name_or_path": settings.get("insert_mlm_name_or_path")},
              corpus_hint=SUP_HINT if method_args.method == "sup_simcse" else UNSUP_HINT,
              cache_dir=model_args.cache_dir)
    set_seed(training_args.seed)  # before the model: the projector's initialisation is part of the run
    return build_and_train(method_args.method, settings, model_args, data_args, method_args, training_args, argv)


if __name__ == "__main__":
    run_cli(main)
