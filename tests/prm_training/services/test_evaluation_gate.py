"""The evaluation set rule on activation by hand, and the results endpoint."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from rest_framework.test import APIClient

from annotation.datasets.evaluation_sets import evaluation_set_mark
from prm_training.models import EvaluationResult, ModelVersion, ProjectTrainingSettings
from prm_training.services.evaluation import report_loses
from prm_training.services.model_versions import model_version_activate
from tests.factories import ChainFactory, ImportBatchFactory, scoring_run_with_model_version

pytestmark = pytest.mark.django_db


def _set(project, name: str):
    batch = ImportBatchFactory(project=project, filename=name)
    ChainFactory(project=project, import_batch=batch)
    return evaluation_set_mark(project=project, import_batch_id=batch.pk)


def test_activation_by_hand_needs_figures_on_every_set_and_no_loss(project):
    version = scoring_run_with_model_version(project=project, content_hash="gate").model_version
    first, second = _set(project, "a.jsonl"), _set(project, "b.jsonl")
    EvaluationResult.objects.create(model_version=version, evaluation_set=first, loses=False)
    # The rule off: any version may be made active
    loop = ProjectTrainingSettings.objects.create(project=project)
    assert model_version_activate(model_version=version, user=None).is_active
    ModelVersion.objects.filter(pk=version.pk).update(is_active=False)

    loop.promotion_needs_evaluation_sets = True
    loop.save()
    with pytest.raises(ValidationError, match="no figures .* b.jsonl"):
        model_version_activate(model_version=version, user=None)
    losing = EvaluationResult.objects.create(
        model_version=version, evaluation_set=second, loses=True
    )
    with pytest.raises(ValidationError, match="loses .* b.jsonl"):
        model_version_activate(model_version=version, user=None)
    assert not ModelVersion.objects.get(pk=version.pk).is_active

    EvaluationResult.objects.filter(pk=losing.pk).update(loses=False)
    assert model_version_activate(model_version=version, user=None).is_active


def test_the_results_endpoint_gives_each_versions_figures_per_set(project, make_member):
    version = scoring_run_with_model_version(project=project, content_hash="api").model_version
    held = _set(project, "unseen.jsonl")
    report = {"subsets": [{"name": "math", "chains": 1}], "scores": {}}
    EvaluationResult.objects.create(
        model_version=version, evaluation_set=held, chains=1, report=report, loses=False
    )
    client = APIClient()
    client.force_login(make_member(project, "lead"))
    rows = client.get(reverse("api-evaluation-results", kwargs={"project_id": project.pk})).json()
    assert [(r["version"], r["evaluation_set_name"], r["report"]) for r in rows] == [
        (1, "unseen.jsonl", report)
    ]
    client.force_login(make_member(project, "ml"))
    activate = reverse("api-model-version-activate", kwargs={"version_id": version.pk})
    ProjectTrainingSettings.objects.create(project=project, promotion_needs_evaluation_sets=True)
    EvaluationResult.objects.filter(model_version=version).update(loses=True)
    response = client.post(activate)
    assert response.status_code == 400 and "unseen.jsonl" in str(response.json())


@pytest.mark.parametrize(
    ("versus", "loses"),
    [
        # F1 and AUROC both inside their intervals: no loss
        ({"mean_subset_f1": {"high": 0.02}, "auroc": {"high": 0.01}}, False),
        # the official F1 wholly below the strongest baseline
        ({"mean_subset_f1": {"high": -0.01}, "auroc": {"high": 0.3}}, True),
        # F1 holds zero but AUROC is wholly below (a version on GSM8K trained on MATH:
        # F1 -0.09 [-0.20, +0.02], AUROC -0.23 [-0.26, -0.19] against the text-blind head)
        ({"mean_subset_f1": {"high": 0.023}, "auroc": {"high": -0.186}}, True),
        # the pooled F1 where the report has no subsets
        ({"f1": {"high": -0.05}}, True),
        ({}, None),
    ],
)
def test_a_version_loses_on_a_set_when_f1_or_auroc_is_wholly_below(versus, loses):
    assert report_loses({"versus_strongest": versus}) is loses
