"""Who sees routing's card on the project page (issue 23, item 7): leads (the dashboard,
with "Route now") and ML staff (the overview, without it); annotators never, nor its
script or its endpoints."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from annotation.models import Project

pytestmark = pytest.mark.django_db


def _page(project: Project, user: Any) -> str:
    client = Client()
    client.force_login(user)
    response = client.get(f"/projects/{project.pk}/")
    assert response.status_code == 200
    return response.content.decode()


@pytest.mark.parametrize(
    ("role", "card", "button"),
    [("lead", True, True), ("ml", True, False), ("annotator", False, False)],
)
def test_the_routing_card_is_for_leads_and_ml_staff(
    project: Project, make_member: Any, role: str, card: bool, button: bool
) -> None:
    html = _page(project, make_member(project, role))

    assert ('id="db-routing"' in html) is card
    assert ("js/routing.js" in html) is card
    assert (f"/api/v1/projects/{project.pk}/routing/" in html) is card
    assert ('id="btn-route"' in html) is button
