"""The PRM's chain scores, as the annotation app's data manager reads them
(``annotation.chains.scores``): registered in ``PrmTrainingConfig.ready()``.

A chain's PRM score and uncertainty come from the project's newest succeeded scoring run
(``ChainScore.chain_score``, ``chain_uncertainty``: its least step probability, and
``1 - |2p - 1|`` at its least sure step), read in the data manager's own query so it
filters on them: one correlated sub-select per row on the (scoring run, chain) unique
index."""

from __future__ import annotations

from django.db.models import (
    F,
    FilteredRelation,
    FloatField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
)

from annotation.chains.scores import ChainScoreSource
from annotation.models import Chain
from prm_training.models import ChainScore, RunStatus, ScoringRun


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
    return chains.annotate(
        prm_score=Subquery(row.values("chain_score")[:1], output_field=FloatField()),
        prm_uncertainty=Subquery(row.values("chain_uncertainty")[:1], output_field=FloatField()),
    )


_COLUMNS = {"prm_score": "chain_score", "prm_uncertainty": "chain_uncertainty"}


def chains_scored_by(
    chains: QuerySet[Chain], *, project_id: int, field: str
) -> QuerySet[Chain] | None:
    """The ``chains`` the newest run gave a value of ``field`` (``prm_score`` or
    ``prm_uncertainty``), read through one join on the run's scores (a FilteredRelation,
    so the join is the run's row of each chain and nothing else), with ``prm_sort`` and
    ``prm_sort_chain`` (the score row's chain id) to order by: the (scoring run, value,
    chain) indexes then give a page in order. None without a run. One query to find the
    run."""
    run_id = _newest_run_id(project_id=project_id)
    if run_id is None:
        return None
    newest = FilteredRelation("prm_scores", condition=Q(prm_scores__scoring_run_id=run_id))
    column = f"newest__{_COLUMNS[field]}"
    return (
        chains.alias(newest=newest)
        .filter(**{f"{column}__isnull": False})
        .annotate(
            prm_score=F("newest__chain_score"), prm_uncertainty=F("newest__chain_uncertainty")
        )
        .alias(prm_sort=F(column), prm_sort_chain=F("newest__chain_id"))
    )


def chain_step_probs(*, chain_id: int) -> list[float] | None:
    """The step probabilities of the newest succeeded run that scored the chain."""
    return (
        ChainScore.objects.filter(chain_id=chain_id, scoring_run__status=RunStatus.SUCCEEDED)
        .order_by("-scoring_run__finished_at", "-scoring_run_id")
        .values_list("step_probs", flat=True)
        .first()
    )


SOURCE = ChainScoreSource(
    annotate=chains_scored, step_probs=chain_step_probs, scored_by=chains_scored_by
)
