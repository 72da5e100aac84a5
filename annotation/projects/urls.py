"""Routes of the projects slice: projects, members, guidelines preview, invitations,
the lead dashboard."""

from django.urls import path

from annotation.projects.api.dashboard import DashboardApi
from annotation.projects.api.invites import (
    InviteListCreateApi,
    InviteListUploadApi,
    InviteRevokeApi,
)
from annotation.projects.api.projects import (
    GuidelinesPreviewApi,
    MemberDetailApi,
    MemberListCreateApi,
    ProjectDetailApi,
    ProjectListCreateApi,
)

urlpatterns = [
    path("projects/", ProjectListCreateApi.as_view(), name="api-projects"),
    path("projects/<id:project_id>/", ProjectDetailApi.as_view(), name="api-project"),
    path(
        "projects/<id:project_id>/members/",
        MemberListCreateApi.as_view(),
        name="api-project-members",
    ),
    path(
        "projects/<id:project_id>/members/<id:user_id>/",
        MemberDetailApi.as_view(),
        name="api-project-member",
    ),
    path("guidelines/preview/", GuidelinesPreviewApi.as_view(), name="api-guidelines-preview"),
    path(
        "projects/<id:project_id>/invites/",
        InviteListCreateApi.as_view(),
        name="api-project-invites",
    ),
    path(
        "projects/<id:project_id>/invites/bulk/",
        InviteListUploadApi.as_view(),
        name="api-project-invites-bulk",
    ),
    path(
        "projects/<id:project_id>/invites/<id:invite_id>/revoke/",
        InviteRevokeApi.as_view(),
        name="api-project-invite-revoke",
    ),
    path(
        "projects/<id:project_id>/dashboard/",
        DashboardApi.as_view(),
        name="api-project-dashboard",
    ),
]
