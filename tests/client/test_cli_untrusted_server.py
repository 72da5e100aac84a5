"""The client trusts no path a server sends: an export's file name from Content-Disposition
is reduced to a plain name inside ``--out`` (or the current folder), whatever the server
says. And the token need not stand on the command line, where every user of the machine
reads it (``/proc/<pid>/cmdline``): STEPLAB_TOKEN, ``--token-file`` or the config file."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from steplab_client.cli import main
from steplab_client.cli_parser import build_parser
from steplab_client.config import settings_resolve
from steplab_client.errors import ConfigError


class _Hostile(BaseHTTPRequestHandler):
    """Answers every GET with an export whose file name is ``server.filename``."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = b'{"prompt": "p", "completions": ["a"], "labels": [true]}\n'
        self.send_response(200)
        self.send_header("Content-Type", "application/jsonl")
        name = self.server.filename  # type: ignore[attr-defined]
        self.send_header("Content-Disposition", f'attachment; filename="{name}"')
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hostile(monkeypatch: pytest.MonkeyPatch) -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("STEPLAB_URL", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("STEPLAB_TOKEN", "t0ken")
    monkeypatch.setenv("STEPLAB_CONFIG", "/nonexistent/steplab.toml")
    yield server
    server.shutdown()
    server.server_close()


NAMES = [
    "../../x",
    "../x.jsonl",
    "/tmp/steplab-absolute.jsonl",
    "..",
    ".",
    "a/b/../../../c",
    "..\\..\\win.jsonl",
    "sub/dir/name.jsonl",
    ".bashrc",
    "",
]


@pytest.mark.parametrize("name", NAMES)
def test_an_export_lands_inside_the_out_folder_whatever_name_the_server_sends(
    hostile: ThreadingHTTPServer, tmp_path: Path, name: str
) -> None:
    # Given a server that names its file with a path out of the folder
    hostile.filename = name  # type: ignore[attr-defined]
    out = tmp_path / "a" / "b" / "out"
    out.mkdir(parents=True)
    before = {p for p in tmp_path.rglob("*")}
    # When the export is downloaded into out/
    code = main(["export", "1", "--format", "trl", "--out", str(out)])
    # Then exactly one plain, visible file was written, inside out/
    assert code == 0
    written = {p for p in tmp_path.rglob("*")} - before
    assert len(written) == 1, written
    (path,) = written
    assert path.parent == out
    assert not path.name.startswith(".")
    assert not Path("/tmp/steplab-absolute.jsonl").exists()


def test_without_out_the_export_lands_in_the_current_folder(
    hostile: ThreadingHTTPServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hostile.filename = "../../escaped.jsonl"  # type: ignore[attr-defined]
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    assert main(["export", "1", "--format", "trl"]) == 0
    assert [p.name for p in here.iterdir()] == ["escaped.jsonl"]
    assert not (tmp_path / "escaped.jsonl").exists()


def test_the_token_can_come_from_a_file_and_help_says_where_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a token in a file and none in the environment
    monkeypatch.delenv("STEPLAB_TOKEN", raising=False)
    monkeypatch.setenv("STEPLAB_CONFIG", str(tmp_path / "none.toml"))
    token_file = tmp_path / "token"
    token_file.write_text("from-a-file\n")
    # Then it is read from there, by argument or by STEPLAB_TOKEN_FILE
    assert settings_resolve(url="https://x", token_file=str(token_file)).token == "from-a-file"
    monkeypatch.setenv("STEPLAB_TOKEN_FILE", str(token_file))
    assert settings_resolve(url="https://x").token == "from-a-file"
    # ...an unreadable one is a configuration error naming it
    with pytest.raises(ConfigError, match="missing"):
        settings_resolve(url="https://x", token_file=str(tmp_path / "missing"))
    # And --help tells where a token may come from besides the command line, and why
    monkeypatch.setenv("COLUMNS", "10000")
    text = " ".join(build_parser().format_help().split())
    assert "--token-file" in text and "STEPLAB_TOKEN" in text
    assert "process list" in text


def test_a_token_on_the_command_line_is_warned_about(
    hostile: ThreadingHTTPServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hostile.filename = "x.jsonl"  # type: ignore[attr-defined]
    code = main(["export", "1", "--format", "trl", "--out", str(tmp_path), "--token", "t0ken"])
    assert code == 0
    assert "process list" in capsys.readouterr().err
