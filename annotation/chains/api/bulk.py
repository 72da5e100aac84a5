"""The data manager's bulk actions over HTTP (leads only; annotators and ML staff 403,
non-members 404). Thin: check access, validate, call one service, serialize.

- `POST /api/v1/projects/{id}/chains/bulk/preview/`: how many chains a selection
  (`chain_ids`) or a filter (`filters`, the list's) holds, how many the action would
  change and why it would leave the rest; nothing is written;
- `POST /api/v1/projects/{id}/chains/bulk/`: do it, with the count the lead confirmed
  (`expected`): 202 with the job, which a worker runs in one transaction;
- `GET /api/v1/projects/{id}/chains/bulk/{bulk_id}/`: follow it (chains read so far,
  then the counts, or why it failed and that nothing changed)."""

from __future__ import annotations

from typing import Any

from django.http import Http404
from django.urls import reverse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from annotation.api.fields import INT32_MAX, IdField
from annotation.api.inputs import InputSerializer
from annotation.api.permissions import LEADS, project_for_request, request_user
from annotation.chains.api.chains import ChainFilterSerializer, chain_filters_from
from annotation.chains.bulk_actions import (
    SELECTION_MAX,
    Selection,
    bulk_action_create,
    bulk_action_preview,
    bulk_actions_reap_stale,
)
from annotation.chains.services import EXTRA_LABELS_MAX
from annotation.models import BulkAction, BulkActionKind, BulkActionStatus, Chain, Project
from annotation.quality.api.review import NOT_A_MEMBER, WRONG_ROLE

BAD_ACTION = OpenApiResponse(
    description="An unknown action, both or neither of `chain_ids` and `filters`, a chain "
    "of another project, a bad filter, `more` out of range, a reviewer who does not "
    "lead the project, or an evaluation set of another project."
)


class BulkInputSerializer(InputSerializer):
    action = serializers.ChoiceField(choices=BulkActionKind.choices)
    chain_ids = serializers.ListField(
        child=IdField(),
        required=False,
        min_length=1,
        max_length=SELECTION_MAX,
        help_text=f"The chains ticked (at most {SELECTION_MAX:,}); or send `filters`.",
    )
    filters = ChainFilterSerializer(
        required=False,
        help_text="Every chain the list's filters let through (`{}`: every chain).",
    )
    more = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=EXTRA_LABELS_MAX,
        help_text="requeue: how many more human passes each chain asks for (1 by default).",
    )
    reviewer = IdField(
        required=False,
        allow_null=True,
        help_text="reviewer: the lead (user id) who is to review the chains; null for nobody.",
    )
    evaluation_set = IdField(
        required=False,
        help_text="evaluation_add, evaluation_remove: the project's evaluation set the chains "
        "go into or come out of.",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("chain_ids" in attrs) == ("filters" in attrs):
            raise serializers.ValidationError(
                {"chain_ids": "Send either `chain_ids` (a selection) or `filters`, not both."}
            )
        return attrs


class BulkCreateInputSerializer(BulkInputSerializer):
    expected = serializers.IntegerField(
        min_value=0,
        max_value=INT32_MAX,
        help_text="The number of chains the lead confirmed (the preview's `changed`).",
    )


def _params(data: dict[str, Any]) -> dict[str, Any]:
    return {key: data[key] for key in ("more", "reviewer", "evaluation_set") if key in data}


def _selection(*, project: Project, data: dict[str, Any]) -> Selection:
    """The selection of a validated body; 400 naming ids that are no chains of it."""
    if "chain_ids" in data:
        ids = tuple(sorted(set(data["chain_ids"])))
        found = set(Chain.objects.filter(project=project, pk__in=ids).values_list("pk", flat=True))
        missing = [chain_id for chain_id in ids if chain_id not in found]
        if missing:
            raise serializers.ValidationError(
                {"chain_ids": f"Not chains of this project: {', '.join(map(str, missing))}."}
            )
        return Selection(chain_ids=ids)
    try:
        filters = chain_filters_from(project=project, data=data["filters"])
    except serializers.ValidationError as error:
        raise serializers.ValidationError({"filters": error.detail}) from None
    return Selection(filters=filters)


class BulkReasonOutputSerializer(serializers.Serializer):
    reason = serializers.CharField()
    count = serializers.IntegerField()


class BulkPreviewOutputSerializer(serializers.Serializer):
    matched = serializers.IntegerField(help_text="Chains the selection or filter holds now.")
    changed = serializers.IntegerField(help_text="Chains the action would change.")
    unchanged = BulkReasonOutputSerializer(
        many=True, help_text="The chains it would leave as they are, by reason."
    )


def _reasons(counts: dict[str, int]) -> list[dict[str, Any]]:
    return [{"reason": reason, "count": count} for reason, count in counts.items()]


class BulkPreviewApi(GenericAPIView):
    serializer_class = BulkInputSerializer
    queryset = Chain.objects.none()

    @extend_schema(
        tags=["chains"],
        operation_id="chains_bulk_preview",
        summary="Count what a bulk action would change, before confirming it (leads only)",
        request=BulkInputSerializer,
        responses={
            200: BulkPreviewOutputSerializer,
            400: BAD_ACTION,
            403: WRONG_ROLE,
            404: NOT_A_MEMBER,
        },
    )
    def post(self, request: Request, project_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id, roles=LEADS)
        body = BulkInputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        preview = bulk_action_preview(
            project=project,
            kind=data["action"],
            params=_params(data),
            selection=_selection(project=project, data=data),
        )
        return Response(
            BulkPreviewOutputSerializer(
                {
                    "matched": preview.matched,
                    "changed": preview.changed,
                    "unchanged": _reasons(preview.unchanged),
                }
            ).data
        )


class BulkActionOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    url = serializers.SerializerMethodField(help_text="Where to follow this job.")
    action = serializers.ChoiceField(source="kind", choices=BulkActionKind.choices)
    status = serializers.ChoiceField(
        choices=BulkActionStatus.choices,
        help_text="queued, running, done, or failed (then nothing was changed).",
    )
    expected = serializers.IntegerField(help_text="The count the lead confirmed.")
    done = serializers.IntegerField(
        help_text="Chains read so far (moves about once a second while running)."
    )
    matched = serializers.IntegerField(help_text="Chains the selection held, once done.")
    changed = serializers.IntegerField(help_text="Chains the action changed, once done.")
    unchanged = serializers.SerializerMethodField(help_text="Chains left as they were, by reason.")
    detail = serializers.CharField(help_text="Why a failed job failed.")
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)

    def get_url(self, job: BulkAction) -> str:
        return reverse("api-chains-bulk-action", args=[job.project_id, job.pk])

    def get_unchanged(self, job: BulkAction) -> list[dict[str, Any]]:
        return _reasons(job.unchanged or {})


