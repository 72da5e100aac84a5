"""REST API v1. Each area keeps its own routes beside its views."""

from django.urls import include, path

urlpatterns = [
    # First: Django tries routes in order, and next and submit are most of all requests.
    path("", include("annotation.labeling.urls")),
    path("", include("annotation.api.auth_urls")),
    path("", include("annotation.projects.urls")),
    path("", include("annotation.datasets.urls")),
    path("", include("annotation.quality.urls")),
    path("", include("annotation.chains.urls")),
    path("", include("annotation.routing.urls")),
    path("", include("annotation.webhooks.urls")),
]
