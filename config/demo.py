"""`make demo` and `make serve`: the web server and its Celery workers as one command.

    python -m config.demo [--banner FILE] -- WEB COMMAND ...

starts the web command (gunicorn, or runserver) and two Celery workers beside it, as
production runs them (`make worker`, `make gpu-worker`): queue ``default`` for light
work, queue ``gpu`` for training, scoring and simulations, one task at a time in a fresh
child process that ends with its task, so the memory a run took is returned. No web
request runs a task. The broker is whatever the settings say: without
``CELERY_BROKER_URL``, the folder broker of ``config/broker.py``, which needs no server.

With ``--banner FILE`` (``seed_demo --banner``: the URL and the logins), the file is
printed once the web server listens and each worker said it is ready, so it is the last
thing on the screen, not lost above Celery's banners. The children's output passes
through this process, line by line, to see that.

One lifetime for all three: when the web server stops, the workers are stopped too; a
worker that dies (killed, out of memory) is started again under the same node name, which
marks the runs it left running as lost at once (``prm_training.tasks``); a stop signal
stops everything. Each child gets a signal of its own if this process is killed outright
(Linux's parent-death signal), so no worker outlives it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from config.workers import worker_argv

# A worker restarted this many times, each within RESTART_WINDOW seconds of its start, is
# broken (a bad setting, say): the demo stops instead of restarting it for ever.
MAX_QUICK_RESTARTS = 5
RESTART_WINDOW = 20.0
# How long a child may take to stop before it is stopped harder.
WEB_STOP_SECONDS = 30.0
WORKER_WARM_STOP_SECONDS = 10.0
WORKER_COLD_STOP_SECONDS = 10.0
# The banner waits at most this long for the children to say they are ready.
BANNER_WAIT_SECONDS = 180.0

# What a child prints once it is ready: a Celery worker ("celery@host ready."), gunicorn
# ("Listening at: ..."), Django's development server ("Quit the server with ...").
READY_MARKS = (b" ready.", b"Listening at:", b"Quit the server with")

# The workers' commands are defined once (``config.workers``), as production runs them.
WORKERS = {f"worker-{name}": worker_argv(name) for name in ("default", "gpu")}


def _parent_death_signal(signum: int) -> Callable[[], None]:
    """A preexec_fn: the child gets ``signum`` when this process dies, however it dies."""

    def apply() -> None:
        from billiard.util import set_pdeathsig

        set_pdeathsig(signum)

    return apply


@dataclass
class Child:
    name: str
    command: Sequence[str]
    # The signals that stop it: a gentle one, then (after the grace) a harder one.
    stop_signals: tuple[tuple[int, float], ...]
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    quick_restarts: int = 0
    ready: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        first_signal = self.stop_signals[0][0]
        # Its own session: a Ctrl-C in the terminal reaches this process, which stops the
        # children in order, not every child at once. Its output comes through here
        # (``_relay``), unbuffered, so lines reach the terminal as they are written.
        self.process = subprocess.Popen(
            self.command,
            start_new_session=True,
            preexec_fn=_parent_death_signal(first_signal),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.started_at = time.monotonic()
        threading.Thread(target=_relay, args=(self,), daemon=True).start()
        _say(f"started {self.name} (pid {self.process.pid})")

    def exited(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def signal(self, signum: int) -> None:
        if self.process is not None and self.process.poll() is None:
            # To the child alone: it stops its own children (Celery's pool, gunicorn's
            # workers) in its own order.
            try:
                os.kill(self.process.pid, signum)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait()


def _relay(child: Child) -> None:
    """Copy the child's output to ours line by line; mark it ready at its ready line."""
    assert child.process is not None and child.process.stdout is not None
    for line in iter(child.process.stdout.readline, b""):
        try:
            sys.stdout.buffer.write(line)
            sys.stdout.buffer.flush()
        except OSError:
            pass  # our output is gone (a closed terminal): keep draining the child's
        if not child.ready.is_set() and any(mark in line for mark in READY_MARKS):
            child.ready.set()


def _banner_when_ready(children: Sequence[Child], banner: Path) -> None:
    """Print ``banner`` once every child is ready (or after BANNER_WAIT_SECONDS)."""
    deadline = time.monotonic() + BANNER_WAIT_SECONDS
    for child in children:
        child.ready.wait(timeout=max(0.0, deadline - time.monotonic()))
    text = banner.read_text() if banner.exists() else ""
    if text:
        print(f"\n{text.rstrip()}\n", flush=True)


def stop_all(children: Sequence[Child]) -> None:
    """Stop every child at once, each by its signals in turn (the next one once its grace
    is over), and kill what is left with its process group."""
    for stage in range(max(len(child.stop_signals) for child in children)):
        for child in children:
            if stage < len(child.stop_signals):
                child.signal(child.stop_signals[stage][0])
        grace = max(c.stop_signals[stage][1] for c in children if stage < len(c.stop_signals))
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(c.exited() is None for c in children):
            time.sleep(0.1)
    for child in children:
        child.kill()


def _say(text: str) -> None:
    print(f"[demo] {text}", file=sys.stderr, flush=True)


class _Stop(Exception):
    pass


def _raise_stop(signum: int, frame: object) -> None:
    raise _Stop(signal.Signals(signum).name)


def supervise(web_command: Sequence[str], banner: Path | None = None) -> int:
    """Run the web command and the workers until the web command ends or a stop signal
    comes; returns the exit status to end with. ``banner``: printed once all are ready."""
    web = Child("web", web_command, ((signal.SIGTERM, WEB_STOP_SECONDS),))
    # Warm shutdown first (a task may end), then cold (a long training run is left to
    # the reaper: it shows as lost and can be retried).
    worker_signals = (
        (signal.SIGTERM, WORKER_WARM_STOP_SECONDS),
        (signal.SIGQUIT, WORKER_COLD_STOP_SECONDS),
    )
    workers = [Child(name, command, worker_signals) for name, command in WORKERS.items()]
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _raise_stop)
    status = 0
    try:
        for child in [*workers, web]:
            child.start()
        if banner is not None:
            threading.Thread(
                target=_banner_when_ready, args=([*workers, web], banner), daemon=True
            ).start()
        while True:
            time.sleep(0.5)
            code = web.exited()
            if code is not None:
                _say(f"the web server exited ({code}): stopping the workers")
                status = code
                break
            for worker in workers:
                _restart_if_dead(worker)
    except _Stop as stop:
        _say(f"{stop}: stopping")
    except RuntimeError as broken:
        _say(str(broken))
        status = 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stop_all([web, *workers])
    return status


def _restart_if_dead(worker: Child) -> None:
    code = worker.exited()
    if code is None:
        return
    quick = time.monotonic() - worker.started_at < RESTART_WINDOW
    worker.quick_restarts = worker.quick_restarts + 1 if quick else 0
    if worker.quick_restarts >= MAX_QUICK_RESTARTS:
        raise RuntimeError(f"{worker.name} keeps exiting ({code}); see its log above")
    _say(f"{worker.name} exited ({code}): starting it again")
    worker.start()


def main(argv: Sequence[str]) -> int:
    arguments = list(argv)
    banner = None
    if arguments[:1] == ["--banner"] and len(arguments) > 1:
        banner, arguments = Path(arguments[1]), arguments[2:]
    if arguments[:1] == ["--"]:
        arguments = arguments[1:]
    if not arguments:
        print("usage: python -m config.demo [--banner FILE] -- WEB COMMAND ...", file=sys.stderr)
        return 2
    return supervise(arguments, banner)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
