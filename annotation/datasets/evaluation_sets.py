"""Evaluation sets: chains a lead holds out to measure every model version on.

A lead marks an import as an evaluation set once its chains carry labels (the labels the
import brought, or human passes made before marking), or names the chains (a labeled part
of the project: ``evaluation_set_mark_chains``). From then on its chains:

* are never trained on: the training path reads a snapshot's train and held-out splits
  without them (``prm_training.services.examples.snapshot_chain_examples`` with
  ``without_evaluation``), whenever the snapshot was taken, as the sets are now;
* are never leased: the queue's candidate query and its index skip them
  (``annotation.labeling.queue.sql``). They do not wait for human labels there: a chain chosen
  to measure models on is labeled before it is marked, and is counted as unlabeled (not
  scored) until then; to label it, unmark the set, label, mark it again;
* are scored by every model version: those trained afterwards in their training task,
  those made before by an evaluation run that marking the set queues (the training app's
  hook, ``evaluation_set_changed_register``).

A lead also puts chains into an existing set, or takes them out of it, from the data
manager (``chains_evaluation_set_add`` and ``chains_evaluation_set_remove``, a bulk
action's batch at a time): the same rules hold (``hold_out_reasons``), each changed chain's
history records it, and the figures measured on a set whose chains changed describe other
chains, so they are dropped (``evaluation_set_changed_register``: the training app deletes
them and queues an evaluation run that measures its versions there again). A chain
leased when it is put into a set keeps its lease until it is submitted or expires; the
queue offers it to nobody after that.

Gold chains stay gold (they measure annotators and are leased as such): a set takes the
import's other chains. A chain first imported by another file (deduplicated by content)
belongs to that file's import, not this one."""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from datetime import datetime
from functools import reduce
from typing import TYPE_CHECKING

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from annotation.chains.changes import Changed, chain_events_record, chains_lock_sorted
from annotation.models import (
    BulkAction,
    Chain,
    ChainEventKind,
    EvaluationSet,
    ImportBatch,
    Project,
)

if TYPE_CHECKING:
    from django.contrib.auth.models import User

NAME_MAX = 200
# Chains read or updated per statement when a lead names them: PostgreSQL takes at most
# 65,535 parameters a statement, and the API takes 100,000 ids.
CHAIN_CHUNK = 10_000

# Why a chain is not put into a set.
IN_THIS_SET = "in this evaluation set already"
IN_ANOTHER_SET = "in another evaluation set"
GOLD = "gold (gold chains measure annotators and are leased)"
# Why a chain is not taken out of a set.
NOT_IN_THIS_SET = "not in this evaluation set"

# Called as hook(project_id=, evaluation_set_ids=) in the transaction that marked those
# sets or changed their chains (not when a set is unmarked: its figures go with it).
EvaluationSetChangedHook = Callable[..., object]
_CHANGED_HOOKS: list[EvaluationSetChangedHook] = []


def evaluation_set_changed_register(hook: EvaluationSetChangedHook) -> None:
    """Adds ``hook`` once (``ready()`` may run more than once in tests); hooks run in the
    order they were added. The annotation app never imports the training app, whose
    figures on a set go stale when its chains change and are missing on a set just
    marked: it registers here."""
    if hook not in _CHANGED_HOOKS:
        _CHANGED_HOOKS.append(hook)


def _changed_notify(*, project_id: int, evaluation_set_ids: list[int]) -> None:
    for hook in _CHANGED_HOOKS:
        hook(project_id=project_id, evaluation_set_ids=evaluation_set_ids)


def hold_out_reasons(*, evaluation_set: EvaluationSet | None = None) -> dict[str, Q]:
    """Why a chain cannot be held out (in ``evaluation_set``, when given): in it already,
    in another set (a chain belongs to one set at most), or gold. Every way in (an import,
    chains named, the data manager) refuses or leaves these."""
    reasons: dict[str, Q] = {}
    if evaluation_set is not None:
        reasons[IN_THIS_SET] = Q(evaluation_set=evaluation_set)
    reasons[IN_ANOTHER_SET] = Q(evaluation_set__isnull=False)
    reasons[GOLD] = Q(is_gold=True)
    return reasons


