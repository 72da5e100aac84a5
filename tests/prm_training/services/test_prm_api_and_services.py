"""PRM loop API access rules and the services that need no worker."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from annotation.labeling.queue.priorities import chain_priorities_write
from annotation.models import Snapshot
from prm_training.models import ModelVersion, RunStatus, TrainingRun
from prm_training.services.model_versions import model_version_activate
from prm_training.services.scoring import mixed_priorities
from prm_training.services.training import training_run_cancel
from prm_training.services.training_settings import training_config_clean
from tests.factories import ChainFactory, ProjectFactory

pytestmark = pytest.mark.django_db


def _version(project: Any, number: int, *, active: bool) -> ModelVersion:
    run = TrainingRun.objects.create(project=project, status=RunStatus.SUCCEEDED)
    snapshot = Snapshot.objects.create(project=project, version=number, content_hash="x")
    return ModelVersion.objects.create(
        project=project,
        training_run=run,
        snapshot=snapshot,
        version=number,
        checkpoint_dir="/tmp/none",
        metrics={"processbench_f1": 0.5},
        is_active=active,
    )


@pytest.mark.parametrize(
    ("role", "expected"), [("ml", 201), ("lead", 403), ("annotator", 403), (None, 404)]
)
def test_only_ml_staff_start_a_training_run(
    project: Any,
    make_member: Any,
    client_for: Any,
    role: str | None,
    expected: int,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # Given a caller with a role in the project (or none)
    user = make_member(project, role) if role else make_member(ProjectFactory(), "ml")
    # When they ask for a training run
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client_for(user).post(
            f"/api/v1/projects/{project.pk}/training-runs/",
            {"mode": "frozen_head", "head_epochs": 5},
            format="json",
        )
    # Then only ML staff get a queued run, enqueued on commit
    assert response.status_code == expected, response.content
    if expected == 201:
        run = TrainingRun.objects.get(pk=response.json()["id"])
        assert run.status == RunStatus.QUEUED
        assert run.settings == {"mode": "frozen_head", "head_epochs": 5}
        assert run.started_by == user
        assert len(callbacks) == 1
    else:
        assert not TrainingRun.objects.exists()


def test_bad_training_settings_are_a_400_naming_the_field(
    project: Any, make_member: Any, client_for: Any
) -> None:
    client = client_for(make_member(project, "ml"))
    response = client.post(
        f"/api/v1/projects/{project.pk}/training-runs/", {"epochs": 0}, format="json"
    )
    assert response.status_code == 400
    assert "epochs" in response.json()
    with pytest.raises(ValidationError) as caught:
        training_config_clean(config={"backbone": "relative/dir", "nope": 1}, project=project)
    assert set(caught.value.message_dict) == {"backbone", "nope"}


def test_the_real_prm_settings_reach_the_run(
    project: Any, make_member: Any, client_for: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # Given: ML staff setting up an open PRM on the GPU node (its step token and chat
    # template, bf16 weights, its own step scores as the prior)
    client = client_for(make_member(project, "ml"))
    settings = {
        "step_separator": "<extra_0>",
        "chat_template": True,
        "dtype": "bfloat16",
        "step_prior": True,
        "context": "prefix",
        "outcome_readout": False,
    }
    # When / Then: they are stored as sent, for the worker's PRMConfig
    with django_capture_on_commit_callbacks(execute=False):
        response = client.post(
            f"/api/v1/projects/{project.pk}/training-runs/", settings, format="json"
        )
    assert response.status_code == 201, response.content
    assert TrainingRun.objects.get(pk=response.json()["id"]).settings == settings
    # ...and LoRA and several GPUs for fine-tuning, out-of-range values named
    for bad in (
        {"lora_r": -1},
        {"lora_r": 1024},
        {"processes": 0},
        {"dtype": "float16"},
        {"context": "all"},
    ):
        response = client.post(f"/api/v1/projects/{project.pk}/training-runs/", bad, format="json")
        assert response.status_code == 400 and set(response.json()) == set(bad), bad


def test_a_run_asking_more_than_the_node_has_is_refused_naming_the_limit(
    project: Any,
    make_member: Any,
    client_for: Any,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # Given: ML staff on a node whose limits are the defaults (one process), and a
    # second node that gives runs two processes and batches of at most 32
    client = client_for(make_member(project, "ml"))
    url = f"/api/v1/projects/{project.pk}/training-runs/"
    # When: a run asks for 64 processes (each would load the backbone), a batch of 4096,
    # a 32k window, 10,000 epochs and an ensemble of 64
    asks = {"processes": 64, "batch_size": 4096, "max_length": 32_768, "epochs": 10_000}
    asks |= {"ensemble_size": 64}
    with django_capture_on_commit_callbacks(execute=False) as queued:
        response = client.post(url, {"mode": "full", **asks}, format="json")
    # Then: refused before anything is queued, each naming the limit and its variable
    assert response.status_code == 400, response.content
    assert set(response.json()) == set(asks)
    assert response.json()["processes"] == [
        "Must be at most 1: this node's limit (STEPLAB_TRAIN_MAX_PROCESSES; ask an "
        "administrator to raise it if the node can give more)."
    ]
    assert (TrainingRun.objects.count(), queued) == (0, [])
    # And: within what a node gives, the run is queued
    settings.STEPLAB_TRAINING_LIMITS = {
        **settings.STEPLAB_TRAINING_LIMITS,
        "processes": (2, "STEPLAB_TRAIN_MAX_PROCESSES"),
        "batch_size": (32, "STEPLAB_TRAIN_MAX_BATCH_SIZE"),
    }
    refused = client.post(url, {"mode": "full", "batch_size": 33}, format="json")
    assert "STEPLAB_TRAIN_MAX_BATCH_SIZE" in refused.json()["batch_size"][0]
    with django_capture_on_commit_callbacks(execute=False):
        accepted = client.post(url, {"mode": "full", "processes": 2, "batch_size": 32})
    assert accepted.status_code == 201, accepted.content
    assert TrainingRun.objects.get().settings["processes"] == 2


@pytest.mark.parametrize(
    ("role", "expected"), [("ml", 200), ("lead", 200), ("annotator", 403), (None, 404)]
)
def test_following_a_run_and_listing_versions(
    project: Any, make_member: Any, client_for: Any, role: str | None, expected: int
) -> None:
    run = TrainingRun.objects.create(project=project)
    _version(project, 1, active=True)
    user = make_member(project, role) if role else make_member(ProjectFactory(), "ml")
    client = client_for(user)
    assert client.get(f"/api/v1/training-runs/{run.pk}/").status_code == expected
    versions = client.get(f"/api/v1/projects/{project.pk}/model-versions/")
    assert versions.status_code == expected
    if expected == 200:
        assert [v["version"] for v in versions.json()] == [1]
    browser = Client()
    browser.force_login(user)
    page = browser.get(f"/projects/{project.pk}/models/")
    assert page.status_code == expected
    if expected == 200:
        html = page.content.decode()
        assert "js/models.js" in html and "<script>" not in html
        assert ('id="train-form"' in html) == (role == "ml")


@pytest.mark.parametrize(
    ("role", "expected"), [("ml", 200), ("lead", 403), ("annotator", 403), (None, 404)]
)
def test_only_ml_staff_activate_and_cancel(
    project: Any, make_member: Any, client_for: Any, role: str | None, expected: int
) -> None:
    old = _version(project, 1, active=True)
    new = _version(project, 2, active=False)
    run = TrainingRun.objects.create(project=project)
    user = make_member(project, role) if role else make_member(ProjectFactory(), "ml")
    client = client_for(user)
    activate = client.post(f"/api/v1/model-versions/{new.pk}/activate/")
    cancel = client.post(f"/api/v1/training-runs/{run.pk}/cancel/")
    assert (activate.status_code, cancel.status_code) == (expected, expected)
    old.refresh_from_db()
    new.refresh_from_db()
    run.refresh_from_db()
    assert new.is_active == (expected == 200)
    assert old.is_active == (expected != 200)
    assert run.status == (RunStatus.CANCELLED if expected == 200 else RunStatus.QUEUED)


@pytest.mark.parametrize(("role", "expected"), [("ml", 201), ("lead", 403), (None, 404)])
def test_only_ml_staff_start_scoring_and_it_needs_an_active_version(
    project: Any, make_member: Any, client_for: Any, role: str | None, expected: int
) -> None:
    user = make_member(project, role) if role else make_member(ProjectFactory(), "ml")
    client = client_for(user)
    url = f"/api/v1/projects/{project.pk}/scoring-runs/"
    if expected == 201:
        assert client.post(url, {}, format="json").status_code == 400  # no active version
        _version(project, 1, active=True)
    response = client.post(url, {"strategy": "entropy"}, format="json")
    assert response.status_code == expected


def test_activating_keeps_one_active_version_per_project(project: Any) -> None:
    first = _version(project, 1, active=True)
    second = _version(project, 2, active=False)
    other_project_version = _version(ProjectFactory(), 1, active=True)
    model_version_activate(model_version=second, user=None)
    model_version_activate(model_version=second, user=None)  # idempotent
    assert list(ModelVersion.objects.filter(is_active=True).order_by("pk")) == [
        second,
        other_project_version,
    ]
    first.refresh_from_db()
    assert not first.is_active


def test_cancelling_a_running_run_only_asks_and_a_finished_one_is_refused(project: Any) -> None:
    running = TrainingRun.objects.create(project=project, status=RunStatus.RUNNING)
    assert training_run_cancel(run=running).status == RunStatus.RUNNING
    running.refresh_from_db()
    assert running.cancel_requested
    done = TrainingRun.objects.create(project=project, status=RunStatus.SUCCEEDED)
    with pytest.raises(ValidationError):
        training_run_cancel(run=done)


def test_mixed_priorities_follow_acquisition_and_mix_in_random_chains() -> None:
    ids = list(range(1, 101))
    values = [float(i) for i in ids]  # higher id, higher acquisition
    pure = mixed_priorities(chain_ids=ids, acquisition=values, random_fraction=0.0, seed=1)
    assert sorted(pure, key=pure.__getitem__, reverse=True) == ids[::-1]
    assert sorted(pure.values()) == [k / 100 for k in range(1, 101)]
    mixed = mixed_priorities(chain_ids=ids, acquisition=values, random_fraction=0.5, seed=1)
    top = sorted(mixed, key=mixed.__getitem__, reverse=True)[:20]
    assert set(top) != set(ids[-20:])  # some random picks got in
    assert len(set(top) & set(ids[-20:])) >= 5  # but acquisition still leads
    assert mixed == mixed_priorities(chain_ids=ids, acquisition=values, random_fraction=0.5, seed=1)


def test_priorities_are_written_in_bulk_only_to_the_projects_chains(
    project: Any, django_assert_num_queries: Any
) -> None:
    chains = [ChainFactory(project=project) for _ in range(3)]
    stranger = ChainFactory()
    # One UPDATE for the chunk (inside the test's transaction: plus savepoint and release).
    with django_assert_num_queries(3):
        changed = chain_priorities_write(
            project=project,
            priorities={chains[0].pk: 0.5, chains[2].pk: 0.9, stranger.pk: 1.0},
        )
    assert changed == 2
    for chain in [*chains, stranger]:
        chain.refresh_from_db()
    assert [c.priority for c in chains] == [0.5, 0.0, 0.9]
    assert stranger.priority == 0.0


RULES = {
    "baseline_outcome_rule_processbench_f1": 0.38,
    "baseline_outcome_rule_step_auroc": 0.77,
    "baseline_position_prior_processbench_f1": 0.01,
    "baseline_position_prior_step_auroc": 0.56,
}


@pytest.mark.parametrize(
    ("metrics", "applied"),
    [
        ({"processbench_f1": 0.40, "step_auroc": 0.79, **RULES}, "entropy"),
        ({"processbench_f1": 0.40, "step_auroc": 0.70, **RULES}, "random"),  # AUROC below
        ({"processbench_f1": 0.30, "step_auroc": 0.79, **RULES}, "random"),  # F1 below
        ({"processbench_f1": 0.40, "step_auroc": 0.79}, "random"),  # never compared
        # ahead, but the paired interval with the strongest baseline holds zero
        (
            {
                "processbench_f1": 0.40,
                "step_auroc": 0.79,
                **RULES,
                "vs_strongest_processbench_f1_low": -0.01,
                "vs_strongest_processbench_f1_high": 0.05,
            },
            "random",
        ),
    ],
)
def test_cold_start_picks_at_random_until_the_version_beats_the_rules(
    project: Any, metrics: dict[str, float], applied: str
) -> None:
    from prm_training.services.scoring import cold_start_strategy

    version = _version(project, 1, active=True)
    version.metrics = metrics
    strategy, note = cold_start_strategy(strategy="entropy", version=version)
    assert strategy == applied
    assert (note == "") == (applied == "entropy")
    if note:
        assert note.startswith("Random picks instead of Step uncertainty (entropy): v1 ")
    # random is random whatever the version
    assert cold_start_strategy(strategy="random", version=version) == ("random", "")


def test_the_versions_api_says_whether_each_version_beats_the_rules(project: Any) -> None:
    from tests.factories import MembershipFactory

    version = _version(project, 1, active=True)
    version.metrics = {"processbench_f1": 0.30, "step_auroc": 0.79, **RULES}
    version.save()
    ml = MembershipFactory(project=project, role="ml").user
    client = Client()
    client.force_login(ml)
    [row] = client.get(f"/api/v1/projects/{project.pk}/model-versions/").json()
    assert row["against_rules"] == {
        "beaten": False,
        "text": "does not beat the strongest baseline: F1 0.300 vs 0.380 the outcome rule",
    }


def test_a_scoring_run_without_a_strategy_takes_the_loop_s_and_notes_auto_s_reason(
    project: Any,
) -> None:
    from prm_training.services.scoring import scoring_run_start

    _version(project, 1, active=True)
    run = scoring_run_start(project=project, user=None)
    assert run.strategy == "random"
    assert run.strategy_note.startswith(
        "Chosen from evidence: random, no comparison on this project's labels yet"
    )
    # a strategy given by hand is taken as is, without a note
    by_hand = scoring_run_start(project=project, user=None, strategy="entropy")
    assert (by_hand.strategy, by_hand.strategy_note) == ("entropy", "")


def test_the_api_states_every_run_setting_from_the_config_s_own_metadata(
    api_client: Any,
) -> None:
    # One list: PRMConfig's fields marked for runs are the API's inputs, with their bounds
    from prm_training.ml.config import PRMConfig, run_settings

    schema = api_client.get("/api/schema/", {"format": "json"}).json()
    inputs = schema["components"]["schemas"]["TrainingRunInput"]["properties"]
    settings = run_settings()
    assert set(inputs) == set(settings)
    assert (inputs["lora_r"]["minimum"], inputs["lora_r"]["maximum"]) == (0, 256)
    [ref] = re.findall(r"#/components/schemas/(\w+)", json.dumps(inputs["dtype"]))
    assert set(schema["components"]["schemas"][ref]["enum"]) == {"auto", "float32", "bfloat16"}
    assert inputs["step_prior"]["description"] == settings["step_prior"].help
    # ...and what a run may not set (where features go, how often it reports) is not there
    assert {"cache_dir", "report_every_s", "heldout_metrics"} <= {
        field for field in PRMConfig.__dataclass_fields__
    } - set(inputs)
