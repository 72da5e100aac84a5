"""Imports over HTTP: `POST /api/v1/projects/{id}/imports/` stores the upload and queues
its import as a job (202); `GET /api/v1/projects/{id}/imports/{job_id}/` polls the job:
its progress, then its counts or its bad lines. Thin: check access, validate, call
``import_job_create``, serialize the job (``datasets.import_jobs`` runs it).

The only endpoint that takes a multipart body (``config.uploads``). Nothing of the body is
read before the caller is known to be a lead of the project: the session's CSRF token
comes from the X-CSRFToken header, never from a form field, and the view checks the role
before it touches ``request.data``. Then the upload is spooled, at most
STEPLAB_IMPORT_MAX_UPLOAD_BYTES, to a temporary file that has no name in the temporary
directory, so nothing is left behind in it whatever ends the request: an error, or the
process killed. The job's own copy goes to STEPLAB_IMPORT_DIR, a block at a time."""

from __future__ import annotations

from typing import Any, BinaryIO, cast

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.core.files.uploadhandler import FileUploadHandler, StopUpload
from django.http import HttpRequest, QueryDict
from django.urls import reverse
from django.utils.datastructures import MultiValueDict
from drf_spectacular.utils import (
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    inline_serializer,
)
from rest_framework import serializers, status
from rest_framework.exceptions import APIException
from rest_framework.generics import GenericAPIView
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from annotation.api.inputs import InputSerializer
from annotation.api.permissions import LEADS, project_for_request, request_user
from annotation.datasets.import_job_reads import import_job_get
from annotation.datasets.import_jobs import import_job_create, import_jobs_reap_stale
from annotation.datasets.importers.formats import FORMATS
from annotation.datasets.importers.records import RecordAt
from annotation.datasets.imports import MAX_KEPT_ERRORS
from annotation.models import ImportJob, ImportJobStatus
from config.uploads import NamelessTemporaryFileUploadHandler

# Multipart framing around the file (boundaries, headers, the `format` field): a request
# this much over the file limit may still hold an acceptable file.
_MULTIPART_SLACK_BYTES = 64 * 1024


class ImportCreateInputSerializer(InputSerializer):
    file = serializers.FileField(help_text="The file to import (JSON or JSONL).")
    format = serializers.ChoiceField(
        choices=("auto", *FORMATS),
        default="auto",
        help_text="The file's format; `auto` detects it.",
    )


class ImportResultOutputSerializer(serializers.Serializer):
    batch_id = serializers.IntegerField(
        allow_null=True, help_text="The import batch (the earlier one for a repeated file)."
    )
    filename = serializers.CharField()
    format = serializers.CharField(help_text="The format the file was read as.")
    chains_created = serializers.IntegerField()
    chains_duplicate = serializers.IntegerField(
        help_text="Chains skipped: already in the project or repeated in the file."
    )
    steps_created = serializers.IntegerField()
    labels_created = serializers.IntegerField(help_text="Step ratings the file carried.")
    problems_created = serializers.IntegerField(
        default=0, help_text="Problems added by a problems file (format `problems`)."
    )
    problems_duplicate = serializers.IntegerField(
        default=0, help_text="Problems of a problems file the project already held."
    )
    already_imported = serializers.BooleanField(
        help_text="The same file was imported into this project before; nothing was added."
    )


class LineErrorOutputSerializer(serializers.Serializer):
    line = serializers.IntegerField(
        allow_null=True,
        help_text="1-based line: of the record in JSON Lines, where the record starts in a "
        "JSON array (null when the file ended before it did).",
    )
    record = serializers.IntegerField(
        allow_null=True,
        default=None,
        help_text="1-based index of the record in a JSON array; null in JSON Lines.",
    )
    where = serializers.SerializerMethodField(
        help_text='The two for a person: "line 74", or "record 74 (line 1)" in a JSON array.'
    )
    reason = serializers.CharField()

    def get_where(self, error: dict[str, Any]) -> str:
        return str(RecordAt(line=error.get("line"), record=error.get("record")))


class ImportJobOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    url = serializers.SerializerMethodField(help_text="Where to poll this job.")
    status = serializers.ChoiceField(
        choices=ImportJobStatus.choices,
        help_text="queued, running, done (imported) or failed (nothing written).",
    )
    filename = serializers.CharField()
    size = serializers.IntegerField(help_text="The upload's size in bytes.")
    format_requested = serializers.CharField(help_text="`auto` or the format named.")
    records_read = serializers.IntegerField(
        help_text="Records (chains) read so far; updated about once a second while running."
    )
    bytes_read = serializers.IntegerField(help_text="Bytes of the file read so far.")
    result = serializers.SerializerMethodField(
        help_text="The counts once done (null before, and for a failed job)."
    )
    format = serializers.SerializerMethodField(help_text="The format the file was read as.")
    detail = serializers.CharField(help_text="Why a failed job failed.")
    errors = LineErrorOutputSerializer(  # type: ignore[assignment]  # a field, not Serializer.errors
        many=True, help_text=f"The bad lines, in file order (the first {MAX_KEPT_ERRORS:,})."
    )
    errors_omitted = serializers.SerializerMethodField(
        help_text="Bad lines beyond those listed in `errors`."
    )
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)

    def get_url(self, job: ImportJob) -> str:
        return reverse("api-project-import-job", args=[job.project_id, job.pk])

    @extend_schema_field(ImportResultOutputSerializer(allow_null=True))
    def get_result(self, job: ImportJob) -> dict[str, Any] | None:
        if job.status != ImportJobStatus.DONE or not job.result:
            return None
        return dict(ImportResultOutputSerializer(job.result).data)

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_format(self, job: ImportJob) -> str | None:
        return (job.result or {}).get("format")

    def get_errors_omitted(self, job: ImportJob) -> int:
        return max(job.error_count - len(job.errors), 0)


class UploadTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "upload_too_large"


class _UploadSizeLimit(FileUploadHandler):
    """Stops a multipart upload once its files pass ``limit`` bytes, before the rest is
    spooled to disk. A request whose Content-Length is already far beyond the limit is
    not parsed at all. The view turns ``exceeded`` into a 413."""

    def __init__(self, request: HttpRequest, *, limit: int) -> None:
        super().__init__(request)
        self.limit = limit
        self.received = 0
        self.exceeded = False

    def handle_raw_input(
        self,
        input_data: Any,
        META: dict[str, Any],  # noqa: N803 (Django's signature)
        content_length: int,
        boundary: bytes,  # type: ignore[override]  # Django passes bytes (its stubs say str)
        encoding: str | None = None,
    ) -> tuple[QueryDict, MultiValueDict] | None:
        if content_length > self.limit + _MULTIPART_SLACK_BYTES:
            self.exceeded = True
            return QueryDict(), MultiValueDict()
        return None

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes:
        self.received += len(raw_data)
        if self.received > self.limit:
            self.exceeded = True
            raise StopUpload(connection_reset=False)
        return raw_data

    def file_complete(self, file_size: int) -> None:
        return None


def _too_large_message(limit: int) -> str:
    return f"The file is larger than the import limit of {limit:,} bytes."


class ImportCreateApi(GenericAPIView):
    parser_classes = [MultiPartParser]
    serializer_class = ImportCreateInputSerializer

    def initialize_request(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Request:
        # The size limit must be in place before anything parses the body, and the CSRF
        # check of session authentication already reads request.POST.
        self.upload_limit = _UploadSizeLimit(
            request, limit=settings.STEPLAB_IMPORT_MAX_UPLOAD_BYTES
        )
        request.upload_handlers = [self.upload_limit, NamelessTemporaryFileUploadHandler(request)]
        return super().initialize_request(request, *args, **kwargs)

    @extend_schema(
        operation_id="projects_imports_create",
        summary="Upload a file of chains to import (leads only)",
        description=(
            "Stores the file and queues its import (a Celery task); answers 202 with the "
            "job, to poll at its `url`. The import takes every chain in the file, with the "
            "step labels it carries (kept as import annotations, never as a person's), "
            "whole or not at all: any bad line fails the job with every bad line listed "
            "and nothing written. Formats: "
            f"{', '.join(FORMATS)}; `auto` detects the format. A file imported into the "
            "project before adds nothing (`result.already_imported`)."
        ),
        request={"multipart/form-data": ImportCreateInputSerializer},
        responses={
            202: OpenApiResponse(ImportJobOutputSerializer, description="Queued."),
            400: OpenApiResponse(description="No file, or an unknown format name."),
            403: OpenApiResponse(description="A member who is not a lead of the project."),
            404: OpenApiResponse(description="No such project, or not a member of it."),
            413: OpenApiResponse(
                inline_serializer("UploadTooLarge", {"detail": serializers.CharField()}),
                description="The file is over STEPLAB_IMPORT_MAX_UPLOAD_BYTES.",
            ),
        },
    )
    def post(self, request: Request, project_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id, roles=LEADS)
        import_jobs_reap_stale(project=project)
        limit = self.upload_limit.limit
        data = ImportCreateInputSerializer(data=request.data)
        if self.upload_limit.exceeded:
            raise UploadTooLarge(_too_large_message(limit))
        data.is_valid(raise_exception=True)
        upload: UploadedFile = data.validated_data["file"]
        if upload.size is not None and upload.size > limit:
            raise UploadTooLarge(_too_large_message(limit))
        try:
            job = import_job_create(
                project=project,
                upload=cast(BinaryIO, upload.file),
                filename=upload.name or "upload",
                size=upload.size or 0,
                fmt=data.validated_data["format"],
                user=request_user(request),
            )
        finally:
            upload.close()
        return Response(ImportJobOutputSerializer(job).data, status=status.HTTP_202_ACCEPTED)


class ImportJobApi(GenericAPIView):
    serializer_class = ImportJobOutputSerializer

    @extend_schema(
        operation_id="projects_imports_retrieve",
        summary="Follow an import (leads only)",
        description=(
            "The job's status and progress (records and bytes read, updated about once a "
            "second), then its counts (`result`) or, for a failed job, `detail` and every "
            "bad line with its number and reason (nothing was written)."
        ),
        responses={
            200: ImportJobOutputSerializer,
            403: OpenApiResponse(description="A member who is not a lead of the project."),
            404: OpenApiResponse(description="No such project, job, or not a member."),
        },
    )
    def get(self, request: Request, project_id: int, job_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id, roles=LEADS)
        import_jobs_reap_stale(project=project)  # a dead worker's job says so
        job = import_job_get(project=project, job_id=job_id)
        return Response(ImportJobOutputSerializer(job).data)
