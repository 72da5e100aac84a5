"""HTML pages of the PRM loop."""

from django.urls import path

from prm_training import views

urlpatterns = [
    path("projects/<id:project_id>/models/", views.models_page, name="project-models"),
]
