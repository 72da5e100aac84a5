"""Review and agreement over HTTP. Thin: check access, validate, call one selector or
service, serialize.

- `GET /api/v1/projects/{id}/disagreements/` (leads): disputed chains no lead ruled on
  yet, worst first (`?include_resolved=true`: the ruled ones too);
- `GET /api/v1/chains/{id}/labels/` (leads): every current label side by side per step,
  the consensus, majority vote's and Dawid-Skene's labels, every revision with who
  and when, and beside them the machine sources' labels;
- `POST /api/v1/chains/{id}/adjudicate/` (leads): set adjudicated labels with a note;
- `GET /api/v1/projects/{id}/flags/` (leads): chains flagged as broken, with who flagged
  each, why and when;
- `POST /api/v1/chains/{id}/unflag/` (leads): put a flagged chain back in the queue
  (recorded: who and when);
- `GET /api/v1/projects/{id}/agreement/` (leads and ML staff): Krippendorff's alpha and
  first-error agreement, per project, annotator and pair.

Annotators get 403 on all of these (they must not see each other's labels); non-members
404, as everywhere (invariant 6).
"""

from __future__ import annotations

from typing import Any

from django.http import Http404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from annotation.api.fields import IdField
from annotation.api.inputs import InputSerializer
from annotation.api.permissions import LEADS, LEADS_AND_ML, project_for_request, request_user
from annotation.labeling.workspace import chain_flag_clear
from annotation.models import Annotation, Chain, ConsensusMethod, MachineSource
from annotation.quality.agreement import agreement_compute
from annotation.quality.review import AdjudicatedRating, adjudication_create
from annotation.quality.review_reads import chain_disagreements, chain_flags, chain_labels

NOT_A_MEMBER = OpenApiResponse(description="No such project or chain, or not a member.")
WRONG_ROLE = OpenApiResponse(description="A member whose role does not allow this.")


def chain_for_lead(*, request: Request, chain_id: int) -> Chain:
    """The chain if the caller leads its project: 404 for a missing chain or a
    non-member (the chain's existence is not revealed), 403 for another role."""
    project_id = Chain.objects.filter(pk=chain_id).values_list("project_id", flat=True).first()
    if project_id is None:
        raise Http404("No such chain.")
    project = project_for_request(request=request, project_id=project_id, roles=LEADS)
    chain = Chain.objects.select_related("problem", "flagged_by", "flag_cleared_by").get(
        pk=chain_id
    )
    chain.project = project
    return chain


# --- disagreements ---------------------------------------------------------------------


class DisagreementOutputSerializer(serializers.Serializer):
    chain = serializers.IntegerField(source="chain_id")
    problem = serializers.CharField()
    step_count = serializers.IntegerField()
    annotators = serializers.IntegerField(help_text="Annotators with a current pass.")
    disagreeing_steps = serializers.IntegerField(
        help_text="Steps two or more annotators rated differently."
    )
    spread = serializers.IntegerField(
        help_text="Sum over disagreeing steps of highest minus lowest rating."
    )
    adjudicated = serializers.BooleanField(
        help_text="Resolved: a lead's current ruling rates every disagreeing step (listed "
        "with include_resolved only)."
    )
    ruled_steps = serializers.IntegerField(
        help_text="Disagreeing steps the current ruling rates: a ruling that leaves one "
        "out resolves nothing."
    )
    agreement = serializers.FloatField(help_text="Share of the chain's steps nobody disputes.")
    by = serializers.ListField(
        child=serializers.CharField(), help_text="The annotators with a current pass."
    )


class DisagreementFilterSerializer(serializers.Serializer):
    annotator = serializers.CharField(
        required=False, default="", max_length=150, help_text="Only chains this user labeled."
    )
    max_agreement = serializers.FloatField(
        required=False,
        default=1.0,
        min_value=0.0,
        max_value=1.0,
        help_text="Only chains whose share of undisputed steps is at most this.",
    )
    include_resolved = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Also the resolved chains (every disagreeing step ruled), to revisit a ruling.",
    )


class DisagreementListApi(GenericAPIView):
    serializer_class = DisagreementOutputSerializer
    queryset = Chain.objects.none()  # the schema generator's; rows come from the selector

    @extend_schema(
        tags=["review"],
        operation_id="projects_disagreements_list",
        summary="Chains where annotators disagree and no lead ruled yet, worst first (leads only)",
        parameters=[DisagreementFilterSerializer],
        responses={
            200: DisagreementOutputSerializer(many=True),
            403: WRONG_ROLE,
            404: NOT_A_MEMBER,
        },
    )
    def get(self, request: Request, project_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id, roles=LEADS)
        filters = DisagreementFilterSerializer(data=request.query_params)
        filters.is_valid(raise_exception=True)
        # DRF pages a list as well as a queryset (its stubs say a queryset).
        disagreements: Any = chain_disagreements(project=project, **filters.validated_data)
        page = self.paginate_queryset(disagreements)
        return self.get_paginated_response(DisagreementOutputSerializer(page, many=True).data)


