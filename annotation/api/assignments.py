"""The labeling queue over HTTP: next, prefetch, submit, renew, skip.

Views are thin: check access, call one service from ``annotation.queue``,
serialize the result. Service errors map to status codes in ``api.errors``: ValidationError
400, someone else's (or a missing) lease 404, a lost or closed lease 409, a busy queue 503."""

from __future__ import annotations

from typing import Any

import orjson
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from drf_spectacular.utils import (
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    inline_serializer,
)
from rest_framework import serializers, status
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.api.authentication import token_key
from annotation.api.errors import api_exception_handler
from annotation.api.fields import BIGINT_MAX, INT32_MAX, INT32_MIN, IdField, RatingField
from annotation.api.permissions import request_user
from annotation.models import (
    Annotation,
    Assignment,
    Chain,
    Project,
    Step,
    StepRating,
)
from annotation.queue.access import (
    project_get_for_labeling,
    user_and_project_for_labeling,
    user_for_token,
)
from annotation.queue.claim import assignment_claim_next, assignment_prefetch
from annotation.queue.leases import assignment_renew, assignment_skip, lease_chain_rows
from annotation.queue.submit import REQUEST_ID_MAX_LENGTH, RatingInput, assignment_submit
from annotation.services.chain_events import chain_finished_notify

ERROR_RESPONSE = inline_serializer(
    "QueueError",
    {
        "detail": serializers.CharField(),
        "code": serializers.CharField(
            required=False, help_text="On 409: lease_lost, lease_closed or lease_conflict."
        ),
    },
)


# --- the lean way through ----------------------------------------------------------------

# Request bodies above this go through DRF, which enforces the upload limits itself.
LEAN_BODY_MAX_BYTES = 1024 * 1024


def _accepts_json(request: HttpRequest) -> bool:
    return request.META.get("HTTP_ACCEPT", "") in ("", "*/*", "application/json")


def json_response(payload: Any, status_code: int = 200) -> HttpResponse:
    """What DRF's JSON renderer would send for ``payload``: compact UTF-8 JSON."""
    return HttpResponse(orjson.dumps(payload), status=status_code, content_type="application/json")