class BulkActionListApi(GenericAPIView):
    serializer_class = BulkCreateInputSerializer
    queryset = BulkAction.objects.none()

    @extend_schema(
        tags=["chains"],
        operation_id="chains_bulk_create",
        summary="Requeue, mark or unmark gold, unflag, set a reviewer, or put into or take "
        "out of an evaluation set, many chains (leads only)",
        description="Runs in the background, in one transaction: every chain or none. Each "
        "changed chain's history records it.",
        request=BulkCreateInputSerializer,
        responses={
            202: BulkActionOutputSerializer,
            400: BAD_ACTION,
            403: WRONG_ROLE,
            404: NOT_A_MEMBER,
        },
    )
    def post(self, request: Request, project_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id, roles=LEADS)
        body = BulkCreateInputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        job = bulk_action_create(
            project=project,
            user=request_user(request),
            kind=data["action"],
            params=_params(data),
            selection=_selection(project=project, data=data),
            expected=data["expected"],
        )
        return Response(BulkActionOutputSerializer(job).data, status=status.HTTP_202_ACCEPTED)


class BulkActionApi(GenericAPIView):
    serializer_class = BulkActionOutputSerializer
    queryset = BulkAction.objects.none()

    @extend_schema(
        tags=["chains"],
        operation_id="chains_bulk_retrieve",
        summary="Follow a bulk action (leads only)",
        responses={
            200: BulkActionOutputSerializer,
            403: WRONG_ROLE,
            404: OpenApiResponse(description="No such job in this project, or not a member."),
        },
    )
    def get(self, request: Request, project_id: int, bulk_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id, roles=LEADS)
        bulk_actions_reap_stale(project=project)
        job = BulkAction.objects.filter(project=project, pk=bulk_id).first()
        if job is None:
            raise Http404("No such bulk action in this project.")
        return Response(BulkActionOutputSerializer(job).data)
