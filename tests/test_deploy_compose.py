"""docker-compose.yml and the Dockerfile, checked without a Docker engine.

`docker-compose config` (Debian's docker-compose package, which `make test` installs)
validates the file against the Compose schema and resolves the variables from
.env.example; the test then reads the resolved file and checks what the deployment
promises: the services, their commands and queues, health checks, the GPU reservation,
the mounted model directory and the order of start-up."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import IN_CI, REPO_ROOT

COMPOSE = REPO_ROOT / "docker-compose.yml"
DOCKERFILE = REPO_ROOT / "Dockerfile"
ENV_EXAMPLE = REPO_ROOT / ".env.example"


def _docker_compose() -> str:
    found = shutil.which("docker-compose")
    if found is None:
        if IN_CI:
            pytest.fail("docker-compose is missing in CI (make test installs Debian's package)")
        pytest.skip("docker-compose not installed (make test installs Debian's package)")
    return found


def _config(compose_file: Path, env_file: Path = ENV_EXAMPLE) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_docker_compose(), "--env-file", str(env_file), "-f", str(compose_file), "config"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture(scope="module")
def resolved() -> dict[str, Any]:
    result = _config(COMPOSE)
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


def test_compose_file_is_valid_and_has_every_service(resolved: dict[str, Any]) -> None:
    assert set(resolved["services"]) == {
        "postgres",
        "redis",
        "migrate",
        "web",
        "worker",
        "gpu-worker",
    }


def test_every_long_running_service_has_a_health_check(resolved: dict[str, Any]) -> None:
    services = resolved["services"]
    for name in ("postgres", "redis", "web", "worker", "gpu-worker"):
        check = services[name].get("healthcheck", {})
        assert check.get("test") and not check.get("disable"), name
    assert "/healthz" in " ".join(services["web"]["healthcheck"]["test"])
    # The one-shot migrate is healthy when it exits 0; the others wait for exactly that.
    for name in ("web", "worker", "gpu-worker"):
        depends = services[name]["depends_on"]
        assert depends["migrate"]["condition"] == "service_completed_successfully", name
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_workers_consume_their_queues_and_the_gpu_worker_reserves_a_gpu(
    resolved: dict[str, Any],
) -> None:
    services = resolved["services"]
    # The commands are the workers' one definition (config/workers.py), whose flags
    # tests/test_workers_defined_once.py checks
    assert services["worker"]["command"] == ["python", "-m", "config.workers", "default"]
    assert services["gpu-worker"]["command"] == ["python", "-m", "config.workers", "gpu"]
    devices = services["gpu-worker"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]
    volumes = services["gpu-worker"]["volumes"]
    # docker-compose 1.x prints the short form ("host:/models:rw"), v2 the long one.
    targets = [v["target"] if isinstance(v, dict) else v.split(":")[1] for v in volumes]
    assert "/models" in targets
    assert services["gpu-worker"]["environment"]["STEPLAB_MODEL_DIR"] == "/models"
    # The backbones a run may name: listed by the web (read-only), loaded by the worker
    for name in ("web", "gpu-worker"):
        assert services[name]["environment"]["STEPLAB_BACKBONE_DIR"] == "/models/backbones"
    web_volume, web_imports = services["web"]["volumes"]
    if isinstance(web_volume, dict):
        assert (web_volume["target"], web_volume.get("read_only")) == ("/models", True)
    else:
        assert web_volume.split(":")[1:] == ["/models", "ro"]
    # Uploads wait for their import job in one volume that the web writes and the worker
    # reads, at STEPLAB_IMPORT_DIR in both.
    (worker_imports,) = services["worker"]["volumes"]
    for volume in (web_imports, worker_imports):
        if isinstance(volume, dict):
            assert (volume["source"], volume["target"]) == ("imports", "/imports")
        else:
            assert volume.split(":")[1] == "/imports"
    for name in ("web", "worker"):
        assert services[name]["environment"]["STEPLAB_IMPORT_DIR"] == "/imports"
    web = " ".join(services["web"]["command"])
    assert web.startswith("gunicorn config.wsgi:application")


def test_production_settings_and_no_secret_in_the_file(resolved: dict[str, Any]) -> None:
    for name in ("migrate", "web", "worker", "gpu-worker"):
        env = resolved["services"][name]["environment"]
        assert env["DJANGO_SETTINGS_MODULE"] == "config.settings.prod", name
    text = COMPOSE.read_text()
    # Secrets are required variables (`${VAR:?...}`), never values written in the file.
    for variable in ("DJANGO_SECRET_KEY", "POSTGRES_PASSWORD", "DJANGO_ALLOWED_HOSTS"):
        assert re.search(r"\$\{" + variable + r":\?", text), variable


def test_compose_refuses_to_resolve_without_the_secrets(tmp_path: Path) -> None:
    empty = tmp_path / "empty.env"
    empty.write_text("")
    result = _config(COMPOSE, env_file=empty)
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY" in result.stderr or "POSTGRES_PASSWORD" in result.stderr


def test_the_validation_catches_a_broken_compose_file(tmp_path: Path) -> None:
    """The check is a real schema validation: a misspelt key is rejected."""
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(COMPOSE.read_text().replace("    healthcheck:\n", "    helthcheck:\n", 1))
    (tmp_path / ".env").write_text(ENV_EXAMPLE.read_text())
    result = _config(broken, env_file=tmp_path / ".env")
    assert result.returncode != 0
    assert "helthcheck" in result.stderr


def test_dockerfile_shape() -> None:
    """What the Dockerfile must keep doing, in order: CPU torch first (pinned), then the
    package with its `ml` extra, collectstatic at build time, a non-root user, gunicorn."""
    lines = [
        line.strip()
        for line in DOCKERFILE.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    text = "\n".join(lines)
    assert re.search(r"^FROM python:3\.11-slim\b", text, re.M)
    assert re.search(r"^ARG TORCH_VERSION=2\.13\.0$", text, re.M)

    def first(pattern: str) -> int:
        for number, line in enumerate(lines):
            if re.search(pattern, line):
                return number
        pytest.fail(f"no line matches {pattern!r}")

    torch = first(r'pip install .*"torch==\$\{TORCH_VERSION\}"')
    package = first(r'pip install "\.\[ml\]"')
    collect = first(r"collectstatic --noinput")
    user = first(r"^USER steplab$")
    assert torch < package < collect < user
    assert "/whl/cpu" in text  # the default build is the CPU one
    assert re.search(r'^CMD \["gunicorn", "config\.wsgi:application"', text, re.M)
    assert not re.search(r"^USER root", text, re.M)
    ignored = (REPO_ROOT / ".dockerignore").read_text().split()
    for path in (".venv", ".env", ".git", "node_modules", "db.sqlite3*"):
        assert path in ignored, path


def test_env_example_names_every_variable_the_compose_file_requires() -> None:
    required = set(re.findall(r"\$\{([A-Z_]+):\?", COMPOSE.read_text()))
    example = {
        line.split("=", 1)[0]
        for line in ENV_EXAMPLE.read_text().splitlines()
        if line and not line.startswith("#")
    }
    assert required and required <= example
