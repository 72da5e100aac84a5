"""Read path of evaluation sets (``annotation.datasets.evaluation_sets``)."""

from __future__ import annotations

from django.db.models import Count, Exists, OuterRef, Q, QuerySet

from annotation.models import Annotation, EvaluationSet, ImportBatch, Project


def evaluation_set_list(*, project: Project) -> QuerySet[EvaluationSet]:
    """The project's evaluation sets, oldest first, each with ``chain_count`` (its chains)
    and ``labeled_count`` (those with any annotation: a human pass or an import's labels,
    what a version can be scored against)."""
    labeled = Annotation.objects.filter(chain=OuterRef("pk"))
    return (
        EvaluationSet.objects.filter(project=project)
        .select_related("import_batch", "created_by")
        .annotate(
            chain_count=Count("chains", distinct=True),
            labeled_count=Count(
                "chains",
                filter=Q(chains__in=project.chains.filter(Exists(labeled))),
                distinct=True,
            ),
        )
        .order_by("id")
    )


def import_batches_markable(*, project: Project) -> QuerySet[ImportBatch]:
    """The project's imports that are not an evaluation set yet, newest first."""
    return (
        ImportBatch.objects.filter(project=project, evaluation_sets__isnull=True)
        .only("pk", "filename", "created_at", "chains_created")
        .order_by("-id")
    )
