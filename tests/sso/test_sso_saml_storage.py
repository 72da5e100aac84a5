"""What an anonymous request may leave in the database on the way to a sign-in
(annotation/sso_saml.py, annotation/sessions.py): the SAML assertion consumer keeps a
response only once the IdP's signature holds, only the response and the few headers its
finishing step needs, for five minutes; a body over the limit is refused unread, and XML
past the element or depth bound is refused before python3-saml parses it. A session
without a signed-in user is bounded in bytes and life wherever it is written (a single
sign-on button's next URL or process), and expired rows are pruned."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.sessions.models import Session
from django.utils import timezone

from annotation.sessions import SessionStore
from annotation.tasks import sessions_prune
from tests.saml_idp import SamlIdp, saml_configure
from tests.sso.saml_steps import at_idp, failed, person, post_back, steplab_client

# (``failed`` reads ``client.session``, which makes a row: the tests that count rows read
# the page alone.)

pytestmark = pytest.mark.django_db

ACS = "/accounts/saml/acme/acs/"


@pytest.fixture
def idp(settings: Any) -> Iterator[SamlIdp]:
    provider = SamlIdp("acme").start()
    saml_configure(settings, [provider.entry("acme", "Acme SSO")])
    yield provider
    provider.stop()


def _refused(answer: Any) -> bool:
    return "Sign-in failed" in answer.content.decode()


def _posted(xml: bytes) -> dict[str, str]:
    return {"SAMLResponse": base64.b64encode(xml).decode()}


def test_a_body_over_the_limit_is_refused_unread_and_stores_nothing(
    idp: SamlIdp, settings: Any
) -> None:
    # Given: an anonymous client with no cookie, and the body limit
    client = steplab_client()
    before = Session.objects.count()
    random_body = base64.b64encode(bytes(range(256)) * 4096).decode()  # ~1.4 MB of base64

    # When: it posts a SAMLResponse far over STEPLAB_SAML_MAX_BODY_BYTES
    answer = client.post(ACS, {"SAMLResponse": random_body})

    # Then: 413, Steplab's failure page, and no session row
    assert answer.status_code == 413 and _refused(answer)
    assert Session.objects.count() == before


@pytest.mark.parametrize(
    ("xml", "why"),
    [
        (b"<r>" + b"<a/>" * 20_000 + b"</r>", "elements"),
        (b"<a>" * 100 + b"</a>" * 100, "depth"),
        (b"<!DOCTYPE r [<!ENTITY e 'x'>]><r>&e;</r>", "DTD"),
        (b"\x00" * 1000, "not XML"),
    ],
)
def test_xml_past_its_bounds_is_refused_before_python3_saml_and_stores_nothing(
    idp: SamlIdp, xml: bytes, why: str
) -> None:
    client = steplab_client()
    before = Session.objects.count()

    answer = client.post(ACS, _posted(xml))

    assert answer.status_code == 400 and _refused(answer), why
    assert Session.objects.count() == before


@pytest.mark.parametrize("how", ["another key", "no signature"])
def test_a_response_the_idp_did_not_sign_stores_nothing(idp: SamlIdp, how: str) -> None:
    # Given: a response as the IdP's page would post it, not signed by the IdP's key
    if how == "another key":
        idp.signing_key = SamlIdp("mallory").key_pem
    else:
        idp.sign_assertion = False
    client = steplab_client()
    action, fields = at_idp(client, idp, person("mallory"))
    before = Session.objects.count()

    # When: it reaches the assertion consumer
    answer = client.post(ACS, fields)

    # Then: refused there (401), and no row was written for it
    assert answer.status_code == 401 and _refused(answer)
    assert Session.objects.count() == before


def test_a_signed_response_is_kept_alone_for_five_minutes_then_signs_in(idp: SamlIdp) -> None:
    # Given: a person's signed response, posted with headers a browser might add
    client = steplab_client()
    action, fields = at_idp(client, idp, person("kim"))
    before = set(Session.objects.values_list("session_key", flat=True))

    # When: it reaches the assertion consumer
    consumed = client.post(
        ACS, {**fields, "extra": "x" * 5000}, HTTP_USER_AGENT="u" * 4000, HTTP_X_JUNK="j" * 4000
    )

    # Then: one row, holding the response and the headers the finishing step needs only,
    # that expires within five minutes
    assert consumed.status_code == 302
    (row,) = Session.objects.exclude(session_key__in=before)
    assert row.expire_date <= timezone.now() + timedelta(minutes=5, seconds=5)
    kept = json.loads(SessionStore().decode(row.session_data)["request"])
    assert set(kept["META"]) <= {
        "HTTP_HOST",
        "SERVER_NAME",
        "SERVER_PORT",
        "SCRIPT_NAME",
        "PATH_INFO",
        "REQUEST_METHOD",
        "wsgi.url_scheme",
    }
    assert "extra" not in kept["POST"] and "HTTP_USER_AGENT" not in kept["META"]
    # And the finishing step signs her in with it
    landed = client.get(consumed["Location"])
    assert landed.status_code == 302 and landed["Location"] == "/"
    assert "_auth_user_id" in client.session


def test_an_idp_initiated_response_is_checked_at_the_consumer_and_refused_when_finishing(
    idp: SamlIdp,
) -> None:
    # A signed response that answers no request still fails at the finishing step.
    idp.person = person("ida")
    xml = idp.response(
        acs="http://localhost" + ACS,
        audience="http://localhost/accounts/saml/acme/metadata/",
        in_response_to=None,
    )
    client = steplab_client()
    assert failed(post_back(client, ACS, _posted(xml)), client)


def test_a_next_url_too_long_to_keep_is_dropped(idp: SamlIdp, settings: Any) -> None:
    # Given: the sign-in button posted with a next URL longer than any real one
    client = steplab_client()
    long_next = "/" + "a" * settings.STEPLAB_NEXT_URL_MAX_CHARS

    # When: the sign-in starts
    start = client.post("/accounts/saml/acme/login/", {"next": long_next})

    # Then: it goes to the IdP, and the session holds no copy of that URL
    assert start.status_code == 302
    assert long_next not in json.dumps(client.session.get("socialaccount_states", {}))
    assert len(SessionStore().decode(Session.objects.get().session_data).__repr__()) < 4096


def test_an_anonymous_session_past_its_bound_is_refused_not_written(
    idp: SamlIdp, settings: Any
) -> None:
    # Given: a sign-in button's POST whose `process` (kept in allauth's state) is huge
    client = steplab_client()
    client.raise_request_exception = False
    before = Session.objects.count()

    # When: it starts a sign-in
    answer = client.post(
        "/accounts/saml/acme/login/",
        {"next": "/", "process": "p" * (settings.STEPLAB_ANONYMOUS_SESSION_MAX_BYTES + 1)},
    )

    # Then: 400, and no row
    assert answer.status_code == 400
    assert Session.objects.count() == before


def test_an_anonymous_session_lives_an_hour_and_expired_rows_are_pruned(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (The worker closes its connections after pruning; the test keeps its own.)
    monkeypatch.setattr("annotation.tasks.connections.close_all", lambda: None)
    # Given: an anonymous session and a signed-in one's row
    store = SessionStore()
    store["socialaccount_states"] = {"x": 1}
    store.save()
    row = Session.objects.get(session_key=store.session_key)
    limit = timedelta(seconds=settings.STEPLAB_ANONYMOUS_SESSION_SECONDS, minutes=1)
    assert row.expire_date <= timezone.now() + limit
    signed_in = SessionStore()
    signed_in["_auth_user_id"] = "1"
    signed_in.save()
    assert Session.objects.get(session_key=signed_in.session_key).expire_date > (
        timezone.now() + timedelta(days=13)
    )

    # When: the anonymous one has expired and the workers prune
    Session.objects.filter(session_key=store.session_key).update(
        expire_date=timezone.now() - timedelta(seconds=1)
    )
    sessions_prune()

    # Then: it is gone, the other stays
    assert not Session.objects.filter(session_key=store.session_key).exists()
    assert Session.objects.filter(session_key=signed_in.session_key).exists()
