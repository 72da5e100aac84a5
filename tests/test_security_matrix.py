"""Who may do what: every URL pattern of the project × every method its view answers ×
five callers, with the status each must get (invariant 6).

The callers: anonymous, and on project P an annotator, a lead and an ML staff member,
plus an outsider who leads another project. Every id in the URL (project, assignment,
chain, training run, model version, scoring run, member, invitation) belongs to P, so
for the outsider each one is a foreign id and must be a 404, never a 403 or a leak.

The matrix is the list of record: `test_every_url_is_in_the_matrix` walks the URL
resolver and fails when a route or a method is missing here, so a new endpoint cannot
ship without someone deciding who may call it. Admin and static files are exempt (Django
admin checks `is_staff` itself; they are listed in EXEMPT).

Statuses: a number is exact. OK means the caller got past every access check: the
request reached the view's own logic, which may still answer 400 (the matrix sends
empty bodies), 409 or 415, but never 401, 403, 404 or a 5xx."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.utils import timezone
from rest_framework.test import APIClient

from annotation.api.tokens import api_token_create
from annotation.datasets.evaluation_sets import evaluation_set_mark
from annotation.models import Assignment, BulkAction, ImportJob, Invite, Role, Step
from annotation.public_ids import ASSIGNMENT_IDS, STEP_IDS
from annotation.webhooks.services import webhook_create, webhook_test_send
from prm_training.models import (
    EvaluationRun,
    MachineLabelRun,
    RunStatus,
    SimulationRun,
    TrainingRun,
)
from tests.factories import (
    ChainFactory,
    ImportBatchFactory,
    MembershipFactory,
    ProjectFactory,
    annotation_with_ratings,
    scoring_run_with_model_version,
)
from tests.module_rows import rows_for_the_module

OK = "ok"
ROLES = ("anonymous", "annotator", "lead", "ml", "outsider")
# Where a view reached its own logic with an empty body: not an access decision.
OK_STATUSES = {200, 201, 202, 204, 400, 409, 415}

# Route names (or path prefixes) deliberately outside the matrix, with the reason.
EXEMPT = {
    "admin": "Django admin: its own is_staff check, tested in tests/annotation/test_admin.py",
}

# Shorthands for common rows: (anonymous, annotator, lead, ml, outsider).
API_MEMBERS = (401, OK, OK, OK, 404)
API_LEADS = (401, 403, OK, 403, 404)
API_ML = (401, 403, 403, OK, 404)
API_ML_AND_LEADS = (401, 403, OK, OK, 404)
PAGE_MEMBERS = (302, 200, 200, 200, 404)
# An assignment is its annotator's own: anyone else, in the project or not, gets 404.
API_OWN_ASSIGNMENT = (401, OK, 404, 404, 404)

MATRIX: dict[str, dict[str, tuple[object, ...]]] = {
    # ---------------------------------------------------------------- service
    "healthz": {"get": (200, 200, 200, 200, 200), "post": (405, 405, 405, 405, 405)},
    # ---------------------------------------------------------------- auth
    "api-auth-token": {"post": (400, 400, 400, 400, 400), "delete": (401, 204, 204, 204, 204)},
    # Every signed-in user's own API tokens (an empty body names no token: 400); the token
    # in the URL is the annotator's, so anyone else gets 404.
    "api-auth-tokens": {"get": (401, 200, 200, 200, 200), "post": (401, 400, 400, 400, 400)},
    "api-auth-token-revoke": {"delete": (401, 204, 404, 404, 404)},
    "tokens-page": {"get": (302, 200, 200, 200, 200)},
    "login": {
        "get": (200, 302, 302, 302, 302),
        "post": (200, 302, 302, 302, 302),
        "put": (200, 302, 302, 302, 302),
    },
    "logout": {"post": (302, 302, 302, 302, 302)},
    # Single sign-on (annotation/sso.py). The matrix configures no provider, so a
    # provider's sign-in and callback are 404 for everyone; who a configured provider
    # lets in is tests/sso/. The page for a sign-in cancelled at the provider: anyone.
    "openid_connect_login": {"get": (404,) * 5, "post": (404,) * 5},
    "openid_connect_callback": {"get": (404,) * 5},
    # SAML (annotation/sso_saml.py): likewise, no organization is configured, so each of
    # its URLs is 404, the IdP's POST to the assertion consumer included.
    "saml_login": {"get": (404,) * 5, "post": (404,) * 5},
    "saml_acs": {"get": (404,) * 5, "post": (404,) * 5},
    "saml_finish_acs": {"get": (404,) * 5},
    "saml_metadata": {"get": (404,) * 5},
    "saml_sls": {"get": (404,) * 5},
    "socialaccount_login_cancelled": {"get": (200,) * 5},
    # Every signed-in user's own password (an empty form is a 200 with its errors).
    "password_change": {
        "get": (302, 200, 200, 200, 200),
        "post": (302, 200, 200, 200, 200),
        "put": (302, 200, 200, 200, 200),
    },
    "password_change_done": {"get": (302, 200, 200, 200, 200)},
    # ---------------------------------------------------------------- projects
    # Creating a project is for site staff; none of these callers is staff.
    "api-projects": {"get": (401, 200, 200, 200, 200), "post": (401, 403, 403, 403, 403)},
    "api-project": {"get": API_MEMBERS, "patch": API_LEADS},
    # Members see who else is on the project (the overview page shows it too).
    "api-project-members": {"get": API_MEMBERS, "post": API_LEADS},
    "api-project-member": {"delete": API_LEADS, "patch": API_LEADS},
    # Invitations: a lead invites into their own project only (an outsider, who leads
    # another project, gets 404), and sees and revokes its pending invitations.
    "api-project-invites": {"get": API_LEADS, "post": API_LEADS},
    "api-project-invites-bulk": {"post": API_LEADS},
    # Webhooks: a project's leads only (the secret is in every answer).
    "api-project-webhooks": {"get": API_LEADS, "post": API_LEADS},
    "api-project-webhook": {"get": API_LEADS, "patch": API_LEADS, "delete": API_LEADS},
    "api-project-webhook-test": {"post": API_LEADS},
    "api-project-webhook-deliveries": {"get": API_LEADS},
    "api-project-webhook-delivery-replay": {"post": API_LEADS},
    "api-project-invite-revoke": {"post": API_LEADS},
    # Renders the body's Markdown and reads nothing else (the create page previews before
    # there is a project): any signed-in user.
    "api-guidelines-preview": {"post": (401, OK, OK, OK, OK)},
    "api-project-imports": {"post": API_LEADS},
    "api-project-import-job": {"get": API_LEADS},
    "api-project-dashboard": {"get": API_LEADS},
    # Each machine source against people and gold: what leads route by, ML staff weigh.
    "api-project-machine-quality": {"get": API_ML_AND_LEADS},
    "api-project-routing": {"get": API_ML_AND_LEADS},
    "api-project-routing-run": {"post": API_LEADS},
    # ---------------------------------------------------------------- labeling queue
    "assignment-next": {"post": API_MEMBERS},
    "assignment-prefetch": {"post": API_MEMBERS},
    "assignment-submit": {"post": API_OWN_ASSIGNMENT},
    "assignment-renew": {"post": API_OWN_ASSIGNMENT},
    "assignment-skip": {"post": API_OWN_ASSIGNMENT},
    "assignment-flag": {"post": API_OWN_ASSIGNMENT},
    "assignment-submit-and-next": {"post": API_OWN_ASSIGNMENT},
    "project-my-stats": {"get": API_MEMBERS},
    # Every member reads their own history (a lead, any member's with ?annotator=). A
    # submitted chain reopens for its annotator and the project's leads; for anyone else
    # the annotation is not there (404, as a lease).
    "api-project-history": {"get": API_MEMBERS},
    "api-project-history-chain": {"get": (401, 200, 200, 404, 404)},
    # Only its annotator revises a pass: a lead reads it but gets 404 here, as anyone else.
    "api-project-history-revise": {"post": (401, OK, 404, 404, 404)},
    # ---------------------------------------------------------------- datasets
    # ML staff read the snapshots they train on; only leads freeze new ones.
    "api-project-snapshots": {"get": API_ML_AND_LEADS, "post": API_LEADS},
    "api-project-export": {"get": API_LEADS},
    # A diff shows chains' labels, as an export does: leads only.
    "api-project-snapshot-diff": {"get": API_LEADS},
    # ---------------------------------------------------------------- review and gold
    "api-project-disagreements": {"get": API_LEADS},
    "api-project-agreement": {"get": API_ML_AND_LEADS},
    "api-chain-labels": {"get": API_LEADS},
    "api-chain-adjudicate": {"post": API_LEADS},
    "api-project-flags": {"get": API_LEADS},
    "api-chain-unflag": {"post": API_LEADS},
    # The data manager: a project's chains, one chain, asking it for more labels, naming
    # its reviewer, and the bulk actions (count first, then do, then follow).
    "api-project-chains": {"get": API_LEADS},
    "api-chain": {"get": API_LEADS},
    "api-chain-requeue": {"post": API_LEADS},
    "api-chain-reviewer": {"post": API_LEADS},
    "api-chains-bulk-preview": {"post": API_LEADS},
    "api-chains-bulk": {"post": API_LEADS},
    "api-chains-bulk-action": {"get": API_LEADS},
    "api-gold-chains": {"get": API_LEADS},
    "api-gold-mark": {"post": API_LEADS},
    "api-gold-unmark": {"post": API_LEADS},
    "api-gold-from-import": {"post": API_LEADS},
    "api-gold-scores": {"get": API_LEADS},
    "api-gold-screening-reset": {"post": API_LEADS},
    "api-evaluation-sets": {"get": API_ML_AND_LEADS, "post": API_LEADS},
    "api-evaluation-set": {"delete": API_LEADS},
    # ---------------------------------------------------------------- PRM loop
    "api-training-runs": {"get": API_ML_AND_LEADS, "post": API_ML},
    "api-training-run": {"get": API_ML_AND_LEADS},
    "api-training-run-cancel": {"post": API_ML},
    "api-training-run-retry": {"post": API_ML},
    "api-model-versions": {"get": API_ML_AND_LEADS},
    "api-model-version-activate": {"post": API_ML},
    "api-evaluation-results": {"get": API_ML_AND_LEADS},
    # The runs that score every version on the sets it lacks figures on: queued by what
    # leaves a gap; ML staff may ask for one.
    "api-evaluation-runs": {"get": API_ML_AND_LEADS, "post": API_ML},
    "api-evaluation-run": {"get": API_ML_AND_LEADS},
    "api-evaluation-run-cancel": {"post": API_ML},
    "api-training-settings": {"get": API_ML_AND_LEADS, "patch": API_ML},
    "api-backbones": {"get": API_ML_AND_LEADS},
    "api-scoring-runs": {"get": API_ML_AND_LEADS, "post": API_ML},
    "api-scoring-run": {"get": API_ML_AND_LEADS},
    "api-scoring-run-cancel": {"post": API_ML},
    "api-scoring-run-retry": {"post": API_ML},
    "api-simulation-runs": {"get": API_ML_AND_LEADS, "post": API_ML},
    "api-simulation-run": {"get": API_ML_AND_LEADS},
    "api-simulation-run-cancel": {"post": API_ML},
    "api-simulation-run-retry": {"post": API_ML},
    # Machine-label runs import chains and write machine labels: ML staff and leads.
    "api-machine-label-runs": {"get": API_ML_AND_LEADS, "post": API_ML_AND_LEADS},
    "api-machine-label-run": {"get": API_ML_AND_LEADS},
    "api-machine-label-run-cancel": {"post": API_ML_AND_LEADS},
    "api-machine-label-run-retry": {"post": API_ML_AND_LEADS},
    "api-machine-label-run-judge-samples": {"get": API_ML_AND_LEADS},
    # ---------------------------------------------------------------- API docs
    "schema": {"get": (200, 200, 200, 200, 200)},
    "api-docs": {"get": (200, 200, 200, 200, 200)},
    "api-redoc": {"get": (200, 200, 200, 200, 200)},
    # ---------------------------------------------------------------- pages
    "home": {"get": (302, 200, 200, 200, 200)},
    # Where an invitation's link lands: anyone, since the person may have no account yet.
    # The matrix's empty POST opens no invitation (a page asking for the link).
    "invite": {"get": (200, 200, 200, 200, 200), "post": (200, 200, 200, 200, 200)},
    "project-overview": {"get": PAGE_MEMBERS},
    "label-workspace": {"get": PAGE_MEMBERS},
    "history-page": {"get": PAGE_MEMBERS},
    "review-page": {"get": (302, 403, 200, 403, 404)},
    "chains-page": {"get": (302, 403, 200, 403, 404)},
    "chain-page": {"get": (302, 403, 200, 403, 404)},
    "snapshots-page": {"get": (302, 403, 200, 403, 404)},
    "import-page": {"get": (302, 403, 200, 403, 404)},
    # Creating a project is for site staff (as the API's create); none of these is staff.
    "project-new": {"get": (302, 403, 403, 403, 403)},
    "project-settings": {"get": (302, 403, 200, 403, 404)},
    "project-members": {"get": (302, 403, 200, 403, 404)},
    "webhooks-page": {"get": (302, 403, 200, 403, 404)},
    "project-models": {"get": (302, 403, 200, 200, 404)},
}


# ------------------------------------------------------------------ the URL resolver


def _walk(patterns: list[Any], prefix: str = "") -> Iterator[tuple[str, URLPattern]]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _walk(pattern.url_patterns, prefix + str(pattern.pattern))
        else:
            yield prefix + str(pattern.pattern), pattern


def _exempt(route: str, name: str | None) -> bool:
    return any(route.startswith(f"{key}/") or name == key for key in EXEMPT)


def _view_methods(pattern: URLPattern) -> set[str]:
    """The methods the view answers (besides HEAD and OPTIONS). Function views say it
    through ``require_GET``/``require_POST``-style decorators we cannot see, so they
    declare GET unless the matrix lists more."""
    view = pattern.callback
    cls = getattr(view, "view_class", None) or getattr(view, "cls", None)
    if cls is None:
        return {"get"}
    return {m for m in cls.http_method_names if m not in ("head", "options") and hasattr(cls, m)}


def named_routes() -> dict[str, tuple[str, URLPattern]]:
    routes: dict[str, tuple[str, URLPattern]] = {}
    for route, pattern in _walk(get_resolver().url_patterns):
        if _exempt(route, pattern.name):
            continue
        routes[pattern.name or route] = (route, pattern)
    return routes


def test_every_url_is_in_the_matrix() -> None:
    routes = named_routes()
    unnamed = [key for key, (route, pattern) in routes.items() if pattern.name is None]
    assert unnamed == [], f"give these routes a name so the matrix can list them: {unnamed}"
    missing = sorted(set(routes) - set(MATRIX))
    assert missing == [], f"new URLs with no row in MATRIX (decide who may call them): {missing}"
    stale = sorted(set(MATRIX) - set(routes))
    assert stale == [], f"MATRIX rows for URLs that no longer exist: {stale}"
    for name, (_route, pattern) in routes.items():
        unlisted = _view_methods(pattern) - set(MATRIX[name])
        assert not unlisted, f"{name}: methods {sorted(unlisted)} are not in MATRIX"


# ------------------------------------------------------------------ the world


@pytest.fixture(scope="module")
def world_rows(django_db_setup: None, django_db_blocker: Any) -> Iterator[dict[str, Any]]:
    """The world, made once for the module (tests/module_rows.py): about 30 rows, which
    cost more than the request most tests of the matrix send."""
    yield from rows_for_the_module(django_db_blocker, _world)


@pytest.fixture
def world(world_rows: dict[str, Any], db: Any) -> dict[str, Any]:
    """Project P with an annotator, a lead and an ML member; an outsider leading Q; one
    object of each kind in P that a URL can name. What a test writes is undone after it
    (its ``db`` savepoint); the world itself stays for the module's next test."""
    return world_rows


