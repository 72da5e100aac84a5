from allauth.socialaccount.providers.openid_connect import views as oidc_views
from allauth.socialaccount.providers.saml import views as saml_views
from django.contrib import admin
from django.urls import include, path, register_converter
from django.views.generic import TemplateView
from drf_spectacular.views import (
    SpectacularAPIView,
    SpectacularRedocView,
    SpectacularSwaggerSplitView,
)

from annotation import sso_saml
from config.converters import IdConverter
from config.health import healthz

# Before the includes below: their routes name ids as <id:...>.
register_converter(IdConverter, "id")

urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", healthz, name="healthz"),
    # Single sign-on (annotation/sso.py): a configured provider's sign-in (the login
    # page's button posts here) and callback (a provider id not configured is a 404), and
    # the page for a sign-in cancelled at the provider (a failed one is rendered by the
    # callback). allauth's account pages (a second password form, sign-up) are not served.
    path("accounts/oidc/<slug:provider_id>/login/", oidc_views.login, name="openid_connect_login"),
    path(
        "accounts/oidc/<slug:provider_id>/login/callback/",
        oidc_views.callback,
        name="openid_connect_callback",
    ),
    # SAML (annotation/sso_saml.py): an organization's sign-in (the button posts here),
    # its assertion consumer (the IdP posts the response; allauth finishes on its own
    # URL after), and its metadata for the IdP's administrator; an organization not
    # configured is a 404 at each. Single logout is not offered (its URL is named in the
    # metadata by allauth, and answers 404).
    path("accounts/saml/<slug:organization_slug>/login/", sso_saml.login, name="saml_login"),
    path("accounts/saml/<slug:organization_slug>/acs/", sso_saml.acs, name="saml_acs"),
    path(
        "accounts/saml/<slug:organization_slug>/acs/finish/",
        sso_saml.finish_acs,
        name="saml_finish_acs",
    ),
    path(
        "accounts/saml/<slug:organization_slug>/metadata/",
        saml_views.metadata,
        name="saml_metadata",
    ),
    path("accounts/saml/<slug:organization_slug>/sls/", sso_saml.sls, name="saml_sls"),
    # allauth's own view for it builds its account pages' links, which are not served.
    path(
        "accounts/sso/cancelled/",
        TemplateView.as_view(template_name="socialaccount/login_cancelled.html"),
        name="socialaccount_login_cancelled",
    ),
    path("api/v1/", include("annotation.api.urls")),
    path("api/v1/", include("prm_training.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    # The split view serves its start-up script as a file, so the page has no inline
    # script and works under a strict Content-Security-Policy.
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="api-docs"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="schema"), name="api-redoc"),
    path("", include("prm_training.urls")),
    path("", include("annotation.urls")),
]

# A lost database connection answers 503 + Retry-After rather than 500, a body over the
# limit 413, and every error under /api/ is JSON (config/errors.py).
handler400 = "config.errors.bad_request"
handler404 = "config.errors.page_not_found"
handler500 = "config.errors.server_error"
