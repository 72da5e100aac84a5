"""The queue's claims for tests that need only the assignment, not what the lease shows."""

from __future__ import annotations

from datetime import datetime

from django.contrib.auth.models import User

from annotation.labeling.queue.claim import lease_next, lease_prefetch
from annotation.models import Assignment, Project


def assignment_claim_next(
    *, project: Project, user: User, now: datetime | None = None
) -> Assignment | None:
    lease = lease_next(project=project, user=user, now=now)
    return lease.assignment if lease is not None else None


def assignment_prefetch(
    *, project: Project, user: User, now: datetime | None = None
) -> Assignment | None:
    lease = lease_prefetch(project=project, user=user, now=now)
    return lease.assignment if lease is not None else None