# --- labels of one chain ---------------------------------------------------------------


class RevisionOutputSerializer(serializers.Serializer):
    annotation = serializers.IntegerField(source="annotation_id")
    source = serializers.CharField(  # type: ignore[assignment]  # a field, not Field.source
        help_text="human, import or adjudication"
    )
    by = serializers.CharField(help_text='username, "import:<source>" or "adjudication:<lead>"')
    created_at = serializers.DateTimeField()
    supersedes = serializers.IntegerField(source="supersedes_id", allow_null=True)
    superseded_by = serializers.IntegerField(source="superseded_by_id", allow_null=True)
    current = serializers.BooleanField(help_text="Whether consensus counts this revision.")
    note = serializers.CharField()
    rewrite = serializers.CharField()
    ratings = serializers.DictField(
        child=serializers.IntegerField(), help_text="step index -> rating"
    )
    comments = serializers.DictField(child=serializers.CharField(), help_text="step index -> text")


class MajorityOutputSerializer(serializers.Serializer):
    label = serializers.IntegerField(  # type: ignore[assignment]  # a field, not Field.label
        source="majority", allow_null=True, help_text="On a tie, the lowest tied rating."
    )
    support = serializers.FloatField(
        source="majority_support", allow_null=True, help_text="Share of the votes behind it."
    )
    tied = serializers.BooleanField(source="majority_tied", help_text="The votes tie.")


class DawidSkeneOutputSerializer(serializers.Serializer):
    label = serializers.IntegerField(  # type: ignore[assignment]  # a field, not Field.label
        help_text="The most probable rating; on a tie the lowest."
    )
    probability = serializers.FloatField(help_text="Its posterior probability.")
    tied = serializers.BooleanField(help_text="Another rating is as probable.")


class StepLabelsOutputSerializer(serializers.Serializer):
    step = serializers.IntegerField(source="step_id")
    index = serializers.IntegerField()
    text = serializers.CharField()
    ratings = serializers.ListField(
        child=serializers.IntegerField(allow_null=True),
        help_text="One per entry of `columns`, null where that voter did not rate the step.",
    )
    consensus = serializers.IntegerField(
        allow_null=True,
        help_text="The label training uses; on a tie, the tie rule's pick (the lowest).",
    )
    support = serializers.FloatField(allow_null=True)
    tied = serializers.BooleanField(
        help_text="The votes tie: there is no consensus to take, a lead rules."
    )
    majority = MajorityOutputSerializer(
        source="*", help_text="Majority vote over the counted votes (no adjudication)."
    )
    dawid_skene = DawidSkeneOutputSerializer(
        allow_null=True,
        help_text="Dawid-Skene's label over the counted votes (no adjudication), with each "
        "voter weighed by the reliability learned from the project's labels and gold "
        "chains; null where nobody counted rated the step.",
    )


class ChainFlagOutputSerializer(serializers.Serializer):
    """A chain's flag as leads see it: who flagged it through their lease, why, when, and
    who cleared the last flag. Never shown to annotators."""

    chain = serializers.IntegerField(source="pk")
    is_flagged = serializers.BooleanField(help_text="Out of the queue as broken right now.")
    flagged_by = serializers.CharField(
        source="flagged_by.username",
        allow_null=True,
        default=None,
        help_text="Who flagged it last; null if never flagged (or the user is gone).",
    )
    flag_reason = serializers.CharField(help_text="What they said is broken.")
    flagged_at = serializers.DateTimeField(allow_null=True)
    cleared_by = serializers.CharField(
        source="flag_cleared_by.username",
        allow_null=True,
        default=None,
        help_text="The lead who last put it back in the queue.",
    )
    cleared_at = serializers.DateTimeField(source="flag_cleared_at", allow_null=True)


class MachineVerdictOutputSerializer(serializers.Serializer):
    rating = serializers.IntegerField(
        allow_null=True,
        help_text="The verdict, +1 / 0 / -1; null where the source gives a value only.",
    )
    value = serializers.FloatField(
        allow_null=True, help_text="P(step correct): a Monte-Carlo share, the PRM's probability."
    )
    confidence = serializers.FloatField(allow_null=True)
    hard = serializers.BooleanField(
        allow_null=True, help_text="Some rollout from the step reached the answer (Math-Shepherd)."
    )
    detail = serializers.DictField(help_text="The source's own counts (rollouts, reached, votes).")
    model = serializers.CharField()
    config_hash = serializers.CharField()
    run_kind = serializers.CharField()
    run_id = serializers.IntegerField()
    created_at = serializers.DateTimeField()


