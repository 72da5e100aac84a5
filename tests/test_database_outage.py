"""A lost database connection answers 503 with Retry-After, on the API and on pages, and
the same requests work again once the database is back (config/errors.py). The outage is
real: the connection is pointed at a closed local port, so psycopg fails to connect."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.db import connection
from django.test import Client, RequestFactory
from rest_framework.test import APIClient

from config.errors import RETRY_AFTER_SECONDS, server_error
from tests.factories import UserFactory, api_token_key

pytestmark = pytest.mark.django_db(transaction=True)


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def database_unreachable() -> Iterator[None]:
    """Point this thread's connection at a port nobody listens on, then restore it."""
    saved = dict(connection.settings_dict)
    connection.close()
    connection.settings_dict.update(HOST="127.0.0.1", PORT=str(_closed_port()))
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)


def test_api_answers_503_with_retry_after_while_the_database_is_down_then_recovers() -> None:
    user = UserFactory()
    token_key = api_token_key(user)
    client = APIClient(raise_request_exception=False)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_key}")

    with database_unreachable():
        down = client.get("/api/v1/projects/")

    assert down.status_code == 503
    assert down["Retry-After"] == str(RETRY_AFTER_SECONDS)
    assert "retry" in down.json()["detail"]
    assert client.get("/api/v1/projects/").status_code == 200


def test_a_page_answers_503_while_the_database_is_down() -> None:
    client = Client(raise_request_exception=False)
    client.force_login(UserFactory())

    with database_unreachable():
        down = client.get("/")

    assert down.status_code == 503
    assert down["Retry-After"] == str(RETRY_AFTER_SECONDS)
    assert client.get("/").status_code == 200


def test_any_other_error_is_still_a_500() -> None:
    request = RequestFactory().get("/api/v1/projects/")
    try:
        raise ValueError("a bug, not an outage")
    except ValueError:
        response = server_error(request)
    assert response.status_code == 500
    assert not response.has_header("Retry-After")


def test_a_statement_psycopg_refuses_on_a_live_connection_is_a_500_not_an_outage() -> None:
    # A client's input that makes a statement of more than 65,535 parameters is a bug of
    # the statement: a 500, never "the database is unavailable" (the connection is fine).
    from django.db import OperationalError

    if connection.vendor != "postgresql":
        pytest.skip("psycopg's parameter limit")
    params = list(range(70_000))
    try:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT 1 WHERE 1 IN ({', '.join(['%s'] * len(params))})", params)
    except OperationalError:
        response = server_error(RequestFactory().get("/api/v1/projects/"))
    else:
        pytest.fail("psycopg took 70,000 parameters")
    assert response.status_code == 500
