"""Evaluation sets over HTTP: leads mark an import as one and unmark it; leads and ML staff
list them. Thin: check access, call one service or selector, serialize. Each version's
figures on them are the training app's (``api-evaluation-results``)."""

from __future__ import annotations

from typing import Any

from django.http import Http404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.access import project_get_for_member
from annotation.api.fields import IdField
from annotation.api.inputs import InputSerializer
from annotation.api.parsers import DEFAULT_JSON_LIMITS, JsonLimits
from annotation.api.permissions import LEADS, project_for_request, request_user
from annotation.datasets.evaluation_set_reads import evaluation_set_list
from annotation.datasets.evaluation_sets import (
    NAME_MAX,
    evaluation_set_mark,
    evaluation_set_mark_chains,
    evaluation_set_unmark,
)
from annotation.models import EvaluationSet, ImportBatch, Role

LEADS_AND_ML = (Role.LEAD, Role.ML)
NOT_A_MEMBER = OpenApiResponse(description="No such project, or the caller is not a member.")


MAX_CHAINS_PER_REQUEST = 100_000
# A body of that many ids (about 1.5 MB, some 4 MB decoded) with room for its other fields.
JSON_LIMITS = JsonLimits(
    max_depth=DEFAULT_JSON_LIMITS.max_depth,
    max_values=MAX_CHAINS_PER_REQUEST + 16,
    max_string_bytes=DEFAULT_JSON_LIMITS.max_string_bytes,
)


class EvaluationSetInputSerializer(InputSerializer):
    import_batch = IdField(
        required=False, help_text="An import of this project whose chains carry labels."
    )
    chain_ids = serializers.ListField(
        child=IdField(),
        required=False,
        allow_empty=False,
        max_length=MAX_CHAINS_PER_REQUEST,
        help_text="Or: chains of this project (a labeled part of it), instead of an import.",
    )
    name = serializers.CharField(
        max_length=NAME_MAX,
        required=False,
        allow_blank=True,
        help_text="Blank: the import's file name (chains named need a name).",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("import_batch" in attrs) == ("chain_ids" in attrs):
            raise serializers.ValidationError("Give either import_batch or chain_ids.")
        return attrs


class EvaluationSetOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    import_batch = serializers.IntegerField(source="import_batch_id", allow_null=True)
    filename = serializers.CharField(
        source="import_batch.filename", allow_null=True, help_text="Null: chains a lead named."
    )
    chains = serializers.IntegerField(source="chain_count", help_text="Chains held out.")
    labeled_chains = serializers.IntegerField(
        source="labeled_count", help_text="Chains with labels: what versions are scored on."
    )
    created_by = serializers.CharField(source="created_by.username", allow_null=True)
    created_at = serializers.DateTimeField()


class ProjectEvaluationSetsApi(APIView):
    json_limits = JSON_LIMITS  # chain_ids: up to MAX_CHAINS_PER_REQUEST values

    @extend_schema(
        tags=["evaluation sets"],
        operation_id="evaluation_sets_list",
        summary="The project's evaluation sets (leads and ML staff)",
        responses={
            200: EvaluationSetOutputSerializer(many=True),
            403: OpenApiResponse(description="An annotator."),
            404: NOT_A_MEMBER,
        },
    )
    def get(self, request: Request, project_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id, roles=LEADS_AND_ML)
        sets = evaluation_set_list(project=project)
        return Response(EvaluationSetOutputSerializer(sets, many=True).data)

    @extend_schema(
        tags=["evaluation sets"],
        operation_id="evaluation_set_mark",
        summary="Hold out an import's chains, or chains named, as an evaluation set (leads)",
        description="Its chains leave the queue and every training run; every version "
        "trained afterwards is scored on them. Mark an import once its chains carry labels.",
        request=EvaluationSetInputSerializer,
        responses={
            201: EvaluationSetOutputSerializer,
            400: OpenApiResponse(description="Invalid input, or the import is already one."),
            403: OpenApiResponse(description="Not a lead of the project."),
            404: OpenApiResponse(description="No such project or import, or not a member."),
        },
    )
    def post(self, request: Request, project_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id, roles=LEADS)
        data = EvaluationSetInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        try:
            if "chain_ids" in values:
                marked = evaluation_set_mark_chains(
                    project=project,
                    chain_ids=values["chain_ids"],
                    name=values.get("name", ""),
                    actor=request_user(request),
                )
            else:
                marked = evaluation_set_mark(
                    project=project,
                    import_batch_id=values["import_batch"],
                    name=values.get("name", ""),
                    actor=request_user(request),
                )
        except ImportBatch.DoesNotExist:
            raise Http404("No such import in this project.") from None
        row = evaluation_set_list(project=project).get(pk=marked.pk)
        return Response(EvaluationSetOutputSerializer(row).data, status=status.HTTP_201_CREATED)


class EvaluationSetDetailApi(APIView):
    @extend_schema(
        tags=["evaluation sets"],
        operation_id="evaluation_set_unmark",
        summary="Return an evaluation set's chains to ordinary work (leads only)",
        description="The chains go back to the queue and to training; the figures measured "
        "on the set are dropped.",
        responses={
            204: None,
            403: OpenApiResponse(description="Not a lead of the set's project."),
            404: OpenApiResponse(description="No such evaluation set, or not a member."),
        },
    )
    def delete(self, request: Request, evaluation_set_id: int) -> Response:
        evaluation_set = EvaluationSet.objects.filter(pk=evaluation_set_id).first()
        if evaluation_set is None:
            raise Http404("No such evaluation set.")
        project_get_for_member(user=request.user, project_id=evaluation_set.project_id, roles=LEADS)
        evaluation_set_unmark(evaluation_set=evaluation_set)
        return Response(status=status.HTTP_204_NO_CONTENT)
