"""An HTTP server on loopback in a thread, for the tests' stand-ins of outside systems
(the OpenID provider, the SAML IdP, the webhook receiver)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

# How often the server thread looks for shutdown(): stop() waits up to this long
# (socketserver's default, 0.5 s, was half a second of every test's teardown).
SHUTDOWN_POLL_SECONDS = 0.05


def serve(handler: type[BaseHTTPRequestHandler], port: int = 0) -> ThreadingHTTPServer:
    """``handler`` served on 127.0.0.1:``port`` (0: any free port) from a daemon thread."""
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": SHUTDOWN_POLL_SECONDS},
        daemon=True,
    ).start()
    return server


def stop_serving(server: ThreadingHTTPServer | None) -> None:
    if server is not None:
        server.shutdown()
        server.server_close()


class LoopbackHttp:
    """A stand-in that serves its handler on 127.0.0.1 from ``serve()`` until ``stop()``."""

    _server: ThreadingHTTPServer | None = None

    def serve(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self._server = serve(handler)

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def stop(self) -> None:
        stop_serving(self._server)
        self._server = None


def sign_in_button_pressed(client: Any, login_path: str, provider_url: str) -> httpx.Response:
    """A single sign-on button pressed with Django's test ``client``: its POST (``next``
    home) is answered by a redirect under ``provider_url``, which is followed there."""
    start = client.post(login_path, {"next": "/"})
    assert start.status_code == 302, start.content
    assert start["Location"].startswith(provider_url), start["Location"]
    return httpx.get(start["Location"])
