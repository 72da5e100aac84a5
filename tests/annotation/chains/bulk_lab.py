"""A bulk action run as its worker would, for the service tests of the data manager's
bulk actions: made by the lab's lead, then its task body run in the test itself."""

from __future__ import annotations

from typing import Any

from annotation.chains.bulk_actions import Selection, bulk_action_create, bulk_action_execute
from annotation.models import BulkAction


def bulk_run(lab: dict[str, Any], kind: str, selection: Selection, **params: Any) -> BulkAction:
    """``kind`` on ``selection`` in ``lab["project"]`` by ``lab["lead"]``, run to its end;
    the job as stored afterwards."""
    job = bulk_action_create(
        project=lab["project"],
        user=lab["lead"],
        kind=kind,
        params=params,
        selection=selection,
        expected=0,
    )
    bulk_action_execute(job_id=job.pk)
    job.refresh_from_db()
    return job
