"""The labeling queue over HTTP: next, prefetch, submit, renew, skip.

Views are thin: check access, call one service from ``annotation.labeling.queue``,
serialize the result. Service errors map to status codes in ``api.errors``: ValidationError
400, someone else's (or a missing) lease 404, a lost or closed lease 409, a busy queue 503.
Next and submit answer through two doors (``token_door``); ``submit_input`` checks the
submit's body."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from drf_spectacular.utils import (
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    inline_serializer,
)
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.api.fields import PublicIdField
from annotation.api.inputs import InputSerializer
from annotation.api.permissions import request_user
from annotation.chains.events import chain_finished_notify
from annotation.labeling.api.submit_input import (
    SubmitInputSerializer,
    ratings_from_payload,
    submit_input_validate,
)
from annotation.labeling.api.token_door import QueueView, json_body, json_response
from annotation.labeling.queue.access import (
    project_get_for_labeling,
    user_and_project_for_labeling,
    user_for_writing_token,
)
from annotation.labeling.queue.claim import lease_next, lease_prefetch
from annotation.labeling.queue.leases import Lease, assignment_renew, assignment_skip
from annotation.labeling.queue.prelabels import shown_verdicts
from annotation.labeling.queue.submit import (
    Submitted,
    assignment_submit,
)
from annotation.models import (
    Annotation,
    Assignment,
    Chain,
    MachineSource,
    Project,
    Step,
    StepRating,
)
from annotation.public_ids import ASSIGNMENT_IDS, CHAIN_IDS, PUBLIC_ID_MAX, STEP_IDS

ERROR_RESPONSE = inline_serializer(
    "QueueError",
    {
        "detail": serializers.CharField(),
        "code": serializers.CharField(
            required=False, help_text="On 409: lease_lost, lease_closed or lease_conflict."
        ),
    },
)


# --- next --------------------------------------------------------------------------------
# The serializers below describe the answers in the schema; ``lease_payload`` builds them.


def assignment_pk(public_id: int) -> int:
    """The row id of the assignment an annotator names by its public id
    (``annotation.public_ids``); Assignment.DoesNotExist (a 404) for a number that is
    none, as for a lease that is not theirs."""
    pk = ASSIGNMENT_IDS.read(public_id, viewer=None)
    if pk is None:
        raise Assignment.DoesNotExist("No such assignment.")
    return pk


class LeaseOutputSerializer(serializers.ModelSerializer):
    id = PublicIdField(ASSIGNMENT_IDS, per_viewer=False)

    class Meta:
        model = Assignment
        fields = ["id", "expires_at"]


class ProblemForLabelingSerializer(serializers.Serializer):
    text = serializers.CharField()
    reference_answer = serializers.CharField(
        required=False, help_text="Only when the project shows reference answers."
    )


class StepForLabelingSerializer(serializers.ModelSerializer):
    id = serializers.IntegerField(
        min_value=1, max_value=PUBLIC_ID_MAX, help_text="The step's public id (not its row id)."
    )
    prelabel = serializers.IntegerField(
        min_value=-1,
        max_value=1,
        allow_null=True,
        help_text="The machine verdict to confirm or override (-1, 0 or 1): null unless the "
        "project shows pre-labels, this chain is not held out for you and the source has a "
        "verdict on this step. Your rating is recorded as confirming or overriding it.",
    )

    class Meta:
        model = Step
        fields = ["id", "index", "text", "prelabel"]


class ChainForLabelingSerializer(serializers.ModelSerializer):
    """What an annotator sees: no ratings of others, no imported labels, no metadata
    (which may carry them), no generator name (which may bias the grade)."""

    id = PublicIdField(CHAIN_IDS, per_viewer=True)
    problem = ProblemForLabelingSerializer()
    steps = StepForLabelingSerializer(many=True)
    labeling_mode = serializers.CharField()
    prelabel_source = serializers.ChoiceField(
        choices=MachineSource.choices,
        allow_null=True,
        help_text="Whose verdicts the steps' prelabel fields are; null when none is shown.",
    )

    class Meta:
        model = Chain
        fields = ["id", "problem", "steps", "final_answer", "labeling_mode", "prelabel_source"]


class NextOutputSerializer(serializers.Serializer):
    assignment = LeaseOutputSerializer()
    chain = ChainForLabelingSerializer()


_expires_at_field = serializers.DateTimeField()


def lease_payload(*, lease: Lease, project: Project) -> dict[str, Any]:
    """The answer of next and prefetch for ``lease`` (``NextOutputSerializer`` in the
    schema), built as plain dicts: next is the hottest request, and nested serializers
    cost more than the claim itself. Ids are public ids (``annotation.public_ids``), the
    lease holder's own. The pre-labels are those the lease stored when it was taken
    (``queue.prelabels``)."""
    chain = lease.chain
    problem = {"text": chain.problem_text}
    if project.show_reference_answer:
        problem["reference_answer"] = chain.reference_answer
    viewer = lease.assignment.annotator_id
    step_base = STEP_IDS.base(lease.assignment.chain_id, viewer=viewer)
    verdicts = shown_verdicts(lease.assignment)
    return {
        "assignment": {
            "id": ASSIGNMENT_IDS.show(lease.assignment.pk, viewer=None),
            "expires_at": _expires_at_field.to_representation(lease.assignment.expires_at),
        },
        "chain": {
            "id": CHAIN_IDS.show(lease.assignment.chain_id, viewer=viewer),
            "problem": problem,
            "steps": [
                {
                    "id": step_base + s.index,
                    "index": s.index,
                    "text": s.text,
                    "prelabel": verdicts.get(str(s.index)),
                }
                for s in chain.steps
            ],
            "final_answer": chain.final_answer,
            "labeling_mode": project.labeling_mode,
            "prelabel_source": lease.assignment.prelabel_source if verdicts else None,
        },
    }


def _lease_answer(lease: Lease | None, project: Project) -> tuple[dict[str, Any] | None, int]:
    if lease is None:
        return None, status.HTTP_204_NO_CONTENT
    return lease_payload(lease=lease, project=project), status.HTTP_200_OK


def next_answer(*, user: Any, project: Project) -> tuple[dict[str, Any] | None, int]:
    return _lease_answer(lease_next(project=project, user=user), project)


def prefetch_answer(*, user: Any, project: Project) -> tuple[dict[str, Any] | None, int]:
    return _lease_answer(lease_prefetch(project=project, user=user), project)


class AssignmentNextView(QueueView):
    @extend_schema(
        operation_id="assignments_next",
        request=None,
        responses={
            200: NextOutputSerializer,
            204: OpenApiResponse(description="Nothing is left for you to label here."),
            404: OpenApiResponse(ERROR_RESPONSE, description="No such project (or not yours)."),
            503: OpenApiResponse(ERROR_RESPONSE, description="Busy; try again."),
        },
        summary="Lease the next chain to label",
        description="Returns your live lease in this project if you hold one; otherwise "
        "leases the highest-priority, then oldest, chain that still needs annotators and "
        "that you have not labeled or skipped.",
    )
    def post(self, request: Request, project_id: int) -> Response:
        project: Project = project_get_for_labeling(user=request.user, project_id=project_id)
        payload, code = next_answer(user=request_user(request), project=project)
        return Response(payload, status=code)

    def token_post(  # type: ignore[override]  # called with the URL's own keyword arguments
        self, request: HttpRequest, key: str, project_id: int
    ) -> HttpResponse | None:
        # The token's user and the project, membership checked, in one query.
        found = user_and_project_for_labeling(token_key=key, project_id=project_id)
        if found is None:
            return None  # DRF tells a refused token (401, 403) from a foreign project (404)
        request.user, project = found
        return json_response(*next_answer(user=request.user, project=project))


class AssignmentPrefetchView(APIView):
    @extend_schema(
        operation_id="assignments_prefetch",
        request=None,
        responses={
            200: NextOutputSerializer,
            204: OpenApiResponse(description="Nothing else is left for you to label here."),
            404: OpenApiResponse(ERROR_RESPONSE, description="No such project (or not yours)."),
            503: OpenApiResponse(ERROR_RESPONSE, description="Busy; try again."),
        },
        summary="Lease the chain after the current one",
        description="Leases a second chain while you work on your current one, so it can be "
        "shown the moment you submit: a chain other than the one(s) you hold, chosen and "
        "counted against the overlap as for next. You hold at most two live leases per "
        "project; when you already do, the newer one is returned again. next keeps "
        "answering with your oldest live lease, so after you submit the current chain, "
        "next returns this one. Renew it like any lease.",
    )
    def post(self, request: Request, project_id: int) -> Response:
        project: Project = project_get_for_labeling(user=request.user, project_id=project_id)
        payload, code = prefetch_answer(user=request_user(request), project=project)
        return Response(payload, status=code)


# --- submit ------------------------------------------------------------------------------


def after_submit(submitted: Submitted) -> None:
    """What every submit endpoint does once a new annotation is recorded."""
    # A gold pass shaped as the one that finishes its chain asks too (the check finds
    # nothing new): what a submit sends must not tell gold apart (queue.submit_writes.Standing).
    if submitted.created and submitted.finishing:
        # Auto-retraining counts finished chains (the training app's hook); a worker
        # checks, never this request.
        chain_finished_notify(project_id=submitted.annotation.chain.project_id)


class StepRatingOutputSerializer(serializers.ModelSerializer):
    step = serializers.SerializerMethodField(help_text="The step's public id.")

    @extend_schema_field(serializers.IntegerField(min_value=1, max_value=PUBLIC_ID_MAX))
    def get_step(self, rating: StepRating) -> int:
        return STEP_IDS.of(rating.step, viewer=self.context["viewer"])

    class Meta:
        model = StepRating
        fields = ["step", "rating", "comment"]


class AnnotationOutputSerializer(serializers.ModelSerializer):
    chain = PublicIdField(CHAIN_IDS, per_viewer=True, source="chain_id")
    ratings = StepRatingOutputSerializer(many=True)

    class Meta:
        model = Annotation
        fields = ["id", "chain", "created_at", "rewrite", "duration_ms", "request_id", "ratings"]


class SubmitOutputSerializer(serializers.Serializer):
    annotation = AnnotationOutputSerializer()


_created_at_field = serializers.DateTimeField()


def annotation_payload(submitted: Submitted) -> dict[str, Any]:
    """A submit's annotation as the answer shows it (``AnnotationOutputSerializer`` in the
    schema), from what the submit recorded: a new submit's answer needs no query. Chain
    and step ids are public ids (``annotation.public_ids``)."""
    annotation = submitted.annotation
    return {
        "id": annotation.pk,
        "chain": CHAIN_IDS.show(annotation.chain_id, viewer=annotation.annotator_id),
        "created_at": _created_at_field.to_representation(annotation.created_at),
        "rewrite": annotation.rewrite,
        "duration_ms": annotation.duration_ms,
        "request_id": annotation.request_id,
        "ratings": [
            {"step": r.step_id, "rating": r.rating, "comment": r.comment} for r in submitted.ratings
        ],
    }


def submit_answer(*, user: Any, assignment_id: int, data: Any) -> tuple[dict[str, Any], int]:
    """Validate and submit a body; the answer's payload and status code. A repeat answers
    as the first submit did (201, the same body): a client whose answer was lost sees the
    same answer, whichever of the two reached it."""
    body = submit_input_validate(data)
    submitted = assignment_submit(
        assignment_id=assignment_pk(assignment_id),
        user=user,
        ratings=ratings_from_payload(body),
        rewrite=body["rewrite"],
        duration_ms=body["duration_ms"],
        request_id=body["request_id"],
        public_step_ids=True,
    )
    after_submit(submitted)
    return {"annotation": annotation_payload(submitted)}, status.HTTP_201_CREATED


class AssignmentSubmitView(QueueView):
    @extend_schema(
        operation_id="assignments_submit",
        request=SubmitInputSerializer,
        responses={
            201: OpenApiResponse(
                SubmitOutputSerializer,
                description="The annotation recorded. A repeat with the same request_id "
                "changes nothing and gets the first answer again: 201, the same body.",
            ),
            400: OpenApiResponse(description="Ratings that do not fit the chain or the mode."),
            404: OpenApiResponse(ERROR_RESPONSE, description="No such assignment (or not yours)."),
            409: OpenApiResponse(
                ERROR_RESPONSE,
                description="The lease expired and its place went to someone else, the chain "
                "is fully annotated, or the lease was already submitted or skipped.",
            ),
        },
        summary="Submit ratings for a leased chain",
    )
    def post(self, request: Request, assignment_id: int) -> Response:
        payload, code = submit_answer(
            user=request_user(request), assignment_id=assignment_id, data=request.data
        )
        return Response(payload, status=code)

    def token_post(  # type: ignore[override]  # called with the URL's own keyword arguments
        self, request: HttpRequest, key: str, assignment_id: int
    ) -> HttpResponse | None:
        data = json_body(request)
        if data is None:
            return None
        user = user_for_writing_token(key)
        if user is None:
            return None  # DRF answers (401, or 403 for a read-only token)
        request.user = user
        return json_response(
            *submit_answer(user=request.user, assignment_id=assignment_id, data=data)
        )


# --- renew -------------------------------------------------------------------------------


class AssignmentRenewView(APIView):
    @extend_schema(
        operation_id="assignments_renew",
        request=None,
        responses={
            200: LeaseOutputSerializer,
            404: OpenApiResponse(ERROR_RESPONSE, description="No such assignment (or not yours)."),
            409: OpenApiResponse(ERROR_RESPONSE, description="The lease is closed or lost."),
        },
        summary="Extend a lease",
        description="Sets the lease to expire one lease length from now. An expired lease is "
        "renewed too while its place is still free.",
    )
    def post(self, request: Request, assignment_id: int) -> Response:
        assignment = assignment_renew(
            assignment_id=assignment_pk(assignment_id), user=request_user(request)
        )
        return Response(LeaseOutputSerializer(assignment).data)


# --- skip --------------------------------------------------------------------------------


class SkipInputSerializer(InputSerializer):
    reason = serializers.CharField(max_length=2_000, help_text="Why you skip this chain.")


class SkipOutputSerializer(serializers.ModelSerializer):
    id = PublicIdField(ASSIGNMENT_IDS, per_viewer=False)

    class Meta:
        model = Assignment
        fields = ["id", "status", "skip_reason"]


class AssignmentSkipView(APIView):
    @extend_schema(
        operation_id="assignments_skip",
        request=SkipInputSerializer,
        responses={
            200: SkipOutputSerializer,
            404: OpenApiResponse(ERROR_RESPONSE, description="No such assignment (or not yours)."),
            409: OpenApiResponse(
                ERROR_RESPONSE,
                description="lease_closed: the lease was already submitted (also when a "
                "submit of it raced this skip and won).",
            ),
        },
        summary="Skip a leased chain",
        description="You will not be offered this chain again.",
    )
    def post(self, request: Request, assignment_id: int) -> Response:
        payload = SkipInputSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        assignment = assignment_skip(
            assignment_id=assignment_pk(assignment_id),
            user=request_user(request),
            reason=payload.validated_data["reason"],
        )
        return Response(SkipOutputSerializer(assignment).data)
