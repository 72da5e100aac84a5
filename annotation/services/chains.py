"""The data manager's writes on one chain. Unflagging and marking gold have their own
services (``workspace.chain_flag_clear``, ``gold.gold_mark``); this module asks a
finished chain for more labels."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction

from annotation.models import Assignment, Chain
from annotation.queue.closed_leases import closed_leases_sync

EXTRA_LABELS_MAX = 50


def chain_requeue(*, chain: Chain, more: int = 1) -> Chain:
    """Ask for ``more`` human passes on ``chain`` beyond what it has: its needed count
    becomes ``finished_count + more`` (``Chain.extra_labels`` over the project's overlap)
    and it is no longer finished, so the queue offers it again and finished-only
    snapshots leave it out until the new passes come in (unless a lead's ruling settles
    it: a ruled chain counts as finished there). ValidationError when ``more`` is out of
    range or the extra passes a chain may ask for (EXTRA_LABELS_MAX) cannot reach it. The
    caller checks that the user leads the project.

    Takes the chain's row lock (as a submit does), so a submit in flight counts either
    before the requeue (and the chain still asks for ``more`` after it) or after."""
    if not 1 <= more <= EXTRA_LABELS_MAX:
        raise ValidationError({"more": f"Ask for 1 to {EXTRA_LABELS_MAX} more labels."})
    with transaction.atomic():
        locked = (
            Chain.objects.select_for_update(no_key=True, of=("self",))
            .select_related("project")
            .get(pk=chain.pk)
        )
        if locked.is_gold:
            raise ValidationError({"chain": "A gold chain is offered to everyone already."})
        needed = locked.finished_count + more
        if needed - locked.project.overlap > EXTRA_LABELS_MAX:
            raise ValidationError(
                {"more": f"A chain asks for at most {EXTRA_LABELS_MAX} passes past the overlap."}
            )
        locked.extra_labels = max(0, needed - locked.project.overlap)
        locked.is_finished = locked.finished_count >= locked.project.overlap + locked.extra_labels
        locked.save(update_fields=["extra_labels", "is_finished"])
        closed_leases_sync(leases=Assignment.objects.filter(chain=locked))
        return locked
