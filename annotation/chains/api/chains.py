"""The data manager over HTTP (leads only; annotators 403, non-members 404). Thin: check
access, validate, call one selector or service, serialize.

- `GET /api/v1/projects/{id}/chains/`: one page of the project's chains, filtered,
  searched and sorted by any column shown (`sort`, `-` first for descending); `cursor`
  (the previous page's `next_cursor`) walks on (keyset paging; `after`, an id, in the id
  order);
- `GET /api/v1/chains/{id}/`: one chain with its status, steps, the PRM's step scores and
  every lease with its skip or flag reason (its labels: `chains/{id}/labels/`);
- `POST /api/v1/chains/{id}/requeue/`: ask for more human passes on a chain;
- `POST /api/v1/chains/{id}/reviewer/`: name the lead who is to review it.

Unflagging (`chains/{id}/unflag/`) and marking gold (`projects/{id}/gold/mark/`) have
their own endpoints, which the chain page calls."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from annotation.api.fields import CursorField, IdField
from annotation.api.inputs import InputSerializer
from annotation.api.permissions import LEADS, project_for_request, request_user
from annotation.chains.order import SORTS, ChainCursor, ChainOrder
from annotation.chains.selectors import (
    EVENTS_SHOWN,
    PAGE_SIZE_MAX,
    ChainFilters,
    ChainStatus,
    chain_detail,
    chain_list,
    chain_order_phases,
)
from annotation.chains.services import EXTRA_LABELS_MAX, chain_requeue, chains_reviewer_set
from annotation.models import Chain, ChainEventKind, ChainRouting, Membership, Project
from annotation.quality.api.review import NOT_A_MEMBER, WRONG_ROLE, chain_for_lead

# Where routing sent a chain (issue 23): the four rules; "" (people, as usual) is no filter.
ROUTED = [value for value in ChainRouting.values if value]
ROUTING_HELP = (
    "Where routing sent it: agreed (machine-agreed, out of the queue), spot_check (agreed, "
    'sent to a person), disagreed (people first), second_look; "" none.'
)

BAD_FILTER = OpenApiResponse(
    description="A filter out of range, an unknown status or sort, or a cursor of another sort."
)


class ChainFilterSerializer(serializers.Serializer):
    """The list's filters; a bulk action on a filter takes the same (``filters``)."""

    status = serializers.ListField(
        child=serializers.ChoiceField(choices=ChainStatus.ALL),
        required=False,
        default=list,
        help_text="Repeat for several (any of them): " + ", ".join(ChainStatus.ALL) + ".",
    )
    annotator = IdField(required=False, help_text="Only chains this member (user id) labeled.")
    reviewer = IdField(
        required=False, help_text="Only chains this lead (user id) is named to review."
    )
    max_agreement = serializers.FloatField(
        required=False,
        min_value=0.0,
        max_value=1.0,
        help_text="Only chains two or more people labeled whose share of undisputed steps "
        "is at most this.",
    )
    min_score = serializers.FloatField(required=False, min_value=0.0, max_value=1.0)
    max_score = serializers.FloatField(
        required=False,
        min_value=0.0,
        max_value=1.0,
        help_text="PRM score bounds: the least step P(correct) in the newest scoring run.",
    )
    min_uncertainty = serializers.FloatField(required=False, min_value=0.0, max_value=1.0)
    max_uncertainty = serializers.FloatField(
        required=False,
        min_value=0.0,
        max_value=1.0,
        help_text="PRM uncertainty bounds: 1 - |2p - 1| at the least sure step.",
    )
    q = serializers.CharField(
        required=False,
        default="",
        allow_blank=True,
        max_length=200,
        help_text="Words in the problem or a step.",
    )
    machines_disagree = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Only chains on which two machine sources name different first errors.",
    )
    machines_vs_people = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Only chains on which a machine source names another first error than "
        "a person's current pass.",
    )
    routing = serializers.ListField(
        child=serializers.ChoiceField(choices=ROUTED),
        required=False,
        default=list,
        help_text="Repeat for several (any of them): where routing sent the chain, "
        + ", ".join(ROUTED)
        + ".",
    )
    in_evaluation_set = serializers.BooleanField(
        required=False,
        allow_null=True,
        default=None,
        help_text="true: only chains held out in an evaluation set (never leased, never "
        "trained on); false: only chains in none; absent: either.",
    )


