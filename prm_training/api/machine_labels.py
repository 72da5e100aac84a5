"""Machine-label runs over HTTP (issue 23): sampling chains from problems, Monte-Carlo
rollouts and a judge, on the GPU workers (``services.machine_labels``). ML staff and
leads start, follow, cancel and retry them; thin, as the rest of the PRM API."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.api.fields import CursorField, IdField
from annotation.api.inputs import InputSerializer
from annotation.models import Project
from prm_training.api.runs import (
    RUN_LIFECYCLE_FIELDS,
    RUN_RESPONSES,
    ProjectRunsApi,
    RunDetailApi,
    RunOutputSerializer,
    run_action_views,
    run_list_schema,
)
from prm_training.models import JudgeSample, MachineLabelRun, MachineLabelRunKind
from prm_training.selectors import (
    ML_AND_LEADS,
    judge_samples_page,
    machine_label_run_get_for_member,
    machine_label_run_list,
)
from prm_training.services.machine_labels import (
    FILTERS,
    MAX_ITEMS,
    PARAM_BOUNDS,
    ROLLOUT_MODES,
    machine_label_run_cancel,
    machine_label_run_retry,
    machine_label_run_start,
)

_FILTER_CHOICES = sorted({name for names in FILTERS.values() for name in names})


def _bounds(name: str) -> dict[str, Any]:
    low, high = PARAM_BOUNDS[name]
    return {"min_value": low, "max_value": high}


class MachineLabelRunInputSerializer(InputSerializer):
    kind = serializers.ChoiceField(
        choices=MachineLabelRunKind.choices,
        help_text="sample: chains for problems; rollout: Monte-Carlo step values of chains; "
        "judge: a judge's earliest wrong step of chains.",
    )
    model = serializers.CharField(
        max_length=200,
        help_text="A causal LM by name: a model directory under the backbone root "
        "(STEPLAB_BACKBONE_DIR), as the project's backbones endpoint lists it.",
    )
    n = serializers.IntegerField(
        required=False,
        **_bounds("n"),
        help_text="Chains per problem (sample), rollouts per step (rollout) or samples per "
        "chain (judge). 1 by default.",
    )
    temperature = serializers.FloatField(required=False, **_bounds("temperature"))
    top_p = serializers.FloatField(required=False, **_bounds("top_p"))
    max_new_tokens = serializers.IntegerField(required=False, **_bounds("max_new_tokens"))
    seed = serializers.IntegerField(
        required=False,
        **_bounds("seed"),
        help_text="Completion i of a prompt is drawn with seed + i.",
    )
    mode = serializers.ChoiceField(
        choices=ROLLOUT_MODES,
        required=False,
        help_text="Rollout runs only. full: every step; search: a binary search for the "
        "first step from which no rollout reaches the answer.",
    )
    budget = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=1_000_000,
        help_text="Search mode only: the most rollouts one chain may take (at least n); a "
        "search that would need more leaves the chain undecided. No limit when absent.",
    )
    template = serializers.CharField(
        required=False,
        max_length=20_000,
        trim_whitespace=False,
        help_text="Judge runs only: the prompt, instead of the project's judge template.",
    )
    problems = serializers.ListField(
        child=IdField(),
        required=False,
        max_length=MAX_ITEMS,
        help_text="Sample runs: the problems by id (or a filter).",
    )
    chains = serializers.ListField(
        child=IdField(),
        required=False,
        max_length=MAX_ITEMS,
        help_text="Rollout and judge runs: the chains by id (or a filter).",
    )
    filter = serializers.ChoiceField(
        choices=_FILTER_CHOICES,
        required=False,
        help_text="Instead of ids. all; without_chains (sample: problems with no chain); "
        "without_labels (rollout, judge: chains with no label of the run's source).",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        sample = attrs["kind"] == MachineLabelRunKind.SAMPLE
        wrong = "chains" if sample else "problems"
        if wrong in attrs:
            raise serializers.ValidationError({wrong: [f"A {attrs['kind']} run takes no {wrong}."]})
        return attrs


class MachineLabelRunOutputSerializer(RunOutputSerializer):
    started_by: serializers.SlugRelatedField = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )

    class Meta:
        model = MachineLabelRun
        fields = [
            "id",
            "project",
            "kind",
            "model_name",
            "params",
            "selection",
            "status",
            "items_total",
            "items_done",
            "completions",
            "tokens",
            "result",
            "started_by",
            "created_at",
            "started_at",
            "finished_at",
            "error",
            *RUN_LIFECYCLE_FIELDS,
        ]


@extend_schema_view(
    get=run_list_schema(
        operation="machine_label_runs",
        output=MachineLabelRunOutputSerializer,
        summary="The project's latest machine-label runs (ML staff and leads)",
    ),
    post=extend_schema(
        operation_id="machine_label_runs_start",
        request=MachineLabelRunInputSerializer,
        responses={
            201: MachineLabelRunOutputSerializer,
            400: OpenApiResponse(
                description="A model not under the backbone root, a parameter out of range, "
                "ids not in the project, or nothing to work on; named by field."
            ),
            **RUN_RESPONSES,
        },
        summary="Start a sampling, rollout or judge run (ML staff and leads)",
        description="Queues a run on the GPU workers. A sampling run imports the chains it "
        "draws (deduplicated, with their provenance); rollout and judge runs store machine "
        "labels, never human votes.",
    ),
)
class ProjectMachineLabelRunsApi(ProjectRunsApi):
    list_runs = machine_label_run_list
    input = MachineLabelRunInputSerializer
    output = MachineLabelRunOutputSerializer
    start_roles = ML_AND_LEADS

    def start(self, *, project: Project, user: User, data: dict[str, Any]) -> MachineLabelRun:
        kind = data.pop("kind")
        model = data.pop("model")
        ids = data.pop("problems", data.pop("chains", None))
        return machine_label_run_start(
            project=project,
            user=user,
            kind=kind,
            model=model,
            ids=ids,
            filter=data.pop("filter", None),
            params=data,
        )


@extend_schema_view(
    get=extend_schema(
        operation_id="machine_label_runs_retrieve",
        responses={200: MachineLabelRunOutputSerializer, **RUN_RESPONSES},
        summary="Follow a machine-label run (ML staff and leads)",
    )
)
class MachineLabelRunDetailApi(RunDetailApi):
    get_run = machine_label_run_get_for_member
    output = MachineLabelRunOutputSerializer


MachineLabelRunCancelApi, MachineLabelRunRetryApi = run_action_views(
    noun="machine-label run",
    operation="machine_label_runs",
    get=machine_label_run_get_for_member,
    cancel=machine_label_run_cancel,
    retry=machine_label_run_retry,
    output=MachineLabelRunOutputSerializer,
    roles=ML_AND_LEADS,
    who="ML staff and leads",
    cancel_description="A queued run is cancelled at once; a running one stops between two "
    "items and keeps what it stored.",
    retry_description="Queues a new run with the same kind, model, parameters and items "
    "(`retry_of` names the old one).",
)


JUDGE_SAMPLES_PAGE_MAX = 500


class JudgeSamplesInputSerializer(InputSerializer):
    chain = IdField(required=False, help_text="Only this chain's samples.")
    unparsed = serializers.BooleanField(
        required=False,
        allow_null=True,
        default=None,
        help_text="true: only samples whose verdict could not be read; false: only read ones.",
    )
    after = CursorField(required=False, help_text="`next_after` of the previous page.")
    limit = serializers.IntegerField(
        required=False, default=100, min_value=1, max_value=JUDGE_SAMPLES_PAGE_MAX
    )


class JudgeSampleOutputSerializer(serializers.ModelSerializer):
    class Meta:
        model = JudgeSample
        fields = ["id", "chain", "sample_index", "verdict", "text"]


class JudgeSamplesPageSerializer(serializers.Serializer):
    results = JudgeSampleOutputSerializer(many=True)
    next_after = serializers.IntegerField(allow_null=True)


class JudgeSamplesApi(APIView):
    @extend_schema(
        operation_id="machine_label_runs_judge_samples",
        parameters=[JudgeSamplesInputSerializer],
        responses={200: JudgeSamplesPageSerializer, **RUN_RESPONSES},
        summary="A judge run's sampled critiques, raw (ML staff and leads)",
        description="Each sample's text and the step it names as the earliest wrong one "
        "(-1: none; null: the text could not be parsed, and it is no label), in the order "
        "they were stored (chain by chain), `limit` at a time: pass `next_after` as "
        "`after` for the next page. Empty for runs of other kinds.",
    )
    def get(self, request: Request, machine_label_run_id: int) -> Response:
        run = machine_label_run_get_for_member(
            user=request.user, machine_label_run_id=machine_label_run_id
        )
        params = JudgeSamplesInputSerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        data = params.validated_data
        page = judge_samples_page(
            run=run,
            chain_id=data.get("chain"),
            unparsed=data["unparsed"],
            after=data.get("after"),
            limit=data["limit"],
        )
        next_after = page[-1].pk if len(page) == data["limit"] else None
        return Response(
            JudgeSamplesPageSerializer({"results": page, "next_after": next_after}).data
        )
