"""The evaluation set endpoints: a lead marks, lists and unmarks; ML staff read."""

from __future__ import annotations

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from annotation.models import Chain
from tests.factories import ChainFactory, ImportBatchFactory, annotation_with_ratings

pytestmark = pytest.mark.django_db


def _client(user) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


def test_a_lead_marks_an_import_ml_staff_read_it_and_the_lead_unmarks_it(project, make_member):
    batch = ImportBatchFactory(project=project, filename="unseen.jsonl")
    chains = [ChainFactory(project=project, import_batch=batch) for _ in range(3)]
    annotation_with_ratings(chain=chains[0], labels=[1, 1, -1], import_batch=batch)
    lead, ml = make_member(project, "lead"), make_member(project, "ml")
    url = reverse("api-evaluation-sets", kwargs={"project_id": project.pk})

    response = _client(ml).post(url, {"import_batch": batch.pk}, format="json")
    assert response.status_code == 403
    response = _client(lead).post(url, {"import_batch": batch.pk}, format="json")
    assert response.status_code == 201, response.content
    marked = response.json()
    assert (marked["name"], marked["chains"], marked["labeled_chains"]) == ("unseen.jsonl", 3, 1)
    again = _client(lead).post(url, {"import_batch": batch.pk, "name": "x"}, format="json")
    assert again.status_code == 400 and "import_batch" in again.json()
    assert _client(lead).post(url, {"import_batch": 10**12}, format="json").status_code == 404

    listed = _client(ml).get(url).json()
    assert [row["id"] for row in listed] == [marked["id"]]

    detail = reverse("api-evaluation-set", kwargs={"evaluation_set_id": marked["id"]})
    assert _client(ml).delete(detail).status_code == 403
    assert _client(lead).delete(detail).status_code == 204
    assert not Chain.objects.filter(evaluation_set__isnull=False).exists()
    assert _client(lead).delete(detail).status_code == 404


def test_a_lead_holds_out_chains_named_all_or_nothing(project, make_member):
    chains = [ChainFactory(project=project) for _ in range(3)]
    other = ChainFactory()
    client = _client(make_member(project, "lead"))
    url = reverse("api-evaluation-sets", kwargs={"project_id": project.pk})
    ids = [chain.pk for chain in chains[:2]]

    both = client.post(url, {"import_batch": 1, "chain_ids": ids, "name": "x"}, format="json")
    assert both.status_code == 400
    unnamed = client.post(url, {"chain_ids": ids}, format="json")
    assert unnamed.status_code == 400 and "name" in unnamed.json()
    foreign = client.post(url, {"chain_ids": [*ids, other.pk], "name": "part"}, format="json")
    assert foreign.status_code == 400 and str(other.pk) in str(foreign.json())
    assert not Chain.objects.filter(evaluation_set__isnull=False).exists()

    marked = client.post(url, {"chain_ids": ids, "name": "part"}, format="json")
    assert marked.status_code == 201, marked.content
    assert (marked.json()["chains"], marked.json()["filename"]) == (2, None)
    again = client.post(url, {"chain_ids": [ids[0]], "name": "again"}, format="json")
    assert again.status_code == 400
    held = set(Chain.objects.filter(evaluation_set__isnull=False).values_list("pk", flat=True))
    assert held == set(ids)


def test_a_hundred_thousand_ids_are_read_in_batches_not_a_database_outage(project, make_member):
    # Given: the schema's most ids (100,000: more parameters than PostgreSQL takes in one
    # statement), of which three are the project's chains
    chains = [ChainFactory(project=project) for _ in range(3)]
    client = _client(make_member(project, "lead"))
    client.raise_request_exception = False
    url = reverse("api-evaluation-sets", kwargs={"project_id": project.pk})
    start = max(chain.pk for chain in chains) + 1
    ids = [chain.pk for chain in chains] + list(range(start, start + 99_997))

    # When: a lead names them all
    response = client.post(url, {"chain_ids": ids, "name": "all of them"}, format="json")

    # Then: the answer is about the ids (most are no chains of the project), not a 503
    assert response.status_code == 400, response.content
    assert str(start) in response.json()["chain_ids"][0]
    # ...and one id more than the schema takes is refused by the schema
    over = client.post(url, {"chain_ids": [*ids, start + 99_997], "name": "x"}, format="json")
    assert over.status_code == 400 and "chain_ids" in over.json()
