"""torch's float32 precision settings (TF32 / bf16 inner products for fp32 math), read and set without ever leaving torch's two APIs disagreeing.

torch has two APIs for the same switches, and refuses to mix them: since torch 2.9 each backend has an
``fp32_precision`` property (``torch.backends.cuda.matmul.fp32_precision = "tf32"``, ``torch.backends.cudnn.conv``,
``torch.backends.mkldnn.matmul``, ... and the generic ``torch.backends.fp32_precision``); the legacy API is
``torch.set_float32_matmul_precision`` / ``get_float32_matmul_precision`` and ``torch.backends.cuda.matmul.allow_tf32``
/ ``torch.backends.cudnn.allow_tf32``. Once the new API set a value (transformers' ``enable_tf32``, which the
Trainer calls for ``--tf32`` or by default on an Ampere-or-newer GPU, sets ``torch.backends.fp32_precision``), the
legacy getters raise ``RuntimeError: ... you have used mix of the legacy and new APIs``. Reading every backend's own
value through the new API works in every state (set by either API), and writing those values back restores exactly
what was found; the legacy values live beside them and can only be written with the legacy setters, so
:func:`full_fp32` switches with the API that holds the state (see there) and never leaves the two disagreeing.

:func:`full_fp32` is the one place the project forces IEEE fp32 (evaluation, :func:`eval.encoder.evaluation_precision`);
:func:`enable_tf32` the one place outside the Trainer that turns TF32 on (the benchmarks), through transformers' own
helper, so a benchmark runs in the state the Trainer leaves.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch

#: The backend leaves whose fp32 math :func:`full_fp32` pins to IEEE: cuBLAS matmuls, cuDNN convolutions and RNNs,
#: oneDNN (CPU) matmuls, convolutions and RNNs. Attribute paths under ``torch.backends``.
FP32_LEAVES = ("cuda.matmul", "cudnn.conv", "cudnn.rnn", "mkldnn.matmul", "mkldnn.conv", "mkldnn.rnn")

#: Every node whose value :func:`snapshot` records (parents too: a leaf set to ``"none"`` inherits its parent's).
FP32_NODES = ("", "cuda.matmul", "cudnn", "cudnn.conv", "cudnn.rnn", "mkldnn", "mkldnn.matmul", "mkldnn.conv",
              "mkldnn.rnn")


def has_per_backend_api() -> bool:
    """Whether this torch has the per-backend ``fp32_precision`` API (torch 2.9 and newer)."""
    return hasattr(torch.backends, "fp32_precision")


def _node(path: str) -> Any:
    node: Any = torch.backends
    for name in filter(None, path.split(".")):
        node = getattr(node, name)
    return node


def snapshot() -> dict[str, Any]:
    """Every per-backend fp32 precision as it is now (readable whichever API set it), or on a torch without that
    API the legacy settings."""
    if has_per_backend_api():
        return {path: _node(path).fp32_precision for path in FP32_NODES}
    return dict(zip(("matmul", "cudnn"), legacy_settings()))  # type: ignore[arg-type]


def restore(settings: dict[str, Any]) -> None:
    """Put back what :func:`snapshot` returned, exactly."""
    if has_per_backend_api():
        for path in FP32_NODES:
            _node(path).fp32_precision = settings[path]
    else:
        set_legacy(settings["matmul"], settings["cudnn"])


def _legacy_read(getter: Callable[[], Any]) -> Any:
    """A legacy getter's answer, or ``None`` where torch refuses it (the per-backend API set a value it
    disagrees with)."""
    try:
        return getter()
    except RuntimeError as error:
        if "legacy and new APIs" not in str(error):
            raise
        return None


def legacy_settings() -> tuple[str | None, bool | None]:
    """The legacy API's two switches: ``torch.get_float32_matmul_precision()`` and ``torch.backends.cudnn.allow_tf32``,
    each ``None`` where torch refuses to read it."""
    return (_legacy_read(torch.get_float32_matmul_precision),
            _legacy_read(lambda: torch.backends.cudnn.allow_tf32))


def set_legacy(matmul: str | None, cudnn_tf32: bool | None) -> None:
    """The legacy setters, for the switches given (``None``: left alone)."""
    if matmul is not None:
        torch.set_float32_matmul_precision(matmul)
    if cudnn_tf32 is not None:
        torch.backends.cudnn.allow_tf32 = cudnn_tf32


@contextlib.contextmanager
def full_fp32() -> Iterator[None]:
    """IEEE float32 math for the duration (no TF32, no bf16 inner products), whatever was set before and by which
    API; on exit every setting is restored exactly as found.

    torch keeps each legacy switch's value (matmul precision, cuDNN TF32) beside the per-backend ones and refuses
    (in its getters, and in the code that reads them, inductor included) when the two disagree. So each switch is
    first set to IEEE with its legacy setter where the legacy reading answers (the legacy API set it, or nothing
    did), and left to the per-backend API where torch refuses that reading (transformers' ``enable_tf32`` set it);
    then every per-backend leaf is pinned to IEEE, which agrees with a legacy value of "highest" / no TF32 (and
    covers what the legacy API has no word for: oneDNN convolutions and RNNs). Inside, every getter answers and
    says IEEE; on exit the legacy values found are set back first, then every per-backend value."""
    found, legacy = snapshot(), legacy_settings()
    try:
        set_legacy("highest" if legacy[0] is not None else None, False if legacy[1] is not None else None)
        if has_per_backend_api():
            for path in FP32_LEAVES:
                _node(path).fp32_precision = "ieee"
        yield
    finally:
        set_legacy(*legacy)
        restore(found)


def matmul_precision() -> str:
    """The fp32 precision cuBLAS / oneDNN matmuls run at: ``"ieee"`` or ``"tf32"`` / ``"bf16"`` (``"none"`` read
    as its parent's value), without touching the legacy getter. For tests and logs."""
    if not has_per_backend_api():
        return {"highest": "ieee", "high": "tf32", "medium": "bf16"}[torch.get_float32_matmul_precision()]
    value = torch.backends.cuda.matmul.fp32_precision
    return torch.backends.fp32_precision if value == "none" else value


def enable_tf32() -> None:
    """TF32 on, as the Trainer turns it on (transformers' ``enable_tf32``: the new API where torch has it)."""
    from transformers.utils.import_utils import enable_tf32 as transformers_enable_tf32

    transformers_enable_tf32(True)


__all__ = ["FP32_LEAVES", "FP32_NODES", "enable_tf32", "full_fp32", "has_per_backend_api", "matmul_precision",
           "legacy_settings", "restore", "set_legacy", "snapshot"]
