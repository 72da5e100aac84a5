"""Invitations over HTTP, for a project's leads: the open ones
(``GET /api/v1/projects/{id}/invites/``), one person (``POST`` the same), many from a
pasted list or a CSV file's text (``POST .../invites/bulk/``, whole or not at all), and
revoking one (``POST .../invites/{invite_id}/revoke/``). Thin: check access, validate,
call one service, serialize. A link is in the answer that creates it and nowhere else:
only its secret's hash is stored. The person invited accepts at ``/invite/``
(``annotation.projects.invite_views``)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.models import BaseUserManager
from django.http import HttpRequest
from django.urls import reverse
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from annotation.api.inputs import InputSerializer
from annotation.api.parsers import DEFAULT_JSON_LIMITS, JsonLimits, text_field_bytes
from annotation.api.permissions import LEADS, project_for_request, request_user
from annotation.models import Invite, InviteState, Role
from annotation.projects.invite_lists import (
    MAX_LIST_CHARS,
    NAME_MAX,
    USERNAME_MAX,
    InviteListInvalid,
    InviteRow,
    invite_rows_parse,
)
from annotation.projects.invite_reads import invite_get, invite_list_open, invite_state
from annotation.projects.invites import invite_revoke, invites_create

NOT_A_LEAD = OpenApiResponse(description="A member who is not a lead of the project.")
NOT_A_MEMBER = OpenApiResponse(description="No such project, or the caller is not a member.")


def _days_field() -> serializers.IntegerField:
    return serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=settings.STEPLAB_INVITE_MAX_DAYS,
        default=settings.STEPLAB_INVITE_DAYS,
        help_text="How many days the link works (STEPLAB_INVITE_DAYS by default).",
    )


class InviteCreateInputSerializer(InputSerializer):
    email = serializers.EmailField(
        required=False,
        allow_blank=True,
        help_text="The person's address: the link is e-mailed to it. Either this or `username`.",
    )
    username = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=USERNAME_MAX,
        help_text="An existing account: only it can accept. Either this or `email`.",
    )
    role = serializers.ChoiceField(choices=Role.choices)
    name = serializers.CharField(
        required=False, allow_blank=True, max_length=NAME_MAX, help_text="Shown to leads."
    )
    expires_in_days = _days_field()

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs = super().validate(attrs)
        email, username = attrs.get("email", "").strip(), attrs.get("username", "").strip()
        if bool(email) == bool(username):
            raise serializers.ValidationError(
                {"email": ["Give an e-mail address or a username (one of the two)."]}
            )
        return {**attrs, "email": BaseUserManager.normalize_email(email), "username": username}


class InviteListInputSerializer(InputSerializer):
    text = serializers.CharField(
        max_length=MAX_LIST_CHARS,
        trim_whitespace=False,
        help_text="People to invite, one a line: an e-mail address or a username, then "
        "optionally a role and a name, separated by commas, semicolons or tabs; or a CSV "
        "file's text whose header row names its columns (email, username, role, name).",
    )
    role = serializers.ChoiceField(
        choices=Role.choices,
        default=Role.ANNOTATOR,
        help_text="The role of a line that names none.",
    )
    expires_in_days = _days_field()


class InviteRevokeInputSerializer(InputSerializer):
    """No fields: a body that names any is a 400, not a silent no-op."""


class InviteOutputSerializer(serializers.ModelSerializer):
    username = serializers.CharField(
        source="user.username",
        allow_null=True,
        default=None,
        help_text="The account an invitation by username is for (null for an address).",
    )
    state = serializers.SerializerMethodField()
    invited_by = serializers.CharField(source="invited_by.username", allow_null=True, default=None)

    class Meta:
        model = Invite
        fields = [
            "id",
            "email",
            "username",
            "name",
            "role",
            "state",
            "created_at",
            "expires_at",
            "invited_by",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.ChoiceField(choices=InviteState.choices))
    def get_state(self, invite: Invite) -> str:
        return str(getattr(invite, "state", None) or invite_state(invite))


class InviteIssuedOutputSerializer(serializers.Serializer):
    invite = InviteOutputSerializer()
    link = serializers.CharField(
        help_text="The one-time link to give the person: shown here once, never stored."
    )
    emailed = serializers.BooleanField(help_text="The link was e-mailed to the person.")
    email_error = serializers.CharField(
        help_text="Why it was not e-mailed although an address is known; empty otherwise."
    )


class InviteListOutputSerializer(serializers.Serializer):
    count = serializers.IntegerField()
    invites = InviteIssuedOutputSerializer(many=True)


class InviteRowErrorSerializer(serializers.Serializer):
    line = serializers.IntegerField(help_text="1-based line of the list.")
    who = serializers.CharField(help_text="The address or username on that line.")
    message = serializers.CharField()


class InviteListErrorSerializer(serializers.Serializer):
    detail = serializers.CharField(help_text="Why nobody was invited, in one sentence.")
    errors = InviteRowErrorSerializer(  # type: ignore[assignment]  # a field, not .errors
        many=True, help_text="Every line that cannot be invited, in list order."
    )


def _link_base(request: HttpRequest) -> str:
    """Where links point: STEPLAB_SITE_URL when set (the address people use), else the
    address the lead's request came to."""
    path = reverse("invite")
    if settings.STEPLAB_SITE_URL:
        return settings.STEPLAB_SITE_URL + path
    return request.build_absolute_uri(path)


