"""Keep ``Assignment.chain_open`` on closed leases in step with their chains.

The claim reads an annotator's closed (submitted or skipped) leases on chains that still
wait in the queue, by the partial index ``assignment_done_open``, to walk past the chains
they did quickly. The submit that finishes a chain clears the flag itself, in its own
statement (``queue/submit.py``, by ``queue/sql.py``); the rarer changes that finish, reopen,
or mark chains gold call ``closed_leases_sync``. The flag is a hint: a stale value costs a
claim speed, never a wrong lease.
"""

from __future__ import annotations

from django.db.models import Exists, OuterRef, QuerySet

from annotation.models import Assignment, AssignmentStatus, Chain

CLOSED_STATUSES = (AssignmentStatus.SUBMITTED, AssignmentStatus.SKIPPED)


def closed_leases_sync(*, leases: QuerySet[Assignment]) -> int:
    """Set ``chain_open`` on the closed leases among ``leases`` to whether their chain is
    neither finished nor gold. Touches only rows whose value changes (two UPDATEs) and
    returns how many. Call it in the transaction that changed the chains."""
    closed = leases.filter(status__in=CLOSED_STATUSES)
    waiting = Chain.objects.filter(pk=OuterRef("chain_id"), is_finished=False, is_gold=False)
    shut = closed.filter(chain_open=True).filter(~Exists(waiting)).update(chain_open=False)
    reopened = closed.filter(chain_open=False).filter(Exists(waiting)).update(chain_open=True)
    return shut + reopened
