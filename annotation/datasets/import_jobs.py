"""Imports of uploaded files as jobs: the upload is stored, a Celery task imports it with
``chain_import`` (the one import path, as the command and the pages use), and the job row
says how far it got and how it ended. The import page and ``GET .../imports/{job_id}/``
poll that row.

The lifecycle. ``import_job_create`` streams the upload into STEPLAB_IMPORT_DIR, writes a
QUEUED row and sends the task once that row commits (``transaction.on_commit``: a worker
never looks for a row that was rolled back). ``import_job_execute`` claims the row QUEUED
-> RUNNING under ``SELECT ... FOR UPDATE``, so a second delivery of the task returns
quietly, runs the import, writes the counts or the bad lines, and removes the stored file.
A worker runs it, in every mode (``make demo`` starts one beside the web server).

Progress. ``chain_import`` runs in one transaction, so what it writes is invisible until
it commits; progress written through the same connection would be too. On PostgreSQL the
records and bytes read go to the row through a connection of their own, in autocommit, at
most every PROGRESS_INTERVAL_SECONDS. SQLite (the demo) allows one writer at a time and the
import holds it, so there the row moves only at the end.

A worker killed mid-import leaves its job RUNNING and its file on disk (the import itself
rolls back), and a lost task message leaves it QUEUED: ``import_jobs_reap_stale`` fails
such jobs once they are older than the task's time limit (and a margin), removing their
files; the import API runs it whenever a lead starts or follows a project's import."""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import asdict
from datetime import datetime, timedelta
from pathlib import Path
from typing import BinaryIO

from celery import current_app
from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from annotation.datasets.imports import MAX_KEPT_ERRORS, ImportRejected, chain_import
from annotation.models import ImportJob, ImportJobStatus, Project
from annotation.progress import RowProgress
from annotation.webhooks.events import webhook_import_ended
from config.uploads import copy_into_place

logger = logging.getLogger(__name__)

IMPORT_TASK = "annotation.import_job"
# The row's progress is written at most this often (never per record).
PROGRESS_INTERVAL_SECONDS = 1.0
# Copying an upload into the import directory, a block at a time.
COPY_BLOCK_BYTES = 1024 * 1024

_FILENAME_MAX = ImportJob._meta.get_field("filename").max_length or 500


def import_dir() -> Path:
    """Where uploads wait for their job: STEPLAB_IMPORT_DIR (``var/imports`` by default)."""
    return Path(settings.STEPLAB_IMPORT_DIR)


def import_job_path(job: ImportJob) -> Path:
    return import_dir() / job.stored_name


def import_job_create(
    *,
    project: Project,
    upload: BinaryIO,
    filename: str,
    size: int,
    fmt: str = "auto",
    user: User | None = None,
) -> ImportJob:
    """Store ``upload`` (read from its start, a block at a time, never whole in memory)
    under STEPLAB_IMPORT_DIR and queue its import; the QUEUED job.

    The caller has checked that the caller may import into ``project`` and that ``fmt``
    is "auto" or a known format. The task is sent when the current transaction commits;
    if the row is not written the stored file is removed again."""
    stored_name = f"project-{project.pk}/{uuid.uuid4().hex}.upload"
    path = import_dir() / stored_name
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        upload.seek(0)
        copy_into_place(upload, path, block=COPY_BLOCK_BYTES)  # named only once whole
        with transaction.atomic():
            job = ImportJob.objects.create(
                project=project,
                created_by=user,
                filename=filename[:_FILENAME_MAX],
                stored_name=stored_name,
                size=size,
                format_requested=fmt,
            )
            job_id = job.pk
            transaction.on_commit(lambda: import_job_enqueue(job_id=job_id))
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return job


def import_job_enqueue(*, job_id: int) -> None:
    """Send the job's task to a worker. Runs after the commit, so
    the upload's request must not fail here: when the broker is unreachable the job fails
    at once with that reason and its file is removed (the lead uploads it again)."""
    try:
        current_app.tasks[IMPORT_TASK].apply_async((job_id,))
    except Exception:  # noqa: BLE001 - the job says why; the request that queued it stands
        logger.warning("Broker unreachable: import job %s not sent", job_id, exc_info=True)
        job = ImportJob.objects.filter(pk=job_id, status=ImportJobStatus.QUEUED).first()
        if job is not None:
            _finish(job, detail="The task queue could not be reached; upload the file again.")


