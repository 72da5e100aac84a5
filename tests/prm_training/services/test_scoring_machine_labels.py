"""A scoring run writes the PRM as a machine-label source: the version's verdict
on every step of every chain it scored, with the run and the version, rewritten (never
added to) by a redelivered run; pre-labels and routing read them; they are never a vote
and finish no chain. The writer on scores written as a run writes them, and once end to
end through a real scoring run of a tiny zero-shot PRM (CPU)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from annotation.labeling.queue.prelabels import PrelabelPlan, verdicts_from_db
from annotation.labeling.queue.sql import prelabels_sql
from annotation.models import (
    Annotation,
    Chain,
    MachineLabel,
    MachineSource,
    Project,
)
from annotation.quality.machine_quality import machine_source_quality
from annotation.routing.machine_labels import machine_chain_labels
from annotation.routing.services import routing_sources
from prm_training.ml.readout import Readout, step_verdicts
from prm_training.models import ChainScore, ModelVersion, RunStatus, ScoringRun
from prm_training.services import scoring, scoring_labels
from prm_training.services.scoring_labels import PRM_RUN_KIND, prm_labels_write
from tests.factories import ChainFactory, scoring_run_with_model_version
from tests.prm_training.services.test_zero_shot_version import (
    open_prm,  # noqa: F401 - a fixture
    prm_root,  # noqa: F401 - a fixture
    run_zero_shot,
    unlabeled_project,  # noqa: F401 - a fixture
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(project: Project) -> ScoringRun:
    """A scoring run of version 1 (no checkpoint: its scores are written here as a run
    writes them)."""
    return scoring_run_with_model_version(
        project=project, content_hash="b" * 64, status=RunStatus.RUNNING
    )


def _scored(run: ScoringRun, probs: list[float], **chain: Any) -> Chain:
    scored = ChainFactory(project=run.project, step_count=len(probs), **chain)
    ChainScore.objects.create(scoring_run=run, chain=scored, step_probs=probs)
    return scored


def _labels(chain: Chain) -> list[tuple[int, int | None, float | None]]:
    return list(
        MachineLabel.objects.filter(chain=chain, source=MachineSource.PRM)
        .order_by("step__index")
        .values_list("step__index", "rating", "value")
    )


def test_verdicts_follow_the_version_s_readout() -> None:
    # The readout's first error is -1, steps before it +1, later ones by the threshold
    assert step_verdicts([0.9, 0.3, 0.7, 0.6], Readout(0.65)) == [1, -1, 1, -1]
    assert step_verdicts([0.9, 0.8], Readout(0.5)) == [1, 1]
    # A version that reads answers: a chain graded right by threshold_right, one graded
    # wrong at its most likely first error, one ungraded by threshold
    readout = Readout(0.5, 0.2)
    assert step_verdicts([0.3, 0.9, 0.1], readout, True) == [1, 1, -1]
    assert step_verdicts([0.6, 0.9, 0.1], readout, False) == [1, 1, -1]
    assert step_verdicts([0.3, 0.9, 0.1], readout, None) == [-1, 1, -1]


def test_every_scored_step_gets_the_version_s_verdict_with_its_provenance(run) -> None:
    # Given: two chains the run scored, and one it did not
    first = _scored(run, [0.9, 0.2, 0.8])
    second = _scored(run, [0.7, 0.95])
    unscored = ChainFactory(project=run.project, step_count=2)

    # When the run's verdicts are written with a threshold of 0.75
    written = prm_labels_write(run=run, readout=Readout(0.75))

    # Then: one label per scored step, the verdict by the readout, P(correct) kept
    assert written == 5
    assert _labels(first) == [(0, 1, 0.9), (1, -1, 0.2), (2, 1, 0.8)]
    assert _labels(second) == [(0, -1, 0.7), (1, 1, 0.95)]
    assert _labels(unscored) == []
    label = MachineLabel.objects.get(chain=first, step__index=1)
    version = run.model_version
    assert (label.run_kind, label.run_id, label.model) == (PRM_RUN_KIND, run.pk, "model v1")
    assert label.detail == {"model_version": version.pk, "version": 1, "threshold": 0.75}
    assert label.confidence == pytest.approx(0.8)
    assert len(label.config_hash) == 64


def test_a_redelivered_run_rewrites_the_same_rows(run, monkeypatch) -> None:
    # Given: a run's verdicts written in pages of two chains
    monkeypatch.setattr(scoring_labels, "LABEL_PAGE", 2)
    chains = [_scored(run, [0.9, 0.1]) for _ in range(5)]
    prm_labels_write(run=run, readout=Readout(0.5))
    ids = set(MachineLabel.objects.values_list("pk", flat=True))
    assert len(ids) == 10

    # When the run is delivered again (its scores rewritten by the takeover)
    ChainScore.objects.filter(chain=chains[0]).update(step_probs=[0.2, 0.9])
    assert prm_labels_write(run=run, readout=Readout(0.5)) == 10

    # Then: the same rows, the first chain's rewritten
    assert set(MachineLabel.objects.values_list("pk", flat=True)) == ids
    assert _labels(chains[0]) == [(0, -1, 0.2), (1, 1, 0.9)]


def test_the_answer_grade_is_read_where_the_version_reads_answers(run) -> None:
    # Given: chains the import graded right and wrong, the same step scores
    right = _scored(run, [0.3, 0.9, 0.1], meta={"final_answer_correct": True})
    wrong = _scored(run, [0.3, 0.9, 0.1], meta={"final_answer_correct": False})

    # When written with a readout that reads answers
    prm_labels_write(run=run, readout=Readout(0.5, 0.2))

    # Then: right by threshold_right, wrong at its most likely first error (step 0 here:
    # P = 0.7 that it is the first wrong step)
    assert [rating for _, rating, _ in _labels(right)] == [1, 1, -1]
    assert [rating for _, rating, _ in _labels(wrong)] == [-1, 1, -1]
    assert MachineLabel.objects.filter(chain=right).first().detail["threshold"] == 0.2


def chain_prelabels(*, chain_id: int, plan: PrelabelPlan) -> dict[str, int] | None:
    """What the queue's lease statement stores on a lease of ``chain_id`` under ``plan``:
    its pre-labels' subquery (``sql.prelabels_sql``), run by itself."""
    prelabels = prelabels_sql(connection.vendor)
    sql = f"SELECT {prelabels} FROM annotation_chain c WHERE c.id = %(chain)s"
    with connection.cursor() as cursor:
        cursor.execute(sql, {"chain": chain_id, **plan.sql_params()})
        (value,) = cursor.fetchone()
    return verdicts_from_db(value)


