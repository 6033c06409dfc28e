"""Counter-based random numbers keyed by (step, dropout module, row, element): dropout masks that do not depend on
how the batch is split.

torch's generators produce a stream: a ``[n, ...]`` draw is not a slice of the ``[B, ...]`` draw, so a backbone pass
over 16 sentences draws other masks for them than a pass over all 64. A cached step (``trainers/cached_step.py``,
``--cache_chunk_size``) encodes the batch chunk by chunk, so with stream dropout it trains on other masks than the
uncached step. Here each random number is a pure function of its key instead (a counter-based generator, as
Philox; Salmon et al., SC 2011): the key of an element of a dropout input is

    (the step's seed, the dropout module's index in the backbone, the row's index in the global batch, the
    element's index inside the row)

so the row of sentence ``i`` gets the same mask whether it is encoded alone, in a chunk, in the full batch, on
another process (its global index includes the process's offset), on another device (integer arithmetic, exact on
CPU and GPU), or again when gradient checkpointing recomputes a layer during backward. "The element's index" is its
coordinates inside the row, never an offset computed from the tensor's shape: a dropout input ``[rows, d1, ...,
dk, n]`` keys each line ``(row, c1, ..., ck)`` by chaining the row's key through the coordinates
(:func:`line_keys`) and element ``j`` of the line by ``line key + j``. So an attention-probability element (head,
query position, key position) or a hidden-state element (position, feature) draws the same number whatever width
the batch is padded to: a process padding its 4 sentences to 9 tokens and one padding the same sentences (among 8)
to 12 give their real positions the same masks. ``--dropout_masks
row_seeded`` (``models.config``) switches the backbone's dropout to these masks;
:class:`models.dropout.RowDropoutController` applies them.

The mixing function is Chris Wellons' ``lowbias32`` (hash-prospector; a bijection of 32-bit integers with low
avalanche bias). Its reference form, :func:`mix32`, is evaluated in int64 so that every product stays below 2**63
(no overflow): the second multiplier is used as its negative twin ``c - 2**32``, which has the same low 32 bits.

The dropout masks, the bulk of the work (one number per element of every dropout input), take faster routes to the
same bits (:func:`keyed_keep_mask`). On a GPU, one kernel compiled by ``torch.compile`` from the rule written out
in int64 (:func:`fused_keep_mask`): it reads nothing and writes one byte per element. Elsewhere (and on a GPU where
it cannot be compiled), int32 tensors holding the 32-bit patterns (half the bytes of int64), logical shifts as an
arithmetic shift and a mask, products wrapping modulo 2**32 (two's complement, as the CPU's and the GPU's integer
multiply do; ``tests/test_row_seeded.py`` checks the result equals the int64 reference on the machine that runs
it, and ``tests/test_cuda.py`` on a GPU), in-place updates (no fresh temporaries) and, on CPU, blocks of
:data:`CPU_BLOCK_ELEMENTS` so that the dozen passes of the mixer stay in the core's cache: about 8x faster than the
int64 route on a CPU, and faster than torch's own ``bernoulli`` dropout (bench/keyed_masks.py; docs/benchmarks.md).
"""
from __future__ import annotations

import math

import torch

MASK32 = 0xFFFFFFFF
_MULTIPLIER_1, _MULTIPLIER_2 = 0x7FEB352D, 0x846CA68B  # lowbias32's multipliers
_MULTIPLIER_2_INT64 = _MULTIPLIER_2 - (1 << 32)  # same low 32 bits as _MULTIPLIER_2; |value| < 2**31
_GOLDEN = 0x9E3779B9  # 2**32 / golden ratio: spreads consecutive keys before mixing
TWO_32 = float(1 << 32)
_SIGN32 = -(1 << 31)  # int32 bit pattern 0x80000000: XOR with it maps unsigned order onto signed order
#: Elements of a keep-mask computed at a time on CPU (int32: 512 KiB per temporary, inside a core's L2 cache).
CPU_BLOCK_ELEMENTS = 1 << 17


def mix32(x: torch.Tensor) -> torch.Tensor:
    """``lowbias32`` of int64 tensors holding values in ``[0, 2**32)``; returns values in the same range."""
    x = x ^ (x >> 16)
    x = (x * _MULTIPLIER_1) & MASK32
    x = x ^ (x >> 15)
    x = (x * _MULTIPLIER_2_INT64) & MASK32
    return x ^ (x >> 16)