def _world() -> dict[str, Any]:
    project = ProjectFactory()
    users = {
        role: MembershipFactory(project=project, role=getattr(Role, role.upper())).user
        for role in ("annotator", "lead", "ml")
    }
    users["outsider"] = MembershipFactory(project=ProjectFactory(), role=Role.LEAD).user
    chain = ChainFactory(project=project)
    assignment = Assignment.objects.create(
        project=project,
        chain=chain,
        annotator=users["annotator"],
        expires_at=timezone.now() + timedelta(hours=1),
    )
    # The annotator's submit of another chain (the lease above stays live).
    submitted = annotation_with_ratings(
        chain=ChainFactory(project=project), annotator=users["annotator"], labels=[1, 1, 1]
    )
    run = TrainingRun.objects.create(project=project, status=RunStatus.QUEUED)
    import_job = ImportJob.objects.create(
        project=project, filename="matrix.jsonl", stored_name="matrix.upload", size=1
    )
    scoring = scoring_run_with_model_version(project=project, content_hash="matrix")
    simulation = SimulationRun.objects.create(project=project, size="quick", seeds=3, rounds=2)
    machine = MachineLabelRun.objects.create(project=project, kind="judge", model_name="lm")
    invite = Invite.objects.create(
        project=project,
        role=Role.ANNOTATOR,
        email="matrix@lab.example",
        selector="0" * 16,
        token_hash="0" * 64,
        invited_by=users["lead"],
        expires_at=timezone.now() + timedelta(days=1),
    )
    held_out = ChainFactory(project=project, import_batch=ImportBatchFactory(project=project))
    evaluation_set = evaluation_set_mark(project=project, import_batch_id=held_out.import_batch_id)
    # Marked after a version exists: the set queued a run to measure it.
    evaluation = EvaluationRun.objects.get(project=project, status=RunStatus.QUEUED)
    bulk = BulkAction.objects.create(
        project=project, created_by=users["lead"], kind="unflag", chain_ids=[chain.pk]
    )
    api_token = api_token_create(user=users["annotator"], name="matrix").token
    webhook = webhook_create(
        project=project, user=users["lead"], url="http://127.0.0.1:9/", events=["chain.finished"]
    )
    delivery = webhook_test_send(webhook=webhook)
    ids = {
        "token_id": api_token.pk,
        "project_id": project.pk,
        # Leases are named by their public ids, as annotators read them.
        "assignment_id": ASSIGNMENT_IDS.show(assignment.pk, viewer=None),
        "chain_id": chain.pk,
        "run_id": run.pk,
        "version_id": scoring.model_version_id,
        "scoring_run_id": scoring.pk,
        "simulation_run_id": simulation.pk,
        "machine_label_run_id": machine.pk,
        "evaluation_run_id": evaluation.pk,
        "user_id": users["annotator"].pk,
        "annotation_id": submitted.pk,
        "job_id": import_job.pk,
        "invite_id": invite.pk,
        "bulk_id": bulk.pk,
        "evaluation_set_id": evaluation_set.pk,
        "webhook_id": webhook.pk,
        "delivery_id": delivery.pk,
        "provider_id": "lab",
        "organization_slug": "acme",
    }
    return {"users": users, "ids": ids}


