"""The Celery workers are defined once (``config.workers``) and every place that starts one
starts that definition: `make worker`, `make gpu-worker`, the Compose file, `make demo`
(``config.demo``) and the tests' worker fixture. A lab runs what the tests run: before,
the tests ran the solo pool while every lab ran prefork, and the runs that start
processes of their own failed only in the lab."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml

from config.workers import WORKERS, worker_argv
from tests.conftest import REPO_ROOT

# A command that starts a worker without the definition: `celery -A config worker` in a
# shell line, or "celery", "-A", "config", "worker" in a Python or YAML list.
_BARE_WORKER = re.compile(r"""celery["'\s,\\]*-A["'\s,\\]*[\w.]+["'\s,\\]*worker\b""")


def _make_recipe(target: str) -> str:
    makefile = (REPO_ROOT / "Makefile").read_text()
    match = re.search(rf"^{re.escape(target)}:[^\n]*\n((?:\t[^\n]*\n)+)", makefile, re.MULTILINE)
    assert match, f"no make target {target}"
    return match.group(1)


@pytest.mark.parametrize(("target", "name"), [("worker", "default"), ("gpu-worker", "gpu")])
def test_make_starts_the_defined_worker(target: str, name: str) -> None:
    recipe = _make_recipe(target)
    assert f"exec $(PY) -m config.workers {name}" in recipe
    assert not _BARE_WORKER.search(recipe)


def test_compose_starts_the_defined_workers() -> None:
    services = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())["services"]
    assert services["worker"]["command"] == ["python", "-m", "config.workers", "default"]
    assert services["gpu-worker"]["command"] == ["python", "-m", "config.workers", "gpu"]


def test_the_demo_starts_the_defined_workers() -> None:
    from config.demo import WORKERS as DEMO_WORKERS

    assert DEMO_WORKERS == {f"worker-{name}": worker_argv(name) for name in WORKERS}


def test_the_gpu_worker_is_prefork_one_task_at_a_time_in_a_fresh_child() -> None:
    command = worker_argv("gpu")
    assert command[:6] == [sys.executable, "-m", "celery", "-A", "config", "worker"]
    flags = " ".join(command[6:])
    for flag in (
        "--pool prefork",
        "--queues gpu",
        "--concurrency 1",
        "--prefetch-multiplier 1",
        "--max-tasks-per-child 1",
    ):
        assert flag in flags


def test_no_file_starts_a_worker_of_its_own() -> None:
    """Outside the definition, no Makefile recipe, Compose file, Dockerfile, config module,
    bench script or test helper spells out a ``celery worker`` command."""
    places = [
        REPO_ROOT / "Makefile",
        REPO_ROOT / "docker-compose.yml",
        REPO_ROOT / "Dockerfile",
        *sorted((REPO_ROOT / "config").glob("*.py")),
        *sorted((REPO_ROOT / "bench").glob("*.py")),
        *sorted((REPO_ROOT / "tests").rglob("*.py")),
    ]
    own = {REPO_ROOT / "config" / "workers.py", Path(__file__).resolve()}
    starters = [
        f"{path.relative_to(REPO_ROOT)}: {match.group(0)!r}"
        for path in places
        if path.resolve() not in own
        for match in _BARE_WORKER.finditer(path.read_text())
    ]
    assert not starters, "\n".join(starters)


def test_the_test_fixture_starts_the_defined_workers() -> None:
    source = (REPO_ROOT / "tests" / "prm_training" / "prm_worker.py").read_text()
    assert '"-m", "config.workers", kind' in source
    assert "solo" not in source
