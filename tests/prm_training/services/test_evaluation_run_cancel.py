"""Following and cancelling an evaluation run, as every other kind of run is followed and
cancelled (``api.runs``): a queued run ends at once; a running one stops at its next
progress check, keeping the figures it wrote and leaving the rest missing for the next
run; leads follow, ML staff cancel. The matrix of callers is tests/test_security_matrix.py."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from annotation.datasets.evaluation_sets import evaluation_set_mark_chains
from prm_training.ml.progress import Phase
from prm_training.models import EvaluationResult, EvaluationRun, RunStatus
from prm_training.selectors import evaluation_gaps
from prm_training.services import evaluation_runs
from prm_training.services.evaluation_runs import evaluation_run_cancel, evaluation_run_execute
from tests.factories import ChainFactory
from tests.prm_training.evaluation_versions import stored_version

pytestmark = pytest.mark.django_db


def _queued_run(project: Any) -> EvaluationRun:
    """A run queued by marking a set of one chain after a version was made."""
    chain = ChainFactory(project=project)
    evaluation_set_mark_chains(project=project, chain_ids=[chain.pk], name="held")
    return EvaluationRun.objects.get(project=project, status=RunStatus.QUEUED)


def test_leads_follow_a_run_and_ml_staff_cancel_it_while_it_waits(
    project: Any, make_member: Any
) -> None:
    # Given a queued run, a lead and an ML staff member
    stored_version(project, 1)
    run = _queued_run(project)
    lead, ml = APIClient(), APIClient()
    lead.force_login(make_member(project, "lead"))
    ml.force_login(make_member(project, "ml"))
    detail = reverse("api-evaluation-run", kwargs={"evaluation_run_id": run.pk})
    cancel = reverse("api-evaluation-run-cancel", kwargs={"evaluation_run_id": run.pk})

    # Then the lead follows it, and may not cancel it
    shown = lead.get(detail)
    assert shown.status_code == 200
    assert (shown.json()["id"], shown.json()["status"]) == (run.pk, "queued")
    assert lead.post(cancel).status_code == 403

    # When ML staff cancel it, it ends at once, and a second cancel is refused
    cancelled = ml.post(cancel)
    assert cancelled.status_code == 200, cancelled.json()
    assert (cancelled.json()["status"], cancelled.json()["cancel_requested"]) == (
        "cancelled",
        True,
    )
    assert ml.post(cancel).status_code == 400
    # And its task, delivered later, does nothing; the gap waits for the next run
    assert evaluation_run_execute(run_id=run.pk, task_id="t", worker="w") is None
    assert len(evaluation_gaps(project_id=project.pk)) == 1
    # A run of another project is not found
    assert ml.get(reverse("api-evaluation-run", kwargs={"evaluation_run_id": 0})).status_code == 404


def test_a_running_run_cancelled_stops_at_its_next_check_and_keeps_what_it_wrote(
    project: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given two versions lacking figures on a set, their checkpoints on disk
    older = stored_version(project, 1, checkpoint_dir=str(tmp_path))
    newer = stored_version(project, 2, checkpoint_dir=str(tmp_path))
    run = _queued_run(project)
    [held] = {gap.evaluation_set_id for gap in evaluation_gaps(project_id=project.pk)}
    measured: list[int] = []

    def measure(*, version: Any, snapshot: Any, phase: Any, stale: Any) -> int:
        # The newest is measured first and written; while the older one is measured,
        # ML staff cancel the run, which its next progress report (one per batch) reads.
        measured.append(version.version)
        if version.pk == newer.pk:
            EvaluationResult.objects.create(model_version=version, evaluation_set_id=held)
            return 1
        evaluation_run_cancel(run=EvaluationRun.objects.get(pk=run.pk))
        for batch in range(60):  # the flag is read at most once a second
            phase(Phase("evaluation sets", batch, 60, unit="steps"))
            time.sleep(0.05)
        raise AssertionError("the run went on after it was cancelled")

    monkeypatch.setattr(evaluation_runs, "evaluation_sets_fill", measure)

    # When a worker runs it
    ended = evaluation_run_execute(run_id=run.pk, task_id="t", worker="w")

    # Then it ended cancelled, v2's figures kept and v1's still missing for the next run
    assert ended is not None and ended.status == RunStatus.CANCELLED, ended.error
    assert measured == [2, 1]
    assert EvaluationResult.objects.filter(model_version=newer).exists()
    assert [gap.model_version_id for gap in evaluation_gaps(project_id=project.pk)] == [older.pk]