def _body(name: str, ids: dict[str, int]) -> dict[str, Any]:
    """A well-formed body where the view validates before it looks the object up, so
    the access decision, not the validation, answers."""
    if name in ("assignment-submit", "assignment-submit-and-next"):
        # (steps named as the lease holder, the annotator, reads them)
        steps = Step.objects.filter(chain_id=ids["chain_id"]).order_by("index")
        viewer = ids["user_id"]
        return {
            "ratings": [{"step": STEP_IDS.of(step, viewer=viewer), "rating": 1} for step in steps]
        }
    if name in ("assignment-skip", "assignment-flag"):
        return {"reason": "security matrix"}
    if name == "api-chains-bulk-preview":
        # A whole action (into the project's evaluation set): a lead's is counted (200),
        # everyone else's refused before it is read. (The create's is left empty: a
        # well-formed one would send a task.)
        return {
            "action": "evaluation_add",
            "evaluation_set": ids["evaluation_set_id"],
            "chain_ids": [ids["chain_id"]],
        }
    return {}


def _client(world: dict[str, Any], role: str) -> APIClient:
    client = APIClient()
    if role != "anonymous":
        client.force_login(world["users"][role])
    return client


def route_url(name: str, ids: dict[str, int]) -> str:
    route, pattern = named_routes()[name]
    kwargs = {key: ids[key] for key in pattern.pattern.converters}
    return reverse(name, kwargs=kwargs)


CASES = [
    pytest.param(name, method, index, id=f"{name}-{method}-{role}")
    for name, methods in MATRIX.items()
    for method in methods
    for index, role in enumerate(ROLES)
]


@pytest.mark.parametrize(("name", "method", "role_index"), CASES)
def test_status_for_each_role(
    world: dict[str, Any], name: str, method: str, role_index: int
) -> None:
    role = ROLES[role_index]
    expected = MATRIX[name][method][role_index]
    url = route_url(name, world["ids"])
    client = _client(world, role)
    send = getattr(client, method)
    if method in ("post", "patch", "put"):
        response = send(url, _body(name, world["ids"]), format="json")
    else:
        response = send(url)
    status = response.status_code
    if expected == OK:
        assert status in OK_STATUSES, f"{role} {method.upper()} {url}: {status}"
    else:
        assert status == expected, f"{role} {method.upper()} {url}: {status}, not {expected}"
    assert status < 500
