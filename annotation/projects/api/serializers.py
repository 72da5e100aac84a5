"""Input and output serializers of the projects and members endpoints."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from django.contrib.auth import get_user_model
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field, inline_serializer
from rest_framework import serializers

from annotation.api.inputs import InputSerializer
from annotation.guidelines import GUIDELINES_MAX_CHARS, RENDER_CPU_SECONDS
from annotation.models import (
    ConsensusMethod,
    ImportLabels,
    LabelingMode,
    MachineSource,
    Membership,
    Project,
    Role,
    StepSplit,
)
from annotation.routing.services import ROUTING_FIELDS
from annotation.routing.sources import machine_source_warnings

# Routing's rules are for leads and ML staff: an annotator never learns that some chains
# are spot checks of machine agreement (they must look like any other chain).
ROUTING_HIDDEN = "Null for annotators."

GUIDELINES_HELP = (
    f"Markdown (raw HTML is shown as text), at most {GUIDELINES_MAX_CHARS:,} characters "
    f"that render within {RENDER_CPU_SECONDS:g} s of CPU (else a 400)."
)


# The optional import and gold settings, which create and update take alike. A comment,
# not a docstring: drf-spectacular would show a docstring as both schemas' description.
class _ProjectSettingsInputSerializer(InputSerializer):
    import_labels = serializers.ChoiceField(
        choices=ImportLabels.choices,
        required=False,
        help_text="How labels that came in with an import count toward consensus.",
    )
    consensus = serializers.ChoiceField(
        choices=ConsensusMethod.choices,
        required=False,
        help_text="How a step's votes become the label snapshots and training use: "
        '"majority" (majority vote; a tie goes to the lowest rating and is marked tied) or '
        '"dawid_skene" (Dawid-Skene: each annotator\'s reliability is learned from all the '
        "project's labels and its gold chains' answer keys, and a step's label is the "
        "most probable one, its posterior probability as support). An adjudication wins "
        "under either; the review page shows both side by side.",
    )
    gold_rate = serializers.FloatField(
        required=False,
        min_value=0.0,
        max_value=1.0,
        help_text="Share of claims that get a gold chain while the annotator has unseen ones.",
    )
    screening_chains = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=1000,
        help_text="Gold chains an annotator must pass before real work; 0: no screening.",
    )
    screening_pass_accuracy = serializers.FloatField(
        required=False,
        min_value=0.0,
        max_value=1.0,
        help_text="Step accuracy on the screening chains needed to pass.",
    )
    leads_rule_own_labels = serializers.BooleanField(
        required=False,
        help_text="A lead may rule on a disagreement they labeled themselves.",
    )
    prelabels = serializers.BooleanField(
        required=False,
        help_text="Verification: the workspace shows each step's machine verdict (from "
        "prelabel_source), which annotators confirm or override; each rating records which.",
    )
    prelabel_source = serializers.ChoiceField(
        choices=MachineSource.choices,
        required=False,
        help_text='The machine source whose verdicts are shown (default "judge").',
    )
    prelabel_holdout = serializers.FloatField(
        required=False,
        min_value=0.0,
        max_value=1.0,
        help_text="Share of chains served without pre-labels, to measure how much they sway "
        "annotators (the dashboard compares both); fixed per chain and annotator.",
    )


# Routing's rules (issue 23, ``annotation.routing.services``); a change sends a routing
# pass. Only on update: a new project has no machine labels to route. (A comment, as above.)
class _ProjectRoutingInputSerializer(InputSerializer):
    routing_sources = serializers.ListField(
        child=serializers.CharField(max_length=32),
        required=False,
        allow_empty=True,
        max_length=len(MachineSource.values),
        help_text="The machine sources whose first errors routing compares, each at most "
        f"once, of {', '.join(MachineSource.values)}; two or more must agree to accept a "
        "chain. Empty: routing is off.",
    )
    routing_accept = serializers.BooleanField(
        required=False,
        help_text="Accept chains every usable routing source agrees on without a person "
        "(marked machine-agreed in every export); off, agreement only tells.",
    )
    routing_spot_check = serializers.FloatField(
        required=False,
        min_value=0.0,
        max_value=1.0,
        help_text="Share of machine-agreed chains still sent to a person as a spot check "
        "(fixed per chain), which measures how often agreement is wrong.",
    )
    routing_min_kappa = serializers.FloatField(
        required=False,
        min_value=-1.0,
        max_value=1.0,
        help_text="A source whose Cohen's kappa against people's consensus is below this, or "
        "not measured yet, routes nothing.",
    )
    routing_second_look = serializers.FloatField(
        required=False,
        min_value=0.0,
        max_value=1.0,
        help_text="A person's label the active PRM contradicts with at least this confidence "
        "gets a second look by another annotator; 0: off.",
    )

    def validate_routing_sources(self, value: list[str]) -> list[str]:
        unknown = sorted({v for v in value if v not in MachineSource.values})
        if unknown:
            raise serializers.ValidationError(
                f"Not a machine source: {', '.join(unknown)}. "
                f"Choose among {', '.join(MachineSource.values)}."
            )
        if len(set(value)) != len(value):
            raise serializers.ValidationError("Each source at most once.")
        return value


class ProjectCreateInputSerializer(_ProjectSettingsInputSerializer):
    name = serializers.CharField(max_length=200)
    overlap = serializers.IntegerField(min_value=1, max_value=50)
    labeling_mode = serializers.ChoiceField(choices=LabelingMode.choices)
    guidelines = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=GUIDELINES_MAX_CHARS,
        help_text=GUIDELINES_HELP,
    )
    lease_minutes = serializers.IntegerField(
        required=False, min_value=1, max_value=24 * 60, default=30
    )
    step_split = serializers.ChoiceField(
        choices=StepSplit.choices, required=False, default=StepSplit.NEWLINE
    )
    show_reference_answer = serializers.BooleanField(required=False, default=True)


class ProjectUpdateInputSerializer(_ProjectSettingsInputSerializer, _ProjectRoutingInputSerializer):
    name = serializers.CharField(
        required=False,
        max_length=200,
        help_text="A new name, unique on the server: commands, pages and exports made from "
        "now on use it (files exported before keep theirs).",
    )
    guidelines = serializers.CharField(
        required=False, allow_blank=True, max_length=GUIDELINES_MAX_CHARS, help_text=GUIDELINES_HELP
    )
    overlap = serializers.IntegerField(required=False, min_value=1, max_value=50)
    labeling_mode = serializers.ChoiceField(choices=LabelingMode.choices, required=False)
    lease_minutes = serializers.IntegerField(required=False, min_value=1, max_value=24 * 60)
    step_split = serializers.ChoiceField(choices=StepSplit.choices, required=False)
    show_reference_answer = serializers.BooleanField(required=False)


class ProjectProgressSerializer(serializers.Serializer):
    chains_total = serializers.IntegerField()
    chains_finished = serializers.IntegerField(help_text="Chains with `overlap` finished passes.")
    annotations_needed = serializers.IntegerField(help_text="chains_total x overlap")
    annotations_finished = serializers.IntegerField(
        help_text="Finished human annotations, at most `overlap` counted per chain."
    )
    percent = serializers.SerializerMethodField()
    as_of = serializers.SerializerMethodField(
        help_text="For annotators: the day whose first reading these figures are, the same "
        "all day (live figures would tell gold chains from real ones). Null: live."
    )

    @extend_schema_field(OpenApiTypes.DATE)
    def get_as_of(self, project: Project) -> str | None:
        return getattr(project, "progress_as_of", None)

    def get_percent(self, project: Project) -> float:
        needed = project.annotations_needed  # type: ignore[attr-defined]
        if not needed:
            return 0.0
        return round(100.0 * project.annotations_finished / needed, 1)  # type: ignore[attr-defined]


class ProjectOutputSerializer(serializers.ModelSerializer):
    """A project as returned by the list, the detail and create. Needs the annotations
    of ``project_list_with_progress``."""

    role = serializers.CharField(source="my_role", help_text="The caller's role.")
    progress = serializers.SerializerMethodField()
    routing_sources = serializers.ListField(
        child=serializers.CharField(),
        read_only=True,
        allow_null=True,
        help_text=f"{ROUTING_HIDDEN} The machine sources routing compares.",
    )
    routing_accept = serializers.BooleanField(
        read_only=True,
        allow_null=True,
        help_text=f"{ROUTING_HIDDEN} Machine-agreed chains skip people.",
    )
    routing_spot_check = serializers.FloatField(
        read_only=True,
        allow_null=True,
        help_text=f"{ROUTING_HIDDEN} Share of them sent to a person anyway.",
    )
    routing_min_kappa = serializers.FloatField(
        read_only=True,
        allow_null=True,
        help_text=f"{ROUTING_HIDDEN} The kappa a source needs to route.",
    )
    routing_second_look = serializers.FloatField(
        read_only=True,
        allow_null=True,
        help_text=f"{ROUTING_HIDDEN} PRM confidence that asks for a second look; 0: off.",
    )

    class Meta:
        model = Project
        fields = [
            "id",
            "name",
            "role",
            "overlap",
            "labeling_mode",
            "step_split",
            "lease_minutes",
            "show_reference_answer",
            "leads_rule_own_labels",
            "import_labels",
            "consensus",
            "gold_rate",
            "screening_chains",
            "screening_pass_accuracy",
            "prelabels",
            "prelabel_source",
            "prelabel_holdout",
            *ROUTING_FIELDS,
            "created_at",
            "progress",
        ]
        read_only_fields = fields

    def to_representation(self, instance: Project) -> dict[str, Any]:
        data: dict[str, Any] = super().to_representation(instance)
        if getattr(instance, "my_role", None) not in (Role.LEAD, Role.ML):
            data.update(dict.fromkeys(ROUTING_FIELDS))
        return data

    @extend_schema_field(ProjectProgressSerializer)
    def get_progress(self, project: Project) -> dict[str, Any]:
        return ProjectProgressSerializer(project).data


# One warning of ``warnings`` (``routing.sources.SourceWarning``). Inline: a field named
# "source" cannot be a serializer's attribute (every field has a ``source``).
SOURCE_WARNINGS = inline_serializer(
    "SourceWarning",
    fields={
        "field": serializers.CharField(
            help_text="The setting: prelabel_source or routing_sources."
        ),
        "source": serializers.CharField(help_text="The machine source it names."),
        "message": serializers.CharField(
            help_text="Why it shows nothing, and what writes its labels."
        ),
    },
    many=True,
    allow_null=True,
)


class ProjectDetailOutputSerializer(ProjectOutputSerializer):
    warnings = serializers.SerializerMethodField(
        help_text=f"{ROUTING_HIDDEN} Settings that name a machine source with no label in the "
        "project yet (the pre-label source while pre-labels are on, each routing source): "
        "saved as asked, but it shows no verdict and routes nothing until labels exist."
    )

    class Meta(ProjectOutputSerializer.Meta):
        fields = [*ProjectOutputSerializer.Meta.fields, "guidelines", "warnings"]
        read_only_fields = fields

    @extend_schema_field(SOURCE_WARNINGS)
    def get_warnings(self, project: Project) -> list[dict[str, Any]] | None:
        if getattr(project, "my_role", None) not in (Role.LEAD, Role.ML):
            return None
        return [asdict(warning) for warning in machine_source_warnings(project=project)]


class MemberAddInputSerializer(InputSerializer):
    username = serializers.CharField(max_length=150)
    role = serializers.ChoiceField(choices=Role.choices)

    def validate_username(self, value: str) -> Any:
        user = get_user_model().objects.filter(username=value, is_active=True).first()
        if user is None:
            raise serializers.ValidationError(
                f"No active user named {value!r}. Invite them instead: by e-mail, "
                "they choose a username and a password."
            )
        return user


class MemberOutputSerializer(serializers.ModelSerializer):
    user_id = serializers.IntegerField(source="user.id")
    username = serializers.CharField(source="user.username")

    class Meta:
        model = Membership
        fields = ["user_id", "username", "role", "created_at"]
        read_only_fields = fields


class MemberRoleInputSerializer(InputSerializer):
    role = serializers.ChoiceField(choices=Role.choices)


# Guidelines past this are refused by the preview only: rendering is the one cost the
# endpoint has, and any signed-in user may call it.


class GuidelinesPreviewInputSerializer(InputSerializer):
    guidelines = serializers.CharField(
        allow_blank=True,
        trim_whitespace=False,
        max_length=GUIDELINES_MAX_CHARS,
        help_text=GUIDELINES_HELP,
    )


class GuidelinesPreviewOutputSerializer(serializers.Serializer):
    html = serializers.CharField(
        help_text="The guidelines as the workspace and the project pages show them."
    )
