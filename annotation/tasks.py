"""Celery tasks of the annotation app. Thin: ids in, one service call, nothing returned.

The import task runs on queue ``default``. It is not ``acks_late``: a redelivered import
would find its job no longer QUEUED and return, so a worker killed mid-import leaves the
job RUNNING rather than importing twice (see ``services.import_jobs``)."""

from __future__ import annotations

from celery import shared_task

from annotation.services.import_jobs import IMPORT_TASK


@shared_task(name=IMPORT_TASK, ignore_result=True)
def import_job_task(job_id: int) -> None:
    from annotation.services.import_jobs import import_job_execute

    import_job_execute(job_id=job_id)
