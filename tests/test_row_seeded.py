"""Row-seeded dropout (``--dropout_masks row_seeded``, models/row_seeded.py): the keyed generator against a written-out
lowbias32, masks that do not depend on the other rows of the pass, the right keep probability and scaling, S-SimCSE's
rates by the inverse CDF, and the refusals that keep it from silently falling back to stream masks.

The step-level proof (a cached step with any chunk size = ``model(**batch)``, every method) is in
tests/test_cached_step.py; two processes = one process with dropout on is in tests/test_ddp.py's worker run.
"""
from __future__ import annotations

import contextlib
import logging
import statistics

import pytest
import torch

import models.row_seeded as row_seeded
from models.dropout import RowDropout, RowDropoutController, rates_from_uniform
from models.row_seeded import (CPU_BLOCK_ELEMENTS, call_seed, inverse_cdf_sample, keyed_bits, keyed_element_bits,
                                keyed_keep_mask, keyed_uniform, mix32, mix32_int, mix32_int32_)
from tests.tiny import save_tiny_backbone, token_batch
from trainers.keyed_dropout import StepDraws, keyed_controllers, keyed_step, pass_sentences, step_draws
from trainers.methods import build_model, resolve_settings


def lowbias32(x: int) -> int:
    """Chris Wellons' lowbias32 as published (hash-prospector), on Python's unbounded ints."""
    x &= 0xFFFFFFFF
    x ^= x >> 16
    x = (x * 0x7FEB352D) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x846CA68B) & 0xFFFFFFFF
    x ^= x >> 16
    return x


# ------------------------------------------------------------------------------------------------ the generator
def test_mix32_is_lowbias32_on_every_32_bit_range():
    values = [0, 1, 2, 3, 255, 65535, 65536, 0x7FFFFFFF, 0x80000000, 0xDEADBEEF, 0xFFFFFFFE, 0xFFFFFFFF]
    values += torch.randint(0, 2**32, (500,), generator=torch.Generator().manual_seed(0)).tolist()
    assert mix32(torch.tensor(values)).tolist() == [lowbias32(v) for v in values]
    assert [mix32_int(v) for v in values] == [lowbias32(v) for v in values]


def test_the_int32_mixer_is_lowbias32_on_every_32_bit_range():
    """The masks' fast route: int32 patterns, wrapping products, logical shifts by arithmetic shift + mask."""
    values = [0, 1, 2, 3, 255, 65535, 65536, 0x7FFFFFFF, 0x80000000, 0xDEADBEEF, 0xFFFFFFFE, 0xFFFFFFFF]
    values += torch.randint(0, 2**32, (5000,), generator=torch.Generator().manual_seed(1)).tolist()
    as_int32 = torch.tensor([v - 2**32 if v >= 2**31 else v for v in values], dtype=torch.int32)
    mixed = [v % 2**32 for v in mix32_int32_(as_int32).tolist()]
    assert mixed == [lowbias32(v) for v in values]


@pytest.fixture(params=["fused", "int32"])
def mask_route(request, monkeypatch):
    """keyed_keep_mask through the compiled kernel (fused_keep_mask) and through the op-by-op int32 route."""
    if request.param == "int32":
        monkeypatch.setattr(row_seeded, "FUSE_MASKS", False)
    elif row_seeded.fused_keep_mask("cpu") is None:
        pytest.skip("torch.compile cannot build a CPU kernel here (no C++ compiler?): the int32 route runs instead")
    return request.param


def test_the_cpu_kernel_is_used_or_the_fallback_says_why(monkeypatch, caplog):
    """The compiled CPU kernel either passed its check against the rule (and is used), or a warning says why not
    (no compiler, or code that is wrong for this instruction set, e.g. ATEN_CPU_CAPABILITY=avx2 on torch 2.13)."""
    monkeypatch.setattr(row_seeded, "_FUSED", {})
    with caplog.at_level(logging.WARNING, logger="models.row_seeded"):
        kernel = row_seeded.fused_keep_mask("cpu")
    if kernel is None:
        assert "not using the fused cpu kernel" in caplog.text
    else:
        assert not caplog.text


def op_by_op_kernel(operands, seed, shape):
    """The op-by-op int32 route behind the compiled kernel's signature ``(operands, seed, shape)``."""
    keys = row_seeded.line_keys(seed, operands.row_ids, shape)
    return row_seeded._int32_keep_mask(keys, operands.thresholds, shape[-1]).view(shape)


