"""What the queue refuses with. The API's exception handler (``annotation/api/errors.py``)
answers each with its status code."""

from __future__ import annotations


class QueueError(Exception):
    """A queue operation was refused. ``code`` is a stable machine-readable name."""

    code = "queue_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class LeaseConflict(QueueError):
    """The lease can no longer be used: its place went to someone else, the chain is
    full, or the caller already finished this chain. The API answers 409."""

    code = "lease_conflict"


class LeaseLost(LeaseConflict):
    """The lease expired and its place was taken by another annotator."""

    code = "lease_lost"


class LeaseClosed(LeaseConflict):
    """The lease was already submitted or skipped."""

    code = "lease_closed"


class QueueBusy(QueueError):
    """Every retry of a claim lost its race; the caller should try again (API: 503)."""

    code = "queue_busy"


class RevisionClosed(QueueError):
    """A submitted pass can no longer be revised (``annotation.labeling.revisions``): a
    newer revision replaced it, or what it fed was settled since. The API answers 409."""

    code = "revision_closed"
