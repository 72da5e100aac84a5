"""An annotator's own history over HTTP: thin views over ``annotation.labeling.history``
and the one write, a revision (``annotation.labeling.revisions``).

- `GET /api/v1/projects/{id}/history/` (members): the chains the caller submitted in the
  project, newest first, a keyset page at a time (``cursor``, ``next_cursor``);
- `GET /api/v1/projects/{id}/history/{annotation_id}/` (members): one of them reopened,
  with the caller's own ratings, comments and rewrite, and whether it is still open to
  change (and why not);
- `POST /api/v1/projects/{id}/history/{annotation_id}/revise/` (the annotation's own
  annotator): a new revision of it (``annotation.labeling.revisions``), 201 with the
  revision reopened; 409 once it is no longer open to change, with the reason.

A lead may name any member with ``?annotator=<user id>`` and reopen any member's
annotation; anyone else who names another member gets 403, and another person's
annotation is a 404. Non-members get 404, as everywhere (invariant 6). Nothing here says
whether a chain is gold (``tests/annotation/labeling/test_gold_leakage.py``): chain and step ids
are public ids, as the workspace showed them (``annotation.public_ids``)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.access import membership_role
from annotation.api.fields import INT32_MAX, CursorField, IdField, PublicIdField
from annotation.api.inputs import InputSerializer
from annotation.api.permissions import project_for_request, request_user
from annotation.labeling.api.submit_input import RatingInputSerializer, ratings_from_payload
from annotation.labeling.history import (
    HISTORY_PAGE_SIZE,
    HISTORY_PAGE_SIZE_MAX,
    HistoryChain,
    HistoryStep,
    annotator_history_chain,
    annotator_history_page,
    history_annotator_resolve,
    own_pass_chain_id,
)
from annotation.labeling.revisions import annotation_revise
from annotation.models import Role
from annotation.public_ids import CHAIN_IDS, PUBLIC_ID_MAX, STEP_IDS

NOT_FOUND = OpenApiResponse(
    description="No such project, or not a member; for a lead's ?annotator=, not a member."
)


class HistoryQuerySerializer(serializers.Serializer):
    annotator = IdField(
        required=False,
        help_text="Whose history: a member's user id (leads only); your own when left out.",
    )
    cursor = CursorField(
        required=False,
        help_text="The next_cursor of the previous page: the entries after it (older).",
    )
    limit = serializers.IntegerField(
        required=False,
        default=HISTORY_PAGE_SIZE,
        min_value=1,
        max_value=HISTORY_PAGE_SIZE_MAX,
        help_text="Entries per page.",
    )


class HistoryEntryOutputSerializer(serializers.Serializer):
    annotation = serializers.IntegerField(source="annotation_id")
    chain = PublicIdField(CHAIN_IDS, per_viewer=True, source="chain_id")
    submitted_at = serializers.DateTimeField()
    problem = serializers.CharField(
        source="problem_line", help_text="The problem's first line (cut at 200 characters)."
    )
    step_count = serializers.IntegerField(help_text="Steps in the chain.")
    steps_rated = serializers.IntegerField(help_text="Steps you rated.")
    correct = serializers.IntegerField(help_text="Steps you rated +1.")
    ambiguous = serializers.IntegerField(help_text="Steps you rated 0.")
    incorrect = serializers.IntegerField(help_text="Steps you rated −1.")
    first_error = serializers.IntegerField(
        allow_null=True, help_text="The number (from 1) of the first step you rated −1."
    )
    comments = serializers.IntegerField(help_text="Steps you commented.")
    rewritten = serializers.BooleanField(help_text="Whether you wrote a corrected step.")
    revised = serializers.BooleanField(
        help_text="Whether you revised the chain after submitting it (this is the newest "
        "revision; submitted_at is when it was made)."
    )


class HistoryAnnotatorOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="annotator_id")
    username = serializers.CharField(source="annotator_username")


class HistoryPageOutputSerializer(serializers.Serializer):
    annotator = HistoryAnnotatorOutputSerializer(source="*")
    results = HistoryEntryOutputSerializer(source="entries", many=True)
    next_cursor = serializers.CharField(
        source="next_before",
        allow_null=True,
        help_text="Pass as ?cursor= for the next (older) page; null on the last page.",
    )


class HistoryView(APIView):
    @extend_schema(
        tags=["history"],
        operation_id="projects_history_list",
        summary="The chains you submitted in this project, newest first",
        description="A keyset page: pass next_cursor as ?cursor= for older entries (a cursor "
        "stays valid while new chains are submitted). Gold chains are listed like any other.",
        parameters=[HistoryQuerySerializer],
        responses={
            200: HistoryPageOutputSerializer,
            400: OpenApiResponse(description="A bad annotator, cursor or limit."),
            403: OpenApiResponse(
                description="?annotator= names someone else and you do not lead the project."
            ),
            404: NOT_FOUND,
        },
    )
    def get(self, request: Request, project_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id)
        query = HistoryQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        annotator = history_annotator_resolve(
            project=project,
            user=request_user(request),
            annotator_id=query.validated_data.get("annotator"),
        )
        page = annotator_history_page(
            project=project,
            annotator=annotator,
            before=query.validated_data.get("cursor"),
            limit=query.validated_data["limit"],
        )
        # Ids as the annotator whose history it is read them (a lead reading a member's).
        return Response(
            HistoryPageOutputSerializer(page, context={"viewer": page.annotator_id}).data
        )


class HistoryStepOutputSerializer(serializers.Serializer):
    id = serializers.SerializerMethodField(
        help_text="The step's public id, as the workspace showed it."
    )
    index = serializers.IntegerField()
    text = serializers.CharField()
    rating = serializers.IntegerField(
        allow_null=True, help_text="Your rating, −1, 0 or 1; null where you gave none."
    )
    comment = serializers.CharField(allow_blank=True)

    @extend_schema_field(serializers.IntegerField(min_value=1, max_value=PUBLIC_ID_MAX))
    def get_id(self, step: HistoryStep) -> int:
        return STEP_IDS.show(self.context["chain_id"], step.index, viewer=self.context["viewer"])


class HistoryChainOutputSerializer(serializers.Serializer):
    annotation = serializers.IntegerField(source="annotation_id")
    annotator = HistoryAnnotatorOutputSerializer(source="*")
    submitted_at = serializers.DateTimeField()
    duration_ms = serializers.IntegerField(allow_null=True)
    labeling_mode = serializers.CharField()
    chain = PublicIdField(CHAIN_IDS, per_viewer=True, source="chain_id")
    problem = serializers.CharField(source="problem_text")
    reference_answer = serializers.CharField(
        allow_null=True, help_text="Null unless the project shows reference answers."
    )
    final_answer = serializers.CharField(allow_blank=True)
    steps = HistoryStepOutputSerializer(many=True)
    rewrite = serializers.CharField(
        allow_blank=True, help_text="Your corrected text of the first step you rated −1."
    )
    first_error = serializers.IntegerField(
        allow_null=True, help_text="The number (from 1) of the first step you rated −1."
    )
    supersedes = serializers.IntegerField(
        source="supersedes_id",
        allow_null=True,
        help_text="The earlier revision this one replaced; null for the pass as submitted.",
    )
    superseded_by = serializers.IntegerField(
        source="superseded_by_id",
        allow_null=True,
        help_text="The newer revision that replaced this one; null for the newest.",
    )
    can_revise = serializers.BooleanField(
        help_text="Whether you may revise it now (POST .../revise/)."
    )
    closed_reason = serializers.CharField(
        allow_blank=True,
        help_text="Why it can no longer be changed; empty while it can.",
    )


def history_chain_data(chain: HistoryChain) -> Any:
    """A reopened pass as the answer shows it, its ids as its annotator read them."""
    context = {"chain_id": chain.chain_id, "viewer": chain.annotator_id}
    return HistoryChainOutputSerializer(chain, context=context).data


class HistoryChainView(APIView):
    @extend_schema(
        tags=["history"],
        operation_id="projects_history_retrieve",
        summary="One chain you submitted, reopened with your ratings",
        responses={
            200: HistoryChainOutputSerializer,
            404: OpenApiResponse(
                description="No such project or annotation, or not yours (a lead reads any "
                "member's)."
            ),
        },
    )
    def get(self, request: Request, project_id: int, annotation_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id)
        user = request_user(request)
        chain = annotator_history_chain(
            project=project,
            user=user,
            annotation_id=annotation_id,
            lead=membership_role(user=user, project=project) == Role.LEAD,
        )
        return Response(history_chain_data(chain))


class ReviseInputSerializer(InputSerializer):
    ratings = RatingInputSerializer(
        many=True,
        allow_empty=False,
        help_text="The whole pass again, steps by the ids this chain was shown with.",
    )
    rewrite = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=20_000,
        help_text="The corrected text of the first incorrect step (needs a -1 rating).",
    )
    rewrite_moved = serializers.BooleanField(
        required=False,
        default=False,
        help_text="The pass's earlier rewrite, sent unchanged, now belongs to the new first "
        "-1: without this a revision that moves the first -1 and keeps the text answers 400, "
        "so a rewrite never lands on a step it was not written for.",
    )
    duration_ms = serializers.IntegerField(
        required=False, allow_null=True, default=None, min_value=0, max_value=INT32_MAX
    )


class HistoryReviseView(APIView):
    @extend_schema(
        tags=["history"],
        operation_id="projects_history_revise",
        summary="Revise a chain you submitted, while it is open to change",
        description="Records a new revision of your pass, as a submit would (the same "
        "ratings rules); the earlier one is kept. Name the newest revision: an earlier one "
        "answers 409.",
        request=ReviseInputSerializer,
        responses={
            201: HistoryChainOutputSerializer,
            400: OpenApiResponse(description="Ratings that do not fit the chain or the mode."),
            404: OpenApiResponse(
                description="No such project or annotation, or not yours (leads too)."
            ),
            409: OpenApiResponse(
                description="No longer open to change: detail says why (code revision_closed)."
            ),
        },
    )
    def post(self, request: Request, project_id: int, annotation_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id)
        user = request_user(request)
        # Whose pass it is comes first: anyone else gets 404 whatever the body.
        own_pass_chain_id(project=project, user=user, annotation_id=annotation_id)
        body = ReviseInputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        revision = annotation_revise(
            project=project,
            user=user,
            annotation_id=annotation_id,
            ratings=ratings_from_payload(body.validated_data),
            rewrite=body.validated_data["rewrite"],
            duration_ms=body.validated_data["duration_ms"],
            public_step_ids=True,
            rewrite_moved=body.validated_data["rewrite_moved"],
        )
        chain = annotator_history_chain(project=project, user=user, annotation_id=revision.pk)
        return Response(
            history_chain_data(chain),
            status=status.HTTP_201_CREATED,
        )