def test_a_kernel_that_differs_from_the_rule_is_refused():
    """The check can fail: one flipped element of a kernel's output is caught, and the op-by-op route passes."""
    rule = op_by_op_kernel

    def one_flipped(operands, seed, shape):
        mask = rule(operands, seed, shape)
        mask.view(-1)[500] = ~mask.view(-1)[500]
        return mask

    assert row_seeded._mismatch(rule, "cpu") is None
    assert row_seeded._mismatch(one_flipped, "cpu") == "its masks differ from the rule on 3 of 240720 probe elements"


@pytest.mark.parametrize("seed", [0, 99, 0xFFFFFFFF])
@pytest.mark.parametrize("shape", [(5, 7), (16, 3, 4, 4), (3, CPU_BLOCK_ELEMENTS + 5), (40, 12, 32, 32), (1, 9)])
def test_keep_masks_are_the_reference_bits_against_the_threshold(seed, shape, mask_route):
    """keyed_keep_mask (int32, in place, in cache-sized blocks) = the written-out rule on the int64 reference bits
    (keyed_element_bits): kept iff bits >= ceil(rate * 2**32). Rates include 0 (keep all), 1 (keep none; a threshold outside int32), 0.5
    (a threshold at 2**31, where signed and unsigned order part) and values just around it."""
    shape = torch.Size(shape)
    rows = shape[0]
    rates = torch.rand(rows, generator=torch.Generator().manual_seed(seed % 1000), dtype=torch.float64)
    specials = torch.tensor([0.0, 1.0, 0.5, 0.5 - 2**-33, 0.5 + 2**-33, 2**-32, 1 - 2**-32], dtype=torch.float64)
    rates[:min(rows, len(specials))] = specials[:rows]
    row_ids = torch.arange(rows) * 37 + 11
    bits = keyed_element_bits(seed, row_ids, shape)
    thresholds = (rates * 2.0**32).ceil().long().view(-1, *[1] * (len(shape) - 1))
    assert torch.equal(keyed_keep_mask(seed, row_ids, shape, rates), (bits >= thresholds).view(shape))


def inverse_lowbias32(x: int) -> int:
    """lowbias32's inverse (each step undone in reverse order: xorshifts, products by the multipliers' inverses)."""
    x ^= x >> 16
    x = (x * pow(0x846CA68B, -1, 2**32)) & 0xFFFFFFFF
    x ^= (x >> 15) ^ (x >> 30)
    x = (x * pow(0x7FEB352D, -1, 2**32)) & 0xFFFFFFFF
    return x ^ (x >> 16)


def test_a_row_at_rate_one_keeps_nothing_even_the_largest_number(mask_route):
    """Rate 1: threshold 2**32, beyond every 32-bit number. The seed is chosen so that element 0 of row 0 draws
    0xFFFFFFFF, the one number a threshold clamped into 32 bits would keep."""
    assert inverse_lowbias32(lowbias32(0xDEADBEEF)) == 0xDEADBEEF
    seed = inverse_lowbias32(inverse_lowbias32(0xFFFFFFFF))
    assert keyed_bits(seed, torch.tensor([0]), 1).item() == 0xFFFFFFFF
    rates = torch.tensor([1.0, 1 - 2**-32], dtype=torch.float64)
    mask = keyed_keep_mask(seed, torch.tensor([0, 0]), torch.Size([2, 3]), rates)
    assert mask.tolist() == [[False, False, False], [True, False, False]]


def test_keyed_bits_follow_their_written_out_key():
    seed, row_ids, numel = 12345, torch.tensor([0, 7, 1000]), 5
    bits = keyed_bits(seed, row_ids, numel)
    for r, row in enumerate(row_ids.tolist()):
        row_key = lowbias32((row * 0x9E3779B9 + seed) & 0xFFFFFFFF)
        assert bits[r].tolist() == [lowbias32((row_key + j) & 0xFFFFFFFF) for j in range(numel)]


def test_element_bits_follow_their_written_out_coordinates():
    """An element's number is keyed by its coordinates: the row's key chained through each coordinate but the last
    (line keys), then the last coordinate added, as written out here on Python ints."""
    seed, row_ids, shape = 777, torch.tensor([3, 40]), torch.Size([2, 2, 3, 4])
    bits = keyed_element_bits(seed, row_ids, shape)
    for r, row in enumerate(row_ids.tolist()):
        row_key = lowbias32((row * 0x9E3779B9 + seed) & 0xFFFFFFFF)
        for head in range(2):
            head_key = lowbias32((row_key + head * 0x9E3779B9) & 0xFFFFFFFF)
            for query in range(3):
                line_key = lowbias32((head_key + query * 0x9E3779B9) & 0xFFFFFFFF)
                assert bits[r, head, query].tolist() == [lowbias32((line_key + j) & 0xFFFFFFFF) for j in range(4)]
    assert torch.equal(keyed_element_bits(seed, row_ids, torch.Size([2, 5])), keyed_bits(seed, row_ids, 5))


