"""Settings shared by every profile. Everything that differs between machines comes
from the environment; unset, it falls back to the embedded default (SQLite, a broker in a
folder), so a fresh checkout runs with nothing else installed."""

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import dj_database_url

from config import sso, sso_saml
from config.broker import TRANSPORT, default_folder, folder_options

from .env import env_bool, env_list

BASE_DIR = Path(__file__).resolve().parents[2]


SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "")
DEBUG = env_bool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "csp",
    "axes",
    # Single sign-on (settings, "Single sign-on"): installed always, so its tables exist
    # whatever the environment says; nothing of it shows until a provider is configured.
    "allauth",
    "allauth.account",
    "allauth.socialaccount",
    "allauth.socialaccount.providers.openid_connect",
    "allauth.socialaccount.providers.saml",
    "annotation",
    "prm_training",
]

MIDDLEWARE = [
    # First: /healthz answers probes before host checks and the HTTPS redirect.
    "config.health.HealthCheckMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "config.csp.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    # Before the CSRF check, which reads the body: 415 for a multipart body where no file
    # is expected, before a byte of it is read.
    "config.uploads.MultipartOnlyWhereExpectedMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # django-allauth requires it (it keeps a sign-in's state between the provider's pages).
    "allauth.account.middleware.AccountMiddleware",
    # Last: turns a sign-in refused for too many failures into the lockout response.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", f"sqlite:///{BASE_DIR / 'db.sqlite3'}"),
        conn_max_age=int(os.environ.get("DATABASE_CONN_MAX_AGE", "60")),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Many short writes from several request threads: wait for the write lock instead of
    # failing at once, and use WAL so readers never block the writer.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"timeout": 20, "init_command": "PRAGMA journal_mode=WAL;", "transaction_mode": "IMMEDIATE"}
    )
    DATABASES["default"]["CONN_MAX_AGE"] = 0
elif DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # Persistent connections (CONN_MAX_AGE above) plus server-side binding let psycopg 3
    # prepare a statement once it has run `prepare_threshold` times on a connection, so
    # PostgreSQL plans the queue's queries once per connection instead of on every
    # request: planning cost more than running them. Django's default client-side
    # binding never prepares. Set DATABASE_PREPARED_STATEMENTS=0 behind a pooler that
    # cannot keep prepared statements (PgBouncer in transaction mode before 1.21).
    if env_bool("DATABASE_PREPARED_STATEMENTS", True):
        DATABASES["default"].setdefault("OPTIONS", {}).update(
            {"server_side_binding": True, "prepare_threshold": 2}
        )

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Django's own set (startproject's): a password like the username or e-mail, shorter than
# 8 characters, among 20,000 common ones, or all digits is refused wherever one is set (an
# invitation, a password change).
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
# Front-end packages come from the npm registry through package.json and are served by
# Django under /static/vendor/ (no CDN).
STATICFILES_DIRS = [BASE_DIR / "static"] + [
    (f"vendor/{name}", path)
    for name, path in (
        ("katex", BASE_DIR / "node_modules" / "katex" / "dist"),
        ("chartjs", BASE_DIR / "node_modules" / "chart.js" / "dist"),
    )
    if path.is_dir()
]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

REST_FRAMEWORK = {
    # Token first: an anonymous API call then gets 401 with `WWW-Authenticate: Token`
    # rather than a bare 403. The session still authenticates the pages' fetches, with
    # DRF enforcing CSRF on them. The token class reads ApiToken (expiry, scope).
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "annotation.api.authentication.ApiTokenAuthentication",
        "annotation.api.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # The data layer's errors become status codes in one place, not in each view.
    "EXCEPTION_HANDLER": "annotation.api.errors.api_exception_handler",
    "DEFAULT_PARSER_CLASSES": [
        "annotation.api.parsers.JSONParser",
        "annotation.api.parsers.FormParser",
    ],  # multipart only where a view names its parser (config.uploads)
    # DRF's test client sends JSON unless a test names another format (its own default,
    # multipart, is refused by every endpoint but the imports).
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "annotation.api.fields.PageNumberPagination",
    "PAGE_SIZE": 50,
    # How many reverse proxies stand in front of gunicorn. DRF otherwise trusts the
    # client's own X-Forwarded-For header, so a password guesser could dodge the sign-in
    # lockout by sending a new address each time. 0: count by the socket's address.
    "NUM_PROXIES": int(os.environ.get("STEPLAB_NUM_PROXIES", "0")),
}

