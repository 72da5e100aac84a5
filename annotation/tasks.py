"""Celery tasks of the annotation app. Thin: ids in, one service call, nothing returned.

The import and bulk-action tasks run on queue ``default``. Neither is ``acks_late``: a
redelivered task would find its job no longer QUEUED and return, so a worker killed
mid-way leaves the job RUNNING (and nothing written: each is one transaction) rather
than doing it twice (see ``services.import_jobs``, ``services.bulk_actions``)."""

from __future__ import annotations

from celery import shared_task

from annotation.services.bulk_actions import BULK_TASK
from annotation.services.import_jobs import IMPORT_TASK


@shared_task(name=IMPORT_TASK, ignore_result=True)
def import_job_task(job_id: int) -> None:
    from annotation.services.import_jobs import import_job_execute

    import_job_execute(job_id=job_id)


@shared_task(name=BULK_TASK, ignore_result=True)
def bulk_action_task(job_id: int) -> None:
    from annotation.services.bulk_actions import bulk_action_execute

    bulk_action_execute(job_id=job_id)
