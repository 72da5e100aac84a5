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
TORCH_VERSION ?= 2.13.0
CHROMIUM ?= /usr/bin/chromium

.PHONY: install demo test lint serve bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	# The CPU build of torch first, so the `ml` extra's range is already satisfied.
	$(PIP) install --quiet torch==$(TORCH_VERSION)
	$(PIP) install --quiet -e '.[ml,test]'
	touch $(STAMP)

# Browser tests drive Debian's chromium package (never a downloaded browser build).
$(CHROMIUM):
	command -v apt-get >/dev/null || { echo "need $(CHROMIUM): install Debian's chromium package"; exit 1; }
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null

$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $(NODE_STAMP)

install: $(STAMP) $(NODE_STAMP)

# The embedded default: SQLite (or $$DATABASE_URL), tasks in-process, a demo project.
demo: install
	$(PY) manage.py migrate --noinput
	$(PY) manage.py seed_demo --host $(HOST):$(PORT)
	$(PY) manage.py runserver --noreload $(HOST):$(PORT)

serve: install
	$(PY) manage.py runserver $(HOST):$(PORT)

# The whole suite against PostgreSQL and Redis.
test: install $(CHROMIUM)
	DATABASE_URL=$${DATABASE_URL:-$(TEST_DB_URL)} CELERY_BROKER_URL=$${CELERY_BROKER_URL:-$(TEST_BROKER_URL)} \
		$(PY) -m pytest $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) node_modules staticfiles db.sqlite3
