"""The lead dashboard's data over HTTP: `GET /api/v1/projects/{id}/dashboard/` (leads
only; annotators and ML staff 403, non-members 404). Thin: check access, call
``annotation.projects.dashboard.project_dashboard``, serialize. The page at
`/projects/{id}/` draws its charts from this, so any client sees the same numbers."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from annotation.api.permissions import LEADS, project_for_request
from annotation.models import Project
from annotation.projects.dashboard import Dashboard, project_dashboard
from annotation.quality.api.review import AgreementOutputSerializer


class DashboardProjectOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="pk")
    name = serializers.CharField()
    labeling_mode = serializers.CharField()


class ProgressOutputSerializer(serializers.Serializer):
    chains_total = serializers.IntegerField()
    chains_finished = serializers.IntegerField(
        help_text="Chains with `overlap` human passes: what people finished."
    )
    chains_imported = serializers.IntegerField(
        help_text="Chains carrying labels that came with an import, counted apart: they "
        "finish no chain and enter a snapshot only when it includes imported labels."
    )
    chains_flagged = serializers.IntegerField(help_text="Chains out of the queue as broken.")
    overlap = serializers.IntegerField()
    annotations_needed = serializers.IntegerField(help_text="chains_total x overlap.")
    annotations_finished = serializers.IntegerField(
        help_text="Finished annotations, at most `overlap` per chain."
    )


class ThroughputOutputSerializer(serializers.Serializer):
    annotator = serializers.IntegerField(source="annotator_id")
    username = serializers.CharField()
    total = serializers.IntegerField(help_text="Annotations submitted, all time.")
    per_day = serializers.ListField(
        child=serializers.IntegerField(), help_text="Annotations submitted on each of `days`."
    )


class DurationOutputSerializer(serializers.Serializer):
    chains = serializers.IntegerField(help_text="Annotations with a recorded duration.")
    median_ms = serializers.FloatField(allow_null=True)
    p90_ms = serializers.FloatField(allow_null=True)


class TimePerChainOutputSerializer(DurationOutputSerializer):
    per_day = DurationOutputSerializer(many=True, help_text="The same on each of `days`.")


class LabelsOutputSerializer(serializers.Serializer):
    totals = serializers.DictField(
        child=serializers.IntegerField(),
        help_text='Current human ratings by value: "-1", "0", "1".',
    )
    per_day = serializers.DictField(
        child=serializers.ListField(child=serializers.IntegerField()),
        help_text="The same counts on each of `days`, by the annotation's day.",
    )


class GoldScoreOutputSerializer(serializers.Serializer):
    annotator = serializers.IntegerField(source="annotator_id")
    username = serializers.CharField()
    chains = serializers.IntegerField(help_text="Gold chains labeled.")
    steps_compared = serializers.IntegerField()
    step_accuracy = serializers.FloatField(allow_null=True)
    first_error_match = serializers.FloatField(allow_null=True)


class GoldOutputSerializer(serializers.Serializer):
    annotators = GoldScoreOutputSerializer(many=True)
    per_day = serializers.ListField(
        child=serializers.FloatField(allow_null=True),
        help_text="Step accuracy of everyone on gold chains as it stood at the end of each day.",
    )


class ProportionOutputSerializer(serializers.Serializer):
    hits = serializers.IntegerField()
    total = serializers.IntegerField()
    rate = serializers.FloatField(allow_null=True, help_text="hits / total; null when total is 0.")
    low = serializers.FloatField(allow_null=True, help_text="Wilson 95 % interval, low end.")
    high = serializers.FloatField(allow_null=True, help_text="Wilson 95 % interval, high end.")


class MeanSecondsOutputSerializer(serializers.Serializer):
    n = serializers.IntegerField(help_text="Passes with a recorded duration.")
    mean = serializers.FloatField(allow_null=True, help_text="Mean seconds per chain.")
    low = serializers.FloatField(allow_null=True, help_text="Student t 95 % interval, low end.")
    high = serializers.FloatField(allow_null=True, help_text="Student t 95 % interval, high end.")


class PrelabelArmOutputSerializer(serializers.Serializer):
    chains = serializers.IntegerField(help_text="Passes as submitted in this arm.")
    agreement = ProportionOutputSerializer(
        help_text="Ratings equal to the machine's verdict, of the steps that had one: with "
        "pre-labels the acceptance rate (verdicts confirmed), held out the share that "
        "matches the verdict kept unseen."
    )
    seconds = MeanSecondsOutputSerializer()
    gold_accuracy = ProportionOutputSerializer(help_text="Step accuracy on gold chains.")


class PrelabelEffectOutputSerializer(serializers.Serializer):
    source = serializers.CharField(  # type: ignore[assignment]  # a field, not Field.source
        help_text="The project's pre-label source now."
    )
    holdout = serializers.FloatField(help_text="The share of chains held out now.")
    shown = PrelabelArmOutputSerializer(help_text="Passes that saw the verdicts.")
    held_out = PrelabelArmOutputSerializer(help_text="Passes held out from them.")


class DashboardAgreementOutputSerializer(AgreementOutputSerializer):
    per_day = serializers.ListField(
        child=serializers.FloatField(allow_null=True),
        help_text="Alpha as it stood at the end of each of `days`; null while undefined.",
    )


class DashboardOutputSerializer(serializers.Serializer):
    project = serializers.SerializerMethodField()
    days = serializers.ListField(
        child=serializers.DateField(),
        help_text="The dates of every per_day list, oldest first (at most 90, to today).",
    )
    progress = ProgressOutputSerializer()
    annotations_per_day = serializers.ListField(child=serializers.IntegerField())
    annotations_cumulative = serializers.ListField(
        child=serializers.IntegerField(), help_text="Human annotations submitted by each day."
    )
    throughput = ThroughputOutputSerializer(many=True)
    labels = serializers.SerializerMethodField()
    time_per_chain = serializers.SerializerMethodField()
    agreement = serializers.SerializerMethodField()
    gold = serializers.SerializerMethodField(
        help_text="Gold scores per annotator and over time; null while there are none."
    )
    prelabels = PrelabelEffectOutputSerializer(
        allow_null=True,
        help_text="Verification: machine pre-labels shown against held out, with 95 % "
        "intervals; null until a pass was leased with verdicts.",
    )

    @extend_schema_field(DashboardProjectOutputSerializer)
    def get_project(self, dashboard: Dashboard) -> dict[str, Any]:
        return DashboardProjectOutputSerializer(self.context["project"]).data

    @extend_schema_field(LabelsOutputSerializer)
    def get_labels(self, dashboard: Dashboard) -> dict[str, Any]:
        return {
            "totals": {str(k): v for k, v in dashboard.label_totals.items()},
            "per_day": {str(k): v for k, v in dashboard.labels_per_day.items()},
        }

    @extend_schema_field(TimePerChainOutputSerializer)
    def get_time_per_chain(self, dashboard: Dashboard) -> dict[str, Any]:
        data = dict(DurationOutputSerializer(dashboard.duration).data)
        data["per_day"] = DurationOutputSerializer(dashboard.duration_per_day, many=True).data
        return data

    @extend_schema_field(DashboardAgreementOutputSerializer)
    def get_agreement(self, dashboard: Dashboard) -> dict[str, Any]:
        data = dict(AgreementOutputSerializer(dashboard.agreement).data)
        data["per_day"] = dashboard.alpha_per_day
        return data

    @extend_schema_field(GoldOutputSerializer(allow_null=True))
    def get_gold(self, dashboard: Dashboard) -> dict[str, Any] | None:
        if dashboard.gold is None:
            return None
        return GoldOutputSerializer(
            {"annotators": dashboard.gold, "per_day": dashboard.gold_accuracy_per_day}
        ).data


class DashboardApi(GenericAPIView):
    serializer_class = DashboardOutputSerializer
    queryset = Project.objects.none()  # the schema generator's; data comes from the selector

    @extend_schema(
        tags=["review"],
        operation_id="projects_dashboard_retrieve",
        summary="The lead dashboard's numbers (leads only)",
        description=(
            "Progress, throughput per annotator per day, label distribution, agreement, "
            "gold scores and time per chain, each with a series per day (`days`), and what "
            "machine pre-labels do to acceptance, time and gold accuracy (`prelabels`)."
        ),
        responses={
            200: DashboardOutputSerializer,
            403: OpenApiResponse(description="A member who is not a lead."),
            404: OpenApiResponse(description="No such project, or not a member."),
        },
    )
    def get(self, request: Request, project_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id, roles=LEADS)
        dashboard = project_dashboard(project=project)
        return Response(DashboardOutputSerializer(dashboard, context={"project": project}).data)