# Sign-in (django-axes): failed attempts, never successful ones, are counted on every entry
# point that calls `authenticate`, as rows in the database (shared by every worker and
# host). A username (case-folded) is locked at one client address after
# STEPLAB_LOGIN_FAILURE_LIMIT failures from there; across addresses after
# STEPLAB_LOGIN_USERNAME_FAILURE_LIMIT, and an address across usernames after
# STEPLAB_LOGIN_ADDRESS_FAILURE_LIMIT, each only where the username has not signed in from
# that address within STEPLAB_LOGIN_KNOWN_ADDRESS_DAYS. Invitation links that open nothing
# lock an address after STEPLAB_INVITE_LINK_FAILURE_LIMIT (annotation/login_lockout.py).
# A lock lifts after the cool-off, counted from the last failure.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    # LDAP (annotation/sso_ldap.py), before the gate below: a directory account's password
    # is not a local password. Signs no one in while STEPLAB_LDAP_URI is unset.
    "annotation.sso_ldap.LdapBackend",
    # Refuses the passwords of everyone but superusers when STEPLAB_LOCAL_PASSWORDS is
    # off (annotation/sso.py); passes every other attempt on to ModelBackend.
    "annotation.sso.LocalPasswordGate",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_HANDLER = "annotation.login_lockout.LoginLockoutHandler"
# In this order: the handler reads the pair's, the username's and the address's counts.
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"], "username", "ip_address"]
AXES_USERNAME_CALLABLE = "annotation.login_lockout.lockout_username"
AXES_FAILURE_LIMIT = int(os.environ.get("STEPLAB_LOGIN_FAILURE_LIMIT", "10"))
STEPLAB_LOGIN_USERNAME_FAILURE_LIMIT = int(
    os.environ.get("STEPLAB_LOGIN_USERNAME_FAILURE_LIMIT", "50")
)
STEPLAB_LOGIN_ADDRESS_FAILURE_LIMIT = int(
    os.environ.get("STEPLAB_LOGIN_ADDRESS_FAILURE_LIMIT", "200")
)
STEPLAB_INVITE_LINK_FAILURE_LIMIT = int(os.environ.get("STEPLAB_INVITE_LINK_FAILURE_LIMIT", "100"))
STEPLAB_LOGIN_KNOWN_ADDRESS_DAYS = int(os.environ.get("STEPLAB_LOGIN_KNOWN_ADDRESS_DAYS", "90"))
AXES_COOLOFF_TIME = timedelta(minutes=int(os.environ.get("STEPLAB_LOGIN_COOLOFF_MINUTES", "15")))
# The client address by the same rule as DRF's NUM_PROXIES above (one spelling of it).
AXES_CLIENT_IP_CALLABLE = "annotation.login_lockout.client_address"
AXES_LOCKOUT_CALLABLE = "annotation.login_lockout.lockout_response"
# Failed attempts are kept (for the admin's "Access attempts"); successful sign-ins are
# not logged, so a login costs no extra write.
AXES_DISABLE_ACCESS_LOG = True

