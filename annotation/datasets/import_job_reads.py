"""Read paths of import jobs (``datasets.import_jobs`` writes them)."""

from __future__ import annotations

from django.http import Http404

from annotation.models import ImportJob, Project


def import_job_get(*, project: Project, job_id: int) -> ImportJob:
    """The project's import job ``job_id``; Http404 for another project's or none. The
    caller has checked that the user may see the project's imports (leads)."""
    job = ImportJob.objects.filter(project=project, pk=job_id).first()
    if job is None:
        raise Http404("No such import in this project.")
    return job
