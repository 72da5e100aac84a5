"""Gold chains over HTTP, for project leads only: mark and unmark gold chains (by hand or
from an import's labels), list them, read every annotator's gold score and screening, and
reset a failed screening. Thin: check access, call one service or selector, serialize.

Annotators never reach any of this (403; a non-member gets 404): what they may know of
gold is the aggregate in their own my-stats."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib.auth import get_user_model
from django.http import Http404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.api.fields import IdField
from annotation.api.inputs import InputSerializer
from annotation.api.permissions import LEADS, project_for_request, request_user
from annotation.models import Chain, ImportBatch, Membership, Screening, ScreeningStatus
from annotation.quality.gold import (
    gold_mark,
    gold_mark_from_import,
    gold_unmark,
    screening_reset,
)
from annotation.quality.gold_reads import gold_scores, screening_list

NOT_A_MEMBER = OpenApiResponse(description="No such project, or the caller is not a member.")
NOT_A_LEAD = OpenApiResponse(description="A member who is not a lead of the project.")
INVALID = OpenApiResponse(description="Invalid input; the body names each field's errors.")
MAX_CHAINS_PER_REQUEST = 10_000


class GoldMarkInputSerializer(InputSerializer):
    chain_ids = serializers.ListField(
        child=IdField(),
        allow_empty=False,
        max_length=MAX_CHAINS_PER_REQUEST,
        help_text="Chains of this project.",
    )


class GoldFromImportInputSerializer(InputSerializer):
    import_batch = IdField(help_text="An import of this project that carried labels.")


class GoldMarkOutputSerializer(serializers.Serializer):
    chain_ids = serializers.ListField(
        child=serializers.IntegerField(), help_text="The chains changed, by id."
    )
    count = serializers.IntegerField()


class GoldChainOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    gold_annotation = serializers.IntegerField(
        source="gold_annotation_id", help_text="The annotation that is the answer key."
    )
    answer_key_source = serializers.CharField(
        source="gold_annotation__source", help_text="adjudication or import."
    )
    step_count = serializers.IntegerField()
    is_flagged = serializers.BooleanField()
    flagged_by = serializers.CharField(
        source="flagged_by__username",
        allow_null=True,
        help_text="Who flagged it (projects/{id}/flags/ has the rest); null if nobody did.",
    )
    flag_reason = serializers.CharField(help_text="Why it was flagged.")


class ScreeningOutputSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=ScreeningStatus.choices)
    chains = serializers.IntegerField(help_text="Screening chains scored.")
    step_accuracy = serializers.FloatField(allow_null=True)
    decided_at = serializers.DateTimeField(allow_null=True)
    resets = serializers.IntegerField()


class GoldAnnotatorScoreOutputSerializer(serializers.Serializer):
    annotator_id = serializers.IntegerField()
    username = serializers.CharField()
    role = serializers.CharField(allow_null=True)
    chains = serializers.IntegerField(help_text="Gold chains labeled.")
    steps_compared = serializers.IntegerField(
        help_text="Steps both the answer key and the annotator rated."
    )
    steps_correct = serializers.IntegerField()
    step_accuracy = serializers.FloatField(allow_null=True)
    first_error_match = serializers.FloatField(
        allow_null=True, help_text="Share of gold chains with the same first -1 (or none)."
    )
    screening = ScreeningOutputSerializer(
        allow_null=True, help_text="Null while pending with nothing stored, or without screening."
    )


class GoldScoresOutputSerializer(serializers.Serializer):
    gold_chains = serializers.IntegerField()
    screening_chains = serializers.IntegerField()
    screening_pass_accuracy = serializers.FloatField()
    annotators = GoldAnnotatorScoreOutputSerializer(many=True)


def _mark_response(ids: list[int]) -> Response:
    return Response(GoldMarkOutputSerializer({"chain_ids": ids, "count": len(ids)}).data)


CHAINS_CHANGE_RESPONSES = {
    200: GoldMarkOutputSerializer,
    400: INVALID,
    403: NOT_A_LEAD,
    404: NOT_A_MEMBER,
}


def _chains_change(
    *, request: Request, project_id: int, service: Callable[..., list[int]]
) -> Response:
    """Mark or unmark (``service``) the chains a lead named in the body."""
    project = project_for_request(request=request, project_id=project_id, roles=LEADS)
    data = GoldMarkInputSerializer(data=request.data)
    data.is_valid(raise_exception=True)
    ids = service(
        project=project, chain_ids=data.validated_data["chain_ids"], actor=request_user(request)
    )
    return _mark_response(ids)


class GoldMarkApi(APIView):
    @extend_schema(
        tags=["gold"],
        operation_id="gold_mark",
        summary="Mark chains as gold (leads only)",
        description="Each chain's answer key is its current adjudication, else its imported "
        "labels; a chain with neither is refused (400, nothing marked). Marking a gold chain "
        "again refreshes its answer key.",
        request=GoldMarkInputSerializer,
        responses=CHAINS_CHANGE_RESPONSES,
    )
    def post(self, request: Request, project_id: int) -> Response:
        return _chains_change(request=request, project_id=project_id, service=gold_mark)


class GoldUnmarkApi(APIView):
    @extend_schema(
        tags=["gold"],
        operation_id="gold_unmark",
        summary="Return gold chains to ordinary work (leads only)",
        description="The passes made over them while gold now count toward the overlap.",
        request=GoldMarkInputSerializer,
        responses=CHAINS_CHANGE_RESPONSES,
    )
    def post(self, request: Request, project_id: int) -> Response:
        return _chains_change(request=request, project_id=project_id, service=gold_unmark)


class GoldFromImportApi(APIView):
    @extend_schema(
        tags=["gold"],
        operation_id="gold_mark_from_import",
        summary="Mark every chain an import brought labels for as gold (leads only)",
        request=GoldFromImportInputSerializer,
        responses={
            200: GoldMarkOutputSerializer,
            400: INVALID,
            403: NOT_A_LEAD,
            404: OpenApiResponse(description="No such project or import, or not a member."),
        },
    )
    def post(self, request: Request, project_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id, roles=LEADS)
        data = GoldFromImportInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            ids = gold_mark_from_import(
                project=project,
                import_batch_id=data.validated_data["import_batch"],
                actor=request_user(request),
            )
        except ImportBatch.DoesNotExist:
            raise Http404("No such import in this project.") from None
        return _mark_response(ids)


class GoldChainListApi(APIView):
    @extend_schema(
        tags=["gold"],
        operation_id="gold_chains_list",
        summary="The project's gold chains (leads only)",
        responses={
            200: GoldChainOutputSerializer(many=True),
            403: NOT_A_LEAD,
            404: NOT_A_MEMBER,
        },
    )
    def get(self, request: Request, project_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id, roles=LEADS)
        rows = (
            Chain.objects.filter(project=project, is_gold=True)
            .order_by("id")
            .values(
                "id",
                "gold_annotation_id",
                "gold_annotation__source",
                "step_count",
                "is_flagged",
                "flagged_by__username",
                "flag_reason",
            )
        )
        return Response(GoldChainOutputSerializer(rows, many=True).data)


def _screening(row: Screening | None) -> dict[str, Any] | None:
    if row is None:
        return None
    return {
        "status": row.status,
        "chains": row.chains,
        "step_accuracy": row.step_accuracy,
        "decided_at": row.decided_at,
        "resets": row.resets,
    }


class GoldScoresApi(APIView):
    @extend_schema(
        tags=["gold"],
        operation_id="gold_scores",
        summary="Every annotator's gold score and screening (leads only)",
        description="Step accuracy is over the steps both the answer key and the annotator "
        "rated (steps left unrated after a first error are missing, not wrong); first-error "
        "match is the share of gold chains whose first -1 is at the same step, or absent in "
        "both. Annotators with a screening but no gold pass are listed too.",
        responses={200: GoldScoresOutputSerializer, 403: NOT_A_LEAD, 404: NOT_A_MEMBER},
    )
    def get(self, request: Request, project_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id, roles=LEADS)
        scores = {item.annotator_id: item for item in gold_scores(project=project)}
        screenings = screening_list(project=project)
        roles = dict(Membership.objects.filter(project=project).values_list("user_id", "role"))
        names = dict(
            get_user_model()
            .objects.filter(pk__in=set(screenings) - set(scores))
            .values_list("pk", "username")
        )
        annotators = []
        for user_id in sorted(set(scores) | set(screenings)):
            item = scores.get(user_id)
            annotators.append(
                {
                    "annotator_id": user_id,
                    "username": item.username if item else names.get(user_id, ""),
                    "role": roles.get(user_id),
                    "chains": item.chains if item else 0,
                    "steps_compared": item.steps_compared if item else 0,
                    "steps_correct": item.steps_correct if item else 0,
                    "step_accuracy": item.step_accuracy if item else None,
                    "first_error_match": item.first_error_match if item else None,
                    "screening": _screening(screenings.get(user_id)),
                }
            )
        annotators.sort(key=lambda entry: str(entry["username"]))
        body = {
            "gold_chains": Chain.objects.filter(project=project, is_gold=True).count(),
            "screening_chains": project.screening_chains,
            "screening_pass_accuracy": project.screening_pass_accuracy,
            "annotators": annotators,
        }
        return Response(GoldScoresOutputSerializer(body).data)


class ScreeningResetApi(APIView):
    @extend_schema(
        tags=["gold"],
        operation_id="gold_screening_reset",
        summary="Give an annotator a new screening attempt (leads only)",
        description="Their screening is pending again and is scored on the gold chains they "
        "label from now on.",
        request=None,
        responses={
            200: ScreeningOutputSerializer,
            400: INVALID,
            403: NOT_A_LEAD,
            404: OpenApiResponse(description="No such project or member, or not a member."),
        },
    )
    def post(self, request: Request, project_id: int, user_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id, roles=LEADS)
        annotator = get_user_model().objects.filter(pk=user_id).first()
        if annotator is None:
            raise Http404("No such member.")
        try:
            row = screening_reset(project=project, annotator=annotator, by=request_user(request))
        except Screening.DoesNotExist:
            raise Http404("No such member.") from None
        return Response(ScreeningOutputSerializer(_screening(row)).data)