def import_job_execute(*, job_id: int) -> None:
    """Run the import of job ``job_id`` (the task's body). Returns quietly when the job is
    gone or no longer QUEUED (a second delivery). Every way the import ends is written to
    the row; nothing is raised for a bad file."""
    job = _claim(job_id=job_id)
    if job is None:
        return
    path = import_job_path(job)
    try:
        with path.open("rb") as stream, _ProgressWriter(job=job, stream=stream) as progress:
            result = chain_import(
                project=job.project,
                path=stream,
                filename=job.filename,
                fmt=job.format_requested,
                user=job.created_by,
                progress=progress,
            )
            job.records_read, job.bytes_read = progress.records, job.size
    except ImportRejected as rejected:
        _finish(job, rejected=rejected)
    except ValueError as exc:  # FormatDetectionError and unknown formats
        _finish(job, detail=str(exc))
    except OSError as exc:
        _finish(job, detail=f"The upload could not be read: {exc.strerror or exc}.")
    except Exception as exc:  # noqa: BLE001 - a time limit, a lost database: the job says so
        logger.exception("Import job %s failed", job_id)
        _finish(job, detail=f"The import failed ({type(exc).__name__}); nothing was written.")
    else:
        job.status = ImportJobStatus.DONE
        job.result = asdict(result)
        job.finished_at = timezone.now()
        with transaction.atomic():
            job.save(
                update_fields=["status", "result", "records_read", "bytes_read", "finished_at"]
            )
            webhook_import_ended(job=job)
        path.unlink(missing_ok=True)


# Past the task's hard time limit, plus this, a job no worker finished never will.
REAP_MARGIN_SECONDS = 300


def import_jobs_reap_stale(*, project: Project, now: datetime | None = None) -> int:
    """Fail the project's jobs that no worker will finish: RUNNING since, or QUEUED since,
    longer than the task's time limit (STEPLAB_IMPORT_TASK_TIME_LIMIT) plus
    REAP_MARGIN_SECONDS (a worker killed mid-import; a task message lost). Their files go
    and their rows say why; nothing of theirs was written (an import is one transaction).
    How many were failed. One query when there are none."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.STEPLAB_IMPORT_TASK_TIME_LIMIT + REAP_MARGIN_SECONDS)
    stale = ImportJob.objects.filter(project=project).filter(
        Q(status=ImportJobStatus.RUNNING, started_at__lt=cutoff)
        | Q(status=ImportJobStatus.QUEUED, created_at__lt=cutoff)
    )
    reaped = 0
    for job in stale:
        with transaction.atomic():
            locked = ImportJob.objects.select_for_update().filter(pk=job.pk).first()
            if locked is None or locked.status not in (
                ImportJobStatus.RUNNING,
                ImportJobStatus.QUEUED,
            ):
                continue
            _finish(
                locked,
                detail=f"{locked.filename} was not imported: the worker stopped before the "
                "import ended, and nothing was written. Upload the file again.",
            )
            reaped += 1
    return reaped


def _claim(*, job_id: int) -> ImportJob | None:
    with transaction.atomic():
        job = (
            ImportJob.objects.select_for_update(of=("self",))
            .select_related("project", "created_by")
            .filter(pk=job_id)
            .first()
        )
        if job is None or job.status != ImportJobStatus.QUEUED:
            return None
        job.status = ImportJobStatus.RUNNING
        job.started_at = timezone.now()
        job.save(update_fields=["status", "started_at"])
    return job


def _finish(job: ImportJob, *, detail: str = "", rejected: ImportRejected | None = None) -> None:
    """FAILED with ``detail`` or the bad lines of ``rejected``; the stored file goes."""
    job.status = ImportJobStatus.FAILED
    job.finished_at = timezone.now()
    job.detail = detail
    if rejected is not None:
        noun = "bad line" if rejected.error_count == 1 else "bad lines"
        job.detail = (
            f"{job.filename} was not imported: {rejected.error_count:,} {noun} "
            f"(read as {rejected.format}); nothing was written."
        )
        job.errors = [
            {"line": error.line, "record": error.record, "reason": error.reason}
            for error in rejected.errors[:MAX_KEPT_ERRORS]
        ]
        job.error_count = rejected.error_count
        job.result = {"format": rejected.format}
    with transaction.atomic():
        job.save(
            update_fields=[
                "status",
                "finished_at",
                "detail",
                "errors",
                "error_count",
                "result",
                "records_read",
            ]
        )
        webhook_import_ended(job=job)
    import_job_path(job).unlink(missing_ok=True)


class _ProgressWriter:
    """``chain_import``'s ``progress`` callback: counts the records read and, on
    PostgreSQL, writes them and the bytes read so far (the position in ``stream``) to the
    job row through a connection of its own (``progress.RowProgress``), at most every
    PROGRESS_INTERVAL_SECONDS."""

    def __init__(self, *, job: ImportJob, stream: BinaryIO) -> None:
        self.job = job
        self.stream = stream
        self.records = 0
        self.last_write = time.monotonic()
        self.row = RowProgress(model=ImportJob, pk=job.pk)

    def __enter__(self) -> _ProgressWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.job.records_read = self.records
        self.row.close()

    def __call__(self, count: int) -> None:
        self.records += count
        now = time.monotonic()
        if not self.row.live or now - self.last_write < PROGRESS_INTERVAL_SECONDS:
            return
        self.last_write = now
        self._write(records=self.records, position=self.stream.tell())

    def _write(self, *, records: int, position: int) -> None:
        self.row.write_now(records_read=records, bytes_read=min(position, self.job.size))
