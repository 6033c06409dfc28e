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
same bits (:func:`keyed_keep_mask`). A dropout call is ONE call of a function compiled by ``torch.compile``
(:func:`fused_keep_mask`): from the rows' ids and thresholds, made once per backbone pass (:class:`KeepOperands`),
and the call's seed and input sizes, passed as integers, it computes the line keys and the mask in one graph (on a
GPU, where the step is bound by the host launching kernels, the ~45 small eager operations per call that built the
keys and thresholds before were most of the masks' cost; issue 32): on CUDA from the rule written out in int64
(it reads nothing but the rows' operands and writes one byte per element), on CPU from its int32 form. Where no
compiler exists, the line keys in int64, then int32 tensors holding the 32-bit patterns (half the bytes of int64), logical shifts as an
arithmetic shift and a mask, products wrapping modulo 2**32 (two's complement, as the CPU's and the GPU's integer
multiply do; ``tests/test_row_seeded.py`` checks the result equals the int64 reference on the machine that runs
it, and ``tests/test_cuda.py`` on a GPU), in-place updates (no fresh temporaries) and, on CPU, blocks of
:data:`CPU_BLOCK_ELEMENTS` so that the dozen passes of the mixer stay in the core's cache: about 8x faster than the
int64 route on a CPU, and faster than torch's own ``bernoulli`` dropout (bench/keyed_masks.py; docs/benchmarks.md).
The same int32 route serves a CPU call on an input too small to be worth the compiled kernel's build
(:data:`CPU_FUSED_MIN_ELEMENTS`).

Inside a compiled backbone (the fast path, ``trainers/fast_path.py``) the seeds are tensors: the step's seed and
each network's stream seeds (:func:`stream_seed`, computed on the host) reach the graph as one device tensor
(``trainers.keyed_dropout.StepDraws.stage``), each call's seed is :func:`call_seed_tensor` of its stream's seed and
its mask the int64 rule (:func:`_keyed_rule`), all in the backbone's graph, which the compiler fuses with the dropout
the mask feeds: the same bits as the eager route, with no host value compiled in.
"""
from __future__ import annotations

import functools
import math

import torch

MASK32 = 0xFFFFFFFF
_MULTIPLIER_1, _MULTIPLIER_2 = 0x7FEB352D, 0x846CA68B  # lowbias32's multipliers
_MULTIPLIER_2_INT64 = _MULTIPLIER_2 - (1 << 32)  # same low 32 bits as _MULTIPLIER_2; |value| < 2**31
_GOLDEN = 0x9E3779B9  # 2**32 / golden ratio: spreads consecutive keys before mixing
_GOLDEN_INT32 = _GOLDEN - (1 << 32)  # its int32 pattern (the CPU kernel)
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


@functools.lru_cache(maxsize=256)
def stream_seed(step_seed: int, stream: int) -> int:
    """The part of a draw's seed that the step's seed and the stream alone decide (every dropout call of a network
    shares it): ``mix32(mix32(step_seed) ^ (step_seed >> 32) ^ stream * golden)``. Host-side integers only; kept
    for the last steps' streams, so a step's dropout calls and its staged key compute each once."""
    return mix32_int(mix32_int(step_seed) ^ (step_seed >> 32) ^ (stream * _GOLDEN))


def call_seed_from(stream_seed_: int, call: int) -> int:
    """The 32-bit seed of draw ``call`` (the dropout module's index) of a stream whose :func:`stream_seed` is
    ``stream_seed_``: ``mix32(stream_seed + call * golden)``."""
    return mix32_int(stream_seed_ + call * _GOLDEN)


def call_seed(step_seed: int, stream: int, call: int) -> int:
    """The 32-bit seed of one draw: the step's seed, a stream (which network / which kind of draw), the dropout
    module's index (:func:`stream_seed`, then :func:`call_seed_from`). Host-side integers only."""
    return call_seed_from(stream_seed(step_seed, stream), call)


def stream_seed_tensor(step_seed: torch.Tensor, stream: int) -> torch.Tensor:
    """:func:`stream_seed` of a step seed held in a 0-d int64 tensor (a value below 2**62), computed by tensor
    operations (a compiled backbone reads the step's seed as an input of its graph, not a constant compiled into it:
    a new graph every step). The same 32 bits: :func:`mix32_int` keeps its operand's low 32 bits, which XOR takes
    from its operands' low 32 bits alone, so the constant enters reduced modulo 2**32."""
    low = mix32(step_seed & MASK32) ^ (step_seed >> 32) ^ ((stream * _GOLDEN) & MASK32)
    return mix32(low & MASK32)


def call_seed_tensor(stream_seed_: torch.Tensor, call: int | torch.Tensor) -> torch.Tensor:
    """:func:`call_seed_from` of a stream seed held in a 0-d int64 tensor (a value below 2**32: staged from the host,
    ``trainers.keyed_dropout.StepDraws.stage``, or :func:`stream_seed_tensor`) and a call given as an integer or a
    0-d int64 tensor (a dropout module's ``call`` buffer, what the layers compiled one at a time share)."""
    return mix32((stream_seed_ + ((call * _GOLDEN) & MASK32)) & MASK32)


def keyed_bits(seed: int | torch.Tensor, row_ids: torch.Tensor, row_numel: int) -> torch.Tensor:
    """32-bit random integers [rows, row_numel] (int64): element ``j`` of the row with global index ``row_ids[r]``
    under the draw ``seed``. A row's numbers depend on its id alone, never on the other rows of the tensor."""
    return keyed_element_bits(seed, row_ids, torch.Size([len(row_ids), row_numel]))


def keyed_uniforms(seed: int | torch.Tensor, row_ids: torch.Tensor, row_numel: int) -> torch.Tensor:
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


def line_keys(seed: int | torch.Tensor, row_ids: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """The keys [rows, lines] (int64) of the lines of a dropout input of ``shape`` whose dimension 0 are the rows
    ``row_ids``: a line is an index ``(c1, ..., ck)`` into the dimensions between the first and the last, flattened
    row-major (one line per row for a 2-D input). The row's key is ``mix32(row_id * golden + seed)``; each coordinate
    chains it once more, ``key' = mix32(key + c * golden)``, so a line's key depends on its coordinates alone, never
    on the sizes of the dimensions (how wide the batch is padded)."""
    keys = mix32((row_ids.long() * _GOLDEN_INT32 + seed) & MASK32)
    for size in shape[1:-1]:
        # golden's int32 pattern (same low 32 bits, all a key keeps): a product of an index and a constant above
        # 2**31 is an index expression Triton refuses to compile in int32 ("Scalar 2654435769 is out of range for
        # type int32", an H100 run), and inductor indexes in int32 when the sizes are small
        coordinates = torch.arange(size, device=row_ids.device, dtype=torch.long) * _GOLDEN_INT32
        keys = mix32((keys.unsqueeze(-1) + coordinates) & MASK32)
    return keys.reshape(len(row_ids), -1)


def keyed_element_bits(seed: int | torch.Tensor, row_ids: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """The 32-bit numbers (int64, ``shape``) of a dropout input's elements, the int64 reference of the masks:
    element ``j`` of a line is ``mix32(line key + j)`` (:func:`line_keys`). For a 2-D input, :func:`keyed_bits`."""
    keys = line_keys(seed, row_ids, shape)
    elements = torch.arange(_line_numel(shape), device=row_ids.device, dtype=torch.long)
    return mix32((keys.unsqueeze(-1) + elements) & MASK32).view(shape)


class KeepOperands:
    """The per-row operands of a pass's keep-masks, made ONCE per pass and shared by all its dropout calls (on a GPU
    the step is bound by the host launching kernels, so a call must not rebuild them): the rows' ids and their
    thresholds ``ceil(rate * 2**32)`` (int64, [rows]), and on demand their int32 forms for the CPU kernel
    (:meth:`int32`). What differs between the calls of a pass, the call's seed and its input's shape, is given to
    :func:`keyed_keep_mask_from` as host values."""

    def __init__(self, row_ids: torch.Tensor, rates: torch.Tensor) -> None:
        self.row_ids = row_ids.long()
        self.thresholds = (rates.double() * TWO_32).ceil().long()
        self._int32: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    def int32(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """[rows] int32 row ids (their low 32 bits: all a key uses), signed thresholds and whether the row keeps
        anything (:func:`_int32_thresholds`), converted once."""
        if self._int32 is None:
            self._int32 = (_to_int32(self.row_ids & MASK32), *_int32_thresholds(self.thresholds))
        return self._int32


def keyed_keep_mask(seed: int, row_ids: torch.Tensor, shape: torch.Size, rates: torch.Tensor) -> torch.Tensor:
    """Dropout keep-mask (bool, ``shape``) for an input whose dimension 0 are the rows ``row_ids``: an element is kept
    when its 32-bit number (:func:`keyed_element_bits`) is at least ``rate * 2**32`` of its row, i.e. with
    probability ``1 - rate`` (to within 2**-32). A row at rate 1 (threshold 2**32) keeps nothing. One call's
    :func:`keyed_keep_mask_from` (a pass's calls share their :class:`KeepOperands`)."""
    return keyed_keep_mask_from(seed, KeepOperands(row_ids, rates), shape)


def keyed_keep_mask_from(seed: int | torch.Tensor, operands: KeepOperands, shape: torch.Size) -> torch.Tensor:
    """:func:`keyed_keep_mask` of the draw ``seed`` from a pass's :class:`KeepOperands`. One compiled call where
    ``torch.compile`` can build it (:func:`fused_keep_mask`: the line keys and the mask in one graph, the seed and
    the sizes passed as integers, so no tensor is made on the host) and it is worth its build (:func:`_fuses`: on a
    CPU, not for a small input before the kernel exists); elsewhere the line keys (:func:`line_keys`, int64) then the
    int32 route op by op (:func:`_int32_keep_mask`). Same bits either way.

    A seed given as a 0-d int64 tensor (:func:`call_seed_tensor`) is a call inside a compiled backbone's graph: the
    rule written out in int64 (:func:`_keyed_rule`), which the compiler fuses with the dropout it feeds."""
    if isinstance(seed, torch.Tensor):
        return _keyed_rule(operands.row_ids, operands.thresholds, seed, *shape[1:])
    device_type = operands.row_ids.device.type
    fused = fused_keep_mask(device_type) if _fuses(device_type, shape) else None
    if fused is not None and shape.numel() > 0:
        try:
            return fused(operands, seed, shape)
        except torch.OutOfMemoryError:
            raise
        except Exception as error:  # noqa: BLE001 - a compile failure for a new specialisation: same masks op by op
            last_line = str(error).strip().splitlines()[-1][:300] if str(error).strip() else ""
            _give_up_fused(device_type, f"it failed on an input of shape {list(shape)} ({type(error).__name__}: "
                                        f"{last_line})")
    keys = line_keys(seed, operands.row_ids, shape)
    return _int32_keep_mask(keys, operands.thresholds, _line_numel(shape)).view(shape)


def _keep_rule(line_keys: torch.Tensor, thresholds: torch.Tensor, line_numel: int) -> torch.Tensor:
    """The keep rule written out in int64: element ``j`` of line ``l`` of row ``r`` (``line_keys`` [rows, lines],
    ``thresholds`` [rows]) is kept iff ``mix32(line_keys[r, l] + j) >= thresholds[r]``; -> bool [rows, lines,
    line_numel]."""
    elements = torch.arange(line_numel, device=line_keys.device, dtype=torch.long)
    return mix32((line_keys.unsqueeze(-1) + elements) & MASK32) >= thresholds.view(-1, 1, 1)


def _keyed_rule(row_ids: torch.Tensor, thresholds: torch.Tensor, seed: int | torch.Tensor,
                *sizes: int) -> torch.Tensor:
    """A call's whole keep-mask in int64 (compiled as is for CUDA: one graph, no eager op before it): the line keys
    of an input ``[rows, *sizes]`` (:func:`line_keys`) and the rule on them (:func:`_keep_rule`) -> bool
    ``[rows, *sizes]``."""
    shape = (row_ids.size(0), *sizes)
    keys = line_keys(seed, row_ids, shape)
    return _keep_rule(keys, thresholds, _line_numel(shape)).view(shape)


def _keyed_rule_int32(row_ids32: torch.Tensor, signed_thresholds: torch.Tensor, keeps_any: torch.Tensor,
                      seed32: int, *sizes: int) -> torch.Tensor:
    """:func:`_keyed_rule` in int32 (the CPU kernel's body; module docstring): every key is a 32-bit pattern whose
    sums and products wrap modulo 2**32, so ``row_id * golden + seed`` and each coordinate's chaining give the int64
    route's bits; ``seed32`` is the seed's pattern as a signed int. Its operands come converted
    (:meth:`KeepOperands.int32`): compiled together with int64 -> int32 conversions, inductor's AVX2 code gave wrong
    masks on torch 2.13. The mask leaves as int8 0/1 (a vectorised store; inductor's bool store is several times
    slower), viewed as bool by the caller."""
    rows = row_ids32.size(0)
    keys = mix32_int32_(row_ids32 * _GOLDEN_INT32 + seed32)  # in place on fresh temporaries: what compile traces
    for size in sizes[:-1]:
        coordinates = torch.arange(size, device=row_ids32.device, dtype=torch.int32) * _GOLDEN_INT32
        keys = mix32_int32_(keys.unsqueeze(-1) + coordinates)
    elements = torch.arange(sizes[-1] if sizes else 1, device=row_ids32.device, dtype=torch.int32)
    keep = _int32_rule(keys.reshape(rows, -1, 1), signed_thresholds.view(-1, 1, 1), keeps_any.view(-1, 1, 1),
                       elements)
    return torch.where(keep, 1, 0).to(torch.int8).view(rows, *sizes)


def _int32_thresholds(thresholds: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[rows] signed thresholds (``threshold - 2**31``, clamped into int32) and whether the row keeps anything at
    all (threshold below 2**32)."""
    return (thresholds.clamp(max=(1 << 32) - 1) + _SIGN32).int(), thresholds < 1 << 32


def _int32_rule(keys32: torch.Tensor, signed_thresholds: torch.Tensor, keeps_any: torch.Tensor,
                elements: torch.Tensor) -> torch.Tensor:
    """:func:`_keep_rule` in int32 (module docstring) for the rows given: ``bits ^ 0x80000000 >= threshold - 2**31``
    in signed order is ``bits >= threshold`` in unsigned order; rows whose threshold is 2**32 keep nothing."""
    bits = mix32_int32_(keys32 + elements)
    bits ^= _SIGN32
    return (bits >= signed_thresholds) & keeps_any


def _int32_keep_mask(line_keys: torch.Tensor, thresholds: torch.Tensor, line_numel: int) -> torch.Tensor:
    """:func:`_int32_rule` op by op; on CPU in blocks of :data:`CPU_BLOCK_ELEMENTS` (the passes stay in cache)."""
    signed, keeps = _int32_thresholds(thresholds)
    keys32, signed_thresholds = _to_int32(line_keys).unsqueeze(-1), signed.view(-1, 1, 1)
    keeps_any = keeps.view(-1, 1, 1)
    elements = torch.arange(line_numel, device=line_keys.device, dtype=torch.int32)
    rows, row_numel = line_keys.size(0), line_keys.size(1) * line_numel
    on_cpu = line_keys.device.type == "cpu"
    block_rows = max(1, CPU_BLOCK_ELEMENTS // max(row_numel, 1)) if on_cpu else max(rows, 1)
    keep = torch.empty(rows, line_keys.size(1), line_numel, dtype=torch.bool, device=line_keys.device)
    for start in range(0, rows, block_rows):
        block = slice(start, start + block_rows)
        keep[block] = _int32_rule(keys32[block], signed_thresholds[block], keeps_any[block], elements)
    return keep


_FUSED: dict[str, object] = {}
#: Set to False to always run the op-by-op int32 route (no ``torch.compile``), e.g. to compare the two.
FUSE_MASKS = True
#: On a CPU, the compiled kernel is built at the first call whose input has at least this many elements; a smaller
#: input's mask comes op by op until then (the same bits). The build (dynamo, then inductor's C++ for each input rank,
#: checked on a probe) takes 7.3 s from a warm inductor cache and 59 s from a cold one, once in every process (one
#: thread of a 2-core AMD EPYC, 2026-12-02), while on inputs this small the op-by-op route costs only about 0.4 ms a
#: call more than the kernel (2,816 elements: 0.55 against 0.17 ms): the tiny random models of the test suite
#: (hidden 32), whose runs of a few steps never repaid the build. A real encoder's dropout inputs are far above it
#: (MiniLM's hidden states at batch 64, two views of 32 tokens: 1,572,864 elements), so its run builds the kernel at
#: its first call, as before. On CUDA the kernel is built at the first call whatever its size: there each eager op is
#: a launch, and the build's probe reads the host, which must happen before a step graph is captured, not in it.
CPU_FUSED_MIN_ELEMENTS = 1 << 16


def _fuses(device_type: str, shape: torch.Size) -> bool:
    """Whether a call's mask comes from the compiled kernel (:func:`fused_keep_mask`, where it builds): on CUDA
    always; on a CPU once the kernel exists, or for an input of at least :data:`CPU_FUSED_MIN_ELEMENTS` elements."""
    return device_type != "cpu" or device_type in _FUSED or shape.numel() >= CPU_FUSED_MIN_ELEMENTS


def fused_keep_mask(device_type: str):
    """A call's keep-mask compiled by ``torch.compile`` for ``device_type`` (dynamic shapes, built once per process;
    one graph per input rank): on CUDA :func:`_keyed_rule` (the line keys and the mask: nothing read but the rows'
    ids and thresholds, a byte written per element); on CPU :func:`_keyed_rule_int32` as vectorised C++ loops.
    Returns a function ``(operands: KeepOperands, seed, shape) -> bool mask of shape``, or ``None`` where it cannot
    be built or fails its check against the rule (:func:`_mismatch`): then a warning says why, once, and the
    op-by-op route runs, with the same bits."""
    if not FUSE_MASKS or device_type not in ("cpu", "cuda"):
        return None
    if device_type not in _FUSED:
        _FUSED[device_type] = _build_fused(device_type)
    return _FUSED[device_type]


def _give_up_fused(device_type: str, problem: str) -> None:
    """Stop using the fused kernel of ``device_type`` for the rest of the process, saying why once (a kernel that
    passed its build-time check can still fail to compile for a later input's specialisation)."""
    _FUSED[device_type] = None
    _warn_unfused(device_type, problem)


def _warn_unfused(device_type: str, problem: str) -> None:
    import logging

    logging.getLogger(__name__).warning(
        "keyed dropout masks: not using the fused %s kernel: %s; running the int32 route op by op instead (the "
        "same masks, slower)", device_type, problem)


def _signed32(value: int) -> int:
    """A 32-bit seed as the signed int with the same low 32 bits: a key only uses ``(id * golden + seed) mod 2**32``,
    and a value in int32's range is passed to a compiled kernel as is, whatever integer type it declares."""
    return value - (1 << 32) if value >= 1 << 31 else value


def _kernel(compiled, device_type: str):
    """The compiled rule behind the call signature ``(operands, seed, shape)``: its operands in the form the
    device's rule takes (int32 patterns on CPU) and the seed as :func:`_signed32`. Called without autograd: a mask
    has no gradient, and the grad mode is one of a compiled function's guards, so a cached step's no-grad pass
    beside its gradient pass compiled each input rank twice (a second compile of every graph at the run's start)."""
    if device_type == "cuda":
        def cuda_kernel(operands: KeepOperands, seed: int, shape: torch.Size) -> torch.Tensor:
            with torch.no_grad():
                return compiled(operands.row_ids, operands.thresholds, _signed32(seed), *shape[1:])
        return cuda_kernel

    def cpu_kernel(operands: KeepOperands, seed: int, shape: torch.Size) -> torch.Tensor:
        with torch.no_grad():
            return compiled(*operands.int32(), _signed32(seed), *shape[1:]).view(torch.bool)
    return cpu_kernel


def _build_fused(device_type: str):
    rule = _keyed_rule if device_type == "cuda" else _keyed_rule_int32
    try:
        kernel = _kernel(torch.compile(rule, dynamic=True), device_type)
        problem = _mismatch(kernel, device_type)  # compiles now: a failure is caught here, not in a training step
    except Exception as error:  # noqa: BLE001 - any compiler failure falls back to the same masks, said once
        problem = f"torch.compile could not build it ({type(error).__name__}: {error})"
    if problem is None:
        return kernel
    _warn_unfused(device_type, problem)
    return None


def _mismatch(kernel, device_type: str) -> str | None:
    """Where a compiled kernel's masks differ from the int64 reference (:func:`keyed_element_bits` against the
    thresholds) on a probe: 24 rows with ids spread over the 32-bit range, thresholds at 0, 1, around 2**31,
    2**32 - 1 and 2**32 (rate 1), seeds below and above 2**31, inputs of rank 2, 3 and 4 (every graph the kernel
    compiles) whose lines hold 1003 elements (no multiple of a vector width, so both the vectorised body and the
    tail run; several lines per row, so a row's threshold must reach each of its lines). Generated code that is
    wrong for this machine's instruction set is caught here (seen once: inductor's AVX2 code for the rule compiled
    together with its operands' int64 -> int32 conversions, ``ATEN_CPU_CAPABILITY=avx2`` on torch 2.13)."""
    row_ids = torch.randint(0, 2**32, (24,), generator=torch.Generator().manual_seed(0))
    thresholds = torch.tensor([0, 1, 2**31 - 1, 2**31, 2**31 + 1, 2**32 - 1, 2**32, 429496730] * 3)
    operands = KeepOperands(row_ids.to(device_type), thresholds.to(device_type).double() / TWO_32)
    wrong = total = 0
    for seed, shape in ((5, (24, 1003)), (0xDEADBEEF, (24, 3, 1003)), (2**31 + 7, (24, 2, 3, 1003))):
        shape = torch.Size(shape)
        want = keyed_element_bits(seed, row_ids, shape) >= thresholds.view(-1, *[1] * (len(shape) - 1))
        got = kernel(operands, seed, shape).cpu()
        wrong, total = wrong + int((got != want).sum()), total + want.numel()
    if wrong == 0:
        return None
    return f"its masks differ from the rule on {wrong} of {total} probe elements"


__all__ = ["FUSE_MASKS", "KeepOperands", "call_seed", "call_seed_from", "call_seed_tensor", "fused_keep_mask",
           "inverse_cdf_sample", "keyed_bits", "keyed_element_bits", "keyed_keep_mask", "keyed_keep_mask_from",
           "keyed_uniform", "keyed_uniforms", "line_keys", "mix32", "mix32_int", "mix32_int32_", "stream_seed",
           "stream_seed_tensor"]
