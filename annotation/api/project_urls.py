from django.urls import path

from annotation.api.projects import (
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
]
