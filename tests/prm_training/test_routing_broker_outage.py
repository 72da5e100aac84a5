"""The lead's "Route now" while the task queue is down (issue 23, routing): the lead is
told, with a 503 that says to try again; once Redis is back the same button sends the
pass. Against a private redis-server, stopped and started (``private_broker``)."""

from __future__ import annotations

from typing import Any

import pytest
from prm_worker import PrivateRedis

from annotation.models import Role

pytestmark = [pytest.mark.redis, pytest.mark.django_db]


def test_route_now_says_when_the_queue_is_down_and_works_once_it_is_back(
    private_broker: PrivateRedis, project: Any, make_member: Any, client_for: Any
) -> None:
    lead = client_for(make_member(project, Role.LEAD))
    url = f"/api/v1/projects/{project.pk}/routing/run/"

    # When Redis is down, the lead's "Route now" is refused with a reason
    private_broker.stop()
    down = lead.post(url)
    assert down.status_code == 503, down.content
    assert down.json()["detail"] == "The task queue could not be reached; try again."

    # And once it is back, the pass is sent
    private_broker.start()
    assert lead.post(url).status_code == 202
