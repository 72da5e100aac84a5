"""The PRM loop over HTTP: training runs, model versions, scoring runs.

Thin: resolve the object through a selector (non-member 404, wrong role 403), call one
service, serialize. ML staff start, cancel, activate and score; leads may read."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.access import project_get_for_member
from annotation.api.fields import IdField
from annotation.api.inputs import InputSerializer
from annotation.api.permissions import request_user
from prm_training.ml.config import RunSetting
from prm_training.models import (
    STRATEGY_SETTINGS,
    AcquisitionStrategy,
    ModelVersion,
    ProjectTrainingSettings,
    RunLifecycle,
    ScoringRun,
    TrainingRun,
)
from prm_training.selectors import (
    ML_AND_LEADS,
    ML_ONLY,
    evaluation_result_list,
    model_version_active_get,
    model_version_get_for_member,
    model_version_list,
    project_training_settings_get,
    run_phase_view,
    scoring_run_get_for_member,
    scoring_run_list,
    training_run_get_for_member,
    training_run_list,
)
from prm_training.services.backbones import backbone_choices
from prm_training.services.runs import runs_reap_stale_of_project
from prm_training.services.scoring import scoring_run_cancel, scoring_run_retry, scoring_run_start
from prm_training.services.strategy import acquisition_strategy_resolve
from prm_training.services.training import (
    CONFIG_FIELDS,
    model_version_activate,
    project_training_settings_update,
    training_run_cancel,
    training_run_retry,
    training_run_start,
)

NOT_FOUND = OpenApiResponse(description="No such object, or not in one of your projects.")
FORBIDDEN = OpenApiResponse(description="Your role in this project does not allow this.")
RUN_LIST_LIMIT = 50
# What a run endpoint answers a caller it refuses.
RUN_RESPONSES = {403: FORBIDDEN, 404: NOT_FOUND}


# --- training runs -----------------------------------------------------------------------


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


class PastPhaseSerializer(serializers.Serializer):
    name = serializers.CharField()
    seconds = serializers.FloatField()


class RunPhaseSerializer(serializers.Serializer):
    """What a running run does now (its last report, at most a second or so old)."""

    name = serializers.CharField(
        help_text="snapshot, loading, encoding, training, evaluating, comparing, publishing, "
        "scoring, simulating, writing."
    )
    done = serializers.IntegerField(help_text="Units done in this phase.")
    total = serializers.IntegerField(help_text="Units in this phase; 0 when not counted.")
    unit = serializers.CharField(help_text="steps, batches, trainings... (blank: not counted)")
    detail = serializers.CharField(help_text='e.g. "epoch 3/40".')
    started_at = serializers.DateTimeField(allow_null=True)
    rate = serializers.FloatField(
        allow_null=True, help_text="Units per second in this phase so far; None until measured."
    )
    eta_seconds = serializers.FloatField(
        allow_null=True, help_text="Seconds this phase should still take at that rate."
    )
    past = PastPhaseSerializer(many=True, help_text="The phases before, with their durations.")


class _RunOutputSerializer(serializers.ModelSerializer):
    """What every kind of run shows of its lifecycle."""

    phase = serializers.SerializerMethodField()

    @extend_schema_field(RunPhaseSerializer(allow_null=True))
    def get_phase(self, run: RunLifecycle) -> dict[str, Any] | None:
        return run_phase_view(run=run)


def run_action_views(
    *,
    noun: str,
    operation: str,
    get: Callable[..., Any],
    cancel: Callable[..., Any],
    retry: Callable[..., Any],
    output: type[serializers.Serializer],
    roles: tuple[str, ...],
    who: str,
    cancel_description: str,
    retry_description: str,
) -> tuple[type[APIView], type[APIView]]:
    """The cancel and retry endpoints of one kind of run, which every kind answers the
    same way: the run through ``get`` (the URL's id by its own name, ``roles`` allowed),
    one service call, the run serialized. ``noun``: "training run"; ``operation``: the
    OpenAPI operation ids' stem ("training_runs")."""
    responses = {403: FORBIDDEN, 404: NOT_FOUND}

    class CancelApi(APIView):
        @extend_schema(
            operation_id=f"{operation}_cancel",
            request=None,
            responses={
                200: output,
                400: OpenApiResponse(description="The run has already finished."),
                **responses,
            },
            summary=f"Cancel a {noun} ({who})",
            description=cancel_description,
        )
        def post(self, request: Request, **ids: int) -> Response:
            run = cancel(run=get(user=request.user, roles=roles, **ids))
            return Response(output(run).data)

    class RetryApi(APIView):
        @extend_schema(
            operation_id=f"{operation}_retry",
            request=None,
            responses={
                201: output,
                400: OpenApiResponse(description="The run has not failed and was not cancelled."),
                **responses,
            },
            summary=f"Retry a failed or cancelled {noun} ({who})",
            description=retry_description,
        )
        def post(self, request: Request, **ids: int) -> Response:
            run = get(user=request.user, roles=roles, **ids)
            new = retry(run=run, user=request_user(request))
            return Response(output(new).data, status=status.HTTP_201_CREATED)

    stem = "".join(word.capitalize() for word in noun.replace("-", " ").split())
    for view, action in ((CancelApi, "Cancel"), (RetryApi, "Retry")):
        view.__name__ = view.__qualname__ = f"{stem}{action}Api"
    return CancelApi, RetryApi


RUN_LIFECYCLE_FIELDS = [
    "phase",
    "worker",
    "heartbeat_at",
    "attempts",
    "cancel_requested",
    "retry_of",
]


class TrainingRunOutputSerializer(_RunOutputSerializer):
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


class ProjectTrainingRunsApi(APIView):
    @extend_schema(
        operation_id="training_runs_list",
        responses={200: TrainingRunOutputSerializer(many=True), 403: FORBIDDEN, 404: NOT_FOUND},
        summary="The project's latest training runs (ML staff and leads)",
    )
    def get(self, request: Request, project_id: int) -> Response:
        project = project_get_for_member(
            user=request.user, project_id=project_id, roles=ML_AND_LEADS
        )
        runs_reap_stale_of_project(project_id=project.pk)
        runs = training_run_list(project=project)[:RUN_LIST_LIMIT]
        return Response(TrainingRunOutputSerializer(runs, many=True).data)

    @extend_schema(
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
    )
    def post(self, request: Request, project_id: int) -> Response:
        project = project_get_for_member(user=request.user, project_id=project_id, roles=ML_ONLY)
        payload = TrainingRunInputSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        run = training_run_start(
            project=project, user=request_user(request), settings=dict(payload.validated_data)
        )
        return Response(TrainingRunOutputSerializer(run).data, status=status.HTTP_201_CREATED)


class TrainingRunDetailApi(APIView):
    @extend_schema(
        operation_id="training_runs_retrieve",
        responses={200: TrainingRunOutputSerializer, 403: FORBIDDEN, 404: NOT_FOUND},
        summary="Follow a training run (ML staff and leads)",
    )
    def get(self, request: Request, run_id: int) -> Response:
        run = training_run_get_for_member(user=request.user, run_id=run_id)
        if runs_reap_stale_of_project(project_id=run.project_id):
            run = training_run_get_for_member(user=request.user, run_id=run_id)
        return Response(TrainingRunOutputSerializer(run).data)


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


# --- model versions ----------------------------------------------------------------------


class RulesVerdictSerializer(serializers.Serializer):
    beaten = serializers.BooleanField(
        allow_null=True, help_text="None: no held-out comparison with the rules."
    )
    text = serializers.CharField()


class ModelVersionOutputSerializer(serializers.ModelSerializer):
    snapshot_version = serializers.IntegerField(
        source="snapshot.version",
        read_only=True,
        allow_null=True,
        help_text="None: a zero-shot version made before the project had a label.",
    )
    snapshot_label = serializers.CharField(
        source="snapshot.label",
        read_only=True,
        allow_null=True,
        help_text="The snapshot's version as pages say it: t3 for a training run's own "
        "snapshot (numbered apart from the lead's datasets), v3 for a dataset.",
    )
    zero_shot = serializers.BooleanField(
        source="is_zero_shot",
        read_only=True,
        help_text="Made without training: the backbone's own step scores (the zero_shot setting).",
    )
    activated_by: serializers.SlugRelatedField = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )
    against_rules = serializers.SerializerMethodField(
        help_text="Whether the held-out F1 and AUROC beat the strongest baseline that reads "
        "no step (the outcome rule, the step-position prior, the text-blind head) on each, "
        "scored on the same chains, the paired interval above zero."
    )

    @extend_schema_field(RulesVerdictSerializer)
    def get_against_rules(self, version: ModelVersion) -> dict[str, Any]:
        # Lazily, as everything from the ML package: the web process does not load it.
        from prm_training.ml.baselines import verdict_against_baselines

        verdict = verdict_against_baselines(version.metrics)
        return {"beaten": verdict.beaten, "text": verdict.text}

    class Meta:
        model = ModelVersion
        fields = [
            "id",
            "project",
            "version",
            "training_run",
            "snapshot",
            "snapshot_version",
            "snapshot_label",
            "metrics",
            "zero_shot",
            "against_rules",
            "is_active",
            "created_at",
            "activated_at",
            "activated_by",
        ]


