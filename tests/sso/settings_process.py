"""Django's settings read in a fresh process from a given environment, for the single
sign-on settings tests: what start-up makes of the variables, and that a mistake in one
stops it."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO_ROOT

# The variables of single sign-on: the process sees only those the test gives it.
_SSO_PREFIXES = ("STEPLAB_OIDC_", "STEPLAB_SAML_", "STEPLAB_LDAP_", "STEPLAB_LOCAL_")


def settings_read(env: dict[str, str], code: str) -> subprocess.CompletedProcess[str]:
    """``django.setup()`` then ``code`` in a new interpreter under ``env``."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(_SSO_PREFIXES)}
    environ.update({"DJANGO_SETTINGS_MODULE": "config.settings.test", **env})
    return subprocess.run(
        [sys.executable, "-c", f"import django; django.setup(); {code}"],
        cwd=REPO_ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )
