from django.urls import path

from annotation.api.imports import ImportCreateApi

urlpatterns = [
    path(
        "projects/<id:project_id>/imports/",
        ImportCreateApi.as_view(),
        name="api-project-imports",
    ),
]
