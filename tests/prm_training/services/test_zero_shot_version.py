"""A zero-shot version: an open PRM's own step scores as a model version, made through the
training run's lifecycle with no head trained, so a project with no labels yet can order
its queue from round 0. On a tiny Llama PRM built from a config (CPU)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from annotation.models import Chain, Step
from prm_training.ml.synthetic import synthetic_chains
from prm_training.models import ChainScore, ModelVersion, RunStatus, TrainingRun
from prm_training.services.training import training_run_start
from tests.factories import ChainFactory, ProblemFactory, ProjectFactory

pytestmark = pytest.mark.django_db

ZERO_SHOT = {
    "backbone": "llama-prm",
    "zero_shot": True,
    "step_prior": True,
    "max_length": 64,
    "device": "cpu",
}


@pytest.fixture(scope="module")
def prm_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A backbone root holding the tiny Llama PRM with its own step head ("llama-prm")."""
    from tests.prm_training.ml_tiny import tiny_step_prm_dir

    root = tmp_path_factory.mktemp("open-prms")
    tiny_step_prm_dir(root)
    return root


@pytest.fixture
def open_prm(prm_root: Path, model_dir: Path, monkeypatch: Any) -> Path:
    monkeypatch.setenv("STEPLAB_BACKBONE_DIR", str(prm_root))
    monkeypatch.setenv("STEPLAB_MODEL_DIR", str(model_dir))
    return prm_root / "llama-prm"


@pytest.fixture
def unlabeled_project(project: Any) -> Any:
    """12 unlabeled chains in the tiny PRM's words, some steps marked "wrong"."""
    for example in synthetic_chains(12, seed=31, labeled=False):
        problem = ProblemFactory(project=project, text=example.problem)
        chain = ChainFactory(project=project, problem=problem, step_count=0)
        Step.objects.bulk_create(
            [Step(chain=chain, index=k, text=text) for k, text in enumerate(example.steps)]
        )
        Chain.objects.filter(pk=chain.pk).update(step_count=len(example.steps))
    return project


def run_zero_shot(project: Any) -> ModelVersion:
    from prm_training.services.training import training_run_execute

    run = training_run_start(project=project, user=None, settings=ZERO_SHOT)
    ended = training_run_execute(run_id=run.pk)
    assert ended is not None and ended.status == RunStatus.SUCCEEDED, ended and ended.error
    return ModelVersion.objects.get(training_run=run)


def test_a_zero_shot_version_of_an_unlabeled_project_scores_with_the_prm_s_own_head(
    unlabeled_project: Any, open_prm: Path
) -> None:
    # Given: a project with no label and an open PRM in the model directory
    from prm_training.ml.checkpoint import load_prm
    from prm_training.ml.config import PRMConfig
    from prm_training.ml.score import score_chains
    from prm_training.services.examples import chain_examples_build
    from tests.prm_training.zero_shot_reference import zero_shot_scores

    # When: ML staff make a zero-shot version of it
    version = run_zero_shot(unlabeled_project)

    # Then: a version without snapshot or held-out metrics, marked zero-shot, made active
    # as the project had none, its run's note saying what it is
    assert version.snapshot is None and version.is_zero_shot and version.is_active
    assert version.metrics["zero_shot"] == 1.0
    assert "processbench_f1" not in version.metrics and "train_loss" not in version.metrics
    assert version.training_run.activation_note.startswith("Zero-shot:")
    # ...whose scores are the backbone's own step head's
    chains = list(Chain.objects.filter(project=unlabeled_project).select_related("problem"))
    examples = chain_examples_build(chains=[(chain, None) for chain in chains])
    ours = [
        p
        for item in score_chains(load_prm(version.checkpoint_dir), examples)
        for p in item.step_probs
    ]
    config = PRMConfig(backbone=str(open_prm), step_prior=True, max_length=64, device="cpu")
    own = [p for item in zero_shot_scores(config, examples) for p in item.step_probs]
    assert ours == pytest.approx(own, abs=1e-6)


def test_a_scoring_run_with_it_orders_an_unlabeled_queue_from_round_0(
    unlabeled_project: Any, open_prm: Path
) -> None:
    # Given: the zero-shot version of a project with no label (no evidence)
    from prm_training.ml.acquisition import step_entropy
    from prm_training.selectors import project_training_settings_get
    from prm_training.services.scoring import scoring_run_execute, scoring_run_start
    from prm_training.services.strategy import acquisition_strategy_resolve

    version = run_zero_shot(unlabeled_project)

    # When: 'auto' is asked, and a scoring run is started with entropy set, nothing at
    # random
    loop = project_training_settings_get(project=unlabeled_project)
    auto, why = acquisition_strategy_resolve(loop=loop, version=version)
    run = scoring_run_start(
        project=unlabeled_project, user=None, strategy="entropy", random_fraction=0.0
    )
    ended = scoring_run_execute(scoring_run_id=run.pk)

    # Then: 'auto' stays random (no figure shows an unmeasured PRM saving labels) and says
    # so; set by hand, the prior's step uncertainty steers, the cold-start rule says why,
    # and every chain got a priority in its order
    assert auto == "random" and "zero-shot with no labeled held-out chains" in why
    assert ended is not None and ended.status == RunStatus.SUCCEEDED, ended and ended.error
    assert ended.model_version == version
    assert ended.strategy == ended.applied_strategy == "entropy"
    assert f"Zero-shot v{version.version} has no labeled held-out chains" in ended.strategy_note
    rows = list(ChainScore.objects.filter(scoring_run=run))
    assert len(rows) == 12 and ended.priorities_updated == 12
    by_priority = sorted(rows, key=lambda row: -(row.priority or 0))
    entropies = [step_entropy(row.step_probs) for row in by_priority]
    assert entropies[0] == max(entropies)
    priorities = dict(Chain.objects.filter(project=unlabeled_project).values_list("id", "priority"))
    assert {row.chain_id: row.priority for row in rows} == priorities


