"""DiffCSE (Chuang et al., NAACL 2022): SimCSE + conditional replaced-token detection (RTD).

    L = L_contrast + lambda * L_RTD                                                    (Sec. 3)

- ``L_contrast`` is the shared base's objective, computed by ``super().compute_loss`` (so SimCSE++'s off-dropout
  negatives and DCL switch on for DiffCSE through the config alone, as for every method).
- A frozen masked LM, the *generator* (any ``AutoModelForMaskedLM`` with the encoder's vocabulary; the paper uses
  distilbert-base-uncased; loaded and vocabulary-checked by ``trainers.methods``, passed in), fills the positions
  the collator masked (``data.diffcse_collator``): sampled from its
  distribution (the paper) or its argmax (``sample_generator=False``, the code). It never receives gradients and
  its weights never change. It runs in eval mode (the paper's "fixed" generator) unless ``generator_dropout``: in
  the released code (``diffcse/models.py``) the generator is a submodule of the model, so the Trainer's
  ``model.train()`` switches its dropout on for the no-grad prediction; ``--fidelity official_code`` sets it.
- The *discriminator* is a second copy of the encoder, initialised from the *loaded* pretrained weights
  (:meth:`DiffCSEModel.sync_auxiliary_networks`). It reads the edited sentence x'' with its position-0 input replaced
  by the sentence vector h of the original sentence (after the projector; before it with
  ``condition_before_projector``), and a Linear(h, 2) head predicts, per token, "replaced or not". Gradients reach
  the sentence encoder through h: that is the whole point ("a diff operation" between x and x'').
- Conditioning uses public APIs only: ``rtd_condition_site="inputs_embeds"`` (default) builds the discriminator's
  word embeddings with its own embedding layer, puts h at position 0 and passes ``inputs_embeds=``; the backbone
  then adds position/type embeddings and applies LayerNorm + dropout to h as to any token.
  ``"embeddings_output"`` reproduces the original code exactly (h replaces position 0 *after* the embeddings
  module's LayerNorm/dropout) with a forward hook on ``discriminator.embeddings``, registered once, that reads h
  while :meth:`DiffCSEModel.discriminate` runs.
- Only the sentence encoder (+ projector where the method keeps it) is exported; the generator, discriminator and
  RTD head exist for training only (``models.export`` writes ``model.encoder``).

Ablations (config fields, run_diffcse.py flags): ``use_contrastive_loss=False`` (Table 3 "w/o contrastive loss"),
``rtd_edit`` insert / delete (Table 4), ``rtd_source="next"`` (Table 3), the generator (Table 6), ``rtd_all_views``
(the code edits both dropout views), ``mask_style="bert"`` (the code's 80/10/10 masking),
``generator_all_positions`` (the code's argmax over every position), ``rtd_include_padding`` (the code's loss over
padding), ``generator_dropout`` (the code's generator in training mode).
"""
from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, PreTrainedModel

from .base import ContrastiveModel, drop_unused_pooler
from .config import ContrastiveConfig
from .distributed import world_size
from .dropout import RowDropoutController, install_row_dropout
from .losses import upcast
from .masks import prepare_attention_mask
from .views import ViewEmbeddings

#: Tokenised by both tokenizers in the vocabulary check: catches different normalisation (case, accents) that an
#: identical token -> id table would not.
VOCAB_PROBE = "The Café's naïve CEO paid $1,234.56 for 3 bikes in Zürich — didn't he?"


class VocabularyMismatchError(ValueError):
    """The generator's vocabulary is not the encoder's: its token ids would mean other words to the encoder."""


def check_diffcse_config(config: ContrastiveConfig) -> None:
    """DiffCSE needs its generator's structure in the config (the single settings are checked by the config)."""
    if config.generator_config is None:
        raise ValueError("DiffCSE needs config.generator_config (the generator's structure): build the model with "
                         "trainers.methods.build_model('diffcse', ..., generator_name=...) or load a DiffCSE "
                         "checkpoint")


