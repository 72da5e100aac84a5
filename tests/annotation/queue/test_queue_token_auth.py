"""The API looks tokens up with one plain query (``FastTokenAuthentication``); the rules
must stay DRF's: a valid token of an active user passes, anything else is 401."""

from __future__ import annotations

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from annotation.models import Assignment
from tests.factories import ChainFactory, UserFactory

pytestmark = pytest.mark.django_db


def next_url(project) -> str:
    return f"/api/v1/projects/{project.pk}/assignments/next/"


def token_client(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def test_a_valid_token_claims(project, make_member) -> None:
    ChainFactory(project=project)
    user = make_member(project)
    token = Token.objects.create(user=user)

    response = token_client(token.key).post(next_url(project))

    assert response.status_code == 200
    assert Assignment.objects.get().annotator == user


def test_an_unknown_or_revoked_token_is_401(project, make_member) -> None:
    ChainFactory(project=project)
    token = Token.objects.create(user=make_member(project))
    key = token.key

    assert token_client("0" * 40).post(next_url(project)).status_code == 401
    token.delete()
    assert token_client(key).post(next_url(project)).status_code == 401
    assert not Assignment.objects.exists()


def test_an_inactive_users_token_is_401(project, make_member) -> None:
    ChainFactory(project=project)
    user = make_member(project)
    token = Token.objects.create(user=user)
    user.is_active = False
    user.save()

    response = token_client(token.key).post(next_url(project))

    assert response.status_code == 401
    assert not Assignment.objects.exists()


def test_a_token_of_a_non_member_is_404(project, make_member) -> None:
    ChainFactory(project=project)
    token = Token.objects.create(user=UserFactory())

    assert token_client(token.key).post(next_url(project)).status_code == 404


def test_next_over_a_token_takes_one_query_for_the_user(
    project, make_member, django_assert_num_queries
) -> None:
    ChainFactory.create_batch(3, project=project)
    token = Token.objects.create(user=make_member(project))
    client = token_client(token.key)
    client.post(next_url(project))

    # user by token with the project and the membership check (the token door, one query);
    # savepoint, lock user, own live leases, release; steps with their chain and problem
    with django_assert_num_queries(6):
        response = client.post(next_url(project))
    assert response.status_code == 200
