"""Snapshots over HTTP. Thin: check access, validate, call one service or selector,
serialize.

- `GET /api/v1/projects/{id}/snapshots/` (leads and ML staff) lists the snapshots;
- `POST` the same URL (leads) freezes the current consensus into a new one, with the
  lead's options (finished chains only, minimum support, tie policy, split);
- `GET /api/v1/projects/{id}/snapshots/diff/?a=...&b=...` (leads) compares two versions.

Exports of a snapshot are in ``exports`` beside this module.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import (
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
)
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from annotation.api.fields import INT32_MAX
from annotation.api.inputs import InputSerializer
from annotation.api.permissions import LEADS, LEADS_AND_ML, project_for_request, request_user
from annotation.datasets.snapshot_diff import (
    DIFF_CHANGES,
    DIFF_PAGE_MAX,
    snapshot_diff_counts,
    snapshot_diff_rows,
)
from annotation.datasets.snapshot_options import (
    AMBIGUOUS_CHOICES,
    DEFAULT_AMBIGUOUS,
    DEFAULT_TIES,
    MIN_SUPPORT_MAX,
    TIE_POLICIES,
)
from annotation.datasets.snapshot_reads import (
    SNAPSHOT_KINDS,
    snapshot_get,
    snapshot_list,
    snapshot_options,
    snapshot_same_as,
)
from annotation.datasets.snapshots import snapshot_create
from annotation.models import MachineSource, Snapshot, SnapshotKind

NOT_A_MEMBER = OpenApiResponse(description="No such project, or the caller is not a member.")
WRONG_ROLE = OpenApiResponse(description="A member whose role does not allow this.")


class SnapshotCreateInputSerializer(InputSerializer):
    heldout_fraction = serializers.FloatField(
        default=0.2, min_value=0.0, max_value=0.99, help_text="Share of problems held out."
    )
    seed = serializers.IntegerField(
        default=0, min_value=0, max_value=INT32_MAX, help_text="Seed of the problem-level split."
    )
    ambiguous = serializers.ChoiceField(
        choices=AMBIGUOUS_CHOICES,
        default=DEFAULT_AMBIGUOUS,
        help_text="Default mapping of an ambiguous (0) step in TRL exports.",
    )
    finished_only = serializers.BooleanField(
        default=True,
        help_text="Only finished chains: their human passes reached the overlap, a lead "
        "ruled, gold, or (with include_imported) an import's labels on a chain no person "
        "has started; flagged chains left out. Off: every chain with a labeled step.",
    )
    include_imported = serializers.BooleanField(
        default=False,
        help_text="Also read the labels that came with an import (they then count by the "
        "project's import_labels rule, and finish a chain no person has started). Off: "
        "people's labels only (annotators' passes and leads' rulings).",
    )
    min_support = serializers.IntegerField(
        default=1,
        min_value=1,
        max_value=MIN_SUPPORT_MAX,
        help_text="Votes a step label needs; a step with fewer is left unlabeled. A lead's "
        "ruling settles a step whatever the count.",
    )
    ties = serializers.ChoiceField(
        choices=TIE_POLICIES,
        default=DEFAULT_TIES,
        help_text="A step whose votes tie: drop (left unlabeled), lowest (keeps the lowest "
        "rating), mark (keeps the lowest, listed in the row's tied steps).",
    )
    machine_sources = serializers.ListField(
        child=serializers.ChoiceField(choices=MachineSource.choices),
        default=list,
        max_length=len(MachineSource.values),
        help_text="Machine sources whose labels the snapshot takes, in order of preference: "
        "each row carries their labels (newest run per step) for exports, and a chain no "
        "person labeled takes its labels from the first that rated it. None by default.",
    )


class SnapshotListInputSerializer(InputSerializer):
    kind = serializers.ChoiceField(
        choices=SNAPSHOT_KINDS,
        required=False,
        help_text="dataset: taken by a person or the command line; training: taken by a "
        "training run for itself. Both when omitted.",
    )


class SnapshotOptionsOutputSerializer(serializers.Serializer):
    finished_only = serializers.BooleanField()
    include_imported = serializers.BooleanField()
    min_support = serializers.IntegerField()
    ties = serializers.ChoiceField(choices=TIE_POLICIES)
    heldout_fraction = serializers.FloatField()
    seed = serializers.IntegerField()
    machine_sources = serializers.ListField(child=serializers.ChoiceField(MachineSource.choices))


class SnapshotOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    kind = serializers.ChoiceField(
        choices=SNAPSHOT_KINDS,
        help_text="dataset: taken by a person or the command line; training: taken by a "
        "training run for itself. Each kind numbers its own versions.",
    )
    version = serializers.IntegerField(help_text="1, 2, 3 ... per project and kind.")
    # A field named as Field's own ``label`` attribute: the serializer's metaclass takes
    # declared fields off the class, so only the type checker sees the clash.
    label = serializers.CharField(  # type: ignore[assignment]
        help_text="The version as pages and file names say it: v3 for a dataset, t3 for a "
        "training run's own snapshot."
    )
    content_hash = serializers.CharField()
    created_at = serializers.DateTimeField()
    created_by = serializers.CharField(source="created_by.username", default=None)
    heldout_fraction = serializers.FloatField()
    seed = serializers.IntegerField()
    counts = serializers.JSONField(
        help_text="chains, steps_labeled, train_chains, heldout_chains, problems, "
        "label_counts, tied_steps, steps_below_support, unfinished_left_out (the last three "
        "in snapshots taken with options), sources {human, import}: chains whose labels "
        "rest on each source, imported_left_out: chains only an import labeled, left out "
        "(the last two in snapshots that chose their sources); with machine sources, "
        "machine {source: chains whose labels rest on it}, machine_rows {source: rows "
        "carrying its labels} and machine_agreed (rows whose labels routing accepted)"
    )
    meta = serializers.JSONField(
        help_text="The options, the consensus rules and the TRL ambiguous mapping."
    )
    options = serializers.SerializerMethodField(
        help_text="What the snapshot holds; a snapshot older than the options holds every "
        "labeled chain with ties at the lowest rating."
    )
    training_run = serializers.SerializerMethodField(
        help_text="The training run that took it for itself; null for a lead's dataset."
    )
    taken_for = serializers.CharField(
        help_text='The run that took it for itself, as pages say it ("training run #7", '
        '"evaluation run #3"); empty for a dataset.'
    )

    @extend_schema_field(SnapshotOptionsOutputSerializer)
    def get_options(self, snapshot: Snapshot) -> dict[str, Any]:
        return snapshot_options(snapshot=snapshot)

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_training_run(self, snapshot: Snapshot) -> int | None:
        run = snapshot.meta.get("training_run") if isinstance(snapshot.meta, dict) else None
        return run if isinstance(run, int) else None


def kind_field(side: str) -> serializers.ChoiceField:
    return serializers.ChoiceField(
        choices=SNAPSHOT_KINDS,
        default=SnapshotKind.DATASET,
        help_text=f"The kind of {side}'s snapshot (each kind numbers its own): dataset "
        "when omitted, training for a training run's own (t<N>).",
    )


class SnapshotCreatedOutputSerializer(SnapshotOutputSerializer):
    same_as = serializers.CharField(
        allow_null=True,
        help_text="The newest earlier snapshot of this kind with the same content hash (the "
        "same chains, splits and labels: the new version adds nothing), e.g. v3; null "
        "when none.",
    )


class SnapshotDiffInputSerializer(InputSerializer):
    a = serializers.IntegerField(min_value=1, max_value=INT32_MAX, help_text="Version A.")
    b = serializers.IntegerField(min_value=1, max_value=INT32_MAX, help_text="Version B.")
    a_kind = kind_field("A")
    b_kind = kind_field("B")
    change = serializers.ChoiceField(
        choices=DIFF_CHANGES, required=False, help_text="Only chains with this change."
    )
    after = serializers.IntegerField(
        default=0,
        min_value=0,
        max_value=2**63 - 1,
        help_text="The last chain id of the previous page (the counts come on the first).",
    )
    limit = serializers.IntegerField(default=50, min_value=1, max_value=DIFF_PAGE_MAX)


class SnapshotDiffCountsSerializer(serializers.Serializer):
    added = serializers.IntegerField(help_text="Chains in B and not in A.")
    removed = serializers.IntegerField(help_text="Chains in A and not in B.")
    labels_changed = serializers.IntegerField(help_text="Chains in both whose labels differ.")
    split_changed = serializers.IntegerField(
        help_text="Chains in both with the same labels in the other split."
    )
    unchanged = serializers.IntegerField()


class SnapshotDiffRowSerializer(serializers.Serializer):
    chain_id = serializers.IntegerField()
    change = serializers.ChoiceField(choices=DIFF_CHANGES)
    split_a = serializers.CharField(allow_null=True)
    split_b = serializers.CharField(allow_null=True)
    labels_a = serializers.ListField(
        child=serializers.IntegerField(allow_null=True), allow_null=True
    )
    labels_b = serializers.ListField(
        child=serializers.IntegerField(allow_null=True), allow_null=True
    )
    changed_steps = serializers.ListField(
        child=serializers.IntegerField(), help_text="Step indexes (0-based) whose label differs."
    )
    problem = serializers.CharField(help_text="The start of the problem text.")


class SnapshotDiffOutputSerializer(serializers.Serializer):
    a = SnapshotOutputSerializer()
    b = SnapshotOutputSerializer()
    counts = SnapshotDiffCountsSerializer(
        allow_null=True, help_text="On the first page (no `after`) only."
    )
    changes = SnapshotDiffRowSerializer(many=True)
    next_after = serializers.IntegerField(
        allow_null=True, help_text="Pass as `after` for the next page; null on the last."
    )


class SnapshotListCreateApi(GenericAPIView):
    serializer_class = SnapshotOutputSerializer
    # For the schema generator only: the rows come from ``snapshot_list``.
    queryset = Snapshot.objects.none()

    @extend_schema(
        tags=["datasets"],
        operation_id="projects_snapshots_list",
        summary="The project's dataset snapshots, newest first (leads and ML staff)",
        parameters=[SnapshotListInputSerializer],
        responses={
            200: SnapshotOutputSerializer(many=True),
            400: OpenApiResponse(description="Bad parameters."),
            403: WRONG_ROLE,
            404: NOT_A_MEMBER,
        },
    )
    def get(self, request: Request, project_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id, roles=LEADS_AND_ML)
        # The page number is the paginator's, not a filter: left out, as the schema does.
        params = request.query_params.copy()
        params.pop("page", None)
        data = SnapshotListInputSerializer(data=params)
        data.is_valid(raise_exception=True)
        page = self.paginate_queryset(snapshot_list(project=project, **data.validated_data))
        return self.get_paginated_response(SnapshotOutputSerializer(page, many=True).data)

    @extend_schema(
        tags=["datasets"],
        operation_id="projects_snapshots_create",
        summary="Freeze the current consensus labels into a new snapshot (leads only)",
        description=(
            "By default only finished chains, people's labels only (no imported ones), every "
            "step with at least one vote, tied "
            "steps left unlabeled, 20% of the problems held out with seed 0. The options "
            "are stored in the snapshot's `meta.options`."
        ),
        request=SnapshotCreateInputSerializer,
        responses={
            201: SnapshotCreatedOutputSerializer,
            400: OpenApiResponse(
                description="Bad input, or nothing to freeze once the options are applied."
            ),
            403: WRONG_ROLE,
            404: NOT_A_MEMBER,
        },
    )
    def post(self, request: Request, project_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id, roles=LEADS)
        data = SnapshotCreateInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        snapshot = snapshot_create(
            project=project, user=request_user(request), **data.validated_data
        )
        same = snapshot_same_as(snapshot=snapshot)
        body = {**SnapshotOutputSerializer(snapshot).data, "same_as": same.label if same else None}
        return Response(body, status=status.HTTP_201_CREATED)


class SnapshotDiffApi(GenericAPIView):
    serializer_class = SnapshotDiffOutputSerializer
    pagination_class = None

    @extend_schema(
        tags=["datasets"],
        operation_id="projects_snapshots_diff",
        summary="What changed from snapshot version A to version B (leads only)",
        description=(
            "Counts of the chains B adds, removes, relabels or moves to the other split "
            "(first page only), and the differing chains in chain order, `limit` at a "
            "time: pass `next_after` as `after` for the next page."
        ),
        parameters=[SnapshotDiffInputSerializer],
        responses={
            200: SnapshotDiffOutputSerializer,
            400: OpenApiResponse(description="Bad parameters."),
            403: WRONG_ROLE,
            404: OpenApiResponse(description="No such project or version, or not a member."),
        },
    )
    def get(self, request: Request, project_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id, roles=LEADS)
        data = SnapshotDiffInputSerializer(data=request.query_params)
        data.is_valid(raise_exception=True)
        params = data.validated_data
        a = snapshot_get(project=project, version=params["a"], kind=params["a_kind"])
        b = snapshot_get(project=project, version=params["b"], kind=params["b_kind"])
        if a is None or b is None:
            side = "a" if a is None else "b"
            missing = Snapshot(kind=params[f"{side}_kind"], version=params[side]).label
            raise NotFound(f"No snapshot {missing}.")
        rows = snapshot_diff_rows(
            a=a,
            b=b,
            change=params.get("change"),
            after_chain=params["after"],
            limit=params["limit"],
        )
        counts = snapshot_diff_counts(a=a, b=b) if params["after"] == 0 else None
        body = {
            "a": a,
            "b": b,
            "counts": counts,
            "changes": rows,
            "next_after": rows[-1].chain_id if len(rows) == params["limit"] else None,
        }
        return Response(SnapshotDiffOutputSerializer(body).data)
