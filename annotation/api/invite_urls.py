"""Routes of a project's invitations (leads)."""

from django.urls import path

from annotation.api.invites import InviteListCreateApi, InviteListUploadApi, InviteRevokeApi

urlpatterns = [
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
]