class LeanQueueView(APIView):
    """An APIView for the queue's hottest requests (next, submit), whose common case, a
    POST with an API token asking for JSON, skips DRF's request cycle: its request wrapper,
    negotiation, parsers, authenticator and permission loop and template rendering cost
    more than the claim itself. ``lean`` answers it with the same services, payloads and
    error bodies; it returns None, before doing anything, for whatever it does not handle
    (an unknown token, a session, an unusual body), and DRF's ``dispatch`` answers that
    as it always did. The schema, the docs and every other method see the DRF view."""

    def lean(self, request: HttpRequest, key: str, **kwargs: Any) -> HttpResponse | None:
        raise NotImplementedError

    @classmethod
    def as_view(cls, **initkwargs: Any) -> Any:
        drf_view = super().as_view(**initkwargs)

        def view(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            if request.method == "POST" and _accepts_json(request):
                key = token_key(request)
                if key is not None:
                    response: HttpResponseBase | None
                    try:
                        response = cls(**initkwargs).lean(request, key, **kwargs)
                    except Exception as exc:  # noqa: BLE001 - DRF's handler decides below
                        response = _error_response(request, exc)
                    if response is not None:
                        return response
            return drf_view(request, *args, **kwargs)

        # What DRF's view carries: ``cls`` for the schema, ``csrf_exempt`` (tokens and
        # DRF's own session check stand in for Django's CSRF middleware).
        view.__dict__.update(drf_view.__dict__)
        view.__name__ = drf_view.__name__  # type: ignore[attr-defined]  # a function's
        view.__doc__ = drf_view.__doc__
        return view


def _error_response(request: HttpRequest, exc: Exception) -> HttpResponseBase:
    """The answer the API's exception handler gives for ``exc`` (a service error, a DRF
    error, Http404, PermissionDenied), rendered as JSON; anything else is raised again, a
    bug for Django's 500 handler as in DRF."""
    response = api_exception_handler(exc, {"request": request, "view": None})
    if response is None:
        raise exc
    response.accepted_renderer = JSONRenderer()
    response.accepted_media_type = "application/json"
    response.renderer_context = {}  # type: ignore[attr-defined]  # DRF sets it on render
    return response


# --- next --------------------------------------------------------------------------------


class LeaseOutputSerializer(serializers.ModelSerializer):
    class Meta:
        model = Assignment
        fields = ["id", "expires_at"]


class ProblemForLabelingSerializer(serializers.Serializer):
    text = serializers.CharField()
    reference_answer = serializers.CharField(
        required=False, help_text="Only when the project shows reference answers."
    )

    def to_representation(self, instance: Any) -> dict[str, Any]:
        data = super().to_representation(instance)
        if not self.context["project"].show_reference_answer:
            data.pop("reference_answer", None)
        return data


class StepForLabelingSerializer(serializers.ModelSerializer):
    class Meta:
        model = Step
        fields = ["id", "index", "text"]


class ChainForLabelingSerializer(serializers.ModelSerializer):
    """What an annotator sees: no ratings of others, no imported labels, no metadata
    (which may carry them), no generator name (which may bias the grade)."""

    problem = ProblemForLabelingSerializer()
    steps = StepForLabelingSerializer(many=True)
    labeling_mode = serializers.SerializerMethodField()

    class Meta:
        model = Chain
        fields = ["id", "problem", "steps", "final_answer", "labeling_mode"]

    def get_labeling_mode(self, chain: Chain) -> str:
        return self.context["project"].labeling_mode


class NextOutputSerializer(serializers.Serializer):
    assignment = LeaseOutputSerializer(source="*")
    chain = ChainForLabelingSerializer()


class AssignmentNextView(LeanQueueView):
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
        assignment = assignment_claim_next(project=project, user=request_user(request))
        if assignment is None:
            return Response(status=status.HTTP_204_NO_CONTENT)
        return Response(lease_payload(assignment=assignment, project=project))

    def lean(  # type: ignore[override]  # called with the URL's own keyword arguments
        self, request: HttpRequest, key: str, project_id: int
    ) -> HttpResponse | None:
        # The token's user and the project, membership checked, in one query.
        found = user_and_project_for_labeling(token_key=key, project_id=project_id)
        if found is None:
            return None  # DRF tells an unknown token (401) from a foreign project (404)
        request.user, project = found
        assignment = assignment_claim_next(project=project, user=request_user(request))
        if assignment is None:
            nothing = HttpResponse(status=status.HTTP_204_NO_CONTENT)
            del nothing["Content-Type"]  # as DRF sends an empty answer
            return nothing
        return json_response(lease_payload(assignment=assignment, project=project))


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
        assignment = assignment_prefetch(project=project, user=request_user(request))
        if assignment is None:
            return Response(status=status.HTTP_204_NO_CONTENT)
        return Response(lease_payload(assignment=assignment, project=project))


_expires_at_field = serializers.DateTimeField()


def lease_payload(*, assignment: Assignment, project: Project) -> dict[str, Any]:
    """What ``NextOutputSerializer`` gives for ``assignment``, built as plain dicts from
    the steps with their chain and problem (read by the claim with a new lease on
    PostgreSQL, else by one query here): next is the hottest request, and
    nested serializers and a query each for the problem and the steps cost more than the
    claim itself. ``test_lease_payload_matches_the_serializer`` keeps the two equal."""
    rows = getattr(assignment, "chain_rows", None)  # read with a new lease (PostgreSQL)
    if rows is None:
        rows = lease_chain_rows(chain_id=assignment.chain_id)
    if rows:
        final_answer, problem_text, reference_answer = rows[0][3:]
    else:  # a chain without steps: nothing to grade, but still a valid answer
        chain = Chain.objects.select_related("problem").get(pk=assignment.chain_id)
        final_answer = chain.final_answer
        problem_text, reference_answer = chain.problem.text, chain.problem.reference_answer
    problem = {"text": problem_text}
    if project.show_reference_answer:
        problem["reference_answer"] = reference_answer
    return {
        "assignment": {
            "id": assignment.pk,
            "expires_at": _expires_at_field.to_representation(assignment.expires_at),
        },
        "chain": {
            "id": assignment.chain_id,
            "problem": problem,
            "steps": [{"id": row[0], "index": row[1], "text": row[2]} for row in rows],
            "final_answer": final_answer,
            "labeling_mode": project.labeling_mode,
        },
    }


# --- submit ------------------------------------------------------------------------------


class RatingInputSerializer(serializers.Serializer):
    step = IdField(help_text="A step id of the leased chain.")
    # Range-checked by the service, whose message names the step.
    rating = RatingField(help_text="-1 (incorrect), 0 (ambiguous) or 1 (correct).")
    comment = serializers.CharField(
        required=False, allow_blank=True, default="", max_length=10_000, trim_whitespace=True
    )
    duration_ms = serializers.IntegerField(
        required=False,
        allow_null=True,
        default=None,
        min_value=0,
        max_value=2**31 - 1,
        help_text="How long the step held the annotator's focus.",
    )


def ratings_from_payload(data: dict[str, Any]) -> list[RatingInput]:
    """The service's rating inputs from a validated ``SubmitInputSerializer`` payload."""
    return [
        RatingInput(
            step_id=r["step"],
            rating=int(r["rating"]),
            comment=r["comment"],
            duration_ms=r["duration_ms"],
        )
        for r in data["ratings"]
    ]


def after_submit(annotation: Any) -> None:
    """What every submit endpoint does once a new annotation is recorded."""
    if annotation.created and annotation.chain.is_finished:
        # Auto-retraining counts finished chains (the training app's hook); a worker
        # checks, never this request.
        chain_finished_notify(project_id=annotation.chain.project_id)


class SubmitInputSerializer(serializers.Serializer):
    ratings = RatingInputSerializer(many=True, allow_empty=False)
    rewrite = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=20_000,
        help_text="The corrected text of the first incorrect step (needs a -1 rating).",
    )
    duration_ms = serializers.IntegerField(
        required=False, allow_null=True, default=None, min_value=0, max_value=2**31 - 1
    )
    request_id = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=REQUEST_ID_MAX_LENGTH,
        help_text="A client-chosen id; repeating a submit with it changes nothing.",
    )


