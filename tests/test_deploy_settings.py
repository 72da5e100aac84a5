"""Deployment settings: the health endpoint, Celery's settings for long runs, and the
production profile's refusal of placeholder secrets."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
from django.test import Client, override_settings

from tests.conftest import REPO_ROOT

# ------------------------------------------------------------------ /healthz


@pytest.mark.django_db
def test_healthz_is_ok_when_database_and_broker_answer(client: Client, settings: Any) -> None:
    assert settings.CELERY_BROKER_URL.startswith("redis://")
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok", "broker": "ok"}
    assert "no-cache" in response["Cache-Control"]


@pytest.mark.django_db
def test_healthz_is_503_when_the_broker_is_down(client: Client) -> None:
    # A port nothing listens on: the broker check fails fast instead of hanging.
    with override_settings(CELERY_BROKER_URL="redis://127.0.0.1:9/0"):
        response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json() == {"status": "unavailable", "database": "ok", "broker": "down"}


@pytest.mark.django_db
def test_healthz_answers_any_host_and_never_redirects(client: Client) -> None:
    # A probe reaches the container by an internal name over plain HTTP; the page is
    # answered before host validation and the HTTPS redirect (it holds no data).
    with override_settings(SECURE_SSL_REDIRECT=True, ALLOWED_HOSTS=["steplab.example"]):
        response = client.get("/healthz", HTTP_HOST="web:8000")
        page = client.get("/login/", HTTP_HOST="web:8000")
    assert response.status_code == 200
    assert page.status_code == 400  # everything else still checks the host


@pytest.mark.django_db
def test_healthz_takes_only_reads(client: Client) -> None:
    assert client.post("/healthz").status_code == 405
    assert client.head("/healthz").status_code == 200


# ------------------------------------------------------------------ Celery


def test_celery_settings_fit_long_runs() -> None:
    import prm_training.tasks  # noqa: F401 - registers the PRM tasks
    from config.celery import app

    conf = app.conf
    train = app.tasks["prm_training.train"]
    score = app.tasks["prm_training.score"]
    longest = max(train.time_limit, score.time_limit)
    assert conf.worker_prefetch_multiplier == 1
    assert conf.task_acks_late is False  # late acks only where a task asks for them
    assert train.acks_late and score.acks_late  # idempotent: they claim their row
    evaluate = app.tasks["prm_training.evaluate"]
    assert evaluate.acks_late and evaluate.time_limit == train.time_limit
    assert train.soft_time_limit < train.time_limit
    assert conf.broker_transport_options["visibility_timeout"] > longest
    assert conf.task_time_limit and conf.task_time_limit < longest
    assert conf.task_routes["prm_training.train"]["queue"] == "gpu"
    assert conf.task_routes["prm_training.score"]["queue"] == "gpu"
    assert conf.task_default_queue == "default"


def test_visibility_timeout_stays_above_a_longer_time_limit() -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")},
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "STEPLAB_GPU_TASK_TIME_LIMIT": str(48 * 3600),
        "CELERY_VISIBILITY_TIMEOUT": "3600",
    }
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.CELERY_BROKER_TRANSPORT_OPTIONS['visibility_timeout'])"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert int(result.stdout.strip()) == 49 * 3600


# ------------------------------------------------------------------ prod secrets


@pytest.mark.parametrize(
    "secret",
    [
        "change-me",
        "dev-only-insecure-key-never-used-in-production",
        "django-insecure-" + "a1b2c3d4e5" * 5,
        "short-key",
        "x" * 60,
    ],
)
def test_prod_refuses_placeholder_or_weak_secrets(secret: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings.prod",
        DJANGO_SECRET_KEY=secret,
        DJANGO_ALLOWED_HOSTS="steplab.example",
    )
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and "DJANGO_SECRET_KEY" in result.stderr
