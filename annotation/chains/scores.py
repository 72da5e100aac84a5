"""The PRM's scores of chains, for the data manager, without this app knowing the PRM.

The annotation app sits below the training app and never imports it; the scores live in
the training app's tables. The training app registers a ``ChainScoreSource`` in its
``AppConfig.ready()`` (as it registers its hook in ``chains/events.py``); the data
manager's selectors ask it to annotate a chain queryset with ``prm_score`` and
``prm_uncertainty`` (so filters on them run in the database, on the page's own query)
and for one chain's step scores. With no source registered the scores are null."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db.models import FloatField, QuerySet, Value

from annotation.models import Chain


@dataclass(frozen=True)
class ChainScoreSource:
    # annotate(queryset, project_id=...) -> the queryset with float annotations
    # ``prm_score`` (the PRM's P(chain correct): its least step probability) and
    # ``prm_uncertainty`` (0 sure .. 1 a coin flip, at the least sure step), null where
    # the project's newest scoring run did not score the chain.
    annotate: Callable[..., QuerySet[Chain]]
    # step_probs(chain_id=...) -> P(step i correct) per step from the newest scoring run
    # that scored the chain, or None.
    step_probs: Callable[..., list[float] | None]
    # scored_by(queryset, project_id=..., field="prm_score" | "prm_uncertainty") -> the
    # chains of the queryset that have that value in the newest run, with ``prm_score``
    # and ``prm_uncertainty`` and aliases ``prm_sort`` (the field's value) and
    # ``prm_sort_chain`` (its row's chain id) read by a join on the run's scores, so a
    # page sorted by them walks an index of the run's scores in order; None when the
    # project has no scoring run.
    scored_by: Callable[..., QuerySet[Chain] | None]


_SOURCES: list[ChainScoreSource] = []


def chain_score_source_register(source: ChainScoreSource) -> None:
    """Sets the one source (``ready()`` may run more than once in tests: the last wins)."""
    _SOURCES[:] = [source]


def chains_with_scores(*, chains: QuerySet[Chain], project_id: int) -> QuerySet[Chain]:
    """``chains`` annotated with ``prm_score`` and ``prm_uncertainty`` (null without a
    source)."""
    if not _SOURCES:
        null = Value(None, output_field=FloatField())
        return chains.annotate(prm_score=null, prm_uncertainty=null)
    return _SOURCES[0].annotate(chains, project_id=project_id)


def chains_scored_by(
    *, chains: QuerySet[Chain], project_id: int, field: str
) -> QuerySet[Chain] | None:
    """The ``chains`` with a value of ``field`` (``prm_score`` or ``prm_uncertainty``) in
    the newest scoring run, annotated as ``chains_with_scores`` does and with ``prm_sort``
    (that value) to order by; None when there is no source or no scoring run (then no
    chain has one)."""
    if field not in ("prm_score", "prm_uncertainty"):
        raise ValueError(f"Not a PRM column: {field!r}.")
    if not _SOURCES:
        return None
    return _SOURCES[0].scored_by(chains, project_id=project_id, field=field)


def chain_step_scores(*, chain_id: int) -> list[float] | None:
    """The PRM's P(correct) per step of the chain, or None when it was never scored."""
    if not _SOURCES:
        return None
    probs: Any = _SOURCES[0].step_probs(chain_id=chain_id)
    return None if probs is None else [float(p) for p in probs]
