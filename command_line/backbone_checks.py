"""Checks of the backbone a training script was given, on what the libraries read of it, before anything trains:
what would otherwise train on nonsense, or crash when a long enough line arrives.

- :func:`check_tokenizer`: the tokenizer knows words (a folder without tokenizer files gets one of its special
  tokens only from transformers, and every word becomes [UNK]).
- :func:`check_backbone`: an encoder, not an encoder-decoder model (T5, BART:
  :func:`eval.backbone.encoder_decoder_problem`), whose token-embedding table holds every id of its tokenizer
  (:func:`eval.backbone.vocabulary_problem`).
- :func:`check_position_limit`: the longest view (``--max_seq_length`` plus what the method adds: PromptBERT's
  template) fits the backbone's position table (``max_position_embeddings``, less RoBERTa's padding offset); and
  :func:`check_view_width`, once the collator is built, ESimCSE's positive (its repeated words) likewise.
- :func:`check_forward`: the backbone has a token-embedding table (CANINE has none) and its forward runs on token
  ids and an attention mask, the only inputs the models give it (Bros asks for boxes), of any length (Nystromformer
  with fewer landmarks than its ``segment_means_seq_len`` takes that length only).
- :func:`check_pooler`: a pooler that reads position 0 is refused on a causal (decoder-only) backbone, whose
  position 0 sees only the first token, and with a tokenizer that puts no [CLS] token there (XLNet's goes last,
  T5's has none), where it holds the first word; ``--pooler_type avg`` is the one to pass (decided: refused, not
  switched, so that a run trains the pooler its command line says; docs/errors.md).

- :func:`config_override_values`: ``--config_overrides`` read against the backbone's config (its keys must be
  settings of that config), as the values the loader passes to ``from_pretrained``.
- :func:`check_precision`: a backbone whose forward cannot run under bf16 autocast (transformers' DeBERTa v1) is
  refused under ``--bf16`` or ``--eval_dtype bf16``, with ``--bf16 false`` / ``--eval_dtype fp32`` as the fix.
- :func:`check_row_dropout`: per-row dropout (S-SimCSE's rates, SimCSE++'s dropout-off negatives, row-seeded masks)
  is refused on a backbone whose dropout modules do not see the rows first (XLNet: length-first states), and on one
  that draws dropout outside its modules (Longformer's attention, Bloom's residual branches: functional dropout).

The first three run after the tokenizer and config are read and before the weights load; the last four need the
loaded backbone (a forward of two rows each) and run before the corpus loads (:func:`check_built_model`).
"""
from __future__ import annotations

from typing import Any

from transformers import PreTrainedModel

from eval.backbone import (TEXT_ENCODER_ADVICE, backbone_config, bf16_forward_problem, cls_position_problem,
                           draws_outside, encoder_decoder_problem, fixed_length_problem, position_limit,
                           position_zero_sees_only_itself, rows_first_problem, text_encoder_problem, tokenizer_problem,
                           vocabulary_problem)
from models.base import ContrastiveModel
from models.dropout import RowDropout, config_dropout_rates, row_dropout_reasons
from trainers.errors import UsageError, UserError
from trainers.fast_path import typed_checkpointing_flag

def check_tokenizer(flag: str, name: str, tokenizer: Any) -> None:
    """:func:`eval.backbone.tokenizer_problem` as a :class:`UserError`."""
    problem = tokenizer_problem(flag, name, tokenizer)
    if problem:
        raise UserError(problem)


def template_tokens(method: str, settings: dict[str, Any], tokenizer: Any) -> int:
    """Tokens a method's views add around the ``--max_seq_length`` tokens of a sentence: PromptBERT's longer
    template (its prefix and suffix, ``data.prompt_templates``); 0 for the others, whose views are cut to it."""
    if method != "promptbert":
        return 0
    from data.prompt_templates import tokenize_template
    from models.config import SETTINGS, TEMPLATE_SETTINGS
    from trainers.methods import resolve_settings

    resolved = resolve_settings(method, settings)
    templates = [tokenize_template(resolved.get(name, SETTINGS[name].default), tokenizer) for name in TEMPLATE_SETTINGS]
    return max(len(template.prefix) + len(template.suffix) for template in templates)


