"""Bad input against the whole API: schemathesis generates requests from `/api/schema/`
(valid and invalid bodies, query strings and ids per operation) and sends them to the
Django app in-process, authenticated as a lead (and as an ML staff member) of a seeded
project. No request may end in a server error: bad input gets a 4xx, always.

Bounded: schemathesis's coverage examples (boundary and invalid values, wrong methods:
some tens per operation) plus STEPLAB_FUZZ_EXAMPLES random ones (default 10); about
6,000 requests in all, a few minutes. Ids in the path are the seeded project's, so the
generated bodies reach the code behind the access checks instead of stopping at a 404."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.utils import timezone
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from annotation.models import Assignment, ImportJob, Invite, Role
from annotation.webhooks.services import webhook_create, webhook_test_send
from config.wsgi import application
from prm_training.models import RunStatus, TrainingRun
from tests.factories import (
    ChainFactory,
    MembershipFactory,
    ProjectFactory,
    api_token_key,
    scoring_run_with_model_version,
)

MAX_EXAMPLES = int(os.environ.get("STEPLAB_FUZZ_EXAMPLES", "10"))

schema = schemathesis.openapi.from_wsgi("/api/schema/", application)

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def keep_the_test_connection() -> Iterator[None]:
    """The app is called as plain WSGI, so Django would close the database connection
    at the end of each request, and with it the test's transaction. Django's own test
    client detaches the same handlers."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture(params=[Role.LEAD, Role.ML])
def seeded(request: Any, db: Any) -> dict[str, Any]:
    """A project with a chain, a lease, a snapshot, runs and a model version; the caller
    (a lead, or ML staff) with an API token; the ids that path parameters may name."""
    project = ProjectFactory()
    caller = MembershipFactory(project=project, role=request.param).user
    annotator = MembershipFactory(project=project, role=Role.ANNOTATOR).user
    chain = ChainFactory(project=project)
    ChainFactory(project=project)
    lease = Assignment.objects.create(
        project=project,
        chain=chain,
        annotator=caller,
        expires_at=timezone.now() + timedelta(hours=1),
    )
    scoring = scoring_run_with_model_version(project=project, content_hash="fuzz")
    run = TrainingRun.objects.create(project=project, status=RunStatus.QUEUED)
    import_job = ImportJob.objects.create(
        project=project, filename="fuzz.jsonl", stored_name="fuzz.upload", size=1
    )
    invite = Invite.objects.create(
        project=project,
        role=Role.ANNOTATOR,
        email="fuzz@lab.example",
        selector="f" * 16,
        token_hash="0" * 64,
        expires_at=timezone.now() + timedelta(days=1),
    )
    token_key = api_token_key(caller)
    webhook = webhook_create(
        project=project, user=None, url="http://127.0.0.1:9/fuzz", events=["chain.finished"]
    )
    delivery = webhook_test_send(webhook=webhook)
    return {
        "headers": {"Authorization": f"Token {token_key}"},
        "ids": {
            "project_id": project.pk,
            "id": project.pk,
            "assignment_id": lease.pk,
            "chain_id": chain.pk,
            "run_id": run.pk,
            "version_id": scoring.model_version_id,
            "scoring_run_id": scoring.pk,
            "user_id": annotator.pk,
            "job_id": import_job.pk,
            "invite_id": invite.pk,
            "webhook_id": webhook.pk,
            "delivery_id": delivery.pk,
        },
    }


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
def test_no_server_error(case: Any, seeded: dict[str, Any]) -> None:
    if case.path_parameters:
        case.path_parameters = {
            name: seeded["ids"].get(name, value) for name, value in case.path_parameters.items()
        }
    response = case.call(headers=seeded["headers"])
    case.validate_response(response, checks=[not_a_server_error])
