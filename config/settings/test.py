"""Tests: PostgreSQL and Redis for real, as on the production stack."""

import os

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/steplab")
os.environ.setdefault("CELERY_BROKER_URL", "redis://127.0.0.1:6379/15")

from .base import *  # noqa: E402,F401,F403

SECRET_KEY = "test-only-key"
DEBUG = False
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
DATABASES["default"]["CONN_MAX_AGE"] = 0  # noqa: F405

# Tests never run collectstatic; WhiteNoise would warn on every request that the
# collected-static directory is missing. Static files are served from the finders.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = True

# pytest-django swaps in the in-memory backend (django.core.mail.outbox); invitations are
# sent to it.
STEPLAB_EMAIL_ENABLED = True

# The webhook tests' receiver listens on 127.0.0.1; a test of the refusal turns this off.
STEPLAB_WEBHOOK_ALLOW_PRIVATE = True
