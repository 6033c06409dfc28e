"""Padding-free evaluation passes: sentences of different lengths side by side in one row, each attending to itself.

An evaluation pass of length-sorted sentences pads each batch to its longest sentence; the work is every padded
token. Sorting and cutting where padding is fewest (:mod:`eval.batching`) leaves 8.8 % padding on STS-B + SICK-R
dev (64,342 padded tokens for 59,118), because the lengths are dense: any batch spans a few of them. Packing
removes it: a row of width ``W`` (the longest sentence) holds several sentences one after another, and a
block-diagonal attention mask lets each token attend only to its own sentence's tokens. With each sentence's
position ids counted from its own first token (from ``padding_idx + 1`` on RoBERTa-style embeddings, as they count
them), every token sees exactly what it sees in its own padded row, so the hidden states are the padded pass's up to
float rounding (the matmuls meet other rows; tests/test_packing.py). STS-B + SICK-R dev pack into 60,367 tokens
at 8,192 a pass (2 % over the real ones).

:func:`packed_passes` plans the passes on the host from the token counts the tokenizer gave (nothing is read back
from the device). :class:`PackedPass` holds one pass's index tensors on the device; :func:`packed_backbone` installs,
for the length of an evaluation, two hooks on the backbone module: a call whose ``input_ids`` is one of the planned
passes' padded inputs (the very tensor the encoder built) runs on the packed rows instead, and its outputs are put
back in the padded layout (zeros at the padding), so the pooling code above the backbone reads what it always read.
Any other call (PromptBERT's template rows, a different batch) runs unchanged; a planned pass that never reached the
backbone packed (an embedding that copied its ids) ran its padded layout, and the encoder warns.

Which backbones take packed rows (:func:`packing_refusal`): those whose modeling code takes a prepared 4D mask
(:func:`models.masks.builds_bidirectional_masks`) with an SDPA or eager attention, explicit ``position_ids``, and
absolute positions of a known rule (:data:`POSITION_RULES`, each checked against the padded pass in the tests).
"""
from __future__ import annotations

import bisect
import contextlib
import inspect
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

import torch
from torch import nn

#: Position ids by model type: ``"from_zero"`` (BERT: ``0 .. n-1``) or ``"after_padding"`` (RoBERTa: ``padding_idx
#: + 1 .. padding_idx + n``, ``create_position_ids_from_input_ids``). Model types not listed run padded.
POSITION_RULES: dict[str, str] = {
    "bert": "from_zero", "distilbert": "from_zero", "electra": "from_zero",
    "roberta": "after_padding", "xlm-roberta": "after_padding", "camembert": "after_padding",
}

#: The attention implementations whose mask is a plain 4D tensor (bool for SDPA, additive for eager).
PACKABLE_ATTENTION: tuple[str, ...] = ("sdpa", "eager")

__all__ = ["POSITION_RULES", "PackedPass", "PassLayout", "packed_backbone", "packed_passes", "packing_refusal"]


def packing_refusal(backbone: nn.Module) -> str | None:
    """Why ``backbone`` cannot run packed rows, or ``None`` when it can (module docstring)."""
    from models.masks import builds_bidirectional_masks

    config = getattr(backbone, "config", None)
    if config is None:
        return f"{type(backbone).__name__} has no config"
    if config.model_type not in POSITION_RULES:
        return f"model type {config.model_type!r} has no known position rule (packing knows {sorted(POSITION_RULES)})"
    if getattr(config, "is_decoder", False):
        return "a decoder's attention is causal"
    if config._attn_implementation not in PACKABLE_ATTENTION:
        return f"attention {config._attn_implementation!r} takes no 4D mask"
    if not builds_bidirectional_masks(type(backbone)):
        return f"{type(backbone).__name__} does not build its masks with create_bidirectional_mask"
    if "position_ids" not in inspect.signature(backbone.forward).parameters:
        return f"{type(backbone).__name__}.forward takes no position_ids"
    return None


