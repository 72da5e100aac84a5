"""Request parsers for the API: DRF's, with the two limits every endpoint keeps.

- Size: DRF reads a JSON or form body straight from the request stream, so Django's
  ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (which guards ``request.body`` and ``request.POST``)
  never applied and a body of any size was read whole into memory. These parsers read at
  most the limit plus one byte and answer 413 naming the limit. (A multipart upload's
  files are bounded by the import endpoint's own handler; its other fields by Django.)
- Depth: a JSON body nested deeper than Python's json decoder recurses (about 1,000
  levels) is the 400 of any malformed body: DRF let the RecursionError through, so a few
  KB of brackets were a 500 on every JSON endpoint.
- Numbers: ``NaN`` and ``Infinity`` are not JSON, and ``1e400`` is JSON that no double
  holds (Python reads it as infinity): each is the 400 of a malformed body, the same
  rule the imports keep (``importers.reading``).
"""

from __future__ import annotations

import codecs
import io
import json
from collections.abc import Mapping
from typing import IO, Any

from django.conf import settings
from rest_framework import parsers, status
from rest_framework.exceptions import APIException, ParseError

from annotation.datasets.importers.reading import finite_float, reject_constant
from config.errors import body_too_large_detail


class BodyTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "body_too_large"


def _bounded(stream: IO[Any]) -> IO[bytes]:
    """The body, read into memory only while it stays within the limit."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    body = stream.read(limit + 1) if limit is not None else stream.read()
    if limit is not None and len(body) > limit:
        raise BodyTooLarge(body_too_large_detail())
    return io.BytesIO(body)


class JSONParser(parsers.JSONParser):
    def parse(
        self,
        stream: IO[Any],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = codecs.getreader(encoding)(_bounded(stream)).read()
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
