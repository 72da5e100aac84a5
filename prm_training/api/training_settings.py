"""The project's loop settings over HTTP (acquisition strategy, random share, automatic
retraining) and the backbones a run may name."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.access import project_get_for_member
from annotation.api.inputs import InputSerializer
from prm_training.api.runs import FORBIDDEN, NOT_FOUND
from prm_training.api.training import TrainingRunInputSerializer
from prm_training.models import STRATEGY_SETTINGS, AcquisitionStrategy, ProjectTrainingSettings
from prm_training.selectors import (
    ML_AND_LEADS,
    ML_ONLY,
    model_version_active_get,
    project_training_settings_get,
)
from prm_training.services.backbones import backbone_choices
from prm_training.services.strategy import acquisition_strategy_resolve
from prm_training.services.training_settings import project_training_settings_update


class TrainingSettingsInputSerializer(InputSerializer):
    """Any subset; fields left out keep their values."""

    acquisition_strategy = serializers.ChoiceField(
        choices=STRATEGY_SETTINGS,
        required=False,
        help_text="'auto': the strategy the evidence on the project's labels supports, "
        "random until one beats it.",
    )
    random_fraction = serializers.FloatField(
        required=False, min_value=0.0, max_value=1.0, help_text="Share of the queue at random."
    )
    retrain_every_n_finished = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=10_000_000,
        help_text="Start a training run after this many new finished chains; 0 = off.",
    )
    default_config = TrainingRunInputSerializer(
        required=False, help_text="Training settings of automatic runs (replaced whole)."
    )
    promotion_needs_evaluation_sets = serializers.BooleanField(
        required=False,
        help_text="Make a version active (after its run or by hand) only when it loses on no "
        "evaluation set of the project.",
    )
    judge_template = serializers.CharField(
        required=False,
        allow_blank=True,
        trim_whitespace=False,
        max_length=20_000,
        help_text="The prompt judge runs send, with {problem} and {tagged_response} (the "
        "tagged steps); blank: "
        "ProcessBench's critique format.",
    )


class StrategyChoiceSerializer(serializers.Serializer):
    strategy = serializers.ChoiceField(choices=AcquisitionStrategy.choices)
    why = serializers.CharField()


class TrainingSettingsOutputSerializer(serializers.ModelSerializer):
    applied_strategy = serializers.SerializerMethodField(
        help_text="The strategy a scoring run applies by default, and why."
    )

    @extend_schema_field(StrategyChoiceSerializer)
    def get_applied_strategy(self, loop: ProjectTrainingSettings) -> dict[str, str]:
        active = model_version_active_get(project=loop.project)
        strategy, why = acquisition_strategy_resolve(loop=loop, version=active)
        return {"strategy": strategy, "why": why}

    class Meta:
        model = ProjectTrainingSettings
        fields = [
            "project",
            "acquisition_strategy",
            "applied_strategy",
            "strategy_evidence",
            "random_fraction",
            "retrain_every_n_finished",
            "default_config",
            "promotion_needs_evaluation_sets",
            "judge_template",
            "updated_at",
        ]


class BackboneOutputSerializer(serializers.Serializer):
    name = serializers.CharField(
        allow_blank=True, help_text="What a run's `backbone` setting takes; blank: bundled."
    )
    label = serializers.CharField()  # type: ignore[assignment]  # a field, not Field.label


class ProjectBackbonesApi(APIView):
    @extend_schema(
        operation_id="backbones_list",
        responses={200: BackboneOutputSerializer(many=True), 403: FORBIDDEN, 404: NOT_FOUND},
        summary="The backbones a training run may start from (ML staff and leads)",
        description="The bundled MiniLM, the model directories under the backbone root "
        "(STEPLAB_BACKBONE_DIR) and this project's versions that saved their backbone. A "
        "run or the loop settings naming anything else get a 400.",
    )
    def get(self, request: Request, project_id: int) -> Response:
        project = project_get_for_member(
            user=request.user, project_id=project_id, roles=ML_AND_LEADS
        )
        choices = backbone_choices(project=project)
        return Response(BackboneOutputSerializer(choices, many=True).data)


class ProjectTrainingSettingsApi(APIView):
    @extend_schema(
        operation_id="training_settings_retrieve",
        responses={200: TrainingSettingsOutputSerializer, 403: FORBIDDEN, 404: NOT_FOUND},
        summary="The project's loop settings (ML staff and leads)",
    )
    def get(self, request: Request, project_id: int) -> Response:
        project = project_get_for_member(
            user=request.user, project_id=project_id, roles=ML_AND_LEADS
        )
        loop = project_training_settings_get(project=project)
        return Response(TrainingSettingsOutputSerializer(loop).data)

    @extend_schema(
        operation_id="training_settings_partial_update",
        request=TrainingSettingsInputSerializer,
        responses={
            200: TrainingSettingsOutputSerializer,
            400: OpenApiResponse(description="A setting out of range, named by field."),
            403: FORBIDDEN,
            404: NOT_FOUND,
        },
        summary="Change the loop settings: acquisition, auto-retraining, defaults (ML staff)",
    )
    def patch(self, request: Request, project_id: int) -> Response:
        project = project_get_for_member(user=request.user, project_id=project_id, roles=ML_ONLY)
        payload = TrainingSettingsInputSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data: dict[str, Any] = dict(payload.validated_data)
        if "default_config" in data:
            data["default_config"] = dict(data["default_config"])
        loop = project_training_settings_update(project=project, data=data)
        return Response(TrainingSettingsOutputSerializer(loop).data)