def test_a_mask_does_not_depend_on_the_padded_width(mask_route):
    """Attention probabilities [rows, heads, L, L] of the same sentences padded to 12 and to 9 positions: the real
    positions get the same masks (a process pads its own batch to its own longest sentence; issue 33: keyed by the
    flat index inside the row, they differed). Hidden states [rows, L, hidden] too (their flat index l * hidden + f
    never depended on L; kept as a guard)."""
    rates = torch.full((6,), 0.3)
    for padded, narrower in (((6, 2, 12, 12), (6, 2, 9, 9)), ((6, 12, 32), (6, 9, 32))):
        wide = keyed_keep_mask(5, torch.arange(6) + 4, torch.Size(padded), rates)
        narrow = keyed_keep_mask(5, torch.arange(6) + 4, torch.Size(narrower), rates)
        assert torch.equal(wide[tuple(slice(0, size) for size in narrower)], narrow), padded
        assert 0.6 < narrow.float().mean() < 0.8


def test_a_rows_mask_does_not_depend_on_the_other_rows():
    """The property a cached step needs: rows 5..12 drawn alone (a chunk) = rows 5..12 of the full draw."""
    shape = torch.Size([16, 3, 4, 4])
    rates = torch.full((16,), 0.3)
    full = keyed_keep_mask(99, torch.arange(16), shape, rates)
    chunk = keyed_keep_mask(99, torch.arange(5, 13), torch.Size([8, 3, 4, 4]), rates[5:13])
    assert torch.equal(chunk, full[5:13])
    assert not torch.equal(keyed_keep_mask(100, torch.arange(16), shape, rates), full)  # another call / step
    assert not torch.equal(full[0], full[1])  # rows differ


def test_keep_probability_and_uniformity():
    rates = torch.tensor([0.0, 0.1, 0.5, 0.9])
    mask = keyed_keep_mask(3, torch.arange(4), torch.Size([4, 200_000]), rates)
    kept = mask.float().mean(1)
    assert kept[0] == 1.0  # rate 0: every element kept (SimCSE++'s dropout-off rows)
    torch.testing.assert_close(kept[1:], 1 - rates[1:], atol=0.005, rtol=0)  # 200k draws: 4 sigma < 0.005
    u = keyed_uniform(5, torch.arange(100_000))
    assert 0 < u.min() and u.max() < 1 and abs(u.mean().item() - 0.5) < 0.005
    counts = torch.histc(u.float(), bins=10, min=0, max=1)
    assert (counts - 10_000).abs().max() < 500  # chi-square-sized deviations only


def test_call_seeds_separate_streams_and_calls():
    seeds = {call_seed(2**40 + 17, stream, call) for stream in range(6) for call in range(40)}
    assert len(seeds) == 240
    assert call_seed(1, 0, 0) != call_seed(1 + 2**32, 0, 0)  # the seed's high bits count


@pytest.mark.parametrize("distribution", ["uniform", "normal"])
def test_rates_from_uniform_is_the_inverse_cdf(distribution):
    u = torch.tensor([0.001, 0.1, 0.3, 0.5, 0.7, 0.9, 0.999], dtype=torch.float64)
    low, high = 0.05, 0.15
    got = rates_from_uniform(distribution, low, high, u)
    if distribution == "uniform":
        want = [low + (high - low) * x for x in u.tolist()]
    else:
        normal = statistics.NormalDist((low + high) / 2, (high - low) / 4)
        want = [min(max(normal.inv_cdf(x), low), high) for x in u.tolist()]
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float32), rtol=1e-6, atol=1e-7)


