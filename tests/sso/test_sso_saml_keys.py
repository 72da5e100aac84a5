"""SAML's keys and certificates (annotation/sso_saml_idp.py, config/sso_saml.py), against
the identity provider on loopback (tests/saml_idp.py): an IdP rolling its key over
(two certificates at once), an IdP known only by its metadata URL (fetched once, kept,
and a URL that goes down), AuthnRequests signed with Steplab's key and assertions
encrypted to its certificate. Every key is made by the test."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User
from django.core.cache import cache

from annotation import sso_saml_idp
from tests.saml_idp import SamlIdp, key_and_certificate, saml_configure
from tests.sso.saml_steps import failed, person, sign_in, steplab_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def idp() -> Iterator[SamlIdp]:
    provider = SamlIdp("acme").start()
    cache.clear()
    yield provider
    provider.stop()
    cache.clear()


@pytest.mark.parametrize("signer", ["old", "new", "third"])
def test_during_a_rollover_either_certificate_is_taken(
    idp: SamlIdp, settings: Any, signer: str
) -> None:
    # Given: Acme's entry lists its current certificate and the next one
    new_key, new_cert = key_and_certificate("acme-next.saml.test")
    certs = [idp.cert_pem.decode(), new_cert.decode()]
    saml_configure(settings, [idp.entry("acme", "Acme SSO", x509cert=certs)])

    # When: the IdP signs with the old key, the new one, or a third
    idp.signing_key = {"old": idp.key_pem, "new": new_key, "third": SamlIdp("x").key_pem}[signer]
    client = steplab_client()
    landed = sign_in(client, idp, person(f"ro-{signer}"))

    # Then: signed in through either listed key; a third is refused
    if signer == "third":
        assert failed(landed, client) and not User.objects.filter(username="ro-third").exists()
    else:
        assert landed["Location"] == "/" and User.objects.filter(username=f"ro-{signer}").exists()


def _by_metadata(idp: SamlIdp, settings: Any) -> None:
    saml_configure(
        settings,
        [{"id": "acme", "name": "Acme SSO", "metadata_url": f"{idp.url}/metadata"}],
    )


def test_an_idp_known_by_its_metadata_url(idp: SamlIdp, settings: Any) -> None:
    # Given: Acme's entry names only its metadata URL, whose metadata lists a second
    # certificate too (a rollover announced there)
    _, next_cert = key_and_certificate("acme-next.saml.test")
    idp.metadata_certs = [next_cert, idp.cert_pem]
    _by_metadata(idp, settings)

    # When: two people sign in
    first, second = steplab_client(), steplab_client()
    assert sign_in(first, idp, person("meta"))["Location"] == "/"
    assert sign_in(second, idp, person("data"))["Location"] == "/"

    # Then: both are in, and the metadata was fetched once
    assert User.objects.filter(username__in=["meta", "data"]).count() == 2
    assert idp.metadata_fetches == 1


def test_a_metadata_url_that_goes_down(idp: SamlIdp, settings: Any, monkeypatch: Any) -> None:
    _by_metadata(idp, settings)
    assert sign_in(steplab_client(), idp, person("early"))["Location"] == "/"

    # When: the copy is due for a refetch and the URL answers 503
    idp.metadata_up = False
    clock = sso_saml_idp.time.time() + sso_saml_idp.METADATA_REFRESH_SECONDS + 1
    monkeypatch.setattr(sso_saml_idp, "time", SimpleNamespace(time=lambda: clock))

    # Then: sign-in goes on with the copy held, and waits the retry period to ask again
    assert sign_in(steplab_client(), idp, person("late"))["Location"] == "/"
    assert idp.metadata_fetches == 2
    assert sign_in(steplab_client(), idp, person("later"))["Location"] == "/"
    assert idp.metadata_fetches == 2

    # And with no copy held (a process just started), the sign-in fails, 503
    cache.clear()
    client = steplab_client()
    start = client.post("/accounts/saml/acme/login/", {"next": "/"})
    assert start.status_code == 503 and failed(start, client)
    # ... while Steplab's own metadata, which needs nothing of the IdP's, is served
    assert client.get("/accounts/saml/acme/metadata/").status_code == 200
    assert idp.metadata_fetches == 3


def test_a_slow_metadata_url_is_given_up_on(idp: SamlIdp, settings: Any, monkeypatch: Any) -> None:
    _by_metadata(idp, settings)
    assert sign_in(steplab_client(), idp, person("early"))["Location"] == "/"

    # When: the copy is due for a refetch and the URL takes 2 s to answer
    idp.metadata_delay = 2.0
    monkeypatch.setattr(sso_saml_idp, "METADATA_TIMEOUT_SECONDS", 0.3)
    clock = sso_saml_idp.time.time() + sso_saml_idp.METADATA_REFRESH_SECONDS + 1
    monkeypatch.setattr(sso_saml_idp, "time", SimpleNamespace(time=lambda: clock))
    started = time.monotonic()
    landed = sign_in(steplab_client(), idp, person("late"))

    # Then: the fetch gave up at the timeout and the copy held signed her in
    assert landed["Location"] == "/" and idp.metadata_fetches == 2
    assert time.monotonic() - started < 1.5


def _sp_files(tmp_path: Path) -> dict[str, str]:
    """Steplab's key and certificate for the IdP, as files (a mounted secret)."""
    key_pem, cert_pem = key_and_certificate("steplab.sp.test")
    (tmp_path / "sp.key").write_bytes(key_pem)
    (tmp_path / "sp.crt").write_bytes(cert_pem)
    return {"sp_private_key": str(tmp_path / "sp.key"), "sp_x509cert": str(tmp_path / "sp.crt")}


