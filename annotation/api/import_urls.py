from django.urls import path

from annotation.api.imports import ImportCreateApi, ImportJobApi

urlpatterns = [
    path(
        "projects/<id:project_id>/imports/",
        ImportCreateApi.as_view(),
        name="api-project-imports",
    ),
    path(
        "projects/<id:project_id>/imports/<id:job_id>/",
        ImportJobApi.as_view(),
        name="api-project-import-job",
    ),
]
