"""HTML pages."""

from django.contrib.auth import views as auth_views
from django.urls import path

from annotation import views
from annotation.projects import invite_views
from annotation.webhooks.views import webhooks_page

urlpatterns = [
    path("", views.home, name="home"),
    path("login/", views.LoginView.as_view(), name="login"),
    # Django 5 only accepts POST here: a link or an <img> cannot log anyone out.
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    # Every user changes their own password (the old one first; Django's validators).
    path(
        "password/",
        auth_views.PasswordChangeView.as_view(success_url="/password/done/"),
        name="password_change",
    ),
    path(
        "password/done/",
        auth_views.PasswordChangeDoneView.as_view(),
        name="password_change_done",
    ),
    # Every signed-in user's own API tokens.
    path("tokens/", views.tokens_page, name="tokens-page"),
    # An invitation's link lands here (anyone: the person may have no account yet).
    path("invite/", invite_views.invite_page, name="invite"),
    path("projects/new/", views.project_new, name="project-new"),
    path("projects/<id:project_id>/", views.project_overview, name="project-overview"),
    path("projects/<id:project_id>/settings/", views.project_settings, name="project-settings"),
    path("projects/<id:project_id>/members/", views.project_members, name="project-members"),
    path("projects/<id:project_id>/webhooks/", webhooks_page, name="webhooks-page"),
    path("projects/<id:project_id>/label/", views.label_workspace, name="label-workspace"),
    path("projects/<id:project_id>/history/", views.history_page, name="history-page"),
    path("projects/<id:project_id>/review/", views.review_page, name="review-page"),
    path("projects/<id:project_id>/chains/", views.chains_page, name="chains-page"),
    path("projects/<id:project_id>/chains/<id:chain_id>/", views.chain_page, name="chain-page"),
    path("projects/<id:project_id>/snapshots/", views.snapshots_page, name="snapshots-page"),
    path("projects/<id:project_id>/import/", views.import_page, name="import-page"),
]
