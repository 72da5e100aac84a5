"""A real HTTP receiver for the webhook tests: ``http.server`` on 127.0.0.1 in a thread,
keeping every request it gets (path, headers, body) and answering with ``status``. It can
be stopped (then nothing listens on its port: a dead receiver) and started again on the
same port."""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks import Webhook as Verifier

from tests.loopback_http import serve, stop_serving


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    def verified(self, secret: str) -> Any:
        """The payload once its signature checks out with ``secret`` (raises otherwise)."""
        return Verifier(secret).verify(self.body, self.headers)


@dataclass
class Receiver:
    port: int = 0
    status: int = 204
    received: list[Received] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/steplab"

    def reserve_port(self) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                with receiver._lock:
                    receiver.received.append(
                        Received(path=self.path, headers=dict(self.headers.items()), body=body)
                    )
                self.send_response(receiver.status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        if not self.port:
            self.reserve_port()
        ThreadingHTTPServer.allow_reuse_address = True
        self._server = serve(Handler, self.port)

    def stop(self) -> None:
        stop_serving(self._server)
        self._server = None

    def of_type(self, event: str) -> list[Received]:
        import json

        with self._lock:
            return [r for r in self.received if json.loads(r.body).get("type") == event]
