#!/usr/bin/env python
"""The attacks of issue 22 (points 1, 3 and 4) against a running production-profile
server, each with what it cost the server.

    .venv/bin/python bench/bench_attacks.py [--upload-mib 1024] [--quick]
        [--database-url URL] [--out bench/out/attacks.json]

Creates (or recreates) the bench database, a project with a lead (signed in through the
login page, as a browser), an annotator, ML staff and a non-member, and serves it from
gunicorn (config.settings.prod, 2 workers x 4 threads) with its own temporary directory.
Then, one at a time, it sends:

- a multipart upload of --upload-mib MiB to the imports as a non-member, an annotator,
  and the lead with a wrong CSRF token, and to guidelines/preview/ and
  assignments/{id}/flag/ as a non-member (point 1);
- guidelines of 200,000 `[` and of 50,000 characters whose brackets take markdown-it
  seconds, to the preview and saved on the project, then the workspace page of a project
  whose stored guidelines are 100,000 characters (point 3); 100,000 characters of a
  table and of nested lists (block Markdown, which the renderer's CPU bound stops), each
  alone and 16 at once, with /healthz's answer time during each burst;
- training runs asking for 64 processes, a batch of 4,096 and a 32,768-token window
  (point 4);
- what an anonymous caller may make the server hold or store: an 8 MiB SAMLResponse of
  random base64 to an organization's assertion consumer (no cookie, no CSRF token), a
  body of 10 MiB of `[{},{},...]` to the token sign-in, and ML staff's judge template
  `{problem:>1000000000}{tagged_response}`, each alone and 16 at once, with the session
  rows each left in the database;
- and, for reference, the lead's own upload with the token in the header (accepted: its
  written bytes are the spooled file and the job's copy, what the measure sees).

Per attack it prints the status, the bytes the server's workers wrote (Linux
/proc/PID/io `wchar`: every write() to a file, pipe or socket, so the response and the
log line count too), their peak resident memory (sampled every 10 ms), the seconds, and
the CPU seconds the workers and their finished children (the guidelines renderer) spent.
Exit status 1 when an answer is not the expected one or a worker wrote 1 MiB or more.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

from bench_foundation import (  # noqa: E402  (a sibling script, found through BENCH_DIR)
    bench_database_prepare,
    django_setup,
    gunicorn_running,
)

TITLE = "Steplab attack benchmark: what a refused request costs the server"
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/steplab_bench_attacks"
DEFAULT_OUT = REPO_ROOT / "bench" / "out" / "attacks.json"
PASSWORD = "bench-attacks-1"
BOUNDARY = "steplab-bench-attack"
WRITE_BOUND = 1024 * 1024
REFERENCE = "reference"
SLOW_GUIDELINES = "[" * 1000 + "a\n" * 24_500
# Block Markdown that costs CPU per row and per marker: 100,000 characters of a table of
# empty cells, and of lines of nested list markers.
TABLE_GUIDELINES = ("|a|b|c|d|\n|-|-|-|-|\n" + "||||\n" * 20_000)[:100_000]
NESTED_LIST_GUIDELINES = (("- " * 20 + "x\n") * 2400)[:100_000]
AT_ONCE = 16
# The SAML organization the server is configured with (its IdP never answers: nothing
# posted here gets as far as needing it), and what anonymous callers post.
SAML_ORG = "bench-idp"
SAML_BODY_BYTES = 8 * 1024 * 1024
EMPTY_OBJECTS_BYTES = 10 * 1024 * 1024 - 64
WIDE_TEMPLATE = "{problem:>1000000000}{tagged_response}"
# /healthz's answer time (s) while each burst of AT_ONCE requests ran, and the answers the
# burst got (status: count), by attack.
HEALTHZ_DURING: dict[str, float] = {}
BURST_ANSWERS: dict[str, dict[int, int]] = {}


@dataclass
class Result:
    attack: str
    status: int
    expected: int
    written_bytes: int
    peak_rss_mib: float
    seconds: float
    reference: bool = False  # an accepted request, to show what the measure sees
    # The CPU the workers and their finished children (the guidelines renderer) spent.
    cpu_seconds: float = 0.0
    requests: int = 1  # sent at once; the write bound is per request
    rows_stored: int = 0  # session rows the attack left in the database

    @property
    def ok(self) -> bool:
        bounded = self.reference or self.written_bytes < WRITE_BOUND * self.requests
        stored = self.reference or self.rows_stored == 0
        return self.status == self.expected and bounded and stored


# --------------------------------------------------------------------------- server


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _wchar(pids: Sequence[int]) -> int:
    total = 0
    for pid in pids:
        found = re.search(r"^wchar: (\d+)$", Path(f"/proc/{pid}/io").read_text(), re.M)
        total += int(found.group(1)) if found else 0
    return total


def _rss_mib(pids: Sequence[int]) -> float:
    total = 0
    for pid in pids:
        found = re.search(r"^VmRSS:\s+(\d+) kB$", Path(f"/proc/{pid}/status").read_text(), re.M)
        total += int(found.group(1)) if found else 0
    return total / 1024


class PeakMemory:
    """The workers' summed RSS, sampled every 10 ms while the block runs."""

    def __init__(self, pids: Sequence[int]) -> None:
        self.pids = pids
        self.peak = 0.0
        self._stop = threading.Event()

    def __enter__(self) -> PeakMemory:
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _rss_mib(self.pids))
            time.sleep(0.01)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss_mib(self.pids))