def _to_int32(values: torch.Tensor) -> torch.Tensor:
    """int64 values in ``[0, 2**32)`` -> int32 tensors with the same 32 bits (two's complement)."""
    return torch.where(values >= 1 << 31, values - (1 << 32), values).int()


def mix32_int32_(x: torch.Tensor) -> torch.Tensor:
    """:func:`mix32` in place on an int32 tensor of 32-bit patterns (products wrap modulo 2**32; ``(x >> k) &
    (2**(32-k) - 1)`` is the logical shift); returns ``x``."""
    shifted = torch.bitwise_right_shift(x, 16)
    x ^= shifted.bitwise_and_(0xFFFF)
    x.mul_(_MULTIPLIER_1)
    x ^= torch.bitwise_right_shift(x, 15, out=shifted).bitwise_and_(0x1FFFF)
    x.mul_(_MULTIPLIER_2_INT64)
    x ^= torch.bitwise_right_shift(x, 16, out=shifted).bitwise_and_(0xFFFF)
    return x


def mix32_int(x: int) -> int:
    """:func:`mix32` of one Python int (host side: seeds of calls, no device work)."""
    x &= MASK32
    x ^= x >> 16
    x = (x * _MULTIPLIER_1) & MASK32
    x ^= x >> 15
    x = (x * _MULTIPLIER_2) & MASK32
    return x ^ (x >> 16)


def call_seed(step_seed: int, stream: int, call: int) -> int:
    """The 32-bit seed of one draw: the step's seed, a stream (which network / which kind of draw), the dropout
    module's index. Host-side integers only."""
    return mix32_int(mix32_int(mix32_int(step_seed) ^ (step_seed >> 32) ^ (stream * _GOLDEN)) + call * _GOLDEN)


def keyed_bits(seed: int, row_ids: torch.Tensor, row_numel: int) -> torch.Tensor:
    """32-bit random integers [rows, row_numel] (int64): element ``j`` of the row with global index ``row_ids[r]``
    under the draw ``seed``. A row's numbers depend on its id alone, never on the other rows of the tensor."""
    return keyed_element_bits(seed, row_ids, torch.Size([len(row_ids), row_numel]))


def keyed_uniforms(seed: int, row_ids: torch.Tensor, row_numel: int) -> torch.Tensor:
    """float64 numbers in (0, 1) [rows, row_numel] (``(bits + 0.5) / 2**32``), keyed like :func:`keyed_bits`."""
    return (keyed_bits(seed, row_ids, row_numel).double() + 0.5) / TWO_32


def keyed_uniform(seed: int, keys: torch.Tensor) -> torch.Tensor:
    """One float64 in (0, 1) per key [n]: e.g. S-SimCSE's sampled rates per row or view."""
    return keyed_uniforms(seed, keys, 1).squeeze(1)


