"""Routing passes on a real Celery worker (Redis broker, a worker process against the
test database): a lead's rule change sends one once it commits, and "Route now" sends
one at once; the worker routes the chains either way. The machine-label run's side is
tests/prm_training/services/test_machine_label_routing.py."""

from __future__ import annotations

from typing import Any

import pytest

from annotation.models import ChainRouting, Project, Role
from tests.annotation.import_worker import import_worker  # noqa: F401 - a fixture
from tests.annotation.routing.routing_lab import RULES, routing_chains, routing_of
from tests.factories import MembershipFactory
from tests.prm_training.prm_worker import WorkerHandle, wait_until

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]


def _routed(chains: dict[str, Any], worker: WorkerHandle) -> None:
    wait_until(
        lambda: routing_of(chains["agreed"]) == ChainRouting.AGREED,
        timeout=60,
        what="the routing pass",
        diagnose=lambda: worker.output()[-4000:],
    )
    assert routing_of(chains["disputed"]) == ChainRouting.DISAGREED
    assert routing_of(chains["plain"]) == ChainRouting.NONE
    assert "annotation.chains_route[" in worker.output()


def test_a_lead_s_rule_change_routes_the_chains_on_a_worker(
    import_worker: WorkerHandle,  # noqa: F811 - the fixture
    client_for: Any,
) -> None:
    # Given: trusted sources, chains they agree and disagree on, and no rules yet
    project = MembershipFactory(role=Role.LEAD).project
    lead = project.memberships.get().user
    chains = routing_chains(project)

    # When: the lead names the sources and opts in
    response = client_for(lead).patch(f"/api/v1/projects/{project.pk}/", RULES, format="json")

    # Then: the worker routes them
    assert response.status_code == 200, response.content
    _routed(chains, import_worker)


def test_route_now_routes_the_chains_on_a_worker(
    import_worker: WorkerHandle,  # noqa: F811 - the fixture
    client_for: Any,
) -> None:
    # Given: rules set without a pass (as if the pass was lost with the broker)
    project = MembershipFactory(role=Role.LEAD).project
    lead = project.memberships.get().user
    Project.objects.filter(pk=project.pk).update(**RULES)
    chains = routing_chains(project)

    response = client_for(lead).post(f"/api/v1/projects/{project.pk}/routing/run/")

    assert response.status_code == 202, response.content
    _routed(chains, import_worker)
