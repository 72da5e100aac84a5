"""What the annotator workspace needs beyond the queue: flag a broken chain, and the
caller's own counts. Thin views over ``annotation.labeling.workspace`` and
``annotation.labeling.workspace_reads``."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.access import project_get_for_member
from annotation.api.inputs import InputSerializer
from annotation.api.permissions import request_user
from annotation.labeling.api.assignments import (
    ERROR_RESPONSE,
    AnnotationOutputSerializer,
    NextOutputSerializer,
    SkipOutputSerializer,
    after_submit,
    annotation_payload,
    assignment_pk,
    lease_payload,
)
from annotation.labeling.api.submit_input import (
    SubmitInputSerializer,
    ratings_from_payload,
    submit_input_validate,
)
from annotation.labeling.workspace import (
    FLAG_REASON_MAX_LENGTH,
    assignment_submit_and_claim_next,
    chain_flag,
)
from annotation.labeling.workspace_reads import annotator_stats_get
from annotation.models import Project, ScreeningStatus


class FlagInputSerializer(InputSerializer):
    reason = serializers.CharField(
        max_length=FLAG_REASON_MAX_LENGTH,
        help_text="What is broken in this chain; the project's leads see it with your name.",
    )


class AssignmentFlagView(APIView):
    @extend_schema(
        operation_id="assignments_flag",
        request=FlagInputSerializer,
        responses={
            200: SkipOutputSerializer,
            400: OpenApiResponse(description="No reason, or a reason over 2,000 characters."),
            404: OpenApiResponse(ERROR_RESPONSE, description="No such assignment (or not yours)."),
            409: OpenApiResponse(
                ERROR_RESPONSE,
                description="Only a live lease flags: lease_closed if it was already "
                "submitted, skipped or flagged, lease_lost if it expired.",
            ),
        },
        summary="Flag the leased chain as broken",
        description="Takes the chain out of the queue for everyone until a lead clears the "
        "flag, and closes your lease as skipped with the reason. The project's leads see "
        "who flagged the chain, why and when (projects/{id}/flags/).",
    )
    def post(self, request: Request, assignment_id: int) -> Response:
        payload = FlagInputSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        assignment = chain_flag(
            assignment_id=assignment_pk(assignment_id),
            user=request_user(request),
            reason=payload.validated_data["reason"],
        )
        return Response(SkipOutputSerializer(assignment).data)


class MyGoldOutputSerializer(serializers.Serializer):
    chains = serializers.IntegerField(help_text="Gold chains you labeled before today.")
    step_accuracy = serializers.FloatField(
        allow_null=True, help_text="Share of the gold steps you rated that you rated right."
    )
    first_error_match = serializers.FloatField(
        allow_null=True,
        help_text="Share of gold chains where you found the same first error (or none).",
    )


class MyScreeningOutputSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=ScreeningStatus.choices)
    required = serializers.IntegerField(  # type: ignore[assignment]  # a field, not Field.required
        help_text="Screening chains to label."
    )
    done = serializers.IntegerField(help_text="Screening chains labeled so far.")
    pass_accuracy = serializers.FloatField(help_text="Step accuracy needed to pass.")
    step_accuracy = serializers.FloatField(
        allow_null=True, help_text="Your step accuracy once decided."
    )
    message = serializers.CharField(help_text="What to show: why the queue is empty, say.")


class MyStatsOutputSerializer(serializers.Serializer):
    annotated_today = serializers.IntegerField()
    steps_today = serializers.IntegerField(help_text="Steps you rated today.")
    annotated_total = serializers.IntegerField()
    skipped_total = serializers.IntegerField()
    gold_accuracy = serializers.FloatField(
        allow_null=True, help_text="gold.step_accuracy, kept for older clients."
    )
    gold_chains = serializers.IntegerField(help_text="gold.chains (0 when null).")
    day_start = serializers.DateTimeField(help_text="Where 'today' starts.")
    gold = MyGoldOutputSerializer(
        allow_null=True,
        help_text="Your score on gold chains labeled before today (updated once a day, so it "
        "never tells which chain was gold); null before there is one.",
    )
    screening = MyScreeningOutputSerializer(
        allow_null=True,
        help_text="Null unless the project screens you. Once failed, or while no "
        "screening chain is ready, assignments/next/ answers 204.",
    )


class MyStatsView(APIView):
    @extend_schema(
        operation_id="projects_my_stats",
        responses={
            200: MyStatsOutputSerializer,
            404: OpenApiResponse(ERROR_RESPONSE, description="No such project (or not yours)."),
        },
        summary="Your own progress in this project",
    )
    def get(self, request: Request, project_id: int) -> Response:
        project: Project = project_get_for_member(user=request.user, project_id=project_id)
        stats = annotator_stats_get(project=project, user=request_user(request))
        return Response(MyStatsOutputSerializer(stats).data)


class SubmitAndNextOutputSerializer(serializers.Serializer):
    annotation = AnnotationOutputSerializer()
    next = NextOutputSerializer(
        allow_null=True,
        help_text="The next lease and chain, as from assignments/next/; null unless "
        "next_status is 'leased'.",
    )
    next_status = serializers.ChoiceField(
        choices=["leased", "empty", "busy"],
        help_text="'empty': nothing is left for you; 'busy': ask assignments/next/ again.",
    )


class AssignmentSubmitAndNextView(APIView):
    @extend_schema(
        operation_id="assignments_submit_and_next",
        request=SubmitInputSerializer,
        responses={
            201: OpenApiResponse(
                SubmitAndNextOutputSerializer,
                description="The annotation and the next lease. A repeat with the same "
                "request_id records nothing new: 201 with the first annotation and your "
                "live lease, as from next.",
            ),
            400: OpenApiResponse(description="Ratings that do not fit the chain or the mode."),
            404: OpenApiResponse(ERROR_RESPONSE, description="No such assignment (or not yours)."),
            409: OpenApiResponse(ERROR_RESPONSE, description="As for submit."),
        },
        summary="Submit ratings, then lease the next chain",
        description="assignments/{id}/submit/ followed by projects/{id}/assignments/next/ in "
        "one request. The submit is committed before the next chain is leased.",
    )
    def post(self, request: Request, assignment_id: int) -> Response:
        body = submit_input_validate(request.data)
        result = assignment_submit_and_claim_next(
            assignment_id=assignment_pk(assignment_id),
            user=request_user(request),
            ratings=ratings_from_payload(body),
            rewrite=body["rewrite"],
            duration_ms=body["duration_ms"],
            request_id=body["request_id"],
            public_step_ids=True,
        )
        after_submit(result.submitted)
        following = result.next_lease
        project = result.submitted.annotation.chain.project  # loaded by the submit
        # A repeat answers with the first submit's status, as assignments/{id}/submit/ does.
        return Response(
            {
                "annotation": annotation_payload(result.submitted),
                "next": lease_payload(lease=following, project=project) if following else None,
                "next_status": result.next_status,
            },
            status=status.HTTP_201_CREATED,
        )
