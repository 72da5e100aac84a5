"""Imports run in a child process whose address space is capped (RLIMIT_AS), for
`test_import_memory.py`: `python -m tests.annotation.datasets.import_child LIMIT_MIB MODE JSON`.

The cap is set before Django is imported, so it bounds the whole process; an import that
needs more memory raises MemoryError (or kills the child), and the parent test fails on
the exit status. Each input goes through the API upload and through `import_chains`,
and must be imported whole or rejected with line numbers, with nothing written on a
rejection and nothing left in the temporary directory ($TMPDIR) either way.

The child is the web process and the worker at once: the upload answers 202 with its
queued job (the task message goes to a folder broker of the parent's temporary folder,
which no worker reads), then the child runs the job as the worker's task does
(``import_job_execute``, under the same cap) and reads it back finished. No stored upload
may outlive its job (STEPLAB_IMPORT_DIR, from the parent).

Modes (JSON argument: project and user ids, and what the mode needs):
- `property`: hypothesis draws nested, long, deep and malformed files up to the upload
  cap (`examples` of them);
- `cases`: the explicit worst cases, files named in `files`;
- `upload`: one API upload of `file`, then exit (the parent may kill it mid-import);
- `stream`: one upload of the large `file` through Django's WSGI handler, its request
  body read from disk as a server reads it from the socket, never built in memory (the
  test client builds it whole); prints the resident-memory peak before and after.
"""

from __future__ import annotations

import json
import os
import resource
import sys
from collections import Counter
from pathlib import Path
from typing import Any

# The child's upload cap: the property's largest files reach it. The explicit cases
# (8 MB lines) raise it (`cap` in the JSON argument).
UPLOAD_CAP_BYTES = 1024 * 1024
FORMATS_TRIED = ("auto", "generic")


def _cap_address_space(mebibytes: int) -> None:
    limit = mebibytes * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _warm_hypothesis() -> None:
    """Hypothesis builds its table of the characters a codec encodes once per process
    (cached on disk when it can be): 1.1 million tuples, hundreds of MB while it is made.
    That is the test tool's cost, not the import's, so it is paid before the cap."""
    from hypothesis.internal.charmap import charmap, intervals_from_codec

    charmap()
    intervals_from_codec("utf-8")


def main() -> None:
    mode, arguments = sys.argv[2], json.loads(sys.argv[3])
    if mode == "property":
        _warm_hypothesis()
    _cap_address_space(int(sys.argv[1]))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.test")
    import django

    django.setup()
    from django.conf import settings
    from django.test.utils import setup_test_environment

    setup_test_environment()  # the test client's host, as under pytest

    cap = arguments.get("cap", UPLOAD_CAP_BYTES)
    if mode not in ("upload", "stream"):
        settings.STEPLAB_IMPORT_MAX_UPLOAD_BYTES = cap
    checker = _Checker(project_id=arguments["project"], user_id=arguments["user"], cap=cap)
    if mode == "upload":
        content = Path(arguments["file"]).read_bytes()
        response = checker.upload(content, "generic")
        print(response.status_code, flush=True)
        _run_job(response.json()["id"])
    elif mode == "cases":
        for name in arguments["files"]:
            content = Path(name).read_bytes()
            for fmt in FORMATS_TRIED:
                checker.check(content, fmt, work=Path(arguments["work"]))
            print("ok", Path(name).name, len(content), flush=True)
    elif mode == "stream":
        _stream(arguments)
    elif mode == "property":
        _property(checker, examples=arguments["examples"], work=Path(arguments["work"]))
    else:
        raise SystemExit(f"unknown mode {mode}")
    print("outcomes", json.dumps(dict(checker.outcomes)), flush=True)
    # /proc's high-water marks: ru_maxrss would report the forking parent's peak.
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    print(f"peak address space {status['VmPeak'].strip()}, resident {status['VmHWM'].strip()}")