def check_generator_vocabulary(tokenizer, generator_tokenizer, encoder_config, generator_config) -> None:
    """Raise :class:`VocabularyMismatchError` unless the generator and the encoder share one vocabulary: the same
    embedding-table size, the same token -> id mapping, the same [MASK] id and the same ids for a probe sentence.
    Names are never compared (``bert-base-uncased`` and ``distilbert-base-uncased`` share a vocabulary;
    ``bert-base-cased`` and ``roberta-base`` do not)."""
    problems = []
    if encoder_config.vocab_size != generator_config.vocab_size:
        problems.append(f"embedding tables differ in size: encoder vocab_size={encoder_config.vocab_size}, "
                        f"generator vocab_size={generator_config.vocab_size}")
    encoder_vocab, generator_vocab = tokenizer.get_vocab(), generator_tokenizer.get_vocab()
    if len(encoder_vocab) != len(generator_vocab):
        problems.append(f"tokenizers differ in size: encoder {len(encoder_vocab)} tokens, generator "
                        f"{len(generator_vocab)}")
    moved = [token for token, index in encoder_vocab.items() if generator_vocab.get(token) != index]
    if moved:
        examples = ", ".join(f"{token!r}: {encoder_vocab[token]} vs {generator_vocab.get(token)}"
                             for token in sorted(moved, key=encoder_vocab.get)[:5])
        problems.append(f"{len(moved)} of the encoder's {len(encoder_vocab)} tokens map to another id (or none) in "
                        f"the generator's vocabulary, e.g. {examples}")
    if tokenizer.mask_token_id is None or tokenizer.mask_token_id != generator_tokenizer.mask_token_id:
        problems.append(f"mask token ids differ: encoder {tokenizer.mask_token_id}, generator "
                        f"{generator_tokenizer.mask_token_id}")
    if not problems:
        encoder_ids, generator_ids = tokenizer(VOCAB_PROBE)["input_ids"], generator_tokenizer(VOCAB_PROBE)["input_ids"]
        if encoder_ids != generator_ids:
            problems.append(f"the tokenizers split {VOCAB_PROBE!r} differently (e.g. casing or accent stripping): "
                            f"{encoder_ids} vs {generator_ids}")
    if problems:
        raise VocabularyMismatchError(
            "DiffCSE's generator must share the encoder's vocabulary (its replacements are token ids the encoder "
            "reads), but:\n  - " + "\n  - ".join(problems) + "\nPick a masked LM trained with the encoder's "
            "tokenizer, e.g. distilbert-base-uncased for bert-base-uncased, distilroberta-base for roberta-base.")


