"""Migration 0031 gives every snapshot a kind: those a training run took for itself
(``meta["training_run"]``) become of kind training, the rest datasets, each keeping its
number; new ones of each kind go on from the highest of that kind."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from annotation.datasets.snapshots import snapshot_create
from annotation.models import Project, Snapshot
from tests.factories import ChainFactory, UserFactory, annotation_with_ratings

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("annotation", "0030_chain_routing")]
AFTER = [("annotation", "0031_snapshot_kind")]


def migrate(target: list[tuple[str, str]]):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(target)
    return executor.loader.project_state(target).apps


@pytest.fixture(autouse=True)
def back_to_the_latest_schema():
    """The tests after this one need every migration applied, not just 0031."""
    yield
    _migrate_to_latest()


def test_training_snapshots_become_their_own_kind_and_keep_their_numbers() -> None:
    # Given, before the migration, one series for both: datasets v1 and v3, a training
    # run's v2 and v4
    apps = migrate(BEFORE)
    OldProject = apps.get_model("annotation", "Project")
    OldSnapshot = apps.get_model("annotation", "Snapshot")
    old = OldProject.objects.create(name="one series")
    for version, meta in ((1, {}), (2, {"training_run": 5}), (3, {}), (4, {"training_run": 6})):
        OldSnapshot.objects.create(project=old, version=version, content_hash="h", meta=meta)

    # When the migration runs
    migrate(AFTER)

    # Then the training runs' are of kind training and every number is kept
    rows = sorted(Snapshot.objects.filter(project_id=old.pk).values_list("version", "kind", "meta"))
    assert [(version, kind) for version, kind, _ in rows] == [
        (1, "dataset"),
        (2, "training"),
        (3, "dataset"),
        (4, "training"),
    ]
    assert [meta.get("training_run") for _, _, meta in rows] == [None, 5, None, 6]

    # And the next of each kind goes on from the highest of its kind: v4 and t5
    _migrate_to_latest()
    project = Project.objects.get(pk=old.pk)
    chain = ChainFactory(project=project, step_count=2, finished_count=1, is_finished=True)
    annotation_with_ratings(chain=chain, annotator=UserFactory(), labels=[1, 1])
    assert snapshot_create(project=project).label == "v4"
    assert snapshot_create(project=project, training_run=7).label == "t5"


def _migrate_to_latest() -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
