"""The client's errors: each carries a sentence for a person, which the command line
prints instead of a traceback."""

from __future__ import annotations

from typing import Any


class SteplabError(Exception):
    """Any error of the client."""


class ConfigError(SteplabError):
    """No server URL or token, or an unreadable config file."""


class ApiError(SteplabError):
    """The server answered with an error status: ``status``, and its JSON ``body`` when
    it sent one; ``str()`` is the status and the server's own message."""

    def __init__(self, *, status: int, method: str, path: str, body: Any) -> None:
        self.status = status
        self.method = method
        self.path = path
        self.body = body
        super().__init__(f"{method} {path}: HTTP {status}: {error_message(body)}")


class JobFailed(SteplabError):
    """A followed import or run ended failed or cancelled; ``job`` is its last state."""

    def __init__(self, message: str, *, job: dict[str, Any]) -> None:
        self.job = job
        super().__init__(message)


def error_message(body: Any) -> str:
    """The server's message in one line: DRF's ``detail``, field errors as
    ``field: message``, or the text of a body that is not JSON."""
    if isinstance(body, str):
        return body.strip()[:500] or "(no message)"
    if isinstance(body, list):
        return "; ".join(error_message(item) for item in body) or "(no message)"
    if not isinstance(body, dict):
        return str(body)
    parts: list[str] = []
    if "detail" in body:
        parts.append(error_message(body["detail"]))
    for key, value in body.items():
        if key in ("detail", "code"):
            continue
        if key == "errors" and isinstance(value, list):
            # The invite list's and the import's bad lines: each line's own message.
            for row in value:
                if isinstance(row, dict):
                    where = row.get("line", "?")
                    parts.append(f"line {where}: {row.get('message') or row.get('reason')}")
            continue
        parts.append(f"{key}: {error_message(value)}")
    return "; ".join(parts) or "(no message)"
