"""LDAP's environment (config/sso.py, ldap_settings): what STEPLAB_LDAP_* become for
django-auth-ldap, and that a mistake stops the process at start-up with the variable named
rather than refusing everyone's sign-in later."""

from __future__ import annotations

import ldap
import pytest
from django.core.exceptions import ImproperlyConfigured
from django_auth_ldap.config import GroupOfNamesType, PosixGroupType

from config import sso
from tests.sso.settings_process import settings_read

ENV = {
    "STEPLAB_LDAP_URI": "ldap://ldap.lab.example",
    "STEPLAB_LDAP_BIND_DN": "cn=steplab,dc=lab,dc=example",
    "STEPLAB_LDAP_BIND_PASSWORD": " secret with spaces ",
    "STEPLAB_LDAP_USER_SEARCH": "ou=people,dc=lab,dc=example",
    "STEPLAB_LDAP_GROUP_SEARCH": "ou=groups,dc=lab,dc=example",
    "STEPLAB_LDAP_ROLE_MAP": '{"Lab-Leads": {"project": "Demo", "role": "lead"}}',
}


def test_nothing_configured_is_off() -> None:
    off = sso.ldap_settings({})
    assert off["STEPLAB_LDAP_URI"] == "" and off["AUTH_LDAP_SERVER_URI"] == ""
    assert off["STEPLAB_LDAP_ROLE_MAP"] == {}


def test_a_search_configuration() -> None:
    read = sso.ldap_settings(ENV)
    assert read["AUTH_LDAP_SERVER_URI"] == "ldap://ldap.lab.example"
    assert read["AUTH_LDAP_BIND_PASSWORD"] == " secret with spaces "  # as given
    assert read["AUTH_LDAP_BIND_AS_AUTHENTICATING_USER"] is False
    assert read["AUTH_LDAP_USER_SEARCH"].base_dn == "ou=people,dc=lab,dc=example"
    assert read["AUTH_LDAP_USER_SEARCH"].filterstr == "(uid=%(user)s)"
    assert read["AUTH_LDAP_USER_DN_TEMPLATE"] is None
    assert isinstance(read["AUTH_LDAP_GROUP_TYPE"], GroupOfNamesType)
    assert read["AUTH_LDAP_GROUP_SEARCH"].filterstr == "(objectClass=groupOfNames)"
    # Group names are compared without case, as LDAP does
    assert read["STEPLAB_LDAP_ROLE_MAP"] == {"lab-leads": [("Demo", "lead")]}
    assert read["AUTH_LDAP_START_TLS"] is False
    assert ldap.OPT_X_TLS_CACERTFILE not in read["AUTH_LDAP_CONNECTION_OPTIONS"]
    assert read["AUTH_LDAP_CONNECTION_OPTIONS"][ldap.OPT_NETWORK_TIMEOUT] == 5


def test_a_template_configuration_with_starttls() -> None:
    read = sso.ldap_settings(
        {
            "STEPLAB_LDAP_URI": "ldap://a.lab.example ldap://b.lab.example",
            "STEPLAB_LDAP_USER_DN_TEMPLATE": "uid=%(user)s,ou=people,dc=lab,dc=example",
            "STEPLAB_LDAP_START_TLS": "true",
            "STEPLAB_LDAP_CA_FILE": "/etc/ssl/lab-ca.pem",
            "STEPLAB_LDAP_GROUP_SEARCH": "ou=groups,dc=lab,dc=example",
            "STEPLAB_LDAP_GROUP_TYPE": "posixGroup",
            "STEPLAB_LDAP_ATTR_MAP": '{"email": "mailPrimaryAddress"}',
            "STEPLAB_LDAP_NAME": "Lab account",
        }
    )
    assert read["AUTH_LDAP_USER_SEARCH"] is None
    assert read["AUTH_LDAP_BIND_AS_AUTHENTICATING_USER"] is True
    assert read["AUTH_LDAP_START_TLS"] is True
    options = read["AUTH_LDAP_CONNECTION_OPTIONS"]
    assert options[ldap.OPT_X_TLS_CACERTFILE] == "/etc/ssl/lab-ca.pem"
    assert options[ldap.OPT_X_TLS_REQUIRE_CERT] == ldap.OPT_X_TLS_DEMAND
    assert list(options)[-1] == ldap.OPT_X_TLS_NEWCTX  # applied after the TLS options
    assert isinstance(read["AUTH_LDAP_GROUP_TYPE"], PosixGroupType)
    assert read["AUTH_LDAP_USER_ATTR_MAP"]["email"] == "mailPrimaryAddress"
    assert read["STEPLAB_LDAP_NAME"] == "Lab account"


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"STEPLAB_LDAP_URI": "ldap.lab.example"}, "STEPLAB_LDAP_URI"),
        ({"STEPLAB_LDAP_USER_SEARCH": ""}, "STEPLAB_LDAP_USER_DN_TEMPLATE"),
        ({"STEPLAB_LDAP_USER_DN_TEMPLATE": "uid=%(user)s,dc=x"}, "one of"),
        ({"STEPLAB_LDAP_USER_FILTER": "(uid=fixed)"}, "STEPLAB_LDAP_USER_FILTER"),
        ({"STEPLAB_LDAP_USER_SEARCH": "people"}, "not a DN"),
        ({"STEPLAB_LDAP_GROUP_TYPE": "activeDirectory"}, "STEPLAB_LDAP_GROUP_TYPE"),
        ({"STEPLAB_LDAP_GROUP_SEARCH": ""}, "needs STEPLAB_LDAP_GROUP_SEARCH"),
        ({"STEPLAB_LDAP_ROLE_MAP": '{"g": {"project": "P", "role": "boss"}}'}, "'boss'"),
        ({"STEPLAB_LDAP_ATTR_MAP": '{"is_superuser": "x"}'}, "STEPLAB_LDAP_ATTR_MAP"),
    ],
)
def test_a_mistake_is_refused(change: dict[str, str], says: str) -> None:
    with pytest.raises(ImproperlyConfigured) as refused:
        sso.ldap_settings({**ENV, **change})
    assert says in str(refused.value)


def test_the_settings_read_the_environment() -> None:
    read = settings_read(
        {**ENV, "STEPLAB_LOCAL_PASSWORDS": "0"},
        "from django.conf import settings as s; "
        "print(s.STEPLAB_LOCAL_PASSWORDS, s.AUTH_LDAP_SERVER_URI, s.STEPLAB_LDAP_NAME)",
    )
    assert read.returncode == 0, read.stderr
    # With LDAP on, local passwords can be turned off (directory accounts still sign in)
    assert read.stdout.strip() == "False ldap://ldap.lab.example directory"
    broken = settings_read({**ENV, "STEPLAB_LDAP_GROUP_TYPE": "nope"}, "")
    assert broken.returncode != 0
    assert "ImproperlyConfigured" in broken.stderr and "STEPLAB_LDAP_GROUP_TYPE" in broken.stderr