# API tokens (annotation/api_tokens.py; each user sees and revokes theirs on /tokens/):
# a token expires STEPLAB_API_TOKEN_DAYS after it is issued, and all of a user's tokens
# end when their password changes. A user holds at most STEPLAB_API_TOKENS_PER_USER
# unexpired tokens: the token sign-in makes room by revoking its own oldest ones, the
# page refuses to make one more.
STEPLAB_API_TOKEN_DAYS = int(os.environ.get("STEPLAB_API_TOKEN_DAYS", "30"))
STEPLAB_API_TOKENS_PER_USER = int(os.environ.get("STEPLAB_API_TOKENS_PER_USER", "20"))
AXES_RESET_ON_SUCCESS = False
# Axes keeps a failed attempt's form fields; an invitation's secret and new passwords are
# masked there like the password (annotation/projects/invite_views.py counts invalid links).
AXES_SENSITIVE_PARAMETERS = ["token", "password1", "password2"]

# Invitations (annotation/projects/invites.py): a lead invites people to a project with a
# one-time link. Links last STEPLAB_INVITE_DAYS unless the lead picks another span (at
# most STEPLAB_INVITE_MAX_DAYS); a list or CSV invites at most STEPLAB_INVITE_MAX_ROWS
# people at once. STEPLAB_SITE_URL, when set, is the start of every link (the address
# people reach the site at, e.g. https://steplab.example.org); unset, links use the
# address the lead's request came to.
STEPLAB_INVITE_DAYS = int(os.environ.get("STEPLAB_INVITE_DAYS", "7"))
STEPLAB_INVITE_MAX_DAYS = int(os.environ.get("STEPLAB_INVITE_MAX_DAYS", "30"))
STEPLAB_INVITE_MAX_ROWS = int(os.environ.get("STEPLAB_INVITE_MAX_ROWS", "200"))
STEPLAB_SITE_URL = os.environ.get("STEPLAB_SITE_URL", "").rstrip("/")

# E-mail: invitations are sent through Django's e-mail backend when they name an address.
# Production reads the SMTP server from the environment; with no EMAIL_HOST (and no other
# EMAIL_BACKEND) nothing is sent and the lead copies each link from the page. The
# development profile (`make demo`) prints messages on the console.
EMAIL_HOST = os.environ.get("EMAIL_HOST", "")
EMAIL_BACKEND = os.environ.get("EMAIL_BACKEND") or "django.core.mail.backends.smtp.EmailBackend"
EMAIL_PORT = int(os.environ.get("EMAIL_PORT") or "587")
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
# STARTTLS on the submission port, TLS from the start on 465, unless said otherwise (an
# empty value, as docker-compose passes an unset one, keeps the port's default).
EMAIL_USE_TLS = (
    env_bool("EMAIL_USE_TLS", EMAIL_PORT == 587)
    if os.environ.get("EMAIL_USE_TLS")
    else EMAIL_PORT == 587
)
EMAIL_USE_SSL = (
    env_bool("EMAIL_USE_SSL", EMAIL_PORT == 465)
    if os.environ.get("EMAIL_USE_SSL")
    else EMAIL_PORT == 465
)
# A slow mail server must not hold a lead's request for long: each message waits at most
# this many seconds.
EMAIL_TIMEOUT = int(os.environ.get("EMAIL_TIMEOUT") or "10")
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL") or "Steplab <steplab@localhost>"
STEPLAB_EMAIL_ENABLED = bool(EMAIL_HOST or os.environ.get("EMAIL_BACKEND"))

# Webhooks (annotation/webhooks/targets.py): whether a webhook may call a loopback, private
# or otherwise non-public address. Off here and in production: a lead's URL would let the
# server call its own neighbours (server-side request forgery). Development (`make demo`,
# receivers on the same machine) and the tests (a receiver on 127.0.0.1) turn it on.
STEPLAB_WEBHOOK_ALLOW_PRIVATE = env_bool("STEPLAB_WEBHOOK_ALLOW_PRIVATE", False)
# How long a delivered or failed webhook message stays in the delivery log (workers prune
# older ones hourly); a message still waiting is never pruned.
STEPLAB_WEBHOOK_LOG_DAYS = int(os.environ.get("STEPLAB_WEBHOOK_LOG_DAYS", "30"))