def chain_filters_from(*, project: Project, data: dict[str, Any]) -> ChainFilters:
    """The ``ChainFilters`` of validated ``ChainFilterSerializer`` data; 400 for an
    annotator or reviewer who is not a member of ``project``."""
    for field in ("annotator", "reviewer"):
        user_id = data.get(field)
        if (
            user_id is not None
            and not Membership.objects.filter(project=project, user_id=user_id).exists()
        ):
            raise serializers.ValidationError({field: "Not a member of this project."})
    return ChainFilters(
        statuses=tuple(data.get("status", ())),
        annotator=data.get("annotator"),
        reviewer=data.get("reviewer"),
        max_agreement=data.get("max_agreement"),
        min_score=data.get("min_score"),
        max_score=data.get("max_score"),
        min_uncertainty=data.get("min_uncertainty"),
        max_uncertainty=data.get("max_uncertainty"),
        search=data.get("q", ""),
        machines_disagree=data.get("machines_disagree", False),
        machines_vs_people=data.get("machines_vs_people", False),
        routings=tuple(data.get("routing", ())),
        in_evaluation_set=data.get("in_evaluation_set"),
    )


class ChainListFilterSerializer(ChainFilterSerializer):
    sort = serializers.ChoiceField(
        choices=SORTS,
        required=False,
        default="id",
        help_text="The column to sort by, `-` first for descending; ties go by id. Chains "
        "without a value (agreement under two passes, no PRM score) come last either way.",
    )
    cursor = serializers.CharField(
        required=False,
        max_length=200,
        help_text="The previous page's `next_cursor` (made for the same `sort`).",
    )
    after = CursorField(
        required=False, help_text="The previous page's `next_after` (the id order only)."
    )
    limit = serializers.IntegerField(required=False, default=50, min_value=1, max_value=200)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        order = ChainOrder.parse(attrs["sort"])
        if "after" in attrs and (order.key != "id" or "cursor" in attrs):
            raise serializers.ValidationError(
                {"after": "`after` pages the id order only; pass `cursor` instead."}
            )
        attrs["order"] = order
        return attrs


class ChainRowOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="chain_id")
    problem = serializers.CharField(help_text="The problem's first 200 characters.")
    step_count = serializers.IntegerField()
    finished_count = serializers.IntegerField(help_text="Finished human passes.")
    needed = serializers.IntegerField(help_text="Passes the chain needs: overlap + extra.")
    status = serializers.ChoiceField(choices=ChainStatus.ALL, help_text="Its main status.")
    is_flagged = serializers.BooleanField()
    is_gold = serializers.BooleanField()
    skipped = serializers.BooleanField(help_text="Someone skipped it.")
    leased = serializers.BooleanField(help_text="Someone holds a live lease on it.")
    agreement = serializers.FloatField(
        allow_null=True, help_text="Share of undisputed steps; null under two passes."
    )
    priority = serializers.FloatField(help_text="Its place in the queue (higher first).")
    prm_score = serializers.FloatField(allow_null=True)
    prm_uncertainty = serializers.FloatField(allow_null=True)
    reviewer = serializers.CharField(
        allow_null=True, help_text="The lead named to review it (username); null if none."
    )
    created_at = serializers.DateTimeField()
    routing = serializers.ChoiceField(choices=ChainRouting.values, help_text=ROUTING_HELP)
    machine_first_errors = serializers.DictField(
        child=serializers.IntegerField(),
        help_text="By machine source: the first step it rates -1 (index), -1 for none; "
        "a source without a verdict on the chain is absent.",
    )
    evaluation_set = serializers.CharField(
        allow_null=True,
        help_text="The evaluation set it is held out in (its name); null if none.",
    )


