"""API tokens on both of the API's doors (the queue's token door for next and submit,
DRF's authentication class for everything else): a token of an active user passes until
it expires or its user's password changes (then 401, on either door), an unknown or
revoked one is 401, and a read-only token reads but never writes (403)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from annotation.models import ApiToken, Assignment
from tests.factories import ChainFactory, UserFactory, api_token_key

pytestmark = pytest.mark.django_db


def next_url(project) -> str:
    return f"/api/v1/projects/{project.pk}/assignments/next/"


def token_client(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def _doors(client: APIClient, project) -> tuple[int, int, int]:
    """(next: the token door, submit: the token door, the projects list: DRF's door)."""
    return (
        client.post(next_url(project)).status_code,
        client.post("/api/v1/assignments/1/submit/", {"ratings": []}, format="json").status_code,
        client.get("/api/v1/projects/").status_code,
    )


def test_a_valid_token_claims(project, make_member) -> None:
    ChainFactory(project=project)
    user = make_member(project)

    response = token_client(api_token_key(user)).post(next_url(project))

    assert response.status_code == 200
    assert Assignment.objects.get().annotator == user
    assert ApiToken.objects.get().last_used_at is not None


def test_an_unknown_or_revoked_token_is_401(project, make_member) -> None:
    ChainFactory(project=project)
    key = api_token_key(make_member(project))

    assert _doors(token_client("0" * 40), project) == (401, 401, 401)
    ApiToken.objects.all().delete()
    assert _doors(token_client(key), project) == (401, 401, 401)
    assert not Assignment.objects.exists()


def test_an_inactive_users_token_is_401(project, make_member) -> None:
    ChainFactory(project=project)
    user = make_member(project)
    key = api_token_key(user)
    user.is_active = False
    user.save()

    assert _doors(token_client(key), project) == (401, 401, 401)
    assert not Assignment.objects.exists()


def test_an_expired_token_is_401(project, make_member) -> None:
    ChainFactory(project=project)
    key = api_token_key(make_member(project))
    ApiToken.objects.update(expires_at=timezone.now() - timedelta(seconds=1))

    client = token_client(key)
    assert _doors(client, project) == (401, 401, 401)
    assert client.get("/api/v1/projects/").json() == {"detail": "Token expired."}
    assert not Assignment.objects.exists()


def test_a_password_change_ends_every_token(project, make_member) -> None:
    # Given an annotator with two tokens in use
    ChainFactory(project=project)
    user = make_member(project)
    keys = [api_token_key(user, name="laptop"), api_token_key(user, name="script")]
    assert token_client(keys[0]).get("/api/v1/projects/").status_code == 200

    # When the password changes (here as the admin or changepassword would: no hook runs)
    user.set_password("a-new-password-5678")
    user.save()

    # Then neither token opens either door
    for key in keys:
        client = token_client(key)
        assert _doors(client, project) == (401, 401, 401)
        assert client.get("/api/v1/projects/").json() == {
            "detail": "Token ended by a password change."
        }
    assert not Assignment.objects.exists()


def test_a_read_only_token_reads_and_never_writes(project, make_member) -> None:
    ChainFactory(project=project)
    client = token_client(api_token_key(make_member(project), scope="read"))

    assert _doors(client, project) == (403, 403, 200)
    assert client.delete("/api/v1/auth/token/").status_code == 403
    assert ApiToken.objects.count() == 1
    assert not Assignment.objects.exists()


def test_a_token_of_a_non_member_is_404(project, make_member) -> None:
    ChainFactory(project=project)

    assert token_client(api_token_key(UserFactory())).post(next_url(project)).status_code == 404


def test_next_over_a_token_takes_one_query_for_the_user(
    project, make_member, django_assert_num_queries
) -> None:
    ChainFactory.create_batch(3, project=project)
    client = token_client(api_token_key(make_member(project)))
    client.post(next_url(project))

    # user by token with the project and the membership check (the token door, one query;
    # its use was recorded by the first request); savepoint, lock user, own live leases,
    # release; steps with their chain and problem
    with django_assert_num_queries(6):
        response = client.post(next_url(project))
    assert response.status_code == 200
