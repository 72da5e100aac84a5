"""The queue's order: ``Chain.priority``, which the claim walks highest first. Scoring
runs write it for many chains at once (``prm_training.services.scoring``), each chunk in
its own short transaction: the claim locks chain rows too, and one transaction over
20,000 rows would stall every annotator's "next" for its duration."""

from __future__ import annotations

from typing import Any

from django.db import connection, transaction

from annotation.labeling.queue.sql import PRIORITIES_FROM_VALUES_SQL, PRIORITY_SQL
from annotation.models import Project

# Chains per statement (and per transaction).
PRIORITY_CHUNK = 1_000


def chain_priorities_write(*, project: Project, priorities: dict[int, float]) -> int:
    """Set ``Chain.priority`` for many chains of ``project``, one statement per chunk.
    Returns how many rows changed."""
    items = sorted(priorities.items())  # id order: chunks lock rows in one order, no deadlock
    changed = 0
    for start in range(0, len(items), PRIORITY_CHUNK):
        chunk = items[start : start + PRIORITY_CHUNK]
        with transaction.atomic(), connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                values = ", ".join(["(%s::bigint, %s::double precision)"] * len(chunk))
                params: list[Any] = [x for pair in chunk for x in pair]
                cursor.execute(
                    PRIORITIES_FROM_VALUES_SQL.format(values=values), [*params, project.pk]
                )
                changed += cursor.rowcount
            else:
                # SQLite (the demo) has no column list on a VALUES alias.
                cursor.executemany(
                    PRIORITY_SQL, [(priority, chain_id, project.pk) for chain_id, priority in chunk]
                )
                changed += len(chunk)
    return changed
