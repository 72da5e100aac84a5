"""The PRM's second look (issue 23, routing): after a scoring run succeeds, a person's
label that the active version's newest scores contradict with the project's confidence
goes to another annotator, first in the queue. Detection on scores written as a run
writes them, and once end to end through a real scoring run of a tiny zero-shot PRM
(CPU)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from annotation.models import Chain, ChainEvent, ChainEventKind, ChainRouting, Project
from prm_training.models import ChainScore, ModelVersion, RunStatus, ScoringRun, TrainingRun
from prm_training.services.second_look import chains_contradicted, second_looks_request
from tests.annotation.labeling.claiming import assignment_claim_next
from tests.factories import (
    ChainFactory,
    UserFactory,
    annotation_with_ratings,
    scoring_run_with_model_version,
)
from tests.prm_training.services.test_zero_shot_version import (
    open_prm,  # noqa: F401 - a fixture
    prm_root,  # noqa: F401 - a fixture
    run_zero_shot,
    unlabeled_project,  # noqa: F401 - a fixture
)

pytestmark = pytest.mark.django_db


def _second_look(project: Project, threshold: float) -> Project:
    Project.objects.filter(pk=project.pk).update(routing_second_look=threshold)
    return Project.objects.get(pk=project.pk)


@pytest.fixture
def active(project: Project) -> ScoringRun:
    """A succeeded scoring run of the project's active version (no checkpoint: the rows
    are written here as a run writes them)."""
    run = scoring_run_with_model_version(
        project=project, content_hash="a" * 64, status=RunStatus.SUCCEEDED
    )
    ModelVersion.objects.filter(pk=run.model_version_id).update(is_active=True)
    return ScoringRun.objects.get(pk=run.pk)


def _scored(run: ScoringRun, chain: Chain, probs: list[float]) -> None:
    ChainScore.objects.create(scoring_run=run, chain=chain, step_probs=probs)


def _labeled(project: Project, labels: list[int | None], probs: list[float], run: ScoringRun):
    """A chain one person labeled ``labels`` (finished), scored ``probs`` by ``run``."""
    chain = ChainFactory(project=project, step_count=len(labels))
    annotation_with_ratings(chain=chain, labels=labels, annotator=UserFactory())
    Chain.objects.filter(pk=chain.pk).update(is_finished=True, finished_count=1)
    _scored(run, chain, probs)
    return chain


def test_strong_contradictions_go_for_a_second_look_and_nothing_else(project, active):
    # Given: a threshold of 0.9 and labels the PRM contradicts or not
    project = _second_look(project, 0.9)
    wrong_ok = _labeled(project, [1, 1, 1], [0.08, 0.05, 0.5], active)  # two; step 1 strongest
    right_wrong = _labeled(project, [1, -1], [0.95, 0.93], active)  # -1 at 0.93 >= 0.9
    ambiguous = _labeled(project, [0, 0], [0.0, 1.0], active)  # 0 never contradicts
    mild = _labeled(project, [1, -1], [0.11, 0.89], active)  # just inside the threshold
    # An older contradicting score is not the newest, nor is another version's
    newer = ScoringRun.objects.create(
        project=project, model_version=active.model_version, strategy="random", status="succeeded"
    )
    stale = _labeled(project, [1, 1], [0.01, 0.01], active)
    _scored(newer, stale, [0.9, 0.9])
    other = ScoringRun.objects.create(
        project=project,
        model_version=ModelVersion.objects.create(
            project=project,
            training_run=TrainingRun.objects.create(project=project, status=RunStatus.SUCCEEDED),
            snapshot=active.model_version.snapshot,
            version=2,
            checkpoint_dir="/nonexistent",
            metrics={},
        ),
        strategy="random",
        status=RunStatus.SUCCEEDED,
    )
    inactive = _labeled(project, [1, 1], [0.9, 0.9], active)
    _scored(other, inactive, [0.0, 0.0])
    # A revised pass counts, the pass it superseded does not
    revised = _labeled(project, [1, 1], [0.9, 0.02], active)
    first = revised.annotations.get()
    annotation_with_ratings(
        chain=revised, labels=[1, -1], annotator=first.annotator, supersedes=first
    )

    # When
    found = chains_contradicted(
        chain_ids=[
            c.pk for c in (wrong_ok, right_wrong, ambiguous, mild, stale, inactive, revised)
        ],
        version=active.model_version,
        threshold=0.9,
    )
    sent = second_looks_request(project=project)

    # Then: only the two strong contradictions, each with its strongest step
    assert found == {
        wrong_ok.pk: {"step": 1, "rating": 1, "value": 0.05},
        right_wrong.pk: {"step": 1, "rating": -1, "value": 0.93},
    }
    assert sorted(sent) == sorted(found)
    routed = dict(Chain.objects.filter(project=project).values_list("pk", "routing"))
    assert {pk for pk, routing in routed.items() if routing == ChainRouting.SECOND_LOOK} == set(
        found
    )
    event = ChainEvent.objects.get(chain=wrong_ok, kind=ChainEventKind.SECOND_LOOK)
    assert event.detail == found[wrong_ok.pk]
    # And asking again sends nothing more
    assert second_looks_request(project=project) == []


def test_off_or_without_an_active_version_nothing_is_sent(project, active):
    chain = _labeled(project, [1, 1], [0.0, 0.0], active)

    assert second_looks_request(project=project) == []  # routing_second_look is 0

    project = _second_look(project, 0.9)
    ModelVersion.objects.filter(project=project).update(is_active=False)
    assert second_looks_request(project=project) == []
    chain.refresh_from_db()
    assert (chain.routing, chain.is_finished) == (ChainRouting.NONE, True)


def test_a_scoring_run_sends_a_contradicted_label_to_someone_else(
    unlabeled_project: Any,  # noqa: F811 - the fixture
    open_prm: Path,  # noqa: F811 - the fixture
) -> None:
    from prm_training.services.scoring import scoring_run_execute, scoring_run_start

    # Given: a zero-shot version's scores of the unlabeled chains
    project = unlabeled_project
    run_zero_shot(project)
    first = scoring_run_start(project=project, user=None, strategy="random")
    assert scoring_run_execute(scoring_run_id=first.pk).status == RunStatus.SUCCEEDED
    # ...and then a person labels one chain against what it predicted for step 0, the
    # other steps ambiguous, with the threshold just at that prediction
    chain = Chain.objects.filter(project=project).order_by("pk").first()
    p = ChainScore.objects.get(scoring_run=first, chain=chain).step_probs[0]
    rating = 1 if p < 0.5 else -1
    author = UserFactory()
    annotation_with_ratings(
        chain=chain, labels=[rating] + [0] * (chain.step_count - 1), annotator=author
    )
    Chain.objects.filter(pk=chain.pk).update(is_finished=True, finished_count=1)
    _second_look(project, max(p, 1 - p) - 1e-6)

    # When: the next scoring run finishes (it scores only the unlabeled chains)
    second = scoring_run_start(project=project, user=None, strategy="random")
    ended = scoring_run_execute(scoring_run_id=second.pk)

    # Then: the chain waits for one more pass, first in the queue, never the author's
    assert ended is not None and ended.status == RunStatus.SUCCEEDED, ended and ended.error
    assert not ChainScore.objects.filter(scoring_run=second, chain=chain).exists()
    chain.refresh_from_db()
    assert (chain.routing, chain.people_first, chain.is_finished) == ("second_look", True, False)
    event = ChainEvent.objects.get(chain=chain, kind=ChainEventKind.SECOND_LOOK)
    assert event.detail == {"step": 0, "rating": rating, "value": p}
    mine = assignment_claim_next(project=project, user=author)
    assert mine is None or mine.chain_id != chain.pk
    lease = assignment_claim_next(project=project, user=UserFactory())
    assert lease is not None and lease.chain_id == chain.pk
