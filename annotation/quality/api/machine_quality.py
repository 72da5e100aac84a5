"""How good each machine source is, over HTTP: `GET /api/v1/projects/{id}/machine-quality/`
(leads and ML staff; annotators 403, non-members 404). Thin: check access, call
``annotation.quality.machine_quality.machine_source_quality``, serialize."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.api.permissions import LEADS_AND_ML, project_for_request
from annotation.projects.api.dashboard import ProportionOutputSerializer
from annotation.quality.machine_quality import RATINGS, REFERENCES, machine_source_quality


class SourceAgreementOutputSerializer(serializers.Serializer):
    reference = serializers.ChoiceField(
        choices=REFERENCES,
        help_text="consensus: people's consensus (imported labels ignored, ties left out); "
        "gold: the answer key of gold chains.",
    )
    chains = serializers.IntegerField(help_text="Chains both the source and the reference label.")
    steps = serializers.IntegerField(help_text="Steps both rate.")
    kappa = serializers.FloatField(allow_null=True, help_text="Cohen's kappa on those steps.")
    kappa_low = serializers.FloatField(
        allow_null=True, help_text="95% percentile bootstrap over chains."
    )
    kappa_high = serializers.FloatField(allow_null=True)
    first_error = ProportionOutputSerializer(
        help_text="Chains whose first error the source places where the reference does."
    )
    confusion = serializers.ListField(
        child=serializers.ListField(child=serializers.IntegerField()),
        help_text=f"confusion[i][j]: steps the reference rates {list(RATINGS)}[i] and the "
        "source [j].",
    )


class SourceQualityOutputSerializer(serializers.Serializer):
    source = serializers.CharField()  # type: ignore[assignment]  # a field, not Field.source
    name = serializers.CharField()
    chains_labeled = serializers.IntegerField()
    against = SourceAgreementOutputSerializer(many=True)


class MachineQualityApi(APIView):
    """Not a paged list: one entry per source, a handful."""

    @extend_schema(
        tags=["review"],
        operation_id="projects_machine_quality_list",
        summary="Each machine source against people and gold (leads and ML staff)",
        responses={
            200: SourceQualityOutputSerializer(many=True),
            403: OpenApiResponse(description="An annotator."),
            404: OpenApiResponse(description="No such project, or not a member."),
        },
    )
    def get(self, request: Request, project_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id, roles=LEADS_AND_ML)
        return Response(
            SourceQualityOutputSerializer(machine_source_quality(project=project), many=True).data
        )