@pytest.mark.parametrize("steplab_signs", [True, False])
def test_an_idp_that_demands_signed_requests(
    idp: SamlIdp, settings: Any, tmp_path: Path, steplab_signs: bool
) -> None:
    # Given: an IdP that holds Steplab's certificate and refuses unsigned AuthnRequests
    sp = _sp_files(tmp_path)
    idp.sp_cert_pem = Path(sp["sp_x509cert"]).read_bytes()
    entry = idp.entry("acme", "Acme SSO", authn_requests_signed=steplab_signs, **sp)
    saml_configure(settings, [entry])

    # When: the button is pressed
    idp.person = person("sig")
    start = steplab_client().post("/accounts/saml/acme/login/", {"next": "/"})
    at_idp = httpx.get(start["Location"])

    # Then: a signed request is taken; an unsigned one is refused by the IdP
    assert idp.requests[-1]["signed"] is steplab_signs
    assert at_idp.status_code == (200 if steplab_signs else 403), at_idp.text


@pytest.mark.parametrize("encrypted", [True, False])
def test_steplab_wants_its_assertions_encrypted(
    idp: SamlIdp, settings: Any, tmp_path: Path, encrypted: bool
) -> None:
    # Given: Acme's entry wants the assertion encrypted to Steplab's certificate
    sp = _sp_files(tmp_path)
    entry = idp.entry("acme", "Acme SSO", want_assertions_encrypted=True, **sp)
    saml_configure(settings, [entry])

    # When: the IdP encrypts it, or sends it in the clear
    idp.encrypt_to = Path(sp["sp_x509cert"]).read_bytes() if encrypted else None
    client = steplab_client()
    landed = sign_in(client, idp, person("enc"))

    # Then: the encrypted one signs in; the plain one is refused
    if encrypted:
        assert landed["Location"] == "/" and User.objects.filter(username="enc").exists()
    else:
        assert failed(landed, client) and not User.objects.filter(username="enc").exists()


def test_the_metadata_offers_steplabs_certificate(
    idp: SamlIdp, settings: Any, tmp_path: Path
) -> None:
    sp = _sp_files(tmp_path)
    entry = idp.entry(
        "acme", "Acme SSO", authn_requests_signed=True, want_assertions_encrypted=True, **sp
    )
    saml_configure(settings, [entry])
    body = steplab_client().get("/accounts/saml/acme/metadata/").content.decode()
    cert_body = "".join(Path(sp["sp_x509cert"]).read_text().splitlines()[1:-1])
    assert 'AuthnRequestsSigned="true"' in body and cert_body in body
    assert 'use="encryption"' in body and 'use="signing"' in body


def test_an_assertion_encrypted_to_another_key_is_a_failed_sign_in(
    idp: SamlIdp, settings: Any, tmp_path: Path
) -> None:
    # Given: Acme's entry wants the assertion encrypted to Steplab's certificate
    sp = _sp_files(tmp_path)
    saml_configure(settings, [idp.entry("acme", "Acme SSO", want_assertions_encrypted=True, **sp)])

    # When: the IdP encrypts it to a certificate that is not Steplab's
    idp.encrypt_to = key_and_certificate("elsewhere.saml.test")[1]
    client = steplab_client()
    client.raise_request_exception = False
    landed = sign_in(client, idp, person("enc"))

    # Then: Steplab's failure page (it cannot be read), not a server error
    assert landed.status_code == 400 and failed(landed, client), landed.content
    assert not User.objects.filter(username="enc").exists()


