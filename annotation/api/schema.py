"""drf-spectacular's description of our own authentication classes (registered when the
app is ready; ``annotation.api.authentication`` cannot import it, see there)."""

from __future__ import annotations

from drf_spectacular.authentication import SessionScheme


class HeaderCsrfSessionScheme(SessionScheme):
    """The session cookie, as DRF's session scheme (the CSRF token in the header for an
    upload changes nothing the schema states)."""

    target_class = "annotation.api.authentication.SessionAuthentication"