class ChainPageOutputSerializer(serializers.Serializer):
    results = ChainRowOutputSerializer(many=True, source="rows")
    next_cursor = serializers.SerializerMethodField(
        help_text="Pass as `cursor` (with the same `sort`) for the next page; null on the last."
    )
    next_after = serializers.IntegerField(
        allow_null=True,
        help_text="In the id order, pass as `after` for the next page; null on the last "
        "page and in the other orders.",
    )

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_next_cursor(self, page: Any) -> str | None:
        cursor = page.next_cursor
        return None if cursor is None else cursor.encode(self.context["order"])


class ChainListApi(GenericAPIView):
    serializer_class = ChainPageOutputSerializer
    queryset = Chain.objects.none()

    @extend_schema(
        tags=["chains"],
        operation_id="projects_chains_list",
        summary="The project's chains, filtered and searched, a page at a time (leads only)",
        parameters=[ChainListFilterSerializer],
        responses={
            200: ChainPageOutputSerializer,
            400: BAD_FILTER,
            403: WRONG_ROLE,
            404: NOT_A_MEMBER,
        },
    )
    def get(self, request: Request, project_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id, roles=LEADS)
        query = ChainListFilterSerializer(
            data={
                **request.query_params.dict(),
                "status": request.query_params.getlist("status"),
                "routing": request.query_params.getlist("routing"),
            }
        )
        query.is_valid(raise_exception=True)
        data = query.validated_data
        filters = chain_filters_from(project=project, data=data)
        order = data["order"]
        cursor = None
        if "cursor" in data:
            phases = len(chain_order_phases(project=project, order=order))
            try:
                cursor = ChainCursor.decode(data["cursor"], order=order, phases=phases)
            except ValueError as error:
                raise serializers.ValidationError({"cursor": str(error)}) from None
        page = chain_list(
            project=project,
            filters=filters,
            order=order,
            cursor=cursor,
            after=data.get("after"),
            limit=min(data["limit"], PAGE_SIZE_MAX),
        )
        return Response(ChainPageOutputSerializer(page, context={"order": order}).data)


class ChainLeaseOutputSerializer(serializers.Serializer):
    assignment = serializers.IntegerField(source="assignment_id")
    annotator = serializers.CharField()
    status = serializers.CharField(help_text="active, submitted, skipped or expired")
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    reason = serializers.CharField(help_text="A skip's reason (a flag's starts 'flag:').")


class ChainEventOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="event_id")
    kind = serializers.ChoiceField(choices=ChainEventKind.choices)
    summary = serializers.CharField(source="label", help_text="The kind, in words.")
    actor = serializers.CharField(allow_null=True, help_text="The lead who did it.")
    detail = serializers.DictField(
        help_text="Its inputs and outcome: requeued {more, needed}; marked gold "
        "{answer_key}; flag cleared {flag_reason}; reviewer set {reviewer}; put into or "
        "taken out of an evaluation set {evaluation_set, name}."
    )
    bulk_action = serializers.IntegerField(
        source="bulk_action_id", allow_null=True, help_text="The bulk action it was part of."
    )
    created_at = serializers.DateTimeField()


class ChainStepOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="pk")
    index = serializers.IntegerField()
    text = serializers.CharField()


class ChainDetailOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="chain.pk")
    project = serializers.IntegerField(source="chain.project_id")
    problem = serializers.CharField(source="chain.problem.text")
    final_answer = serializers.CharField(source="chain.final_answer")
    generator = serializers.CharField(source="chain.generator")
    status = serializers.ChoiceField(choices=ChainStatus.ALL)
    routing = serializers.ChoiceField(
        source="chain.routing", choices=ChainRouting.values, help_text=ROUTING_HELP
    )
    finished_count = serializers.IntegerField(source="chain.finished_count")
    needed = serializers.IntegerField()
    is_finished = serializers.BooleanField(source="chain.is_finished")
    is_flagged = serializers.BooleanField(source="chain.is_flagged")
    is_gold = serializers.BooleanField(source="chain.is_gold")
    flagged_by = serializers.CharField(
        source="chain.flagged_by.username", allow_null=True, default=None
    )
    flag_reason = serializers.CharField(source="chain.flag_reason")
    flagged_at = serializers.DateTimeField(source="chain.flagged_at", allow_null=True)
    flag_cleared_by = serializers.CharField(
        source="chain.flag_cleared_by.username", allow_null=True, default=None
    )
    flag_cleared_at = serializers.DateTimeField(source="chain.flag_cleared_at", allow_null=True)
    steps = ChainStepOutputSerializer(many=True)
    step_scores = serializers.ListField(
        child=serializers.FloatField(),
        allow_null=True,
        help_text="The PRM's P(correct) per step in its newest scoring run; null if unscored.",
    )
    leases = ChainLeaseOutputSerializer(many=True, help_text="Every lease, oldest first.")
    reviewer = serializers.CharField(
        allow_null=True, help_text="The lead named to review it (username); null if none."
    )
    events = ChainEventOutputSerializer(
        many=True,
        help_text=f"What leads did to the chain, newest first (the newest {EVENTS_SHOWN}).",
    )
    event_count = serializers.IntegerField(help_text="How many actions there were in all.")