def test_metadata_whose_only_key_is_for_encryption_is_refused(idp: SamlIdp, settings: Any) -> None:
    # Given: Acme's metadata lists its one certificate for encryption only
    idp.metadata_key_use = "encryption"
    _by_metadata(idp, settings)

    # When: someone signs in (the IdP signs with that certificate's key)
    client = steplab_client()
    start = client.post("/accounts/saml/acme/login/", {"next": "/"})

    # Then: no certificate is trusted to sign, so that IdP's sign-in fails, 503
    assert start.status_code == 503 and failed(start, client)
    assert idp.metadata_fetches == 1


def _federation(idp: SamlIdp, settings: Any, acme_use: str, other_use: str) -> None:
    """A federation's metadata file at Acme's URL: Acme's entry (picked by its entity ID)
    lists its certificate for ``acme_use``, another IdP's entry before it for
    ``other_use``."""
    idp.metadata_key_use = acme_use
    idp.metadata_sibling_use = other_use
    url = f"{idp.url}/metadata"
    saml_configure(
        settings,
        [{"id": "acme", "name": "Acme SSO", "metadata_url": url, "entity_id": idp.entity_id}],
    )


def test_a_federation_s_file_is_read_for_acme_s_entry(idp: SamlIdp, settings: Any) -> None:
    # Given: Acme's entry lists its certificate for signing, the other's for encryption
    _federation(idp, settings, "signing", "encryption")
    # When: someone signs in; Then: Acme's signature is trusted
    assert sign_in(steplab_client(), idp, person("fed"))["Location"] == "/"


def test_another_idp_signing_with_acme_s_key_does_not_make_it_acme_s(
    idp: SamlIdp, settings: Any
) -> None:
    # Given: Acme's entry lists its certificate for encryption only, the other's for signing
    _federation(idp, settings, "encryption", "signing")

    # When: someone signs in
    client = steplab_client()
    start = client.post("/accounts/saml/acme/login/", {"next": "/"})

    # Then: Acme trusts no certificate to sign, as with its own file alone
    assert start.status_code == 503 and failed(start, client)


@pytest.mark.parametrize(
    ("how", "fetches"),
    [("too large", 1), ("moved to plain http", 1), ("moved to https", 1)],
)
def test_metadata_too_large_or_moved_off_https_is_refused(
    idp: SamlIdp, settings: Any, monkeypatch: Any, how: str, fetches: int
) -> None:
    # Given: Acme's metadata URL answers with more than the cap, or moves: to a plain
    # http address not named loopback (127.1 reaches the same server, so only the
    # redirect rule refuses it), or to https (followed; no https server answers there,
    # so it fails at the connection)
    monkeypatch.setattr(sso_saml_idp, "METADATA_MAX_BYTES", 4096)
    if how == "too large":
        idp.metadata_padding = 8192
    elif how == "moved to plain http":
        assert idp.url.startswith("http://127.0.0.1:")
        idp.metadata_moved_to = idp.url.replace("127.0.0.1", "127.1") + "/metadata-moved"
    else:
        idp.metadata_moved_to = idp.url.replace("http://", "https://") + "/metadata"
    _by_metadata(idp, settings)

    # When: someone signs in
    client = steplab_client()
    start = client.post("/accounts/saml/acme/login/", {"next": "/"})

    # Then: no metadata is trusted, so that IdP's sign-in fails, 503
    assert start.status_code == 503 and failed(start, client)
    assert idp.metadata_fetches == fetches


def test_metadata_moved_on_loopback_is_followed(idp: SamlIdp, settings: Any) -> None:
    # Given: Acme's metadata URL moved to another path of its loopback server
    idp.metadata_moved_to = f"{idp.url}/metadata-moved"
    _by_metadata(idp, settings)

    # Then: the metadata is read where it moved (the 302, then the metadata), and she
    # signs in
    assert sign_in(steplab_client(), idp, person("moved"))["Location"] == "/"
    assert idp.metadata_fetches == 2


def test_metadata_that_trickles_in_is_given_up_on_at_the_timeout(
    idp: SamlIdp, settings: Any, monkeypatch: Any
) -> None:
    # Given: Acme's metadata URL sends a tenth of its answer every 0.15 s (1.5 s in all),
    # so no single read waits the 0.5 s timeout
    monkeypatch.setattr(sso_saml_idp, "METADATA_TIMEOUT_SECONDS", 0.5)
    idp.metadata_trickle = 0.15
    _by_metadata(idp, settings)

    # When: someone signs in, with no copy held
    client = steplab_client()
    start = client.post("/accounts/saml/acme/login/", {"next": "/"})

    # Then: the fetch is given up on (the whole answer took over the timeout), 503
    assert start.status_code == 503 and failed(start, client)
