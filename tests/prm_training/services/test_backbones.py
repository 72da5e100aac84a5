"""Backbones by name (prm_training/services/backbones.py): a run or the loop settings
name one of the listed backbones; a path, a way out of the backbone root or another
project's checkpoint is refused with one message, before anything is queued."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ValidationError

from annotation.models import Snapshot
from prm_training.models import ModelVersion, RunStatus, TrainingRun
from prm_training.services.backbones import REFUSED, backbone_choices, backbone_path
from prm_training.services.training import training_run_start
from tests.factories import ProjectFactory

pytestmark = pytest.mark.django_db


def _version_with_backbone(project: Any, root: Path, number: int) -> ModelVersion:
    """A version whose checkpoint saved its backbone (a config.json is enough here)."""
    checkpoint = root / f"project-{project.pk}" / f"v{number}"
    (checkpoint / "backbone").mkdir(parents=True)
    (checkpoint / "backbone" / "config.json").write_text(json.dumps({"model_type": "bert"}))
    snapshot = Snapshot.objects.create(project=project, version=number, content_hash=f"b{number}")
    return ModelVersion.objects.create(
        project=project,
        training_run=TrainingRun.objects.create(project=project, status=RunStatus.SUCCEEDED),
        snapshot=snapshot,
        version=number,
        checkpoint_dir=str(checkpoint),
        metrics={},
    )


@pytest.fixture
def world(tmp_path: Path, backbone_root: Path, monkeypatch: Any) -> dict[str, Any]:
    """The backbone root (holding the tiny "bert"), plus around it: a model directory
    outside the root, a link inside pointing to it, a file, and two projects' versions."""
    outside = tmp_path / "elsewhere" / "model"
    outside.mkdir(parents=True)
    (outside / "config.json").write_text("{}")
    link = backbone_root / "escape"
    if not link.exists():
        link.symlink_to(outside)
    (backbone_root / "notes.txt").write_text("not a model")
    models = tmp_path / "checkpoints"
    monkeypatch.setenv("STEPLAB_MODEL_DIR", str(models))
    mine, theirs = ProjectFactory(), ProjectFactory()
    return {
        "project": mine,
        "outside": outside,
        "own_version": _version_with_backbone(mine, models, 1),
        "other_version": _version_with_backbone(theirs, models, 1),
    }


def test_the_choices_are_the_bundled_model_the_root_s_models_and_own_versions(
    world: dict[str, Any],
) -> None:
    choices = backbone_choices(project=world["project"])

    assert [(c.name, c.label) for c in choices] == [
        ("", "all-MiniLM-L6-v2 (bundled)"),
        ("bert", "bert"),
        (f"version:{world['own_version'].pk}", "v1 of this project (fine-tuned backbone)"),
    ]
    assert backbone_path(name="bert", project=world["project"]).endswith("/bert")


def _refusals(world: dict[str, Any]) -> list[str]:
    return [
        str(world["outside"]),  # an absolute path to a real model
        "/etc",
        "../elsewhere/model",
        "bert/../escape",
        "escape",  # a link under the root leading out of it
        "notes.txt",  # a file
        "nothing-here",
        f"version:{world['other_version'].pk}",  # another project's checkpoint
        "version:999999",
        "version:../../x",
    ]


def test_every_other_name_gets_the_same_message(world: dict[str, Any]) -> None:
    for name in _refusals(world):
        with pytest.raises(ValidationError) as caught:
            backbone_path(name=name, project=world["project"])
        assert caught.value.messages == [REFUSED], name


def test_a_run_naming_a_refused_backbone_is_not_queued(
    world: dict[str, Any], make_member: Any, client_for: Any
) -> None:
    # Given ML staff of the project
    project = world["project"]
    client = client_for(make_member(project, "ml"))
    url = f"/api/v1/projects/{project.pk}/training-runs/"
    runs = TrainingRun.objects.filter(project=project).count()

    # When they start runs and save loop settings naming each refused backbone
    answers = [client.post(url, {"backbone": name}, format="json") for name in _refusals(world)]
    settings = [
        client.patch(
            f"/api/v1/projects/{project.pk}/training-settings/",
            {"default_config": {"backbone": name}},
            format="json",
        )
        for name in _refusals(world)
    ]

    # Then each is a 400 with the one message, and no run was made
    assert {a.status_code for a in answers + settings} == {400}
    assert {json.dumps(a.json()) for a in answers} == {json.dumps({"backbone": [REFUSED]})}
    assert all(REFUSED in json.dumps(s.json()) for s in settings)
    assert TrainingRun.objects.filter(project=project).count() == runs


def test_a_listed_backbone_is_queued_by_name(world: dict[str, Any]) -> None:
    run = training_run_start(project=world["project"], user=None, settings={"backbone": "bert"})
    assert run.settings["backbone"] == "bert"


def test_the_listing_is_for_ml_staff_and_leads(
    world: dict[str, Any], make_member: Any, client_for: Any
) -> None:
    project = world["project"]
    url = f"/api/v1/projects/{project.pk}/backbones/"

    listed = client_for(make_member(project, "lead")).get(url)

    assert listed.status_code == 200
    assert [row["name"] for row in listed.json()] == [
        "",
        "bert",
        f"version:{world['own_version'].pk}",
    ]
    assert client_for(make_member(project, "annotator")).get(url).status_code == 403


def test_a_backbone_gone_before_the_run_starts_fails_it_with_the_same_message(
    arithmetic_project: Any,
    tiny_bert_dir: Path,
    backbone_root: Path,
    model_dir: Path,
    monkeypatch: Any,
) -> None:
    # Given a run queued naming a copy of the tiny BERT under the backbone root
    import shutil

    from prm_training.services.training import training_run_execute
    from tests.prm_training.ml_tiny import tiny_settings

    monkeypatch.setenv("STEPLAB_MODEL_DIR", str(model_dir))
    copy = backbone_root / "bert-copy"
    shutil.copytree(tiny_bert_dir, copy, dirs_exist_ok=True)
    run = training_run_start(project=arithmetic_project, user=None, settings=tiny_settings(copy))

    # When the copy is removed before a worker starts the run
    shutil.rmtree(copy)
    ended = training_run_execute(run_id=run.pk)

    # Then the run failed with the message that would have refused it, nothing more
    assert ended is not None and ended.status == RunStatus.FAILED
    assert ended.error == REFUSED
