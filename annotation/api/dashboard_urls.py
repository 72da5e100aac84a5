"""Routes of the lead dashboard's data, of the machine sources' quality and of routing."""

from django.urls import path

from annotation.api.routing import RoutingApi, RoutingRunApi

urlpatterns = [
    path("projects/<id:project_id>/routing/", RoutingApi.as_view(), name="api-project-routing"),
    path(
        "projects/<id:project_id>/routing/run/",
        RoutingRunApi.as_view(),
        name="api-project-routing-run",
    ),
]