def check_position_limit(flag: str, name: str, config: Any, max_seq_length: int, added: int = 0) -> None:
    """Refuse a ``--max_seq_length`` (plus ``added`` template tokens) longer than the backbone's position table:
    the run would go on until a long enough line arrives, then crash with a tensor size mismatch."""
    limit = position_limit(config)
    if limit is None or max_seq_length + added <= limit[0]:
        return
    positions, why = limit
    longest = (f"--max_seq_length {max_seq_length} + {added} tokens of PromptBERT's template = "
               f"{max_seq_length + added} positions" if added else f"--max_seq_length {max_seq_length}")
    raise UsageError(f"{longest} is more than {flag} {name} reads: {positions} positions ({why}); a line that long "
                     f"would stop the run with a tensor size error. Pass --max_seq_length {positions - added} or "
                     f"less (the papers use 32).")


def check_view_width(name: str, config: Any, collator: Any, max_seq_length: int) -> None:
    """Refuse a collator whose widest view is longer than the backbone's position table: ESimCSE's positive, its
    sentence with words repeated (``data.augment.LengthExtender.longest_output``; never cut back to
    ``--max_seq_length``, as in the released code), reaches 41 tokens at ``--max_seq_length 32``. With
    ``--max_seq_length`` at the table's size the run went on until a long enough line arrived, then stopped with a
    tensor size error. Names the longest ``--max_seq_length`` that fits, and ``--truncate_positive true``."""
    limit, width_for = position_limit(config), getattr(collator, "width_for", None)
    if limit is None or width_for is None or (width := width_for(max_seq_length)) <= limit[0]:
        return  # no table, or a collator whose views are the sentence (PromptBERT's template: check_position_limit)
    positions, why = limit
    fits = next((length for length in range(max_seq_length - 1, 1, -1) if width_for(length) <= positions), None)
    shorter = f"--max_seq_length {fits} or less, or " if fits is not None else ""
    raise UsageError(f"--max_seq_length {max_seq_length}: ESimCSE's positive view (the sentence with words repeated) "
                     f"reaches {width} tokens, more than --model_name_or_path {name} reads: {positions} positions "
                     f"({why}); a line that long would stop the run with a tensor size error. Pass {shorter}"
                     f"--truncate_positive true (the positive cut back to --max_seq_length: an ablation, not the "
                     f"released code).")


def check_backbone(model_args: Any, max_seq_length: int, method: str, settings: dict[str, Any], tokenizer: Any,
                   generator: str | None = None) -> None:
    """The checks that need no weights, for ``--model_name_or_path`` (its ``tokenizer``, already loaded, and its
    config) and DiffCSE's ``--generator_name`` (its config: it reads the same views)."""
    name = model_args.model_name_or_path
    check_tokenizer("--model_name_or_path", name, tokenizer)
    models = {"--model_name_or_path": name, "--generator_name": generator}
    added = template_tokens(method, settings, tokenizer)
    for flag, model in models.items():
        if model:
            config = backbone_config(model, cache_dir=model_args.cache_dir)
            if flag == "--model_name_or_path":
                problem = encoder_decoder_problem(config)
                if problem:
                    raise UsageError(f"{flag} {model} is {problem}.")
                problem = vocabulary_problem(flag, model, tokenizer, getattr(config, "vocab_size", None))
                if problem:
                    raise UserError(problem)
            check_position_limit(flag, model, config, max_seq_length, added if flag == "--model_name_or_path" else 0)


def config_override_values(model_args: Any) -> dict[str, Any]:
    """``--config_overrides k=v,...`` as ``{k: v}`` typed as the backbone's config types them (transformers'
    ``update_from_string``, one pair at a time so that a refusal names its pair); a pair that is not ``key=value``,
    a key the config does not have or a value of another type is refused, naming the config's dropout settings."""
    import copy

    overrides = model_args.config_overrides
    if not overrides:
        return {}
    name = model_args.model_name_or_path
    config = copy.deepcopy(backbone_config(name, cache_dir=model_args.cache_dir))
    values: dict[str, Any] = {}
    for pair in overrides.split(","):
        key, equals, _ = pair.partition("=")
        try:
            if not key.strip() or not equals:
                raise ValueError("expected key=value pairs separated by commas")
            config.update_from_string(pair)
        except ValueError as exc:
            dropout = list(config_dropout_rates(config, heads=True))
            where = f"--config_overrides {overrides!r}" + (f", {pair!r}" if pair != overrides else "")
            raise UsageError(f"{where}: {exc} (the config of --model_name_or_path {name}; its dropout settings: "
                             f"{', '.join(dropout) or 'none'})") from None
        values[key] = getattr(config, key)
    return values


