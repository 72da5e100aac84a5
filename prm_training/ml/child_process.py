"""Processes that a task starts for itself: plain subprocesses of a fresh interpreter.

Why not ``multiprocessing``: the Celery workers run the prefork pool (``config.workers``),
whose task processes are daemonic, and ``multiprocessing`` refuses to start a child of a
daemonic process ("daemonic processes are not allowed to have children"); its ``spawn``
start method also pickles the caller's arguments through a path that differs by pool.
``subprocess`` works the same from a prefork child, the solo pool, a thread or a plain
script: a fresh ``python -m <module>`` that inherits nothing but its environment and the
file descriptors handed to it.

A child must not outlive the process that started it (a killed worker's grader or ranks
would hold memory, or a GPU, for nothing): ``exit_when_orphaned`` in the child asks Linux
to kill it when its parent goes (the parent-death signal), which holds even while it is
busy in C code that keeps the interpreter locked (a huge integer power in sympy); where
that is not available, a thread watches the parent instead.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import IO, Any

ORPHAN_CHECK_S = 0.5
# prctl(2)'s option that sets the signal a process gets when its parent dies.
_PR_SET_PDEATHSIG = 1


def python_child(
    module: str,
    arguments: Sequence[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    pass_fds: Sequence[int] = (),
    stdin: int | IO[Any] | None = None,
    stdout: int | IO[Any] | None = None,
    stderr: int | IO[Any] | None = None,
) -> subprocess.Popen[bytes]:
    """Starts ``python -m module arguments...`` with this interpreter, this process's
    environment updated by ``env``, and the parent's pid in ``STEPLAB_PARENT_PID`` (read by
    ``exit_when_orphaned``)."""
    environment = {**os.environ, **(env or {}), "STEPLAB_PARENT_PID": str(os.getpid())}
    return subprocess.Popen(
        [sys.executable, "-m", module, *arguments],
        env=environment,
        pass_fds=tuple(pass_fds),
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        close_fds=True,
    )


def exit_when_orphaned() -> None:
    """In a child started by ``python_child``: a daemon thread that ends this process at
    once (``os._exit``) when the parent that started it is gone."""
    parent = int(os.environ.get("STEPLAB_PARENT_PID", "0") or 0)
    if parent <= 1:
        return
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the signal was asked for
        os._exit(3)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(ORPHAN_CHECK_S)
        os._exit(3)

    threading.Thread(target=watch, name="orphan-guard", daemon=True).start()


def stop_child(process: subprocess.Popen[bytes], *, grace_s: float = 5.0) -> None:
    """Terminates ``process`` (SIGTERM, then SIGKILL after ``grace_s``) and reaps it."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
