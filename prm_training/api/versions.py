"""Model versions and their figures over HTTP: the list with held-out metrics and the
verdict against the baselines, activation (ML staff), each version's evaluation-set results."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.access import project_get_for_member
from annotation.api.permissions import request_user
from prm_training.api.runs import FORBIDDEN, NOT_FOUND
from prm_training.models import EvaluationResult, ModelVersion
from prm_training.selectors import (
    ML_AND_LEADS,
    ML_ONLY,
    evaluation_result_list,
    evaluation_sets_labels_changed_at,
    figures_outdated,
    model_version_get_for_member,
    model_version_list,
)
from prm_training.services.model_versions import model_version_activate


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
    snapshot_label = serializers.CharField(
        source="snapshot.label",
        allow_null=True,
        default=None,
        help_text="The labels it was measured with (t3: a training run's snapshot); null for "
        "figures stored before this was kept.",
    )
    created_at = serializers.DateTimeField(help_text="When it was measured.")
    labels_changed_since = serializers.SerializerMethodField(
        help_text="The set's labels changed after the snapshot it was measured with (a "
        "ruling, a revision): an evaluation run measures it again and replaces it."
    )

    def get_labels_changed_since(self, result: EvaluationResult) -> bool:
        snapshot = result.snapshot
        return figures_outdated(
            measured_with=snapshot.created_at if snapshot is not None else None,
            labels_changed=self.context["labels_changed"].get(result.evaluation_set_id),
        )


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
        results = list(evaluation_result_list(project=project))
        changed = evaluation_sets_labels_changed_at(
            evaluation_set_ids={result.evaluation_set_id for result in results}
        )
        serialized = EvaluationResultOutputSerializer(
            results, many=True, context={"labels_changed": changed}
        )
        return Response(serialized.data)
