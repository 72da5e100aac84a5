"""Evaluation sets: chains a lead holds out to measure every model version on.

A lead marks an import as an evaluation set once its chains carry labels (the labels the
import brought, or human passes made before marking), or names the chains (a labeled part
of the project: ``evaluation_set_mark_chains``). From then on its chains:

* are never trained on: the training path reads a snapshot's train and held-out splits
  without them (``prm_training.services.examples.snapshot_chain_examples`` with
  ``without_evaluation``), whenever the snapshot was taken, as the sets are now;
* are never leased: the queue's candidate query and its index skip them
  (``annotation.queue.sql``). They do not wait for human labels there: a chain chosen
  to measure models on is labeled before it is marked, and is counted as unlabeled (not
  scored) until then; to label it, unmark the set, label, mark it again;
* are scored by every model version trained afterwards, in its training task
  (``prm_training.services.evaluation``).

Gold chains stay gold (they measure annotators and are leased as such): a set takes the
import's other chains. A chain first imported by another file (deduplicated by content)
belongs to that file's import, not this one."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from django.core.exceptions import ValidationError
from django.db import transaction

from annotation.models import Chain, EvaluationSet, ImportBatch, Project

if TYPE_CHECKING:
    from django.contrib.auth.models import User

NAME_MAX = 200
# Chains updated per statement when a lead names them.
CHAIN_CHUNK = 10_000


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
        chains = Chain.objects.filter(
            project=project, import_batch=batch, is_gold=False, evaluation_set__isnull=True
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
        chains = Chain.objects.filter(project=project, pk__in=wanted)
        free = set(
            chains.filter(is_gold=False, evaluation_set__isnull=True).values_list("pk", flat=True)
        )
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
    return evaluation_set


def evaluation_set_unmark(*, evaluation_set: EvaluationSet) -> int:
    """Return the set's chains to ordinary work (the queue and training) and drop the set
    with the results measured on it. The number of chains returned."""
    with transaction.atomic():
        Project.objects.select_for_update().get(pk=evaluation_set.project_id)
        returned = Chain.objects.filter(evaluation_set=evaluation_set).update(evaluation_set=None)
        evaluation_set.delete()
    return returned