def _plain_int(value: Any, *, low: int | None = None, high: int | None = None) -> bool:
    return type(value) is int and (low is None or value >= low) and (high is None or value <= high)


def _plain_duration(value: Any) -> bool:
    return value is None or _plain_int(value, low=0, high=INT32_MAX)


def _submit_input_fast(data: Any) -> dict[str, Any] | None:
    """The common submit body (a JSON object of plain ints, no comments or rewrite, an
    ASCII request_id) validated by hand, giving exactly what ``SubmitInputSerializer``
    would; None for anything else, which the serializer then checks and explains."""
    if type(data) is not dict:
        return None
    items = data.get("ratings")
    if type(items) is not list or not items:
        return None
    ratings = []
    for item in items:
        if type(item) is not dict or item.get("comment", "") != "":
            return None
        step, rating = item.get("step"), item.get("rating")
        duration = item.get("duration_ms")
        if not (
            _plain_int(step, low=1, high=BIGINT_MAX)
            and _plain_int(rating, low=INT32_MIN, high=INT32_MAX)
            and _plain_duration(duration)
        ):
            return None
        ratings.append({"step": step, "rating": rating, "comment": "", "duration_ms": duration})
    request_id = data.get("request_id", "")
    if type(request_id) is not str:
        return None
    request_id = request_id.strip()
    if not (request_id.isascii() and request_id.isprintable()):
        return None
    if len(request_id) > REQUEST_ID_MAX_LENGTH or data.get("rewrite", "") != "":
        return None
    duration = data.get("duration_ms")
    if not _plain_duration(duration):
        return None
    return {"ratings": ratings, "rewrite": "", "duration_ms": duration, "request_id": request_id}


def submit_input_validate(data: Any) -> dict[str, Any]:
    """The validated submit body. Most submits take the hand-written path above: DRF's
    nested validation of a dozen ratings cost more than the submit's queries. Everything
    else goes through ``SubmitInputSerializer`` (the schema's), with its 400 messages;
    ``test_submit_input_fast_path_matches_the_serializer`` keeps the two equal."""
    fast = _submit_input_fast(data)
    if fast is not None:
        return fast
    payload = SubmitInputSerializer(data=data)
    payload.is_valid(raise_exception=True)
    return payload.validated_data


