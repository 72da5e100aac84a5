"""Routes of the routing slice: what routing did, and "Route now"."""

from django.urls import path

from annotation.routing.api import RoutingApi, RoutingRunApi

urlpatterns = [
    path("projects/<id:project_id>/routing/", RoutingApi.as_view(), name="api-project-routing"),
    path(
        "projects/<id:project_id>/routing/run/",
        RoutingRunApi.as_view(),
        name="api-project-routing-run",
    ),
]