def check_forward(model: ContrastiveModel, flag: str, name: str) -> None:
    """Refuse a backbone without a token-embedding table (:func:`eval.backbone.token_embeddings_problem`: CANINE) or
    whose forward fails on token ids and an attention mask, the only inputs the models give it
    (:func:`eval.backbone.forward_problem`: Bros needs boxes): both stopped the first probe with a traceback. First a
    backbone that takes inputs of one length only (:func:`eval.backbone.fixed_length_problem`: Nystromformer), with
    the ``--config_overrides`` that runs it (the built model's config, so the override given is seen)."""
    for backbone in (child for child in model.children() if isinstance(child, PreTrainedModel)):
        if fixed_length := fixed_length_problem(backbone.config):
            problem, setting = fixed_length
            raise UsageError(f"{flag} {name} ({type(backbone).__name__}) {problem}. Pass --config_overrides {setting} "
                             f"(recorded with the run and in its export's config.json).")
        if problem := text_encoder_problem(backbone):
            raise UsageError(f"{flag} {name} ({type(backbone).__name__}) {problem}. {TEXT_ENCODER_ADVICE}")


def check_pooler(model: ContrastiveModel, tokenizer: Any, flag: str, name: str) -> None:
    """Refuse a position-0 pooler (``--pooler_type cls``/``cls_before_pooler``) where position 0 does not hold the
    sentence's summary: a backbone whose position 0 sees only the first token (causal), or a tokenizer that puts no
    [CLS] token there (:func:`eval.backbone.cls_position_problem`). Methods that pool elsewhere (PromptBERT's [MASK]
    state) are not concerned. A method that writes position 0 (:meth:`ContrastiveModel.position_zero_writer`:
    DiffCSE's condition h) is refused under such a tokenizer whatever it pools: it would overwrite the first word."""
    writer = model.position_zero_writer()
    if writer and (problem := cls_position_problem(tokenizer)):
        raise UsageError(f"{flag} {name}: {problem}, and {writer}, so h would replace the sentence's first word. "
                         f"Pass a backbone whose tokenizer puts its [CLS] token first (BERT, RoBERTa, DistilBERT, "
                         f"MiniLM, ...).")
    pooler = model.position_zero_pooler()
    if pooler is None:
        return
    if position_zero_sees_only_itself(model.encoder):
        raise UsageError(f"{flag} {name} ({type(model.encoder).__name__}): its position 0 sees only the first token "
                         f"(a causal backbone, as decoder-only ones are), so --pooler_type {pooler} would give every "
                         f"sentence that starts with the same token the same vector. Pass --pooler_type avg (the "
                         f"mean over the sentence's tokens).")
    problem = cls_position_problem(tokenizer)
    if problem:
        raise UsageError(f"{flag} {name}: {problem}; --pooler_type {pooler} reads position 0, so it would train "
                         f"the first word's state as the sentence's embedding. Pass --pooler_type avg (the mean over "
                         f"the sentence's tokens).")


def check_precision(model: ContrastiveModel, bf16: bool, eval_dtype: str, flag: str, name: str) -> None:
    """Refuse bf16 autocast, in training (``--bf16``, the default on a GPU or a CPU with native bf16) or in its
    evaluations (``--eval_dtype bf16``), for a backbone whose forward cannot run under it
    (:func:`eval.backbone.bf16_forward_problem`: transformers' DeBERTa v1), before the corpus loads, rather than at
    the first step or the first evaluation with a traceback."""
    asked = [("--bf16 true, given or this machine's default", "--bf16 false")] if bf16 else []
    asked += [("--eval_dtype bf16", "--eval_dtype fp32")] if eval_dtype == "bf16" else []
    problem = bf16_forward_problem(model.encoder) if asked else None
    if problem:
        flags, fixes = "; ".join(asked_for for asked_for, _ in asked), " ".join(fix for _, fix in asked)
        raise UsageError(f"{flag} {name} ({type(model.encoder).__name__}) cannot run under bf16 autocast ({flags}): "
                         f"its forward stops with \"{problem}\". Pass {fixes} (fp32).")


