"""``steplab`` against a live server for the PRM loop: training runs started, followed
with progress, cancelled and retried by a real worker; model versions listed and
activated; scoring runs; simulation runs queued and cancelled; training settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from annotation.models import Membership, Project, Role
from prm_training.models import ModelVersion, ScoringRun, SimulationRun, TrainingRun
from tests.client.conftest import Steplab, labeled_arithmetic_project
from tests.factories import UserFactory, api_token_key, scoring_run_with_model_version
from tests.prm_training.ml_tiny import tiny_settings
from tests.prm_training.prm_worker import WorkerHandle

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]


def _ml_staff_of(project: Project) -> str:
    user = UserFactory(username="mia")
    Membership.objects.create(project=project, user=user, role=Role.ML)
    return api_token_key(user)


def _set_options(settings: dict[str, Any]) -> list[str]:
    options: list[str] = []
    for key, value in settings.items():
        options += ["--set", f"{key}={value}"]
    return options


def test_train_follow_activate_score_and_cancel_from_the_command_line(
    steplab: Steplab, worker: WorkerHandle, tiny_bert_dir: Path, settings: Any
) -> None:
    # Given: a project with 30 labeled chains and 10 unlabeled, and an ML staff member
    project = Project.objects.create(name="Sums", overlap=1)
    annotator = UserFactory(username="ann")
    Membership.objects.create(project=project, user=annotator, role=Role.ANNOTATOR)
    labeled_arithmetic_project(project=project, annotator=annotator)
    token = _ml_staff_of(project)
    tiny = _set_options(tiny_settings(tiny_bert_dir))

    # When: they start a training run and follow it
    trained = steplab(token, "train", str(project.pk), *tiny, "--follow", "--json")

    # Then: it succeeded and published a version; the progress went to stderr
    assert trained.code == 0, trained.err + worker.output()
    run = trained.json()
    assert run["status"] == "succeeded" and run["model_version"]
    assert f"training run {run['id']} succeeded" in trained.err
    assert f"training run {run['id']} queued" in trained.err
    listed = steplab(token, "runs", "list", "Sums", "--json").json()
    assert [row["id"] for row in listed] == [run["id"]]
    shown = steplab(token, "runs", "show", str(run["id"]))
    assert shown.code == 0 and "succeeded" in shown.out

    # ...the version is listed, active, and activating it again says so
    versions = steplab(token, "versions", "list", str(project.pk), "--json").json()
    assert [(row["id"], row["is_active"]) for row in versions] == [(run["model_version"], True)]
    activated = steplab(token, "versions", "activate", str(run["model_version"]), "--json")
    assert activated.code == 0, activated.err
    assert activated.json()["is_active"] is True

    # ...a scoring run with it scores the 10 unlabeled chains
    scored = steplab(token, "score", str(project.pk), "--follow", "--json")
    assert scored.code == 0, scored.err + worker.output()
    assert scored.json()["status"] == "succeeded"
    assert scored.json()["chains_scored"] == 10
    scorings = steplab(token, "scoring", "list", "Sums", "--json").json()
    assert [row["id"] for row in scorings] == [scored.json()["id"]]
    assert steplab(token, "scoring", "show", str(scored.json()["id"])).code == 0

    # When: a run that would train for ever is started, then cancelled
    limits = dict(settings.STEPLAB_TRAINING_LIMITS)
    limits["head_epochs"] = (1_000_000, limits["head_epochs"][1])
    settings.STEPLAB_TRAINING_LIMITS = limits
    endless = _set_options(tiny_settings(tiny_bert_dir, head_epochs=1_000_000))
    started = steplab(token, "train", str(project.pk), *endless, "--json")
    assert started.code == 0, started.err
    long_run = started.json()["id"]
    cancelled = steplab(token, "runs", "cancel", str(long_run))
    assert cancelled.code == 0, cancelled.err

    # Then: following it ends with exit 1 and the cancelled state; the active version stays
    followed = steplab(token, "runs", "show", str(long_run), "--follow", "--json")
    assert followed.code == 1
    assert followed.json()["status"] == "cancelled"
    assert f"training run {long_run} cancelled" in followed.err
    assert ModelVersion.objects.get(is_active=True, project=project).pk == run["model_version"]

    # ...a retry queues a new run with its settings (cancelled in turn)
    retried = steplab(token, "runs", "retry", str(long_run), "--json")
    assert retried.code == 0, retried.err
    assert retried.json()["retry_of"] == long_run
    assert steplab(token, "runs", "cancel", str(retried.json()["id"])).code == 0
    ended = steplab(token, "runs", "show", str(retried.json()["id"]), "--follow", "--json")
    assert ended.json()["status"] == "cancelled"


def test_queued_scoring_and_simulation_runs_are_cancelled_and_settings_changed(
    steplab: Steplab, no_worker: None
) -> None:
    # Given: a project with a model version (no worker takes what is queued)
    project = Project.objects.create(name="Sums", overlap=1)
    token = _ml_staff_of(project)
    version = scoring_run_with_model_version(project=project, content_hash="v1").model_version
    ScoringRun.objects.all().delete()

    # When / then: a scoring run with that version is queued, then cancelled at once
    queued = steplab(token, "score", str(project.pk), "--model-version", str(version.pk), "--json")
    assert queued.code == 0, queued.err
    assert queued.json()["status"] == "queued"
    cancelled = steplab(token, "scoring", "cancel", str(queued.json()["id"]), "--json")
    assert cancelled.json()["status"] == "cancelled"
    again = steplab(token, "scoring", "cancel", str(queued.json()["id"]))
    assert again.code == 1 and "HTTP 400" in again.err

    # ...a simulation run: queued, listed, shown, cancelled, retried
    simulated = steplab(token, "simulate", str(project.pk), "--size", "quick", "--json")
    assert simulated.code == 0, simulated.err
    simulation = simulated.json()["id"]
    simulations = steplab(token, "simulations", "list", "Sums", "--json").json()
    assert [row["id"] for row in simulations] == [simulation]
    assert "queued" in steplab(token, "simulations", "show", str(simulation)).out
    waited = steplab(token, "simulations", "show", str(simulation), "--follow", "--timeout", "1")
    assert waited.code == 1
    assert "Still queued after 1 s" in waited.err and "Traceback" not in waited.err
    assert steplab(token, "simulations", "cancel", str(simulation)).code == 0
    assert SimulationRun.objects.get(pk=simulation).status == "cancelled"
    retried = steplab(token, "simulations", "retry", str(simulation), "--json")
    assert retried.code == 0, retried.err
    assert retried.json()["retry_of"] == simulation
    assert steplab(token, "simulations", "cancel", str(retried.json()["id"])).code == 0

    # ...a queued training run cancelled before any worker took it
    run = steplab(token, "train", str(project.pk), "--json").json()
    assert steplab(token, "runs", "cancel", str(run["id"])).code == 0
    assert TrainingRun.objects.get(pk=run["id"]).status == "cancelled"

    # ...the training settings shown and changed
    shown = steplab(token, "training-settings", str(project.pk), "--json")
    assert shown.code == 0, shown.err
    changed = steplab(
        token, "training-settings", str(project.pk), "--set", "random_fraction=0.25", "--json"
    )
    assert changed.code == 0, changed.err
    assert changed.json()["random_fraction"] == 0.25