def test_inverse_cdf_sampling_picks_the_written_out_category():
    probabilities = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.0, 0.5, 0.0, 0.5]])
    for u, want in [(0.05, (0, 1)), (0.1, (0, 1)), (0.11, (1, 1)), (0.31, (2, 1)), (0.61, (3, 3)), (0.99, (3, 3))]:
        got = inverse_cdf_sample(probabilities, torch.tensor([u, u], dtype=torch.float64))
        assert tuple(got.tolist()) == want, u  # smallest k with cdf[k] >= u; a zero-probability k is never picked
    many = inverse_cdf_sample(probabilities[:1].expand(100_000, 4), keyed_uniform(9, torch.arange(100_000)))
    frequencies = torch.bincount(many, minlength=4).double() / 100_000
    torch.testing.assert_close(frequencies, probabilities[0].double(), atol=0.007, rtol=0)  # 4 sigma of 0.4: 0.006


# ------------------------------------------------------------------------------------------------ the module
def keyed(controller: RowDropoutController, seed: int, first: int, count: int) -> StepDraws:
    """Install draws in ``controller`` as a step of ``seed`` whose pass holds sentences ``first .. first + count``."""
    draws = StepDraws()
    draws.seed, draws.first, draws.count = seed, first, count
    controller.use_draws(draws)
    return draws


def test_row_seeded_dropout_applies_its_masks_and_scales():
    controller = RowDropoutController(masks="row_seeded")
    dropout, other_module = RowDropout(0.25, controller, index=3).train(), RowDropout(0.25, controller, index=4)
    x = torch.randn(6, 50, 40)
    keyed(controller, 7, first=10, count=6)
    with controller.plan(torch.zeros(6, dtype=torch.long), num_groups=1):
        y = dropout(x)
        again = dropout(x)  # keyed by the module: the same module re-makes its mask (gradient checkpointing)
        other = other_module.train()(x)  # another module of the pass: another mask
    mask = keyed_keep_mask(call_seed(7, 0, 3), torch.arange(10, 16), x.shape, torch.full((6,), 0.25))
    torch.testing.assert_close(y, x * mask / 0.75)
    assert torch.equal(again, y) and not torch.equal(other, y)
    assert torch.equal(dropout(x), y)  # after the block (a recomputation in backward): the pass's plan and keys
    assert torch.equal(dropout.eval()(x), x)


def test_row_seeded_dropout_refuses_to_fall_back_to_stream_masks():
    controller = RowDropoutController(masks="row_seeded")
    dropout = RowDropout(0.1, controller).train()
    x = torch.ones(2, 3)
    with pytest.raises(RuntimeError, match="has no keyed draws"):
        dropout(x)
    controller.use_draws(StepDraws())
    with pytest.raises(RuntimeError, match="outside a training step"):
        dropout(x)
    with pytest.raises(ValueError, match="row_seeded controllers"):
        RowDropoutController().use_draws(StepDraws())


def test_s_simcse_rates_are_keyed_by_sentence_or_view():
    """w/ sd: a row's rate depends on its global index; w/o sd: one rate per view, the same in every chunk."""
    for sentence_wise in (True, False):
        controller = RowDropoutController("uniform", 0.0, 0.5, sentence_wise=sentence_wise, masks="row_seeded")
        views = torch.arange(2).repeat(6)
        draws = keyed(controller, 3, first=0, count=6)
        with controller.plan(views, num_groups=2):
            full = controller.rates(12, 0.1, torch.device("cpu"), call=4)
        with pass_sentences(draws, 2, 6), controller.plan(views[4:], num_groups=2):
            chunk = controller.rates(8, 0.1, torch.device("cpu"), call=4)
        assert torch.equal(chunk, full[4:])
        assert (full.unique().numel() == 12) if sentence_wise else (full.unique().numel() == 2)


def test_a_staged_key_gives_the_python_integers_masks_rates_and_pass_keys():
    """Once the step's key is staged on the device (the fast path, the step graph), every draw reads it there: the
    same masks and S-SimCSE rates as from the Python integers, in a chunk's pass too, whose key is derived on the
    device; the key is one tensor for the run, written in place (a CUDA graph reads each step's), and carries the
    seed of each stream the controller registered, written out here from the module docstring's rule
    (``mix32(mix32(seed) ^ (seed >> 32) ^ stream * golden)``, with the published mixer: the streams of network 0, its
    four kinds of draw and its rows with explicit keys)."""
    controller = RowDropoutController("uniform", 0.0, 0.5, sentence_wise=True, masks="row_seeded")
    dropout = RowDropout(0.25, controller, index=3).train()
    x, views = torch.randn(12, 5, 8), torch.arange(2).repeat(6)

    def draw() -> tuple[torch.Tensor, torch.Tensor]:
        with controller.plan(views[4:], num_groups=2):
            return dropout(x[4:]), controller.rates(8, 0.1, torch.device("cpu"), call=4)

    def stream_seeds(seed: int) -> list[int]:
        return [lowbias32(lowbias32(seed) ^ (seed >> 32) ^ (stream * 0x9E3779B9)) for stream in (0, 1, 2, 3, 256)]

    draws = keyed(controller, 11, first=6, count=6)
    with pass_sentences(draws, 2, 6):
        from_integers = draw()
    draws.stage(torch.device("cpu"))
    staged = draws.pass_key
    assert staged.tolist() == [11, 6, *stream_seeds(11)]
    with pass_sentences(draws, 2, 6):
        assert draws.pass_key.tolist() == [11, 8, *stream_seeds(11)]
        from_device = draw()
    assert draws.pass_key is staged and staged.tolist() == [11, 6, *stream_seeds(11)]
    assert all(map(torch.equal, from_integers, from_device))
    draws.seed = 12
    draws.stage(torch.device("cpu"))
    assert draws.pass_key is staged and staged.tolist() == [12, 6, *stream_seeds(12)]


def test_a_stream_missing_from_the_staged_key_is_seeded_from_the_steps_seed():
    """A controller that gets the draws once a key has been staged (DiffCSE's discriminator network, stream 1, here)
    gets no slot: the staged key keeps its size (a captured CUDA graph reads that tensor) and its draws derive its
    stream's seed from the staged step seed on the device: the same masks as from the Python integers."""
    first = RowDropoutController(masks="row_seeded")
    draws = keyed(first, 2**61 + 5, first=0, count=6)
    late = RowDropoutController(masks="row_seeded", stream=1)
    dropout = RowDropout(0.25, late, index=3).train()
    x = torch.randn(6, 5, 8)
    with late.plan(torch.zeros(6, dtype=torch.long), num_groups=1):
        draws.stage(torch.device("cpu"))
        staged = draws.pass_key
        draws.pass_key = None
        late.use_draws(draws)
        from_integers = dropout(x)
        draws.stage(torch.device("cpu"))
        assert draws.pass_key is staged and staged.numel() == 2 + len(first.keyed_streams())
        from_device = dropout(x)
    assert torch.equal(from_integers, from_device) and not torch.equal(from_device, x)


def test_a_compiled_dropout_call_mixes_only_its_own_index_into_its_streams_seed():
    """In a compiled graph a dropout call reads its stream's seed from the staged key: the graph of a call on a
    ``[rows, positions, features]`` input mixes 4 times (the call's index into the stream seed, the row, the
    position, the element), 3 XORs each; derived from the step's seed (the key before stream seeds: 2 mixes more
    and 2 XORs) it traced 20 XORs. The masks equal the eager ones."""
    import operator

    controller = RowDropoutController(masks="row_seeded")
    draws = StepDraws()
    controller.use_draws(draws)
    dropout = RowDropout(0.25, controller, index=3).train()
    graphs = []

    def capture(graph_module, example_inputs):
        graphs.append(graph_module)
        return graph_module.forward

    def masks(x: torch.Tensor) -> torch.Tensor:
        with controller.plan(torch.zeros(6, dtype=torch.long), num_groups=1):
            return dropout(x)

    x = torch.ones(6, 5, 8)
    draws.seed, draws.first, draws.count = 2**61 + 9, 0, 6
    eager = masks(x)
    draws.stage(torch.device("cpu"))
    torch._dynamo.reset()
    compiled = torch.compile(masks, backend=capture, fullgraph=True)(x)
    assert torch.equal(eager, compiled)
    xors = [node for graph in graphs for node in graph.graph.nodes if node.target in (operator.xor, torch.bitwise_xor)]
    assert len(graphs) == 1 and len(xors) == 12


# ------------------------------------------------------------------------------------------------ the model
def test_stream_is_the_default_and_row_seeded_swaps_every_dropout(tmp_path):
    """The model marks its controllers row-seeded; the builder installs the step's draws; the step draws one seed
    (from Python's random) for every pass inside it, re-entrantly, and places the process's sentences."""
    backbone = save_tiny_backbone(tmp_path / "bert", seed=0)
    plain = build_model("simcse", str(backbone))
    assert plain.config.dropout_masks == "stream" and plain.dropout_controller is None
    assert step_draws(plain) is None
    keyed_model = build_model("simcse", str(backbone), dropout_masks="row_seeded")
    assert keyed_model.dropout_controller.row_seeded
    assert not any(type(m) is torch.nn.Dropout for m in keyed_model.encoder.modules())
    assert [c.stream for c in keyed_controllers(keyed_model)] == [0]
    keyed_model.train()
    ids, mask = token_batch(4, 2, seed=1)
    with pytest.raises(RuntimeError, match="outside a training step"):
        keyed_model.encode_views(ids, mask)  # a pass outside a training step has no step seed
    draws = step_draws(keyed_model)
    with keyed_step(keyed_model, 4):
        seed = draws.seed
        assert seed is not None and (draws.first, draws.count) == (0, 4)
        with keyed_step(keyed_model, 4):  # re-entrant: the inner block keeps the step's seed
            assert draws.seed == seed
        keyed_model.encode_views(ids, mask)
    assert draws.seed is None


