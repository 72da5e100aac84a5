"""Development and `make demo`: works with nothing else running."""

from .base import *  # noqa: F401,F403
from .base import SECRET_KEY as _SECRET_KEY
from .base import STEPLAB_EMAIL_ENABLED as _EMAIL_FROM_ENVIRONMENT
from .base import env_bool

DEBUG = env_bool("DJANGO_DEBUG", True)
SECRET_KEY = _SECRET_KEY or "dev-only-insecure-key-never-used-in-production"

# `make demo` serves through gunicorn without `collectstatic`: WhiteNoise finds static
# files where the development server would, and picks up an edited file.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

# Invitation e-mails are printed where `make demo` runs (the console backend), unless the
# environment names a real mail server.
if not _EMAIL_FROM_ENVIRONMENT:
    EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"
    STEPLAB_EMAIL_ENABLED = True

# Webhooks may call receivers on this machine (a demo's receiver is on localhost).
STEPLAB_WEBHOOK_ALLOW_PRIVATE = env_bool("STEPLAB_WEBHOOK_ALLOW_PRIVATE", True)
