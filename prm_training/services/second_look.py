"""The PRM's second look (issue 23, routing): a person's label that the project's active
PRM contradicts with high confidence goes to another annotator for one more pass.

With the project's ``routing_second_look`` t above 0, a step of a current human pass (a
person's annotation that no revision superseded) is contradicted when the person rated
it +1 and the active version's P(correct) is at most 1 - t, or rated it -1 and
P(correct) is at least t. An ambiguous (0) rating says neither, so it never contradicts.
The P(correct) is the chain's newest score from a succeeded scoring run of the active
version (the score the data manager shows). A run scores only chains no person has
labeled (``scoring.chains_to_score``), so that score usually predates the label: the
check is the PRM's prediction against the label given after it, which is the point.

The strongest contradiction of each chain (the step whose probability lies furthest
past the threshold) goes to ``annotation.routing.services.chains_second_look``, which
asks for one more pass by someone other than the chain's annotators, puts it first in
the queue, records the contradiction in the chain's history, and leaves a chain that
had its second look already. Run after every scoring run that succeeds
(``scoring.scoring_run_execute``); chains are read and sent a chunk at a time, so memory
stays flat for any project."""

from __future__ import annotations

import logging
from collections.abc import Iterator

from django.db.models import Exists, OuterRef

from annotation.models import (
    Annotation,
    AnnotationSource,
    Chain,
    ChainRouting,
    Project,
    StepRating,
)
from annotation.routing.services import chains_second_look
from prm_training.models import ChainScore, ModelVersion, RunStatus

logger = logging.getLogger(__name__)

# Chains read, checked and sent for a second look per round.
SECOND_LOOK_CHUNK = 1_000

Contradiction = dict[str, float | int]


def step_contradiction(*, rating: int, p_correct: float, threshold: float) -> float | None:
    """How far the PRM's P(correct) lies past the threshold against a person's rating of
    the step (0 when just at it), or None when it does not contradict the rating.

    >>> step_contradiction(rating=1, p_correct=0.05, threshold=0.9)
    0.05
    >>> step_contradiction(rating=-1, p_correct=0.5, threshold=0.9) is None
    True
    >>> step_contradiction(rating=0, p_correct=0.0, threshold=0.9) is None
    True
    """
    if rating == 1 and p_correct <= 1 - threshold:
        return round((1 - threshold) - p_correct, 12)
    if rating == -1 and p_correct >= threshold:
        return round(p_correct - threshold, 12)
    return None


def _labeled_chunks(*, project: Project, version: ModelVersion) -> Iterator[list[int]]:
    """Ids of the project's chains with a current human pass and a score from a
    succeeded run of ``version``, not yet given a second look: SECOND_LOOK_CHUNK at a
    time, in id order (keyset pages)."""
    current = Annotation.objects.filter(
        chain=OuterRef("pk"), source=AnnotationSource.HUMAN, superseded_by__isnull=True
    )
    scored = ChainScore.objects.filter(
        chain=OuterRef("pk"),
        scoring_run__model_version=version,
        scoring_run__status=RunStatus.SUCCEEDED,
    )
    chains = (
        Chain.objects.filter(project=project)
        .exclude(routing=ChainRouting.SECOND_LOOK)
        .filter(Exists(current), Exists(scored))
    )
    last = 0
    while True:
        chunk = list(
            chains.filter(pk__gt=last)
            .order_by("pk")
            .values_list("pk", flat=True)[:SECOND_LOOK_CHUNK]
        )
        if not chunk:
            return
        last = chunk[-1]
        yield chunk


def _newest_probs(*, chain_ids: list[int], version: ModelVersion) -> dict[int, list[float]]:
    """Each chain's step probabilities from its newest succeeded run of ``version``."""
    out: dict[int, list[float]] = {}
    rows = (
        ChainScore.objects.filter(
            chain_id__in=chain_ids,
            scoring_run__model_version=version,
            scoring_run__status=RunStatus.SUCCEEDED,
        )
        .order_by("chain_id", "-scoring_run__created_at", "-scoring_run_id")
        .values_list("chain_id", "step_probs")
    )
    for chain_id, probs in rows:
        out.setdefault(chain_id, probs)  # the first row of a chain is its newest
    return out


def chains_contradicted(
    *, chain_ids: list[int], version: ModelVersion, threshold: float
) -> dict[int, Contradiction]:
    """The strongest contradiction ({"step", "rating", "value": P(correct)}) of each of
    ``chain_ids`` whose current human passes the newest scores of ``version`` contradict
    (module docstring); a chain with none is absent. Two queries."""
    probs = _newest_probs(chain_ids=chain_ids, version=version)
    ratings = StepRating.objects.filter(
        annotation__chain_id__in=list(probs),
        annotation__source=AnnotationSource.HUMAN,
        annotation__superseded_by__isnull=True,
    ).values_list("annotation__chain_id", "step__index", "rating")
    strongest: dict[int, tuple[float, int, Contradiction]] = {}
    for chain_id, index, rating in ratings:
        step_probs = probs[chain_id]
        if index >= len(step_probs) or step_probs[index] is None:
            continue
        p_correct = float(step_probs[index])
        margin = step_contradiction(rating=rating, p_correct=p_correct, threshold=threshold)
        if margin is None:
            continue
        found = (margin, -index, {"step": index, "rating": rating, "value": p_correct})
        # The furthest past the threshold; of equals, the earliest step.
        if chain_id not in strongest or found[:2] > strongest[chain_id][:2]:
            strongest[chain_id] = found
    return {chain_id: found[2] for chain_id, found in strongest.items()}


def second_looks_request(*, project: Project) -> list[int]:
    """Send every chain whose human label the active PRM contradicts to a second look
    (module docstring); the chains sent. Nothing when the project's
    ``routing_second_look`` is 0 or it has no active version. Idempotent: a chain sent
    once is not sent again."""
    project.refresh_from_db(fields=["routing_second_look"])
    threshold = project.routing_second_look
    version = ModelVersion.objects.filter(project=project, is_active=True).first()
    if threshold <= 0 or version is None:
        return []
    sent: list[int] = []
    for chunk in _labeled_chunks(project=project, version=version):
        contradictions = chains_contradicted(chain_ids=chunk, version=version, threshold=threshold)
        if contradictions:
            sent += chains_second_look(project=project, contradictions=contradictions)
    if sent:
        logger.info(
            "Second look for %d chains of project %s (v%s)", len(sent), project.pk, version.version
        )
    return sent
