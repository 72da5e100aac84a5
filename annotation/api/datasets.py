"""Snapshots and exports over HTTP. Thin: check access, validate, call one service or
selector, serialize or stream.

- `GET /api/v1/projects/{id}/snapshots/` (leads and ML staff) lists the snapshots;
- `POST` the same URL (leads) freezes the current consensus into a new one;
- `GET /api/v1/projects/{id}/export/?format=...` (leads) streams a snapshot's export.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from typing import Any

from django.http import FileResponse, StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound
from rest_framework.generics import GenericAPIView
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from annotation.api.fields import INT32_MAX
from annotation.api.permissions import LEADS, project_for_request, request_user
from annotation.exporters.formats import (
    CONTENT_TYPES,
    EXPORT_DESCRIPTIONS,
    EXPORT_FORMATS,
    EXTENSIONS,
    JSON_LINES_FORMATS,
)
from annotation.models import Role, Snapshot, SnapshotSplit
from annotation.selectors.datasets import snapshot_get, snapshot_list
from annotation.services.exports import export_bytes, export_options_check, export_parquet
from annotation.services.snapshots import AMBIGUOUS_CHOICES, DEFAULT_AMBIGUOUS, snapshot_create

LEADS_AND_ML: tuple[str, ...] = (Role.LEAD, Role.ML)
NOT_A_MEMBER = OpenApiResponse(description="No such project, or the caller is not a member.")
WRONG_ROLE = OpenApiResponse(description="A member whose role does not allow this.")


class SnapshotCreateInputSerializer(serializers.Serializer):
    heldout_fraction = serializers.FloatField(
        default=0.2, min_value=0.0, max_value=0.99, help_text="Share of problems held out."
    )
    seed = serializers.IntegerField(
        default=0, min_value=0, max_value=INT32_MAX, help_text="Seed of the problem-level split."
    )
    ambiguous = serializers.ChoiceField(
        choices=AMBIGUOUS_CHOICES,
        default=DEFAULT_AMBIGUOUS,
        help_text="Default mapping of an ambiguous (0) step in TRL exports.",
    )


class SnapshotOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    version = serializers.IntegerField()
    content_hash = serializers.CharField()
    created_at = serializers.DateTimeField()
    created_by = serializers.CharField(source="created_by.username", default=None)
    heldout_fraction = serializers.FloatField()
    seed = serializers.IntegerField()
    counts = serializers.JSONField(
        help_text="chains, steps_labeled, train_chains, heldout_chains, problems, label_counts"
    )
    meta = serializers.JSONField(help_text="Consensus rules and the TRL ambiguous mapping.")


class ExportInputSerializer(serializers.Serializer):
    format = serializers.ChoiceField(choices=EXPORT_FORMATS)
    snapshot = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=INT32_MAX,
        help_text="Snapshot version; the newest when omitted.",
    )
    ambiguous = serializers.ChoiceField(
        choices=AMBIGUOUS_CHOICES,
        required=False,
        help_text="Overrides the snapshot's mapping of ambiguous steps (trl, parquet, "
        "processbench, openrlhf, qwen_prm).",
    )
    split = serializers.ChoiceField(choices=SnapshotSplit.values, required=False)


class _IgnoreFormatQuery(DefaultContentNegotiation):
    """`?format=` names the export format here, not a DRF renderer: without this DRF
    would answer 404 for `?format=trl`, having no renderer of that name."""

    def select_renderer(
        self, request: Request, renderers: Iterable[BaseRenderer], format_suffix: str | None = None
    ) -> tuple[BaseRenderer, str]:
        first = next(iter(renderers))
        return first, first.media_type


class SnapshotListCreateApi(GenericAPIView):
    serializer_class = SnapshotOutputSerializer
    # For the schema generator only: the rows come from ``snapshot_list``.
    queryset = Snapshot.objects.none()

    @extend_schema(
        tags=["datasets"],
        operation_id="projects_snapshots_list",
        summary="The project's dataset snapshots, newest first (leads and ML staff)",
        responses={200: SnapshotOutputSerializer(many=True), 403: WRONG_ROLE, 404: NOT_A_MEMBER},
    )
    def get(self, request: Request, project_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id, roles=LEADS_AND_ML)
        page = self.paginate_queryset(snapshot_list(project=project))
        return self.get_paginated_response(SnapshotOutputSerializer(page, many=True).data)

    @extend_schema(
        tags=["datasets"],
        operation_id="projects_snapshots_create",
        summary="Freeze the current consensus labels into a new snapshot (leads only)",
        request=SnapshotCreateInputSerializer,
        responses={
            201: SnapshotOutputSerializer,
            400: OpenApiResponse(description="Bad input, or nothing labeled yet."),
            403: WRONG_ROLE,
            404: NOT_A_MEMBER,
        },
    )
    def post(self, request: Request, project_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id, roles=LEADS)
        data = SnapshotCreateInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        snapshot = snapshot_create(
            project=project, user=request_user(request), **data.validated_data
        )
        return Response(SnapshotOutputSerializer(snapshot).data, status=status.HTTP_201_CREATED)


class ExportApi(GenericAPIView):
    serializer_class = ExportInputSerializer
    renderer_classes = [JSONRenderer]
    content_negotiation_class = _IgnoreFormatQuery

    @extend_schema(
        tags=["datasets"],
        operation_id="projects_export",
        summary="Stream a snapshot's export (leads only)",
        description=(
            "Formats: prm800k, trl, processbench, openrlhf (OpenRLHF's PRM dataset: a "
            "placeholder token closing each step, soft labels from the votes) and qwen_prm "
            "(Qwen2.5-Math-PRM's chat messages, <extra_0> after each step), all JSON Lines; "
            "csv (one row per step) and parquet (TRL rows). The response is streamed; "
            "headers name the snapshot "
            "(`X-Steplab-Snapshot`, `X-Steplab-Snapshot-Hash`) and the ambiguous mapping "
            "used (`X-Steplab-Ambiguous`)."
        ),
        parameters=[
            OpenApiParameter(
                "format",
                str,
                enum=EXPORT_FORMATS,
                required=True,
                description="; ".join(
                    f"{fmt}: {EXPORT_DESCRIPTIONS[fmt]}" for fmt in EXPORT_FORMATS
                ),
            ),
            OpenApiParameter(
                "snapshot",
                {"type": "integer", "minimum": 1, "maximum": INT32_MAX},
                description="Version; newest when omitted.",
            ),
            OpenApiParameter("ambiguous", str, enum=AMBIGUOUS_CHOICES),
            OpenApiParameter("split", str, enum=SnapshotSplit.values),
        ],
        responses={
            (200, "application/octet-stream"): OpenApiTypes.BINARY,
            400: OpenApiResponse(description="Bad parameters."),
            403: WRONG_ROLE,
            404: OpenApiResponse(description="No such project or snapshot, or not a member."),
        },
    )
    def get(self, request: Request, project_id: int) -> Any:
        project = project_for_request(request=request, project_id=project_id, roles=LEADS)
        data = ExportInputSerializer(data=request.query_params)
        data.is_valid(raise_exception=True)
        params = data.validated_data
        snapshot = snapshot_get(project=project, version=params.get("snapshot"))
        if snapshot is None:
            raise NotFound(
                "No such snapshot."
                if "snapshot" in params
                else "The project has no snapshot yet: create one first (POST snapshots/)."
            )
        fmt, split = params["format"], params.get("split")
        ambiguous = export_options_check(
            fmt=fmt, ambiguous=params.get("ambiguous"), split=split, snapshot=snapshot
        )
        filename = _filename(snapshot=snapshot, fmt=fmt, split=split)
        if fmt == "parquet":
            # Parquet writes its footer last and needs a seekable file: a temporary file,
            # deleted when the response closes it.
            spool = tempfile.TemporaryFile(prefix="steplab-export-")
            export_parquet(snapshot=snapshot, path=spool, ambiguous=ambiguous, split=split)
            spool.seek(0)
            response: Any = FileResponse(
                spool, as_attachment=True, filename=filename, content_type=CONTENT_TYPES[fmt]
            )
        else:
            response = StreamingHttpResponse(
                export_bytes(snapshot=snapshot, fmt=fmt, ambiguous=ambiguous, split=split),
                content_type=f"{CONTENT_TYPES[fmt]}; charset=utf-8",
            )
            response["Content-Disposition"] = f'attachment; filename="{filename}"'
        response["X-Steplab-Snapshot"] = str(snapshot.version)
        response["X-Steplab-Snapshot-Hash"] = snapshot.content_hash
        response["X-Steplab-Ambiguous"] = ambiguous
        return response


def _filename(*, snapshot: Snapshot, fmt: str, split: str | None) -> str:
    part = f"-{split}" if split else ""
    suffix = f"{fmt}." if fmt in JSON_LINES_FORMATS else ""
    return (
        f"steplab-project{snapshot.project_id}-v{snapshot.version}{part}.{suffix}{EXTENSIONS[fmt]}"
    )