# What one request or one person may cost (sessions, SAML, previews, queued runs), then
# single sign-on.
from .limits import *  # noqa: E402,F401,F403
from .single_sign_on import *  # noqa: E402,F401,F403
from .single_sign_on import STEPLAB_OIDC_PROVIDERS, STEPLAB_SAML_PROVIDERS  # noqa: E402

# Nothing that must be shared between web processes lives in the cache (sessions and the
# sign-in counters are in the database), so per-process memory is the default; set
# CACHE_URL (e.g. redis://127.0.0.1:6379/1) to share it anyway.
CACHE_URL = os.environ.get("CACHE_URL", "")
CACHES = {
    "default": (
        {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": CACHE_URL}
        if CACHE_URL
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "steplab"}
    )
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Steplab API",
    # config/converters.py: an id in a path is a bigint.
    "PATH_CONVERTER_OVERRIDES": {
        "id": {"type": "integer", "minimum": 1, "maximum": 2**63 - 1},
    },
    "DESCRIPTION": "Step-level labeling of reasoning chains for process reward models.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI and Redoc are served from our own static files: no CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Choice sets used by several serializers get one schema name each, so run statuses,
    # triggers and strategies do not collide with other "status" or "strategy" enums.
    "ENUM_NAME_OVERRIDES": {
        "RunStatusEnum": "prm_training.models.RunStatus",
        "RunTriggerEnum": "prm_training.models.RunTrigger",
        "AcquisitionStrategyEnum": "prm_training.models.AcquisitionStrategy",
        "ScreeningStatusEnum": "annotation.models.ScreeningStatus",
        "ConsensusMethodEnum": "annotation.models.ConsensusMethod",
        "ChainStatusEnum": "annotation.chains.selectors.ChainStatus.ALL",
        "InviteStateEnum": "annotation.models.InviteState",
        "ApiTokenStateEnum": "annotation.api.tokens.API_TOKEN_STATES",
        "MachineSourceEnum": "annotation.models.MachineSource",
        # The names these had before machine-label runs brought a second kind and mode.
        "KindEnum": "annotation.models.ChainEventKind",
        "ModeEnum": "prm_training.ml.config.MODES",
        "MachineLabelRunKindEnum": "prm_training.models.MachineLabelRunKind",
        "RolloutModeEnum": "prm_training.services.machine_labels.ROLLOUT_MODES",
        "SnapshotKindEnum": "annotation.datasets.snapshot_reads.SNAPSHOT_KINDS",
    },
}

# Celery. Tasks always run on a worker, never inside a web request. Without a broker URL
# (the embedded default) the broker is a folder (config/broker.py: kombu's filesystem
# transport), one per database, which `make demo`'s workers read; STEPLAB_BROKER_DIR
# places it elsewhere.
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "")
STEPLAB_BROKER_DIR = Path(
    os.environ.get("STEPLAB_BROKER_DIR") or default_folder(BASE_DIR, DATABASES["default"])
)
CELERY_BROKER_URL = CELERY_BROKER_URL or "filesystem://"
if CELERY_BROKER_URL == "filesystem://":
    CELERY_BROKER_TRANSPORT = TRANSPORT