@dataclass(frozen=True)
class PassLayout:
    """One packed pass, planned on the host: ``sentences`` (indices into the caller's list, in the order of the
    pass's padded rows), ``rows`` packed rows of ``width`` tokens (every pass's: the longest sentence), and for each
    of its sentences the row it sits in and its first token's offset there."""

    sentences: tuple[int, ...]
    width: int
    rows: int
    row_of: tuple[int, ...]
    offset_of: tuple[int, ...]

    @property
    def tokens(self) -> int:
        """The tokens the pass runs: ``rows x width``."""
        return self.rows * self.width


def packed_passes(lengths: Sequence[int], max_tokens: int) -> list[PassLayout]:
    """Pack sentences of ``lengths`` tokens into rows as wide as the longest, and the rows into passes of
    ``max(1, max_tokens // width)`` rows.

    Best fit decreasing: longest first, each sentence goes into the row whose free space fits it most tightly (the
    first such row), or opens a row; so the short sentences fill the long ones' rows. Deterministic (equal lengths
    in input order)."""
    sizes = [max(1, int(length)) for length in lengths]  # an empty sentence still takes a slot
    width = max(sizes, default=1)
    row_of, offset_of = [0] * len(sizes), [0] * len(sizes)
    used: list[int] = []  # tokens taken in each row
    free: list[tuple[int, int]] = []  # (free slots, row) of the rows with room, ascending
    for index in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        length = sizes[index]
        position = bisect.bisect_left(free, (length, -1))
        if position == len(free):
            row = len(used)
            used.append(0)
        else:
            row = free.pop(position)[1]
        row_of[index], offset_of[index] = row, used[row]
        used[row] += length
        if used[row] < width:
            bisect.insort(free, (width - used[row], row))
    rows_per_pass = max(1, max_tokens // width)
    members: list[list[int]] = [[] for _ in range(-(-len(used) // rows_per_pass))]
    for index in sorted(range(len(sizes)), key=lambda i: (row_of[i], offset_of[i])):
        members[row_of[index] // rows_per_pass].append(index)
    return [PassLayout(tuple(indices), width, min(rows_per_pass, len(used) - number * rows_per_pass),
                       tuple(row_of[i] - number * rows_per_pass for i in indices), tuple(offset_of[i] for i in indices))
            for number, indices in enumerate(members)]


class PackedPass:
    """One pass's packing on the device: which padded position goes to which packed slot, the block-diagonal mask
    and the position ids (from zero; :meth:`pack` adds the backbone's start)."""

    def __init__(self, layout: PassLayout, lengths: Sequence[int], device: torch.device) -> None:
        width = layout.width
        lengths_here = torch.tensor([max(1, int(lengths[i])) for i in layout.sentences])
        sentence = torch.repeat_interleave(torch.arange(len(layout.sentences)), lengths_here)
        starts = torch.cumsum(lengths_here, 0) - lengths_here
        token = torch.arange(len(sentence)) - starts[sentence]
        slot = torch.tensor(layout.row_of)[sentence] * width + torch.tensor(layout.offset_of)[sentence] + token
        segment = torch.arange(layout.rows).repeat_interleave(width).neg_().sub_(1)  # a row's free slots: its own
        segment[slot] = sentence
        segment = segment.view(layout.rows, width)
        positions = torch.zeros(layout.tokens, dtype=torch.long)
        positions[slot] = token
        padded_width = int(lengths_here.max()) if len(lengths_here) else 1  # the pass's padded batch: its longest
        self.layout = layout
        self.padded_shape = (len(layout.sentences), padded_width)
        self.padded_index = (sentence * padded_width + token).to(device)  # right padding: token t of row s
        self.slot = slot.to(device)
        self.mask = (segment.unsqueeze(-1) == segment.unsqueeze(-2)).unsqueeze(1).to(device)  # [rows, 1, W, W]
        self.positions = positions.view(layout.rows, width).to(device)
        self.runs = 0  # the backbone calls that ran this pass packed (the encoder checks each pass ran so)

    def pack(self, backbone: nn.Module, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """The backbone's keyword arguments for the packed rows, from those of the padded pass."""
        config = backbone.config
        rows, width = self.layout.rows, self.layout.width
        pad_id = config.pad_token_id if config.pad_token_id is not None else 0
        packed = dict(inputs)
        packed["input_ids"] = self._scatter(inputs["input_ids"], pad_id).view(rows, width)
        if inputs.get("token_type_ids") is not None:
            packed["token_type_ids"] = self._scatter(inputs["token_type_ids"], 0).view(rows, width)
        start = pad_id + 1 if POSITION_RULES[config.model_type] == "after_padding" else 0
        packed["position_ids"] = self.positions + start
        if config._attn_implementation == "sdpa":
            packed["attention_mask"] = self.mask
        else:
            dtype = backbone.get_input_embeddings().weight.dtype
            packed["attention_mask"] = torch.zeros(self.mask.shape, dtype=dtype, device=self.mask.device).masked_fill_(
                ~self.mask, torch.finfo(dtype).min)
        return packed

    def _scatter(self, padded: torch.Tensor, fill: int) -> torch.Tensor:
        flat = padded.new_full((self.layout.tokens,), fill)
        return flat.index_copy_(0, self.slot, padded.reshape(-1).index_select(0, self.padded_index))

    def unpack(self, states: torch.Tensor) -> torch.Tensor:
        """Packed states [rows, W, h] -> the padded pass's layout [N, L, h] (``L``: its longest sentence), zeros at
        the padding."""
        hidden = states.shape[-1]
        padded = states.new_zeros((self.padded_shape[0] * self.padded_shape[1], hidden))
        padded.index_copy_(0, self.padded_index, states.reshape(-1, hidden).index_select(0, self.slot))
        return padded.view(*self.padded_shape, hidden)

    def unpack_outputs(self, backbone: nn.Module, outputs: Any) -> Any:
        """The backbone's outputs in the padded layout: the last hidden state, every hidden state, and the pooler's
        output recomputed from the unpacked [CLS] states (the packed rows' first tokens are not the sentences')."""
        outputs.last_hidden_state = self.unpack(outputs.last_hidden_state)
        if getattr(outputs, "hidden_states", None) is not None:
            outputs.hidden_states = tuple(self.unpack(states) for states in outputs.hidden_states)
        if getattr(outputs, "pooler_output", None) is not None:
            outputs.pooler_output = backbone.pooler(outputs.last_hidden_state)
        return outputs


@contextlib.contextmanager
def packed_backbone(backbone: nn.Module, passes: Mapping[int, PackedPass]) -> Iterator[None]:
    """For the duration: a call of ``backbone`` with keyword ``input_ids`` that is a planned pass's padded input
    (``passes`` maps ``id(input_ids)`` to its :class:`PackedPass`) runs packed, its outputs unpacked; every other
    call runs as it would. The hooks are removed on exit."""
    active: list[PackedPass | None] = []

    def before(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
        planned = passes.get(id(kwargs.get("input_ids")))
        if planned is not None and (args or kwargs.get("output_attentions") or kwargs.get("position_ids") is not None
                                    or kwargs.get("return_dict") is False
                                    or kwargs["input_ids"].shape != planned.padded_shape):
            planned = None  # not the pass as planned: run it as given
        active.append(planned)
        if planned is None:
            return None
        planned.runs += 1
        return args, planned.pack(module, kwargs)

    def after(module: nn.Module, args: tuple, kwargs: dict, outputs: Any) -> Any:
        planned = active.pop()
        return outputs if planned is None else planned.unpack_outputs(module, outputs)

    handles = [backbone.register_forward_pre_hook(before, with_kwargs=True),
               backbone.register_forward_hook(after, with_kwargs=True)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
