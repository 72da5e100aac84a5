"""Uploads against a real gunicorn (the production profile, `make web`): a multipart body
costs nothing before the caller is known to be allowed to send it.

Given a project with a lead, an annotator and a non-member, when each sends a 48 MiB
multipart body (the import's non-member, annotator and wrong-CSRF callers; JSON endpoints
and a page for anyone), then each is answered 403/404/413/415 and the server wrote
nothing: no file in its temporary directory, and its workers' write() calls (Linux
/proc/PID/io `wchar`, which counts every byte written to a file, pipe or socket) grew by
less than 1 MiB. The lead's own upload, with the right token, is accepted and shows the
measure sees a spooled upload. (config.uploads; the limits in README "Limits".)"""

from __future__ import annotations

import http.client
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from annotation.models import Role
from tests.factories import MembershipFactory, ProjectFactory
from tests.test_deploy_processes import Process, child_pids, free_port, http_get, wait_for
from tests.test_deploy_processes import deployment_env as deployment_env  # noqa: F401 (fixture)
from tests.test_deploy_processes import start as start  # noqa: F401 (fixture)

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(300)]

BODY_BYTES = 48 * 1024 * 1024
BOUNDARY = "steplab-upload-bound"
PASSWORD = "right-password-1"


def _multipart_chunks(size: int) -> tuple[int, Iterator[bytes]]:
    """A multipart body of ``size`` bytes whose one part is a file, and its length."""
    head = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; '
        'filename="chains.jsonl"\r\nContent-Type: application/jsonl\r\n\r\n'
    ).encode()
    tail = f"\r\n--{BOUNDARY}--\r\n".encode()
    filler = size - len(head) - len(tail)
    line = b'{"problem": "p", "steps": ["s"]}\n'
    block = line * (1024 * 1024 // len(line))

    def chunks() -> Iterator[bytes]:
        yield head
        left = filler
        while left > 0:
            piece = block[:left]
            left -= len(piece)
            yield piece
        yield tail

    return size, chunks()


def _upload(port: int, path: str, headers: dict[str, str]) -> int:
    """POST the multipart body, streamed; the status (the server may answer before the
    body is sent: it then reads and drops the rest, to keep the connection)."""
    length, chunks = _multipart_chunks(BODY_BYTES)
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        connection.putrequest("POST", path)
        connection.putheader("Content-Type", f"multipart/form-data; boundary={BOUNDARY}")
        connection.putheader("Content-Length", str(length))
        for name, value in headers.items():
            connection.putheader(name, value)
        connection.endheaders()
        try:
            for chunk in chunks:
                connection.send(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # answered and closed before the whole body was sent
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def _written(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        io = Path(f"/proc/{pid}/io").read_text()
        total += int(re.search(r"^wchar: (\d+)$", io, re.M).group(1))  # type: ignore[union-attr]
    return total


def _sign_in(port: int, username: str) -> dict[str, str]:
    """A browser's session: its cookies (sent back by hand: the production profile marks
    them Secure, which a client sends only over HTTPS) and its CSRF token."""
    import requests

    base = f"http://127.0.0.1:{port}"
    page = requests.get(base + "/login/", timeout=30)
    csrf = page.cookies["csrftoken"]
    signed_in = requests.post(
        base + "/login/",
        data={"username": username, "password": PASSWORD, "csrfmiddlewaretoken": csrf},
        cookies={"csrftoken": csrf},
        headers={"Referer": base + "/login/"},
        allow_redirects=False,
        timeout=30,
    )
    assert signed_in.status_code == 302, signed_in.text
    session = signed_in.cookies["sessionid"]
    csrf = signed_in.cookies.get("csrftoken") or csrf
    return {"Cookie": f"sessionid={session}; csrftoken={csrf}", "X-CSRFToken": csrf}


def test_a_refused_upload_writes_nothing(
    start: Callable[..., Process],  # noqa: F811 (the fixture imported above)
    deployment_env: dict[str, str],  # noqa: F811
    django_user_model: Any,
    tmp_path: Path,
) -> None:
    from django.contrib.auth.hashers import PBKDF2PasswordHasher

    from tests.factories import api_token_key

    # Given: a project, its lead and annotator, a non-member, and gunicorn with its own
    # temporary directory and import directory
    hasher = PBKDF2PasswordHasher()
    hashed = hasher.encode(PASSWORD, hasher.salt())
    people = {
        name: django_user_model.objects.create(username=name, password=hashed)
        for name in ("lead", "annotator", "stranger")
    }
    project: Any = ProjectFactory()
    MembershipFactory(project=project, user=people["lead"], role=Role.LEAD)
    MembershipFactory(project=project, user=people["annotator"], role=Role.ANNOTATOR)
    token = {name: api_token_key(user) for name, user in people.items()}
    temp = tmp_path / "tmp"
    temp.mkdir()
    deployment_env["TMPDIR"] = str(temp)
    deployment_env["STEPLAB_IMPORT_DIR"] = str(tmp_path / "imports")
    port = free_port()
    web = start("web", HOST="127.0.0.1", PORT=str(port), WEB_WORKERS="1")

    def web_healthy() -> bool:
        try:
            return http_get(port, "/healthz")[0] == 200
        except OSError:
            return False

    wait_for(web_healthy, what="gunicorn's /healthz", processes=[web])
    (master,) = child_pids(web.popen.pid)
    workers = child_pids(master)
    assert workers
    lead_session = _sign_in(port, "lead")
    csrf = lead_session["X-CSRFToken"]
    imports = f"/api/v1/projects/{project.pk}/imports/"

    def bearer(name: str) -> dict[str, str]:
        return {"Authorization": f"Token {token[name]}"}

    attacks: dict[str, tuple[str, dict[str, str], int]] = {
        "import, non-member": (imports, bearer("stranger"), 404),
        "import, annotator": (imports, bearer("annotator"), 403),
        "import, lead with a wrong CSRF token": (
            imports,
            {**lead_session, "X-CSRFToken": "x" * 32},
            403,
        ),
        "import, lead's session, token only in a form field": (
            imports,
            {"Cookie": lead_session["Cookie"]},
            403,
        ),
        "guidelines preview": ("/api/v1/guidelines/preview/", bearer("stranger"), 415),
        "flag someone else's lease": ("/api/v1/assignments/1/flag/", bearer("stranger"), 415),
        "skip, lead's session": ("/api/v1/assignments/1/skip/", lead_session, 415),
        "requeue": ("/api/v1/chains/1/requeue/", bearer("lead"), 415),
        "sign-in page, no CSRF cookie": ("/login/", {}, 403),
        "sign-in page, with its CSRF cookie": ("/login/", {"Cookie": f"csrftoken={csrf}"}, 413),
    }
    # When: each sends its 48 MiB upload
    for name, (path, headers, expected) in attacks.items():
        before = _written(workers)
        status = _upload(port, path, headers)
        written = _written(workers) - before
        # Then: refused, and nothing of it written anywhere
        assert (name, status) == (name, expected), web.output()[-3000:]
        assert written < 1024 * 1024, (name, written)
        assert list(temp.iterdir()) == [], name
    # And: the lead's own upload, with the token in the header, is spooled and accepted
    before = _written(workers)
    assert _upload(port, imports, lead_session) == 202, web.output()[-3000:]
    assert _written(workers) - before > BODY_BYTES
    assert list(temp.iterdir()) == []
