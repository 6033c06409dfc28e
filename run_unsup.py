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

from safetensors import SafetensorError
from transformers import set_seed

from data.corpus import SUP_HINT, UNSUP_HINT
from command_line.arguments import CLTrainingArguments, DataArguments, MethodArguments, ModelArguments, parse_args
from trainers.errors import UsageError, UserError, reraise_as, run_cli
from trainers.methods import build_model
from command_line.pipeline import describe_arguments, load_tokenizer, setup_logging, train_and_export
from command_line.preflight import preflight, resolve_backbone
from command_line.backbone_checks import check_backbone, check_built_model, config_override_values


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

    with reraise_as(UsageError, ValueError), reraise_as(
            UserError, OSError, SafetensorError,
            prefix=f"could not load --model_name_or_path {model_args.model_name_or_path}: "):
        tokenizer = load_tokenizer(model_args)
        check_backbone(model_args, data_args.max_seq_length, method_args.method, settings, tokenizer)
        model = build_model(method_args.method, model_args.model_name_or_path,
                            attn_implementation=model_args.attn_implementation, cache_dir=model_args.cache_dir,
                            tokenizer=tokenizer, cache_chunk_size=training_args.cache_chunk_size,
                            config_overrides=config_override_values(model_args), **settings)
    check_built_model(model, tokenizer, training_args, model_args.model_name_or_path)
    return train_and_export(model, tokenizer, training_args, data_args,
                            describe_arguments(model_args, data_args, method_args, training_args, argv=argv))


if __name__ == "__main__":
    run_cli(main)
