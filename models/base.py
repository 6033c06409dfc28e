"""`ContrastiveModel`: the shared base of every method (encode views in one pass -> pool -> project -> loss).

A method is a subclass that overrides one or two of these small hooks, never the whole forward:

- :meth:`ContrastiveModel.embed_views` — token ids [B, V, L] -> :class:`models.views.ViewEmbeddings` (one backbone
  pass over all rows; S-SimCSE and SimCSE++ change how dropout acts in it).
- :meth:`ContrastiveModel.compute_loss` — embeddings (+ the batch) -> (loss, metrics to log).
- :meth:`ContrastiveModel.extra_negatives` — embeddings every anchor also contrasts with (ESimCSE's queue).
- :meth:`ContrastiveModel.sync_auxiliary_networks` — called once after the pretrained weights are loaded
  (ESimCSE's momentum encoder, DiffCSE's discriminator are copies of the loaded encoder).
- :meth:`ContrastiveModel.on_optimizer_step` — called by the trainer after every optimizer step (EMA updates).
- :meth:`ContrastiveModel.step_backbones` / :meth:`ContrastiveModel.step_functions` — the pure parts of a step the
  fast path compiles (the encoder, ESimCSE's momentum encoder; the objective).
- :meth:`ContrastiveModel.sentence_inputs` / :meth:`ContrastiveModel.sentence_loss` — a part of the loss that is
  a sum over sentences (DiffCSE's RTD), beside :meth:`ContrastiveModel.contrastive_loss`, which needs the whole batch.
- :meth:`ContrastiveModel.dev_embed` / :meth:`ContrastiveModel.dev_embedding_note` — the training-time dev
  embedding where it is not the test-time one (PromptBERT's denoising), and what the run summary says of it.
- :attr:`ContrastiveModel.optional_view_columns` — view columns a corpus may lack (supervised SimCSE's hard
  negatives), dropped from the views by :meth:`ContrastiveModel.read_views_from` once the corpus is read.
- :attr:`ContrastiveModel.reads_ordered_corpus` — whether the corpus is read as documents of consecutive sentences
  (DiffCSE's ``rtd_source="next"``, Table 3) instead of one sentence a line.

``embed_views`` = ``project_views(encode_views(...))``: encoding some sentences, and the projector on all of them.
With ``contrastive_loss`` and the per-sentence part, these are all a training step needs to run the pieces in
another order (``trainers/cached_step.py``); the model never hears of chunks, seeds or processes.

The backbone is any ``AutoModel`` (BERT, RoBERTa, DistilBERT, MiniLM, ...): nothing here reads the model name,
hidden sizes come from the config, and ``token_type_ids`` are passed only when the tokenizer produced them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

import torch
from torch import nn
from transformers import AutoModel, PreTrainedModel
from transformers.utils import ModelOutput

from .config import ContrastiveConfig
from .distributed import gather_with_grad
from .dropout import controller_for, install_row_dropout, needs_row_dropout
from .module_lists import listed_parameters, remember_training_modes, training_modes_hold
from .heads import build_projector
from .losses import contrastive_objective
from .masks import prepare_attention_mask
from .poolers import POSITION_ZERO_POOLERS, needs_hidden_states, pool
from .views import ViewEmbeddings, ViewLayout


@dataclass
class ContrastiveOutput(ModelOutput):
    """``loss``: scalar; ``embeddings``: the step's :class:`models.views.ViewEmbeddings`; ``metrics``: detached
    scalars to log."""

    loss: torch.Tensor | None = None
    embeddings: ViewEmbeddings | None = None
    metrics: dict[str, torch.Tensor] | None = None


#: Where a backbone whose ``pooler`` is a bare Linear keeps the tanh applied to its output: ALBERT's
#: ``pooler_activation``, BigBird's ``activation`` (``pooler_output = activation(pooler(h[:, 0]))``).
BARE_POOLER_ACTIVATIONS = ("pooler_activation", "activation")


def pooler_dense(encoder: nn.Module) -> nn.Linear | None:
    """The Linear h->h of the backbone's pooler over [CLS] (then tanh), the slot that can hold SimCSE's MLP at export
    time: BERT-style ``pooler.dense`` (BERT, RoBERTa, MPNet...) or a bare ``pooler`` Linear whose output the backbone
    puts through a tanh of its own (:data:`BARE_POOLER_ACTIVATIONS`: ALBERT, BigBird); ``None`` where there is none
    (DistilBERT, ELECTRA). Decided from the module structure, not the model name: BigBird's tanh, under
    ``activation``, went unrecognised, so its export kept the untrained pooler where the MLP belonged."""
    pooler = getattr(encoder, "pooler", None)
    dense = getattr(pooler, "dense", None)
    if dense is None and isinstance(pooler, nn.Linear) and any(
            isinstance(getattr(encoder, name, None), nn.Tanh) for name in BARE_POOLER_ACTIVATIONS):
        dense = pooler
    return dense if isinstance(dense, nn.Linear) and dense.in_features == dense.out_features else None


def has_linear_tanh_pooler(encoder: nn.Module) -> bool:
    """Whether the backbone has a pooler slot (:func:`pooler_dense`) that can hold SimCSE's MLP at export time."""
    return pooler_dense(encoder) is not None