class ProjectModelVersionsApi(APIView):
    @extend_schema(
        operation_id="model_versions_list",
        responses={200: ModelVersionOutputSerializer(many=True), 403: FORBIDDEN, 404: NOT_FOUND},
        summary="Model versions with their held-out metrics (ML staff and leads)",
    )
    def get(self, request: Request, project_id: int) -> Response:
        project = project_get_for_member(
            user=request.user, project_id=project_id, roles=ML_AND_LEADS
        )
        versions = model_version_list(project=project)
        return Response(ModelVersionOutputSerializer(versions, many=True).data)


class ModelVersionActivateApi(APIView):
    @extend_schema(
        operation_id="model_versions_activate",
        request=None,
        responses={
            200: ModelVersionOutputSerializer,
            400: OpenApiResponse(description="The project's evaluation set rule refuses it."),
            403: FORBIDDEN,
            404: NOT_FOUND,
        },
        summary="Make a model version the active one (ML staff)",
    )
    def post(self, request: Request, version_id: int) -> Response:
        version = model_version_get_for_member(
            user=request.user, version_id=version_id, roles=ML_ONLY
        )
        version = model_version_activate(model_version=version, user=request_user(request))
        version = model_version_list(project=version.project).get(pk=version.pk)
        return Response(ModelVersionOutputSerializer(version).data)


