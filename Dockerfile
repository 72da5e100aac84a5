# syntax=docker/dockerfile:1
# One image for every Steplab process: web (gunicorn), worker (queue default), gpu-worker
# (queue gpu) and the one-shot migrate. docker-compose.yml picks the command.
#
# torch is installed first, on its own, so that the `ml` extra's torch range is already
# satisfied and pip never pulls a different build. The default index is PyTorch's CPU
# build; the gpu-worker image is built with TORCH_INDEX_URL pointing at a CUDA build
# (see GPU_TORCH_INDEX_URL in .env.example).

# --- front-end packages (KaTeX, Chart.js) from the npm registry, served by Django --------
FROM node:22-slim AS assets
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund --loglevel=error

# --- the Python application ----------------------------------------------------------------
FROM python:3.11-slim AS app
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONPATH=/app \
    DJANGO_SETTINGS_MODULE=config.settings.prod \
    STEPLAB_MODEL_DIR=/models

RUN pip install --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}"

WORKDIR /app
COPY pyproject.toml README.md ./
COPY config ./config
COPY annotation ./annotation
COPY prm_training ./prm_training
# python-ldap (django-auth-ldap, LDAP sign-in) builds against OpenLDAP's and SASL's
# headers with gcc; the build tools go again in the same layer, the libraries it links
# (libldap, libsasl2) stay for the running image. xmlsec and lxml (SAML) come as wheels
# with their own libxml2 and libxmlsec1: no Debian package; the import below checks that
# the pair pinned in pyproject.toml still matches.
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev libldap2-dev libsasl2-dev \
    && pip install ".[ml]" \
    && apt-mark manual $(dpkg-query -W -f '${db:Status-Abbrev} ${Package}\n' 'libldap*' 'libsasl2*' \
        | awk '/^ii/ && $2 !~ /-dev$/ {print $2}') \
    && apt-get purge -y --auto-remove gcc libc6-dev libldap2-dev libsasl2-dev \
    && rm -rf /var/lib/apt/lists/* \
    && python -c "import ldap, django_auth_ldap, lxml, xmlsec, onelogin.saml2.auth"

COPY manage.py ./
COPY templates ./templates
COPY static ./static
COPY --from=assets /app/node_modules ./node_modules

# Static files are collected at build time (WhiteNoise serves them from STATIC_ROOT).
# The production profile needs a secret to load; this throwaway one exists only here.
RUN DJANGO_SECRET_KEY="collectstatic-only-$(python -c 'import secrets; print(secrets.token_hex(32))')" \
    DJANGO_ALLOWED_HOSTS=localhost \
    python manage.py collectstatic --noinput --verbosity 0

# Never run as root: a non-root user with no shell login, owning only the model folder
# and the folder where uploads wait for their import job (a volume web and worker share).
RUN useradd --system --uid 10001 --create-home --shell /usr/sbin/nologin steplab \
    && mkdir -p /models /imports \
    && chown steplab:steplab /models /imports
USER steplab

EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=10s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=5).status != 200)"]
CMD ["gunicorn", "config.wsgi:application", "--bind", "0.0.0.0:8000", "--worker-class", "gthread", "--threads", "4", "--timeout", "120", "--access-logfile", "-"]
