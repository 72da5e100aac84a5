"""Review and agreement endpoints: payloads and access (leads review; annotators 403;
non-members 404; ML staff read agreement only)."""

from __future__ import annotations

import pytest

from annotation.models import Annotation, AnnotationSource, Chain
from annotation.quality.chain_agreement import chains_agreement_refresh
from tests.factories import ChainFactory, UserFactory, annotation_with_ratings

pytestmark = pytest.mark.django_db


@pytest.fixture
def disputed(project):
    """A chain two annotators rated differently on step 1."""
    chain = ChainFactory(project=project, step_count=3)
    annotation_with_ratings(chain=chain, annotator=UserFactory(username="ann"), labels=[1, -1, 1])
    annotation_with_ratings(chain=chain, annotator=UserFactory(username="bob"), labels=[1, 1, 1])
    return chain


def _urls(project, chain) -> dict[str, str]:
    return {
        "disagreements": f"/api/v1/projects/{project.pk}/disagreements/",
        "agreement": f"/api/v1/projects/{project.pk}/agreement/",
        "labels": f"/api/v1/chains/{chain.pk}/labels/",
        "adjudicate": f"/api/v1/chains/{chain.pk}/adjudicate/",
    }


@pytest.mark.parametrize(
    ("role", "expected"),
    [
        (
            "annotator",
            {"disagreements": 403, "agreement": 403, "labels": 403, "adjudicate": 403},
        ),
        ("ml", {"disagreements": 403, "agreement": 200, "labels": 403, "adjudicate": 403}),
        (None, {"disagreements": 404, "agreement": 404, "labels": 404, "adjudicate": 404}),
        ("lead", {"disagreements": 200, "agreement": 200, "labels": 200, "adjudicate": 201}),
    ],
)
def test_access_rules(project, disputed, make_member, client_for, role, expected):
    user = make_member(project, role) if role else UserFactory()
    client = client_for(user)
    step = disputed.steps.get(index=1).pk

    got = {}
    for name, url in _urls(project, disputed).items():
        if name == "adjudicate":
            response = client.post(url, {"ratings": [{"step": step, "rating": 1}]}, format="json")
        else:
            response = client.get(url)
        got[name] = response.status_code

    assert got == expected
    made = Annotation.objects.filter(source=AnnotationSource.ADJUDICATION).count()
    assert made == (1 if role == "lead" else 0)


def test_anonymous_callers_are_refused(project, disputed, api_client):
    for url in _urls(project, disputed).values():
        assert api_client.get(url).status_code in (401, 403)


def test_a_missing_chain_is_404(project, make_member, client_for):
    client = client_for(make_member(project, "lead"))

    assert client.get("/api/v1/chains/999999/labels/").status_code == 404


def test_disagreements_payload(project, disputed, make_member, client_for):
    ChainFactory(project=project)  # unlabeled: not listed
    client = client_for(make_member(project, "lead"))

    response = client.get(f"/api/v1/projects/{project.pk}/disagreements/")

    assert response.status_code == 200
    assert response.json()["count"] == 1
    [row] = response.json()["results"]
    assert row["chain"] == disputed.pk
    assert row["disagreeing_steps"] == 1 and row["spread"] == 2 and row["annotators"] == 2
    assert row["adjudicated"] is False


def test_adjudicate_then_labels_show_the_ruling_side_by_side(
    project, disputed, make_member, client_for
):
    lead = make_member(project, "lead")
    client = client_for(lead)
    step = disputed.steps.get(index=1).pk

    posted = client.post(
        f"/api/v1/chains/{disputed.pk}/adjudicate/",
        {"ratings": [{"step": step, "rating": -1}], "note": "step 2 divides by zero"},
        format="json",
    )
    labels = client.get(f"/api/v1/chains/{disputed.pk}/labels/")

    assert posted.status_code == 201
    assert posted.json()["note"] == "step 2 divides by zero"
    assert posted.json()["supersedes"] is None and posted.json()["by"] == lead.username
    body = labels.json()
    assert [c["by"] for c in body["columns"]] == ["ann", "bob", f"adjudication:{lead.username}"]
    assert [s["ratings"] for s in body["steps"]] == [[1, 1, None], [-1, 1, -1], [1, 1, None]]
    assert [s["consensus"] for s in body["steps"]] == [1, -1, 1]
    assert [s["support"] for s in body["steps"]] == [1.0, 1.0, 1.0]
    assert body["history"][-1]["note"] == "step 2 divides by zero"
    assert body["history"][-1]["ratings"] == {"1": -1}