# --------------------------------------------------------------------------- requests


def _multipart(size: int) -> Iterator[bytes]:
    head = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; '
        'filename="chains.jsonl"\r\nContent-Type: application/jsonl\r\n\r\n'
    ).encode()
    tail = f"\r\n--{BOUNDARY}--\r\n".encode()
    block = b'{"problem": "p", "steps": ["s"]}\n' * 32_768
    yield head
    left = size - len(head) - len(tail)
    while left > 0:
        piece = block[:left]
        left -= len(piece)
        yield piece
    yield tail


def _send(
    port: int, method: str, path: str, headers: dict[str, str], body: Iterator[bytes], size: int
) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    try:
        connection.putrequest(method, path)
        connection.putheader("Content-Length", str(size))
        for name, value in headers.items():
            connection.putheader(name, value)
        connection.endheaders()
        try:
            for chunk in body:
                connection.send(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # answered and closed before the whole body went
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def upload(port: int, path: str, headers: dict[str, str], size: int) -> int:
    content_type = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}
    return _send(port, "POST", path, {**content_type, **headers}, _multipart(size), size)


def send_json(port: int, method: str, path: str, headers: dict[str, str], data: Any) -> int:
    body = json.dumps(data).encode()
    content_type = {"Content-Type": "application/json"}
    return _send(port, method, path, {**content_type, **headers}, iter([body]), len(body))


def _cpu_seconds(pids: Sequence[int]) -> float:
    """utime + stime + cutime + cstime of each process (/proc/PID/stat, in clock ticks)."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += sum(int(value) for value in fields[11:15])
    return total / os.sysconf("SC_CLK_TCK")


def at_once(port: int, name: str, send: Callable[[int], int]) -> int:
    """AT_ONCE copies of ``send`` together: 429 when each was refused, some as too slow
    (400) and the rest told to come back (429: the renderings one process runs at once),
    else 0; /healthz's answer time meanwhile in HEALTHZ_DURING."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(AT_ONCE) as pool:
        sent = [pool.submit(send, port) for _ in range(AT_ONCE)]
        time.sleep(0.2)
        started = time.perf_counter()
        get(port, "/healthz", {})
        HEALTHZ_DURING[name] = round(time.perf_counter() - started, 2)
        statuses = [future.result() for future in sent]
    BURST_ANSWERS[name] = {code: statuses.count(code) for code in sorted(set(statuses))}
    return 429 if 429 in statuses and set(statuses) <= {400, 429} else 0


