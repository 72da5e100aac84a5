"""Imports in bounded memory: nested, long, deep and malformed files are imported whole or
rejected with line numbers by a process capped at MEMORY_LIMIT_MIB of address space, and
no upload is ever left in the temporary directory, not even by a killed worker.

The imports run in a child process (`import_child.py`), since the cap (RLIMIT_AS) holds
for a whole process. It connects to this test's database, so these tests commit their
rows (`transaction=True`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, transaction

from annotation.datasets.importers import MAX_LINE_BYTES
from annotation.models import Chain, ImportBatch, ImportJob, ImportJobStatus, Project, Role
from tests.annotation.datasets.import_inputs import nested_bytes
from tests.conftest import REPO_ROOT
from tests.factories import MembershipFactory, ProjectFactory

pytestmark = pytest.mark.django_db(transaction=True)

# Python, Django, DRF and psycopg take about 230 MiB of address space before the first
# import (most of it mapped libraries, not memory in use), so 512 MiB leaves the imports
# under 300 MiB.
MEMORY_LIMIT_MIB = 512
EXAMPLES = int(os.environ.get("STEPLAB_MEMORY_FUZZ_EXAMPLES", "30"))
_IMPORT_LOCK_NAMESPACE = 0x53544C


@pytest.fixture
def lead_project() -> Iterator[tuple[Project, Any]]:
    project = ProjectFactory()
    lead = MembershipFactory(project=project, role=Role.LEAD).user
    yield project, lead


@pytest.fixture
def temporary_dir(tmp_path: Path) -> Path:
    """The child's $TMPDIR, where Django and `tempfile` put uploads."""
    path = tmp_path / "tmp"
    path.mkdir()
    return path


def _child_env(temporary_dir: Path) -> dict[str, str]:
    db = connection.settings_dict
    url = f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    if db.get("PASSWORD"):
        url = url.replace("@", f":{db['PASSWORD']}@", 1)
    return {
        **os.environ,
        "DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "PYTHONPATH": str(REPO_ROOT),
        "TMPDIR": str(temporary_dir),
        # The child runs the upload's job itself (import_child.py); the task message goes
        # to a folder broker no worker reads.
        "CELERY_BROKER_URL": "",
        "STEPLAB_BROKER_DIR": str(temporary_dir.parent / "broker"),
    }


def _child(mode: str, arguments: dict[str, Any]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tests.annotation.datasets.import_child",
        str(MEMORY_LIMIT_MIB),
        mode,
        json.dumps(arguments),
    ]