#: The advice of a per-row dropout refusal, what trains such a backbone: stream masks, which the cached step takes
#: too (each chunk's masks are replayed from its RNG state: trainers/cached_step.py), and a method whose views need no
#: per-row rates.
WITHOUT_ROW_DROPOUT = ("Train it without per-row dropout (stream masks: --dropout_masks stream, with "
                       "--cache_chunk_size too, whose chunks then replay their RNG states; --method simcse, esimcse or "
                       "promptbert)")


def check_row_dropout(model: ContrastiveModel, flag: str, name: str) -> None:
    """Refuse per-row dropout on a backbone whose dropout modules do not see the batch's rows first (XLNet holds its
    states length-first, ``[length, batch, hidden]``): the first training step would stop with "row dropout
    planned for 16 rows but a dropout call has 12", after the corpus and the first evaluation
    (:func:`eval.backbone.rows_first_problem`); and on one that draws dropout outside its modules
    (:func:`eval.backbone.draws_outside`: Longformer's attention probabilities, Bloom's residual branches), which
    trained with those draws from the stream at one rate for every row, without a word: SimCSE++'s dropout-off rows
    noised, row-seeded masks that depended on the process count and the padded width."""
    reasons = row_dropout_reasons(model.config)
    if not reasons:
        return
    for backbone in model.children():
        if not isinstance(backbone, PreTrainedModel) or backbone is not model.encoder and not any(
                isinstance(module, RowDropout) for module in backbone.modules()):
            continue  # the encoder always (OPT's dropout is all functional: no module to replace)
        problem = rows_first_problem(backbone, RowDropout)
        if problem:
            raise UsageError(f"{flag} {name}: {type(backbone).__name__} {problem}, so the per-row dropout of "
                             f"{' and '.join(reasons)} cannot tell its rows apart. {WITHOUT_ROW_DROPOUT}, or use a "
                             f"backbone that holds the batch first (BERT, RoBERTa, MPNet...).")
        if drawn := draws_outside(backbone, RowDropout):
            where = "; ".join(f"{module} ({', '.join(operators)})" for module, operators in list(drawn.items())[:3])
            more = f" and {len(drawn) - 3} more modules" if len(drawn) > 3 else ""
            raise UsageError(f"{flag} {name}: {type(backbone).__name__} draws dropout outside its dropout modules, "
                             f"at {where}{more} (torch's functional dropout at a rate it holds as a number), so the "
                             f"per-row dropout of {' and '.join(reasons)} cannot plan it: those rows would get other "
                             f"masks and rates than planned. {WITHOUT_ROW_DROPOUT}, or use a backbone whose dropout "
                             f"is all modules (BERT, RoBERTa, BigBird...).")


def check_built_model(model: ContrastiveModel, tokenizer: Any, training_args: Any, name: str) -> None:
    """The checks of the built model of ``--model_name_or_path name``, before the corpus loads: its forward
    (:func:`check_forward`), its pooler (:func:`check_pooler`), its precision (:func:`check_precision`),
    ``--gradient_checkpointing`` (:meth:`ContrastiveModel.gradient_checkpointing_refusal`: before the row layout,
    whose advice keeps it), its per-row dropout (:func:`check_row_dropout`)."""
    flag = "--model_name_or_path"
    check_forward(model, flag, name)
    check_pooler(model, tokenizer, flag, name)
    check_precision(model, training_args.bf16, training_args.eval_dtype, flag, name)
    if (flag_typed := typed_checkpointing_flag(training_args)) and (
            refusal := model.gradient_checkpointing_refusal()):
        # the Trainer raised it inside train(), after the corpus and the first evaluation; named as the user typed it
        raise UsageError(refusal.replace("--gradient_checkpointing", flag_typed))
    check_row_dropout(model, flag, name)


__all__ = ["check_backbone", "check_built_model", "check_forward", "check_pooler", "check_position_limit",
           "check_precision", "check_row_dropout", "check_tokenizer", "template_tokens"]
