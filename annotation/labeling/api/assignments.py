"""The labeling queue over HTTP: next, prefetch, submit, renew, skip.

Views are thin: check access, call one service from ``annotation.labeling.queue``,
serialize the result. Service errors map to status codes in ``api.errors``: ValidationError
400, someone else's (or a missing) lease 404, a lost or closed lease 409, a busy queue 503."""

from __future__ import annotations

from typing import Any, cast

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
from rest_framework.fields import empty
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.api.authentication import token_key
from annotation.api.errors import api_exception_handler
from annotation.api.fields import INT32_MAX, IdField, PublicIdField, RatingField
from annotation.api.inputs import InputSerializer, unknown_field_errors
from annotation.api.permissions import request_user
from annotation.chains.events import chain_finished_notify
from annotation.labeling.queue.access import (
    project_get_for_labeling,
    user_and_project_for_labeling,
    user_for_writing_token,
)
from annotation.labeling.queue.claim import lease_next, lease_prefetch
from annotation.labeling.queue.leases import Lease, assignment_renew, assignment_skip
from annotation.labeling.queue.prelabels import shown_verdicts
from annotation.labeling.queue.submit import (
    REQUEST_ID_MAX_LENGTH,
    RatingInput,
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


# --- two doors, one answer -----------------------------------------------------------------

# Request bodies above this go through DRF, which enforces the upload limits itself.
TOKEN_DOOR_BODY_MAX_BYTES = 1024 * 1024


def _accepts_json(request: HttpRequest) -> bool:
    return request.META.get("HTTP_ACCEPT", "") in ("", "*/*", "application/json")


def json_response(payload: Any, status_code: int = 200) -> HttpResponse:
    """What DRF's JSON renderer would send for ``payload``: compact UTF-8 JSON (none for
    a 204, whose answer is empty)."""
    if status_code == status.HTTP_204_NO_CONTENT:
        nothing = HttpResponse(status=status_code)
        del nothing["Content-Type"]  # as DRF sends an empty answer
        return nothing
    return HttpResponse(orjson.dumps(payload), status=status_code, content_type="application/json")


class QueueView(APIView):
    """An APIView for the queue's hottest requests (next, submit), with two doors to one
    answer. Each view writes its answer once, as a function of the caller and the input
    (``next_answer``, ``submit_answer``). DRF's door (``post``) authenticates, checks
    permissions, negotiates and parses as every other endpoint does; the schema and the
    docs describe it. The token door (``token_post``) takes the common case, a POST with
    an API token asking for JSON, past DRF's request cycle, whose request wrapper,
    negotiation, parsers, authenticator and permission loop cost more than the claim
    itself: it looks the token up (with the project, for next) in one query and gives
    the same answer, errors rendered by the same exception handler. It returns None,
    before doing anything, for what it does not take (an unknown token, a malformed or
    oversized body), and DRF's door answers that as it always did."""

    def token_post(self, request: HttpRequest, key: str, **kwargs: Any) -> HttpResponse | None:
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
                        response = cls(**initkwargs).token_post(request, key, **kwargs)
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


def _json_body(request: HttpRequest) -> Any | None:
    """The token door's body: parsed JSON, or None for what DRF's parsers should answer
    (another content type, an oversized or malformed body: DRF explains it)."""
    if request.content_type != "application/json":
        return None
    try:
        if int(request.META.get("CONTENT_LENGTH") or 0) > TOKEN_DOOR_BODY_MAX_BYTES:
            return None
        return orjson.loads(request.body)
    except (ValueError, orjson.JSONDecodeError):
        return None


# --- next --------------------------------------------------------------------------------
# The serializers below describe the answers in the schema; ``lease_payload`` builds them.


def assignment_pk(public_id: int) -> int:
    """The row id of the assignment an annotator names by its public id
    (``annotation.public_ids``); Assignment.DoesNotExist (a 404) for a number that is
    none, as for a lease that is not theirs."""
    pk = ASSIGNMENT_IDS.read(public_id)
    if pk is None:
        raise Assignment.DoesNotExist("No such assignment.")
    return pk


class LeaseOutputSerializer(serializers.ModelSerializer):
    id = PublicIdField(ASSIGNMENT_IDS)

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

    id = PublicIdField(CHAIN_IDS)
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
    cost more than the claim itself. Ids are public ids (``annotation.public_ids``). The
    pre-labels are those the lease stored when it was taken (``queue.prelabels``)."""
    chain = lease.chain
    problem = {"text": chain.problem_text}
    if project.show_reference_answer:
        problem["reference_answer"] = chain.reference_answer
    step_base = STEP_IDS.base(lease.assignment.chain_id)
    verdicts = shown_verdicts(lease.assignment)
    return {
        "assignment": {
            "id": ASSIGNMENT_IDS.show(lease.assignment.pk),
            "expires_at": _expires_at_field.to_representation(lease.assignment.expires_at),
        },
        "chain": {
            "id": CHAIN_IDS.show(lease.assignment.chain_id),
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


class RatingInputSerializer(InputSerializer):
    step = IdField(help_text="The id of a step of the leased chain, as next showed it.")
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
        max_value=INT32_MAX,
        help_text="How long the step held the annotator's focus.",
    )


class SubmitInputSerializer(InputSerializer):
    ratings = RatingInputSerializer(many=True, allow_empty=False)
    rewrite = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=20_000,
        help_text="The corrected text of the first incorrect step (needs a -1 rating).",
    )
    duration_ms = serializers.IntegerField(
        required=False, allow_null=True, default=None, min_value=0, max_value=INT32_MAX
    )
    request_id = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=REQUEST_ID_MAX_LENGTH,
        help_text="A client-chosen id; repeating a submit with it changes nothing.",
    )


# The serializers' own fields, bound once: ``submit_input_validate`` runs them.
_SUBMIT_FIELDS = SubmitInputSerializer().fields
_RATINGS_LIST = cast(serializers.ListSerializer, _SUBMIT_FIELDS["ratings"])
_RATING_ITEM = RatingInputSerializer()
_RATING_FIELDS = _RATING_ITEM.fields


def _field_value(field: serializers.Field, data: dict, errors: dict[str, Any]) -> Any:
    """What ``field`` takes from ``data``, as its serializer would. Three common cases are
    taken without the field's conversion and validator calls, with the same outcome at a
    tenth of the cost: a plain int within an integer field's bounds, an empty string for a
    field that allows blanks, and an absent optional field (its default)."""
    value = data.get(field.field_name, empty)
    if type(value) is int:
        if (
            isinstance(field, serializers.IntegerField)
            and (field.min_value is None or value >= field.min_value)
            and (field.max_value is None or value <= field.max_value)
        ):
            return value
    elif value == "" and type(value) is str:
        if getattr(field, "allow_blank", False):
            return value
    elif (
        value is empty
        and not field.required
        and field.default is not empty
        and not callable(field.default)
    ):
        return field.default
    try:
        return field.run_validation(value)
    except serializers.ValidationError as exc:
        errors[field.field_name or ""] = exc.detail
        return None


def _fields_validate(
    fields: Any, data: dict, known: Any = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``data``'s values and errors for ``fields``; a key of ``data`` not in ``known``
    (default: ``fields``) is an error too, as ``InputSerializer`` makes it."""
    errors: dict[str, Any] = {}
    values = {name: _field_value(field, data, errors) for name, field in fields.items()}
    if not data.keys() <= fields.keys():
        errors.update(unknown_field_errors(data, fields if known is None else known))
    return values, errors


def submit_input_validate(data: Any) -> dict[str, Any]:
    """The validated submit body: ``SubmitInputSerializer``'s fields and messages (a 400
    names each field, and each rating by its place in the list), run without building a
    serializer per request and per rating, which cost more than the submit's queries. The
    list's own checks (a list, not empty), a rating that is not an object and a body that
    is not a JSON object (a form's fields, say) are left to DRF's serializers."""
    if type(data) is not dict:
        serializer = SubmitInputSerializer(data=data)
        serializer.is_valid(raise_exception=True)
        return serializer.validated_data
    ratings: list[dict[str, Any]] = []
    rating_errors: Any = {}  # by place in the list, as DRF's list reports them
    items = data.get("ratings", empty)
    if type(items) is not list or not items:
        try:
            _RATINGS_LIST.run_validation(items)  # raises DRF's message for the list
        except serializers.ValidationError as exc:
            rating_errors = exc.detail
        items = []
    for index, item in enumerate(items):
        if type(item) is dict:
            rating, errors = _fields_validate(_RATING_FIELDS, item)
        else:
            rating, errors = {}, {}
            try:
                _RATING_ITEM.run_validation(item)
            except serializers.ValidationError as exc:
                errors = exc.detail  # type: ignore[assignment]  # DRF's "not an object"
        ratings.append(rating)
        if errors:
            rating_errors[index] = errors
    other = {name: field for name, field in _SUBMIT_FIELDS.items() if name != "ratings"}
    validated, errors = _fields_validate(other, data, _SUBMIT_FIELDS)
    if rating_errors:
        errors = {"ratings": rating_errors, **errors}
    if errors:
        raise serializers.ValidationError(errors)
    return {"ratings": ratings, **validated}


def ratings_from_payload(data: dict[str, Any]) -> list[RatingInput]:
    """The service's rating inputs from a validated submit body: steps named by their
    public ids, which the service reads back against the leased chain's steps
    (``public_step_ids``)."""
    return [
        RatingInput(
            step_id=r["step"],
            rating=int(r["rating"]),
            comment=r["comment"],
            duration_ms=r["duration_ms"],
        )
        for r in data["ratings"]
    ]


def after_submit(submitted: Submitted) -> None:
    """What every submit endpoint does once a new annotation is recorded."""
    if submitted.created and submitted.annotation.chain.is_finished:
        # Auto-retraining counts finished chains (the training app's hook); a worker
        # checks, never this request.
        chain_finished_notify(project_id=submitted.annotation.chain.project_id)


class StepRatingOutputSerializer(serializers.ModelSerializer):
    step = serializers.SerializerMethodField(help_text="The step's public id.")

    @extend_schema_field(serializers.IntegerField(min_value=1, max_value=PUBLIC_ID_MAX))
    def get_step(self, rating: StepRating) -> int:
        return STEP_IDS.of(rating.step)

    class Meta:
        model = StepRating
        fields = ["step", "rating", "comment"]


class AnnotationOutputSerializer(serializers.ModelSerializer):
    chain = PublicIdField(CHAIN_IDS, source="chain_id")
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
        "chain": CHAIN_IDS.show(annotation.chain_id),
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
        data = _json_body(request)
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
    id = PublicIdField(ASSIGNMENT_IDS)

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
