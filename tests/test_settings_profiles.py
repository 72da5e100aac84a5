"""The production profile refuses to start without its secrets."""

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT


def _import_prod(env_overrides: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
    env.update(env_overrides)
    env["DJANGO_SETTINGS_MODULE"] = "config.settings.prod"
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("env", "missing"),
    [
        ({"DJANGO_ALLOWED_HOSTS": "steplab.example"}, "DJANGO_SECRET_KEY"),
        ({"DJANGO_SECRET_KEY": "x" * 50}, "DJANGO_ALLOWED_HOSTS"),
    ],
)
def test_prod_refuses_to_start_without_secrets(env: dict[str, str], missing: str) -> None:
    result = _import_prod(env)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert missing in result.stderr


def test_prod_starts_with_secrets_and_passes_deploy_checks() -> None:
    env = {
        "DJANGO_SECRET_KEY": "3Kx9!vQ7-pL2#mZ8@rT5^wN1&yB4*cH6(jF0)dS-gU3+eA7=oI9",
        "DJANGO_ALLOWED_HOSTS": "steplab.example",
    }
    result = _import_prod(env)
    assert result.returncode == 0, result.stderr
    check = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=REPO_ROOT,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")},
            **env,
            "DJANGO_SETTINGS_MODULE": "config.settings.prod",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0, check.stdout + check.stderr
