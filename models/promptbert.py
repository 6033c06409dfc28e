"""PromptBERT (Jiang, Jiao, Huang, Zhang, Wang, Zhuang, Wei, Huang, Deng, Zhang; EMNLP 2022): the sentence as the
[MASK] token's state inside a template, and template denoising (official code: github.com/kongds/Prompt-BERT,
``prompt_bert/models.py`` ``cl_forward`` / ``sentemb_forward``, ``train.py`` ``prepare_features``).

- Prompt-based embedding (Sec. 4): the sentence x goes into a template, ``This sentence of "[X]" means [MASK].``, and
  its embedding is the last hidden state of the [MASK] token, ``h = h_[MASK]`` (:func:`mask_token_states`). The
  template's token ids are made by the data component (``data/prompt_templates.py``) and kept in the config
  (``prompt_token_ids``), so this file reads no tokenizer.
- Template denoising (Sec. 5): the template alone, with the position ids its suffix has after a sentence of n
  tokens, gives the template's own [MASK] state ``h^_n``; the embedding of a sentence of n tokens is ``h - h^_n``
  (:func:`template_mask_states`; ``cl_forward``'s ``get_delta``: the template ``[CLS] prefix suffix [SEP]``, no
  attention mask, the suffix's positions shifted by n, in the encoder's current mode (dropout on in training) and
  with gradients; then ``pooler_output -= delta[attention_mask.sum - template_len]``). The code runs ``get_delta``
  once per template, two encoder passes; a training step here runs the rows of both templates in ONE pass
  (:func:`templates_mask_states`): the rows are independent, so the states are the same (dropout aside: stream
  masks are drawn in one call, row-seeded ones are keyed per row and unchanged), with one backbone pass fewer.
- Unsupervised objective (Sec. 5): the two views are the sentence in two DIFFERENT templates, each denoised with its
  own template's bias; then SimCSE's MLP (training only) and InfoNCE with in-batch negatives (the shared
  :func:`models.losses.info_nce`, gathered across processes by the base).

The code computes ``h^_n`` for 50 fixed rows n = 0..49 (128 in its dev evaluation); rows are independent (no
attention mask), so this model computes the rows n = 0 .. L - |template| that a batch of padded width L can index,
which are the code's rows (docs/promptbert.md measures the cost). With ``--dropout_masks row_seeded`` the template
rows draw keyed masks of their own (keyed by n and the template, ``models.dropout.RowDropoutController.plan``'s
``row_keys``), so a cached step, which runs the denoising once on the full set (``correct_pooled_rows``), equals the
uncached one.
"""
from __future__ import annotations

import itertools
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from .base import ContrastiveModel
from .config import ContrastiveConfig, position_table_size
from .masks import masks_rows_without_padding, prepare_attention_mask
from .views import ViewLayout


#: Template rows' dropout keys: template t's row n is key ``t * TEMPLATE_KEY_STRIDE + n``.
TEMPLATE_KEY_STRIDE = 1 << 20


@dataclass(frozen=True)
class TemplateIds:
    """A template as token ids (``data.prompt_templates.PromptTemplate``'s form in the config): ``prefix`` = [CLS]
    + the words before the sentence, ``suffix`` = the words after it + [SEP], the mask token ``suffix[mask_index]``."""

    prefix: tuple[int, ...]
    suffix: tuple[int, ...]
    mask_index: int

    @classmethod
    def from_config(cls, entry: dict[str, list[int]], mask_token_id: int) -> "TemplateIds":
        suffix = tuple(entry["suffix"])
        if suffix.count(mask_token_id) != 1 or mask_token_id in entry["prefix"]:
            raise ValueError(f"prompt_token_ids: a template needs one mask token ({mask_token_id}) after the "
                             f"sentence, got prefix {entry['prefix']} suffix {list(suffix)}")
        return cls(tuple(entry["prefix"]), suffix, suffix.index(mask_token_id))

    def __len__(self) -> int:
        return len(self.prefix) + len(self.suffix)