class _Checker:
    def __init__(self, *, project_id: int, user_id: int, cap: int) -> None:
        from django.contrib.auth import get_user_model
        from rest_framework.test import APIClient

        from annotation.models import Project

        self.project = Project.objects.get(pk=project_id)
        self.client = APIClient()
        self.client.force_authenticate(user=get_user_model().objects.get(pk=user_id))
        self.temporary = Path(os.environ["TMPDIR"])
        self.outcomes: Counter[str] = Counter()
        self.cap = cap

    def upload(self, content: bytes, fmt: str) -> Any:
        from django.core.files.uploadedfile import SimpleUploadedFile

        upload = SimpleUploadedFile("chains.jsonl", content, content_type="application/jsonl")
        return self.client.post(
            f"/api/v1/projects/{self.project.pk}/imports/",
            {"file": upload, "format": fmt},
            format="multipart",
        )

    def counts(self) -> tuple[int, ...]:
        from annotation.models import Annotation, Chain, ImportBatch, Step

        return tuple(model.objects.count() for model in (ImportBatch, Chain, Step, Annotation))

    def check(self, content: bytes, fmt: str, *, work: Path) -> None:
        self._check_api(content, fmt)
        self._check_command(content, fmt, work)
        left = sorted(os.listdir(self.temporary))
        assert not left, f"left in the temporary directory: {left}"

    def _check_api(self, content: bytes, fmt: str) -> None:
        before = self.counts()
        response = self.upload(content, fmt)
        outcome = "too large"
        if response.status_code == 413:
            assert len(content) > self.cap, response.json()
        elif response.status_code == 400:  # the form: an empty file is no file
            assert not content and "file" in response.json(), response.json()
            outcome = "rejected"
        else:
            assert response.status_code == 202, (response.status_code, response.content)
            assert response.json()["status"] == "queued", response.json()
            _run_job(response.json()["id"])
            body = self.client.get(response.json()["url"]).json()
            result = body["result"]
            if body["status"] == "done" and result["already_imported"]:  # imported before
                outcome = "imported before"
            elif body["status"] == "done":
                outcome = "imported"
                _assert_whole(content, result["chains_created"] + result["chains_duplicate"], body)
            else:
                outcome = "rejected"
                assert body["status"] == "failed", body
                _assert_line_numbered(content, fmt, [e["line"] for e in body["errors"]], body)
            stored = sorted(Path(os.environ["STEPLAB_IMPORT_DIR"]).rglob("*.upload"))
            assert not stored, f"stored uploads left behind: {stored}"
        self.outcomes[outcome] += 1
        if outcome != "imported":
            assert self.counts() == before, outcome

    def _check_command(self, content: bytes, fmt: str, work: Path) -> None:
        import re
        from io import StringIO

        from django.core.management import call_command
        from django.core.management.base import CommandError

        if len(content) > self.cap:
            return
        path = work / "input.jsonl"
        path.write_bytes(content)
        before = self.counts()
        out = StringIO()
        try:
            call_command("import_chains", str(self.project.pk), str(path), format=fmt, stdout=out)
        except CommandError as error:
            assert self.counts() == before, str(error)
            lines = [
                int(n)
                for n in re.findall(
                    r"^  (?:record \d+ \()?line (\d+)\)?: ", str(error), re.MULTILINE
                )
            ]
            _assert_line_numbered(content, fmt, lines, str(error))
            return
        summary = out.getvalue()
        if summary.startswith("already imported"):
            return
        found = re.search(r"imported ([\d,]+) chains?.*; ([\d,]+) duplicates?", summary)
        assert found, summary
        created, duplicates = (int(group.replace(",", "")) for group in found.groups())
        _assert_whole(content, created + duplicates, summary)


def _run_job(job_id: int) -> None:
    """What the worker's ``annotation.import_job`` task does with the job."""
    from annotation.datasets.import_jobs import import_job_execute

    import_job_execute(job_id=job_id)