class MachineColumnOutputSerializer(serializers.Serializer):
    source = serializers.ChoiceField(  # type: ignore[assignment]  # a field, not Field.source
        choices=MachineSource.choices
    )
    name = serializers.CharField(help_text="The source, in words.")
    first_error = serializers.IntegerField(
        allow_null=True,
        help_text="Index of the first step it rates -1; -1 for none; null with no verdict.",
    )
    agrees_with_consensus = serializers.BooleanField(
        allow_null=True,
        help_text="Its first error is the human consensus's; null where either is unknown.",
    )
    runs = serializers.ListField(
        child=serializers.CharField(), help_text='The runs shown, "<kind>:<id>".'
    )
    steps = serializers.ListField(
        source="verdicts",
        child=MachineVerdictOutputSerializer(allow_null=True),
        help_text="One per step: the newest run's label, null where it gave none.",
    )


class ChainLabelsOutputSerializer(serializers.Serializer):
    chain = serializers.IntegerField(source="chain.pk")
    project = serializers.IntegerField(source="chain.project_id")
    problem = serializers.CharField(source="chain.problem.text")
    final_answer = serializers.CharField(source="chain.final_answer")
    reference_answer = serializers.CharField(
        source="chain.problem.reference_answer", help_text="The problem's answer, when known."
    )
    columns = RevisionOutputSerializer(many=True, help_text="The current revisions.")
    consensus_method = serializers.ChoiceField(
        source="method",
        choices=ConsensusMethod.choices,
        help_text="The project's consensus method: which of `majority` and `dawid_skene` "
        "each step's `consensus` follows.",
    )
    reliability = serializers.DictField(
        child=serializers.FloatField(),
        help_text="Dawid-Skene's estimated accuracy (0..1) of this chain's voters, by `by`.",
    )
    steps = StepLabelsOutputSerializer(many=True)
    history = RevisionOutputSerializer(many=True, help_text="Every revision, oldest first.")
    flag = ChainFlagOutputSerializer(source="chain")
    machine = MachineColumnOutputSerializer(
        many=True,
        help_text="Machine sources' labels (Monte-Carlo, judge, PRM, import), one per source: "
        "never votes, never in consensus or agreement.",
    )


class ChainLabelsApi(GenericAPIView):
    serializer_class = ChainLabelsOutputSerializer
    queryset = Chain.objects.none()

    @extend_schema(
        tags=["review"],
        operation_id="chains_labels_retrieve",
        summary="Every label of a chain side by side, with consensus and history (leads only)",
        responses={200: ChainLabelsOutputSerializer, 403: WRONG_ROLE, 404: NOT_A_MEMBER},
    )
    def get(self, request: Request, chain_id: int) -> Response:
        chain = chain_for_lead(request=request, chain_id=chain_id)
        return Response(ChainLabelsOutputSerializer(chain_labels(chain=chain)).data)


# --- adjudication ----------------------------------------------------------------------


class AdjudicatedRatingInputSerializer(InputSerializer):
    step = IdField(help_text="Step id.")
    rating = serializers.ChoiceField(choices=[-1, 0, 1])


class AdjudicateInputSerializer(InputSerializer):
    ratings = AdjudicatedRatingInputSerializer(many=True, allow_empty=False)
    note = serializers.CharField(required=False, allow_blank=True, default="", max_length=10_000)


class AdjudicationOutputSerializer(serializers.Serializer):
    annotation = serializers.IntegerField(source="pk")
    chain = serializers.IntegerField(source="chain_id")
    supersedes = serializers.IntegerField(source="supersedes_id", allow_null=True)
    note = serializers.CharField()
    created_at = serializers.DateTimeField()
    by = serializers.CharField(source="annotator.username")


class AdjudicateApi(GenericAPIView):
    serializer_class = AdjudicateInputSerializer
    queryset = Annotation.objects.none()

    @extend_schema(
        tags=["review"],
        operation_id="chains_adjudicate",
        summary="Set the adjudicated labels of a chain with a note (leads only)",
        description=(
            "A new revision: it supersedes the chain's previous adjudication and wins "
            "consensus on the steps it rates."
        ),
        request=AdjudicateInputSerializer,
        responses={
            201: AdjudicationOutputSerializer,
            400: OpenApiResponse(description="Bad ratings: unknown step, twice, out of range."),
            403: WRONG_ROLE,
            404: NOT_A_MEMBER,
        },
    )
    def post(self, request: Request, chain_id: int) -> Response:
        chain = chain_for_lead(request=request, chain_id=chain_id)
        data = AdjudicateInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        annotation = adjudication_create(
            chain=chain,
            lead=request_user(request),
            ratings=[
                AdjudicatedRating(step_id=item["step"], rating=int(item["rating"]))
                for item in data.validated_data["ratings"]
            ],
            note=data.validated_data["note"],
        )
        return Response(
            AdjudicationOutputSerializer(annotation).data, status=status.HTTP_201_CREATED
        )


