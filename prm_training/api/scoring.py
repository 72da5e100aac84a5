"""Scoring runs over HTTP: score unlabeled chains with a version and refresh the queue
order (ML staff start; leads read), follow, cancel, retry."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import serializers

from annotation.api.fields import IdField
from annotation.api.inputs import InputSerializer
from annotation.models import Project
from prm_training.api.runs import (
    FORBIDDEN,
    NOT_FOUND,
    RUN_LIFECYCLE_FIELDS,
    ProjectRunsApi,
    RunDetailApi,
    RunOutputSerializer,
    run_action_views,
    run_list_schema,
)
from prm_training.models import AcquisitionStrategy, ModelVersion, ScoringRun
from prm_training.selectors import ML_ONLY, scoring_run_get_for_member, scoring_run_list
from prm_training.services.scoring import scoring_run_cancel, scoring_run_retry, scoring_run_start


class ScoringRunInputSerializer(InputSerializer):
    strategy = serializers.ChoiceField(
        choices=AcquisitionStrategy.choices,
        required=False,
        help_text="Defaults to the project's acquisition strategy.",
    )
    random_fraction = serializers.FloatField(
        required=False, min_value=0.0, max_value=1.0, help_text="Share of the queue at random."
    )
    model_version = IdField(required=False, help_text="Defaults to the active version.")


class ScoringRunOutputSerializer(RunOutputSerializer):
    model_version_number = serializers.IntegerField(source="model_version.version", read_only=True)

    class Meta:
        model = ScoringRun
        fields = [
            "id",
            "project",
            "model_version",
            "model_version_number",
            "status",
            "strategy",
            "applied_strategy",
            "strategy_note",
            "random_fraction",
            "created_at",
            "started_at",
            "finished_at",
            "chains_total",
            "chains_scored",
            "priorities_updated",
            "truncation",
            "error",
            *RUN_LIFECYCLE_FIELDS,
        ]


@extend_schema_view(
    get=run_list_schema(
        operation="scoring_runs",
        output=ScoringRunOutputSerializer,
        summary="The project's latest scoring runs (ML staff and leads)",
    ),
    post=extend_schema(
        operation_id="scoring_runs_start",
        request=ScoringRunInputSerializer,
        responses={
            201: ScoringRunOutputSerializer,
            400: OpenApiResponse(description="No active version, or a bad setting."),
            403: FORBIDDEN,
            404: NOT_FOUND,
        },
        summary="Score unlabeled chains and refresh the queue order (ML staff)",
    ),
)
class ProjectScoringRunsApi(ProjectRunsApi):
    list_runs = scoring_run_list
    input = ScoringRunInputSerializer
    output = ScoringRunOutputSerializer

    def start(self, *, project: Project, user: User, data: dict[str, Any]) -> ScoringRun:
        version = None
        if "model_version" in data:
            version = ModelVersion.objects.filter(pk=data["model_version"], project=project).first()
            if version is None:
                raise serializers.ValidationError({"model_version": "No such version here."})
        return scoring_run_start(
            project=project,
            user=user,
            model_version=version,
            strategy=data.get("strategy"),
            random_fraction=data.get("random_fraction"),
        )


@extend_schema_view(
    get=extend_schema(
        operation_id="scoring_runs_retrieve",
        responses={200: ScoringRunOutputSerializer, 403: FORBIDDEN, 404: NOT_FOUND},
        summary="Follow a scoring run (ML staff and leads)",
    )
)
class ScoringRunDetailApi(RunDetailApi):
    get_run = scoring_run_get_for_member
    output = ScoringRunOutputSerializer


ScoringRunCancelApi, ScoringRunRetryApi = run_action_views(
    noun="scoring run",
    operation="scoring_runs",
    get=scoring_run_get_for_member,
    cancel=scoring_run_cancel,
    retry=scoring_run_retry,
    output=ScoringRunOutputSerializer,
    roles=ML_ONLY,
    who="ML staff",
    cancel_description="A queued run is cancelled at once; a running one stops within about "
    "a second, between two batches. The queue keeps the order it had.",
    retry_description="Queues a new scoring run with the same version, strategy, random "
    "share and seed (`retry_of` names the old one).",
)
