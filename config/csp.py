"""django-csp's middleware with the policy header built once per process.

django-csp builds the header string from the settings on every response (through
``dataclasses.asdict`` and a policy builder); on the queue's hot requests that cost more
than the rest of the middleware together. A response that asks for nothing of its own
(no per-view config, update or replace, no nonce, no exemption) under a plain
``Content-Security-Policy`` setting gets the policy the settings describe, which changes
only when the settings do (tests), so that one string is kept until they change. Every
other response goes through django-csp unchanged.
"""

from __future__ import annotations

import functools
from typing import Any

from csp.constants import HEADER
from csp.middleware import CheckableLazyObject
from csp.middleware import CSPMiddleware as BaseCSPMiddleware
from csp.utils import build_policy
from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.http import HttpRequest
from django.http.response import HttpResponseBase

# Response attributes through which django-csp's decorators shape one response's policy.
_PER_RESPONSE = (
    "_csp_config",
    "_csp_update",
    "_csp_replace",
    "_csp_exempt",
    "_csp_config_ro",
    "_csp_update_ro",
    "_csp_replace_ro",
    "_csp_exempt_ro",
)


@functools.cache
def _settings_policy() -> str | None:
    """The header for a response that asks for nothing, or None when the settings call
    for more than one plain header (report-only, excluded prefixes): django-csp decides."""
    policy = getattr(settings, "CONTENT_SECURITY_POLICY", None) or {}
    if getattr(settings, "CONTENT_SECURITY_POLICY_REPORT_ONLY", None) or policy.get(
        "EXCLUDE_URL_PREFIXES"
    ):
        return None
    return build_policy() or None


@receiver(setting_changed)
def _forget_policy(*, setting: str, **kwargs: Any) -> None:
    if setting.startswith("CONTENT_SECURITY_POLICY") or setting == "DEBUG":
        _settings_policy.cache_clear()


class CSPMiddleware(BaseCSPMiddleware):
    def process_response(
        self, request: HttpRequest, response: HttpResponseBase
    ) -> HttpResponseBase:
        policy = _settings_policy()
        if (
            policy is None
            or settings.DEBUG  # django-csp leaves debug pages alone
            or getattr(request, "_csp_nonce", None) is not None
            or HEADER in response
            or any(getattr(response, name, None) is not None for name in _PER_RESPONSE)
        ):
            return super().process_response(request, response)
        response[HEADER] = policy
        # As django-csp does: a nonce asked for after the header is written is an error.
        setattr(request, "csp_nonce", CheckableLazyObject(self._csp_nonce_post_response))  # noqa: B010
        return response
