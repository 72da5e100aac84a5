"""The Celery app. Tasks are discovered in each installed app's ``tasks.py``.

Two queues: ``default`` (short bookkeeping tasks) and ``gpu`` (training and scoring, one
task at a time per GPU worker). More GPU nodes scale out by starting more workers on
``gpu``; the settings that make long runs safe live in ``config/settings/base.py``."""

import os
import socket
from typing import Any

from celery import Celery, Task

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.dev")

app = Celery("steplab")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.task(name="steplab.ping", bind=True, ignore_result=False, time_limit=30, soft_time_limit=25)
def ping(self: Task) -> dict[str, Any]:
    """A no-op that says which worker and which queue served it, so a deployment check
    can send one through each queue (``ping.apply_async(queue="gpu")``) and see that a
    worker consumes it. Touches neither the database nor torch."""
    delivery = self.request.delivery_info or {}
    return {
        "pong": True,
        "worker": self.request.hostname or socket.gethostname(),
        "queue": delivery.get("routing_key") or "",
    }
