"""`make demo` prints its URL and logins last: after its server listens and its Celery
workers said they are ready, not about 96 lines up under Celery's banners.

The supervisor the Makefile runs (``config.demo --banner FILE -- WEB COMMAND``) with its
two real workers (on a folder broker) and, for the web command, a stand-in that says
"Listening at:" as gunicorn does. Bounded: every wait has a deadline, the group is
stopped on the way out."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

BANNER = "Steplab is running.\nURL: http://127.0.0.1:8000/\nlogin: lena / demo-pass (lead)\n"
WEB_STAND_IN = (
    "import sys, time; time.sleep(1); print('Listening at: http://127.0.0.1:8000', flush=True);"
    " time.sleep(600)"
)


def _output_until(process: subprocess.Popen[bytes], needle: str, seconds: float) -> list[str]:
    """The process's output lines up to and including the first that holds ``needle``."""
    assert process.stdout is not None
    lines: list[str] = []
    pending = b""
    reader = selectors.DefaultSelector()
    reader.register(process.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not reader.select(timeout=0.5):
            continue
        chunk = os.read(process.stdout.fileno(), 65536)
        if not chunk:
            break
        pending += chunk
        *done, pending = pending.split(b"\n")
        lines += [line.decode(errors="replace") for line in done]
        if any(needle in line for line in lines):
            return lines
    raise AssertionError(f"no {needle!r} within {seconds} s:\n" + "\n".join(lines[-40:]))


def test_the_urls_and_logins_come_after_every_ready_line(
    transactional_db: Any, settings: Any, tmp_path: Path
) -> None:
    # Given: the banner seed_demo writes, and the demo's environment (no broker
    # configured: the folder broker, here under tmp_path) on the test database
    banner = tmp_path / "demo-banner.txt"
    banner.write_text(BANNER)
    db = settings.DATABASES["default"]
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "CELERY_", "STEPLAB_", "MAKE"))
    }
    user, host = db.get("USER") or "postgres", db.get("HOST") or "127.0.0.1"
    env.update(
        {
            "DATABASE_URL": f"postgres://{user}@{host}:{db.get('PORT') or 5432}/{db['NAME']}",
            "STEPLAB_BROKER_DIR": str(tmp_path / "broker"),
            "STEPLAB_MODEL_DIR": str(tmp_path / "models"),
        }
    )
    command = [sys.executable, "-m", "config.demo", "--banner", str(banner), "--"]

    # When: the demo starts
    process = subprocess.Popen(
        [*command, sys.executable, "-c", WEB_STAND_IN],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        lines = _output_until(process, "login: lena", seconds=180)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)

    # Then: both workers and the server said they were ready before the banner came
    banner_at = next(i for i, line in enumerate(lines) if "Steplab is running." in line)
    ready = [i for i, line in enumerate(lines) if line.rstrip().endswith(" ready.")]
    assert len(ready) == 2, lines[-40:]
    assert max(ready) < banner_at
    assert any("Listening at:" in line for line in lines[:banner_at])
    assert lines[banner_at : banner_at + 3] == BANNER.splitlines()