def config_has_pooler_dense(encoder_config: Any) -> bool:
    """Whether the backbone ``encoder_config`` builds has a pooler slot (:func:`pooler_dense`); built on the meta
    device, so nothing is allocated."""
    with torch.device("meta"):
        return has_linear_tanh_pooler(AutoModel.from_config(encoder_config))


class DroppedPooler(nn.Module):
    """What :func:`drop_unused_pooler` leaves in a BERT-style pooler slot: no parameters, and no pooler output.
    BERT's forward skips a pooler that is ``None``; LayoutLM's calls its pooler unconditionally, and stopped with
    "'NoneType' object is not callable"."""

    def forward(self, hidden_states: torch.Tensor) -> None:
        return None


def drop_unused_pooler(encoder: nn.Module) -> None:
    """Remove a BERT-style pooler the method never uses (SimCSE builds BERT with ``add_pooling_layer=False``); left
    in place it would hold parameters without gradients, which DDP rejects. A pooler module (``pooler.dense``: BERT,
    LayoutLM...) becomes a :class:`DroppedPooler`; a bare ``pooler`` Linear (ALBERT, BigBird) becomes ``None``, which
    their forwards check before applying their tanh to the pooler's output."""
    if has_linear_tanh_pooler(encoder):
        encoder.pooler = DroppedPooler() if hasattr(encoder.pooler, "dense") else None


