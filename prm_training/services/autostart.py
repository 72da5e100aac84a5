"""Automatic retraining, the submit path's side: the cheap check that asks a worker for
``training.training_maybe_autostart`` when the project retrains automatically
(``training_autostart_enqueue``), and what this process remembers of that setting."""

from __future__ import annotations

import logging
import time

from django.db import transaction

from prm_training.models import ProjectTrainingSettings
from prm_training.services.runs import AUTOSTART_TASK, task_send

logger = logging.getLogger(__name__)


# Whether a project retrains automatically, as this process last read it: (enabled, read
# at). Most projects never do, and their submits should not pay for a broker message
# each. Another process that read "off" less than AUTOSTART_SETTING_TTL seconds before ML
# staff switched it on sends no check for the submits in that window; nothing is lost, as
# a check counts every chain finished since the last run: the first submit after the
# window starts the run those chains called for.
AUTOSTART_SETTING_TTL = 5.0
_autostart_seen: dict[int, tuple[bool, float]] = {}


def _autostart_enabled(project_id: int) -> bool:
    seen = _autostart_seen.get(project_id)
    now = time.monotonic()
    if seen is not None and now - seen[1] < AUTOSTART_SETTING_TTL:
        return seen[0]
    enabled = ProjectTrainingSettings.objects.filter(
        project_id=project_id, retrain_every_n_finished__gt=0
    ).exists()
    _autostart_seen[project_id] = (enabled, now)
    return enabled


def autostart_setting_forget(*, project_id: int) -> None:
    """Drop what this process read of the project's setting (it was just changed here)."""
    _autostart_seen.pop(project_id, None)


def training_autostart_enqueue(*, project_id: int) -> None:
    """Ask a worker to run ``training_maybe_autostart`` once the current transaction
    commits, if the project retrains automatically. Cheap enough for the submit path: no
    query (but one every few seconds per project), one message when it is on; the check
    itself runs on the ``default`` queue so it never waits behind a training run."""
    if not _autostart_enabled(project_id):
        return

    def send() -> None:
        try:
            task_send(AUTOSTART_TASK, (project_id,), queue="default")
        except Exception:  # noqa: BLE001 - a broker hiccup must not fail a label submit
            logger.exception("Could not enqueue the auto-training check for %s", project_id)

    transaction.on_commit(send)
