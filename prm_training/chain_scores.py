"""The PRM's chain scores, as the annotation app's data manager reads them
(``annotation.selectors.chain_scores``): registered in ``PrmTrainingConfig.ready()``.

A chain's PRM score is its least step probability (the chain is as sound as its weakest
step, the usual PRM aggregate); its uncertainty is ``1 - |2p - 1|`` at its least sure
step. Both come from the project's newest succeeded scoring run, computed in SQL from the
stored ``step_probs`` so the data manager filters on them in its own query: one
correlated sub-select per row on the (scoring run, chain) unique index."""

from __future__ import annotations

from django.db import connection
from django.db.models import FloatField, OuterRef, QuerySet, Subquery, Value
from django.db.models.expressions import RawSQL

from annotation.models import Chain
from annotation.selectors.chain_scores import ChainScoreSource
from prm_training.models import ChainScore, RunStatus, ScoringRun


def _aggregate_sql(expression: str) -> str:
    """An aggregate over the elements of the row's ``step_probs``: ``expression`` names
    each element ``{p}``, written in this database's JSON functions."""
    if connection.vendor == "postgresql":
        p = "e::double precision"
        return f"(SELECT {expression.format(p=p)} FROM jsonb_array_elements_text(step_probs) e)"
    p = "CAST(value AS REAL)"
    return f"(SELECT {expression.format(p=p)} FROM json_each(step_probs))"


def _newest_run_id(*, project_id: int) -> int | None:
    return (
        ScoringRun.objects.filter(project_id=project_id, status=RunStatus.SUCCEEDED)
        .order_by("-finished_at", "-id")
        .values_list("id", flat=True)
        .first()
    )


def chains_scored(chains: QuerySet[Chain], *, project_id: int) -> QuerySet[Chain]:
    """``chains`` with ``prm_score`` and ``prm_uncertainty`` from the newest run. One
    query to find the run."""
    run_id = _newest_run_id(project_id=project_id)
    if run_id is None:
        null = Value(None, output_field=FloatField())
        return chains.annotate(prm_score=null, prm_uncertainty=null)
    row = ChainScore.objects.filter(scoring_run_id=run_id, chain_id=OuterRef("pk"))
    score = RawSQL(_aggregate_sql("MIN({p})"), (), output_field=FloatField())
    uncertainty = RawSQL(_aggregate_sql("MAX(1 - ABS(2 * {p} - 1))"), (), output_field=FloatField())
    return chains.annotate(
        prm_score=Subquery(row.annotate(v=score).values("v")[:1], output_field=FloatField()),
        prm_uncertainty=Subquery(
            row.annotate(v=uncertainty).values("v")[:1], output_field=FloatField()
        ),
    )


def chain_step_probs(*, chain_id: int) -> list[float] | None:
    """The step probabilities of the newest succeeded run that scored the chain."""
    return (
        ChainScore.objects.filter(chain_id=chain_id, scoring_run__status=RunStatus.SUCCEEDED)
        .order_by("-scoring_run__finished_at", "-scoring_run_id")
        .values_list("step_probs", flat=True)
        .first()
    )


SOURCE = ChainScoreSource(annotate=chains_scored, step_probs=chain_step_probs)