@pytest.mark.parametrize(
    "payload",
    [
        {"ratings": []},
        {"ratings": [{"step": 999999, "rating": 1}]},
        {"ratings": [{"step": "STEP", "rating": 2}]},
        {"note": "no ratings"},
    ],
)
def test_adjudicate_rejects_bad_input(project, disputed, make_member, client_for, payload):
    client = client_for(make_member(project, "lead"))
    step = disputed.steps.get(index=1).pk
    for item in payload.get("ratings", []):
        if item["step"] == "STEP":
            item["step"] = step

    response = client.post(f"/api/v1/chains/{disputed.pk}/adjudicate/", payload, format="json")

    assert response.status_code == 400
    assert "ratings" in response.json()
    assert not Annotation.objects.filter(source=AnnotationSource.ADJUDICATION).exists()


def test_agreement_payload(project, disputed, make_member, client_for):
    client = client_for(make_member(project, "ml"))

    response = client.get(f"/api/v1/projects/{project.pk}/agreement/")

    assert response.status_code == 200
    body = response.json()
    # ann [1, -1, 1] vs bob [1, 1, 1]: n = (1, 0, 5); o(-1,+1) = o(+1,-1) = 1, o(+1,+1) = 4;
    # ordinal delta(-1,+1) = (6 - 3)^2 = 9; alpha = 1 - 5 * 18 / (2 * 1 * 5 * 9) = 0: the
    # disagreement observed is just what chance would give with these marginals
    assert body["alpha"] == pytest.approx(1 - 5 * 18 / 90)
    assert body["coincidences"] == [[0, 0, 1], [0, 0, 0], [1, 0, 4]]
    assert body["ratings"] == 6 and body["pairable_ratings"] == 6 and body["steps"] == 3
    assert body["first_error_pairs"] == 1 and body["first_error_agreement"] == 0.0
    assert sorted(a["username"] for a in body["annotators"]) == ["ann", "bob"]
    [pair] = body["pairs"]
    assert pair["steps"] == 3 and pair["alpha"] == pytest.approx(body["alpha"])


def test_a_ruling_resolves_its_chain_everywhere(project, disputed, make_member, client_for):
    # Given: one disputed chain, finished by its two passes
    Chain.objects.filter(pk=disputed.pk).update(finished_count=2, is_finished=True)
    chains_agreement_refresh(chains=Chain.objects.filter(pk=disputed.pk))
    client = client_for(make_member(project, "lead"))
    disagreements = f"/api/v1/projects/{project.pk}/disagreements/"
    chains = f"/api/v1/projects/{project.pk}/chains/"
    assert client.get(disagreements).json()["count"] == 1
    assert client.get(f"/api/v1/chains/{disputed.pk}/").json()["status"] == "disputed"

    # When: a lead rules on it
    step = disputed.steps.get(index=1).pk
    posted = client.post(
        f"/api/v1/chains/{disputed.pk}/adjudicate/",
        {"ratings": [{"step": step, "rating": -1}]},
        format="json",
    )
    assert posted.status_code == 201, posted.content

    # Then: it leaves the disagreements (the count falls) unless the resolved are asked for
    assert client.get(disagreements).json()["count"] == 0
    [again] = client.get(disagreements, {"include_resolved": "true"}).json()["results"]
    assert (again["chain"], again["adjudicated"]) == (disputed.pk, True)
    # ...and reads "resolved" on its page and in the data manager, whatever the filter
    assert client.get(f"/api/v1/chains/{disputed.pk}/").json()["status"] == "resolved"
    for status in ("finished", "resolved"):
        [row] = client.get(chains, {"status": status}).json()["results"]
        assert (row["id"], row["status"]) == (disputed.pk, "resolved")
    assert client.get(chains, {"status": "disputed"}).json()["results"] == []
