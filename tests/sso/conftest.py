"""The LDAP directory (tests/ldap_server.py), one slapd for the session's LDAP tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.ldap_server import LdapServer, ldap_server_running


@pytest.fixture(scope="session")
def ldap_server() -> Iterator[LdapServer]:
    yield from ldap_server_running()
