"""A pre-label or routing source that has written no label in the project is saved as the
lead asks, with a warning in the project's answer that says what writes its labels
never silent, never refused (its labels may come later). Annotators never
see the warnings (they would name routing's sources)."""

from __future__ import annotations

from typing import Any

import pytest

from annotation.models import MachineSource, Project
from annotation.routing.sources import machine_source_unwritten, machine_sources_written
from tests.factories import ChainFactory, machine_labels

pytestmark = pytest.mark.django_db

PRM_HOW = (
    "No PRM machine labels yet: activate a model version and run scoring (the Models "
    "page, or score_chains), which writes its verdicts on the chains it scores."
)


def _url(project: Project) -> str:
    return f"/api/v1/projects/{project.pk}/"


def test_choosing_a_source_without_labels_saves_with_a_warning(
    project: Project, make_member: Any, client_for: Any
) -> None:
    # Given a project whose only machine labels are the judge's
    machine_labels(
        chain=ChainFactory(project=project, step_count=2), ratings=[1, -1], source="judge"
    )
    lead = client_for(make_member(project, "lead"))

    # When the lead turns pre-labels on from the PRM and routes by the judge and an import
    response = lead.patch(
        _url(project),
        {
            "prelabels": True,
            "prelabel_source": "prm",
            "routing_sources": ["judge", "import"],
        },
        format="json",
    )

    # Then it is saved, with a warning for each source that has written nothing
    assert response.status_code == 200, response.json()
    project.refresh_from_db()
    assert (project.prelabels, project.prelabel_source) == (True, MachineSource.PRM)
    assert project.routing_sources == ["judge", "import"]
    assert response.json()["warnings"] == [
        {"field": "prelabel_source", "source": "prm", "message": PRM_HOW},
        {
            "field": "routing_sources",
            "source": "import",
            "message": "No Import machine labels yet: import a file whose lines carry step "
            "labels (PRM800K, ProcessBench, Math-Shepherd, or generic with labels).",
        },
    ]
    # And the detail says the same until labels come
    assert lead.get(_url(project)).json()["warnings"] == response.json()["warnings"]


def test_no_warning_once_the_source_has_labels_or_while_pre_labels_are_off(
    project: Project, make_member: Any, client_for: Any
) -> None:
    lead = client_for(make_member(project, "lead"))
    # Pre-labels off: the source they would read is not in use
    body = lead.patch(_url(project), {"prelabel_source": "prm"}, format="json").json()
    assert body["warnings"] == []

    # On, with the PRM's labels written by a scoring run
    chain = ChainFactory(project=project, step_count=1)
    machine_labels(chain=chain, ratings=[1], source="prm", run_kind="scoring", run_id=1)
    body = lead.patch(
        _url(project), {"prelabels": True, "routing_sources": ["prm"]}, format="json"
    ).json()
    assert body["warnings"] == []


def test_annotators_see_no_warning(project: Project, make_member: Any, client_for: Any) -> None:
    Project.objects.filter(pk=project.pk).update(
        prelabels=True, prelabel_source="prm", routing_sources=["prm"]
    )
    annotator = client_for(make_member(project, "annotator"))
    ml = client_for(make_member(project, "ml"))

    assert annotator.get(_url(project)).json()["warnings"] is None
    assert [w["field"] for w in ml.get(_url(project)).json()["warnings"]] == [
        "prelabel_source",
        "routing_sources",
    ]


def test_an_unknown_source_is_still_refused(
    project: Project, make_member: Any, client_for: Any
) -> None:
    lead = client_for(make_member(project, "lead"))
    response = lead.patch(_url(project), {"routing_sources": ["oracle"]}, format="json")
    assert response.status_code == 400
    assert "routing_sources" in response.json()


def test_which_sources_have_written(project: Project) -> None:
    chain = ChainFactory(project=project, step_count=1)
    machine_labels(chain=chain, ratings=[1], source="import", run_kind="import", run_id=1)
    other = ChainFactory(step_count=1)  # another project's PRM labels count for nothing here
    machine_labels(chain=other, ratings=[1], source="prm", run_kind="scoring", run_id=1)

    assert machine_sources_written(project_id=project.pk, sources=MachineSource.values) == {
        "import"
    }
    assert machine_sources_written(project_id=project.pk, sources=[]) == set()
    assert machine_source_unwritten("prm") == PRM_HOW