def test_pre_labels_and_routing_read_them_and_they_are_never_votes(run) -> None:
    # Given: the PRM's verdicts on a chain
    chain = _scored(run, [0.9, 0.2])
    project = Project.objects.get(pk=run.project_id)
    Project.objects.filter(pk=project.pk).update(routing_sources=[MachineSource.PRM])
    project.refresh_from_db()
    assert routing_sources(project=project)[0].reason.startswith("has labeled no step")

    # When they are written
    prm_labels_write(run=run, readout=Readout(0.5))

    # Then: a lease under the PRM source shows them, routing reads them
    plan = PrelabelPlan(source=MachineSource.PRM, shown=True)
    assert chain_prelabels(chain_id=chain.pk, plan=plan) == {"0": 1, "1": -1}
    assert machine_chain_labels(project_id=project.pk, source=MachineSource.PRM) == {
        chain.pk: ((1, -1), pytest.approx(0.8))
    }
    assert routing_sources(project=project)[0].reason == (
        "has no steps in common with people's consensus yet"
    )
    assert [q.source for q in machine_source_quality(project=project)] == [MachineSource.PRM]
    # And: no pass, nothing finished, nothing counted
    chain.refresh_from_db()
    assert (chain.finished_count, chain.is_finished) == (0, False)
    assert not Annotation.objects.filter(chain=chain).exists()


def test_a_scoring_run_writes_the_active_version_s_verdicts(
    unlabeled_project: Any,  # noqa: F811 - the fixture
    open_prm: Path,  # noqa: F811 - the fixture
    monkeypatch: Any,
) -> None:
    from prm_training.ml.checkpoint import load_prm

    # Given: a zero-shot version of a project that routes by the PRM
    project = unlabeled_project
    version = run_zero_shot(project)
    Project.objects.filter(pk=project.pk).update(routing_sources=[MachineSource.PRM])
    routed: list[int] = []
    monkeypatch.setattr(
        scoring, "chains_route_enqueue_on_commit", lambda *, project_id: routed.append(project_id)
    )

    # When a scoring run ends
    run = scoring.scoring_run_start(project=project, user=None, strategy="random")
    ended = scoring.scoring_run_execute(scoring_run_id=run.pk)

    # Then: every step of every scored chain has the version's verdict, by its readout
    assert ended is not None and ended.status == RunStatus.SUCCEEDED, ended and ended.error
    readout = load_prm(ModelVersion.objects.get(pk=version.pk).checkpoint_dir).readout
    scores = dict(ChainScore.objects.filter(scoring_run=run).values_list("chain_id", "step_probs"))
    assert len(scores) == Chain.objects.filter(project=project).count() == 12
    for chain_id, probs in scores.items():
        labels = list(
            MachineLabel.objects.filter(chain_id=chain_id, run_kind=PRM_RUN_KIND, run_id=run.pk)
            .order_by("step__index")
            .values_list("source", "rating", "value")
        )
        assert labels == [
            (MachineSource.PRM, verdict, pytest.approx(p))
            for p, verdict in zip(probs, step_verdicts(probs, readout), strict=True)
        ]
    # And a routing pass was asked for
    assert routed == [project.pk]
