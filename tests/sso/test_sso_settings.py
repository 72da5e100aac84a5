"""Single sign-on's environment (config/sso.py): what STEPLAB_OIDC_PROVIDERS and
STEPLAB_OIDC_ROLE_MAP become, and that a mistake in them stops the process at start-up
with the variable named rather than failing someone's sign-in later."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from config import sso
from tests.sso.settings_process import settings_read

PROVIDER = (
    '[{"id": "lab", "name": "Lab SSO", "server_url": "https://idp.example.org/realms/lab/",'
    ' "client_id": "steplab", "secret": "s"}]'
)


def test_a_provider_becomes_an_allauth_app_and_a_form_action() -> None:
    providers = sso.oidc_providers(PROVIDER)
    assert providers == [
        {
            "id": "lab",
            "name": "Lab SSO",
            "server_url": "https://idp.example.org/realms/lab",
            "client_id": "steplab",
            "secret": "s",
            "role_claim": "groups",
            "role_map": {},
        }
    ]
    apps = sso.allauth_providers(providers)["openid_connect"]
    assert apps["OAUTH_PKCE_ENABLED"] is True
    assert apps["APPS"][0]["provider_id"] == "lab"
    assert apps["APPS"][0]["settings"] == {"server_url": "https://idp.example.org/realms/lab"}
    assert sso.provider_origins(providers) == ["https://idp.example.org"]


def test_nothing_configured_is_nothing() -> None:
    assert sso.oidc_providers("") == []
    assert sso.allauth_providers([]) == {}
    assert sso.role_map("  ") == {}


def test_a_group_maps_to_one_grant_or_several() -> None:
    mapped = sso.role_map(
        '{"leads": {"project": "Demo", "role": "lead"},'
        ' "annotators": [{"project": "Demo"}, {"project": "Round 2", "role": "annotator"}]}'
    )
    assert mapped == {
        "leads": [("Demo", "lead")],
        "annotators": [("Demo", "annotator"), ("Round 2", "annotator")],
    }


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ('{"leads": {"project": "Demo", "role": "owner"}}', "role 'owner'"),
        ('{"leads": {"role": "lead"}}', '"project"'),
        ('["leads"]', "JSON object"),
        ("{leads: lead}", "not valid JSON"),
    ],
)
def test_a_bad_role_map_is_refused(raw: str, says: str) -> None:
    with pytest.raises(ImproperlyConfigured, match="STEPLAB_OIDC_ROLE_MAP") as refused:
        sso.role_map(raw)
    assert says in str(refused.value)


TWO = (
    '[{"id": "lab", "name": "Lab", "server_url": "https://i", "client_id": "c",'
    ' "role_map": {"leads": {"project": "Demo", "role": "lead"}}},'
    ' {"id": "partner", "name": "Partner", "server_url": "https://j", "client_id": "d",'
    ' "role_claim": "roles", "role_map": {"leads": {"project": "Round 2"}}}]'
)
LEGACY = '{"leads": {"project": "Old", "role": "ml"}}'


def test_each_provider_has_its_own_claim_and_role_map() -> None:
    lab, partner = sso.oidc_providers(TWO, role_claim="memberOf")
    assert (lab["role_claim"], lab["role_map"]) == ("memberOf", {"leads": [("Demo", "lead")]})
    assert partner["role_claim"] == "roles"
    assert partner["role_map"] == {"leads": [("Round 2", "annotator")]}


def test_the_one_role_map_of_before_is_a_single_providers() -> None:
    (lab,) = sso.oidc_providers(PROVIDER, legacy_role_map=LEGACY)
    assert lab["role_map"] == {"leads": [("Old", "ml")]}


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (TWO, "several STEPLAB_OIDC_PROVIDERS"),
        (TWO.split("}}},")[0] + "}}}]", "STEPLAB_OIDC_PROVIDERS[lab].role_map are both set"),
    ],
)
def test_the_role_map_of_before_is_refused_where_ambiguous(raw: str, says: str) -> None:
    with pytest.raises(ImproperlyConfigured, match="STEPLAB_OIDC_ROLE_MAP") as refused:
        sso.oidc_providers(raw, legacy_role_map=LEGACY)
    assert says in str(refused.value)


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (TWO.replace('"role": "lead"', '"role": "boss"'), "PROVIDERS[lab].role_map['leads']"),
        ('[{"name": "x", "server_url": "https://idp"}]', "client_id"),
        ('[{"id": "Lab SSO", "name": "x", "server_url": "https://i", "client_id": "c"}]', "id"),
        (
            '[{"name": "a", "server_url": "https://i", "client_id": "c"},'
            ' {"name": "b", "server_url": "https://j", "client_id": "d"}]',
            "twice",
        ),
        ('"https://idp"', "list of objects"),
    ],
)
def test_a_bad_provider_is_refused(raw: str, says: str) -> None:
    with pytest.raises(ImproperlyConfigured, match="STEPLAB_OIDC_PROVIDERS") as refused:
        sso.oidc_providers(raw)
    assert says in str(refused.value)


def test_the_settings_read_the_environment() -> None:
    read = settings_read(
        {"STEPLAB_OIDC_PROVIDERS": PROVIDER, "STEPLAB_LOCAL_PASSWORDS": "0"},
        "from django.conf import settings as s; "
        "print(s.STEPLAB_LOCAL_PASSWORDS, s.CONTENT_SECURITY_POLICY['DIRECTIVES']"
        "['form-action'], s.SOCIALACCOUNT_PROVIDERS['openid_connect']['APPS'][0]['name'])",
    )
    assert read.returncode == 0, read.stderr
    assert read.stdout.strip() == "False [\"'self'\", 'https://idp.example.org'] Lab SSO"
    # Without a provider, local passwords cannot be turned off: nobody would get in.
    alone = settings_read(
        {"STEPLAB_LOCAL_PASSWORDS": "0"},
        "from django.conf import settings as s; print(s.STEPLAB_LOCAL_PASSWORDS)",
    )
    assert alone.stdout.strip() == "True", alone.stderr


def test_a_mistake_stops_start_up() -> None:
    read = settings_read({"STEPLAB_OIDC_ROLE_MAP": '{"x": {"project": "P", "role": "boss"}}'}, "")
    assert read.returncode != 0
    assert "ImproperlyConfigured" in read.stderr and "STEPLAB_OIDC_ROLE_MAP" in read.stderr
    # The one map of before beside several providers: whose groups? Start-up stops.
    both = settings_read({"STEPLAB_OIDC_PROVIDERS": TWO, "STEPLAB_OIDC_ROLE_MAP": LEGACY}, "")
    assert both.returncode != 0 and "several STEPLAB_OIDC_PROVIDERS" in both.stderr


def test_the_settings_keep_a_single_providers_variables_of_before() -> None:
    read = settings_read(
        {
            "STEPLAB_OIDC_PROVIDERS": PROVIDER,
            "STEPLAB_OIDC_ROLE_CLAIM": "roles",
            "STEPLAB_OIDC_ROLE_MAP": LEGACY,
        },
        "from django.conf import settings as s; p = s.STEPLAB_OIDC_PROVIDERS[0]; "
        "print(p['role_claim'], p['role_map'])",
    )
    assert read.returncode == 0, read.stderr
    assert read.stdout.strip() == "roles {'leads': [('Old', 'ml')]}"
