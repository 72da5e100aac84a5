"""Single sign-on through SAML (annotation/sso_saml.py), against a real identity provider
on loopback (tests/saml_idp.py) that signs its assertions with its own key through
xmlsec: Steplab's server takes its signed responses through django-allauth and
python3-saml, unmodified; the test plays the browser with Django's test client on
Steplab's side (at http://localhost, the host the SP's URLs are built with) and an HTTP
client on the IdP's side.

An account is made at the first sign-in and reused after; the IdP's group attribute
sets roles through that organization's own map at every sign-in; a response that is not
signed by the configured IdP, was changed after signing, was already used, or was not
asked for signs no one in; two organizations' IdPs are kept apart."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User

from annotation.models import Membership, Role
from tests.factories import MembershipFactory, ProjectFactory, UserFactory
from tests.saml_idp import SamlIdp, saml_configure
from tests.sso.saml_steps import at_idp, failed, person, post_back, sign_in, steplab_client

pytestmark = pytest.mark.django_db

ACME_ROLES = {
    "acme-leads": {"project": "Demo", "role": "lead"},
    "acme-annotators": [{"project": "Demo"}, {"project": "Other", "role": "annotator"}],
}


@pytest.fixture
def idp(settings: Any) -> Iterator[SamlIdp]:
    provider = SamlIdp("acme").start()
    saml_configure(settings, [provider.entry("acme", "Acme SSO", role_map=ACME_ROLES)])
    yield provider
    provider.stop()


def _roles(user: User) -> dict[str, str]:
    return dict(Membership.objects.filter(user=user).values_list("project__name", "role"))


def test_first_sign_in_makes_the_account_with_the_mapped_role(idp: SamlIdp) -> None:
    # Given: project Demo with its lead
    demo = ProjectFactory(name="Demo")
    MembershipFactory(project=demo, role=Role.LEAD)
    client = steplab_client()

    # When: a member of acme-leads signs in through Acme's IdP for the first time
    landed = sign_in(client, idp, person("lena", "acme-leads", "everyone"))

    # Then: signed in, at home, as a new account named by the uid attribute, lead of Demo
    assert landed.status_code == 302 and landed["Location"] == "/", landed.content
    user = User.objects.get(username="lena")
    assert user.email == "lena@acme.example" and not user.has_usable_password()
    assert _roles(user) == {"Demo": "lead"}
    assert client.get("/").status_code == 200
    # ... and Steplab's request named its own assertion consumer for the organization
    assert idp.requests[0]["acs"] == "http://localhost/accounts/saml/acme/acs/"
    assert idp.requests[0]["audience"] == "http://localhost/accounts/saml/acme/metadata/"


def test_roles_follow_the_groups_at_everysign_in(idp: SamlIdp) -> None:
    ProjectFactory(name="Demo")
    ProjectFactory(name="Other")
    sign_in(steplab_client(), idp, person("ann", "acme-annotators"))
    user = User.objects.get(username="ann")
    assert _roles(user) == {"Demo": "annotator", "Other": "annotator"}

    # When: she joins acme-leads at the IdP and signs in again
    sign_in(steplab_client(), idp, person("ann", "acme-annotators", "acme-leads"))

    # Then: the same account (the same NameID), lead of Demo, still in Other
    assert User.objects.filter(username__startswith="ann").count() == 1
    assert _roles(user) == {"Demo": "lead", "Other": "annotator"}


def test_a_whole_signed_response_is_taken_too(idp: SamlIdp) -> None:
    # Some IdPs (Keycloak's default) sign the Response rather than the Assertion.
    idp.sign_assertion, idp.sign_response = False, True
    landed = sign_in(steplab_client(), idp, person("rita"))
    assert landed["Location"] == "/" and User.objects.filter(username="rita").exists()


@pytest.mark.parametrize("how", ["another key", "no signature"])
def test_a_response_not_signed_by_the_idp_signs_no_one_in(idp: SamlIdp, how: str) -> None:
    # Given: a response signed with a key whose certificate Steplab does not hold, or
    # not signed at all
    if how == "another key":
        idp.signing_key = SamlIdp("mallory").key_pem
    else:
        idp.sign_assertion = False
    client = steplab_client()

    # When: it comes back to Steplab
    landed = sign_in(client, idp, person("mallory", "acme-leads"))

    # Then: Steplab's failure page, no account
    assert landed.status_code == 401 and failed(landed, client)
    assert not User.objects.filter(username="mallory").exists()


def test_an_assertion_changed_after_signing_signs_no_one_in(idp: SamlIdp) -> None:
    ProjectFactory(name="Demo")
    client = steplab_client()
    action, fields = at_idp(client, idp, person("eve", "everyone"))
    # The browser's holder puts herself into acme-leads before posting it on
    xml = base64.b64decode(fields["SAMLResponse"]).decode()
    assert ">everyone<" in xml
    fields["SAMLResponse"] = base64.b64encode(
        xml.replace(">everyone<", ">acme-leads<").encode()
    ).decode()

    landed = post_back(client, action, {**fields})
    assert failed(landed, client)
    assert not User.objects.filter(username="eve").exists()


def test_a_response_used_once_is_not_taken_again(idp: SamlIdp) -> None:
    first = steplab_client()
    action, fields = at_idp(first, idp, person("sam"))
    assert post_back(first, action, fields)["Location"] == "/"

    # When: the same response is posted again, in the same browser or another
    again, other = steplab_client(), steplab_client()
    again.cookies = first.cookies
    for client in (again, other):
        # Then: refused, as a response that answers no request waiting in this session
        assert post_back(client, action, fields).status_code == 403
    assert "_auth_user_id" not in other.session


def test_a_response_steplab_did_not_ask_for_is_refused(idp: SamlIdp) -> None:
    # An IdP-initiated sign-in (no InResponseTo) is refused: nothing ties it to this
    # browser, so it could be someone else's response.
    idp.person = person("ida", "acme-leads")
    acs = "http://localhost/accounts/saml/acme/acs/"
    xml = idp.response(
        acs=acs, audience="http://localhost/accounts/saml/acme/metadata/", in_response_to=None
    )
    client = steplab_client()
    landed = post_back(client, acs, {"SAMLResponse": base64.b64encode(xml).decode()})
    assert failed(landed, client)
    assert not User.objects.filter(username="ida").exists()


def test_two_organizations_are_kept_apart(idp: SamlIdp, settings: Any) -> None:
    # Given: Acme's IdP, and Beta's, whose map grants roles in Beta's project only
    ProjectFactory(name="Demo")
    ProjectFactory(name="Beta project")
    beta = SamlIdp("beta").start()
    try:
        beta_roles = {"beta-staff": {"project": "Beta project", "role": "annotator"}}
        saml_configure(
            settings,
            [
                idp.entry("acme", "Acme SSO", role_map=ACME_ROLES),
                beta.entry("beta", "Beta SSO", role_map=beta_roles),
            ],
        )

        # When: Beta's IdP says its person is in "acme-leads", and "beta-staff"
        sign_in(steplab_client(), beta, person("bo", "acme-leads", "beta-staff"), org="beta")

        # Then: only Beta's map applies
        assert _roles(User.objects.get(username="bo")) == {"Beta project": "annotator"}

        # When: Beta's response is posted to Acme's assertion consumer
        client = steplab_client()
        action, fields = at_idp(client, beta, person("bo", "acme-leads"), org="beta")
        landed = post_back(client, "http://localhost/accounts/saml/acme/acs/", fields)

        # Then: refused (not Acme's IdP's signature, nor its request)
        assert failed(landed, client)
        # And the same NameID at both organizations is two people
        sign_in(steplab_client(), idp, person("bo", "acme-annotators"))
        assert User.objects.filter(username__startswith="bo").count() == 2
    finally:
        beta.stop()


def test_a_local_account_is_never_taken_over(idp: SamlIdp) -> None:
    local = UserFactory(username="mo", email="mo@acme.example")
    client = steplab_client()
    sign_in(client, idp, person("mo"))
    signed_in = User.objects.get(pk=client.session["_auth_user_id"])
    assert signed_in.pk != local.pk and signed_in.username != "mo"


def test_the_metadata_names_the_organizations_urls(idp: SamlIdp) -> None:
    metadata = steplab_client().get("/accounts/saml/acme/metadata/")
    assert metadata.status_code == 200 and metadata["Content-Type"] == "text/xml"
    body = metadata.content.decode()
    assert 'entityID="http://localhost/accounts/saml/acme/metadata/"' in body
    assert 'Location="http://localhost/accounts/saml/acme/acs/"' in body


def test_the_login_page_shows_the_provider(idp: SamlIdp, settings: Any) -> None:
    page = steplab_client().get("/login/").content.decode()
    assert "Sign in with Acme SSO" in page and 'action="/accounts/saml/acme/login/"' in page
    assert 'name="password"' in page
    settings.STEPLAB_LOCAL_PASSWORDS = False
    page = steplab_client().get("/login/").content.decode()
    assert "Sign in with Acme SSO" in page and 'name="password"' not in page
    # Single sign-on still works
    assert sign_in(steplab_client(), idp, person("sso"))["Location"] == "/"


def test_an_organization_not_configured_is_a_404(idp: SamlIdp) -> None:
    client = steplab_client()
    for url in ("login/", "metadata/", "acs/finish/", "sls/"):
        assert client.get(f"/accounts/saml/nope/{url}").status_code == 404, url
    assert client.post("/accounts/saml/nope/acs/", {"SAMLResponse": "x"}).status_code == 404
    # Single logout is not offered, for a configured organization either
    assert client.get("/accounts/saml/acme/sls/?SAMLRequest=x").status_code == 404


@pytest.mark.parametrize(
    "body",
    [b"not XML", b"<a><b></a>", b"<!DOCTYPE r [<!ENTITY e 'x'>]><r>&e;</r>", b""],
    ids=["not XML", "not well-formed", "a DTD", "empty"],
)
def test_a_response_that_is_not_saml_is_a_failed_sign_in(idp: SamlIdp, body: bytes) -> None:
    # Given: anyone posting to the assertion consumer whatever they like
    client = steplab_client()
    client.raise_request_exception = False

    # When: its SAMLResponse is not XML, or XML that python3-saml will not parse
    landed = post_back(
        client, "/accounts/saml/acme/acs/", {"SAMLResponse": base64.b64encode(body).decode()}
    )

    # Then: Steplab's failure page, a 400, not a server error
    assert landed.status_code == 400 and failed(landed, client), landed.content
