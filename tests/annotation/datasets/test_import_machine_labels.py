"""An import whose lines carry labels keeps them as machine labels of source "import" too
beside its import annotation, through either writer: pre-labels show them and
routing reads them; they are no vote and finish no chain. Imports made before get theirs
from migration 0033."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from annotation.datasets import import_orm, imports
from annotation.datasets.import_rows import IMPORT_RUN_KIND
from annotation.datasets.imports import chain_import
from annotation.models import (
    Annotation,
    AnnotationSource,
    Chain,
    MachineLabel,
    MachineSource,
    Project,
)
from annotation.routing.machine_labels import machine_chain_labels
from tests.factories import ChainFactory, ProjectFactory, UserFactory, annotation_with_ratings

RECORDS = [
    {"problem": "1 + 1?", "steps": ["1 + 1 = 3", "so 3"], "labels": [-1, None]},
    {"problem": "2 + 2?", "steps": ["2 + 2 = 4", "so 4", "done"], "labels": [1, 1, 0]},
    {"problem": "3 + 3?", "steps": ["3 + 3 = 6"]},
]


def _file(tmp_path: Path) -> Path:
    path = tmp_path / "labeled.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in RECORDS))
    return path


def _machine_rows(project: Project) -> list[tuple[Any, ...]]:
    """The project's import machine labels: (problem, step, rating, model, run)."""
    return sorted(
        MachineLabel.objects.filter(project=project, source=MachineSource.IMPORT).values_list(
            "chain__problem__text", "step__index", "rating", "model", "run_kind", "run_id"
        )
    )


def _expected(batch_id: int) -> list[tuple[Any, ...]]:
    return [
        ("1 + 1?", 0, -1, "generic", IMPORT_RUN_KIND, batch_id),
        ("2 + 2?", 0, 1, "generic", IMPORT_RUN_KIND, batch_id),
        ("2 + 2?", 1, 1, "generic", IMPORT_RUN_KIND, batch_id),
        ("2 + 2?", 2, 0, "generic", IMPORT_RUN_KIND, batch_id),
    ]


@pytest.mark.django_db
@pytest.mark.parametrize("writer", ["copy", "orm"])
def test_the_labels_a_file_carries_become_import_machine_labels(
    tmp_path: Path, monkeypatch: Any, writer: str
) -> None:
    # Given a file with two labeled chains (one labeled up to its first error) and one not
    project = ProjectFactory()
    if writer == "orm":
        monkeypatch.setattr(
            imports,
            "_writer_for",
            lambda *, project, batch, now: import_orm.OrmWriter(project=project, batch=batch),
        )

    # When it is imported
    result = chain_import(project=project, path=_file(tmp_path))

    # Then each rated step has one import machine label, the batch as its run
    assert result.labels_created == 4
    assert _machine_rows(project) == _expected(result.batch_id)
    # And the import annotations are as before, no person's pass, nothing finished
    assert Annotation.objects.filter(chain__project=project).count() == 2
    assert not Annotation.objects.exclude(source=AnnotationSource.IMPORT).exists()
    assert not Chain.objects.filter(project=project, finished_count__gt=0).exists()
    assert not Chain.objects.filter(project=project, is_finished=True).exists()

    # And the same file again writes nothing more
    assert chain_import(project=project, path=_file(tmp_path)).already_imported
    assert len(_machine_rows(project)) == 4


@pytest.mark.django_db
def test_pre_labels_and_routing_read_the_import_source(
    tmp_path: Path, make_member: Any, client_for: Any
) -> None:
    # Given a project that pre-labels from the import, every chain shown
    project = ProjectFactory(
        prelabels=True, prelabel_source=MachineSource.IMPORT, prelabel_holdout=0.0
    )
    chain_import(project=project, path=_file(tmp_path))
    client = client_for(make_member(project))

    # When an annotator leases each chain in turn
    shown = {}
    for _ in RECORDS:
        response = client.post(f"/api/v1/projects/{project.pk}/assignments/next/")
        assert response.status_code == 200, response.content
        lease = response.json()
        shown[lease["chain"]["problem"]["text"]] = (
            lease["chain"]["prelabel_source"],
            [step["prelabel"] for step in lease["chain"]["steps"]],
        )
        client.post(
            f"/api/v1/assignments/{lease['assignment']['id']}/skip/",
            {"reason": "other"},
            format="json",
        )

    # Then each shows the labels its line carried, none (and no source) where it carried none
    assert shown == {
        "1 + 1?": ("import", [-1, None]),
        "2 + 2?": ("import", [1, 1, 0]),
        "3 + 3?": (None, [None]),
    }
    # And routing reads them as a source's verdicts
    labels = machine_chain_labels(project_id=project.pk, source=MachineSource.IMPORT)
    assert sorted(labels.values()) == [((-1, None), 1.0), ((1, 1, 0), 1.0)]


BEFORE = [("annotation", "0032_bulk_evaluation_sets")]
AFTER = [("annotation", "0033_import_machine_labels")]


def _migrate(target: list[tuple[str, str]]) -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(target)


@pytest.fixture
def back_to_the_latest_schema():
    """The tests after this one need every migration applied."""
    yield
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_migration_0033_gives_earlier_imports_their_machine_labels(
    back_to_the_latest_schema: None,
) -> None:
    # Given, before the migration, an import annotation (written as imports wrote them)
    # and a person's pass
    _migrate(BEFORE)
    project = ProjectFactory()
    imported = ChainFactory(project=project, step_count=3)
    annotation = annotation_with_ratings(chain=imported, labels=[1, -1, None])
    person = ChainFactory(project=project, step_count=1)
    annotation_with_ratings(chain=person, labels=[1], annotator=UserFactory())

    # When it runs (twice: a repeat writes nothing more)
    _migrate(AFTER)
    _migrate(BEFORE)
    _migrate(AFTER)

    # Then the import's ratings are import machine labels, the person's are not
    rows = sorted(
        MachineLabel.objects.filter(project=project).values_list(
            "chain_id", "step__index", "source", "rating", "model", "run_kind", "run_id"
        )
    )
    batch = annotation.import_batch_id
    assert rows == [
        (imported.pk, 0, "import", 1, "prm800k", "import", batch),
        (imported.pk, 1, "import", -1, "prm800k", "import", batch),
    ]