def _record_count(content: bytes) -> int | None:
    """How many records the file holds, by the standard library's reading; None when it
    cannot read it (then no import of it may succeed)."""
    try:
        text = content.decode("utf-8-sig")
        if text.lstrip().startswith("["):
            return len(json.loads(text))
        return sum(1 for line in text.split("\n") if line.strip(" \t\r"))
    except (ValueError, RecursionError):
        return None


def _assert_whole(content: bytes, chains: int, detail: object) -> None:
    expected = _record_count(content)
    assert expected is not None and chains == expected, (chains, expected, detail)


def _assert_line_numbered(content: bytes, fmt: str, lines: list[int], detail: object) -> None:
    """A rejection names lines that exist; only format detection may reject a file
    without naming one."""
    if not lines:
        assert fmt == "auto", detail
        return
    records = max(content.count(b"\n") + 1, content.count(b",") + 1)
    assert all(1 <= line <= records for line in lines), (lines, detail)


def _property(checker: _Checker, *, examples: int, work: Path) -> None:
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import strategies as st

    from tests.annotation.datasets.import_inputs import import_files

    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        # No explain phase: its line tracing costs memory the imports are measured by.
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )
    @given(
        content=import_files(max_bytes=UPLOAD_CAP_BYTES + 4096), fmt=st.sampled_from(FORMATS_TRIED)
    )
    def imported_whole_or_rejected_with_line_numbers(content: bytes, fmt: str) -> None:
        checker.check(content, fmt, work=work)

    imported_whole_or_rejected_with_line_numbers()


def _resident_peak_kib() -> int:
    """VmHWM: the most resident memory this process has held so far."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


def _stream(arguments: dict[str, Any]) -> None:
    import shutil
    import uuid

    from django.contrib.auth import get_user_model
    from django.core.handlers.wsgi import WSGIHandler

    from annotation.models import ImportJob
    from tests.factories import api_token_key

    source = Path(arguments["file"])
    body = Path(arguments["work"]) / "body.multipart"
    boundary = uuid.uuid4().hex
    with body.open("wb") as out, source.open("rb") as stream:
        out.write(
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
            f'filename="{source.name}"\r\nContent-Type: application/jsonl\r\n\r\n'.encode()
        )
        shutil.copyfileobj(stream, out, 1024 * 1024)
        out.write(f"\r\n--{boundary}--\r\n".encode())
    token_key = api_token_key(get_user_model().objects.get(pk=arguments["user"]))
    handler = WSGIHandler()
    before = _resident_peak_kib()
    with body.open("rb") as wsgi_input:
        environ = {
            "REQUEST_METHOD": "POST",
            "PATH_INFO": f"/api/v1/projects/{arguments['project']}/imports/",
            "SERVER_NAME": "localhost",
            "SERVER_PORT": "80",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "wsgi.url_scheme": "http",
            "wsgi.input": wsgi_input,
            "wsgi.errors": sys.stderr,
            "CONTENT_TYPE": f"multipart/form-data; boundary={boundary}",
            "CONTENT_LENGTH": str(body.stat().st_size),
            "HTTP_AUTHORIZATION": f"Token {token_key}",
            "HTTP_HOST": "localhost",
        }
        statuses: list[str] = []
        response = handler(environ, lambda status, headers, *rest: statuses.append(status))
        answer = json.loads(b"".join(response))
        _run_job(answer["id"])
    after = _resident_peak_kib()
    assert statuses[0].startswith("202"), (statuses, answer)
    job = ImportJob.objects.get(pk=answer["id"])
    print(
        "stream",
        json.dumps(
            {
                "status": statuses[0],
                "job": job.status,
                "records_read": job.records_read,
                "chains_created": (job.result or {}).get("chains_created"),
                "detail": job.detail,
                "file_bytes": source.stat().st_size,
                "peak_before_kib": before,
                "peak_after_kib": after,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
