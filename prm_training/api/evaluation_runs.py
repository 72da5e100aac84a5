"""Evaluation runs over HTTP: the runs that score every model version on every evaluation
set that lacks its figures (``services.evaluation_runs``). They are queued by what leaves
a gap (a set marked or changed, a version made); ML staff may ask for one and cancel one,
and leads may read and follow them. Thin, as the rest of the PRM API (``api.runs``). No
retry: asking again (the ``POST``) queues the run a retry would, over what is missing."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import serializers

from annotation.api.inputs import InputSerializer
from annotation.models import Project
from prm_training.api.runs import (
    RUN_LIFECYCLE_FIELDS,
    RUN_RESPONSES,
    ProjectRunsApi,
    RunDetailApi,
    RunOutputSerializer,
    run_cancel_view,
    run_list_schema,
)
from prm_training.models import EvaluationRun
from prm_training.selectors import (
    ML_ONLY,
    evaluation_run_get_for_member,
    evaluation_run_list,
)
from prm_training.services.evaluation_runs import evaluation_run_cancel, evaluation_run_request


class EvaluationRunInputSerializer(InputSerializer):
    """Nothing to choose: a run measures every version that lacks figures on every set."""


class EvaluationRunSkipSerializer(serializers.Serializer):
    model_version = serializers.IntegerField()
    version = serializers.IntegerField()
    reason = serializers.CharField(help_text="Why it was not measured (its checkpoint gone...).")


class EvaluationRunOutputSerializer(RunOutputSerializer):
    started_by: serializers.SlugRelatedField = serializers.SlugRelatedField(
        slug_field="username",
        read_only=True,
        help_text="Who asked for it; null for a run a change queued.",
    )
    snapshot_label = serializers.CharField(
        source="snapshot.label",
        read_only=True,
        allow_null=True,
        default=None,
        help_text="The labels it measures with (t3: a training run's snapshot); null until "
        "it starts, or when no version was trained on labels.",
    )
    skipped = EvaluationRunSkipSerializer(many=True, help_text="Versions it could not measure.")

    class Meta:
        model = EvaluationRun
        fields = [
            "id",
            "project",
            "status",
            "trigger",
            "snapshot",
            "snapshot_label",
            "filled",
            "skipped",
            "started_by",
            "created_at",
            "started_at",
            "finished_at",
            "error",
            *RUN_LIFECYCLE_FIELDS,
        ]


@extend_schema_view(
    get=run_list_schema(
        operation="evaluation_runs",
        output=EvaluationRunOutputSerializer,
        summary="The project's latest evaluation runs (ML staff and leads)",
    ),
    post=extend_schema(
        operation_id="evaluation_runs_start",
        request=EvaluationRunInputSerializer,
        responses={
            201: EvaluationRunOutputSerializer,
            400: OpenApiResponse(description="Every version has figures on every set."),
            **RUN_RESPONSES,
        },
        summary="Score every version on the evaluation sets it lacks figures on (ML staff)",
        description="Queues a run on the GPU workers, or answers the one already waiting. "
        "It scores each version that lacks figures on a set, from its checkpoint, with the "
        "labels of the newest version's snapshot. Runs are queued without asking when a set "
        "is marked or its chains change and when a version is made; ask after one failed.",
    ),
)
class ProjectEvaluationRunsApi(ProjectRunsApi):
    list_runs = evaluation_run_list
    input = EvaluationRunInputSerializer
    output = EvaluationRunOutputSerializer

    def start(self, *, project: Project, user: User, data: dict[str, Any]) -> EvaluationRun:
        return evaluation_run_request(project_id=project.pk, user=user)


@extend_schema_view(
    get=extend_schema(
        operation_id="evaluation_runs_retrieve",
        responses={200: EvaluationRunOutputSerializer, **RUN_RESPONSES},
        summary="Follow an evaluation run (ML staff and leads)",
    )
)
class EvaluationRunDetailApi(RunDetailApi):
    get_run = evaluation_run_get_for_member
    output = EvaluationRunOutputSerializer


EvaluationRunCancelApi = run_cancel_view(
    noun="evaluation run",
    operation="evaluation_runs",
    get=evaluation_run_get_for_member,
    cancel=evaluation_run_cancel,
    output=EvaluationRunOutputSerializer,
    roles=ML_ONLY,
    who="ML staff",
    description="A queued run is cancelled at once; a running one stops within about a "
    "second, between two batches of steps. The figures it wrote stay; the pairs it had not "
    "reached stay missing until the next run (a change to a set queues one, or ask again).",
)
