"""Projects and members. Thin: validate, check access, call one service, serialize."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import Http404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import Throttled
from rest_framework.generics import GenericAPIView
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import UserRateThrottle

from annotation.api.parsers import DEFAULT_JSON_LIMITS, JsonLimits, text_field_bytes
from annotation.api.permissions import LEADS, IsStaffUser, project_for_request, request_user
from annotation.guidelines import (
    GUIDELINES_MAX_CHARS,
    GuidelinesBusy,
    GuidelinesTooSlow,
    guidelines_html,
)
from annotation.models import Membership, Project
from annotation.projects.api.serializers import (
    GuidelinesPreviewInputSerializer,
    GuidelinesPreviewOutputSerializer,
    MemberAddInputSerializer,
    MemberOutputSerializer,
    MemberRoleInputSerializer,
    ProjectCreateInputSerializer,
    ProjectDetailOutputSerializer,
    ProjectOutputSerializer,
    ProjectUpdateInputSerializer,
)
from annotation.projects.selectors import (
    membership_list,
    progress_as_annotators_see_it,
    project_get_with_progress,
    project_list_with_progress,
)
from annotation.projects.services import (
    membership_add,
    membership_remove,
    membership_role_set,
    project_create,
    project_update,
)

NOT_A_MEMBER = OpenApiResponse(description="No such project, or the caller is not a member.")
NOT_A_LEAD = OpenApiResponse(description="A member who is not a lead of the project.")
NOT_STAFF = OpenApiResponse(description="Only staff users create projects.")
INVALID = OpenApiResponse(description="Invalid input; the body names each field's errors.")
# The bodies that carry guidelines: a string of GUIDELINES_MAX_CHARS however escaped.
GUIDELINES_JSON_LIMITS = JsonLimits(
    max_depth=DEFAULT_JSON_LIMITS.max_depth,
    max_values=DEFAULT_JSON_LIMITS.max_values,
    max_string_bytes=text_field_bytes(GUIDELINES_MAX_CHARS),
)


class ProjectListCreateApi(GenericAPIView):
    serializer_class = ProjectOutputSerializer
    json_limits = GUIDELINES_JSON_LIMITS

    def get_permissions(self) -> list[BasePermission]:
        if self.request.method == "POST":
            return [IsAuthenticated(), IsStaffUser()]
        return [IsAuthenticated()]

    def get_queryset(self) -> QuerySet[Project]:
        return project_list_with_progress(user=self.request.user)

    @extend_schema(
        tags=["projects"],
        operation_id="projects_list",
        summary="Projects the caller belongs to, with progress",
        responses=ProjectOutputSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        page = progress_as_annotators_see_it(self.paginate_queryset(self.get_queryset()) or [])
        return self.get_paginated_response(ProjectOutputSerializer(page, many=True).data)

    @extend_schema(
        tags=["projects"],
        operation_id="projects_create",
        summary="Create a project (staff only); the creator becomes its lead",
        request=ProjectCreateInputSerializer,
        responses={201: ProjectDetailOutputSerializer, 400: INVALID, 403: NOT_STAFF},
    )
    def post(self, request: Request) -> Response:
        data = ProjectCreateInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        project = project_create(created_by=request_user(request), **data.validated_data)
        project = project_get_with_progress(user=request.user, project_id=project.pk)
        return Response(ProjectDetailOutputSerializer(project).data, status=status.HTTP_201_CREATED)


class ProjectDetailApi(GenericAPIView):
    # Only for the schema generator; every method looks its project up through the
    # access check instead.
    queryset = Project.objects.none()
    json_limits = GUIDELINES_JSON_LIMITS
    serializer_class = ProjectDetailOutputSerializer

    @extend_schema(
        tags=["projects"],
        operation_id="projects_retrieve",
        summary="One project (members only)",
        responses={200: ProjectDetailOutputSerializer, 404: NOT_A_MEMBER},
    )
    def get(self, request: Request, project_id: int) -> Response:
        project = project_get_with_progress(user=request.user, project_id=project_id)
        return Response(ProjectDetailOutputSerializer(project).data)

    @extend_schema(
        tags=["projects"],
        operation_id="projects_partial_update",
        summary="Change a project's settings (leads only)",
        description="Changing `overlap` recomputes which chains are finished.",
        request=ProjectUpdateInputSerializer,
        responses={
            200: ProjectDetailOutputSerializer,
            400: INVALID,
            403: NOT_A_LEAD,
            404: NOT_A_MEMBER,
        },
    )
    def patch(self, request: Request, project_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id, roles=LEADS)
        data = ProjectUpdateInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        project_update(project=project, data=dict(data.validated_data))
        project = project_get_with_progress(user=request.user, project_id=project.pk)
        return Response(ProjectDetailOutputSerializer(project).data)


class MemberListCreateApi(GenericAPIView):
    queryset = Membership.objects.none()  # the schema generator's; see ProjectDetailApi
    serializer_class = MemberOutputSerializer

    @extend_schema(
        tags=["projects"],
        operation_id="projects_members_list",
        summary="The project's members (any member may see who is on the team)",
        responses={200: MemberOutputSerializer(many=True), 404: NOT_A_MEMBER},
    )
    def get(self, request: Request, project_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id)
        page = self.paginate_queryset(membership_list(project=project))
        return self.get_paginated_response(MemberOutputSerializer(page, many=True).data)

    @extend_schema(
        tags=["projects"],
        operation_id="projects_members_create",
        summary="Add a member, or change a member's role (leads only)",
        request=MemberAddInputSerializer,
        responses={
            201: OpenApiResponse(MemberOutputSerializer, description="Added."),
            200: OpenApiResponse(MemberOutputSerializer, description="Already a member; role set."),
            400: INVALID,
            403: NOT_A_LEAD,
            404: NOT_A_MEMBER,
        },
    )
    def post(self, request: Request, project_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id, roles=LEADS)
        data = MemberAddInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        membership, created = membership_add(
            project=project,
            user=data.validated_data["username"],  # the validator resolved it to a User
            role=data.validated_data["role"],
        )
        return Response(
            MemberOutputSerializer(membership).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )


class MemberDetailApi(GenericAPIView):
    queryset = Membership.objects.none()  # the schema generator's; see ProjectDetailApi
    serializer_class = MemberOutputSerializer

    @extend_schema(
        tags=["projects"],
        operation_id="projects_members_destroy",
        summary="Remove a member (leads only; the last lead stays)",
        responses={
            204: None,
            400: OpenApiResponse(description="The project's only lead cannot be removed."),
            403: NOT_A_LEAD,
            404: OpenApiResponse(description="No such project or member, or not a member."),
        },
    )
    def delete(self, request: Request, project_id: int, user_id: int) -> Response:
        project: Project = project_for_request(request=request, project_id=project_id, roles=LEADS)
        user = get_user_model().objects.filter(pk=user_id).first()
        if user is None:
            raise Http404("No such member.")
        try:
            membership_remove(project=project, user=user)
        except Membership.DoesNotExist:
            raise Http404("No such member.") from None
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        tags=["projects"],
        operation_id="projects_members_partial_update",
        summary="Change a member's role (leads only; the last lead stays)",
        request=MemberRoleInputSerializer,
        responses={
            200: MemberOutputSerializer,
            400: OpenApiResponse(
                description="Invalid role, or the project's only lead would be demoted."
            ),
            403: NOT_A_LEAD,
            404: OpenApiResponse(description="No such project or member, or not a member."),
        },
    )
    def patch(self, request: Request, project_id: int, user_id: int) -> Response:
        project: Project = project_for_request(request=request, project_id=project_id, roles=LEADS)
        data = MemberRoleInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        user = get_user_model().objects.filter(pk=user_id).first()
        if user is None:
            raise Http404("No such member.")
        try:
            membership = membership_role_set(
                project=project, user=user, role=data.validated_data["role"]
            )
        except Membership.DoesNotExist:
            raise Http404("No such member.") from None
        return Response(MemberOutputSerializer(membership).data)


class GuidelinesPreviewThrottle(UserRateThrottle):
    """STEPLAB_GUIDELINES_PREVIEW_RATE previews per user: each costs up to the renderer's
    CPU bound (``annotation.guidelines``), and any signed-in user may ask. Counted in the
    cache, so per web process unless CACHE_URL shares it."""

    scope = "guidelines_preview"

    def get_rate(self) -> str:
        rate: str = settings.STEPLAB_GUIDELINES_PREVIEW_RATE
        return rate


class GuidelinesPreviewApi(GenericAPIView):
    """Any signed-in user: it reads nothing but its body (the create page previews before
    there is a project to be a lead of); rate-limited per user."""

    json_limits = GUIDELINES_JSON_LIMITS
    serializer_class = GuidelinesPreviewOutputSerializer
    throttle_classes = [GuidelinesPreviewThrottle]

    @extend_schema(
        tags=["projects"],
        operation_id="guidelines_preview",
        summary="Render guidelines written in Markdown as the pages show them",
        request=GuidelinesPreviewInputSerializer,
        responses={
            200: GuidelinesPreviewOutputSerializer,
            400: INVALID,
            429: OpenApiResponse(
                description="Too many previews, or others rendering; Retry-After says when."
            ),
        },
    )
    def post(self, request: Request) -> Response:
        data = GuidelinesPreviewInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            html = guidelines_html(text=data.validated_data["guidelines"], wait=False)
        except GuidelinesBusy:
            raise Throttled(wait=1, detail="Other guidelines are rendering; try again.") from None
        except GuidelinesTooSlow as exc:
            raise ValidationError({"guidelines": [str(exc)]}) from None
        return Response(GuidelinesPreviewOutputSerializer({"html": html}).data)