def _held(reasons: dict[str, Q]) -> Q:
    return reduce(operator.or_, reasons.values())


def evaluation_set_mark(
    *, project: Project, import_batch_id: int, name: str = "", actor: User | None = None
) -> EvaluationSet:
    """Hold out the chains of the import ``import_batch_id`` of ``project`` as an evaluation
    set named ``name`` (the import's file name when blank). Raises ImportBatch.DoesNotExist
    for an import of another project, ValidationError for an import already marked, a
    name already taken, or an import with no chain to hold out."""
    batch = ImportBatch.objects.get(pk=import_batch_id, project=project)
    name = (name or batch.filename).strip()[:NAME_MAX]
    with transaction.atomic():
        # The project row serializes marks, so two leads marking at once cannot both pass
        # the checks below.
        Project.objects.select_for_update().get(pk=project.pk)
        if EvaluationSet.objects.filter(import_batch=batch).exists():
            raise ValidationError({"import_batch": "This import is already an evaluation set."})
        if EvaluationSet.objects.filter(project=project, name=name).exists():
            raise ValidationError({"name": "The project has an evaluation set of this name."})
        chains = Chain.objects.filter(project=project, import_batch=batch).exclude(
            _held(hold_out_reasons())
        )
        if not chains.exists():
            raise ValidationError({"import_batch": "This import has no chain to hold out."})
        evaluation_set = EvaluationSet.objects.create(
            project=project,
            name=name,
            import_batch=batch,
            created_by=actor if actor is not None and actor.is_authenticated else None,
        )
        chains.update(evaluation_set=evaluation_set)
        _changed_notify(project_id=project.pk, evaluation_set_ids=[evaluation_set.pk])
    return evaluation_set


def evaluation_set_mark_chains(
    *, project: Project, chain_ids: Iterable[int], name: str, actor: User | None = None
) -> EvaluationSet:
    """Hold out the chains ``chain_ids`` of ``project`` as an evaluation set named ``name``,
    all or nothing: ValidationError naming the ids that are no chains of the project,
    gold, or in another set, or for a name already taken."""
    wanted = sorted(set(chain_ids))
    name = name.strip()[:NAME_MAX]
    if not wanted:
        raise ValidationError({"chain_ids": "Name at least one chain."})
    with transaction.atomic():
        Project.objects.select_for_update().get(pk=project.pk)
        held = _held(hold_out_reasons())
        free: set[int] = set()
        for start in range(0, len(wanted), CHAIN_CHUNK):
            chunk = wanted[start : start + CHAIN_CHUNK]
            chains = Chain.objects.filter(project=project, pk__in=chunk).exclude(held)
            free.update(chains.values_list("pk", flat=True))
        refused = [chain_id for chain_id in wanted if chain_id not in free]
        if refused:
            shown = ", ".join(map(str, refused[:20])) + (" ..." if len(refused) > 20 else "")
            raise ValidationError(
                {"chain_ids": f"Not chains of this project that are free to hold out: {shown}."}
            )
        if not name:
            raise ValidationError({"name": "Name the evaluation set."})
        if EvaluationSet.objects.filter(project=project, name=name).exists():
            raise ValidationError({"name": "The project has an evaluation set of this name."})
        evaluation_set = EvaluationSet.objects.create(
            project=project,
            name=name,
            created_by=actor if actor is not None and actor.is_authenticated else None,
        )
        for start in range(0, len(wanted), CHAIN_CHUNK):
            Chain.objects.filter(pk__in=wanted[start : start + CHAIN_CHUNK]).update(
                evaluation_set=evaluation_set
            )
        _changed_notify(project_id=project.pk, evaluation_set_ids=[evaluation_set.pk])
    return evaluation_set