CELERY_RESULT_BACKEND = os.environ.get("CELERY_RESULT_BACKEND") or None
CELERY_TASK_DEFAULT_QUEUE = "default"
# Routes match task names, not module paths ("prm_training.tasks.*" would match nothing).
CELERY_TASK_ROUTES = {
    "prm_training.train": {"queue": "gpu"},
    "prm_training.score": {"queue": "gpu"},
    "prm_training.simulate": {"queue": "gpu"},
    "prm_training.machine_labels": {"queue": "gpu"},
    "prm_training.evaluate": {"queue": "gpu"},
}
# Each worker process reserves at most one message: a GPU worker busy with a six-hour
# training run must not sit on the next run while another GPU worker idles. (With late
# acks it holds only the message it runs.)
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Late acks only where a task says so (the PRM tasks, whose services claim their row
# under a lock): a redelivered non-idempotent task would do its work twice.
CELERY_TASK_ACKS_LATE = False
# Time limits. Training and scoring get the long limit, everything else the short one;
# the soft limit raises SoftTimeLimitExceeded in the task so it can fail its run cleanly
# before the hard limit kills the process.
STEPLAB_TASK_TIME_LIMIT = int(os.environ.get("STEPLAB_TASK_TIME_LIMIT", str(15 * 60)))
STEPLAB_GPU_TASK_TIME_LIMIT = int(os.environ.get("STEPLAB_GPU_TASK_TIME_LIMIT", str(8 * 3600)))
CELERY_TASK_TIME_LIMIT = STEPLAB_TASK_TIME_LIMIT
CELERY_TASK_SOFT_TIME_LIMIT = max(STEPLAB_TASK_TIME_LIMIT - 60, 1)
# Every task routed to queue "gpu" gets the long limit: the list is read from the routes,
# so a kind of run added there cannot fall back to the short default (machine-label runs
# once did, and were killed after 15 minutes).
CELERY_TASK_ANNOTATIONS = {
    name: {
        "time_limit": STEPLAB_GPU_TASK_TIME_LIMIT,
        "soft_time_limit": max(STEPLAB_GPU_TASK_TIME_LIMIT - 300, 1),
    }
    for name, route in CELERY_TASK_ROUTES.items()
    if route.get("queue") == "gpu"
}
# An uploaded file's import (queue "default"): a 2 GB upload is millions of chains.
STEPLAB_IMPORT_TASK_TIME_LIMIT = int(os.environ.get("STEPLAB_IMPORT_TASK_TIME_LIMIT", "7200"))
CELERY_TASK_ANNOTATIONS["annotation.import_job"] = {
    "time_limit": STEPLAB_IMPORT_TASK_TIME_LIMIT,
    "soft_time_limit": max(STEPLAB_IMPORT_TASK_TIME_LIMIT - 60, 1),
}
# Redis redelivers a message not acknowledged within the visibility timeout. With late
# acks a run still going past it would be delivered a second time, so it is kept above the
# longest time limit (plus an hour's margin) whatever the environment asks for.
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, Any] = {
    "visibility_timeout": max(
        int(os.environ.get("CELERY_VISIBILITY_TIMEOUT", str(12 * 3600))),
        STEPLAB_GPU_TASK_TIME_LIMIT + 3600,
    ),
}
if CELERY_BROKER_URL == "filesystem://":
    CELERY_BROKER_TRANSPORT_OPTIONS.update(folder_options(STEPLAB_BROKER_DIR))
    # Remote control broadcasts to a queue per worker, which a file broker keeps as files
    # long after the worker is gone; nothing here uses it.
    CELERY_WORKER_ENABLE_REMOTE_CONTROL = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]

# What one training run may ask of the GPU node, each refused with its limit named before
# the run is queued (prm_training.services.training_settings.node_limits); (value, variable).
# Processes: one per GPU of the node (on a CPU each loads the whole backbone), so 1 unless
# the node has more GPUs. The others bound one run's memory (batch x window) and time.
STEPLAB_TRAINING_LIMITS: dict[str, tuple[int, str]] = {
    name: (int(os.environ.get(variable, default)), variable)
    for name, variable, default in (
        ("processes", "STEPLAB_TRAIN_MAX_PROCESSES", "1"),
        ("batch_size", "STEPLAB_TRAIN_MAX_BATCH_SIZE", "256"),
        ("head_batch_size", "STEPLAB_TRAIN_MAX_HEAD_BATCH_SIZE", "65536"),
        ("max_length", "STEPLAB_TRAIN_MAX_LENGTH", "8192"),
        ("epochs", "STEPLAB_TRAIN_MAX_EPOCHS", "100"),
        ("head_epochs", "STEPLAB_TRAIN_MAX_HEAD_EPOCHS", "10000"),
        ("ensemble_size", "STEPLAB_TRAIN_MAX_ENSEMBLE_SIZE", "16"),
        ("head_hidden", "STEPLAB_TRAIN_MAX_HEAD_HIDDEN", "4096"),
    )
}

