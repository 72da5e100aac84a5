"""Multipart bodies (file uploads) only where a file is expected, and never a named file.

Django parses a multipart body the first time anything reads ``request.POST``: a CSRF
check, a form, DRF's parsers. Each file part is spooled to disk as it arrives, so a
request that is refused afterwards (an annotator, a non-member, a bad CSRF token, an
endpoint that takes JSON) has already cost its whole size in disk and time.

- ``MultipartOnlyWhereExpectedMiddleware`` answers 415 to a multipart request for any
  view that does not name a multipart parser (today only the imports endpoint), before
  the CSRF middleware or the view reads a byte of the body. A URL that does not exist is
  Django's 404, also unread.
- ``NamelessTemporaryFileUploadHandler`` (``FILE_UPLOAD_HANDLERS``) spools every file part
  to a temporary file with no name in the temporary directory (``tempfile.TemporaryFile``:
  O_TMPFILE on Linux, else unlinked as it is created): nothing stays behind when the
  request fails or its worker is killed mid-upload. Django's own handlers keep a small
  file in memory and a large one under a name in FILE_UPLOAD_TEMP_DIR.
- ``copy_into_place`` writes an upload's lasting copy (the import job's file) so that it
  has a name only once it is whole: a worker killed mid-copy leaves nothing behind.

Where a file is expected, the session's CSRF token is read from the header only
(``annotation.api.authentication.SessionAuthentication``) and the view checks the role
before it reads ``request.data``: authenticate, then stream.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.core.files.uploadedfile import UploadedFile
from django.core.files.uploadhandler import FileUploadHandler, SkipFile
from django.http import HttpRequest, HttpResponse, JsonResponse

MULTIPART_REFUSED_DETAIL = (
    "Multipart bodies are accepted only where a file is uploaded (the imports endpoint); send JSON."
)


def is_multipart(request: HttpRequest) -> bool:
    return request.META.get("CONTENT_TYPE", "").lower().lstrip().startswith("multipart/")


def view_accepts_multipart(view_func: Callable[..., Any]) -> bool:
    """Whether the view is a DRF view that names a multipart parser of its own."""
    from rest_framework.parsers import MultiPartParser  # not at import: services use this module

    parsers = getattr(getattr(view_func, "cls", None), "parser_classes", ())
    return any(isinstance(p, type) and issubclass(p, MultiPartParser) for p in parsers)


class MultipartOnlyWhereExpectedMiddleware:
    """415 for a multipart request to a view that takes no file. Placed before
    ``CsrfViewMiddleware``, whose ``process_view`` reads ``request.POST``."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_view(
        self,
        request: HttpRequest,
        view_func: Callable[..., Any],
        view_args: Any,
        view_kwargs: Any,
    ) -> HttpResponse | None:
        api_view = hasattr(view_func, "cls")
        if not api_view or not is_multipart(request) or view_accepts_multipart(view_func):
            return None
        return JsonResponse({"detail": MULTIPART_REFUSED_DETAIL}, status=415)


class NoFileUploadHandler(FileUploadHandler):
    """``FILE_UPLOAD_HANDLERS`` for every view but the imports (which sets its own): a
    multipart body to a page (a form a test client or a script posts as multipart) is
    refused before it is read when it is larger than ``DATA_UPLOAD_MAX_MEMORY_SIZE``
    (the 413 of ``config.errors``), and a file part in it is read and dropped, never
    stored. The page then sees its fields, bounded in memory like a urlencoded form."""

    def handle_raw_input(
        self,
        input_data: Any,
        META: dict[str, Any],  # noqa: N803 (Django's signature)
        content_length: int,
        boundary: bytes,  # type: ignore[override]  # Django passes bytes (its stubs say str)
        encoding: str | None = None,
    ) -> None:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if limit is not None and content_length > limit:
            raise RequestDataTooBig("Request body exceeded settings.DATA_UPLOAD_MAX_MEMORY_SIZE.")

    def new_file(self, *args: Any, **kwargs: Any) -> None:
        raise SkipFile()

    def receive_data_chunk(self, raw_data: bytes, start: int) -> None:
        return None

    def file_complete(self, file_size: int) -> None:
        return None


class NamelessTemporaryFileUploadHandler(FileUploadHandler):
    """Spools each file part to a nameless temporary file; it goes when it is closed or
    its process ends, whatever ends the request."""

    def new_file(self, *args: Any, **kwargs: Any) -> None:
        super().new_file(*args, **kwargs)
        spool = tempfile.TemporaryFile(prefix="steplab-upload-", dir=settings.FILE_UPLOAD_TEMP_DIR)
        self.file = UploadedFile(
            file=spool,
            name=self.file_name,
            content_type=self.content_type,
            size=0,
            charset=self.charset,
            content_type_extra=self.content_type_extra,
        )

    def receive_data_chunk(self, raw_data: bytes, start: int) -> None:
        self.file.write(raw_data)

    def file_complete(self, file_size: int) -> UploadedFile:
        self.file.seek(0)
        self.file.size = file_size
        return self.file

    def upload_interrupted(self) -> None:
        if hasattr(self, "file"):
            self.file.close()


def copy_into_place(source: IO[bytes], path: Path, *, block: int = 1024 * 1024) -> None:
    """Copy ``source`` (from where it stands) to ``path``, a block at a time, so that
    ``path`` appears only once the copy is whole: the bytes go to a file with no name in
    ``path``'s directory (O_TMPFILE), linked to ``path`` at the end, so a process killed
    mid-copy leaves nothing. Where the filesystem has no O_TMPFILE, to ``path`` itself,
    removed again when the copy raises (only a killed process then leaves a part)."""
    try:
        descriptor = os.open(path.parent, os.O_TMPFILE | os.O_WRONLY, 0o600)
    except (AttributeError, OSError):  # no O_TMPFILE here (not Linux, or its filesystem)
        descriptor = -1
    if descriptor < 0:
        try:
            with path.open("wb") as out:
                shutil.copyfileobj(source, out, block)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        return
    with os.fdopen(descriptor, "wb") as out:
        shutil.copyfileobj(source, out, block)
        out.flush()
        # linkat(AT_SYMLINK_FOLLOW) through /proc gives the nameless file its name (a
        # directory descriptor makes Python call linkat, not link, which would not follow).
        directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            source_link = f"/proc/self/fd/{descriptor}"
            os.link(source_link, path.name, dst_dir_fd=directory, follow_symlinks=True)
        finally:
            os.close(directory)