def rtd_loss(
    logits: torch.Tensor, labels: torch.Tensor, attention_mask: torch.Tensor, include_padding: bool = False,
    normaliser: torch.Tensor | None = None, width: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""DiffCSE's replaced-token-detection loss (Chuang et al., 2022, Sec. 3), the mean binary cross-entropy of
    the conditional discriminator's per-token predictions:

    .. math:: \mathcal{L}_{RTD} = \frac{1}{|T|} \sum_{(i, t) \in T} -\log \mathrm{softmax}(D(x''_i, h_i)_t)_{y_{i,t}},
              \qquad y_{i,t} = \mathbb{1}(x''_{i,(t)} \neq x_{i,(t)})

    (class 1 = "replaced"). The paper's Eq. sums over tokens and sentences; its code, and this function, take the
    mean, which is the scale its lambda = 0.005 was tuned at.

    Args:
        logits: [N, L, 2] discriminator scores (class 0 = original, 1 = replaced).
        labels: [N, L] in {0, 1}; ignored at padding.
        attention_mask: [N, L], 1 for real tokens.
        include_padding: ``False`` (default): T = the real (non-padding) tokens. ``True``: T = every position of
            the batch's own width, padded ones counting as "not replaced" (label 0), which is what the original
            code's ``CrossEntropyLoss()(scores.view(-1, 2), labels.view(-1))`` over the padded batch does.
        normaliser: the token count |T| of the batch when these rows are some of its sentences: their summed loss /
            |T|, so that the parts of a batch add up to its loss. ``None``: the mean over these rows.
        width: with ``include_padding``, the batch's own width (:func:`batch_width`) when the rows were padded past it
            (the fast path's fixed width): the positions beyond it are not in T. ``None``: every position is.
    """
    logits = upcast(logits).reshape(-1, logits.size(-1))
    real = attention_mask.reshape(-1).bool()
    labels = labels.reshape(-1).long()
    reduction = "mean" if normaliser is None else "sum"
    if include_padding:
        targets = labels.masked_fill(~real, 0)
        if width is not None:  # the columns past the batch's own width: ignored (a [L] mask, no host-device sync)
            beyond = torch.arange(attention_mask.size(-1), device=targets.device) >= width
            targets = targets.view(attention_mask.shape).masked_fill(beyond, -100).reshape(-1)
        loss = F.cross_entropy(logits, targets, ignore_index=-100, reduction=reduction)
    else:
        # Padding positions are ignored (not indexed away: boolean indexing would sync the host with the device).
        loss = F.cross_entropy(logits, labels.masked_fill(~real, -100), ignore_index=-100, reduction=reduction)
    return loss if normaliser is None else loss / normaliser


def batch_width(attention_mask: torch.Tensor) -> torch.Tensor:
    """The width the collator padded the rows of ``attention_mask`` to, its longest row's length (a 0-d tensor on the
    rows' device), whatever width they were padded to since: what ``rtd_loss(include_padding=True)`` counts."""
    return attention_mask.sum(-1).max()


def generator_from_config(generator_config: dict) -> PreTrainedModel:
    """An (untrained) masked LM with the structure recorded in the DiffCSE config; its weights come from the
    checkpoint being loaded."""
    settings = dict(generator_config)
    return AutoModelForMaskedLM.from_config(AutoConfig.for_model(settings.pop("model_type"), **settings))


def condition_first(condition: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
    """The conditional discriminator's input (Sec. 3): ``states`` [N, L, d] with the sentence vector ``condition``
    [N, d] in place of position 0 (in ``states``' dtype)."""
    return torch.cat([condition.unsqueeze(1).to(states.dtype), states[:, 1:]], dim=1)


def check_condition_width(discriminator: nn.Module, hidden_size: int) -> None:
    """Refuse a discriminator whose token embeddings are narrower or wider than the sentence embedding h that
    replaces its position 0 (either site: ALBERT's and ELECTRA's factorised embeddings, ``embedding_size``, are
    mapped to the hidden size only after the embeddings); the first step stopped on a size mismatch before."""
    width = discriminator.get_input_embeddings().weight.shape[1]  # I-BERT's QuantEmbedding has no embedding_dim
    if width != hidden_size:
        raise ValueError(
            f"DiffCSE puts the sentence embedding h ({hidden_size} values, the backbone's hidden size) in place of "
            f"the discriminator's position-0 token embedding, which holds {width} values in "
            f"{type(discriminator).__name__} (its embedding_size, mapped to the hidden size after the embeddings). "
            "Pass a backbone (--model_name_or_path) whose token embeddings are as wide as its hidden states (BERT, "
            "RoBERTa, DistilBERT, MiniLM, ...)")


class DiffCSEModel(ContrastiveModel):
    """Unsupervised DiffCSE: [CLS] + BatchNorm projector in training only, tau 0.05, masking ratio 0.30, lambda 0.005
    with a distilbert-base-uncased generator (the paper's BERT-base STS setting, Table 12)."""

    method_defaults: ClassVar[dict[str, Any]] = {"projector": "batchnorm", "generator_name": "distilbert-base-uncased"}

    @property
    def reads_ordered_corpus(self) -> bool:
        """``rtd_source="next"`` (Table 3): the edited sentence is the next one of the same document."""
        return self.config.rtd_source == "next"

    def __init__(self, config: ContrastiveConfig, encoder: PreTrainedModel | None = None,
                 generator: PreTrainedModel | None = None) -> None:
        check_diffcse_config(config)
        super().__init__(config, encoder=encoder)
        attention = getattr(self.encoder.config, "_attn_implementation", None)
        self.discriminator = AutoModel.from_config(config.encoder_config, attn_implementation=attention)
        drop_unused_pooler(self.discriminator)
        check_condition_width(self.discriminator, config.hidden_size)
        self.rtd_head = nn.Linear(config.hidden_size, 2)
        self.generator = generator if generator is not None else generator_from_config(config.generator_config)
        self.generator.requires_grad_(False)
        #: h while the discriminator reads it at the ``embeddings_output`` site (:meth:`discriminate`), else ``None``.
        self.rtd_condition: torch.Tensor | None = None
        if config.rtd_condition_site == "embeddings_output":
            embeddings = getattr(self.discriminator, "embeddings", None)
            if not isinstance(embeddings, nn.Module):
                raise ValueError(f"rtd_condition_site='embeddings_output' needs a `.embeddings` module; "
                                 f"{type(self.discriminator).__name__} has none: use 'inputs_embeds'")
            embeddings.register_forward_hook(self.put_condition_first)
        # Row-seeded masks reach the discriminator and the generator (its dropout with generator_dropout, and its
        # sampling) too: each row keyed by its own index, whatever else is in the pass.
        self.discriminator_row_dropout = self.generator_row_dropout = None
        if config.dropout_masks == "row_seeded":
            self.discriminator_row_dropout = RowDropoutController(masks="row_seeded", stream=1)
            install_row_dropout(self.discriminator, self.discriminator_row_dropout)
            self.generator_row_dropout = RowDropoutController(masks="row_seeded", stream=2)
            install_row_dropout(self.generator, self.generator_row_dropout)
        self.post_init()  # registers the new submodules' tied weights; initialises rtd_head (loaded modules are kept)
        self.train(self.training)  # the generator's mode follows generator_dropout

    def position_zero_writer(self) -> str:
        """The conditional discriminator takes h in place of the [CLS] token at position 0 (Sec. 3)."""
        return ("DiffCSE's discriminator takes the sentence embedding h in place of the [CLS] token at position 0 "
                "(Sec. 3)")

    def process_split_notes(self) -> list[str]:
        """The base's, and the RTD loss: each process's mean over its own tokens (as the authors' code)."""
        return super().process_split_notes() + ["the RTD loss (each process's mean over its own tokens)"]

    def sync_auxiliary_networks(self) -> None:
        """The discriminator starts as an exact copy of the loaded encoder (same pretrained weights)."""
        self.discriminator.load_state_dict(self.encoder.state_dict())

    def set_auxiliary_modes(self, mode: bool) -> None:
        """``model.train()`` switches the frozen generator's dropout on only with ``generator_dropout`` (the
        released code's behaviour); its weights stay frozen either way."""
        self.generator.train(mode and self.config.generator_dropout)

    #: The collator's edit rows (``data/diffcse_collator.py``), which the generator and the discriminator read.
    EDIT_KEYS = ("rtd_input_ids", "rtd_attention_mask", "rtd_fill", "rtd_original_ids", "rtd_labels")

    def fixed_width_keys(self) -> tuple[str, ...]:
        """The edit rows, padded to the fast path's fixed width: a padded position is masked out of the generator's
        fill, the discriminator's attention and the RTD loss; ``rtd_include_padding``'s loss counts the padding up to
        the batch's own width only (:func:`batch_width`), the width the code's loss has."""
        return self.EDIT_KEYS

    def step_backbones(self) -> list[tuple[nn.Module, str]]:
        """The encoder, the generator's no-grad pass and the discriminator's pass over the edit rows, each at one shape
        per step (the rows at the fixed width: :meth:`fixed_width_keys`)."""
        return [*super().step_backbones(), (self, "generator"), (self, "discriminator")]

    @property
    def rtd_views(self) -> int:
        """Leading views that get an edited copy: 1 (the paper: one x'' per sentence) or 2 (the code)."""
        return 2 if self.config.rtd_all_views else 1

    # ------------------------------------------------------------------ the objective (Sec. 3)
    def compute_loss(self, embeddings: ViewEmbeddings,
                     batch: dict[str, Any]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``L = L_contrastive + lambda * L_RTD``: the base's objective (with whatever generic parts the config turns
        on), then the generator's edit x'' and the discriminator's replaced-token detection conditioned on this
        process's h (after the projector, or before it with ``condition_before_projector``)."""
        contrastive, metrics = self.contrastive_loss(embeddings, batch)
        edited, labels = self.edit(batch)
        rtd, counts = self.rtd(embeddings, edited, labels, batch)
        return contrastive + self.config.lambda_weight * rtd, {**metrics, "rtd_loss": rtd.detach(),
                                                               **rtd_ratios(counts)}

    def contrastive_loss(self, embeddings: ViewEmbeddings,
                         batch: dict[str, Any]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``L_contrastive``; times 0 for Table 3's "w/o contrastive loss" (``use_contrastive_loss=False``)."""
        contrastive, metrics = super().contrastive_loss(embeddings, batch)
        if not self.config.use_contrastive_loss:
            contrastive = contrastive * 0.0  # keeps the graph (and DDP's gradient buckets) intact
        return contrastive, metrics

    @torch.no_grad()
    def edit(self, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """The generator fills the collator's positions -> (edited ids x'', RTD labels), both [N, L'].

        A label is 1 where x'' differs from the original (a generated token equal to the original counts as kept),
        or the collator's own label (insertion / deletion)."""
        inputs, mask = batch["rtd_input_ids"], batch["rtd_attention_mask"]
        fill = batch["rtd_fill"].bool()
        if self.config.generator_all_positions:  # the code: generator output everywhere but position 0 and padding
            fill = mask.bool().clone()
            fill[:, 0] = False
        # Generated tokens at the fill positions, the input elsewhere; no boolean indexing, so no host-device sync.
        edited = torch.where(fill, self.generate(inputs, mask), inputs)
        given = batch["rtd_labels"]
        labels = torch.where(given >= 0, given, (edited != batch["rtd_original_ids"]).long())
        return edited, labels * mask

    def generate(self, inputs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The generator's token at every position of ``inputs`` [n, L']: sampled from its distribution (the paper)
        or its argmax (the code). Sampling: ``torch.multinomial``, or with row-seeded masks the inverse CDF of keyed
        uniforms (the generator's controller draws them, so a part of the rows samples what the full pass does)."""
        logits = self.generator(input_ids=inputs, attention_mask=prepare_attention_mask(self.generator, mask)).logits
        logits = logits.float()
        if not self.config.sample_generator:
            return logits.argmax(-1)
        if self.generator_row_dropout is not None:
            return self.generator_row_dropout.categorical(logits.softmax(-1))
        return torch.multinomial(logits.softmax(-1).flatten(0, -2), 1).view(logits.shape[:-1])

    def discriminate(self, h: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                     token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Conditional discriminator: x'' with h at position 0 -> per-token logits [N, L', 2]."""
        extra = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
        attention_mask = prepare_attention_mask(self.discriminator, attention_mask)
        if self.config.rtd_condition_site == "inputs_embeds":
            words = self.discriminator.get_input_embeddings()(input_ids)
            if isinstance(words, tuple):  # I-BERT's QuantEmbedding returns (embeddings, scaling factor)
                words = words[0]
            hidden = self.discriminator(inputs_embeds=condition_first(h, words), attention_mask=attention_mask, **extra).last_hidden_state
        else:  # the code's site: put_condition_first, the discriminator's embeddings' hook, reads h for this pass
            self.rtd_condition = h
            try:
                hidden = self.discriminator(input_ids=input_ids, attention_mask=attention_mask,
                                            **extra).last_hidden_state
            finally:
                self.rtd_condition = None
        return self.rtd_head(hidden)

    def put_condition_first(self, module: nn.Module, args: Any, output: Any) -> Any:
        """The forward hook on the discriminator's embeddings at the ``embeddings_output`` site (the released code's):
        h (:attr:`rtd_condition`) replaces position 0 of their output, after their LayerNorm and dropout. Registered
        once, with the discriminator: a compiled discriminator's graph holds it and reads h as an input (a hook
        registered for each pass would be a new function, and a new graph, every step)."""
        if self.rtd_condition is None:
            return output
        if isinstance(output, tuple):  # I-BERT's embeddings return (embeddings, scaling factor)
            return (self.put_condition_first(module, args, output[0]), *output[1:])
        return condition_first(self.rtd_condition, output)

    def rtd(self, embeddings: ViewEmbeddings, edited: torch.Tensor, labels: torch.Tensor, batch: dict[str, Any],
            mask: torch.Tensor | None = None, normaliser: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``L_RTD`` of the sentences of ``embeddings`` (``rtd_views`` edited rows each: ``edited``, ``labels``,
        ``mask``, by default the batch's ``rtd_attention_mask``), and the token counts :func:`rtd_counts`."""
        mask = batch["rtd_attention_mask"] if mask is None else mask
        source = embeddings.pooled if self.config.condition_before_projector else embeddings.views
        h = source[:, : self.rtd_views].reshape(-1, source.size(-1))
        token_types = torch.zeros_like(edited) if batch.get("token_type_ids") is not None else None
        logits = self.discriminate(h, edited, mask, token_types)
        width = batch_width(batch["rtd_attention_mask"]) if self.config.rtd_include_padding else None
        loss = rtd_loss(logits, labels, mask, self.config.rtd_include_padding, normaliser, width)
        return loss, rtd_counts(logits, labels, mask)

    # ------------------------------------------------------------------ L_RTD as a per-sentence part
    def sentence_inputs(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """The generator's edit of ``batch``'s sentences (``rtd_views`` rows each)."""
        edited, labels = self.edit(batch)
        return {"edited": edited, "labels": labels, "mask": batch["rtd_attention_mask"]}

    def sentence_loss(self, embeddings: ViewEmbeddings, inputs: dict[str, torch.Tensor],
                      batch: dict[str, Any]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``lambda * L_RTD`` of some of ``batch``'s sentences as their share of the batch's: their summed token
        loss / the batch's token count (the mean, for all of them)."""
        mask = batch["rtd_attention_mask"]
        normaliser = None
        if inputs["edited"].size(0) != mask.size(0):
            normaliser = mask.size(0) * batch_width(mask) if self.config.rtd_include_padding else mask.sum()
        rtd, counts = self.rtd(embeddings, inputs["edited"], inputs["labels"], batch, inputs["mask"], normaliser)
        return self.config.lambda_weight * rtd, {"rtd_loss": rtd.detach(), "rtd_counts": counts}

    def sentence_metrics(self, statistics: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {"rtd_loss": statistics["rtd_loss"], **rtd_ratios(statistics["rtd_counts"])}


@torch.no_grad()
def rtd_statistics(logits: torch.Tensor, labels: torch.Tensor, attention_mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """Discriminator accuracy on replaced / kept / all real tokens and the share of replaced tokens, from token
    counts summed over all processes (so every process logs the global-batch value, not a mean of ratios)."""
    return rtd_ratios(rtd_counts(logits, labels, attention_mask))


@torch.no_grad()
def rtd_counts(logits: torch.Tensor, labels: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """[replaced and detected, replaced, kept and detected, kept, real] token counts (additive over sentences)."""
    predicted, real = logits.argmax(-1), attention_mask.bool()
    replaced, kept = (labels == 1) & real, (labels == 0) & real
    return torch.stack([((predicted == 1) & replaced).sum(), replaced.sum(), ((predicted == 0) & kept).sum(),
                        kept.sum(), real.sum()]).float()


@torch.no_grad()
def rtd_ratios(counts: torch.Tensor) -> dict[str, torch.Tensor]:
    """:func:`rtd_counts` summed over all processes -> the logged accuracies and replaced share."""
    if world_size() > 1:
        counts = counts.clone()
        dist.all_reduce(counts)
    return {"rtd_acc_replaced": counts[0] / counts[1].clamp(min=1), "rtd_acc_kept": counts[2] / counts[3].clamp(min=1),
            "rtd_acc": (counts[0] + counts[2]) / counts[4].clamp(min=1),
            "rtd_replaced_share": counts[1] / counts[4].clamp(min=1)}



__all__ = ["DiffCSEModel", "VocabularyMismatchError", "check_condition_width", "check_generator_vocabulary",
           "generator_from_config", "rtd_loss", "rtd_statistics"]