def test_disagreement_becomes_entropy_for_a_zero_shot_version(
    unlabeled_project: Any, open_prm: Path
) -> None:
    from prm_training.services.scoring import cold_start_strategy

    version = run_zero_shot(unlabeled_project)
    applied, note = cold_start_strategy(strategy="disagreement", version=version)
    assert applied == "entropy" and "one head" in note
    # ...while a zero-shot version measured on held-out chains meets the usual rule
    version.metrics = {
        **version.metrics,
        "processbench_f1": 0.2,
        "step_auroc": 0.6,
        "baseline_position_prior_processbench_f1": 0.3,
        "baseline_position_prior_step_auroc": 0.7,
    }
    assert cold_start_strategy(strategy="entropy", version=version)[0] == "random"


def test_with_labels_it_is_measured_as_a_trained_version_is(
    arithmetic_project: Any, open_prm: Path
) -> None:
    # Given: a project with labeled chains (some held out)
    # When
    version = run_zero_shot(arithmetic_project)

    # Then: the run took a snapshot, and the metrics hold the held-out ones and the rules'
    assert version.snapshot is not None and version.is_zero_shot
    assert "first_error_accuracy" in version.metrics
    assert "baseline_position_prior_first_error_accuracy" in version.metrics


@pytest.mark.parametrize(
    ("role", "expected"), [("ml", 201), ("lead", 403), ("annotator", 403), (None, 404)]
)
def test_only_ml_staff_start_a_zero_shot_version(
    project: Any,
    open_prm: Path,
    make_member: Any,
    client_for: Any,
    role: str | None,
    expected: int,
    django_capture_on_commit_callbacks: Any,
) -> None:
    user = make_member(project, role) if role else make_member(ProjectFactory(), "ml")
    settings = {key: value for key, value in ZERO_SHOT.items() if key != "device"}
    with django_capture_on_commit_callbacks(execute=False):
        response = client_for(user).post(
            f"/api/v1/projects/{project.pk}/training-runs/", settings, format="json"
        )
    assert response.status_code == expected, response.content
    if expected == 201:
        assert TrainingRun.objects.get(pk=response.json()["id"]).settings == settings
    else:
        assert not TrainingRun.objects.exists()


def test_a_zero_shot_run_needs_the_prm_s_step_head(
    project: Any, open_prm: Path, make_member: Any, client_for: Any
) -> None:
    client = client_for(make_member(project, "ml"))
    url = f"/api/v1/projects/{project.pk}/training-runs/"
    for bad in ({"zero_shot": True}, {"zero_shot": True, "step_prior": True, "mode": "full"}):
        response = client.post(url, {"backbone": "llama-prm", **bad}, format="json")
        assert response.status_code == 400 and set(response.json()) == {"zero_shot"}, bad


def test_the_ml_page_offers_the_open_prms_for_a_zero_shot_version(
    project: Any, open_prm: Path, make_member: Any
) -> None:
    from django.test import Client

    browser = Client()
    browser.force_login(make_member(project, "ml"))
    html = browser.get(f"/projects/{project.pk}/models/").content.decode()
    assert 'id="zero-shot-form"' in html and '<option value="llama-prm">' in html


def test_a_scoring_run_counts_what_its_windows_still_cut(
    unlabeled_project: Any, open_prm: Path
) -> None:
    # Given: one more chain whose problem and one step are each longer than the window
    from prm_training.services.scoring import scoring_run_execute, scoring_run_start

    long = ChainFactory(
        project=unlabeled_project,
        problem=ProblemFactory(project=unlabeled_project, text="add " * 200),
        step_count=0,
    )
    Step.objects.bulk_create(
        [Step(chain=long, index=0, text="one"), Step(chain=long, index=1, text="two " * 200)]
    )
    Chain.objects.filter(pk=long.pk).update(step_count=2)
    run_zero_shot(unlabeled_project)

    # When: a scoring run scores the queue
    run = scoring_run_start(project=unlabeled_project, user=None, strategy="entropy")
    ended = scoring_run_execute(scoring_run_id=run.pk)

    # Then: the run says what no window could hold, and nothing more
    assert ended is not None and ended.status == RunStatus.SUCCEEDED, ended and ended.error
    assert ended.truncation["truncated_chains"] == 1
    assert ended.truncation["truncated_problems"] == 1
    assert ended.truncation["truncated_steps"] == 1
