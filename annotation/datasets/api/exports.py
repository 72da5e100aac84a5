"""Exports over HTTP: `GET /api/v1/projects/{id}/export/?format=...` (leads) streams a
snapshot's export in one of the formats PRM trainers read. Thin: check access, validate,
stream what ``annotation.datasets.exports`` writes."""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from typing import Any

from django.http import FileResponse, StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
)
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound
from rest_framework.generics import GenericAPIView
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from annotation.api.fields import INT32_MAX
from annotation.api.inputs import InputSerializer
from annotation.api.permissions import LEADS, project_for_request
from annotation.datasets.api.snapshots import WRONG_ROLE, kind_field
from annotation.datasets.exporters.formats import (
    CONTENT_TYPES,
    EXPORT_DESCRIPTIONS,
    EXPORT_FORMATS,
    SOFT_LABEL_SOURCES,
)
from annotation.datasets.exports import (
    export_bytes,
    export_filename,
    export_options_check,
    export_parquet,
)
from annotation.datasets.snapshot_options import AMBIGUOUS_CHOICES
from annotation.datasets.snapshot_reads import (
    SNAPSHOT_KINDS,
    snapshot_get,
    snapshot_options,
)
from annotation.models import SnapshotSplit


class ExportInputSerializer(InputSerializer):
    format = serializers.ChoiceField(choices=EXPORT_FORMATS)
    snapshot = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=INT32_MAX,
        help_text="Snapshot version (of ``kind``); the newest when omitted.",
    )
    kind = kind_field("the export")
    ambiguous = serializers.ChoiceField(
        choices=AMBIGUOUS_CHOICES,
        required=False,
        help_text="Overrides the snapshot's mapping of ambiguous steps (trl, parquet, "
        "processbench, openrlhf, qwen_prm).",
    )
    split = serializers.ChoiceField(choices=SnapshotSplit.values, required=False)
    provenance = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Each record (a CSV row) also carries each step's provenance: where its "
        "label came from and what each machine source in the snapshot said (rating, value, "
        "model, run). Not for parquet.",
    )
    soft_labels = serializers.ChoiceField(
        choices=SOFT_LABEL_SOURCES,
        required=False,
        default="votes",
        help_text="openrlhf only: a step's soft label from the votes' shares, or its "
        "Monte-Carlo value (a snapshot that includes monte_carlo).",
    )
    check = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Only check: 204 when this export would start, else the error it would "
        "answer, with no file.",
    )


class _IgnoreFormatQuery(DefaultContentNegotiation):
    """`?format=` names the export format here, not a DRF renderer: without this DRF
    would answer 404 for `?format=trl`, having no renderer of that name."""

    def select_renderer(
        self, request: Request, renderers: Iterable[BaseRenderer], format_suffix: str | None = None
    ) -> tuple[BaseRenderer, str]:
        first = next(iter(renderers))
        return first, first.media_type


def _header_value(value: Any) -> str:
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)


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
            "placeholder token closing each step, soft labels from the votes or the "
            "Monte-Carlo values), math_shepherd (Math-Shepherd's records from the "
            "Monte-Carlo hard labels) and qwen_prm "
            "(Qwen2.5-Math-PRM's chat messages, <extra_0> after each step), all JSON Lines; "
            "csv (one row per step) and parquet (TRL rows). The response is streamed; "
            "headers name the snapshot "
            "(`X-Steplab-Snapshot`, `X-Steplab-Snapshot-Hash`), what it holds "
            "(`X-Steplab-Snapshot-Options`) and the ambiguous mapping used "
            "(`X-Steplab-Ambiguous`). The file is named "
            "`<project-slug>-v<N>-<split>.<format>.<ext>` (split `all` without `split`; "
            "no `.<format>` where it is the extension: csv, parquet); a training run's own "
            "snapshot (`kind=training`) as `<project-slug>-t<N>-...`, and "
            "`X-Steplab-Snapshot-Kind` says which."
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
                description="Version (of `kind`); newest when omitted.",
            ),
            OpenApiParameter(
                "kind",
                str,
                enum=SNAPSHOT_KINDS,
                description="dataset (default) or training: the kind `snapshot` numbers.",
            ),
            OpenApiParameter("ambiguous", str, enum=AMBIGUOUS_CHOICES),
            OpenApiParameter("split", str, enum=SnapshotSplit.values),
            OpenApiParameter(
                "provenance",
                bool,
                description="Also each step's provenance: its label's source and what each "
                "machine source in the snapshot said (not for parquet).",
            ),
            OpenApiParameter(
                "soft_labels",
                str,
                enum=SOFT_LABEL_SOURCES,
                description="openrlhf: soft labels from the votes (default) or the "
                "Monte-Carlo values of a snapshot that includes them.",
            ),
            OpenApiParameter(
                "check",
                bool,
                description="Only check the parameters: 204 when the export would start, "
                "else the 400 or 404 it would answer; no file. The snapshots page asks "
                "first, so a failed download shows its error instead of saving it.",
            ),
        ],
        responses={
            (200, "application/octet-stream"): OpenApiTypes.BINARY,
            204: OpenApiResponse(description="check: the export would start."),
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
        snapshot = snapshot_get(
            project=project, version=params.get("snapshot"), kind=params["kind"]
        )
        if snapshot is None:
            raise NotFound(
                "No such snapshot."
                if "snapshot" in params
                else "The project has no snapshot yet: create one first (POST snapshots/)."
            )
        fmt, split = params["format"], params.get("split")
        provenance, soft_labels = params["provenance"], params["soft_labels"]
        ambiguous = export_options_check(
            fmt=fmt,
            ambiguous=params.get("ambiguous"),
            split=split,
            snapshot=snapshot,
            provenance=provenance,
            soft_labels=soft_labels,
        )
        if params["check"]:
            return Response(status=status.HTTP_204_NO_CONTENT)
        filename = export_filename(project=project, snapshot=snapshot, fmt=fmt, split=split)
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
                export_bytes(
                    snapshot=snapshot,
                    fmt=fmt,
                    ambiguous=ambiguous,
                    split=split,
                    provenance=provenance,
                    soft_labels=soft_labels,
                ),
                content_type=f"{CONTENT_TYPES[fmt]}; charset=utf-8",
            )
            response["Content-Disposition"] = f'attachment; filename="{filename}"'
        response["X-Steplab-Snapshot"] = str(snapshot.version)
        response["X-Steplab-Snapshot-Kind"] = snapshot.kind
        response["X-Steplab-Snapshot-Hash"] = snapshot.content_hash
        response["X-Steplab-Ambiguous"] = ambiguous
        # What the snapshot holds (its options), e.g. "finished_only=1; min_support=1; ...".
        # A list (machine_sources) comma-joined, and only where it names something.
        response["X-Steplab-Snapshot-Options"] = "; ".join(
            f"{key}={_header_value(value)}"
            for key, value in snapshot_options(snapshot=snapshot).items()
            if value != []
        )
        return response
