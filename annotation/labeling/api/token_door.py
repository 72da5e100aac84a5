"""The queue's token door: the common case of its hottest requests (next, submit), a POST
with an API token asking for JSON, answered past DRF's request cycle with the same answer
DRF's door gives (``QueueView``). Errors are rendered by the API's one exception handler."""

from __future__ import annotations

from typing import Any

import orjson
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from rest_framework import status
from rest_framework.renderers import JSONRenderer
from rest_framework.views import APIView

from annotation.api.authentication import token_key
from annotation.api.errors import api_exception_handler
from annotation.api.parsers import DEFAULT_JSON_LIMITS, json_shape_refusal

# Request bodies above this go through DRF, which enforces the upload limits itself.
TOKEN_DOOR_BODY_MAX_BYTES = 1024 * 1024


def _accepts_json(request: HttpRequest) -> bool:
    return request.META.get("HTTP_ACCEPT", "") in ("", "*/*", "application/json")


def json_response(payload: Any, status_code: int = 200) -> HttpResponse:
    """What DRF's JSON renderer would send for ``payload``: compact UTF-8 JSON (none for
    a 204, whose answer is empty)."""
    if status_code == status.HTTP_204_NO_CONTENT:
        nothing = HttpResponse(status=status_code)
        del nothing["Content-Type"]  # as DRF sends an empty answer
        return nothing
    return HttpResponse(orjson.dumps(payload), status=status_code, content_type="application/json")


class QueueView(APIView):
    """An APIView for the queue's hottest requests (next, submit), with two doors to one
    answer. Each view writes its answer once, as a function of the caller and the input
    (``next_answer``, ``submit_answer``). DRF's door (``post``) authenticates, checks
    permissions, negotiates and parses as every other endpoint does; the schema and the
    docs describe it. The token door (``token_post``) takes the common case, a POST with
    an API token asking for JSON, past DRF's request cycle, whose request wrapper,
    negotiation, parsers, authenticator and permission loop cost more than the claim
    itself: it looks the token up (with the project, for next) in one query and gives
    the same answer, errors rendered by the same exception handler. It returns None,
    before doing anything, for what it does not take (an unknown token, a malformed or
    oversized body), and DRF's door answers that as it always did."""

    def token_post(self, request: HttpRequest, key: str, **kwargs: Any) -> HttpResponse | None:
        raise NotImplementedError

    @classmethod
    def as_view(cls, **initkwargs: Any) -> Any:
        drf_view = super().as_view(**initkwargs)

        def view(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            if request.method == "POST" and _accepts_json(request):
                key = token_key(request)
                if key is not None:
                    response: HttpResponseBase | None
                    try:
                        response = cls(**initkwargs).token_post(request, key, **kwargs)
                    except Exception as exc:  # noqa: BLE001 - DRF's handler decides below
                        response = _error_response(request, exc)
                    if response is not None:
                        return response
            return drf_view(request, *args, **kwargs)

        # What DRF's view carries: ``cls`` for the schema, ``csrf_exempt`` (tokens and
        # DRF's own session check stand in for Django's CSRF middleware).
        view.__dict__.update(drf_view.__dict__)
        view.__name__ = drf_view.__name__  # type: ignore[attr-defined]  # a function's
        view.__doc__ = drf_view.__doc__
        return view


def _error_response(request: HttpRequest, exc: Exception) -> HttpResponseBase:
    """The answer the API's exception handler gives for ``exc`` (a service error, a DRF
    error, Http404, PermissionDenied), rendered as JSON; anything else is raised again, a
    bug for Django's 500 handler as in DRF."""
    response = api_exception_handler(exc, {"request": request, "view": None})
    if response is None:
        raise exc
    response.accepted_renderer = JSONRenderer()
    response.accepted_media_type = "application/json"
    response.renderer_context = {}  # type: ignore[attr-defined]  # DRF sets it on render
    return response


def json_body(request: HttpRequest) -> Any | None:
    """The token door's body: parsed JSON, or None for what DRF's parsers should answer
    (another content type, an oversized or malformed body, one past the API's bounds on
    what a body parses into: DRF explains it)."""
    if request.content_type != "application/json":
        return None
    try:
        if int(request.META.get("CONTENT_LENGTH") or 0) > TOKEN_DOOR_BODY_MAX_BYTES:
            return None
        if json_shape_refusal(request.body, DEFAULT_JSON_LIMITS) is not None:
            return None
        return orjson.loads(request.body)
    except (ValueError, orjson.JSONDecodeError):
        return None