@pytest.mark.parametrize("dropout_masks", ["stream", "row_seeded"])
def test_a_step_finds_its_draws_without_walking_the_model(tmp_path, monkeypatch, dropout_masks):
    """The builder's install is remembered: a training step (``keyed_step``) never walks the model's modules for its
    draws (a few hundred; on a GPU the step waits on the host), with stream masks (no draws) or row-seeded ones."""
    backbone = save_tiny_backbone(tmp_path / "bert", seed=0)
    model = build_model("simcse", str(backbone), dropout_masks=dropout_masks)
    installed = step_draws(model)
    assert (installed is None) == (dropout_masks == "stream")
    monkeypatch.setattr(type(model), "modules", lambda self: (_ for _ in ()).throw(
        AssertionError("the step walked the model's modules")))
    with keyed_step(model, 4) as draws:
        assert draws is installed


def test_cache_chunk_size_turns_row_seeded_masks_on_unless_told_otherwise(caplog):
    """One place resolves every setting, the cached step's mask default included."""
    assert resolve_settings("simcse", {"temperature": 0.05}) == {"temperature": 0.05, "method": "simcse"}
    with caplog.at_level(logging.INFO):
        assert resolve_settings("simcse", {}, cache_chunk_size=16)["dropout_masks"] == "row_seeded"
    assert "row-seeded" in caplog.text
    assert resolve_settings("s_simcse", {"dropout_masks": "row_seeded"}, cache_chunk_size=16)["dropout_masks"] == \
        "row_seeded"
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert resolve_settings("simcse", {"dropout_masks": "stream"}, cache_chunk_size=16)["dropout_masks"] == \
            "stream"
    assert "each chunk draws its own dropout masks" in caplog.text


def test_the_run_summary_names_a_cached_step_and_its_masks():
    from command_line.summary import describe_step

    from types import SimpleNamespace as Namespace

    config = lambda masks: Namespace(dropout_masks=masks)  # noqa: E731
    assert describe_step(config("stream"), Namespace(cache_chunk_size=None)) is None  # the plain step adds no line
    assert describe_step(config("row_seeded"), Namespace(cache_chunk_size=16)) == (
        "cached, 16 sentences per backbone pass (--cache_chunk_size); "
        "row_seeded dropout masks (--dropout_masks; docs/cached_training.md)")
    assert describe_step(config("stream"), Namespace(cache_chunk_size=16)).startswith("cached, 16 sentences")


def test_the_compiled_keep_rule_is_not_recompiled_for_each_input_layout(monkeypatch):
    """The CUDA kernel's body, compiled as it is there (``dynamic=True``; the eager backend on this CPU): dropout
    inputs of rank 2, 3 and 4, many widths and row counts, and a fresh seed per call reach it with one graph per rank
    (the seed and the sizes are symbolic integers). Handing the old kernel the line keys' view (its base's layout
    differs per input rank) compiled a graph per layout on an H200, until torch's recompile limit sent the masks back
    to the op-by-op route. Calls with and without autograd (a cached step's two passes) share the graphs: the grad
    mode, one of a compiled function's guards, compiled each rank twice before (6 graphs)."""
    import random

    from torch._dynamo.utils import counters

    from models import row_seeded

    compiled = row_seeded._kernel(torch.compile(row_seeded._keyed_rule, dynamic=True, backend="eager"), "cuda")
    calls = {"n": 0}

    def kernel(operands, seed, shape):
        calls["n"] += 1
        return compiled(operands, seed, shape)

    counters.clear()
    rng = random.Random(0)
    monkeypatch.setitem(row_seeded._FUSED, "cpu", kernel)
    for _ in range(40):
        rows, width = rng.choice([4, 8, 16]), rng.randint(5, 32)
        shape = torch.Size(rng.choice([(rows, width, 64), (rows, 4, width, width), (rows, 64)]))
        seed, rates = rng.getrandbits(32), torch.full((rows,), 0.1)
        with torch.set_grad_enabled(rng.random() < 0.5):
            mask = row_seeded.keyed_keep_mask(seed, torch.arange(rows), shape, rates)
        assert torch.equal(mask, keyed_element_bits(seed, torch.arange(rows), shape) >= 429496730)
    assert calls["n"] == 40
    assert counters["stats"]["unique_graphs"] <= 3, dict(counters["stats"])


