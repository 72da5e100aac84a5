"""Request parsers for the API: DRF's, with the two limits every endpoint keeps.

- Size: DRF reads a JSON or form body straight from the request stream, so Django's
  ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (which guards ``request.body`` and ``request.POST``)
  never applied and a body of any size was read whole into memory. These parsers read at
  most the limit plus one byte and answer 413 naming the limit. (A multipart upload's
  files are bounded by the import endpoint's own handler; its other fields by Django.)
- Depth: a JSON body nested deeper than Python's json decoder recurses (about 1,000
  levels) is the 400 of any malformed body: DRF let the RecursionError through, so a few
  KB of brackets were a 500 on every JSON endpoint.
- Shape: what a body may parse into is bounded before any of it is decoded, since a
  value costs far more decoded than its bytes (10 MiB of ``[{},{},...]`` became 250 MB
  of dicts). A byte scan (``importers.reading.json_shape_problem``, the imports' own)
  counts the body's values, its nesting and its longest string against the view's
  ``json_limits`` (``DEFAULT_JSON_LIMITS`` unless a view says otherwise); a body past
  one is the 400 of a malformed body, naming the limit.
- Numbers: ``NaN`` and ``Infinity`` are not JSON, and ``1e400`` is JSON that no double
  holds (Python reads it as infinity): each is the 400 of a malformed body, the same
  rule the imports keep (``importers.reading``).
"""

from __future__ import annotations

import codecs
import io
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import IO, Any

from django.conf import settings
from rest_framework import parsers, status
from rest_framework.exceptions import APIException, ParseError

from annotation.json_shape import (
    finite_float,
    json_shape_problem,
    reject_constant,
)
from config.errors import body_too_large_detail


class BodyTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "body_too_large"


def _bounded(stream: IO[Any]) -> io.BytesIO:
    """The body, read into memory only while it stays within the limit."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    body = stream.read(limit + 1) if limit is not None else stream.read()
    if limit is not None and len(body) > limit:
        raise BodyTooLarge(body_too_large_detail())
    return io.BytesIO(body)


@dataclass(frozen=True)
class JsonLimits:
    """What one JSON body may parse into: levels of arrays and objects, values (array
    items and object members, counted as the imports count them) and the bytes of its
    longest string as written (escapes included: ``text_field_bytes``)."""

    max_depth: int
    max_values: int
    max_string_bytes: int


def text_field_bytes(chars: int) -> int:
    """The most bytes a text field of ``chars`` characters takes in a JSON body: twelve
    a character, a surrogate pair's two ``\\u`` escapes (``json.dumps``'s ASCII output)."""
    return 12 * chars


# Every endpoint's bound unless its view sets ``json_limits``: deeper than any body the
# API reads (a submit is three levels), the values of the largest id list but the
# evaluation sets' (10,000 gold chains), a string of any 20,000-character field (a
# rewrite, a judge template) however it is escaped. 20,000 decoded values are ~2 MB.
DEFAULT_JSON_LIMITS = JsonLimits(
    max_depth=32, max_values=20_000, max_string_bytes=text_field_bytes(20_000)
)


def json_limits_of(view: object) -> JsonLimits:
    limits = getattr(view, "json_limits", None)
    return limits if isinstance(limits, JsonLimits) else DEFAULT_JSON_LIMITS


def json_shape_refusal(body: bytes, limits: JsonLimits) -> str | None:
    """The 400's detail for a body past ``limits``, or None: nothing is decoded."""
    problem = json_shape_problem(
        body,
        max_depth=limits.max_depth,
        max_values=limits.max_values,
        max_string_bytes=limits.max_string_bytes,
    )
    return None if problem is None else f"JSON parse error - the body holds {problem}"


class JSONParser(parsers.JSONParser):
    def parse(
        self,
        stream: IO[Any],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        context = parser_context or {}
        encoding = context.get("encoding", settings.DEFAULT_CHARSET)
        limits = json_limits_of(context.get("view"))
        try:
            body = _bounded(stream).getvalue()
            # The scan reads UTF-8's bytes, before anything of the body is decoded.
            utf8 = codecs.lookup(encoding).name == "utf-8"
            refusal = json_shape_refusal(
                body if utf8 else codecs.decode(body, encoding).encode("utf-8"), limits
            )
            if refusal is not None:
                raise ParseError(refusal)
            text = codecs.decode(body, encoding)
            return json.loads(text, parse_constant=reject_constant, parse_float=finite_float)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply") from None
        except ValueError as exc:  # malformed, not UTF-8, or a number no double holds
            raise ParseError(f"JSON parse error - {exc}") from None


class FormParser(parsers.FormParser):
    def parse(
        self,
        stream: IO[Any],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        return super().parse(_bounded(stream), media_type, parser_context)
