"""A finished chain sends the auto-retrain check only for a project that retrains
automatically; whether it does is read at most every few seconds per process, and a
change through the settings service takes effect at once in the process that made it."""

from __future__ import annotations

from typing import Any

import pytest

from annotation.labeling.queue.submit import RatingInput, assignment_submit
from prm_training.services import autostart
from prm_training.services.training_settings import project_training_settings_update
from tests.annotation.labeling.claiming import assignment_claim_next
from tests.factories import ChainFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    autostart._autostart_seen.clear()


def _finish_one(project: Any, user: Any) -> Any:
    lease = assignment_claim_next(project=project, user=user)
    assert lease is not None
    steps = lease.chain.steps.order_by("index")
    return assignment_submit(
        assignment_id=lease.pk,
        user=user,
        ratings=[RatingInput(step_id=s.pk, rating=1) for s in steps],
    ).annotation


def test_no_check_is_sent_while_auto_retraining_is_off(
    project, make_member, django_capture_on_commit_callbacks
) -> None:
    # Given a project without auto-retraining (the default) and overlap 1
    ChainFactory.create_batch(2, project=project)
    user = make_member(project)

    # When a submit finishes a chain
    with django_capture_on_commit_callbacks() as callbacks:
        autostart.training_autostart_enqueue(project_id=_finish_one(project, user).chain.project_id)

    # Then no message is queued
    assert callbacks == []


def test_switching_it_on_through_the_service_counts_at_once(
    project, make_member, django_capture_on_commit_callbacks, monkeypatch
) -> None:
    # Given a process that has just read "off" for the project
    ChainFactory.create_batch(2, project=project)
    user = make_member(project)
    assert autostart._autostart_enabled(project.pk) is False

    # When ML staff switch auto-retraining on, and a submit then finishes a chain
    project_training_settings_update(project=project, data={"retrain_every_n_finished": 1})
    sent: list[int] = []
    monkeypatch.setattr(
        "prm_training.tasks.autostart_check_task.apply_async",
        lambda args, queue: sent.append(args[0]),
    )
    with django_capture_on_commit_callbacks(execute=True):
        autostart.training_autostart_enqueue(project_id=_finish_one(project, user).chain.project_id)

    # Then the check is sent, to the default queue's task, for this project
    assert sent == [project.pk]


def test_a_change_elsewhere_is_seen_within_the_ttl(project, monkeypatch) -> None:
    # Given a process that read "off", and then the setting changed in another process
    clock = [1000.0]
    monkeypatch.setattr(autostart.time, "monotonic", lambda: clock[0])
    assert autostart._autostart_enabled(project.pk) is False
    from prm_training.models import ProjectTrainingSettings

    ProjectTrainingSettings.objects.create(project=project, retrain_every_n_finished=3)

    # Then it still answers from memory within the TTL, and reads again after it
    clock[0] += autostart.AUTOSTART_SETTING_TTL - 0.1
    assert autostart._autostart_enabled(project.pk) is False
    clock[0] += 0.2
    assert autostart._autostart_enabled(project.pk) is True