def evaluation_set_unmark(*, evaluation_set: EvaluationSet) -> int:
    """Return the set's chains to ordinary work (the queue and training) and drop the set
    with the results measured on it. The number of chains returned."""
    with transaction.atomic():
        Project.objects.select_for_update().get(pk=evaluation_set.project_id)
        returned = Chain.objects.filter(evaluation_set=evaluation_set).update(evaluation_set=None)
        evaluation_set.delete()
    return returned


def _set_locked(*, project: Project, evaluation_set: EvaluationSet) -> None:
    """Lock the project row (as marking and unmarking do, so a set cannot be unmarked
    while chains go in) and check that the set is still one of the project's."""
    Project.objects.select_for_update().get(pk=project.pk)
    if not EvaluationSet.objects.filter(pk=evaluation_set.pk, project=project).exists():
        raise ValidationError({"evaluation_set": "Not an evaluation set of this project."})


def chains_evaluation_set_add(
    *,
    project: Project,
    chain_ids: Iterable[int],
    evaluation_set: EvaluationSet,
    actor: User | None = None,
    bulk_action: BulkAction | None = None,
    now: datetime | None = None,
) -> Changed:
    """Put the chains ``chain_ids`` of ``project`` into ``evaluation_set``: from then on
    never trained on and never leased (the module docstring). Chains that cannot be held
    out are left (``hold_out_reasons``). ValidationError for a set of another project or
    one unmarked meanwhile. Precondition: the caller checks that the user leads the
    project. Lock order: the project row, then the chains in id order."""
    return _chains_move(
        project=project,
        chain_ids=chain_ids,
        evaluation_set=evaluation_set,
        into=True,
        reasons=hold_out_reasons(evaluation_set=evaluation_set),
        event=ChainEventKind.EVALUATION_ADDED,
        actor=actor,
        bulk_action=bulk_action,
        now=now,
    )


def chains_evaluation_set_remove(
    *,
    project: Project,
    chain_ids: Iterable[int],
    evaluation_set: EvaluationSet,
    actor: User | None = None,
    bulk_action: BulkAction | None = None,
    now: datetime | None = None,
) -> Changed:
    """Take the chains ``chain_ids`` of ``project`` out of ``evaluation_set``, back to
    the queue and to training; chains not in it are left. The set stays (an empty set
    measures nothing; unmark it to drop it). ValidationError for a set of another project
    or one unmarked meanwhile. Precondition and lock order as ``chains_evaluation_set_add``."""
    return _chains_move(
        project=project,
        chain_ids=chain_ids,
        evaluation_set=evaluation_set,
        into=False,
        reasons={NOT_IN_THIS_SET: ~Q(evaluation_set=evaluation_set)},
        event=ChainEventKind.EVALUATION_REMOVED,
        actor=actor,
        bulk_action=bulk_action,
        now=now,
    )


def _chains_move(
    *,
    project: Project,
    chain_ids: Iterable[int],
    evaluation_set: EvaluationSet,
    into: bool,
    reasons: dict[str, Q],
    event: str,
    actor: User | None,
    bulk_action: BulkAction | None,
    now: datetime | None,
) -> Changed:
    """Put the chains into ``evaluation_set`` (``into``) or take them out, leaving those
    ``reasons`` name; one ``event`` per chain moved, and the set's figures dropped once
    any moved."""
    now = now or timezone.now()
    with transaction.atomic():
        _set_locked(project=project, evaluation_set=evaluation_set)
        outcome = chains_lock_sorted(project=project, chain_ids=chain_ids, reasons=reasons)
        Chain.objects.filter(pk__in=outcome.changed).update(
            evaluation_set=evaluation_set if into else None
        )
        named = {"evaluation_set": evaluation_set.pk, "name": evaluation_set.name}
        chain_events_record(
            chain_ids=outcome.changed,
            kind=event,
            actor=actor,
            now=now,
            detail=lambda _chain_id: named,
            bulk_action=bulk_action,
        )
        if outcome.changed:
            _changed_notify(project_id=project.pk, evaluation_set_ids=[evaluation_set.pk])
    return outcome
