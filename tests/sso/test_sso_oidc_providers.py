"""Several OpenID Connect providers (config/sso.py, annotation/sso.py), each a real
identity provider on loopback (tests/oidc_provider.py) signed in through with
django-allauth, unmodified: each provider's groups are looked up in its own role map
only, read from its own claim, so one provider's ID token cannot claim another's groups
and through them its project roles; the same ``sub`` at two providers is two people."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from allauth.socialaccount.models import SocialAccount
from django.contrib.auth.models import User
from django.test import Client

from annotation.models import Membership, Role
from tests.factories import MembershipFactory, ProjectFactory
from tests.oidc_provider import OidcProvider, providers_configured

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_idps(settings: Any) -> Iterator[tuple[OidcProvider, OidcProvider]]:
    """The lab's provider maps its "leads" to lead of Demo; a partner's provider, whose
    groups come in the claim "roles", maps its own "leads" to annotator of Round 2."""
    lab, partner = OidcProvider().start(), OidcProvider().start()
    providers_configured(
        settings,
        [
            lab.entry(
                name="Lab SSO",
                provider_id="lab",
                role_map={"leads": {"project": "Demo", "role": "lead"}},
            ),
            partner.entry(
                name="Partner",
                provider_id="partner",
                role_claim="roles",
                role_map={
                    "leads": {"project": "Round 2", "role": "annotator"},
                    "partner-ml": {"project": "Round 2", "role": "ml"},
                },
            ),
        ],
    )
    yield lab, partner
    lab.stop()
    partner.stop()


def _roles(user: User) -> dict[str, str]:
    return dict(Membership.objects.filter(user=user).values_list("project__name", "role"))


def test_each_provider_grants_only_its_own_maps_roles(
    two_idps: tuple[OidcProvider, OidcProvider],
) -> None:
    # Given: projects Demo (with its lead) and Round 2, and the two providers above
    lab, partner = two_idps
    MembershipFactory(project=ProjectFactory(name="Demo"), role=Role.LEAD)
    ProjectFactory(name="Round 2")

    # When: someone at the partner's provider, which puts what it likes in its tokens,
    # claims "leads" (the lab's group name too) in "roles", and more in "groups"
    pat = {"sub": "same-sub", "preferred_username": "pat"}
    landed = partner.sign_in(
        Client(), {**pat, "roles": ["leads"], "groups": ["partner-ml"]}, provider_id="partner"
    )

    # Then: signed in with the partner's grant for its claim "roles" only, nothing of
    # the lab's map
    assert landed.status_code == 302 and landed["Location"] == "/", partner.refused
    assert _roles(User.objects.get(username="pat")) == {"Round 2": "annotator"}

    # When: a lead at the lab's provider signs in, her token also claiming the partner's
    # "partner-ml" in the claim the partner's map reads
    lena = {"sub": "same-sub", "preferred_username": "lena"}
    lab.sign_in(Client(), {**lena, "groups": ["leads"], "roles": ["partner-ml"]})

    # Then: lead of Demo by the lab's map, nothing in Round 2
    assert _roles(User.objects.get(username="lena")) == {"Demo": "lead"}
    # ... and the same sub at the two providers is two accounts, each under its provider
    accounts = SocialAccount.objects.filter(uid="same-sub")
    assert sorted(accounts.values_list("provider", "user__username")) == [
        ("lab", "lena"),
        ("partner", "pat"),
    ]
