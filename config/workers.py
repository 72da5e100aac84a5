"""The Celery workers, defined once: every place that starts one starts it from here.

    python -m config.workers default|gpu [--hostname NAME@%h]

replaces itself with the worker's command (``os.execv``), so a supervisor's signals reach
Celery itself. `make worker`, `make gpu-worker`, the Compose file, `make demo` and
`make serve` (``config.demo``) and the tests' worker fixture
(``tests/prm_training/prm_worker.py``) all start these two commands; only the node name
and the default worker's process count (``WORKER_CONCURRENCY``, a deployment's size) may
differ between them. ``tests/test_workers_defined_once.py`` holds every place to it.

Both run Celery's prefork pool, whose task processes are daemonic children of the worker:
a task that needs processes of its own (the answer grader, the data-parallel training
ranks) starts them as plain subprocesses (``prm_training.ml.child_process``), never with
``multiprocessing``, which refuses children of a daemonic process.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

# Gossip, mingle and worker heartbeats are broadcasts among workers that nothing here
# reads (runs keep their own heartbeat on their row); the folder broker of the embedded
# run would keep each as a file for no reader.
COMMON_FLAGS = (
    "--pool",
    "prefork",
    "--loglevel",
    "info",
    "--without-gossip",
    "--without-mingle",
    "--without-heartbeat",
)


@dataclass(frozen=True)
class WorkerSpec:
    """One worker: the queue it serves, its node name's prefix and its own flags."""

    queue: str
    flags: tuple[str, ...]
    # Whether WORKER_CONCURRENCY sizes it (the gpu worker is one task at a time always).
    sized: bool

    def argv(self, *, hostname: str | None = None) -> list[str]:
        sizing = ("--concurrency", str(default_concurrency())) if self.sized else ()
        return [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "config",
            "worker",
            "--queues",
            self.queue,
            "--hostname",
            hostname or f"{self.queue}@%h",
            *COMMON_FLAGS,
            *sizing,
            *self.flags,
        ]


WORKERS = {
    # Imports, routing passes, webhook deliveries: short bookkeeping tasks.
    "default": WorkerSpec(queue="default", flags=(), sized=True),
    # Training, scoring, evaluation, simulations, machine-label runs: one task at a time,
    # nothing reserved ahead (a long run never holds a second one hostage), and a fresh
    # child per task, so the memory (and GPU memory) a run took is returned when it ends.
    "gpu": WorkerSpec(
        queue="gpu",
        flags=("--concurrency", "1", "--prefetch-multiplier", "1", "--max-tasks-per-child", "1"),
        sized=False,
    ),
}


def default_concurrency() -> int:
    """The default worker's task processes: ``WORKER_CONCURRENCY``, else 2."""
    value = os.environ.get("WORKER_CONCURRENCY", "").strip()
    if not value:
        return 2
    if not value.isdigit() or int(value) < 1:
        raise SystemExit(f"WORKER_CONCURRENCY must be a whole number of at least 1, not {value!r}")
    return int(value)


def worker_argv(name: str, *, hostname: str | None = None) -> list[str]:
    """The command of worker ``name`` ("default" or "gpu")."""
    try:
        spec = WORKERS[name]
    except KeyError:
        raise SystemExit(f"no worker named {name!r}: one of {', '.join(WORKERS)}") from None
    return spec.argv(hostname=hostname)


def main(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m config.workers", description=__doc__)
    parser.add_argument("name", choices=sorted(WORKERS))
    parser.add_argument("--hostname", help="the node name, e.g. gpu-2@%%h (default NAME@%%h)")
    arguments = parser.parse_args(argv)
    command = worker_argv(arguments.name, hostname=arguments.hostname)
    os.execv(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
