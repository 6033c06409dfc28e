"""`ContrastiveConfig`: the backbone's config plus every method hyperparameter, each DECLARED ONCE here.

Each field below is a :func:`setting`: its default (the SimCSE paper's unsupervised BERT-base recipe, Gao et al.
2021, Sec. 3 / Appendix A, unless it belongs to another paper), its help text citing the paper's table, its valid
choices or range, the flag names users copy from the papers' repositories (``--temp``, ``--neg_size``,
``--pos_ratio``), and which training script exposes it. Everything else derives from this declaration:

- the command-line flags of ``run_unsup.py`` / ``run_diffcse.py`` (``command_line.arguments.method_arguments``);
- the validation of a config, a preset, a config file and a command line (:func:`check_settings`);
- the presets (``models.presets``) and each method's own defaults (``method_defaults`` of its model class), which
  are checked against it (a misspelt name is an error, never silently ignored).

Everything a trained checkpoint needs to be re-created or evaluated is saved in ``config.json`` (the original
SimCSE code kept method settings in the argparse namespace only, so checkpoints forgot them).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable, Mapping

from huggingface_hub.dataclasses import strict
from transformers import AutoConfig, PreTrainedConfig
from transformers.configuration_utils import SubConfigSpec

from .poolers import POOLER_TYPES

PROJECTOR_TYPES = ("mlp", "batchnorm", "none")
#: ``--dropout_masks``: torch's generator stream (the papers' code) or masks keyed by row (``models/row_seeded.py``,
#: installed by the training step: ``trainers/keyed_dropout.py``).
DROPOUT_MASKS = ("stream", "row_seeded")
#: ``--dropout_dist``: S-SimCSE's rate distributions (``models.dropout.sample_dropout_rates``); ``none``: fixed rate.
DROPOUT_DISTRIBUTIONS = ("none", "uniform", "normal")

UNSUP, DIFFCSE = "run_unsup", "run_diffcse"
BOTH = (UNSUP, DIFFCSE)


def setting(default: Any, help: str, *, choices: Iterable[Any] | None = None,
            low: float | None = None, high: float | None = None, open_low: bool = False, open_high: bool = False,
            range_reason: str = "", flag: str | None = None, aliases: Iterable[str] = (),
            scripts: tuple[str, ...] = (UNSUP,), group: str = "shared"):
    """Declare one hyperparameter (a dataclass field carrying its documentation and checks in ``metadata``).

    Args:
        default: the value when nothing else sets it (a method's ``method_defaults`` and the presets may).
        help: one line for ``--help``, citing the paper (equation / table) the value comes from.
        choices / low, high (inclusive unless ``open_low`` / ``open_high``): what is valid.
        range_reason: why the range is what it is (shown when a value is refused).
        flag: the command-line name when it differs from the field name (the papers' own flag, e.g. ``temp``).
        aliases: further accepted command-line names (e.g. ESimCSE's ``neg_size`` for ``queue_size``).
        scripts: the training scripts that expose it as a flag (none: set by the code only).
        group: the paper it belongs to, for ``--help`` and docs.
    """
    return dataclasses.field(default=default, metadata={
        "help": help, "choices": None if choices is None else tuple(choices),
        **value_range(low, high, open_low=open_low, open_high=open_high, reason=range_reason), "flag": flag,
        "aliases": tuple(aliases), "scripts": tuple(scripts), "group": group})


def value_range(low: float | None = None, high: float | None = None, *, open_low: bool = False, open_high: bool = False,
                reason: str | tuple[str, str] = "", also: Iterable[Any] = ()) -> dict[str, Any]:
    """The range part of a declaration: ``[low, high]`` (open at an end with ``open_low`` / ``open_high``; ``None``:
    unbounded), ``reason``: why (one text, or one for below and one for above), ``also``: values valid outside it
    (a sentinel such as the Trainer's ``--max_steps -1``). A setting's (:func:`setting`) and a training flag's
    (``command_line.arguments.FLAG_RANGES``), both checked by :func:`check_value`."""
    return {"low": low, "high": high, "open_low": open_low, "open_high": open_high, "range_reason": reason,
            "also": tuple(also)}


@strict(accept_kwargs=True)
class ContrastiveConfig(PreTrainedConfig):
    """Configuration of a contrastive sentence encoder: ``encoder_config`` is the backbone's config (any
    ``AutoModel`` architecture); every other field is declared once below with its paper, help and checks."""

    model_type = "cse_contrastive"
    sub_configs_defaults = {"encoder_config": SubConfigSpec(config_class=AutoConfig, model_type="bert")}

    encoder_config: PreTrainedConfig | dict | None = None

    # ------------------------------------------------------------------ shared (SimCSE, Gao et al. 2021)
    method: str = setting("simcse", "Which paper's objective (set by --method / the script).", scripts=())
    pooler_type: str = setting("cls", "Sentence vector: [CLS] (+MLP: cls), [CLS] alone, or a mean (SimCSE Table 6).",
                               choices=POOLER_TYPES, scripts=BOTH)
    mlp_only_train: bool = setting(True, "Use the MLP projector in training only (unsupervised SimCSE, Sec. 3).",
                                   scripts=BOTH)
    projector: str = setting("mlp", "mlp: Linear+Tanh (SimCSE) | batchnorm: DiffCSE's BN MLP | none.",
                             choices=PROJECTOR_TYPES, scripts=BOTH)
    # The logits are cos/tau with |cos| <= 1; the loss and its gradients grow like 1/tau (measured on a tiny BERT: the
    # first loss is ~13 at tau 0.01, ~1e3 at 1e-4, ~1e11 at 1e-12). The bound 1e-3 (50x below the papers' 0.05) keeps
    # the logits <= 1e3, far inside float16's 65504 (they overflow it below tau ~1.5e-5); above 10 every logit is
    # within 0.1 of 0 and the softmax carries almost no signal.
    temperature: float = setting(
        0.05, "Temperature tau of the InfoNCE loss (SimCSE Eq. 1; 0.05 in every paper).", low=1e-3, high=10.0,
        flag="temp", aliases=("temperature",), scripts=BOTH, range_reason=(
            "the logits are cos/temp, and this temperature makes them overflow (the run trains to NaN)",
            "the logits are cos/temp, and this temperature flattens the softmax"))
    hard_negative_weight: float = setting(
        0.0, "Supervised SimCSE: log-weight added to each anchor's own hard-negative logit (Eq. 5, Table D.1).")
    gather_negatives: bool = setting(
        True, "All-gather embeddings across processes: N processes train the global batch's objective.",
        scripts=BOTH)
    dropout_masks: str = setting(
        "stream", "Dropout masks from torch's generator stream (the papers' code) | row_seeded: keyed by (step, "
        "layer, sentence), so a cached step equals the uncached step (default with --cache_chunk_size).",
        choices=DROPOUT_MASKS, scripts=BOTH)

    # ------------------------------------------------------------------ SimCSE++ (Xu et al., 2023); any method
    off_dropout: bool = setting(False, "SimCSE++: negatives from a dropout-off encoding of the anchors (Sec. 3.2).",
                                scripts=BOTH, group="simcse_pp")
    pos_neg_tradeoff: float = setting(0.9, "SimCSE++: trade-off m of the off-dropout loss (Eq. 3; Table 5).",
                                      low=0.0, open_low=True, aliases=("pos_ratio",), scripts=BOTH, group="simcse_pp")
    off_dropout_form: str = setting(
        "code", "SimCSE++: m scales the positive logit (code: models_re.py; default) or the negative sum (paper Eq. 3).",
        choices=("code", "paper"), scripts=BOTH, group="simcse_pp")
    dcl_weight: float = setting(0.0, "SimCSE++: weight lambda of the dimension-wise contrastive loss (Eq. 6; 0.1).",
                                low=0.0, scripts=BOTH, group="simcse_pp")
    dcl_temp: float = setting(5.0, "SimCSE++: DCL temperature tau_DCL (Eq. 5; 5).", low=0.0, open_low=True,
                              scripts=BOTH, group="simcse_pp")
    dcl_form: str = setting("code", "SimCSE++: DCL as in the code (BatchNorm, /N, mean; default) or as printed (Eq. 5).",
                            choices=("code", "paper"), scripts=BOTH, group="simcse_pp")
    noise_study: str = setting("none", "SimCSE++ Table 1: +/- noise in the positive or the negative pairs.",
                               choices=("none", "pos_plus", "pos_minus", "neg_plus", "neg_minus"), group="simcse_pp")
    noise_variance: float = setting(0.1, "SimCSE++ Table 1: variance of the added Gaussian noise.", low=0.0,
                                    group="simcse_pp")
    noise_samples: int = setting(10, "SimCSE++ Table 1: K dropout samples averaged for '-' noise.", low=1,
                                 group="simcse_pp")
    barlow_weight: float = setting(0.0, "SimCSE++ Table 2: weight of an added BarlowTwins loss (0 = off).", low=0.0,
                                   group="simcse_pp")
    barlow_lambda: float = setting(0.0051, "SimCSE++ Table 2: BarlowTwins off-diagonal weight.", group="simcse_pp")
    barlow_pad: int = setting(0, "SimCSE++ Table 2: M standard-Gaussian embeddings padded in (100/300/704).",
                              low=0, group="simcse_pp")

    # ------------------------------------------------------------------ ESimCSE (Wu et al., 2022)
    momentum: float = setting(0.995, "ESimCSE: EMA coefficient lambda of the momentum encoder (Eq. 5; Table 9).",
                              low=0.0, high=1.0, open_high=True, group="esimcse")
    queue_size: int = setting(160, "ESimCSE: queue length (2.5 x batch 64; Table 10 tries 1-3 x batch).", low=0,
                              aliases=("neg_size",), group="esimcse")
    queue_through_mlp: bool = setting(
        False, "ESimCSE: queue = momentum [CLS] through the ONLINE MLP (code) instead of the momentum MLP (paper).",
        group="esimcse")
    gather_queue: bool = setting(
        True, "ESimCSE: every process enqueues the gathered global batch (code: a per-process queue).",
        group="esimcse")
    dup_rate: float = setting(0.32, "ESimCSE: maximal repetition rate (Eq. 3; Table 3: 0.32 for BERT-base).",
                              low=0.0, high=1.0, group="esimcse")
    dup_type: str = setting("subword", "ESimCSE: repeat sub-words (default) or whole words (Table 4).",
                            choices=("subword", "word"), group="esimcse")
    dup_length_rule: str = setting(
        "paper", "ESimCSE: dup_len ~ U{0..max(2, int(dup_rate*N))} (paper Eq. 3) | randrange(min(10, int(dup_rate*"
        "len))), len incl. [CLS]/[SEP] (code).", choices=("paper", "code"), group="esimcse")
    resample_repetition: bool = setting(
        True, "ESimCSE: a new repetition every time a sentence is seen (false = the code's repeat-once cache).",
        group="esimcse")
    truncate_positive: bool = setting(
        False, "ESimCSE: cut the repeated positive back to max_seq_length (the released code never cuts it).",
        group="esimcse")
    length_extension: str = setting(
        "repetition", "ESimCSE Table 4/5: repetition | stopword | mask | mlm_prediction insertion | none.",
        choices=("repetition", "stopword", "mask", "mlm_prediction", "none"), group="esimcse")
    insert_mlm_name_or_path: str | None = setting(
        None, "ESimCSE Table 5: masked LM predicting inserted [MASK]s (the encoder's vocabulary).", group="esimcse")
    momentum_contrast: bool = setting(
        True, "ESimCSE: momentum encoder + queue negatives (false = repetition alone, Table 4).", group="esimcse")

    # ------------------------------------------------------------------ S-SimCSE (Zhang & Lan)
    dropout_dist: str = setting("none", "S-SimCSE: distribution of dropout rates (uniform for s_simcse; none = fixed).",
                                choices=DROPOUT_DISTRIBUTIONS, group="s_simcse")
    dropout_low: float = setting(0.05, "S-SimCSE: lowest sampled dropout rate (Sec. 3.1; mean 0.1 = SimCSE's).",
                                 low=0.0, high=1.0, open_high=True, group="s_simcse")
    dropout_high: float = setting(0.15, "S-SimCSE: highest sampled dropout rate.", low=0.0, high=1.0,
                                  open_high=True, group="s_simcse")
    sentence_wise_dropout: bool = setting(
        False, "S-SimCSE: a rate per sentence ('w/ sd', Eq. 4) instead of one per forward pass (Table 1).",
        group="s_simcse")
    dropout_sample_per_op: bool = setting(
        True, "S-SimCSE: redraw the rate at every dropout operation (Sec. 3.1) instead of once per pass.",
        group="s_simcse")

    # ------------------------------------------------------------------ reproduction fidelity (models/presets.py)
    fidelity: str | None = setting(
        None, "paper | official_code: set every paper-vs-code switch at once (explicit flags still win; "
        "models/presets.py).", choices=(None, "paper", "official_code"), scripts=BOTH)

    # ------------------------------------------------------------------ DiffCSE (Chuang et al., 2022)
    generator_name: str | None = setting(
        None, "DiffCSE: the generator, any masked LM sharing the encoder's vocabulary (Table 6 compares sizes).",
        scripts=(DIFFCSE,), group="diffcse")
    masking_ratio: float = setting(0.30, "DiffCSE: share of tokens masked for the generator (Table 12: 0.30).",
                                   low=0.0, high=1.0, open_low=True, open_high=True, scripts=(DIFFCSE,),
                                   group="diffcse")
    lambda_weight: float = setting(0.005, "DiffCSE: weight lambda of the RTD loss (Table 12: 0.005).", low=0.0,
                                   scripts=(DIFFCSE,), group="diffcse")
    condition_before_projector: bool = setting(
        False, "DiffCSE: condition the discriminator on [CLS] before the projector (the code's --before_mlp).",
        scripts=(DIFFCSE,), group="diffcse")
    sample_generator: bool = setting(
        True, "DiffCSE: sample replacements from the generator (paper) or take its argmax (code).",
        scripts=(DIFFCSE,), group="diffcse")
    generator_dropout: bool = setting(
        False, "DiffCSE: generator dropout on during training (code: model.train() reaches it); never trained.",
        scripts=(DIFFCSE,), group="diffcse")
    generator_config: dict | None = setting(None, "DiffCSE: the generator's own config (filled by the builder).",
                                            scripts=(), group="diffcse")
    rtd_edit: str = setting("replace", "DiffCSE: replace (MLM replacement) | insert | delete (Table 4).",
                            choices=("replace", "insert", "delete"), scripts=(DIFFCSE,), group="diffcse")
    mask_style: str = setting("mask", "DiffCSE: every masked token -> [MASK] (paper) | bert: 80/10/10 (code).",
                              choices=("mask", "bert"), scripts=(DIFFCSE,), group="diffcse")
    generator_all_positions: bool = setting(
        False, "DiffCSE: use the generator's prediction at every position, not only the masked ones (code).",
        scripts=(DIFFCSE,), group="diffcse")
    rtd_all_views: bool = setting(
        False, "DiffCSE: edit both dropout views, each conditioned on its own h (code); default one per sentence.",
        scripts=(DIFFCSE,), group="diffcse")
    rtd_source: str = setting(
        "same", "DiffCSE: same | next: the edited sentence is the next one of the document (Table 3; needs an "
        "ordered train file, documents separated by blank lines).", choices=("same", "next"), scripts=(DIFFCSE,),
        group="diffcse")
    rtd_include_padding: bool = setting(
        False, "DiffCSE: count padded positions as 'not replaced' in the RTD loss (code).", scripts=(DIFFCSE,),
        group="diffcse")
    rtd_condition_site: str = setting(
        "inputs_embeds", "DiffCSE: h replaces the position-0 word embedding (inputs_embeds) or position 0 after the "
        "embeddings' LayerNorm/dropout (embeddings_output, the code).", choices=("inputs_embeds", "embeddings_output"),
        scripts=(DIFFCSE,), group="diffcse")
    use_contrastive_loss: bool = setting(
        True, "DiffCSE: false = Table 3's 'w/o contrastive loss' (RTD alone).", scripts=(DIFFCSE,), group="diffcse")

    # ------------------------------------------------------------------ PromptBERT (Jiang et al., 2022)
    prompt_template: str = setting(
        '*cls*_This_sentence_of_"*sent_0*"_means*mask*.*sep+*', "PromptBERT: view 0's and the test template (Sec. 4).",
        aliases=("mask_embedding_sentence_template",), group="promptbert")
    prompt_template_positive: str = setting(
        '*cls*_This_sentence_:_"*sent_0*"_means*mask*.*sep+*', "PromptBERT: view 1's template (Sec. 5).",
        aliases=("mask_embedding_sentence_different_template",), group="promptbert")
    template_denoising: bool = setting(
        True, "PromptBERT: template denoising in training (Sec. 5).",
        aliases=("mask_embedding_sentence_delta",), group="promptbert")
    test_denoising: bool = setting(False, "PromptBERT: denoise at test time too (eval_only.sh: no).", group="promptbert")
    dev_denoising: bool = setting(True, "PromptBERT: denoise in the dev evaluation (the code: yes).", group="promptbert")
    eval_add_period: bool = setting(False, "PromptBERT: '.' after a test sentence (evaluation.py).", group="promptbert")
    prompt_token_ids: dict | None = setting(
        None, "PromptBERT: the templates' token ids (filled by the builder from the tokenizer).", scripts=(),
        group="promptbert")

    def __post_init__(self, **kwargs):
        unknown = sorted(set(kwargs) - set(TOLERATED_EXTRA_KEYS))
        if unknown:
            raise ValueError(unknown_settings_message(unknown, "ContrastiveConfig"))
        check_settings(self.settings())
        check_combinations(self)
        super().__post_init__(**kwargs)

    def settings(self) -> dict[str, Any]:
        """Every declared method setting (:data:`SETTINGS`) with the value this model was built with: the defaults,
        the method's own, the ``fidelity`` preset and the explicit flags, resolved (``trainers.methods``)."""
        return {name: getattr(self, name) for name in SETTINGS}

    @property
    def hidden_size(self) -> int:
        """The backbone's hidden size, read from whichever attribute its config uses (BERT ``hidden_size``,
        DistilBERT ``dim``): ``PreTrainedConfig`` maps these through ``attribute_map``."""
        return self.encoder_config.hidden_size

    def get_text_config(self, decoder: bool | None = None, encoder: bool | None = None) -> PreTrainedConfig:
        """The backbone's config, where transformers reads "the text model's" config: the Trainer's special-token
        alignment (which, reading this config's absent ``pad_token_id``, set one here and warned on every run that
        "the tokenizer has new PAD/BOS/EOS tokens" and the config was updated), token-embedding resizing, a module
        initialiser's ``initializer_range``. This config itself while the backbone's is still a dict (building)."""
        return self.encoder_config if isinstance(self.encoder_config, PreTrainedConfig) else self

    @property
    def projects_at_test(self) -> bool:
        """Whether the projector is part of the test-time embedding (supervised SimCSE keeps it; unsupervised
        ``cls`` with ``mlp_only_train`` drops it; SimCSE Sec. 6.3)."""
        return self.pooler_type == "cls" and not self.mlp_only_train and self.projector != "none"


#: name -> its declaration (a ``dataclasses.Field``), for every method hyperparameter.
SETTINGS: dict[str, dataclasses.Field] = {
    f.name: f for f in dataclasses.fields(ContrastiveConfig) if "scripts" in f.metadata}

#: Keys a ``config.json`` may carry that are neither a setting nor a PreTrainedConfig field (written by older
#: transformers versions; ``name_or_path``: ``AutoConfig.from_pretrained`` passes it); anything else is refused as a
#: misspelling.
TOLERATED_EXTRA_KEYS = ("model_type", "_name_or_path", "name_or_path", "_commit_hash", "_attn_implementation_autoset",
                        "torch_dtype", "use_cache", "pad_token_id", "bos_token_id", "eos_token_id")


def position_table_size(config: Any) -> int | None:
    """How many positions a backbone's ``config`` gives a row (``max_position_embeddings``), or ``None`` for no
    limit: missing, or -1 or 0 (XLNet's relative positions; transformers' config says -1). Read as a limit, -1 cut
    every PromptBERT sentence to -1 - |template| tokens: each row the template alone, one embedding for every
    sentence. ``eval.backbone.position_limit`` takes the table from here, less RoBERTa's padding offset."""
    table = getattr(config, "max_position_embeddings", None)
    return table if isinstance(table, int) and table > 0 else None


def unknown_settings_message(names: Iterable[str], where: str) -> str:
    """``where: unknown setting(s) 'temprature' (did you mean 'temperature'?)``."""
    import difflib

    names = list(names)
    guesses = [m for name in names for m in difflib.get_close_matches(name, SETTINGS, n=1)]
    hint = f" (did you mean {', '.join(repr(g) for g in dict.fromkeys(guesses))}?)" if guesses else ""
    return f"{where}: unknown setting(s) {', '.join(map(repr, names))}{hint}"


def setting_names(name: str) -> tuple[str, ...]:
    """Every spelling of the setting ``name`` (without dashes), each once: its name, its papers' flag, its aliases
    (``temperature``, ``temp``)."""
    meta = SETTINGS[name].metadata
    return tuple(dict.fromkeys(spelling for spelling in (name, meta["flag"], *meta["aliases"]) if spelling))


def flag_of(name: str) -> str:
    """The command-line spelling of a setting (the papers' name where it has one: ``--temp``)."""
    return "--" + (SETTINGS[name].metadata["flag"] or name)


def check_setting(name: str, value: Any) -> None:
    """Raise ``ValueError`` naming the flag, the value and what is valid, if ``value`` is not valid for ``name``."""
    meta = SETTINGS[name].metadata
    if value is None and (SETTINGS[name].default is None or meta["choices"] and None in meta["choices"]):
        return
    if meta["choices"] is not None and value not in meta["choices"]:
        shown = ", ".join(str(c) for c in meta["choices"] if c is not None)
        raise ValueError(f"{flag_of(name)} {value!r}: choose one of {shown}")
    check_value(flag_of(name), value, meta, f"The papers use {number(SETTINGS[name].default)}."
                if isinstance(SETTINGS[name].default, (int, float)) else "")
    if name in TEMPLATE_SETTINGS:
        check_template(flag_of(name), value)


#: PromptBERT's template settings (the code's syntax: ``*cls*``, ``*sent_0*``, ``*mask*``, ``*sep+*``, ``_`` = space).
TEMPLATE_SETTINGS = ("prompt_template", "prompt_template_positive")
SENTENCE_SLOT, MASK_SLOT = "*sent_0*", "*mask*"


def check_template(flag: str, template: Any) -> None:
    """Refuse a PromptBERT template the code could not have run: it needs one ``*sent_0*`` (the sentence), one
    ``*mask*`` after it (the token whose state is the embedding) and no spaces (``_`` stands for one: the code
    splits on the space that replaces ``*sent_0*``)."""
    if not isinstance(template, str):
        raise ValueError(f"{flag} {template!r}: a template is a string")
    problems = []
    if template.count(SENTENCE_SLOT) != 1:
        problems.append(f"it needs exactly one {SENTENCE_SLOT} (the sentence's slot)")
    if template.count(MASK_SLOT) != 1:
        problems.append(f"it needs exactly one {MASK_SLOT} (the token whose state is the embedding)")
    elif SENTENCE_SLOT in template and template.index(MASK_SLOT) < template.index(SENTENCE_SLOT):
        problems.append(f"its {MASK_SLOT} must come after {SENTENCE_SLOT}")
    if " " in template:
        problems.append("it may not contain spaces (write _ for a space, as the code's templates do)")
    if problems:
        raise ValueError(f"{flag} {template!r}: " + "; ".join(problems) + ". The paper's BERT template is "
                         f"{SETTINGS['prompt_template'].default!r}")


def check_value(flag: str, value: Any, declared: Mapping[str, Any], usual: str) -> None:
    """Raise ``ValueError`` if the number ``value`` of ``flag`` is NaN, infinite where no bound allows it, or
    outside the declared range (:func:`value_range`): one line naming the flag, the value, the valid range, why,
    and ``usual`` (the value to use, e.g. ``The papers use 0.05.``)."""
    low, high = declared.get("low"), declared.get("high")
    finite = not isinstance(value, float) or math.isfinite(value)
    if finite and (low is None and high is None or value in declared.get("also", ())):
        return
    below = low is not None and (value <= low if declared["open_low"] else value < low)
    above = high is not None and (value >= high if declared["open_high"] else value > high)
    if below or above or not finite:  # NaN compares false with every bound; no setting takes an infinity
        opening = "(" if declared["open_low"] or low is None else "["
        closing = ")" if declared["open_high"] or high is None else "]"
        interval = f"{opening}{'-inf' if low is None else number(low)}, {'inf' if high is None else number(high)}" \
                   f"{closing}" + "".join(f" or {number(v)}" for v in declared.get("also", ()))
        reason = declared["range_reason"] if below or above else ""  # NaN: neither end's reason applies
        if isinstance(reason, tuple):
            reason = reason[0] if below else reason[1]
        detail = f": {reason}." if reason else "."
        raise ValueError(f"{flag} {number(value)} is outside the valid range {interval}{detail} {usual}".rstrip())


def number(value: float) -> str:
    """A bound or value as the user would type it: ``0.001``, ``1e-12``, ``4294967295`` (an int in full)."""
    return str(value) if isinstance(value, int) else format(value, "g")


def check_settings(values: dict[str, Any], where: str = "settings") -> None:
    """Check a mapping of settings (a preset, a method's defaults, a config file's method part): every name must
    be declared here and every value valid."""
    unknown = [name for name in values if name not in SETTINGS]
    if unknown:
        raise ValueError(unknown_settings_message(unknown, where))
    for name, value in values.items():
        check_setting(name, value)


def check_combinations(config: "ContrastiveConfig") -> None:
    """Constraints between settings (the single-setting checks are :func:`check_setting`)."""
    if config.dropout_low > config.dropout_high:
        raise ValueError(f"need --dropout_low <= --dropout_high, got {config.dropout_low}, {config.dropout_high}")
    if config.off_dropout and config.noise_study != "none":
        raise ValueError("off_dropout and noise_study both replace the negatives; use one at a time")
    if config.length_extension == "mlm_prediction" and not config.insert_mlm_name_or_path:
        raise ValueError("length_extension='mlm_prediction' needs insert_mlm_name_or_path (a masked-LM checkpoint)")
    if config.rtd_edit != "replace" and (config.mask_style != "mask" or config.generator_all_positions):
        raise ValueError("mask_style='bert' and generator_all_positions apply to rtd_edit='replace' only")


__all__ = ["BOTH", "ContrastiveConfig", "DIFFCSE", "MASK_SLOT", "PROJECTOR_TYPES", "SENTENCE_SLOT", "SETTINGS",
           "TEMPLATE_SETTINGS", "UNSUP", "check_setting", "check_template",
           "check_settings", "check_value", "flag_of", "setting", "setting_names", "value_range"]
