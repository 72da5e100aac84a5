"""Training runs over HTTP: start, list, follow, cancel, retry (ML staff start; leads
read). The settings a run may set are ``PRMConfig``'s run settings, one field each."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import serializers

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
from prm_training.ml.config import RunSetting
from prm_training.models import TrainingRun
from prm_training.selectors import ML_ONLY, training_run_get_for_member, training_run_list
from prm_training.services.training import (
    training_run_cancel,
    training_run_retry,
    training_run_start,
)
from prm_training.services.training_settings import CONFIG_FIELDS

# What the API says of ``backbone`` (PRMConfig's help speaks of directories, the API of names).
BACKBONE_HELP = (
    "A backbone by name, as listed by the project's backbones endpoint: a model directory "
    "under the backbone root, `version:<id>`, or blank for the bundled all-MiniLM-L6-v2."
)


def _setting_field(setting: RunSetting) -> serializers.Field:
    """The DRF field of one training setting, with the bounds ``training_config_clean``
    enforces, so the schema states them and a value past them is refused here."""
    common: dict[str, Any] = {"required": False, "help_text": setting.help}
    if setting.name == "backbone":
        common["help_text"] = BACKBONE_HELP
    if setting.choices is not None:
        return serializers.ChoiceField(choices=setting.choices, **common)
    if setting.kind is bool:
        return serializers.BooleanField(**common)
    # DRF's fields take None for "no bound" (their stubs say a number).
    bounds: dict[str, Any] = {"min_value": setting.low, "max_value": setting.high}
    if setting.kind is int:
        return serializers.IntegerField(**bounds, **common)
    if setting.kind is float:
        return serializers.FloatField(**bounds, allow_null=setting.nullable, **common)
    text: dict[str, Any] = {"max_length": setting.max_length}
    return serializers.CharField(allow_blank=True, trim_whitespace=False, **text, **common)


# PRMConfig's run settings (``ml.config.run_settings``), one field each; any left out take
# the ML package's defaults.
TrainingRunInputSerializer = type(
    "TrainingRunInputSerializer",
    (InputSerializer,),
    {
        "__doc__": "PRMConfig fields a run may set; any left out take the ML package's defaults.",
        "__module__": __name__,
        **{name: _setting_field(setting) for name, setting in CONFIG_FIELDS.items()},
    },
)


class TrainingRunOutputSerializer(RunOutputSerializer):
    started_by: serializers.SlugRelatedField = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )
    model_version = serializers.SerializerMethodField()

    class Meta:
        model = TrainingRun
        fields = [
            "id",
            "project",
            "status",
            "trigger",
            "settings",
            "snapshot",
            "started_by",
            "created_at",
            "started_at",
            "finished_at",
            "progress",
            "last_loss",
            "loss_history",
            "error",
            "activation_note",
            "model_version",
            *RUN_LIFECYCLE_FIELDS,
        ]

    def get_model_version(self, run: TrainingRun) -> int | None:
        version = getattr(run, "model_version", None)
        return version.pk if version is not None else None


@extend_schema_view(
    get=run_list_schema(
        operation="training_runs",
        output=TrainingRunOutputSerializer,
        summary="The project's latest training runs (ML staff and leads)",
    ),
    post=extend_schema(
        operation_id="training_runs_start",
        request=TrainingRunInputSerializer,
        responses={
            201: TrainingRunOutputSerializer,
            400: OpenApiResponse(description="A setting out of range."),
            403: FORBIDDEN,
            404: NOT_FOUND,
        },
        summary="Start a training run (ML staff)",
        description="Queues a run on the GPU workers. It trains on a fresh snapshot of the "
        "consensus labels; the new model version becomes active only if it beats the active "
        "one on the same held-out chains.",
    ),
)
class ProjectTrainingRunsApi(ProjectRunsApi):
    list_runs = training_run_list
    input = TrainingRunInputSerializer
    output = TrainingRunOutputSerializer

    def start(self, *, project: Project, user: User, data: dict[str, Any]) -> TrainingRun:
        return training_run_start(project=project, user=user, settings=data)


@extend_schema_view(
    get=extend_schema(
        operation_id="training_runs_retrieve",
        responses={200: TrainingRunOutputSerializer, 403: FORBIDDEN, 404: NOT_FOUND},
        summary="Follow a training run (ML staff and leads)",
    )
)
class TrainingRunDetailApi(RunDetailApi):
    get_run = training_run_get_for_member
    output = TrainingRunOutputSerializer


TrainingRunCancelApi, TrainingRunRetryApi = run_action_views(
    noun="training run",
    operation="training_runs",
    get=training_run_get_for_member,
    cancel=training_run_cancel,
    retry=training_run_retry,
    output=TrainingRunOutputSerializer,
    roles=ML_ONLY,
    who="ML staff",
    cancel_description="A queued run is cancelled at once; a running one stops within about "
    "a second, between two batches, and publishes nothing: the active version stays.",
    retry_description="Queues a new run with the same settings (`retry_of` names the old "
    "one); it trains on a fresh snapshot.",
)