# What one simulation run may ask of this node (services.simulation): each seed costs
# 1 + strategies x rounds trainings, so seeds and rounds are bounded like training's.
STEPLAB_SIMULATION_LIMITS: dict[str, tuple[int, str]] = {
    name: (int(os.environ.get(variable, default)), variable)
    for name, variable, default in (
        ("seeds", "STEPLAB_SIMULATION_MAX_SEEDS", "20"),
        ("rounds", "STEPLAB_SIMULATION_MAX_ROUNDS", "8"),
    )
}

# Imports: uploads go to a temporary file, never into memory whole. Only the imports
# API endpoint takes a multipart body (config.uploads), spooled to a nameless temporary
# file in FILE_UPLOAD_TEMP_DIR (default: $TMPDIR); a page never stores a file part.
STEPLAB_IMPORT_MAX_UPLOAD_BYTES = int(
    os.environ.get("STEPLAB_IMPORT_MAX_UPLOAD_BYTES", str(2 * 1024**3))
)
FILE_UPLOAD_HANDLERS = ["config.uploads.NoFileUploadHandler"]
FILE_UPLOAD_MAX_MEMORY_SIZE = 2 * 1024 * 1024
# Uploads waiting for their import task (annotation.datasets.import_jobs): web and workers
# must both see this directory (one volume); a file is removed once its job finishes.
STEPLAB_IMPORT_DIR = Path(os.environ.get("STEPLAB_IMPORT_DIR") or BASE_DIR / "var" / "imports")
# Per-chain limits at import (a chain over one is a bad line), so every chain imported
# can be leased and submitted. The largest submit body is a rating per step with a
# 10,000-character comment, plus a 20,000-character rewrite, each character as a 6-byte
# JSON escape (\u00XX, the longest a UTF-8 JSON encoder writes): 150 steps x ~60 KB +
# 120 KB = 9.1 MB, under DATA_UPLOAD_MAX_MEMORY_SIZE (10 MiB); raise that with the step
# limit. A step is never longer than the rewrite that may replace it. The real ProcessBench,
# PRM800K and Math-Shepherd chains have at most 32 steps of 1,500 characters.
STEPLAB_IMPORT_MAX_STEPS = int(os.environ.get("STEPLAB_IMPORT_MAX_STEPS", "150"))
STEPLAB_IMPORT_MAX_STEP_CHARS = int(os.environ.get("STEPLAB_IMPORT_MAX_STEP_CHARS", "10000"))
# The problem, the final answer and the reference answer.
STEPLAB_IMPORT_MAX_PROBLEM_CHARS = int(os.environ.get("STEPLAB_IMPORT_MAX_PROBLEM_CHARS", "20000"))

# Content-Security-Policy (django-csp): scripts only from our own origin, so text that
# slips into a page as markup cannot run (invariant 7 holds twice). Styles allow
# 'unsafe-inline' because KaTeX renders formulas as HTML with inline `style` attributes;
# an inline style cannot run code. No CDN anywhere, so 'self' is the only source.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", "'unsafe-inline'"],
        # KaTeX's fonts and Swagger UI's icons come as files or data: URIs.
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        # Redoc builds its search index in a Web Worker started from a blob: URL.
        "worker-src": ["'self'", "blob:"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        # The identity providers: a "Sign in with" button's redirect goes there.
        "form-action": [
            "'self'",
            *sso.provider_origins(STEPLAB_OIDC_PROVIDERS),
            *sso_saml.saml_origins(STEPLAB_SAML_PROVIDERS),
        ],
        "frame-ancestors": ["'none'"],
    }
}
DATA_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024 * 1024

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
}