class InviteListCreateApi(GenericAPIView):
    queryset = Invite.objects.none()  # the schema generator's; access is checked per call
    serializer_class = InviteOutputSerializer

    @extend_schema(
        tags=["projects"],
        operation_id="projects_invites_list",
        summary="The project's open invitations (leads only)",
        description="Invitations neither accepted nor revoked, newest first: `pending`, "
        "or `expired` (past its date; inviting the person again replaces it).",
        responses={200: InviteOutputSerializer(many=True), 403: NOT_A_LEAD, 404: NOT_A_MEMBER},
    )
    def get(self, request: Request, project_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id, roles=LEADS)
        page = self.paginate_queryset(invite_list_open(project=project))
        return self.get_paginated_response(InviteOutputSerializer(page, many=True).data)

    @extend_schema(
        tags=["projects"],
        operation_id="projects_invites_create",
        summary="Invite one person (leads only)",
        description="Makes a one-time link that lets the person join the project with "
        "`role`: by `email`, a new person sets a username and a password (someone signed "
        "in joins with their account); by `username`, only that account can accept. The "
        "link is e-mailed where an address is known.",
        request=InviteCreateInputSerializer,
        responses={
            201: InviteIssuedOutputSerializer,
            400: OpenApiResponse(
                description="Invalid input, an unknown account, a member already, or a "
                "pending invitation for the same person; the body names the field."
            ),
            403: NOT_A_LEAD,
            404: NOT_A_MEMBER,
        },
    )
    def post(self, request: Request, project_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id, roles=LEADS)
        data = InviteCreateInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = data.validated_data
        row = InviteRow(
            line=1,
            email=fields["email"],
            username=fields["username"],
            role=fields["role"],
            name=fields.get("name", "").strip(),
        )
        try:
            (issued,) = invites_create(
                project=project,
                invited_by=request_user(request),
                rows=[row],
                days=fields["expires_in_days"],
                link_base=_link_base(request),
            )
        except InviteListInvalid as exc:
            field = "email" if row.email else "username"
            messages = [error.message for error in exc.errors] or [exc.detail]
            raise serializers.ValidationError({field: messages}) from None
        return Response(InviteIssuedOutputSerializer(issued).data, status=status.HTTP_201_CREATED)


class InviteListUploadApi(GenericAPIView):
    serializer_class = InviteListOutputSerializer
    # The list is one text of up to MAX_LIST_CHARS characters, however escaped.
    json_limits = JsonLimits(
        max_depth=DEFAULT_JSON_LIMITS.max_depth,
        max_values=DEFAULT_JSON_LIMITS.max_values,
        max_string_bytes=text_field_bytes(MAX_LIST_CHARS),
    )

    @extend_schema(
        tags=["projects"],
        operation_id="projects_invites_bulk",
        summary="Invite many people from a list or a CSV file's text (leads only)",
        description="Everyone on the list, or nobody: any bad line (an unknown role or "
        "account, a bad address, a member already, a pending invitation, someone named "
        "twice) answers 400 with every bad line and invites no one. At most "
        "STEPLAB_INVITE_MAX_ROWS people (200 by default).",
        request=InviteListInputSerializer,
        responses={
            201: InviteListOutputSerializer,
            400: OpenApiResponse(
                InviteListErrorSerializer,
                description="Nobody invited: `errors` lists every bad line (invalid fields "
                "answer with the field's errors instead).",
            ),
            403: NOT_A_LEAD,
            404: NOT_A_MEMBER,
        },
    )
    def post(self, request: Request, project_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id, roles=LEADS)
        data = InviteListInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            rows = invite_rows_parse(
                text=data.validated_data["text"],
                default_role=data.validated_data["role"],
                max_rows=settings.STEPLAB_INVITE_MAX_ROWS,
            )
            issued = invites_create(
                project=project,
                invited_by=request_user(request),
                rows=rows,
                days=data.validated_data["expires_in_days"],
                link_base=_link_base(request),
            )
        except InviteListInvalid as exc:
            body = InviteListErrorSerializer({"detail": exc.detail, "errors": exc.errors}).data
            return Response(body, status=status.HTTP_400_BAD_REQUEST)
        result = {"count": len(issued), "invites": issued}
        return Response(InviteListOutputSerializer(result).data, status=status.HTTP_201_CREATED)


class InviteRevokeApi(GenericAPIView):
    serializer_class = InviteOutputSerializer

    @extend_schema(
        tags=["projects"],
        operation_id="projects_invites_revoke",
        summary="Revoke an invitation (leads only)",
        description="Its link lets nobody in from now on (the page it opens says it was "
        "withdrawn). Revoking again changes nothing; an accepted invitation is a 400.",
        request=InviteRevokeInputSerializer,
        responses={
            200: InviteOutputSerializer,
            400: OpenApiResponse(
                description="Already accepted (remove the member instead), or a body with fields."
            ),
            403: NOT_A_LEAD,
            404: OpenApiResponse(description="No such project or invitation, or not a member."),
        },
    )
    def post(self, request: Request, project_id: int, invite_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id, roles=LEADS)
        InviteRevokeInputSerializer(data=request.data).is_valid(raise_exception=True)
        invite = invite_get(project=project, invite_id=invite_id)
        revoked = invite_revoke(invite=invite, revoked_by=request_user(request))
        return Response(InviteOutputSerializer(revoked).data)
