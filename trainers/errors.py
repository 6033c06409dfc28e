"""User errors of the training scripts: one message (what, where, what to do), no traceback, a non-zero exit.

``run_unsup.py`` and ``run_diffcse.py`` run their ``main`` through :func:`run_cli`. It turns the errors below (and
the project's data errors, :class:`data.corpus.CorpusError`, :class:`eval.sts.SentEvalDataError` and
:class:`eval.backbone.IncompleteWeightsError`) into

    run_unsup.py: error: <message>

on stderr and the error's exit status (docs/errors.md lists every message). Anything else is a bug and keeps its
traceback; ``CSE_DEBUG=1`` shows the traceback of user errors too.

Exit statuses: 1 = a file, folder, model or dataset is missing or unusable; 2 = the command line asks for
something invalid (argparse's own status for its errors); 3 = training diverged (a non-finite loss or weights).
"""
from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

DEBUG_ENV = "CSE_DEBUG"


class UserError(Exception):
    """Something the user gave cannot work; ``str(error)`` says what, where and what to do."""

    exit_code = 1


class UsageError(UserError):
    """Invalid flag values or combinations (argparse's exit status 2)."""

    exit_code = 2


class TrainingDiverged(UserError):
    """The loss or the weights became NaN/inf; nothing after the last finite state was written.

    Decided by a collective (the first bad step and the weights' finiteness are gathered over every process), so
    every process of a multi-process run raises it at the same point: the main process alone prints it, and every
    process exits 3 (:func:`run_cli`)."""

    exit_code = 3
    collective = True


def debug_enabled() -> bool:
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")


def user_error_types() -> tuple[type[BaseException], ...]:
    """The exception types that are the user's to fix (imported lazily: they live beside their loaders)."""
    from data.corpus import CorpusError
    from eval.backbone import IncompleteWeightsError
    from eval.sts import SentEvalDataError

    return UserError, CorpusError, SentEvalDataError, IncompleteWeightsError


def exit_code_of(error: BaseException) -> int:
    return getattr(error, "exit_code", 1)


def run_cli(main: Callable[[], Any], prog: str | None = None) -> None:
    """Run a script's ``main()``; a user error prints ``prog: error: message`` and exits with its status."""
    prog = prog or Path(sys.argv[0]).name
    try:
        main()
    except user_error_types() as error:
        if debug_enabled():
            raise
        collective = getattr(error, "collective", False)
        if not collective or process_rank() == 0:
            print(f"{prog}: error: {error}", file=sys.stderr)
        exit_distributed_run(exit_code_of(error), meet=collective)
        raise SystemExit(exit_code_of(error)) from None
    exit_distributed_run()


def process_rank() -> int:
    """This process's rank in a multi-process run (0 in a single-process one)."""
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def exit_distributed_run(code: int = 0, meet: bool = True) -> None:
    """End a multi-process (torchrun) run with ``code``: every rank meets first (``meet``: a finished run, or an
    error every rank raised at the same point), then the process exits at once. Left to the interpreter's shutdown,
    gloo's threads intermittently abort a rank ("terminate called without an active exception", SIGABRT) after
    everything is written, and ``destroy_process_group()`` intermittently hangs one rank (pytorch#75097): the run's
    exit status would then depend on teardown luck, not on the run. A single-process run returns."""
    import os

    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    if meet:
        dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


@contextmanager
def reraise_as(error_type: type[UserError], *exception_types: type[BaseException],
               prefix: str = "") -> Iterator[None]:
    """Turn ``exception_types`` raised in the block into ``error_type`` with the same message (and ``prefix``)."""
    try:
        yield
    except exception_types as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        raise error_type(f"{prefix}{message}") from exc


__all__ = ["DEBUG_ENV", "TrainingDiverged", "UsageError", "UserError", "debug_enabled", "exit_distributed_run",
           "process_rank", "reraise_as", "run_cli", "user_error_types"]
