"""``Chain.agreement``: the share of a chain's steps that its current human passes do not
rate differently, kept on the chain so the data manager filters and sorts on a column.

One definition, as an ORM expression, for every writer but one: unmarking gold (its
passes count again), a revision, the bulk actions and the migration that filled the
column. The counted submit (``annotation.labeling.queue.submit``), where compiling this
expression cost more than the rest of the submit, runs the same definition as fixed SQL
(``queue.sql.CHAIN_AGREEMENT_SQL``), which a test holds to this one.

A step is disputed when two or more current human ratings of it (passes not superseded
by a correction) differ; the agreement is null while fewer than two passes count
(``finished_count < 2``), else ``1 - disputed / steps``."""

from __future__ import annotations

from django.db.models import (
    Case,
    Count,
    F,
    FloatField,
    IntegerField,
    Max,
    Min,
    OuterRef,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.functions import Cast, Coalesce, Greatest

from annotation.models import AnnotationSource, Chain, Step, StepRating


def disputed_steps() -> Coalesce:
    """How many steps of the chain (the outer query's row) two or more current human
    passes rated differently: per step, the spread of its current human ratings; the
    steps whose spread is above zero, counted.

    The ratings are looked up through the chain's own passes (a rating's pass is always
    of its step's chain), so PostgreSQL has an index key on each side of the join:
    filtered on the source alone, the pass table matched the partial index of human passes
    and, when its statistics predate the passes (a new project, a fresh deployment),
    PostgreSQL read every human pass in the database once per step, so a counted submit's
    refresh grew with every pass ever stored (BENCHMARKS.md, the queue under concurrency)."""
    spread = (
        StepRating.objects.filter(
            step=OuterRef("pk"),
            annotation__chain=OuterRef("chain"),
            annotation__source=AnnotationSource.HUMAN,
            annotation__superseded_by__isnull=True,
        )
        .values("step")
        .annotate(spread=Max("rating") - Min("rating"))
        .values("spread")
    )
    disputed = (
        Step.objects.filter(chain=OuterRef("pk"))
        .annotate(spread=Subquery(spread, output_field=IntegerField()))
        .filter(spread__gt=0)
        .values("chain")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return Coalesce(Subquery(disputed, output_field=IntegerField()), 0)


def agreement_expression() -> Case:
    """The agreement of the chain (the outer query's row), as ``Chain.agreement`` holds it."""
    steps = Cast(Greatest(F("step_count"), Value(1)), FloatField())
    return Case(
        When(finished_count__lt=2, then=Value(None)),
        default=Value(1.0) - Cast(disputed_steps(), FloatField()) / steps,
        output_field=FloatField(),
    )


def chains_agreement_refresh(*, chains: QuerySet[Chain]) -> int:
    """Work ``Chain.agreement`` out again for ``chains`` (one UPDATE); how many rows it
    wrote. Call it in the transaction that changed their passes or ``finished_count``."""
    return chains.update(agreement=agreement_expression())