def test_a_row_seeded_step_launches_few_ops_per_dropout_call(tmp_path):
    """Issue 32 item 4: on a GPU a row-seeded step is bound by the host launching kernels, so a dropout call must
    not rebuild its rows' keys and thresholds op by op. A SimCSE step (forward + backward) of the tiny BERT (7
    dropout calls per forward), batch 8 of length 9, counted by bench.step_ops (ATen ops dispatched; a compiled
    keep-mask call counts one): measured 319 ops more than the stream-mask step before (about 45 per call: the row
    ids, per-call rates and thresholds, the line keys' chain, the int32 operands), 12 after (the mask product and
    the division, the pass's rates, ids and thresholds once). The budget: at most 4 extra ops per dropout call."""
    from bench.step_ops import COMPILED, count_ops
    from trainers.keyed_dropout import keyed_step

    backbone = save_tiny_backbone(tmp_path / "bert")
    counts = {}
    for masks in ("stream", "row_seeded"):
        model = build_model("simcse", str(backbone), dropout_masks=masks).train()
        ids, mask = token_batch(8, 2, 9, same_views=True)
        for counting in (False, True):  # the first step compiles the kernel (its probe's ops are not the step's)
            with keyed_step(model, 8), (count_ops() if counting else contextlib.nullcontext()) as counter:
                model(input_ids=ids, attention_mask=mask).loss.backward()
        counts[masks] = counter
    if counts["row_seeded"].ops[COMPILED] == 0:
        pytest.skip("no compiled keep-mask kernel here: the op-by-op route's ops are not what a GPU launches")
    calls, extra = counts["row_seeded"].ops[COMPILED], counts["row_seeded"].total - counts["stream"].total
    assert calls == 7
    assert extra <= 4 * calls, (extra, counts["row_seeded"].ops.most_common(12))


def test_the_cuda_rule_multiplies_no_index_by_a_constant_outside_int32():
    """The CUDA kernel's rule (``_keyed_rule``) as inductor sees it: an ``arange`` times a Python constant becomes an
    index expression, which Triton computes in int32 when the sizes are small and refuses to compile with a constant
    outside int32 (an H100 run: "Scalar 2654435769 is out of range for type int32"). Every such constant fits."""
    from torch.fx.experimental.proxy_tensor import make_fx

    graph = make_fx(row_seeded._keyed_rule)(torch.arange(4), torch.zeros(4, dtype=torch.long), 7, 3, 5, 6).graph
    from_arange = set()
    for node in graph.nodes:
        inputs = [a for a in node.args if isinstance(a, torch.fx.Node)]
        arithmetic = node.target in (torch.ops.aten.mul.Tensor, torch.ops.aten.add.Tensor)
        if node.target in (torch.ops.aten.arange.start_step, torch.ops.aten.arange.default) or (
                arithmetic and any(a in from_arange for a in inputs)):
            from_arange.add(node)
        if node.target == torch.ops.aten.mul.Tensor and any(a in from_arange for a in inputs):
            constants = [a for a in node.args if isinstance(a, int)]
            assert all(-(1 << 31) <= c < 1 << 31 for c in constants), (node, constants)
    assert from_arange  # the coordinates were found


def recorded_builds(monkeypatch) -> list[str]:
    """A fresh process's state for the CPU kernel (none built yet), whose builds are recorded and return the
    op-by-op route behind the kernel's signature (no compile in the test)."""
    builds = []

    def build(device_type):
        builds.append(device_type)

        def kernel(operands, seed, shape):
            kernel.calls += 1
            return op_by_op_kernel(operands, seed, shape)
        kernel.calls = 0
        return kernel

    monkeypatch.setattr(row_seeded, "_FUSED", {})
    monkeypatch.setattr(row_seeded, "FUSE_MASKS", True)
    monkeypatch.setattr(row_seeded, "_build_fused", build)
    return builds