class EvaluationResultOutputSerializer(serializers.Serializer):
    model_version = serializers.IntegerField(source="model_version_id")
    version = serializers.IntegerField(source="model_version.version")
    evaluation_set = serializers.IntegerField(source="evaluation_set_id")
    evaluation_set_name = serializers.CharField(source="evaluation_set.name")
    chains = serializers.IntegerField(help_text="Labeled chains of the set scored.")
    unlabeled_chains = serializers.IntegerField(help_text="Chains of the set with no label.")
    report = serializers.JSONField(
        help_text="ml.evaluation.evaluation_report: per figure (subset_f1:<subset>, "
        "mean_subset_f1, f1, auroc, prmscore, ...) each scorer's value with its 95% interval, "
        "the strongest baseline and the paired difference with it."
    )
    truncation = serializers.JSONField(help_text="What windows of max_length still cut.")
    loses = serializers.BooleanField(
        allow_null=True, help_text="Below the strongest baseline on F1, interval under zero."
    )
    created_at = serializers.DateTimeField()


class ProjectEvaluationResultsApi(APIView):
    @extend_schema(
        operation_id="evaluation_results_list",
        responses={
            200: EvaluationResultOutputSerializer(many=True),
            403: FORBIDDEN,
            404: NOT_FOUND,
        },
        summary="Each version's figures on each evaluation set (ML staff and leads)",
    )
    def get(self, request: Request, project_id: int) -> Response:
        project = project_get_for_member(
            user=request.user, project_id=project_id, roles=ML_AND_LEADS
        )
        results = evaluation_result_list(project=project)
        return Response(EvaluationResultOutputSerializer(results, many=True).data)


# --- scoring runs ------------------------------------------------------------------------


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


class ScoringRunOutputSerializer(_RunOutputSerializer):
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


class ProjectScoringRunsApi(APIView):
    @extend_schema(
        operation_id="scoring_runs_list",
        responses={200: ScoringRunOutputSerializer(many=True), 403: FORBIDDEN, 404: NOT_FOUND},
        summary="The project's latest scoring runs (ML staff and leads)",
    )
    def get(self, request: Request, project_id: int) -> Response:
        project = project_get_for_member(
            user=request.user, project_id=project_id, roles=ML_AND_LEADS
        )
        runs_reap_stale_of_project(project_id=project.pk)
        runs = scoring_run_list(project=project)[:RUN_LIST_LIMIT]
        return Response(ScoringRunOutputSerializer(runs, many=True).data)

    @extend_schema(
        operation_id="scoring_runs_start",
        request=ScoringRunInputSerializer,
        responses={
            201: ScoringRunOutputSerializer,
            400: OpenApiResponse(description="No active version, or a bad setting."),
            403: FORBIDDEN,
            404: NOT_FOUND,
        },
        summary="Score unlabeled chains and refresh the queue order (ML staff)",
    )
    def post(self, request: Request, project_id: int) -> Response:
        project = project_get_for_member(user=request.user, project_id=project_id, roles=ML_ONLY)
        payload = ScoringRunInputSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        data: dict[str, Any] = dict(payload.validated_data)
        version = None
        if "model_version" in data:
            version = ModelVersion.objects.filter(pk=data["model_version"], project=project).first()
            if version is None:
                raise serializers.ValidationError({"model_version": "No such version here."})
        run = scoring_run_start(
            project=project,
            user=request_user(request),
            model_version=version,
            strategy=data.get("strategy"),
            random_fraction=data.get("random_fraction"),
        )
        return Response(ScoringRunOutputSerializer(run).data, status=status.HTTP_201_CREATED)


class ScoringRunDetailApi(APIView):
    @extend_schema(
        operation_id="scoring_runs_retrieve",
        responses={200: ScoringRunOutputSerializer, 403: FORBIDDEN, 404: NOT_FOUND},
        summary="Follow a scoring run (ML staff and leads)",
    )
    def get(self, request: Request, scoring_run_id: int) -> Response:
        run = scoring_run_get_for_member(user=request.user, scoring_run_id=scoring_run_id)
        if runs_reap_stale_of_project(project_id=run.project_id):
            run = scoring_run_get_for_member(user=request.user, scoring_run_id=scoring_run_id)
        return Response(ScoringRunOutputSerializer(run).data)


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


# --- loop settings -----------------------------------------------------------------------


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
