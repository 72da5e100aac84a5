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


def _mail_settings(profile: str, env_overrides: dict[str, str]) -> list[str]:
    """The e-mail settings a profile reads from this environment (no EMAIL_* inherited)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "EMAIL_", "DEFAULT_FROM_EMAIL"))
    }
    env.update(
        {
            "DJANGO_SECRET_KEY": "3Kx9!vQ7-pL2#mZ8@rT5^wN1&yB4*cH6(jF0)dS-gU3+eA7=oI9",
            "DJANGO_ALLOWED_HOSTS": "steplab.example",
            "DJANGO_SETTINGS_MODULE": f"config.settings.{profile}",
            **env_overrides,
        }
    )
    code = (
        "from django.conf import settings as s; print(s.EMAIL_BACKEND.rsplit('.', 2)[-2], "
        "s.STEPLAB_EMAIL_ENABLED, s.EMAIL_HOST or '-', s.EMAIL_PORT, s.EMAIL_USE_TLS, "
        "s.EMAIL_USE_SSL)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


@pytest.mark.parametrize(
    ("profile", "env", "expected"),
    [
        # The demo prints invitation e-mails on its console
        ("dev", {}, "console True - 587 True False"),
        # Production sends nothing until it is told a mail server (leads copy the links)
        ("prod", {}, "smtp False - 587 True False"),
        # ...and then uses it, TLS as the port implies unless said otherwise
        (
            "prod",
            {"EMAIL_HOST": "smtp.lab.example", "EMAIL_PORT": "465"},
            "smtp True smtp.lab.example 465 False True",
        ),
        (
            "prod",
            {"EMAIL_HOST": "mx", "EMAIL_PORT": "25", "EMAIL_USE_TLS": "1"},
            "smtp True mx 25 True False",
        ),
        # docker-compose passes unset variables as empty: the defaults hold
        (
            "prod",
            {"EMAIL_HOST": "mx", "EMAIL_PORT": "", "EMAIL_USE_TLS": ""},
            "smtp True mx 587 True False",
        ),
        ("dev", {"EMAIL_HOST": "mx"}, "smtp True mx 587 True False"),
    ],
)
def test_invitation_mail_comes_from_the_environment(
    profile: str, env: dict[str, str], expected: str
) -> None:
    assert _mail_settings(profile, env) == expected.split()