def test_a_small_cpu_input_takes_the_op_by_op_route_until_an_input_of_the_kernels_size_builds_it(monkeypatch):
    """On a CPU the compiled kernel (7.3 s to build warm, 59 s cold, once in every process) is built at the first
    call whose input has at least CPU_FUSED_MIN_ELEMENTS elements; a smaller input before it gets its mask op by op,
    the same bits. Once built, every call uses it. Inputs of the tiny test model's sizes, the threshold, one below."""
    builds = recorded_builds(monkeypatch)
    rates = torch.full((8,), 0.1)
    threshold = row_seeded.CPU_FUSED_MIN_ELEMENTS

    def mask_equals_rule(seed, shape):
        shape = torch.Size(shape)
        mask = keyed_keep_mask(seed, torch.arange(shape[0]), shape, rates[:shape[0]])
        want = keyed_element_bits(seed, torch.arange(shape[0]), shape) >= 429496730
        return torch.equal(mask, want)

    for seed, shape in ((3, (8, 11, 32)), (4, (8, 2, 11, 11)), (5, (8, threshold // 8 - 1))):
        assert mask_equals_rule(seed, shape)
    assert builds == [] and "cpu" not in row_seeded._FUSED
    assert mask_equals_rule(6, (8, 2, threshold // 16))  # exactly the threshold: built, and used
    assert builds == ["cpu"] and row_seeded._FUSED["cpu"].calls == 1
    assert mask_equals_rule(7, (8, 11, 32))  # a small input once it exists: the kernel
    assert builds == ["cpu"] and row_seeded._FUSED["cpu"].calls == 2


def test_a_tiny_models_row_seeded_run_builds_no_cpu_kernel(tmp_path, monkeypatch, capsys):
    """Through the entry point: ``run_unsup.py --dropout_masks row_seeded`` on the tiny BERT (its dropout inputs
    a few thousand elements) trains its keyed masks op by op, without building the compiled kernel; on CUDA the kernel
    is built at the first call whatever its size (``_fuses``)."""
    import run_unsup
    from tests.cli import in_process
    from tests.tiny import tiny_corpus

    builds = recorded_builds(monkeypatch)
    op_by_op = {"calls": 0}
    route = row_seeded._int32_keep_mask

    def counted_route(*args):
        op_by_op["calls"] += 1
        return route(*args)

    monkeypatch.setattr(row_seeded, "_int32_keep_mask", counted_route)
    backbone = save_tiny_backbone(tmp_path / "bert", seed=0)
    corpus = tiny_corpus(tmp_path / "corpus.txt", n=16)
    result = in_process(run_unsup.main, [
        "--method", "simcse", "--dropout_masks", "row_seeded", "--model_name_or_path", str(backbone),
        "--train_file", str(corpus), "--output_dir", str(tmp_path / "run"), "--max_steps", "2",
        "--per_device_train_batch_size", "4", "--eval_strategy", "no", "--save_strategy", "no", "--report_to", "none",
        "--disable_tqdm", "true", "--use_cpu", "true", "--bf16", "false"], capsys)
    assert result.code == 0, result.err[-2000:]
    assert op_by_op["calls"] >= 2 * 7  # its masks were keyed: 7 dropout calls a forward, 2 steps
    assert builds == [] and "cpu" not in row_seeded._FUSED
    assert row_seeded._fuses("cuda", torch.Size([4, 11, 32])) and not row_seeded._fuses("cpu", torch.Size([4, 11, 32]))


def test_a_fused_kernel_that_fails_later_gives_way_to_the_same_masks(monkeypatch, caplog):
    """A compiled kernel that passed its build-time check but fails on a later input (a new specialisation that does
    not compile) is dropped for the process with one warning, and that call's mask comes from the op-by-op route."""
    def failing(operands, seed, shape):
        raise RuntimeError("InductorError: a kernel failed to compile")

    monkeypatch.setitem(row_seeded._FUSED, "cpu", failing)
    rates, rows, shape = torch.full((4,), 0.25), torch.arange(4) + 9, torch.Size([4, 3, 8])
    with caplog.at_level(logging.WARNING, logger="models.row_seeded"):
        mask = keyed_keep_mask(11, rows, shape, rates)
    want = keyed_element_bits(11, rows, shape) >= (rates.double() * 2**32).ceil().long().view(-1, 1, 1)
    assert torch.equal(mask, want)
    assert row_seeded._FUSED["cpu"] is None and "failed on an input of shape [4, 3, 8]" in caplog.text
