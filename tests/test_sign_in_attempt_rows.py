"""What a failed sign-in leaves in the database (annotation/login_lockout.py): the
attempt's row keeps what it is counted by, never the request's form or query, so a
guesser's tries do not grow it (axes appended up to 2 KB of them at every failure)."""

from __future__ import annotations

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.test import Client

pytestmark = pytest.mark.django_db


def test_a_failed_sign_in_keeps_no_form_field_however_often_it_fails() -> None:
    # Given: a guesser posting the sign-in form with a large extra field, past the lockout
    client = Client()
    for attempt in range(settings.AXES_FAILURE_LIMIT + 5):
        client.post(
            f"/login/?junk={'q' * 2000}",
            {"username": "lena", "password": f"guess-{attempt}", "junk": "x" * 100_000},
            REMOTE_ADDR="198.51.100.7",
        )

    # Then: the attempts were counted, and no row holds any of the form or the query
    rows = list(AccessAttempt.objects.all())
    assert rows and max(row.failures_since_start for row in rows) >= settings.AXES_FAILURE_LIMIT
    for row in rows:
        assert "x" * 100 not in row.post_data and "q" * 100 not in row.get_data
        assert len(row.post_data) + len(row.get_data) < 200
