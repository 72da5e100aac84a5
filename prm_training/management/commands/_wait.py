"""Shared by ``train_prm`` and ``score_chains``: follow a run row until it finishes."""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable
from typing import TypeVar

from django.core.management.base import CommandError
from django.db.models import Model
from tqdm import tqdm

from prm_training.models import FINISHED_STATUSES

POLL_SECONDS = 1.0
M = TypeVar("M", bound=Model)


def wait_for_run(
    *, model: type[M], pk: int, fraction: Callable[[M], float], timeout: float | None
) -> M:
    """Poll the row until its status is final, drawing a progress bar on a terminal
    (stderr, off when not a terminal). Raises CommandError on timeout."""
    columns, lines = shutil.get_terminal_size()
    deadline = None if timeout is None else time.monotonic() + timeout
    bar = tqdm(
        total=100,
        unit="%",
        file=sys.stderr,
        disable=None,
        leave=False,
        ncols=columns,
        nrows=lines,
        bar_format="{l_bar}{bar}| {postfix}",
    )
    with bar:
        while True:
            row = model.objects.get(pk=pk)  # type: ignore[attr-defined]
            done = round(100 * fraction(row))
            bar.update(max(0, done - bar.n))
            bar.set_postfix_str(str(getattr(row, "status", "")))
            if getattr(row, "status", None) in FINISHED_STATUSES:
                return row
            if deadline is not None and time.monotonic() > deadline:
                raise CommandError(f"Gave up waiting after {timeout:g}s; the run goes on.")
            time.sleep(POLL_SECONDS)