class StepRatingOutputSerializer(serializers.ModelSerializer):
    step = serializers.IntegerField(source="step_id")

    class Meta:
        model = StepRating
        fields = ["step", "rating", "comment"]


class AnnotationOutputSerializer(serializers.ModelSerializer):
    chain = serializers.IntegerField(source="chain_id")
    ratings = serializers.SerializerMethodField()

    class Meta:
        model = Annotation
        fields = ["id", "chain", "created_at", "rewrite", "duration_ms", "request_id", "ratings"]

    @extend_schema_field(StepRatingOutputSerializer(many=True))
    def get_ratings(self, annotation: Annotation) -> Any:
        ratings = annotation.ratings.order_by("step__index")
        return StepRatingOutputSerializer(ratings, many=True).data


class SubmitOutputSerializer(serializers.Serializer):
    annotation = AnnotationOutputSerializer(source="*")


class AssignmentSubmitView(LeanQueueView):
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
        payload, code = self.submit(
            user=request.user, assignment_id=assignment_id, data=submit_input_validate(request.data)
        )
        return Response(payload, status=code)

    def lean(  # type: ignore[override]  # called with the URL's own keyword arguments
        self, request: HttpRequest, key: str, assignment_id: int
    ) -> HttpResponse | None:
        if request.content_type != "application/json":
            return None
        try:
            if int(request.META.get("CONTENT_LENGTH") or 0) > LEAN_BODY_MAX_BYTES:
                return None
            data = _submit_input_fast(orjson.loads(request.body))
        except (ValueError, orjson.JSONDecodeError):
            return None  # DRF explains a malformed body
        if data is None:
            return None  # the serializer validates (and explains) anything unusual
        found = user_for_token(key)
        if found is None or not found[0].is_active:
            return None  # DRF answers 401
        request.user = found[0]
        payload, code = self.submit(user=request.user, assignment_id=assignment_id, data=data)
        return json_response(payload, code)

    @staticmethod
    def submit(*, user: Any, assignment_id: int, data: dict[str, Any]) -> tuple[dict, int]:
        """Submit a validated body; the answer's payload and status code."""
        annotation = assignment_submit(
            assignment_id=assignment_id,
            user=user,
            ratings=ratings_from_payload(data),
            rewrite=data["rewrite"],
            duration_ms=data["duration_ms"],
            request_id=data["request_id"],
        )
        after_submit(annotation)
        # A repeat answers as the first submit did (201, the same body): a client whose
        # answer was lost sees the same answer, whichever of the two reached it.
        return submit_payload(annotation=annotation), status.HTTP_201_CREATED


_created_at_field = serializers.DateTimeField()


def submit_payload(*, annotation: Annotation) -> dict[str, Any]:
    """What ``SubmitOutputSerializer`` gives for ``annotation``, built by hand from the
    rating rows the submit just stored (``rating_rows``, in step order), so a new submit's
    answer needs no query; a repeat (which has none) goes through the serializer.
    ``test_submit_payload_matches_the_serializer`` keeps the two equal."""
    rows = getattr(annotation, "rating_rows", None)
    if rows is None:
        return SubmitOutputSerializer(annotation).data
    return {
        "annotation": {
            "id": annotation.pk,
            "chain": annotation.chain_id,
            "created_at": _created_at_field.to_representation(annotation.created_at),
            "rewrite": annotation.rewrite,
            "duration_ms": annotation.duration_ms,
            "request_id": annotation.request_id,
            "ratings": [
                {"step": row.step_id, "rating": row.rating, "comment": row.comment} for row in rows
            ],
        }
    }


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
        assignment = assignment_renew(assignment_id=assignment_id, user=request_user(request))
        return Response(LeaseOutputSerializer(assignment).data)


# --- skip --------------------------------------------------------------------------------


class SkipInputSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2_000, help_text="Why you skip this chain.")


class SkipOutputSerializer(serializers.ModelSerializer):
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
            assignment_id=assignment_id,
            user=request_user(request),
            reason=payload.validated_data["reason"],
        )
        return Response(SkipOutputSerializer(assignment).data)
