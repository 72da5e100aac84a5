"""Progress of a job that runs in one transaction (an import, a bulk action), written to
the job's row where others can read it while the job goes on.

What the job writes in its transaction is invisible until it commits, and progress
written through the same connection would be too. On PostgreSQL the progress goes to the
row through a connection of its own, in autocommit, at most every ``interval`` seconds
(never per record). SQLite (the demo) allows one writer at a time and the job holds it,
so there the row moves only at the end."""

from __future__ import annotations

import logging
import time
from typing import Any

from django.db import connections
from django.db.models import Model

logger = logging.getLogger(__name__)

# The row's progress is written at most this often.
PROGRESS_INTERVAL_SECONDS = 1.0


class RowProgress:
    """Writes integer columns of one row (``model``, ``pk``) through a connection of its
    own (PostgreSQL; ``live`` says whether there is one): ``write`` at most every
    ``interval`` seconds (PROGRESS_INTERVAL_SECONDS), ``write_now`` at once. A context
    manager that closes it."""

    def __init__(self, *, model: type[Model], pk: int, interval: float | None = None) -> None:
        self.model = model
        self.pk = pk
        self.interval = PROGRESS_INTERVAL_SECONDS if interval is None else interval
        self.last_write = time.monotonic()
        self.connection: Any = None
        if connections["default"].vendor == "postgresql":
            # A new connection to the same database, outside the job's transaction.
            self.connection = connections.create_connection("default")

    @property
    def live(self) -> bool:
        return self.connection is not None

    def __enter__(self) -> RowProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None

    def write(self, **columns: int) -> None:
        """``write_now``, unless the last write was under ``interval`` seconds ago."""
        now = time.monotonic()
        if self.connection is None or now - self.last_write < self.interval:
            return
        self.last_write = now
        self.write_now(**columns)

    def write_now(self, **columns: int) -> None:
        """Set ``columns`` on the row; a failure is logged, not raised: progress is a
        courtesy, and the job goes on."""
        if self.connection is None or not columns:
            return
        ops = self.connection.ops
        table = ops.quote_name(self.model._meta.db_table)
        names = list(columns)
        assignments = ", ".join(f"{ops.quote_name(name)} = %s" for name in names)
        try:
            with self.connection.cursor() as cursor:
                cursor.execute(
                    f"UPDATE {table} SET {assignments} WHERE id = %s",
                    [*(int(columns[name]) for name in names), self.pk],
                )
        except Exception:  # noqa: BLE001 - progress is a courtesy; the job goes on
            logger.warning(
                "%s %s: progress not written", self.model.__name__, self.pk, exc_info=True
            )