def all_at_once(port: int, name: str, send: Callable[[int], int]) -> int:
    """AT_ONCE copies of ``send`` together: their status when all got the same, else 0;
    the answers in BURST_ANSWERS."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(AT_ONCE) as pool:
        statuses = list(pool.map(send, [port] * AT_ONCE))
    BURST_ANSWERS[name] = {code: statuses.count(code) for code in sorted(set(statuses))}
    return statuses[0] if len(set(statuses)) == 1 else 0


def saml_response_post(port: int) -> int:
    """An anonymous POST of SAML_BODY_BYTES of form body (a SAMLResponse of random
    base64) to the organization's assertion consumer: no cookie, no CSRF token."""
    import base64

    head = b"SAMLResponse="
    raw = os.urandom((SAML_BODY_BYTES - len(head)) * 3 // 4)
    body = head + base64.b64encode(raw).replace(b"+", b"-").replace(b"/", b"_")
    content_type = {"Content-Type": "application/x-www-form-urlencoded"}
    path = f"/accounts/saml/{SAML_ORG}/acs/"
    return _send(port, "POST", path, content_type, iter([body]), len(body))


def empty_objects_post(port: int) -> int:
    """An anonymous token sign-in whose body is EMPTY_OBJECTS_BYTES of `[{},{},...]`."""
    body = b"[" + b"{}," * ((EMPTY_OBJECTS_BYTES - 4) // 3) + b"{}]"
    content_type = {"Content-Type": "application/json"}
    return _send(port, "POST", "/api/v1/auth/token/", content_type, iter([body]), len(body))


def saml_provider_entry() -> str:
    """STEPLAB_SAML_PROVIDERS for one organization whose IdP's certificate is a fresh
    self-signed one (nothing here is signed with its key)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bench idp")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .sign(key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM).decode()
    entry = {
        "id": SAML_ORG,
        "name": "Bench IdP",
        "entity_id": "https://idp.bench.invalid/",
        "sso_url": "https://idp.bench.invalid/sso",
        "x509cert": pem,
    }
    return json.dumps([entry])


def _session_rows() -> int:
    from django.contrib.sessions.models import Session

    return Session.objects.count()


def get(port: int, path: str, headers: dict[str, str]) -> int:
    return _send(port, "GET", path, headers, iter([]), 0)


def sign_in(port: int, username: str) -> dict[str, str]:
    """A browser's session headers: its cookies (by hand: the production profile marks
    them Secure) and the CSRF token in the header."""
    import requests

    base = f"http://127.0.0.1:{port}"
    csrf = requests.get(base + "/login/", timeout=30).cookies["csrftoken"]
    signed_in = requests.post(
        base + "/login/",
        data={"username": username, "password": PASSWORD, "csrfmiddlewaretoken": csrf},
        cookies={"csrftoken": csrf},
        headers={"Referer": base + "/login/"},
        allow_redirects=False,
        timeout=30,
    )
    if signed_in.status_code != 302:
        raise SystemExit(f"sign-in failed: {signed_in.status_code}")
    csrf = signed_in.cookies.get("csrftoken") or csrf
    cookie = f"sessionid={signed_in.cookies['sessionid']}; csrftoken={csrf}"
    return {"Cookie": cookie, "X-CSRFToken": csrf}


# --------------------------------------------------------------------------- fixture


@dataclass(frozen=True)
class World:
    project_id: int
    big_project_id: int
    tokens: dict[str, str]


def world_create() -> World:
    """Two projects (one with 100,000 characters of guidelines, saved through the service
    so their rendering is stored) and their people with tokens."""
    from django.contrib.auth import get_user_model

    from annotation.api.tokens import api_token_create
    from annotation.models import Membership, Role
    from annotation.projects.services import project_create, project_update

    tag = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    users = {}
    for name in ("lead", "annotator", "ml", "stranger"):
        users[name] = get_user_model().objects.create_user(
            username=f"bench-{name}-{tag}", password=PASSWORD
        )
    project = project_create(name=f"bench-attacks-{tag}", created_by=users["lead"])
    big = project_create(name=f"bench-attacks-big-{tag}", created_by=users["lead"])
    paragraph = "Rate **each** step; see [the rules](https://example.org/) and $a^2$.\n\n"
    project_update(project=big, data={"guidelines": (paragraph * 1500)[:100_000]})
    for p in (project, big):
        Membership.objects.create(project=p, user=users["annotator"], role=Role.ANNOTATOR)
        Membership.objects.create(project=p, user=users["ml"], role=Role.ML)
    tokens = {name: api_token_create(user=user, name="bench").key for name, user in users.items()}
    tokens["lead_username"] = users["lead"].username
    return World(project_id=project.pk, big_project_id=big.pk, tokens=tokens)


# --------------------------------------------------------------------------- attacks


def attacks(
    world: World, session: dict[str, str], size: int
) -> list[tuple[str, int, Callable[[int], int]]]:
    """(name, expected status, send(port) -> status) for every attack."""

    def bearer(name: str) -> dict[str, str]:
        return {"Authorization": f"Token {world.tokens[name]}"}

    imports = f"/api/v1/projects/{world.project_id}/imports/"
    preview = "/api/v1/guidelines/preview/"
    project = f"/api/v1/projects/{world.project_id}/"
    runs = f"{project}training-runs/"
    loop_settings = f"{project}training-settings/"
    wide = {"judge_template": WIDE_TEMPLATE}
    workspace = f"/projects/{world.big_project_id}/label/"
    mib = f"{size / 2**20:,.0f} MiB"
    wrong_csrf = {**session, "X-CSRFToken": "x" * 32}
    stranger, annotator, ml = bearer("stranger"), bearer("annotator"), bearer("ml")
    slow = {"guidelines": SLOW_GUIDELINES}
    # Each user's previews are rate-limited: the bursts come from users with few others.
    table, nested = {"guidelines": TABLE_GUIDELINES}, {"guidelines": NESTED_LIST_GUIDELINES}
    return [
        (f"{mib} upload: imports, non-member", 404, lambda p: upload(p, imports, stranger, size)),
        (f"{mib} upload: imports, annotator", 403, lambda p: upload(p, imports, annotator, size)),
        (
            f"{mib} upload: imports, lead, wrong CSRF",
            403,
            lambda p: upload(p, imports, wrong_csrf, size),
        ),
        (f"{mib} upload: guidelines preview", 415, lambda p: upload(p, preview, stranger, size)),
        (
            f"{mib} upload: assignments/1/flag/",
            415,
            lambda p: upload(p, "/api/v1/assignments/1/flag/", stranger, size),
        ),
        (
            "preview: 200,000 [",
            400,
            lambda p: send_json(p, "POST", preview, annotator, {"guidelines": "[" * 200_000}),
        ),
        (
            "preview: 50,000 chars, slow brackets",
            400,
            lambda p: send_json(p, "POST", preview, annotator, slow),
        ),
        (
            "preview: 100,000-char table",
            400,
            lambda p: send_json(p, "POST", preview, annotator, {"guidelines": TABLE_GUIDELINES}),
        ),
        (
            f"preview: 100,000-char table, {AT_ONCE} at once",
            429,
            lambda p: at_once(p, "table", lambda q: send_json(q, "POST", preview, ml, table)),
        ),
        (
            "preview: 100,000-char nested lists",
            400,
            lambda p: send_json(p, "POST", preview, annotator, nested),
        ),
        (
            f"preview: 100,000-char nested lists, {AT_ONCE} at once",
            429,
            lambda p: at_once(
                p, "lists", lambda q: send_json(q, "POST", preview, stranger, nested)
            ),
        ),
        (
            "save guidelines: slow brackets",
            400,
            lambda p: send_json(p, "PATCH", project, session, slow),
        ),
        (
            "workspace page, 100,000-char guidelines",
            200,
            lambda p: get(p, workspace, {"Cookie": session["Cookie"]}),
        ),
        (
            "training run: 64 processes",
            400,
            lambda p: send_json(p, "POST", runs, ml, {"mode": "full", "processes": 64}),
        ),
        (
            "training run: batch 4,096, window 32,768",
            400,
            lambda p: send_json(p, "POST", runs, ml, {"batch_size": 4096, "max_length": 32_768}),
        ),
        ("SAML: 8 MiB SAMLResponse, anonymous", 413, saml_response_post),
        (
            f"SAML: 8 MiB SAMLResponse, {AT_ONCE} at once",
            413,
            lambda p: all_at_once(p, "saml", saml_response_post),
        ),
        ("token sign-in: 10 MiB of [{},...], anonymous", 400, empty_objects_post),
        (
            f"token sign-in: 10 MiB of [{{}},...], {AT_ONCE} at once",
            400,
            lambda p: all_at_once(p, "empty objects", empty_objects_post),
        ),
        (
            "judge template: width 1,000,000,000",
            400,
            lambda p: send_json(p, "PATCH", loop_settings, ml, wide),
        ),
        (
            f"judge template: width 1,000,000,000, {AT_ONCE} at once",
            400,
            lambda p: all_at_once(
                p, "template", lambda q: send_json(q, "PATCH", loop_settings, ml, wide)
            ),
        ),
        (
            f"{REFERENCE}: {mib} upload, the lead's own",
            202,
            lambda p: upload(p, imports, session, size),
        ),
    ]


def run(args: argparse.Namespace) -> dict[str, Any]:
    bench_database_prepare(url=args.database_url, recreate=not args.keep_db)
    django_setup(args.database_url)
    world = world_create()
    size = args.upload_mib * 1024 * 1024
    with tempfile.TemporaryDirectory(prefix="steplab-bench-attacks-") as workdir:
        temp = Path(workdir) / "tmp"
        temp.mkdir()
        os.environ["TMPDIR"] = str(temp)  # the server's temporary directory
        os.environ["STEPLAB_IMPORT_DIR"] = str(Path(workdir) / "imports")
        os.environ["STEPLAB_SAML_PROVIDERS"] = saml_provider_entry()
        with gunicorn_running(
            database_url=args.database_url, workers=2, log_path=Path(workdir) / "gunicorn.log"
        ) as (port, master):
            workers = _children(master)
            session = sign_in(port, world.tokens["lead_username"])
            results = []
            for name, expected, send in attacks(world, session, size):
                before, cpu_before = _wchar(workers), _cpu_seconds(workers)
                rows_before = _session_rows()
                with PeakMemory(workers) as memory:
                    started = time.perf_counter()
                    status = send(port)
                    seconds = time.perf_counter() - started
                written = _wchar(workers) - before
                rows = _session_rows() - rows_before
                cpu = round(_cpu_seconds(workers) - cpu_before, 2)
                peak = round(memory.peak, 1)
                reference = name.startswith(REFERENCE)
                requests = AT_ONCE if name.endswith(f"{AT_ONCE} at once") else 1
                result = Result(
                    name, status, expected, written, peak, seconds, reference, cpu, requests, rows
                )
                results.append(result)
                print(_row(result), flush=True)
            left_behind = sorted(str(p) for p in temp.iterdir())
    return {
        "title": TITLE,
        "machine": f"{platform.node()} ({platform.machine()}, {os.cpu_count()} CPUs)",
        "date": time.strftime("%Y-%m-%d"),
        "upload_mib": args.upload_mib,
        "results": [{**asdict(r), "ok": r.ok} for r in results],
        "temporary_files_left": left_behind,
        "healthz_seconds_during_bursts": HEALTHZ_DURING,
        "burst_answers": BURST_ANSWERS,
        "checks": [
            {
                "metric": r.attack,
                "value": f"{r.status}, {r.written_bytes:,} B, {r.peak_rss_mib} MiB, "
                f"{r.seconds:.2f} s, {r.cpu_seconds:.2f} s CPU, {r.rows_stored} rows stored",
                "target": f"{r.expected}"
                if r.reference
                else f"{r.expected}, < 1 MiB written per request",
                "ok": r.ok,
            }
            for r in results
        ],
    }


HEADER = (
    f"{'attack':<44} {'status':>6} {'expect':>6} {'written B':>11} {'peak RSS MiB':>12} {'s':>7}"
    f" {'CPU s':>6}"
)


def _row(r: Result) -> str:
    mark = "" if r.ok else "  <-- FAIL"
    return (
        f"{r.attack:<44} {r.status:>6} {r.expected:>6} {r.written_bytes:>11,} "
        f"{r.peak_rss_mib:>12.1f} {r.seconds:>7.2f} {r.cpu_seconds:>6.2f}{mark}"
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upload-mib", type=int, default=1024, help="size of each upload")
    parser.add_argument("--quick", action="store_true", help="64 MiB uploads")
    parser.add_argument("--database-url", default=DEFAULT_DATABASE_URL)
    parser.add_argument("--keep-db", action="store_true", help="do not recreate the database")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if args.quick:
        args.upload_mib = 64
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    print(TITLE)
    print(HEADER)
    report = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    failed = [c for c in report["checks"] if not c["ok"]]
    if report["temporary_files_left"]:
        print(f"temporary files left: {report['temporary_files_left']}")
    for burst, seconds in report["healthz_seconds_during_bursts"].items():
        answers = report["burst_answers"].get(burst)
        print(f"/healthz during {AT_ONCE} previews at once ({burst}): {seconds:.2f} s; {answers}")
    print(f"{report['machine']}, {report['date']}; report: {args.out}")
    return 1 if failed or report["temporary_files_left"] else 0


if __name__ == "__main__":
    sys.exit(main())
