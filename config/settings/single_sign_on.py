"""Single sign-on settings (OpenID Connect and SAML through django-allauth, LDAP through
django-auth-ldap), read from the environment; ``base`` includes them."""

import os

from config import sso, sso_saml

from .env import env_bool

# Single sign-on (annotation/sso.py; README, "Single sign-on"), off unless configured.
# STEPLAB_OIDC_PROVIDERS: a JSON list of OpenID Connect providers
# ({"id", "name", "server_url", "client_id", "secret", "role_claim", "role_map"}), each a
# "Sign in with <name>" button on the login page, through django-allauth. A person's
# first sign-in makes their account (username from preferred_username, else the e-mail),
# kept under the provider's id; an account made by hand is never joined to a provider's
# by a matching e-mail. At every sign-in the values of the provider's claim "role_claim"
# (default STEPLAB_OIDC_ROLE_CLAIM, else "groups") are looked up in that provider's own
# "role_map", {"<group>": {"project": "<name>", "role": "annotator|lead|ml"}, ...} (or a
# list of grants per group), and the person is made a member of each project with that
# role: one provider's token never grants a role through another provider's groups.
# STEPLAB_OIDC_ROLE_MAP, the one map of before, is still the map of a single provider
# with none of its own; with several providers it stops start-up (whose groups?).
# STEPLAB_LOCAL_PASSWORDS=0 with a provider (OIDC or SAML) configured: the password form
# is gone and only superusers may still sign in with a password (break-glass, through
# /admin/login/ or the token endpoint); without a provider it is ignored, so nobody is
# locked out.
STEPLAB_OIDC_PROVIDERS = sso.oidc_providers(
    os.environ.get("STEPLAB_OIDC_PROVIDERS", ""),
    role_claim=os.environ.get("STEPLAB_OIDC_ROLE_CLAIM", "").strip(),
    legacy_role_map=os.environ.get("STEPLAB_OIDC_ROLE_MAP", ""),
)
# LDAP (annotation/sso_ldap.py; README, "LDAP"): with STEPLAB_LDAP_URI set, the login
# form's username and password are tried against the directory first (django-auth-ldap):
# the user is found by STEPLAB_LDAP_USER_DN_TEMPLATE or searched under
# STEPLAB_LDAP_USER_SEARCH (STEPLAB_LDAP_USER_FILTER, bound as STEPLAB_LDAP_BIND_DN),
# their groups under STEPLAB_LDAP_GROUP_SEARCH are mapped to project roles by
# STEPLAB_LDAP_ROLE_MAP at every sign-in, as with OIDC. STEPLAB_LDAP_START_TLS=1 and
# STEPLAB_LDAP_CA_FILE secure an ldap:// connection. Failed attempts count for django-axes
# like any password's. With LDAP on, STEPLAB_LOCAL_PASSWORDS=0 keeps the form for
# directory accounts and refuses local ones (superusers excepted).
_LDAP = sso.ldap_settings(os.environ)
STEPLAB_LDAP_URI: str = _LDAP.pop("STEPLAB_LDAP_URI")
STEPLAB_LDAP_NAME: str = _LDAP.pop("STEPLAB_LDAP_NAME")
STEPLAB_LDAP_ROLE_MAP: dict[str, list[tuple[str, str]]] = _LDAP.pop("STEPLAB_LDAP_ROLE_MAP")
# django-auth-ldap's own settings (AUTH_LDAP_SERVER_URI, AUTH_LDAP_USER_SEARCH, ...).
globals().update(_LDAP)
# SAML (annotation/sso_saml.py; README, "SAML"): STEPLAB_SAML_PROVIDERS, a JSON list of
# organizations' identity providers ({"id", "name", "entity_id", "sso_url", "x509cert"
# (one or a list), or "metadata_url" instead; "role_attribute", "role_map",
# "sp_x509cert", "sp_private_key", "authn_requests_signed", "want_assertions_encrypted",
# ...}), each a "Sign in with <name>" button and its own
# URLs under /accounts/saml/<id>/ (metadata/, acs/). Its role map is its own: an
# organization's IdP grants roles only through the groups its provider entry maps.
STEPLAB_SAML_PROVIDERS = sso_saml.saml_providers(os.environ.get("STEPLAB_SAML_PROVIDERS", ""))
sso_saml.ids_distinct(STEPLAB_OIDC_PROVIDERS, STEPLAB_SAML_PROVIDERS)
STEPLAB_LOCAL_PASSWORDS = env_bool("STEPLAB_LOCAL_PASSWORDS", True) or not (
    STEPLAB_OIDC_PROVIDERS or STEPLAB_SAML_PROVIDERS or STEPLAB_LDAP_URI
)
SOCIALACCOUNT_PROVIDERS = {
    **sso.allauth_providers(STEPLAB_OIDC_PROVIDERS),
    **sso_saml.allauth_saml(STEPLAB_SAML_PROVIDERS),
}
SOCIALACCOUNT_ADAPTER = "annotation.sso.SocialAccountAdapter"
ACCOUNT_ADAPTER = "annotation.sso.AccountAdapter"
# allauth's account pages are not served (its URLs are not included); these say what
# its social flow may do: make the account at once, with no e-mail to confirm, asking for
# nothing the provider did not give, and never sign anyone into an existing account
# because the provider reports the same e-mail address.
SOCIALACCOUNT_AUTO_SIGNUP = True
SOCIALACCOUNT_EMAIL_REQUIRED = False
SOCIALACCOUNT_EMAIL_AUTHENTICATION = False
SOCIALACCOUNT_EMAIL_AUTHENTICATION_AUTO_CONNECT = False
SOCIALACCOUNT_QUERY_EMAIL = False
SOCIALACCOUNT_STORE_TOKENS = False
ACCOUNT_EMAIL_VERIFICATION = "none"
ACCOUNT_SIGNUP_FIELDS = ["username*"]
ACCOUNT_LOGIN_METHODS = {"username"}
ACCOUNT_UNIQUE_EMAIL = False
# allauth's own rate limits key on its account pages, which are not served.
ACCOUNT_RATE_LIMITS = False
