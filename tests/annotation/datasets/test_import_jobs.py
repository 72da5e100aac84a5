"""The import job service (``annotation.datasets.import_jobs``) called directly: progress
written to the row, visible outside the import's transaction and never per record; a
broker that cannot be reached; an upload stored a block at a time."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from celery import current_app
from django.db import connections

from annotation.datasets import import_jobs, import_reading
from annotation.datasets.import_jobs import (
    IMPORT_TASK,
    import_job_create,
    import_job_enqueue,
    import_job_execute,
)
from annotation.models import Chain, ImportJob, ImportJobStatus, Project, Role
from tests.factories import MembershipFactory, ProjectFactory


def _lines(count: int) -> bytes:
    return b"".join(
        b'{"problem": "p%d", "steps": ["step %d", "done"]}\n' % (index, index)
        for index in range(count)
    )


def _job(project: Project, content: bytes, user: Any = None) -> ImportJob:
    return import_job_create(
        project=project,
        upload=io.BytesIO(content),
        filename="f.jsonl",
        size=len(content),
        user=user,
    )


@pytest.mark.django_db(transaction=True)
def test_progress_reaches_the_row_while_the_import_runs(monkeypatch: Any) -> None:
    # Given: a committed job of 50 chains, read 10 at a time, progress written every time
    project = ProjectFactory()
    lead = MembershipFactory(project=project, role=Role.LEAD).user
    content = _lines(50)
    # (the commit sends no task: this test runs the task's body itself)
    monkeypatch.setattr(import_jobs, "import_job_enqueue", lambda *, job_id: None)
    job = _job(project, content, lead)
    monkeypatch.setattr(import_reading, "CHUNK_CHAINS", 10)
    monkeypatch.setattr(import_jobs, "PROGRESS_INTERVAL_SECONDS", 0.0)
    seen: list[tuple[int, int, int]] = []
    observer = connections.create_connection("default")
    write = import_jobs._ProgressWriter._write

    def write_and_look(self: Any, *, records: int, position: int) -> None:
        write(self, records=records, position=position)
        # What another connection (the page's poll) sees of the row and of the chains,
        # while the import's transaction is still open.
        with observer.cursor() as cursor:
            cursor.execute(
                "SELECT records_read, bytes_read FROM annotation_importjob WHERE id = %s",
                [job.pk],
            )
            row = cursor.fetchone()
            cursor.execute("SELECT count(*) FROM annotation_chain")
            seen.append((row[0], row[1], cursor.fetchone()[0]))

    monkeypatch.setattr(import_jobs._ProgressWriter, "_write", write_and_look)

    # When: the task's body runs
    try:
        import_job_execute(job_id=job.pk)
    finally:
        observer.close()

    # Then: the row moved chunk by chunk, bytes within the file, before any chain was
    # visible (all-or-nothing), and the job ended with the counts
    assert [records for records, _, _ in seen] == [10, 20, 30, 40, 50]
    assert all(0 < position <= len(content) for _, position, _ in seen)
    assert {chains for _, _, chains in seen} == {0}
    job.refresh_from_db()
    assert (job.status, job.records_read, job.bytes_read) == ("done", 50, len(content))
    assert job.result is not None and job.result["chains_created"] == 50
    assert Chain.objects.count() == 50


def test_progress_is_written_at_most_once_a_second(db: Any, monkeypatch: Any) -> None:
    # Given: a progress writer and a clock that moves 0.3 s per chunk
    project = ProjectFactory()
    job = ImportJob.objects.create(project=project, filename="f", stored_name="f", size=10**6)
    now = [100.0]
    monkeypatch.setattr(import_jobs.time, "monotonic", lambda: now[0])
    writes: list[int] = []
    monkeypatch.setattr(
        import_jobs._ProgressWriter,
        "_write",
        lambda self, *, records, position: writes.append(records),
    )

    # When: 20 chunks of 2,000 records are reported
    with import_jobs._ProgressWriter(job=job, stream=io.BytesIO(b"x" * 10)) as progress:
        for _ in range(20):
            now[0] += 0.3
            progress(2_000)

    # Then: about one write per second of the 6 s, and every record counted
    assert writes == [8_000, 16_000, 24_000, 32_000, 40_000]
    assert progress.records == 40_000


def test_an_unreachable_broker_fails_the_job_and_removes_its_file(
    db: Any, monkeypatch: Any, import_dir: Path
) -> None:
    # Given: a queued job whose task cannot be sent
    job = _job(ProjectFactory(), _lines(3))
    assert (import_dir / job.stored_name).exists()

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise ConnectionRefusedError("broker down")

    monkeypatch.setattr(current_app.tasks[IMPORT_TASK], "apply_async", refuse)

    # When: the commit sends it
    import_job_enqueue(job_id=job.pk)

    # Then: the job says so, and nothing is left behind
    job.refresh_from_db()
    assert job.status == ImportJobStatus.FAILED
    assert "task queue could not be reached" in job.detail
    assert not (import_dir / job.stored_name).exists()


def test_the_upload_is_stored_a_block_at_a_time(
    db: Any, monkeypatch: Any, import_dir: Path
) -> None:
    # Given: an upload that hands out at most the block size asked for, and counts
    class Upload(io.BytesIO):
        largest = 0

        def read(self, size: int | None = -1) -> bytes:
            block = super().read(size)
            Upload.largest = max(Upload.largest, len(block))
            return block

    monkeypatch.setattr(import_jobs, "COPY_BLOCK_BYTES", 4096)
    content = _lines(2_000)

    # When: a job is created from it
    job = import_job_create(
        project=ProjectFactory(), upload=Upload(content), filename="f", size=len(content)
    )

    # Then: the stored copy is whole and was read in blocks
    assert (import_dir / job.stored_name).read_bytes() == content
    assert Upload.largest == 4096 < len(content)


def test_a_task_sent_before_its_job_is_created_or_after_it_ran_does_nothing(db: Any) -> None:
    job = _job(ProjectFactory(), _lines(2))
    import_job_execute(job_id=job.pk)
    job.refresh_from_db()
    finished_at = job.finished_at

    import_job_execute(job_id=job.pk)
    import_job_execute(job_id=job.pk + 1000)

    job.refresh_from_db()
    assert (job.status, job.finished_at) == ("done", finished_at)
    assert Chain.objects.count() == 2


def test_a_job_no_worker_finished_is_failed_once_past_the_time_limit(
    db: Any, import_dir: Path, settings: Any
) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from annotation.datasets.import_jobs import REAP_MARGIN_SECONDS, import_jobs_reap_stale

    # Given: a job whose worker died mid-import, one whose task was lost, and a live one
    project = ProjectFactory()
    settings.STEPLAB_IMPORT_TASK_TIME_LIMIT = 60
    long_ago = timezone.now() - timedelta(seconds=60 + REAP_MARGIN_SECONDS + 1)
    dead, lost, live = (_job(project, _lines(2)) for _ in range(3))
    ImportJob.objects.filter(pk=dead.pk).update(status=ImportJobStatus.RUNNING, started_at=long_ago)
    ImportJob.objects.filter(pk=lost.pk).update(created_at=long_ago)
    ImportJob.objects.filter(pk=live.pk).update(
        status=ImportJobStatus.RUNNING, started_at=timezone.now()
    )

    # When: the project's stale jobs are reaped (as the import API does on every call)
    reaped = import_jobs_reap_stale(project=project)

    # Then: the two are failed, say why, and their files are gone; the live one runs on
    assert reaped == 2
    for job in (dead, lost):
        job.refresh_from_db()
        assert job.status == ImportJobStatus.FAILED
        assert "the worker stopped before the import ended" in job.detail
        assert not (import_dir / job.stored_name).exists()
    live.refresh_from_db()
    assert live.status == ImportJobStatus.RUNNING
    assert (import_dir / live.stored_name).exists()
    assert import_jobs_reap_stale(project=project) == 0


def test_a_process_killed_while_storing_an_upload_leaves_no_file(tmp_path: Path) -> None:
    """The job's copy of an upload is named only once whole (config.uploads
    .copy_into_place): a worker killed mid-copy, as the OOM killer or a deploy does,
    leaves nothing in the import directory."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import REPO_ROOT

    # Given: a process storing an upload that arrives slowly (a pipe kept open)
    script = (
        "import sys; from pathlib import Path; from config.uploads import copy_into_place; "
        f"copy_into_place(sys.stdin.buffer, Path({str(tmp_path / 'job.upload')!r}), block=4096)"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    child = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, env=env)
    assert child.stdin is not None
    child.stdin.write(b"x" * (1024 * 1024))
    child.stdin.flush()
    # it has written most of what came (into its open, still nameless, file; the rest
    # may wait in its write buffer)
    deadline = time.monotonic() + 60
    while _largest_open_file(child.pid, tmp_path) < 512 * 1024:
        assert child.poll() is None and time.monotonic() < deadline, "the copy never wrote"
        time.sleep(0.02)
    # When: it is killed mid-copy
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    # Then: no file, whole or partial
    assert list(tmp_path.iterdir()) == []
    # And: a copy that completes appears whole
    whole = subprocess.run([sys.executable, "-c", script], input=b"y" * 10_000, env=env)
    assert whole.returncode == 0
    assert (tmp_path / "job.upload").read_bytes() == b"y" * 10_000


def _largest_open_file(pid: int, directory: Path) -> int:
    """The size of the largest file that process ``pid`` holds open in ``directory``,
    named or not (an O_TMPFILE reads as ``directory/#inode (deleted)``); 0 if none."""
    import os

    sizes = [0]
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            if os.readlink(fd).startswith(f"{directory}/"):
                sizes.append(os.stat(fd).st_size)
        except OSError:  # closed since it was listed
            pass
    return max(sizes)