def _run_child(mode: str, arguments: dict[str, Any], temporary_dir: Path) -> str:
    result = subprocess.run(
        _child(mode, arguments),
        cwd=REPO_ROOT,
        env=_child_env(temporary_dir),
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_any_file_is_imported_whole_or_rejected_with_line_numbers_in_bounded_memory(
    lead_project: tuple[Project, Any], temporary_dir: Path, tmp_path: Path
) -> None:
    project, lead = lead_project
    arguments = {
        "project": project.pk,
        "user": lead.pk,
        "examples": EXAMPLES,
        "work": str(tmp_path),
    }

    output = _run_child("property", arguments, temporary_dir)

    # Both ways out were taken: some files imported, some rejected.
    outcomes = json.loads(output.split("outcomes ", 1)[1].splitlines()[0])
    assert outcomes.get("imported") and outcomes.get("rejected"), outcomes
    assert os.listdir(temporary_dir) == []


# The large upload: 100,000 chains of 10 steps, about 160 MB.
LARGE_CHAINS = int(os.environ.get("STEPLAB_MEMORY_LARGE_CHAINS", "100000"))
# What the whole upload (spooled, stored, imported) may add to the process's resident
# peak: far less than the file, however large it is.
LARGE_PEAK_GROWTH_MIB = 120


@pytest.mark.slow
def test_a_large_upload_streams_from_request_to_import_in_flat_memory(
    lead_project: tuple[Project, Any], temporary_dir: Path, tmp_path: Path, import_dir: Path
) -> None:
    # Given: a file of LARGE_CHAINS chains, larger than the memory its import may take
    project, lead = lead_project
    path = tmp_path / "large.jsonl"
    with path.open("w") as out:
        for index in range(LARGE_CHAINS):
            steps = [f"Step {k} of chain {index}: " + "y" * 120 for k in range(10)]
            out.write(json.dumps({"problem": f"Problem {index}", "steps": steps}) + "\n")
    arguments = {"project": project.pk, "user": lead.pk, "file": str(path), "work": str(tmp_path)}

    # When: it is uploaded through the WSGI handler, its body read from disk, and its job
    # runs in the same process (as the worker's task would), under the address-space cap
    output = _run_child("stream", arguments, temporary_dir)

    # Then: imported whole, and the resident peak grew by far less than the file
    report = json.loads(output.split("stream ", 1)[1].splitlines()[0])
    print(report)
    assert report["status"].startswith("202"), report
    assert (report["job"], report["chains_created"]) == ("done", LARGE_CHAINS), report
    assert report["records_read"] == LARGE_CHAINS
    growth_mib = (report["peak_after_kib"] - report["peak_before_kib"]) / 1024
    assert growth_mib < LARGE_PEAK_GROWTH_MIB, report
    if LARGE_CHAINS >= 100_000:
        assert report["file_bytes"] > 1024 * 1024 * LARGE_PEAK_GROWTH_MIB
    assert os.listdir(temporary_dir) == []
    assert list(import_dir.rglob("*.upload")) == []


def _wide(value: bytes) -> bytes:
    """An array of `value`, just short of the readers' line limit once in a record."""
    count = (MAX_LINE_BYTES - 100) // (len(value) + 1)
    return b"[" + b",".join([value] * count) + b"]"


def _worst_cases(directory: Path) -> list[Path]:
    """The red team's files: 40 KB and 400 KB of nesting (arrays and objects, in JSON
    Lines and in a JSON array, in a record's meta and as the whole record), arrays nested
    5,000 deep, and lines of 8 MB that hold millions of small values."""
    record = b'{"problem": "p", "steps": ["s"], "meta": {"deep": %s}}'
    cases = {
        "lines_arrays_40k.jsonl": nested_bytes(20_000, "array") + b"\n",
        "lines_objects_400k.jsonl": nested_bytes(67_000, "object") + b"\n",
        "meta_arrays_400k.jsonl": record % nested_bytes(200_000, "array") + b"\n",
        "array_objects_40k.json": b"[" + record % nested_bytes(6_700, "object") + b"]",
        "array_arrays_400k.json": b"[" + nested_bytes(200_000, "array") + b"]",
        "arrays_5000.jsonl": nested_bytes(5_000, "array") + b"\n",
        "arrays_5000.json": b"[" + nested_bytes(5_000, "array") + b"]",
        "meta_arrays_5000.json": b"[" + record % nested_bytes(5_000, "array") + b"]",
        # Not deep but wide: a line just under MAX_LINE_BYTES of small values.
        "wide_objects_8mb.jsonl": record % _wide(b"{}") + b"\n",
        "wide_numbers_8mb.json": b"[" + record % _wide(b"0") + b"]",
    }
    paths = []
    for name, content in cases.items():
        path = directory / name
        path.write_bytes(content)
        paths.append(path)
    return paths


def test_the_worst_nesting_is_rejected_with_its_line_in_bounded_memory(
    lead_project: tuple[Project, Any], temporary_dir: Path, tmp_path: Path
) -> None:
    project, lead = lead_project
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    files = _worst_cases(inputs)
    arguments = {
        "project": project.pk,
        "user": lead.pk,
        "files": [str(path) for path in files],
        "work": str(tmp_path),
        "cap": 2 * MAX_LINE_BYTES,
    }

    output = _run_child("cases", arguments, temporary_dir)

    # Every case passed the child's checks via the API and via import_chains ...
    assert [line.split()[1] for line in output.splitlines() if line.startswith("ok ")] == [
        path.name for path in files
    ]
    # ... as a rejection: nothing was imported.
    assert (ImportBatch.objects.count(), Chain.objects.count()) == (0, 0)
    assert os.listdir(temporary_dir) == []


@pytest.mark.parametrize("size", [10_000, 3 * 1024 * 1024], ids=["in_memory", "spooled"])
def test_a_worker_killed_mid_import_leaves_no_upload_behind(
    lead_project: tuple[Project, Any], temporary_dir: Path, tmp_path: Path, size: int
) -> None:
    # Given an upload whose import is held at the project's import lock
    project, lead = lead_project
    line = b'{"problem": "p%d", "steps": ["' + b"x" * 200 + b'"]}\n'
    content = b"".join(line % index for index in range(size // len(line) + 1))
    upload = tmp_path / "upload.jsonl"
    upload.write_bytes(content)
    arguments = {"project": project.pk, "user": lead.pk, "file": str(upload)}
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_advisory_xact_lock(%s)",
                [(_IMPORT_LOCK_NAMESPACE << 32) | project.pk],
            )
        child = subprocess.Popen(
            _child("upload", arguments),
            cwd=REPO_ROOT,
            env=_child_env(temporary_dir),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            _wait_for_a_waiting_advisory_lock(child)
            # When the worker is killed while it holds the upload
            child.send_signal(signal.SIGKILL)
            child.wait()
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()

    # Then the upload is not left in the temporary directory
    assert os.listdir(temporary_dir) == []
    assert ImportBatch.objects.count() == 0
    # (its job stays RUNNING with its stored copy under STEPLAB_IMPORT_DIR: nothing reaps
    # the job of a killed worker yet; the lead uploads the file again)
    assert ImportJob.objects.get().status == ImportJobStatus.RUNNING


def _wait_for_a_waiting_advisory_lock(child: subprocess.Popen[bytes]) -> None:
    """Returns once another session waits for an advisory lock (the child, blocked in
    the import); fails if the child exits first."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if child.poll() is not None:
            _, err = child.communicate()
            pytest.fail(f"the child exited ({child.returncode}) before the import:\n{err!r}")
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                "AND pid <> pg_backend_pid() AND database = "
                "(SELECT oid FROM pg_database WHERE datname = current_database())"
            )
            if cursor.fetchone()[0]:
                return
        time.sleep(0.05)
    pytest.fail("the child never reached the import lock")
