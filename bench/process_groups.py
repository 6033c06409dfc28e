"""Child processes that never outlive the bench that started them.

The GPU check's stages (``bench.gpu_check``'s steps, ``bench.gpu_e2e``'s commands) run each command in its own process
group, so that a command stopped at its time limit is killed with everything it started (``accelerate launch``'s
worker, a training run's data-loading workers, inductor's compile workers). A command in its own session is, by the
same token, out of reach of a signal sent to the bench's group: a bench interrupted while it waits (Ctrl-C, or
``timeout`` around it) used to leave its running command behind, training on the GPU beside the commands measured
after it (seen on an H200, 2026-11-26: an interrupted real-loop run trained on through the next call's runs, whose
figures were left out). :func:`own_process_group` kills the group on every way out of the wait, and
:func:`exit_on_sigterm` makes SIGTERM (``timeout``'s default signal, a machine's shutdown) one of those ways.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from contextlib import contextmanager
from typing import Iterator, Sequence


@contextmanager
def own_process_group(argv: Sequence[str], **popen_kwargs) -> Iterator[subprocess.Popen]:
    """``subprocess.Popen(argv)`` in a new session; when the block is left, by any route (the command finished, a
    timeout, an exception, KeyboardInterrupt, SystemExit), whatever of its process group still runs is killed
    (SIGKILL) and the command is reaped."""
    process = subprocess.Popen(list(argv), start_new_session=True, **popen_kwargs)
    try:
        yield process
    finally:
        kill_group(process)


def kill_group(process: subprocess.Popen) -> None:
    """SIGKILL the process group that ``process`` leads (nothing when none of it is left), then reap ``process``."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:  # the command and everything it started have ended
        pass
    process.wait()


def exit_on_sigterm() -> None:
    """SIGTERM raises ``SystemExit(143)`` in the main thread (Python's default is to die at once), so that the
    ``finally`` of :func:`own_process_group` runs and the running command goes with the bench."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


__all__ = ["exit_on_sigterm", "kill_group", "own_process_group"]
