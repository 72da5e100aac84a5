"""The data manager's bulk actions: requeue, mark or unmark gold, clear flags, set a
reviewer, or put chains into an evaluation set or take them out of it, on a selection of
chains or on every chain a filter of the list matches.

Each action is the service that does it to one chain (``chains_requeue``,
``chains_gold_mark``, ``chains_gold_unmark``, ``chains_flag_clear``,
``chains_reviewer_set``, ``chains_evaluation_set_add``, ``chains_evaluation_set_remove``),
called a batch of BATCH_CHAINS ids at a time: per batch one
query for the next ids (the filter's own query, by id from the last batch's end), the
row locks, a query per reason a chain is left, set-based writes and one insert of the
batch's history rows. Memory is bounded by the batch, whatever the selection holds.

Why a background task. A filter can match every chain of a project: at 1,000,000
chains the action reads, locks, writes and records a million rows, about a minute on
the machine BENCHMARKS.md names, well past what a request may take. So
``bulk_action_create`` writes a QUEUED row and sends a Celery task (queue ``default``)
once the row commits; ``bulk_action_execute`` claims it QUEUED -> RUNNING (a second
delivery returns quietly) and runs every batch in one transaction: the action is done
to every chain or, on any failure, to none (the job says why). Its progress (chains
read) reaches the row through a connection of its own (``progress.RowProgress``), so
the page shows it while the transaction is open.

The chains stay locked until the transaction ends: a submit on one of them waits for the
action, and the queue offers other chains meanwhile (a claim skips locked chains).

``bulk_action_preview`` counts, in one query, the chains a selection holds, how many the
action would change and why it would leave the rest, from the same reasons the action
checks under its locks: the page asks the lead to confirm that count."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from celery import current_app
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from annotation.chains.changes import Changed
from annotation.chains.selectors import ChainFilters, chains_matching
from annotation.chains.services import (
    EXTRA_LABELS_MAX,
    chains_requeue,
    chains_reviewer_set,
    requeue_reasons,
    reviewer_check,
    reviewer_reasons,
)
from annotation.datasets.evaluation_sets import (
    NOT_IN_THIS_SET,
    chains_evaluation_set_add,
    chains_evaluation_set_remove,
    hold_out_reasons,
)
from annotation.labeling.workspace import chains_flag_clear, flag_clear_reasons
from annotation.models import (
    BulkAction,
    BulkActionKind,
    BulkActionStatus,
    Chain,
    EvaluationSet,
    Project,
)
from annotation.progress import RowProgress
from annotation.quality.gold import (
    chains_gold_mark,
    chains_gold_unmark,
    gold_mark_reasons,
    gold_unmark_reasons,
)

if TYPE_CHECKING:
    from django.contrib.auth.models import User

logger = logging.getLogger(__name__)

BULK_TASK = "annotation.bulk_action"
BATCH_CHAINS = 2_000
# A selection is what a lead ticks on pages of the list; a filter takes the rest.
SELECTION_MAX = 1_000


@dataclass(frozen=True)
class Selection:
    """The chains an action is for: ``chain_ids`` (ticked), or every chain ``filters``
    lets through. Exactly one of the two."""

    chain_ids: tuple[int, ...] | None = None
    filters: ChainFilters | None = None

    def chains(self, *, project: Project) -> QuerySet[Chain]:
        if self.chain_ids is not None:
            return Chain.objects.filter(project=project, pk__in=self.chain_ids)
        return chains_matching(project=project, filters=self.filters or ChainFilters())


@dataclass(frozen=True)
class _Action:
    # Why a chain is left as it is, as the action checks it (reason -> the chains).
    reasons: Callable[..., dict[str, Q]]
    # The action on a batch: (project=, chain_ids=, actor=, params=, job=, now=) -> Changed.
    apply: Callable[..., Changed]


def _reviewer(params: dict[str, Any]) -> User | None:
    reviewer_id = params.get("reviewer")
    return None if reviewer_id is None else get_user_model().objects.get(pk=reviewer_id)


def _evaluation_set(project: Project, params: dict[str, Any]) -> EvaluationSet:
    return EvaluationSet.objects.get(pk=params["evaluation_set"], project=project)


ACTIONS: dict[str, _Action] = {
    BulkActionKind.REQUEUE: _Action(
        reasons=lambda project, params: requeue_reasons(project=project, more=params["more"]),
        apply=lambda *, params, actor, job, **kw: chains_requeue(
            more=params["more"], actor=actor, bulk_action=job, **kw
        ),
    ),
    BulkActionKind.GOLD_MARK: _Action(
        reasons=lambda project, params: gold_mark_reasons(),
        apply=lambda *, params, actor, job, **kw: chains_gold_mark(
            actor=actor, bulk_action=job, **kw
        ),
    ),
    BulkActionKind.GOLD_UNMARK: _Action(
        reasons=lambda project, params: gold_unmark_reasons(),
        apply=lambda *, params, actor, job, **kw: chains_gold_unmark(
            actor=actor, bulk_action=job, **kw
        ),
    ),
    BulkActionKind.UNFLAG: _Action(
        reasons=lambda project, params: flag_clear_reasons(),
        apply=lambda *, params, actor, job, **kw: chains_flag_clear(
            user=actor, bulk_action=job, **kw
        ),
    ),
    BulkActionKind.REVIEWER: _Action(
        reasons=lambda project, params: reviewer_reasons(reviewer=_reviewer(params)),
        apply=lambda *, params, actor, job, **kw: chains_reviewer_set(
            reviewer=_reviewer(params), actor=actor, bulk_action=job, **kw
        ),
    ),
    BulkActionKind.EVALUATION_ADD: _Action(
        reasons=lambda project, params: hold_out_reasons(
            evaluation_set=_evaluation_set(project, params)
        ),
        apply=lambda *, project, params, actor, job, **kw: chains_evaluation_set_add(
            project=project,
            evaluation_set=_evaluation_set(project, params),
            actor=actor,
            bulk_action=job,
            **kw,
        ),
    ),
    BulkActionKind.EVALUATION_REMOVE: _Action(
        reasons=lambda project, params: {
            NOT_IN_THIS_SET: ~Q(evaluation_set=_evaluation_set(project, params))
        },
        apply=lambda *, project, params, actor, job, **kw: chains_evaluation_set_remove(
            project=project,
            evaluation_set=_evaluation_set(project, params),
            actor=actor,
            bulk_action=job,
            **kw,
        ),
    ),
}


def bulk_params_check(*, project: Project, kind: str, params: dict[str, Any]) -> dict[str, Any]:
    """The action's own inputs, checked: ``more`` (1 .. EXTRA_LABELS_MAX, default 1) to
    requeue; ``reviewer`` (a lead's user id, or None for nobody) to set a reviewer;
    ``evaluation_set`` (an evaluation set of the project) to put chains into it or take
    them out; no other (an input the action does not take is refused, not ignored).
    ValidationError naming the field."""
    if kind not in ACTIONS:
        raise ValidationError({"action": f"Not an action: {kind!r}."})
    takes: dict[str, set[str]] = {
        BulkActionKind.REQUEUE: {"more"},
        BulkActionKind.REVIEWER: {"reviewer"},
        BulkActionKind.EVALUATION_ADD: {"evaluation_set"},
        BulkActionKind.EVALUATION_REMOVE: {"evaluation_set"},
    }
    for name in sorted(set(params) - takes.get(kind, set())):
        raise ValidationError({name: f"The action {kind!r} takes no {name!r}."})
    if kind == BulkActionKind.REQUEUE:
        more = params.get("more", 1)
        if type(more) is not int or not 1 <= more <= EXTRA_LABELS_MAX:
            raise ValidationError({"more": f"Ask for 1 to {EXTRA_LABELS_MAX} more labels."})
        return {"more": more}
    if kind == BulkActionKind.REVIEWER:
        if "reviewer" not in params:
            raise ValidationError({"reviewer": "Name the lead who is to review (or null)."})
        reviewer = get_user_model().objects.filter(pk=params["reviewer"]).first()
        if params["reviewer"] is not None and reviewer is None:
            raise ValidationError({"reviewer": "A reviewer is a lead of this project."})
        reviewer_check(project=project, reviewer=reviewer)
        return {"reviewer": params["reviewer"]}
    if kind in (BulkActionKind.EVALUATION_ADD, BulkActionKind.EVALUATION_REMOVE):
        set_id = params.get("evaluation_set")
        if (
            type(set_id) is not int
            or not EvaluationSet.objects.filter(pk=set_id, project=project).exists()
        ):
            raise ValidationError({"evaluation_set": "Name an evaluation set of this project."})
        return {"evaluation_set": set_id}
    return {}


@dataclass(frozen=True)
class BulkPreview:
    matched: int
    changed: int
    unchanged: dict[str, int]


def bulk_action_preview(
    *, project: Project, kind: str, params: dict[str, Any], selection: Selection
) -> BulkPreview:
    """How many chains ``selection`` holds, how many the action would change and why it
    would leave the others (the first of its reasons that holds), counted now in one
    query: what the lead confirms. Nothing is written."""
    params = bulk_params_check(project=project, kind=kind, params=params)
    reasons = ACTIONS[kind].reasons(project, params)
    counts: dict[str, Any] = {"matched": Count("pk")}
    earlier = Q()
    names = {}
    for number, (reason, holds) in enumerate(reasons.items()):
        counts[f"reason_{number}"] = Count("pk", filter=holds & ~earlier if earlier else holds)
        names[f"reason_{number}"] = reason
        earlier |= holds
    totals = selection.chains(project=project).aggregate(**counts)
    unchanged = {names[key]: totals[key] for key in names if totals[key]}
    matched = totals["matched"]
    return BulkPreview(
        matched=matched, changed=matched - sum(unchanged.values()), unchanged=unchanged
    )


def bulk_action_create(
    *,
    project: Project,
    user: User,
    kind: str,
    params: dict[str, Any],
    selection: Selection,
    expected: int,
) -> BulkAction:
    """Queue the action (QUEUED row; its task is sent once the row commits). ``expected``
    is the count the lead confirmed (kept for the record). The caller checks that the
    user leads the project and that the selection's ids are chains of it."""
    params = bulk_params_check(project=project, kind=kind, params=params)
    filters = None if selection.filters is None else asdict(selection.filters)
    with transaction.atomic():
        job = BulkAction.objects.create(
            project=project,
            created_by=user,
            kind=kind,
            params=params,
            chain_ids=None if selection.chain_ids is None else list(selection.chain_ids),
            filters=filters if selection.chain_ids is None else None,
            expected=expected,
        )
        job_id = job.pk
        transaction.on_commit(lambda: bulk_action_enqueue(job_id=job_id))
    return job


def bulk_action_enqueue(*, job_id: int) -> None:
    """Send the job's task. Runs after the commit: when the broker is unreachable the job
    fails at once, saying so, and nothing was done."""
    try:
        current_app.tasks[BULK_TASK].apply_async((job_id,))
    except Exception:  # noqa: BLE001 - the job says why; the request that queued it stands
        logger.warning("Broker unreachable: bulk action %s not sent", job_id, exc_info=True)
        BulkAction.objects.filter(pk=job_id, status=BulkActionStatus.QUEUED).update(
            status=BulkActionStatus.FAILED,
            finished_at=timezone.now(),
            detail="The task queue could not be reached; nothing was done. Try again.",
        )


def bulk_action_execute(*, job_id: int) -> None:
    """Run job ``job_id`` (the task's body) in one transaction. Returns quietly when the
    job is gone or no longer QUEUED (a second delivery). Every way it ends is written to
    the row: DONE with the counts, or FAILED with why (and nothing done)."""
    job = _claim(job_id=job_id)
    if job is None:
        return
    try:
        with transaction.atomic(), RowProgress(model=BulkAction, pk=job.pk) as progress:
            matched, changed, unchanged = _run(job=job, progress=progress)
    except ValidationError as error:
        _finish(job, status=BulkActionStatus.FAILED, detail=" ".join(error.messages))
    except Exception as error:  # noqa: BLE001 - a time limit, a lost database: the job says so
        logger.exception("Bulk action %s failed", job_id)
        detail = f"The action failed ({type(error).__name__}); nothing was changed."
        _finish(job, status=BulkActionStatus.FAILED, detail=detail)
    else:
        job.matched = job.done = matched
        job.changed = changed
        job.unchanged = dict(unchanged)
        _finish(job, status=BulkActionStatus.DONE)


def _run(*, job: BulkAction, progress: RowProgress) -> tuple[int, int, Counter[str]]:
    """Every batch of the job's selection, by id; (chains read, changed, left by reason)."""
    project = job.project
    params = bulk_params_check(project=project, kind=job.kind, params=job.params)
    selection = _selection(job)
    action = ACTIONS[job.kind]
    now = timezone.now()
    ids = selection.chains(project=project).order_by("pk").values_list("pk", flat=True)
    matched = changed = 0
    unchanged: Counter[str] = Counter()
    last = 0
    while batch := list(ids.filter(pk__gt=last)[:BATCH_CHAINS]):
        outcome = action.apply(
            project=project, chain_ids=batch, params=params, actor=job.created_by, job=job, now=now
        )
        matched += len(batch)
        changed += len(outcome.changed)
        unchanged.update({reason: len(left) for reason, left in outcome.unchanged.items()})
        last = batch[-1]
        progress.write(done=matched)
    return matched, changed, unchanged


def _selection(job: BulkAction) -> Selection:
    if job.chain_ids is not None:
        return Selection(chain_ids=tuple(job.chain_ids))
    stored = dict(job.filters or {})
    stored["statuses"] = tuple(stored.get("statuses", ()))
    stored["routings"] = tuple(stored.get("routings", ()))
    return Selection(filters=ChainFilters(**stored))


def _claim(*, job_id: int) -> BulkAction | None:
    with transaction.atomic():
        job = (
            BulkAction.objects.select_for_update(of=("self",))
            .select_related("project", "created_by")
            .filter(pk=job_id)
            .first()
        )
        if job is None or job.status != BulkActionStatus.QUEUED:
            return None
        job.status = BulkActionStatus.RUNNING
        job.started_at = timezone.now()
        job.save(update_fields=["status", "started_at"])
    return job


def _finish(job: BulkAction, *, status: str, detail: str = "") -> None:
    job.status = status
    job.detail = detail
    job.finished_at = timezone.now()
    job.save(
        update_fields=["status", "detail", "finished_at", "matched", "done", "changed", "unchanged"]
    )


# Past the task's hard time limit, plus this, a job no worker finished never will.
REAP_MARGIN_SECONDS = 300


def bulk_actions_reap_stale(*, project: Project) -> int:
    """Fail the project's jobs that no worker will finish: RUNNING or QUEUED for longer
    than the task time limit (STEPLAB_TASK_TIME_LIMIT, 15 minutes) plus REAP_MARGIN_SECONDS (a
    worker killed mid-action, a lost task message). Nothing of theirs was written (one
    transaction). How many were failed; one query when there are none."""
    cutoff = timezone.now() - timedelta(
        seconds=settings.STEPLAB_TASK_TIME_LIMIT + REAP_MARGIN_SECONDS
    )
    stale = BulkAction.objects.filter(project=project).filter(
        Q(status=BulkActionStatus.RUNNING, started_at__lt=cutoff)
        | Q(status=BulkActionStatus.QUEUED, created_at__lt=cutoff)
    )
    return stale.update(
        status=BulkActionStatus.FAILED,
        finished_at=timezone.now(),
        detail="The worker stopped before the action ended; nothing was changed. Try again.",
    )
