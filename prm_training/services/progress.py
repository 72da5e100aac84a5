"""How a running run tells the page what it does: its phase (``ml.progress.Phase``: loading,
encoding n/N steps, training epoch e/E, evaluating, scoring, writing...) with a rate and an
ETA, stored on the run's row (``phase``), and a heartbeat that goes on while nothing is
counted (a backbone loading, a snapshot being frozen).

``RunProgress`` is the report the ML package calls, once per batch: it writes at most once
per PROGRESS_WRITE_SECONDS (and at every new phase), and reads the run's cancel flag as
often, raising ``RunCancelled`` where the run is to stop (cancelled by hand, or this
attempt no longer owns the run: reaped, taken over). The ML code stops there, between two
batches, with nothing written.

``run_kept_alive`` stamps the heartbeat from a thread of its own every
RUN_HEARTBEAT_SECONDS, so a run is reaped only when its process is gone
(``runs.runs_reap_stale``), not while a long step counts nothing.

Worker side only (the web process imports it, and nothing of torch with it)."""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, connections
from django.utils import timezone

from prm_training.ml.progress import Phase, RunCancelled
from prm_training.models import RunStatus
from prm_training.services.runs import Run, run_heartbeat, run_may_go_on

logger = logging.getLogger(__name__)

# A run's row is written at most this often while it counts (never once per batch); its
# cancel flag is read as often.
PROGRESS_WRITE_SECONDS = 1.0
# A rate (and so an ETA) once a phase has counted for this long: the first batches say
# little about the rest.
RATE_AFTER_SECONDS = 2.0
# Completed phases kept on the row, with their durations.
PAST_PHASES_KEPT = 20


def heartbeat_seconds() -> float:
    """How often ``run_kept_alive`` stamps a run's heartbeat (STEPLAB_RUN_HEARTBEAT_SECONDS,
    10 by default): well under ``runs.stale_after()``."""
    return float(os.environ.get("STEPLAB_RUN_HEARTBEAT_SECONDS", "10"))


class RunProgress:
    """The ``phase`` report of one attempt of ``run`` (module docstring). ``note`` adds
    fields (a training run's loss) to the next write."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.current: Phase | None = None
        self.started_wall: datetime = timezone.now()
        self.started_clock = time.monotonic()
        self.done_at_start = 0
        self.past: list[dict[str, Any]] = []
        self.pending: dict[str, Any] = {}
        self.last_write = -math.inf
        self.last_check = -math.inf
        self.stop_asked = False

    def __call__(self, phase: Phase) -> None:
        now = time.monotonic()
        if self.current is None or phase.name != self.current.name:
            self._begin(phase, now)
            self.last_write = -math.inf
        self.current = phase
        if now - self.last_write >= PROGRESS_WRITE_SECONDS:
            self.flush(now)
        self.check()

    def _begin(self, phase: Phase, now: float) -> None:
        if self.current is not None:
            seconds = round(now - self.started_clock, 1)
            self.past = [*self.past, {"name": self.current.name, "seconds": seconds}]
            self.past = self.past[-PAST_PHASES_KEPT:]
        self.started_wall = timezone.now()
        self.started_clock = now
        self.done_at_start = phase.done

    def note(self, **fields: Any) -> None:
        self.pending.update(fields)

    def flush(self, now: float | None = None) -> None:
        """Write the phase, the noted fields and the heartbeat now."""
        now = time.monotonic() if now is None else now
        self.last_write = now
        fields = dict(self.pending)
        if self.current is not None:
            fields["phase"] = self.as_json(now)
        run_heartbeat(self.run, **fields)
        self.pending = {}

    def as_json(self, now: float) -> dict[str, Any]:
        """The stored form: the phase, its start, its rate (units per second, once it is
        measurable) and when it should end at that rate; the phases before it."""
        phase = self.current
        assert phase is not None
        elapsed = now - self.started_clock
        counted = phase.done - self.done_at_start
        rate = counted / elapsed if elapsed >= RATE_AFTER_SECONDS and counted > 0 else None
        eta = None
        if rate and phase.total:
            left = max(0, phase.total - phase.done) / rate
            eta = (timezone.now() + timedelta(seconds=left)).isoformat()
        return {
            "name": phase.name,
            "done": phase.done,
            "total": phase.total,
            "unit": phase.unit,
            "detail": phase.detail,
            "started_at": self.started_wall.isoformat(),
            "rate": rate,
            "eta_at": eta,
            "past": self.past,
        }

    def stop_requested(self) -> bool:
        """Whether the run is to stop: read at most once per PROGRESS_WRITE_SECONDS."""
        now = time.monotonic()
        if not self.stop_asked and now - self.last_check >= PROGRESS_WRITE_SECONDS:
            self.last_check = now
            self.stop_asked = not run_may_go_on(self.run)
        return self.stop_asked

    def check(self) -> None:
        if self.stop_requested():
            raise RunCancelled("stopped on request")


@contextmanager
def run_kept_alive(run: Run) -> Iterator[None]:
    """Stamp ``run``'s heartbeat every ``heartbeat_seconds()`` from a thread while the body
    runs (module docstring). The thread uses a database connection of its own and closes
    it; a write that fails (SQLite busy with another writer) is tried again next time."""
    stop = threading.Event()
    every = heartbeat_seconds()

    def beat() -> None:
        try:
            while not stop.wait(every):
                try:
                    type(run).objects.filter(
                        pk=run.pk, attempts=run.attempts, status=RunStatus.RUNNING
                    ).update(heartbeat_at=timezone.now())
                except DatabaseError:
                    logger.warning("Heartbeat of %s not written", run, exc_info=True)
        finally:
            connections.close_all()

    thread = threading.Thread(target=beat, name=f"heartbeat-{run.pk}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=every + 30)
