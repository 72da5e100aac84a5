"""CSRF on the HTML forms and the import's line-length limit.

(The sign-in lockout is tested in tests/test_sign_in_lockout.py; token revocation, CSRF
on session API calls and the upload size limit beside their code:
tests/annotation/api/test_auth_api.py and tests/annotation/datasets/test_import_api.py.)"""

from __future__ import annotations

import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from annotation.datasets.import_jobs import import_job_execute
from annotation.datasets.importers import MAX_LINE_BYTES
from annotation.models import Chain, ImportBatch, Role
from tests.conftest import REPO_ROOT
from tests.factories import MembershipFactory, ProjectFactory, UserFactory

PASSWORD = "pass-1234"  # tests.factories.UserFactory's


# ------------------------------------------------------------------ CSRF


def _csrf_client() -> tuple[Client, str]:
    """A browser-like client that enforces CSRF, with the token from the login page."""
    client = Client(enforce_csrf_checks=True)
    page = client.get("/login/")
    return client, page.cookies["csrftoken"].value


@pytest.mark.django_db
def test_login_form_without_the_csrf_token_is_403() -> None:
    user = UserFactory()
    client, _token = _csrf_client()
    response = client.post("/login/", {"username": user.username, "password": PASSWORD})
    assert response.status_code == 403
    assert "_auth_user_id" not in client.session


@pytest.mark.django_db
def test_login_form_with_the_csrf_token_logs_in() -> None:
    user = UserFactory()
    client, token = _csrf_client()
    response = client.post(
        "/login/",
        {"username": user.username, "password": PASSWORD, "csrfmiddlewaretoken": token},
    )
    assert response.status_code == 302
    assert client.session["_auth_user_id"] == str(user.pk)


@pytest.mark.django_db
def test_logout_form_needs_the_csrf_token() -> None:
    # Given: a logged-in session
    user = UserFactory()
    client, token = _csrf_client()
    client.post(
        "/login/",
        {"username": user.username, "password": PASSWORD, "csrfmiddlewaretoken": token},
    )
    token = client.cookies["csrftoken"].value  # rotated at login
    # When: another site posts to /logout/ without the token, nothing happens
    assert client.post("/logout/").status_code == 403
    assert client.get("/").status_code == 200
    # When: the page's own form posts it with the token, the session ends
    assert client.post("/logout/", {"csrfmiddlewaretoken": token}).status_code == 302
    assert client.get("/").status_code == 302


def test_every_post_form_in_the_templates_carries_the_csrf_token() -> None:
    """Every `<form method="post">` renders `{% csrf_token %}` (forms that post through
    the API from JavaScript send the X-CSRFToken header instead and use no method)."""
    form = re.compile(r"<form\b[^>]*\bmethod=\"post\"[^>]*>(.*?)</form>", re.S | re.I)
    offenders = []
    templates = sorted((REPO_ROOT / "templates").rglob("*.html"))
    assert templates
    for path in templates:
        for match in form.finditer(path.read_text()):
            if "{% csrf_token %}" not in match.group(1):
                offenders.append(str(path.relative_to(REPO_ROOT)))
    assert offenders == []


# ------------------------------------------------------------------ import line length


@pytest.mark.django_db
def test_an_import_line_over_the_limit_is_rejected_with_its_line_number() -> None:
    # Given: a lead and a file whose second line is one byte over the line limit
    project = ProjectFactory()
    lead = MembershipFactory(project=project, role=Role.LEAD).user
    first = b'{"problem": "What is 2+2?", "steps": ["2+2=4"]}\n'
    prefix = b'{"problem": "long", "steps": ["'
    suffix = b'"]}'
    long_line = prefix + b"x" * (MAX_LINE_BYTES + 1 - len(prefix) - len(suffix)) + suffix
    assert len(long_line) == MAX_LINE_BYTES + 1
    content = first + long_line + b"\n" + first.replace(b"2", b"3")
    client = Client()
    client.force_login(lead)
    # When: it is uploaded
    response = client.post(
        f"/api/v1/projects/{project.pk}/imports/",
        {"file": SimpleUploadedFile("chains.jsonl", content, "application/jsonl")},
    )
    assert response.status_code == 202, response.content
    import_job_execute(job_id=response.json()["id"])  # its task
    job = client.get(response.json()["url"]).json()
    # Then: the file is refused whole, naming line 2 and why
    assert job["status"] == "failed", job
    assert job["errors"] == [
        {
            "line": 2,
            "record": None,
            "where": "line 2",
            "reason": f"line longer than {MAX_LINE_BYTES} bytes",
        }
    ]
    assert (ImportBatch.objects.count(), Chain.objects.count()) == (0, 0)
