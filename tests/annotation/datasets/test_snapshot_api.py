"""The snapshot API with the lead's options, the list of each kind, the diff between two
versions, and the snapshots page: status codes, permissions and payloads."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from annotation.datasets.snapshots import snapshot_create
from tests.factories import ChainFactory, ProjectFactory, UserFactory, annotation_with_ratings

pytestmark = pytest.mark.django_db


@pytest.fixture
def tied_project() -> Any:
    """Overlap 2: a chain the two annotators tie on (step 2), one they agree on, and one
    only the first has labeled."""
    project = ProjectFactory(overlap=2)
    ann, bob = UserFactory(), UserFactory()
    tied = ChainFactory(project=project, step_count=3, finished_count=2, is_finished=True)
    annotation_with_ratings(chain=tied, annotator=ann, labels=[1, 1, 1])
    annotation_with_ratings(chain=tied, annotator=bob, labels=[1, -1, 1])
    calm = ChainFactory(project=project, step_count=2, finished_count=2, is_finished=True)
    annotation_with_ratings(chain=calm, annotator=ann, labels=[1, 1])
    annotation_with_ratings(chain=calm, annotator=bob, labels=[1, 1])
    partial = ChainFactory(project=project, step_count=2, finished_count=1)
    annotation_with_ratings(chain=partial, annotator=ann, labels=[-1, None])
    return project


def _snapshots_url(project: Any) -> str:
    return reverse("api-project-snapshots", args=[project.pk])


def _diff_url(project: Any) -> str:
    return reverse("api-project-snapshot-diff", args=[project.pk])


def test_a_snapshot_with_the_defaults_holds_finished_chains_without_ties(
    tied_project, make_member, client_for
):
    client = client_for(make_member(tied_project, "lead"))

    created = client.post(_snapshots_url(tied_project), {}, format="json")

    assert created.status_code == 201, created.content
    body = created.json()
    assert body["options"] == {
        "finished_only": True,
        "include_imported": False,
        "min_support": 1,
        "ties": "drop",
        "heldout_fraction": 0.2,
        "seed": 0,
        "machine_sources": [],
    }
    assert body["meta"]["sources"] == ["human"]
    assert body["meta"]["options"] == body["options"]
    assert body["training_run"] is None
    assert body["counts"]["chains"] == 2
    assert body["counts"]["unfinished_left_out"] == 1
    assert body["counts"]["tied_steps"] == 1
    assert body["counts"]["steps_labeled"] == 4


def test_a_snapshot_with_options(tied_project, make_member, client_for):
    client = client_for(make_member(tied_project, "lead"))

    created = client.post(
        _snapshots_url(tied_project),
        {
            "finished_only": False,
            "min_support": 1,
            "ties": "mark",
            "heldout_fraction": 0.5,
            "seed": 42,
            "machine_sources": [],
            "ambiguous": "negative",
        },
        format="json",
    )

    assert created.status_code == 201, created.content
    body = created.json()
    assert body["options"] == {
        "finished_only": False,
        "include_imported": False,
        "min_support": 1,
        "ties": "mark",
        "heldout_fraction": 0.5,
        "seed": 42,
        "machine_sources": [],
    }
    assert (body["seed"], body["heldout_fraction"]) == (42, 0.5)
    assert body["counts"]["chains"] == 3
    assert body["counts"]["steps_labeled"] == 6
    assert body["meta"]["trl_ambiguous"] == "negative"

    # Two votes per step: the chain only one annotator labeled is left out
    strict = client.post(
        _snapshots_url(tied_project), {"finished_only": False, "min_support": 2}, format="json"
    )
    assert strict.status_code == 201
    assert strict.json()["counts"]["chains"] == 2
    assert strict.json()["counts"]["steps_below_support"] == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"ties": "coin"}, "ties"),
        ({"min_support": 0}, "min_support"),
        ({"min_support": 51}, "min_support"),
        ({"finished_only": "perhaps"}, "finished_only"),
        ({"seed": -1}, "seed"),
        ({"heldout_fraction": 1.0}, "heldout_fraction"),
    ],
)
def test_bad_options_are_a_400_naming_the_field(tied_project, make_member, client_for, body, field):
    client = client_for(make_member(tied_project, "lead"))
    response = client.post(_snapshots_url(tied_project), body, format="json")
    assert response.status_code == 400
    assert field in response.json()


def test_nothing_finished_is_a_400_that_says_what_to_do(project, make_member, client_for):
    chain = ChainFactory(project=project, step_count=2)
    annotation_with_ratings(chain=chain, annotator=UserFactory(), labels=[1, 1])
    client = client_for(make_member(project, "lead"))

    response = client.post(_snapshots_url(project), {}, format="json")

    assert response.status_code == 400
    assert "without finished_only" in str(response.json())


def test_a_snapshot_identical_to_an_earlier_one_says_so(tied_project, make_member, client_for):
    # Given a first snapshot
    client = client_for(make_member(tied_project, "lead"))
    first = client.post(_snapshots_url(tied_project), {}, format="json").json()
    assert first["same_as"] is None

    # When the lead takes another with nothing changed
    again = client.post(_snapshots_url(tied_project), {}, format="json").json()

    # Then it names the first it repeats
    assert (again["label"], again["same_as"]) == ("v2", "v1")
    assert again["content_hash"] == first["content_hash"]


def test_the_list_by_kind(tied_project, make_member, client_for):
    lead = make_member(tied_project, "lead")
    dataset = snapshot_create(project=tied_project, user=lead)
    trained = snapshot_create(
        project=tied_project, finished_only=False, ties="lowest", training_run=9
    )
    client = client_for(make_member(tied_project, "ml"))

    everything = client.get(_snapshots_url(tied_project)).json()["results"]
    datasets = client.get(_snapshots_url(tied_project), {"kind": "dataset"}).json()["results"]
    training = client.get(_snapshots_url(tied_project), {"kind": "training"}).json()["results"]

    assert [(item["kind"], item["label"]) for item in everything] == [
        ("training", "t1"),
        ("dataset", "v1"),
    ]
    assert [item["version"] for item in datasets] == [dataset.version]
    assert [(item["version"], item["training_run"]) for item in training] == [(trained.version, 9)]
    assert training[0]["options"]["finished_only"] is False
    assert training[0]["options"]["ties"] == "lowest"
    assert client.get(_snapshots_url(tied_project), {"kind": "other"}).status_code == 400


def test_the_list_pages_by_number_with_its_filters(
    tied_project, make_member, client_for, monkeypatch
):
    # Given: three snapshots, two a page
    from annotation.api.fields import PageNumberPagination

    monkeypatch.setattr(PageNumberPagination, "page_size", 2)
    lead = make_member(tied_project, "lead")
    versions = [snapshot_create(project=tied_project, user=lead).version for _ in range(3)]
    client = client_for(lead)

    # When: the second page is asked for by number, with and without a filter
    second = client.get(_snapshots_url(tied_project), {"page": 2})
    filtered = client.get(_snapshots_url(tied_project), {"page": 2, "kind": "dataset"})

    # Then: `page` is the paginator's, not an unknown filter
    assert second.status_code == 200, second.content
    assert [item["version"] for item in second.json()["results"]] == [versions[0]]
    assert [item["version"] for item in filtered.json()["results"]] == [versions[0]]


def test_the_diff_of_two_versions(tied_project, make_member, client_for):
    lead = make_member(tied_project, "lead")
    a = snapshot_create(project=tied_project, finished_only=False, ties="lowest")
    b = snapshot_create(project=tied_project)
    client = client_for(lead)

    response = client.get(_diff_url(tied_project), {"a": a.version, "b": b.version})

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["a"]["version"], body["b"]["version"]) == (a.version, b.version)
    assert body["b"]["options"]["ties"] == "drop"
    assert body["counts"] == {
        "added": 0,
        "removed": 1,
        "labels_changed": 1,
        "split_changed": 0,
        "unchanged": 1,
    }
    changes = {row["change"]: row for row in body["changes"]}
    assert set(changes) == {"removed", "labels_changed"}
    relabeled = changes["labels_changed"]
    assert relabeled["labels_a"] == [1, -1, 1]
    assert relabeled["labels_b"] == [1, None, 1]
    assert relabeled["changed_steps"] == [1]
    assert changes["removed"]["labels_b"] is None
    assert body["next_after"] is None

    # One change a page: the next page carries no counts
    first = client.get(_diff_url(tied_project), {"a": a.version, "b": b.version, "limit": 1})
    assert first.json()["next_after"] == first.json()["changes"][0]["chain_id"]
    second = client.get(
        _diff_url(tied_project),
        {"a": a.version, "b": b.version, "limit": 1, "after": first.json()["next_after"]},
    ).json()
    assert second["counts"] is None
    assert [row["change"] for row in second["changes"]] != [
        row["change"] for row in first.json()["changes"]
    ]
    only = client.get(
        _diff_url(tied_project), {"a": a.version, "b": b.version, "change": "removed"}
    ).json()
    assert [row["change"] for row in only["changes"]] == ["removed"]


@pytest.mark.parametrize(
    ("params", "status"),
    [
        ({"a": 1, "b": 99}, 404),
        ({"a": 1}, 400),
        ({"a": 0, "b": 1}, 400),
        ({"a": 1, "b": 1, "change": "all"}, 400),
        ({"a": 1, "b": 1, "limit": 201}, 400),
        ({"a": 1, "b": 1}, 200),
    ],
)
def test_diff_parameters(tied_project, make_member, client_for, params, status):
    snapshot_create(project=tied_project)
    client = client_for(make_member(tied_project, "lead"))
    assert client.get(_diff_url(tied_project), params).status_code == status


@pytest.mark.parametrize(
    ("role", "status"), [("annotator", 403), ("ml", 403), ("lead", 200), (None, 404)]
)
def test_only_leads_see_a_diff(tied_project, make_member, client_for, role, status):
    snapshot_create(project=tied_project)
    user = make_member(tied_project, role) if role else UserFactory()
    response = client_for(user).get(_diff_url(tied_project), {"a": 1, "b": 1})
    assert response.status_code == status
    if status != 200:
        assert "labels_a" not in response.content.decode()


def test_an_export_says_what_its_snapshot_holds(tied_project, make_member, client_for):
    client = client_for(make_member(tied_project, "lead"))
    client.post(_snapshots_url(tied_project), {"ties": "mark", "seed": 3}, format="json")

    response = client.get(reverse("api-project-export", args=[tied_project.pk]), {"format": "csv"})

    assert response.status_code == 200
    assert response["X-Steplab-Snapshot-Options"] == (
        "finished_only=1; include_imported=0; min_support=1; ties=mark; heldout_fraction=0.2; "
        "seed=3"
    )


def test_a_snapshot_reads_imported_labels_only_when_asked(tied_project, make_member, client_for):
    # Given: beside the people's chains, one that only an import labeled
    client = client_for(make_member(tied_project, "lead"))
    annotation_with_ratings(chain=ChainFactory(project=tied_project, step_count=2), labels=[1, -1])

    # When: the default snapshot, then one that includes imported labels
    people = client.post(_snapshots_url(tied_project), {}, format="json").json()
    both = client.post(
        _snapshots_url(tied_project), {"include_imported": True}, format="json"
    ).json()

    # Then: the imported chain is counted apart, and enters only the second
    assert people["counts"]["chains"] == 2
    assert people["counts"]["sources"] == {"human": 2, "import": 0}
    assert people["counts"]["imported_left_out"] == 1
    assert both["options"]["include_imported"] is True
    assert both["meta"]["sources"] == ["human", "import"]
    assert both["counts"]["chains"] == 3
    assert both["counts"]["sources"] == {"human": 2, "import": 1}
    assert both["counts"]["imported_left_out"] == 0


@pytest.mark.parametrize(
    ("role", "status"), [("annotator", 403), ("ml", 403), ("lead", 200), (None, 404)]
)
def test_the_snapshots_page_is_for_leads(tied_project, make_member, role, status):
    user = make_member(tied_project, role) if role else UserFactory()
    client = Client()
    client.force_login(user)

    response = client.get(f"/projects/{tied_project.pk}/snapshots/")

    assert response.status_code == status
    if status == 200:
        html = response.content.decode()
        assert 'id="snapshots-config"' in html
        assert _diff_url(tied_project) in html
        assert 'name="finished_only"' in html and "checked" in html


def test_the_dashboard_links_the_snapshots_page_for_leads(tied_project, make_member):
    client = Client()
    client.force_login(make_member(tied_project, "lead"))
    html = client.get(f"/projects/{tied_project.pk}/").content.decode()
    assert f'href="/projects/{tied_project.pk}/snapshots/"' in html
    annotator = Client()
    annotator.force_login(make_member(tied_project, "annotator"))
    assert "/snapshots/" not in annotator.get(f"/projects/{tied_project.pk}/").content.decode()


def test_a_training_snapshot_is_exported_and_compared_by_its_own_number(
    tied_project, make_member, client_for
):
    # Given dataset v1, a training run's t1 (both numbered 1) and dataset v2
    lead = make_member(tied_project, "lead")
    snapshot_create(project=tied_project, user=lead)
    trained = snapshot_create(project=tied_project, finished_only=False, training_run=9)
    snapshot_create(project=tied_project, user=lead)
    client = client_for(lead)
    export_url = reverse("api-project-export", args=[tied_project.pk])

    # When the lead downloads version 1 of each kind, and compares t1 with v2
    dataset = client.get(export_url, {"format": "trl", "snapshot": 1})
    training = client.get(export_url, {"format": "trl", "snapshot": 1, "kind": "training"})
    compared = client.get(_diff_url(tied_project), {"a": 1, "a_kind": "training", "b": 2})
    missing = client.get(_diff_url(tied_project), {"a": 2, "a_kind": "training", "b": 2})

    # Then each file names its own snapshot, the training one as -t1-
    assert dataset.status_code == training.status_code == 200
    assert "-v1-all.trl.jsonl" in dataset["Content-Disposition"]
    assert "-t1-all.trl.jsonl" in training["Content-Disposition"]
    assert (training["X-Steplab-Snapshot"], training["X-Steplab-Snapshot-Kind"]) == (
        "1",
        "training",
    )
    assert training["X-Steplab-Snapshot-Hash"] == trained.content_hash
    # And the diff reads t1 against v2 (t1 holds the unfinished chain v2 leaves out)
    assert compared.status_code == 200, compared.content
    body = compared.json()
    assert (body["a"]["label"], body["b"]["label"]) == ("t1", "v2")
    assert body["counts"]["removed"] == 1
    assert missing.status_code == 404
    assert "t2" in missing.json()["detail"]