class ContrastiveModel(PreTrainedModel):
    """Shared base: a backbone, a pooler, a projector and the in-batch InfoNCE objective (SimCSE Eq. 1 / 5).

    Subclasses set :attr:`method_defaults` (only the settings whose paper value differs from the declared default,
    ``models.config``) and override the hooks listed in the module docstring. Built by ``trainers.methods`` (which
    loads the files); a model never reads one.
    """

    config_class = ContrastiveConfig
    base_model_prefix = "contrastive"
    main_input_name = "input_ids"
    _supports_sdpa = True
    supports_gradient_checkpointing = True  # --gradient_checkpointing: the backbone's layers (refused with row dropout)
    method_defaults: ClassVar[dict[str, Any]] = {}
    #: Row fields each view reads (unsupervised: the same sentence twice).
    view_columns: ClassVar[tuple[str, ...]] = ("text", "text")
    #: Of :attr:`view_columns`, those a corpus may lack, the views then being the others
    #: (:meth:`read_views_from`).
    optional_view_columns: ClassVar[tuple[str, ...]] = ()
    #: The paper's training arguments where they differ from run_unsup.py's defaults (SimCSE's: lr 3e-5, batch 64,
    #: 1 epoch); the command line puts them before the user's flags, so a flag given wins.
    training_defaults: ClassVar[dict[str, Any]] = {}
    #: Whether a sentence-transformers folder can express the test-time embedding without remote code.
    sentence_transformers_export: ClassVar[bool] = True
    #: The objective :meth:`contrastive_loss` computes (:func:`models.losses.contrastive_objective`, a pure function
    #: of the config, the gathered embeddings and the extra negatives), held as an attribute so that the fast path
    #: swaps its compiled twin in for a training step (:meth:`step_functions`).
    objective = staticmethod(contrastive_objective)

    def __init__(self, config: ContrastiveConfig, encoder: PreTrainedModel | None = None) -> None:
        super().__init__(config)
        self.encoder = encoder if encoder is not None else AutoModel.from_config(config.encoder_config)
        drop_unused_pooler(self.encoder)
        # Per-row dropout rates (S-SimCSE's sampled rates, SimCSE++'s dropout-off rows): the backbone's nn.Dropout
        # modules are swapped for models.dropout.RowDropout (no parameters, so checkpoints are unaffected).
        self.dropout_controller = controller_for(config) if needs_row_dropout(config) else None
        if self.dropout_controller is not None:
            install_row_dropout(self.encoder, self.dropout_controller)
        self.projector = build_projector(config.projector, config.hidden_size)
        self.post_init()

    # ------------------------------------------------------------------ library hooks
    def post_init(self) -> None:
        """The library's, then each tied copy (``all_tied_weights_keys``' targets: DiffCSE's generator's output
        layer, its word embeddings' twin) declared as not saved. ``save_pretrained`` writes one copy of a shared
        tensor anyway; declared, a checkpoint that lacks the copy is what the Trainer expects when it loads one (the
        best model at the end, a resume), where it otherwise warned ``There were missing keys in the checkpoint
        model loaded: ['generator.vocab_projector.weight']`` and left the user to wonder whether the generator was
        lost (it was not: loading ties the copy again)."""
        super().post_init()
        self._keys_to_ignore_on_save |= set(self.all_tied_weights_keys)

    def get_input_embeddings(self) -> nn.Module:
        """The backbone's word embeddings (what transformers' checkpointing and resizing utilities look for)."""
        return self.encoder.get_input_embeddings()

    def _set_gradient_checkpointing(self, enable: bool = True, **kwargs: Any) -> None:
        """``--gradient_checkpointing`` (the Trainer's ``gradient_checkpointing_enable``): the backbone recomputes
        each layer's forward during backward. With row-seeded masks the recomputation re-makes the pass's keyed masks
        (``RowDropoutController._active_plan``). Refused where :meth:`gradient_checkpointing_refusal` says why (the
        training scripts say it before anything loads: ``command_line.pipeline``)."""
        refusal = self.gradient_checkpointing_refusal() if enable else None
        if refusal:
            raise ValueError(refusal)
        super()._set_gradient_checkpointing(enable=enable, **kwargs)

    def gradient_checkpointing_refusal(self) -> str | None:
        """Why ``--gradient_checkpointing`` would not run, or would train another network than the step without it,
        or ``None``: a trainable backbone transformers has no checkpointing for (ALBERT, MPNet, XLNet in 5.x: the
        Trainer's call stopped the run with "SimCSEModel is not compatible with gradient checkpointing"); stream
        dropout that follows a per-row plan (S-SimCSE's sampled rates, SimCSE++'s dropout-off rows), whose
        recomputation runs after the plan's block has ended and would draw plain-rate masks."""
        unsupported = [f"{type(backbone).__name__} (the {name})" for name, backbone
                       in self.trainable_backbones().items() if not backbone.supports_gradient_checkpointing]
        if unsupported:
            return (f"--gradient_checkpointing: transformers has none for {', '.join(unsupported)}, whose class sets "
                    f"supports_gradient_checkpointing = False, so the run would stop at its first step. Use "
                    f"--cache_chunk_size N to bound the backbone's memory instead (docs/cached_training.md).")
        if self.dropout_controller is not None and not self.dropout_controller.row_seeded:
            return ("--gradient_checkpointing cannot be combined with per-row dropout from the generator stream "
                    "(S-SimCSE's --dropout_dist, SimCSE++'s --off_dropout): the recomputed layers would not see the "
                    "per-row plan. Add --dropout_masks row_seeded (masks the recomputation re-makes exactly), or use "
                    "--cache_chunk_size N to bound the backbone's memory instead (docs/cached_training.md).")
        return None

    def train(self, mode: bool = True) -> "ContrastiveModel":
        """``nn.Module.train(mode)``, then :meth:`set_auxiliary_modes`. ``train(True)`` when the model is already in
        training mode as the last full call left it (every module's flag, checked in one flat pass:
        ``models.module_lists``) returns at once: the Trainer calls ``model.train()`` before every step, and the
        walk over every submodule (bert-base: 230) is host time a GPU step waits for."""
        if mode and self.training and training_modes_hold(self):
            return self
        super().train(mode)
        self.set_auxiliary_modes(mode)
        if mode:
            remember_training_modes(self)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """``nn.Module.zero_grad`` over the listed parameters (``models.module_lists.listed_parameters``: re-checked
        in a flat pass) instead of walked at every step (the Trainer calls it after every optimizer step)."""
        if not set_to_none:
            super().zero_grad(set_to_none=False)
            return
        for parameter in listed_parameters(self):
            parameter.grad = None

    def set_auxiliary_modes(self, mode: bool) -> None:
        """Hook: after ``train(mode)`` reached every submodule, the modes of networks that do not follow it (DiffCSE's
        generator). The base has none (ESimCSE's momentum encoder keeps itself in eval mode)."""

    # ------------------------------------------------------------------ auxiliary networks
    def sync_auxiliary_networks(self) -> None:
        """Hook: copy the freshly loaded encoder into auxiliary networks. The base has none."""

    def on_optimizer_step(self) -> None:
        """Hook: called by the trainer once per optimizer step (after ``optimizer.step()``). The base does nothing."""

    def step_backbones(self) -> list[tuple[nn.Module, str]]:
        """Hook: the backbones a training step runs, as ``(owner, attribute)``, each a pure function of its inputs
        (and dropout) at one input shape per step, which the fast path compiles (``trainers/fast_path.py``): the
        base's is its encoder."""
        return [(self, "encoder")]

    def backbone_warning(self) -> str | None:
        """Hook: what this method loses on this backbone without an error (logged at the start of a training run and
        repeated in its summary: ``command_line.pipeline.method_warnings``), or ``None``: the base's, none."""
        return None

    def cuda_graph_refusal(self) -> str | None:
        """Hook: why this model's training step must not run under CUDA graphs (the fast path then compiles without
        them: ``trainers.fast_path.compile_mode``), or ``None``: the base's, none."""
        return None

    def step_graph_refusal(self) -> str | None:
        """Hook: why this model's training step cannot be captured as one CUDA graph and replayed
        (``trainers/step_graph.py``: a replay runs the captured kernels on the captured tensors and host values, so a
        step that reads state kept on the host would replay the captured step's), or ``None``: the base's, none."""
        return None

    def step_shapes_settled(self) -> bool:
        """Hook: whether this step's compiled regions see the shapes every later step gives them (read on the host
        before each fast-path step; the fast path runs the steps before that eagerly, so that each graph is compiled,
        and on a GPU recorded, once at its one shape): the base's, always."""
        return True

    def fixed_width_keys(self) -> tuple[str, ...]:
        """Hook: the batch keys beyond the views (``input_ids``, ``attention_mask``, ``token_type_ids``) that the fast
        path pads to its fixed width too, because their padding changes no result and a compiled network reads
        them (``data/fixed_shapes.py``): the base's, none."""
        return ()

    def step_functions(self) -> list[tuple[Any, str]]:
        """Hook: the pure functions a training step runs at one input shape per step, as ``(owner, attribute)``,
        which the fast path compiles beside the backbones (its graph holds the loss's few dozen small operations and
        their backward, launched one by one otherwise): the base's is :attr:`objective`."""
        return [(self, "objective")]

    # ------------------------------------------------------------------ encoding
    def encode(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        *,
        pooler_type: str | None = None,
        encoder: nn.Module | None = None,
    ) -> torch.Tensor:
        """Backbone + pooler for flat inputs [N, L] -> [N, h] (no projector)."""
        pooler_type = pooler_type or self.config.pooler_type
        extra = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
        backbone = self.encoder if encoder is None else encoder
        outputs = backbone(
            input_ids=input_ids,
            attention_mask=prepare_attention_mask(backbone, attention_mask),
            output_hidden_states=needs_hidden_states(pooler_type),
            return_dict=True,
            **extra,
        )
        return self.pool_outputs(pooler_type, input_ids, attention_mask, outputs)

    def pool_outputs(self, pooler_type: str, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                     outputs: Any) -> torch.Tensor:
        """Hook: the backbone's outputs -> one vector per row [N, h] (:func:`models.poolers.pool`; PromptBERT reads
        the [MASK] token's hidden state instead)."""
        return pool(pooler_type, attention_mask, outputs.last_hidden_state, outputs.hidden_states)

    def position_zero_pooler(self) -> str | None:
        """The pooler when the sentence vector is read at position 0 alone (``cls``, ``cls_before_pooler``), which a
        causal backbone cannot fill with the sentence; ``None`` when it is not (a mean; PromptBERT's [MASK])."""
        return self.config.pooler_type if self.config.pooler_type in POSITION_ZERO_POOLERS else None

    def position_zero_writer(self) -> str | None:
        """Hook: what of the method is put in place of the token at position 0 (the [CLS] its paper replaces), as a
        phrase for a refusal where the tokenizer puts a word there; ``None`` (the base's): nothing is."""
        return None

    def embed(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        pooler_type: str | None = None,
    ) -> torch.Tensor:
        """Test-time sentence embedding [N, d].

        ``pooler_type=None`` gives the model's own test-time embedding ([CLS] without the MLP for unsupervised
        ``cls`` + ``mlp_only_train``; with it for supervised SimCSE). An explicit ``"cls"`` means [CLS] + projector
        (the ``--pooler cls`` of SimCSE's evaluation); any other pooler is the pooled hidden state alone.
        """
        if pooler_type is None:
            project = self.config.projects_at_test
            pooler_type = self.config.pooler_type
        else:
            project = pooler_type == "cls" and self.config.projector != "none"
        pooled = self.encode(input_ids, attention_mask, token_type_ids, pooler_type=pooler_type)
        return self.projector(pooled) if project else pooled

    def export_config(self) -> dict[str, Any]:
        """Hook: entries the plain export adds to its ``config.json`` (how to encode, where a pooler alone cannot
        say it: PromptBERT's template); the base adds none."""
        return {}

    def embedding_backbone(self) -> nn.Module | None:
        """Hook: the backbone :meth:`embed` and :meth:`dev_embed` hand the sentences' own ``input_ids`` to (the
        evaluation packs them there: :mod:`eval.packing`), or ``None`` when the embedding rewrites them first: the
        base's, its encoder."""
        return self.encoder

    def dev_embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                  token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Hook: the embedding the training-time dev evaluation ranks checkpoints by (``CLTrainer.evaluate``); the
        base's is the test-time :meth:`embed` (PromptBERT's code denoised here but not at test)."""
        return self.embed(input_ids, attention_mask, token_type_ids)

    def read_views_from(self, columns: Sequence[str]) -> tuple[str, ...]:
        """Drop from this model's views each of :attr:`optional_view_columns` that ``columns`` (its corpus's) lacks;
        returns those dropped. The views' count follows (the backbone and the objective read it from the batch)."""
        dropped = tuple(column for column in self.optional_view_columns
                        if column in self.view_columns and column not in columns)
        if dropped:
            self.view_columns = tuple(column for column in self.view_columns if column not in dropped)
        return dropped

    @property
    def reads_ordered_corpus(self) -> bool:
        """Hook: whether the training corpus is an ordered one, read as pairs of consecutive sentences
        (``data.corpus.load_next_sentence_corpus``); the base's: no, one sentence (or CSV row) a line."""
        return False

    def trainable_backbones(self) -> dict[str, PreTrainedModel]:
        """The backbones with trainable parameters, by attribute name (the encoder; DiffCSE's discriminator; not
        ESimCSE's momentum encoder nor DiffCSE's generator, which are frozen)."""
        return {name: child for name, child in self.named_children()
                if isinstance(child, PreTrainedModel) and any(p.requires_grad for p in child.parameters())}

    def process_local_buffers(self) -> list[str]:
        """Hook: the names of buffers that hold each process's own state when several train together (not copies
        of one state): a trainer must neither overwrite them with another process's nor keep only one process's in a
        checkpoint. The base's: none."""
        return []

    def process_split_notes(self) -> list[str]:
        """Hook: what of the objective depends on how the global batch is split over processes (each part a phrase;
        empty: nothing, the one-process objective of the global batch). The base's: the in-batch negatives when
        each process contrasts its own batch (``gather_negatives`` off), a BatchNorm projector's statistics (each
        process's batch)."""
        notes = [] if self.config.gather_negatives else ["the in-batch negatives (each process's own batch: "
                                                          "--gather_negatives false)"]
        if any(isinstance(module, nn.BatchNorm1d) for module in self.modules()):
            notes.append("the BatchNorm projector's statistics (each process's batch)")
        return notes

    def dev_embedding_note(self) -> str | None:
        """Hook: how :meth:`dev_embed` (the run's STS dev scores) differs from :meth:`embed` (the export's embedding,
        what ``python -m eval`` scores), for the run summary to say; ``None``: they are the same (the base's)."""
        return None

    def embed_views(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
    ) -> ViewEmbeddings:
        """All views of all sentences in ONE backbone pass: [B, V, L] -> :class:`models.views.ViewEmbeddings`.

        Config-driven extra rows ride in the same pass (:class:`models.views.ViewLayout`): SimCSE++'s dropout-off
        copy of view 0 and the noise study's K dropout samples; they come back as named fields.
        """
        return self.project_views(self.encode_views(input_ids, attention_mask, token_type_ids), attention_mask)

    def encode_views(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                     token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The backbone half of :meth:`embed_views`: [B, V, L] -> pooled rows [B, num_rows, h] (every row of the
        :class:`models.views.ViewLayout`, before the projector). Rows of different sentences never interact."""
        layout = ViewLayout.from_config(self.config, input_ids.size(1))
        input_ids, attention_mask, token_type_ids = map(layout.expand, (input_ids, attention_mask, token_type_ids))
        batch_size, num_rows, length = input_ids.shape
        flat = lambda t: None if t is None else t.reshape(batch_size * num_rows, length)  # noqa: E731
        with layout.dropout_plan(self.dropout_controller, batch_size, input_ids.device):
            pooled = self.encode(flat(input_ids), flat(attention_mask), flat(token_type_ids))
        return pooled.view(batch_size, num_rows, -1)

    def project_views(self, pooled_rows: torch.Tensor, attention_mask: torch.Tensor) -> ViewEmbeddings:
        """The projector half of :meth:`embed_views`: pooled rows [B, num_rows, h] of the views whose attention mask
        is ``attention_mask`` [B, V, L] -> :class:`ViewEmbeddings`. It sees all B sentences at once (DiffCSE's
        BatchNorm projector takes statistics over the batch; PromptBERT's template denoising,
        :meth:`correct_pooled_rows`, runs the backbone once for the whole batch)."""
        layout = ViewLayout.from_config(self.config, attention_mask.size(1))
        pooled_rows = self.correct_pooled_rows(pooled_rows, attention_mask, layout)
        batch_size, num_rows, _ = pooled_rows.shape
        projected = self.projector(pooled_rows.reshape(batch_size * num_rows, -1)).view(batch_size, num_rows, -1)
        return layout.fold(projected, pooled_rows)

    def correct_pooled_rows(self, pooled_rows: torch.Tensor, attention_mask: torch.Tensor,
                            layout: ViewLayout) -> torch.Tensor:
        """Hook: a correction of the pooled rows [B, num_rows, h] that needs the whole batch and may run the backbone
        with gradients (PromptBERT's template denoising); it runs in :meth:`project_views`, so a cached step runs it
        once, on the full set, inside the loss's graph. The base changes nothing."""
        return pooled_rows

    # ------------------------------------------------------------------ objective
    def gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """All-gather across processes (with gradients) unless ``gather_negatives`` is off."""
        return gather_with_grad(tensor) if self.config.gather_negatives else tensor

    def extra_negatives(self) -> torch.Tensor | None:
        """Hook: embeddings [M, d] that join every anchor's negatives (ESimCSE's momentum queue). The base has none."""
        return None

    def compute_loss(self, embeddings: ViewEmbeddings,
                     batch: dict[str, Any]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The training loss of the step: the base's is :meth:`contrastive_loss`. A method with a per-sentence part
        (:meth:`sentence_loss`) adds it here (DiffCSE: ``L = L_contrastive + lambda * L_RTD``)."""
        return self.contrastive_loss(embeddings, batch)

    def contrastive_loss(self, embeddings: ViewEmbeddings,
                         batch: dict[str, Any]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """SimCSE's InfoNCE over the global batch: view 0 anchors, view 1 positives, optional view 2 hard
        negatives (supervised SimCSE); plus :meth:`extra_negatives` and the config-driven SimCSE++ parts
        (:func:`models.losses.contrastive_objective`: off-dropout negatives, DCL, ablations) on any method."""
        return self.objective(self.config, embeddings.map(self.gather), self.extra_negatives())

    # ------------------------------------------------------------------ a per-sentence part of the loss
    def sentence_inputs(self, batch: dict[str, Any]) -> dict[str, torch.Tensor] | None:
        """Hook: the inputs of a loss part that is a sum over sentences given their embeddings, drawn once per step
        (DiffCSE: the generator's edit x'' and its labels), tensors [B * r, ...] sentence-major (r rows per
        sentence); ``None`` (the base): no such part."""
        return None

    def sentence_loss(self, embeddings: ViewEmbeddings, inputs: dict[str, torch.Tensor],
                      batch: dict[str, Any]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Hook: the per-sentence part for the sentences of ``embeddings`` and ``inputs`` (all of ``batch``'s, or
        some of them), as their share of the part over ``batch``, so that the shares of any split of the batch sum
        to the whole; returns ``(loss, statistics)``, statistics additive over sentences."""
        raise NotImplementedError(f"{type(self).__name__} has no per-sentence loss")

    def sentence_metrics(self, statistics: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Hook: the logged metrics of the per-sentence part from its (summed) statistics."""
        raise NotImplementedError(f"{type(self).__name__} has no per-sentence loss")

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        **method_inputs: Any,
    ) -> ContrastiveOutput:
        """Training forward: ``input_ids`` [B, V, L] (V = 2 views, 3 with hard negatives) -> loss."""
        if input_ids.dim() != 3:
            raise ValueError(
                f"{type(self).__name__}.forward expects input_ids of shape [batch, views, length], got "
                f"{tuple(input_ids.shape)}; use .embed() for [batch, length] inputs")
        batch = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids,
                 **method_inputs}
        embeddings = self.embed_views(input_ids, attention_mask, token_type_ids)
        loss, metrics = self.compute_loss(embeddings, batch)
        return ContrastiveOutput(loss=loss, embeddings=embeddings, metrics=metrics)