def mask_token_states(hidden: torch.Tensor, input_ids: torch.Tensor, mask_token_id: int) -> torch.Tensor:
    """Sec. 4: the last hidden state [N, L, h] at each row's [MASK] -> [N, h]. The template's [MASK] is the row's
    last one (it follows the sentence), which a sentence containing the mask token's text cannot displace; found
    with an argmax, so no host sync (the code's ``last_hidden[input_ids == mask_token_id]``)."""
    positions = torch.arange(input_ids.size(1), device=input_ids.device)
    last = ((input_ids == mask_token_id).long() * positions).argmax(-1)
    return hidden[torch.arange(hidden.size(0), device=hidden.device), last]


def insert_template(input_ids: torch.Tensor, attention_mask: torch.Tensor, template: TemplateIds, pad_token_id: int,
                    max_positions: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ``[CLS] s [SEP]`` rows [N, L] -> ``prefix s suffix`` rows [N, L - 2 + |template|] and their
    attention mask (the code's ``sentemb_forward``, which puts the template ids around an already tokenised
    sentence); ``max_positions``: cut s so that a row fits the backbone's position embeddings."""
    prefix = torch.tensor(template.prefix, device=input_ids.device)
    suffix = torch.tensor(template.suffix, device=input_ids.device)
    width = input_ids.size(1) - 2 + len(template)
    n = (attention_mask.sum(-1, keepdim=True) - 2).clamp(min=0)
    if max_positions is not None:
        n = n.clamp(max=max_positions - len(template))
    j = torch.arange(width, device=input_ids.device).unsqueeze(0)
    p = len(template.prefix)
    sentence = input_ids.gather(1, (j - p + 1).clamp(0, input_ids.size(1) - 1).expand(input_ids.size(0), -1))
    after = suffix[(j - p - n).clamp(0, len(template.suffix) - 1)]
    ids = torch.where(j < p, prefix[j.clamp(max=p - 1)], torch.where(j < p + n, sentence, after))
    mask = j < p + n + len(template.suffix)
    return ids.masked_fill(~mask, pad_token_id), mask.long()


def template_rows(template: TemplateIds, template_ids: torch.Tensor, rows: int,
                  width: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sec. 5, the ``rows`` inputs of template alone (``get_delta``'s ``d_input_ids`` / ``d_position_ids``):
    ``template_ids`` (``prefix + suffix`` on the encoder's device) in every row, the suffix's position ids shifted by
    n in row n (where they sit after a sentence of n tokens), right-padded to ``width`` tokens (id 0 and position 0,
    which the mask hides) -> ids, position ids, attention mask, each [rows, width]. Built on the device from
    ``template_ids`` and ``arange``s: no host data is copied, nothing is read back."""
    device = template_ids.device
    length = len(template)
    ids = template_ids.unsqueeze(0).expand(rows, -1)
    positions = torch.arange(length, device=device).repeat(rows, 1)
    positions[:, len(template.prefix):] += torch.arange(rows, device=device).unsqueeze(-1)
    mask = torch.ones(rows, length, dtype=torch.long, device=device)
    padding = (0, width - length)
    return F.pad(ids, padding), F.pad(positions, padding), F.pad(mask, padding)


def templates_mask_states(encoder: nn.Module, templates: Sequence[TemplateIds], rows: Sequence[int], plan=None,
                          template_ids: Sequence[torch.Tensor] | None = None) -> list[torch.Tensor]:
    """Sec. 5, every template's own representation ``h^_n`` for n = 0 .. rows[t] - 1, in ONE encoder pass ->
    ``[rows[t], h]`` per template: the rows of all templates (:func:`template_rows`) concatenated,
    ``[sum(rows), max |template|]``, the [MASK] state of each row.

    The official ``cl_forward`` calls ``get_delta`` once per template: two encoder passes (50 rows each, no attention
    mask), so this pass is not the code's form, but it computes the same thing: the rows are independent (each
    attends only to its own tokens), so one pass over both templates' rows gives the same states (eval mode, 1e-6,
    tests/test_promptbert.py), with one backbone pass (a launch sequence on a GPU) fewer per step. Templates of equal
    length (the paper's two) need no padding, and the code's passes have no attention mask: every token of a row
    attends to every other (transformers 4 made an all-ones mask). A backbone that takes an all-ones mask without a
    host read gets one where its mask-less call may differ (:func:`models.masks.masks_rows_without_padding`): from
    transformers 5.25 every one that takes a prepared mask (BERT and RoBERTa, whose mask-less call would read the jump
    in the position ids after the prefix as the start of another packed sequence; harmlessly, also ALBERT, ModernBERT
    and the others that do not pass their position ids: :func:`models.masks.infers_packing_without_mask`), and a
    backbone that would read its ids on the host (e.g. DeBERTa-v2); any other gets none. A shorter template is
    right-padded, and the mask hides its padding (the same state up to float reordering). Dropout and
    gradients are the caller's mode, as in ``get_delta``: with stream dropout the masks are drawn in one call instead of two (other
    draws from the same i.i.d. Bernoulli masks); ``plan``, a context manager for the pass's dropout, keys row-seeded
    masks by each row's key and coordinates only, so they are the per-template passes' masks, padding or not.
    ``template_ids``: each template's ``prefix + suffix`` already on the encoder's device (a training step passes
    them: made from the Python ids here, they would be a host-to-device copy, which synchronises, every step)."""
    if template_ids is None:
        device = next(encoder.parameters()).device
        template_ids = [torch.tensor(t.prefix + t.suffix, device=device) for t in templates]
    width = max(len(t) for t in templates)
    ids, positions, mask = (torch.cat(parts) for parts in zip(*(
        template_rows(t, i, r, width) for t, i, r in zip(templates, template_ids, rows))))
    masked = any(len(t) < width for t in templates) or masks_rows_without_padding(encoder)
    with plan if plan is not None else nullcontext():
        hidden = encoder(input_ids=ids, position_ids=positions, return_dict=True,
                         attention_mask=prepare_attention_mask(encoder, mask) if masked else None).last_hidden_state
    starts = [0, *itertools.accumulate(rows)]
    return [hidden[start:start + r, len(t.prefix) + t.mask_index] for t, start, r in zip(templates, starts, rows)]


def template_mask_states(encoder: nn.Module, template: TemplateIds, rows: int, plan=None,
                         template_ids: torch.Tensor | None = None) -> torch.Tensor:
    """One template's ``h^_n`` for n = 0 .. rows - 1 -> [rows, h] (:func:`templates_mask_states` with one template:
    no padding, no attention mask, the code's ``get_delta``); the test-time denoising's pass."""
    return templates_mask_states(encoder, [template], [rows], plan,
                                 None if template_ids is None else [template_ids])[0]


#: :func:`template_states_follow_length`'s rows (n = 0 .. 7) and its tolerance, relative to the states' largest
#: magnitude (at least 1): about 8 float32 roundings.
LENGTH_PROBE_ROWS, LENGTH_PROBE_RTOL = 8, 1e-6


def template_states_follow_length(encoder: nn.Module, template: TemplateIds) -> bool:
    """Whether ``encoder``'s template state ``h^_n`` changes with n, the sentence length whose state PromptBERT's
    template denoising (Sec. 5) subtracts, i.e. whether the backbone follows the template rows' shifted position ids.

    Measured, not read from the forward's signature (DeBERTa-v2's forward takes ``position_ids`` and its embeddings
    drop them without absolute position embeddings): one template pass (:func:`template_mask_states`) over
    n = 0 .. 7 (fewer where the position embeddings end sooner), in eval mode (each module's mode restored after,
    also on an error), without gradients, on the encoder's device; a compiled wrapper's model runs eager (no graph
    compiled for this shape). ``False`` where no row's [MASK] state differs from row 0's by more than
    :data:`LENGTH_PROBE_RTOL` times the states' largest magnitude. A backbone whose positions follow the token index
    (RoFormer's rotary embeddings; DeBERTa(-v2/v3) with ``position_biased_input=False``, whose relative attention is
    all its position information) computes every row from the same inputs with the same kernels: exactly 0 in
    float32 and bfloat16 (tests/test_promptbert.py). Tiny random backbones that follow the ids differ by at least
    1.6e-5 relative in float32 (ModernBERT, whose random attention barely depends on position; GTE, Nomic BERT,
    Jina v3 2e-5 to 3.5e-5; EuroBERT 3e-3; absolute position embeddings ~1), 2.6e-4 in bfloat16; trained ones by
    far more. The tolerance sits 16 times below the smallest and still above a few float32 roundings."""
    model = getattr(encoder, "_orig_mod", encoder)
    rows = LENGTH_PROBE_ROWS
    if (limit := position_table_size(getattr(model, "config", None))) is not None:
        rows = max(2, min(rows, limit - len(template) + 1))
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        with torch.no_grad():
            states = template_mask_states(model, template, rows).float()
    finally:
        for module, training in modes:
            module.training = training
    tolerance = LENGTH_PROBE_RTOL * max(1.0, states.abs().max().item())
    return (states[1:] - states[:1]).abs().max().item() > tolerance


def prompt_embedding(encoder: nn.Module, template: TemplateIds, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                     *, mask_token_id: int, pad_token_id: int, denoise: bool) -> torch.Tensor:
    """The test-time embedding of right-padded ``[CLS] s [SEP]`` rows [N, L] with ``encoder`` (the trained model's,
    or a plain export's ``AutoModel``): s inside ``template`` (:func:`insert_template`, cut to the position table
    where the backbone has one: :func:`models.config.position_table_size`), the [MASK] state
    (:func:`mask_token_states`), minus the template's own state at s's length when ``denoise``
    (:func:`template_mask_states`) -> [N, h]."""
    ids, mask = insert_template(input_ids, attention_mask, template, pad_token_id,
                                position_table_size(encoder.config))
    hidden = encoder(input_ids=ids, attention_mask=prepare_attention_mask(encoder, mask),
                     return_dict=True).last_hidden_state
    pooled = mask_token_states(hidden, ids, mask_token_id)
    if denoise:
        rows = ids.size(1) - len(template) + 1
        states = template_mask_states(encoder, template, rows)
        pooled = pooled - states[(mask.sum(-1) - len(template)).clamp(0, rows - 1)].to(pooled.dtype)
    return pooled


class PromptBERTModel(ContrastiveModel):
    """Unsupervised PromptBERT: [MASK] state in two templates, template denoising, MLP in training only, tau 0.05
    (every default of ``models.config`` is run.sh unsup-bert's; its lr 1e-5 and batch 256 are training arguments:
    :attr:`training_defaults`, which ``run_unsup.py --method promptbert`` applies)."""

    #: run.sh unsup-bert: lr 1e-5, batch 256 (1 epoch, max length 32, tau 0.05 are every method's defaults).
    training_defaults: ClassVar[dict[str, Any]] = {"learning_rate": 1e-5, "per_device_train_batch_size": 256}
    #: A sentence-transformers folder cannot put a sentence inside a template or pool at the [MASK] token without
    #: remote code, so none is exported (the card says how to encode).
    sentence_transformers_export: ClassVar[bool] = False

    def __init__(self, config: ContrastiveConfig, encoder=None) -> None:
        ids = config.prompt_token_ids
        if not ids:
            raise ValueError("PromptBERT needs its templates' token ids (prompt_token_ids): build it with "
                             "trainers.methods.build_model, which tokenises --prompt_template with the tokenizer")
        super().__init__(config, encoder)
        self.mask_token_id, self.pad_token_id = int(ids["mask_token_id"]), int(ids["pad_token_id"])
        self.templates = [TemplateIds.from_config(entry, self.mask_token_id) for entry in ids["templates"]]
        self._template_ids: dict[tuple[int, str], torch.Tensor] = {}  # template_ids' per-device copies

    # ------------------------------------------------------------------ Sec. 4: the [MASK] state
    def pool_outputs(self, pooler_type: str, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                     outputs: Any) -> torch.Tensor:
        return mask_token_states(outputs.last_hidden_state, input_ids, self.mask_token_id)

    # ------------------------------------------------------------------ Sec. 5: template denoising
    def template_ids(self, template: int, device: torch.device) -> torch.Tensor:
        """Template ``template``'s ``prefix + suffix`` ids on ``device``, copied there once (not every step: a
        host-to-device copy synchronises the host with the device)."""
        key = (template, str(device))
        if key not in self._template_ids:
            entry = self.templates[template]
            self._template_ids[key] = torch.tensor(entry.prefix + entry.suffix, device=device)
        return self._template_ids[key]

    def template_bias(self, lengths: torch.Tensor, row_templates: list[int], width: int) -> torch.Tensor:
        """``h^_n`` for every row: ``lengths`` [B, R] (tokens of each row, template included), ``row_templates``
        (the template of each of the R rows), ``width`` (the padded length, which bounds n) -> [B, R, h]. The rows
        of all the templates used run in one encoder pass (:func:`templates_mask_states`)."""
        used = sorted(set(row_templates))
        rows = [max(width - len(self.templates[t]) + 1, 1) for t in used]
        device = lengths.device
        states = dict(zip(used, templates_mask_states(
            self.encoder, [self.templates[t] for t in used], rows, self.template_plan(used, rows, device),
            [self.template_ids(t, device) for t in used])))
        columns = []
        for r, t in enumerate(row_templates):
            n = (lengths[:, r] - len(self.templates[t])).clamp(0, states[t].size(0) - 1)
            columns.append(states[t][n])
        return torch.stack(columns, dim=1)

    def template_plan(self, used: list[int], rows: list[int],
                      device: torch.device) -> AbstractContextManager[None] | None:
        """The dropout plan of the template pass (``None`` without a per-row controller): one group (the pass), each
        row keyed by its template and n, ``t * TEMPLATE_KEY_STRIDE + n`` (keys of its own, apart from the
        sentences': row-seeded masks of a template row are the same in any pass that holds it)."""
        if self.dropout_controller is None:
            return None
        keys = torch.cat([torch.arange(r, device=device) + t * TEMPLATE_KEY_STRIDE for t, r in zip(used, rows)])
        return self.dropout_controller.plan(torch.zeros(keys.numel(), dtype=torch.long, device=device), num_groups=1,
                                            row_keys=keys)

    def correct_pooled_rows(self, pooled_rows: torch.Tensor, attention_mask: torch.Tensor,
                            layout: ViewLayout) -> torch.Tensor:
        """``h - h^_n`` for every row (view 0 with template 0's bias, the other views with template 1's; the extra
        rows of SimCSE++'s parts with their view's)."""
        if not self.config.template_denoising:
            return pooled_rows
        views = torch.tensor([min(v, len(self.templates) - 1) for v in range(attention_mask.size(1))])
        row_templates = layout.expand(views.unsqueeze(0))[0].tolist()  # a CPU tensor: no device sync
        lengths = layout.expand(attention_mask).sum(-1)
        return pooled_rows - self.template_bias(lengths, row_templates, attention_mask.size(-1)).to(pooled_rows.dtype)

    # ------------------------------------------------------------------ test time
    def embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None,
              pooler_type: str | None = None, *, denoise: bool | None = None) -> torch.Tensor:
        """Test-time embedding of tokenised ``[CLS] s [SEP]`` rows: s inside the first template, its [MASK] state
        (minus the template's, when ``test_denoising``), without the MLP (``mlp_only_train``)."""
        if pooler_type is not None:
            raise ValueError(f"PromptBERT's embedding is the [MASK] state inside its template; pooler "
                             f"{pooler_type!r} does not apply (run without --pooler)")
        pooled = prompt_embedding(self.encoder, self.templates[0], input_ids, attention_mask,
                                  mask_token_id=self.mask_token_id, pad_token_id=self.pad_token_id,
                                  denoise=self.config.test_denoising if denoise is None else denoise)
        return self.projector(pooled) if self.config.projects_at_test else pooled

    def dev_embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                  token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The code's dev evaluation (``sentemb_forward``) denoises (``dev_denoising``); its test evaluation not."""
        return self.embed(input_ids, attention_mask, denoise=self.config.dev_denoising)

    def dev_embedding_note(self) -> str | None:
        """Where the dev and test denoising differ (the code's defaults: dev with, test without), the run's STS dev
        scores are not what ``python -m eval`` gives its export."""
        dev, test = self.config.dev_denoising, self.config.test_denoising
        if dev == test:
            return None
        return (f"the scores above embed {'with' if dev else 'without'} template denoising (--dev_denoising "
                f"{str(dev).lower()}, as the official code's dev evaluation), the export "
                f"{'with' if test else 'without'} it (--test_denoising {str(test).lower()}, as its test evaluation): "
                f"`python -m eval` on the export scores STS dev {'with' if test else 'without'} it")

    def export_config(self) -> dict[str, Any]:
        """What the plain export's ``config.json`` states: the template, its ids, the pooling, the denoising."""
        return {"sentence_embedding": {
            "method": "promptbert", "pooling": "mask_token", "template": self.config.prompt_template,
            "prompt_token_ids": {**self.config.prompt_token_ids,
                                 "templates": self.config.prompt_token_ids["templates"][:1]},
            "test_denoising": self.config.test_denoising, "eval_add_period": self.config.eval_add_period}}

    def embedding_backbone(self) -> None:
        """None: the sentence goes into its template first (new ``input_ids``), so the evaluation runs it padded
        (on the dev sets no more tokens than packed rows would: the template's 8 tokens a sentence shrink the relative
        padding; docs/benchmarks.md, "The dev evaluation packed")."""
        return None

    def position_zero_pooler(self) -> None:
        """None: the sentence vector is the [MASK] state, which follows the sentence in the template."""
        return None

    def backbone_warning(self) -> str | None:
        """The denoising on a backbone whose template states ignore the shifted position ids
        (:func:`template_states_follow_length`): every n gets the same template state ``h^_n``, a denoising the
        paper's Sec. 5 does not describe; names the denoising flags that are on. ``None`` otherwise."""
        config = self.config
        flags = [f"--{name} false" for name in ("template_denoising", "dev_denoising", "test_denoising")
                 if getattr(config, name)]
        if not flags or template_states_follow_length(self.encoder, self.templates[0]):
            return None
        return (f"PromptBERT's template denoising places the suffix after n tokens through position_ids, which "
                f"{type(getattr(self.encoder, '_orig_mod', self.encoder)).__name__} ignores (RoFormer's rotary "
                f"embeddings, and DeBERTa's relative attention without absolute position embeddings, follow the "
                f"token index): every n gets the same template state (Sec. 5 subtracts the state at the sentence's "
                f"length); pass {' '.join(flags)} to run without denoising")

    def gradient_checkpointing_refusal(self) -> str | None:
        """Also with row-seeded masks and denoising: a recomputed layer of the sentence pass would meet the template
        pass's plan."""
        refusal = super().gradient_checkpointing_refusal()
        if refusal is None and self.config.template_denoising and getattr(self.dropout_controller, "row_seeded", False):
            return ("--gradient_checkpointing with PromptBERT's template denoising needs --dropout_masks stream; use "
                    "--cache_chunk_size N to bound the memory instead")
        return refusal


__all__ = ["PromptBERTModel", "TemplateIds", "insert_template", "mask_token_states", "prompt_embedding",
           "template_mask_states", "template_rows", "template_states_follow_length",
           "templates_mask_states"]