class ChainDetailApi(GenericAPIView):
    serializer_class = ChainDetailOutputSerializer
    queryset = Chain.objects.none()

    @extend_schema(
        tags=["chains"],
        operation_id="chains_retrieve",
        summary="One chain: status, steps, PRM step scores, leases, skips, flag (leads only)",
        responses={200: ChainDetailOutputSerializer, 403: WRONG_ROLE, 404: NOT_A_MEMBER},
    )
    def get(self, request: Request, chain_id: int) -> Response:
        chain = chain_for_lead(request=request, chain_id=chain_id)
        return Response(ChainDetailOutputSerializer(chain_detail(chain=chain)).data)


class ChainRequeueInputSerializer(InputSerializer):
    more = serializers.IntegerField(
        required=False,
        default=1,
        min_value=1,
        max_value=EXTRA_LABELS_MAX,
        help_text="How many more human passes to ask for.",
    )


class ChainRequeueApi(GenericAPIView):
    serializer_class = ChainRequeueInputSerializer
    queryset = Chain.objects.none()

    @extend_schema(
        tags=["chains"],
        operation_id="chains_requeue",
        summary="Ask for more human passes on a chain (leads only)",
        request=ChainRequeueInputSerializer,
        responses={
            200: ChainDetailOutputSerializer,
            400: OpenApiResponse(description="A gold chain, or `more` out of range."),
            403: WRONG_ROLE,
            404: NOT_A_MEMBER,
        },
    )
    def post(self, request: Request, chain_id: int) -> Response:
        chain = chain_for_lead(request=request, chain_id=chain_id)
        data = ChainRequeueInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        chain_requeue(chain=chain, more=data.validated_data["more"], actor=request_user(request))
        chain.refresh_from_db(fields=["extra_labels", "is_finished", "finished_count"])
        return Response(ChainDetailOutputSerializer(chain_detail(chain=chain)).data)


class ChainReviewerInputSerializer(InputSerializer):
    reviewer = IdField(
        allow_null=True, help_text="The lead (user id) who is to review it; null for nobody."
    )


class ChainReviewerApi(GenericAPIView):
    serializer_class = ChainReviewerInputSerializer
    queryset = Chain.objects.none()

    @extend_schema(
        tags=["chains"],
        operation_id="chains_reviewer_set",
        summary="Name the lead who is to review a chain (leads only)",
        request=ChainReviewerInputSerializer,
        responses={
            200: ChainDetailOutputSerializer,
            400: OpenApiResponse(description="The reviewer does not lead this project."),
            403: WRONG_ROLE,
            404: NOT_A_MEMBER,
        },
    )
    def post(self, request: Request, chain_id: int) -> Response:
        chain = chain_for_lead(request=request, chain_id=chain_id)
        data = ChainReviewerInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        reviewer_id = data.validated_data["reviewer"]
        reviewer = None
        if reviewer_id is not None:
            reviewer = get_user_model().objects.filter(pk=reviewer_id).first()
            if reviewer is None:
                raise serializers.ValidationError(
                    {"reviewer": "A reviewer is a lead of this project."}
                )
        chains_reviewer_set(
            project=chain.project,
            chain_ids=[chain.pk],
            reviewer=reviewer,
            actor=request_user(request),
        )
        return Response(ChainDetailOutputSerializer(chain_detail(chain=chain)).data)