# --- flags ------------------------------------------------------------------------------


class FlagListApi(GenericAPIView):
    serializer_class = ChainFlagOutputSerializer
    queryset = Chain.objects.none()  # the schema generator's; rows come from the selector

    @extend_schema(
        tags=["review"],
        operation_id="projects_flags_list",
        summary="Chains flagged as broken, newest flag first (leads only)",
        description="Each with who flagged it through their lease, the reason they gave, "
        "and when. POST chains/{id}/unflag/ puts one back in the queue.",
        responses={
            200: ChainFlagOutputSerializer(many=True),
            403: WRONG_ROLE,
            404: NOT_A_MEMBER,
        },
    )
    def get(self, request: Request, project_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id, roles=LEADS)
        page = self.paginate_queryset(chain_flags(project=project))
        return self.get_paginated_response(ChainFlagOutputSerializer(page, many=True).data)


class ChainUnflagApi(GenericAPIView):
    serializer_class = ChainFlagOutputSerializer
    queryset = Chain.objects.none()

    @extend_schema(
        tags=["review"],
        operation_id="chains_unflag",
        summary="Clear a chain's flag: back in the queue (leads only)",
        description="Records who cleared it and when; who flagged it and why stay. "
        "Clearing a chain that is not flagged changes nothing.",
        request=None,
        responses={200: ChainFlagOutputSerializer, 403: WRONG_ROLE, 404: NOT_A_MEMBER},
    )
    def post(self, request: Request, chain_id: int) -> Response:
        chain = chain_for_lead(request=request, chain_id=chain_id)
        cleared = chain_flag_clear(chain=chain, user=request_user(request))
        return Response(ChainFlagOutputSerializer(cleared).data)


# --- agreement -------------------------------------------------------------------------


class AnnotatorAgreementOutputSerializer(serializers.Serializer):
    annotator = serializers.IntegerField(source="annotator_id")
    username = serializers.CharField()
    ratings = serializers.IntegerField(
        source="values", help_text="Ratings on steps someone else rated too."
    )
    alpha = serializers.FloatField(allow_null=True)
    first_error_pairs = serializers.IntegerField()
    first_error_agreement = serializers.FloatField(source="first_error_share", allow_null=True)


class PairAgreementOutputSerializer(serializers.Serializer):
    annotator_a = serializers.IntegerField()
    annotator_b = serializers.IntegerField()
    username_a = serializers.CharField()
    username_b = serializers.CharField()
    steps = serializers.IntegerField(help_text="Steps both rated.")
    alpha = serializers.FloatField(allow_null=True)
    first_error_pairs = serializers.IntegerField(help_text="Chains both labeled.")
    first_error_agreement = serializers.FloatField(source="first_error_share", allow_null=True)


class AgreementOutputSerializer(serializers.Serializer):
    alpha = serializers.FloatField(
        allow_null=True, help_text="Krippendorff's alpha, ordinal; null when undefined."
    )
    ratings = serializers.IntegerField()
    pairable_ratings = serializers.IntegerField()
    steps = serializers.IntegerField(help_text="Steps rated by two or more annotators.")
    coincidences = serializers.ListField(
        child=serializers.ListField(child=serializers.FloatField()),
        help_text="Coincidence matrix, rows and columns -1, 0, +1.",
    )
    first_error_pairs = serializers.IntegerField()
    first_error_agreement = serializers.FloatField(source="first_error_share", allow_null=True)
    annotators = AnnotatorAgreementOutputSerializer(many=True)
    pairs = PairAgreementOutputSerializer(many=True)


class AgreementApi(GenericAPIView):
    serializer_class = AgreementOutputSerializer
    queryset = Chain.objects.none()

    @extend_schema(
        tags=["review"],
        operation_id="projects_agreement_retrieve",
        summary="Inter-annotator agreement (leads and ML staff)",
        description=(
            "Krippendorff's alpha (ordinal, over -1/0/+1) on steps, per project, annotator "
            "and pair, over current human labels; steps not asked for (after a first error) "
            "are missing, not disagreement. First-error agreement is the share of annotator "
            "pairs on a chain that put the first error at the same step (-1 = none)."
        ),
        responses={200: AgreementOutputSerializer, 403: WRONG_ROLE, 404: NOT_A_MEMBER},
    )
    def get(self, request: Request, project_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id, roles=LEADS_AND_ML)
        return Response(AgreementOutputSerializer(agreement_compute(project=project)).data)