def inverse_cdf_sample(probabilities: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """One category per row of ``probabilities`` [..., K] (rows summing to 1) from ``uniforms`` [...] in (0, 1): the
    smallest k with ``cdf[k] >= u`` (so category k with probability ``p_k``), as an int64 tensor [...]."""
    cdf = probabilities.cumsum(-1)
    picked = torch.searchsorted(cdf, uniforms.to(cdf.dtype).unsqueeze(-1)).squeeze(-1)
    return picked.clamp_(max=probabilities.size(-1) - 1)  # u above a cdf that rounds to just below 1


def _line_numel(shape: torch.Size) -> int:
    """Elements per line of a dropout input of ``shape``: its last dimension (1 for a 1-D input, one per row)."""
    return shape[-1] if len(shape) > 1 else 1


def line_keys(seed: int, row_ids: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """The keys [rows, lines] (int64) of the lines of a dropout input of ``shape`` whose dimension 0 are the rows
    ``row_ids``: a line is an index ``(c1, ..., ck)`` into the dimensions between the first and the last, flattened
    row-major (one line per row for a 2-D input). The row's key is ``mix32(row_id * golden + seed)``; each coordinate
    chains it once more, ``key' = mix32(key + c * golden)``, so a line's key depends on its coordinates alone, never
    on the sizes of the dimensions (how wide the batch is padded)."""
    keys = mix32((row_ids.long() * _GOLDEN + seed) & MASK32)
    for size in shape[1:-1]:
        coordinates = torch.arange(size, device=row_ids.device, dtype=torch.long) * _GOLDEN
        keys = mix32((keys.unsqueeze(-1) + coordinates) & MASK32)
    return keys.reshape(len(row_ids), -1)


def keyed_element_bits(seed: int, row_ids: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """The 32-bit numbers (int64, ``shape``) of a dropout input's elements, the int64 reference of the masks:
    element ``j`` of a line is ``mix32(line key + j)`` (:func:`line_keys`). For a 2-D input, :func:`keyed_bits`."""
    keys = line_keys(seed, row_ids, shape)
    elements = torch.arange(_line_numel(shape), device=row_ids.device, dtype=torch.long)
    return mix32((keys.unsqueeze(-1) + elements) & MASK32).view(shape)


def keyed_keep_mask(seed: int, row_ids: torch.Tensor, shape: torch.Size, rates: torch.Tensor) -> torch.Tensor:
    """Dropout keep-mask (bool, ``shape``) for an input whose dimension 0 are the rows ``row_ids``: an element is kept
    when its 32-bit number (:func:`keyed_element_bits`) is at least ``rate * 2**32`` of its row, i.e. with
    probability ``1 - rate`` (to within 2**-32). A row at rate 1 (threshold 2**32) keeps nothing.

    One fused kernel computes it where ``torch.compile`` can build one (:func:`fused_keep_mask`); elsewhere the int32
    route runs op by op (:func:`_int32_keep_mask`). Same bits either way; the line keys (:func:`line_keys`, one per
    ``shape[-1]`` elements) come first, in int64."""
    keys = line_keys(seed, row_ids, shape)
    thresholds = (rates.double() * TWO_32).ceil().long()
    fused = fused_keep_mask(row_ids.device.type)
    line_numel = _line_numel(shape)
    if fused is not None and keys.numel() > 0 and line_numel > 0:
        # a tensor of its own, not a view: the compiled kernel would guard on the view's base layout, which differs
        # between 2-, 3- and 4-D inputs, and recompile until torch's limit (8) sends it back to eager (seen on CUDA)
        return fused(keys.clone(), thresholds, line_numel).view(shape)
    return _int32_keep_mask(keys, thresholds, line_numel).view(shape)


def _keep_rule(line_keys: torch.Tensor, thresholds: torch.Tensor, line_numel: int) -> torch.Tensor:
    """The keep rule written out in int64 (compiled as is on CUDA): element ``j`` of line ``l`` of row ``r``
    (``line_keys`` [rows, lines], ``thresholds`` [rows]) is kept iff ``mix32(line_keys[r, l] + j) >=
    thresholds[r]``; -> bool [rows, lines, line_numel]."""
    elements = torch.arange(line_numel, device=line_keys.device, dtype=torch.long)
    return mix32((line_keys.unsqueeze(-1) + elements) & MASK32) >= thresholds.view(-1, 1, 1)


def _int32_operands(line_keys: torch.Tensor, thresholds: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """[rows, lines, 1] int32 keys, and [rows, 1, 1] signed thresholds (``threshold - 2**31``, clamped into int32)
    and whether the row keeps anything at all (threshold below 2**32)."""
    signed = (thresholds.clamp(max=(1 << 32) - 1) + _SIGN32).int()
    return _to_int32(line_keys).unsqueeze(-1), signed.view(-1, 1, 1), (thresholds < 1 << 32).view(-1, 1, 1)


def _int32_rule(keys32: torch.Tensor, signed_thresholds: torch.Tensor, keeps_any: torch.Tensor,
                elements: torch.Tensor) -> torch.Tensor:
    """:func:`_keep_rule` in int32 (module docstring) for the rows given: ``bits ^ 0x80000000 >= threshold - 2**31``
    in signed order is ``bits >= threshold`` in unsigned order; rows whose threshold is 2**32 keep nothing."""
    bits = mix32_int32_(keys32 + elements)
    bits ^= _SIGN32
    return (bits >= signed_thresholds) & keeps_any


def _int32_keep_mask(line_keys: torch.Tensor, thresholds: torch.Tensor, line_numel: int) -> torch.Tensor:
    """:func:`_int32_rule` op by op; on CPU in blocks of :data:`CPU_BLOCK_ELEMENTS` (the passes stay in cache)."""
    keys32, signed_thresholds, keeps_any = _int32_operands(line_keys, thresholds)
    elements = torch.arange(line_numel, device=line_keys.device, dtype=torch.int32)
    rows, row_numel = line_keys.size(0), line_keys.size(1) * line_numel
    on_cpu = line_keys.device.type == "cpu"
    block_rows = max(1, CPU_BLOCK_ELEMENTS // max(row_numel, 1)) if on_cpu else max(rows, 1)
    keep = torch.empty(rows, line_keys.size(1), line_numel, dtype=torch.bool, device=line_keys.device)
    for start in range(0, rows, block_rows):
        block = slice(start, start + block_rows)
        keep[block] = _int32_rule(keys32[block], signed_thresholds[block], keeps_any[block], elements)
    return keep


def _fused_cpu_rule(keys32: torch.Tensor, signed_thresholds: torch.Tensor, keeps_any: torch.Tensor,
                    line_numel: int) -> torch.Tensor:
    """:func:`_int32_rule` over all rows, the body of the compiled CPU loop (its operands from
    :func:`_int32_operands`, computed outside it: compiled together with those int64 -> int32 conversions, inductor's
    AVX2 code gave wrong masks on torch 2.13). The keep-mask leaves the kernel as int8 0/1 (a vectorised store;
    inductor's bool store is several times slower) and is viewed as bool."""
    elements = torch.arange(line_numel, device=keys32.device, dtype=torch.int32)
    return torch.where(_int32_rule(keys32, signed_thresholds, keeps_any, elements), 1, 0).to(torch.int8)


_FUSED: dict[str, object] = {}
#: Set to False to always run the op-by-op int32 route (no ``torch.compile``), e.g. to compare the two.
FUSE_MASKS = True


def fused_keep_mask(device_type: str):
    """The keep rule compiled by ``torch.compile`` for ``device_type`` (dynamic shapes, built once per process):
    on CUDA :func:`_keep_rule` as one Triton kernel (nothing read, a byte written per element); on CPU
    :func:`_fused_cpu_rule` as one vectorised C++ loop. Returns a function ``(line_keys, thresholds, line_numel)
    -> bool mask [rows, lines, line_numel]``, or ``None`` where it cannot be built or fails its check against the rule
    (:func:`_mismatch`): then a warning says why, once, and :func:`_int32_keep_mask` runs, with the same bits."""
    if not FUSE_MASKS or device_type not in ("cpu", "cuda"):
        return None
    if device_type not in _FUSED:
        _FUSED[device_type] = _build_fused(device_type)
    return _FUSED[device_type]


def _build_fused(device_type: str):
    rule = _keep_rule if device_type == "cuda" else _fused_cpu_rule
    try:
        compiled = torch.compile(rule, dynamic=True)
        kernel = compiled if device_type == "cuda" else (
            lambda keys, thresholds, numel: compiled(*_int32_operands(keys, thresholds), numel).view(torch.bool))
        problem = _mismatch(kernel, device_type)  # compiles now: a failure is caught here, not in a training step
    except Exception as error:  # noqa: BLE001 - any compiler failure falls back to the same masks, said once
        problem = f"torch.compile could not build it ({type(error).__name__}: {error})"
    if problem is None:
        return kernel
    import logging

    logging.getLogger(__name__).warning(
        "keyed dropout masks: not using the fused %s kernel: %s; running the int32 route op by op instead (the "
        "same masks, slower)", device_type, problem)
    return None


def _mismatch(kernel, device_type: str) -> str | None:
    """Where a compiled kernel's masks differ from :func:`_keep_rule` on a probe: 24 rows of 3 lines with keys spread
    over the 32-bit range and thresholds at 0, 1, around 2**31, 2**32 - 1 and 2**32 (rate 1), lines of 1003 elements
    (no multiple of a vector width, so both the vectorised body and the tail run; several lines per row, so a
    row's threshold must reach each of its lines). Generated code that is wrong for this machine's instruction set
    is caught here (seen once: inductor's AVX2 code for the rule compiled together with its operands' int64 ->
    int32 conversions, ``ATEN_CPU_CAPABILITY=avx2`` on torch 2.13)."""
    keys = torch.randint(0, 2**32, (24, 3), generator=torch.Generator().manual_seed(0))
    thresholds = torch.tensor([0, 1, 2**31 - 1, 2**31, 2**31 + 1, 2**32 - 1, 2**32, 429496730] * 3)
    want = _keep_rule(keys, thresholds, 1003)
    got = kernel(keys.to(device_type), thresholds.to(device_type), 1003).cpu()
    if torch.equal(got, want):
        return None
    return f"its masks differ from the rule on {int((got != want).sum())} of {want.numel()} probe elements"


__all__ = ["FUSE_MASKS", "call_seed", "fused_keep_mask", "inverse_cdf_sample", "keyed_bits", "keyed_element_bits",
           "keyed_keep_mask", "keyed_uniform", "keyed_uniforms", "line_keys", "mix32", "mix32_int", "mix32_int32_"]
