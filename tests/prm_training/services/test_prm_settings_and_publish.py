"""Loop settings (API, page, admin, who may change them), the NaN-free metrics of a
published version, commands' input checks, and that saving labels never starts training."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from annotation.models import Chain, Project, Step
from prm_training.models import (
    ModelVersion,
    ProjectTrainingSettings,
    RunStatus,
    RunTrigger,
    TrainingRun,
)
from prm_training.services.training import (
    run_snapshot_ensure,
    training_maybe_autostart,
    training_run_execute,
    training_run_start,
)
from prm_training.services.training_settings import project_training_settings_update
from tests.factories import (
    ChainFactory,
    ProblemFactory,
    ProjectFactory,
    UserFactory,
    annotation_with_ratings,
)
from tests.prm_training.ml_tiny import tiny_settings

pytestmark = pytest.mark.django_db


def settings_url(project: Any) -> str:
    return f"/api/v1/projects/{project.pk}/training-settings/"


# --- loop settings: API ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "read", "write"),
    [("ml", 200, 200), ("lead", 200, 403), ("annotator", 403, 403), (None, 404, 404)],
)
def test_ml_staff_change_loop_settings_leads_read_them_others_do_not_see_them(
    project: Any, make_member: Any, client_for: Any, role: str | None, read: int, write: int
) -> None:
    # Given a caller with a role in the project (or a member of another project only)
    user = make_member(project, role) if role else make_member(ProjectFactory(), "ml")
    client = client_for(user)

    # When they read and then change the settings
    got = client.get(settings_url(project))
    changed = client.patch(
        settings_url(project),
        {
            "acquisition_strategy": "disagreement",
            "random_fraction": 0.3,
            "retrain_every_n_finished": 25,
            "default_config": {"mode": "frozen_head", "head_epochs": 40, "class_weight": "none"},
        },
        format="json",
    )

    # Then reading follows ML + leads, changing ML only
    assert got.status_code == read
    assert changed.status_code == write, changed.content
    if read == 200:
        assert got.json()["acquisition_strategy"] == "auto"  # the default, no row yet
        assert got.json()["applied_strategy"]["strategy"] == "random"  # no evidence yet
        assert got.json()["retrain_every_n_finished"] == 0
    loop = ProjectTrainingSettings.objects.filter(project=project).first()
    if write == 200:
        assert changed.json()["retrain_every_n_finished"] == 25
        assert loop is not None
        assert (loop.acquisition_strategy, loop.random_fraction) == ("disagreement", 0.3)
        assert loop.default_config == {
            "mode": "frozen_head",
            "head_epochs": 40,
            "class_weight": "none",
        }
    else:
        assert loop is None


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"random_fraction": 1.5}, "random_fraction"),
        ({"retrain_every_n_finished": -1}, "retrain_every_n_finished"),
        ({"acquisition_strategy": "greedy"}, "acquisition_strategy"),
        ({"default_config": {"epochs": 0}}, "default_config"),
        ({"default_config": {"backbone": "relative/dir"}}, "default_config"),
        ({"default_config": {"mode": "lora"}}, "default_config"),
    ],
)
def test_bad_loop_settings_are_a_400_naming_the_field_and_change_nothing(
    project: Any, make_member: Any, client_for: Any, body: dict[str, Any], field: str
) -> None:
    client = client_for(make_member(project, "ml"))
    response = client.patch(settings_url(project), body, format="json")
    assert response.status_code == 400
    assert field in response.json()
    assert not ProjectTrainingSettings.objects.filter(project=project).exists()


def test_a_partial_update_keeps_the_other_fields(project: Any) -> None:
    project_training_settings_update(
        project=project, data={"retrain_every_n_finished": 5, "default_config": {"seed": 3}}
    )
    loop = project_training_settings_update(project=project, data={"random_fraction": 0.5})
    assert (loop.retrain_every_n_finished, loop.default_config, loop.random_fraction) == (
        5,
        {"seed": 3},
        0.5,
    )


def test_the_schema_documents_the_settings_endpoint_and_names_the_run_enums(
    client: Client,
) -> None:
    schema = client.get("/api/schema/", {"format": "json"}).json()
    operations = schema["paths"]["/api/v1/projects/{project_id}/training-settings/"]
    assert operations["get"]["operationId"] == "training_settings_retrieve"
    assert operations["patch"]["operationId"] == "training_settings_partial_update"
    components = schema["components"]["schemas"]
    assert components["RunStatusEnum"]["enum"] == [
        "queued",
        "running",
        "succeeded",
        "failed",
        "cancelled",
    ]
    assert "AcquisitionStrategyEnum" in components
    for serializer in ("TrainingRunOutput", "ScoringRunOutput"):
        run_status = components[serializer]["properties"]["status"]
        assert run_status["$ref"] == "#/components/schemas/RunStatusEnum"


# --- loop settings: page and admin -------------------------------------------------------


@pytest.mark.parametrize(("role", "form"), [("ml", True), ("lead", False)])
def test_the_models_page_shows_a_settings_form_to_ml_staff_and_the_values_to_leads(
    project: Any, make_member: Any, role: str, form: bool
) -> None:
    project_training_settings_update(
        project=project,
        data={"retrain_every_n_finished": 12, "default_config": {"head_epochs": 33}},
    )
    browser = Client()
    browser.force_login(make_member(project, role))
    html = browser.get(f"/projects/{project.pk}/models/").content.decode()
    assert ('id="settings-form"' in html) == form
    assert "<script>" not in html and " on" + "submit=" not in html  # no inline script
    if form:
        assert 'name="retrain_every_n_finished"' in html and 'value="12"' in html
        assert 'name="head_epochs"' in html and 'value="33"' in html
    else:
        assert "after every 12 new finished chains" in html


def test_admin_edits_loop_settings_with_the_same_checks_and_only_lists_runs(
    project: Any,
) -> None:
    browser = Client()
    browser.force_login(UserFactory(is_staff=True, is_superuser=True))
    form = {
        "project": project.pk,
        "acquisition_strategy": "entropy",
        "random_fraction": "0.2",
        "retrain_every_n_finished": "10",
    }
    bad = browser.post(
        "/admin/prm_training/projecttrainingsettings/add/",
        {**form, "default_config": '{"epochs": 0}'},
    )
    assert bad.status_code == 200  # the form again, with the error
    assert "epochs: Must be at least 1." in bad.content.decode()
    assert not ProjectTrainingSettings.objects.exists()
    good = browser.post(
        "/admin/prm_training/projecttrainingsettings/add/",
        {**form, "default_config": '{"head_epochs": 7}'},
    )
    assert good.status_code == 302
    assert ProjectTrainingSettings.objects.get().default_config == {"head_epochs": 7}

    TrainingRun.objects.create(project=project)
    assert browser.get("/admin/prm_training/trainingrun/").status_code == 200
    assert browser.get("/admin/prm_training/trainingrun/add/").status_code == 403


# --- auto-retraining is never a side effect of saving ------------------------------------


def test_saving_finished_labels_never_starts_training(
    project: Any,
    make_member: Any,
    label_chain: Callable[..., Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    # Given auto-retraining after every finished chain
    project_training_settings_update(project=project, data={"retrain_every_n_finished": 1})
    annotator = make_member(project, "annotator")
    chains = [ChainFactory(project=project) for _ in range(3)]

    # When labels are saved straight through the ORM (no submit service)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        for chain in chains:
            label_chain(chain, annotator, [1] * chain.step_count)

    # Then nothing was enqueued and no run exists: only the submit path asks for a check
    assert callbacks == []
    assert not TrainingRun.objects.exists()
    # ...while the check itself, called as the worker calls it, starts one
    run = training_maybe_autostart(project=project)
    assert run is not None and run.trigger == RunTrigger.AUTO


# --- commands: bad input -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "args", "message"),
    [
        ("train_prm", ["no such project"], "no such project"),
        ("train_prm", ["{project}", "--epochs", "0"], "at least 1"),
        ("train_prm", ["{project}", "--backbone", "/etc"], "Not an available backbone"),
        ("train_prm", ["{project}", "--user", "nobody"], "No user 'nobody'"),
        ("score_chains", ["no such project"], "no such project"),
        ("score_chains", ["{project}"], "no active model version"),
    ],
)
def test_commands_refuse_bad_input_with_a_clear_message(
    project: Any, command: str, args: list[str], message: str
) -> None:
    argv = [arg.format(project=project.pk) for arg in args]
    with pytest.raises(CommandError, match=f"(?i){message}"):
        call_command(command, *argv)
    assert not TrainingRun.objects.exists()


# --- publishing: metrics that are undefined are absent, never NaN ------------------------


@pytest.fixture
def all_correct_project(project: Any, make_member: Any, label_chain: Any) -> Any:
    """20 chains, every step labeled correct: held-out ProcessBench F1 and step AUROC are
    undefined (one class only), the case that once put NaN into the metrics."""
    annotator = make_member(project, "annotator")
    for i in range(20):
        problem = ProblemFactory(
            project=project,
            text=f"what is the sum {i}",
            content_hash=f"all-correct-problem-{i:044d}",
        )
        chain = ChainFactory(project=project, problem=problem, step_count=0)
        texts = ["add the two numbers", "then divide by three", "so we get five"]
        Step.objects.bulk_create(
            [Step(chain=chain, index=k, text=text) for k, text in enumerate(texts)]
        )
        Chain.objects.filter(pk=chain.pk).update(step_count=3)
        label_chain(chain, annotator, [1, 1, 1])
    return project


def test_undefined_metrics_are_left_out_of_a_published_version_not_stored_as_nan(
    all_correct_project: Any, tiny_bert_dir: Path, model_dir: Path, monkeypatch: Any
) -> None:
    # Given an active version trained on the project, whose metrics lack F1 and AUROC
    monkeypatch.setenv("STEPLAB_MODEL_DIR", str(model_dir))
    project = all_correct_project
    first = training_run_start(project=project, user=None, settings=tiny_settings(tiny_bert_dir))
    first = training_run_execute(run_id=first.pk)
    assert first is not None and first.status == RunStatus.SUCCEEDED, first.error
    active = ModelVersion.objects.get(training_run=first)
    assert active.is_active
    # (the backbone's step features went to disk, for the next round and worker restarts)
    assert list((model_dir / "feature-cache").glob("*/*.npz"))
    assert "processbench_f1" not in active.metrics and "step_auroc" not in active.metrics

    # When a second run is compared with it on the same held-out chains
    second = training_run_start(
        project=project, user=None, settings=tiny_settings(tiny_bert_dir, seed=1)
    )
    second = training_run_execute(run_id=second.pk)

    # Then it publishes (jsonb would refuse a NaN), without active_* entries for what the
    # active version could not define, and every stored number is finite
    assert second is not None and second.status == RunStatus.SUCCEEDED, second.error
    version = ModelVersion.objects.get(training_run=second)
    assert "active_processbench_f1" not in version.metrics
    assert "active_step_auroc" not in version.metrics
    json.dumps(version.metrics, allow_nan=False)
    assert all(math.isfinite(value) for value in version.metrics.values())
    assert 0.0 < version.metrics["threshold"] < 1.0
    # A tie on undefined metrics does not replace the active version
    assert not version.is_active
    active.refresh_from_db()
    assert active.is_active
    assert "Does not beat active v1" in second.activation_note


def test_training_and_scoring_go_to_the_gpu_queue_and_the_check_to_default() -> None:
    # Routes match task names; a module-path route once sent training to "default"
    from config.celery import app

    def queue(name: str) -> str:
        return app.amqp.router.route({}, name)["queue"].name

    assert queue("prm_training.train") == "gpu"
    assert queue("prm_training.score") == "gpu"
    assert queue("prm_training.evaluate") == "gpu"  # it loads checkpoints and scores
    assert queue("prm_training.autostart_check") == "default"


def test_the_prm_reads_the_final_answer_s_grade_from_the_reference_or_the_import_s_verdict(
    project: Any,
) -> None:
    # Given: a chain whose answer matches the problem's reference, one whose import stated
    # its answer wrong (ProcessBench's final_answer_correct), and one that cannot be graded
    from prm_training.ml.inputs import answer_grade
    from prm_training.services.examples import chain_examples_build

    graded = ChainFactory(
        project=project,
        final_answer="42",
        problem=ProblemFactory(project=project, reference_answer="42"),
    )
    stated = ChainFactory(project=project, meta={"final_answer_correct": False})
    unknown = ChainFactory(project=project, final_answer="")
    chains = Chain.objects.select_related("problem").filter(
        pk__in=[graded.pk, stated.pk, unknown.pk]
    )

    # When
    examples = {
        example.chain_id: example
        for example in chain_examples_build(chains=[(chain, None) for chain in chains])
    }

    # Then
    assert answer_grade(examples[graded.pk]) is True
    assert examples[stated.pk].answer_correct is False
    assert answer_grade(examples[stated.pk]) is False
    assert answer_grade(examples[unknown.pk]) is None


@pytest.mark.parametrize("vendor", ["postgresql", "sqlite"])
def test_a_snapshots_chains_reach_the_prm_with_the_import_s_verdict(
    project: Any, vendor: str, monkeypatch: Any
) -> None:
    # Given: a snapshot of two finished chains, one whose import stated its answer wrong
    # (ProcessBench's final_answer_correct) and one that said nothing
    from django.db import connection

    from annotation.datasets.snapshots import snapshot_create
    from prm_training.services.examples import snapshot_chain_examples
    from tests.factories import annotation_with_ratings

    stated = ChainFactory(
        project=project, meta={"final_answer_correct": False}, finished_count=1, is_finished=True
    )
    silent = ChainFactory(project=project, finished_count=1, is_finished=True)
    for chain in (stated, silent):
        annotation_with_ratings(chain=chain, annotator=UserFactory(), labels=[1, 1, -1])
    snapshot = snapshot_create(project=project)

    # When the PRM's examples are read, by COPY (PostgreSQL) or by keyset pages (elsewhere)
    monkeypatch.setattr(connection, "vendor", vendor)
    examples = {e.chain_id: e for e in snapshot_chain_examples(snapshot=snapshot)}

    # Then each carries its steps, the snapshot's labels and the import's verdict
    assert examples[stated.pk].answer_correct is False
    assert examples[silent.pk].answer_correct is None
    assert examples[stated.pk].labels == (1, 1, -1)
    assert examples[stated.pk].steps == tuple(
        stated.steps.order_by("index").values_list("text", flat=True)
    )


def test_a_new_version_is_compared_with_the_active_one_by_a_paired_interval(
    arithmetic_project: Any, tiny_bert_dir: Path, model_dir: Path, monkeypatch: Any
) -> None:
    # Given an active version trained on a snapshot that holds half the chains out (so the
    # held-out chains have errors and not), by the project's labeled chains
    from annotation.datasets.snapshots import snapshot_create

    monkeypatch.setenv("STEPLAB_MODEL_DIR", str(model_dir))
    project = arithmetic_project
    snapshot = snapshot_create(project=project, heldout_fraction=0.5)
    first = training_run_start(
        project=project, user=None, settings=tiny_settings(tiny_bert_dir), snapshot=snapshot
    )
    first = training_run_execute(run_id=first.pk)
    assert first is not None and first.status == RunStatus.SUCCEEDED, first.error

    # When a second run is compared with it on the same held-out chains
    second = training_run_start(
        project=project,
        user=None,
        settings=tiny_settings(tiny_bert_dir, seed=1),
        snapshot=snapshot,
    )
    second = training_run_execute(run_id=second.pk)

    # Then the note gives the F1 difference with its paired 95% interval, and the version
    # keeps the interval's ends
    assert second is not None and second.status == RunStatus.SUCCEEDED, second.error
    assert f"held-out chains, of snapshot v{snapshot.version}" in second.activation_note
    assert "; F1 difference " in second.activation_note
    assert "95% interval" in second.activation_note
    version = ModelVersion.objects.get(training_run=second)
    low, high = version.metrics["vs_active_f1_low"], version.metrics["vs_active_f1_high"]
    assert -1.0 <= low <= high <= 1.0


@pytest.mark.parametrize(
    ("rule", "chains"), [("ignore", {"person"}), ("fallback", {"person", "import"})]
)
def test_a_training_run_learns_from_imported_labels_only_where_the_project_counts_them(
    project, rule: str, chains: set[str]
) -> None:
    # Given: one chain only an import labeled, one a person labeled
    Project.objects.filter(pk=project.pk).update(import_labels=rule)
    project.refresh_from_db()
    by_import, by_person = ChainFactory(project=project), ChainFactory(project=project)
    annotation_with_ratings(chain=by_import, labels=[1, -1])
    annotation_with_ratings(chain=by_person, labels=[1, 1], annotator=UserFactory())

    # When the run takes its snapshot
    snapshot = run_snapshot_ensure(TrainingRun.objects.create(project=project))

    # Then: a project that ignores imported labels does not train on them
    taken = set(snapshot.chains.values_list("chain_id", flat=True))
    names = {by_import.pk: "import", by_person.pk: "person"}
    assert {names[c] for c in taken} == chains
