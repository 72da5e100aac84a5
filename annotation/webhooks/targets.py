"""Which URLs a webhook may call. A webhook makes the server send requests where a lead
says, so without a check a lead could point one at the server's own neighbours (a
database, a cloud metadata address) and read what answers in the delivery log: server-side
request forgery. Only http and https are called, never with credentials in the URL, and
unless STEPLAB_WEBHOOK_ALLOW_PRIVATE is on, never an address that is not globally
routable (loopback, private, link-local, shared, reserved). The check runs when the URL is
saved and again before every attempt, on the addresses the name resolves to then (a name
may be pointed elsewhere after it was saved).

STEPLAB_WEBHOOK_ALLOW_PRIVATE is off in production settings, on in development (``make
demo`` runs on one machine, with its receivers beside it) and in the tests (whose
receiver listens on 127.0.0.1)."""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from django.conf import settings


class WebhookTargetRefused(Exception):
    """The URL may not be called; the message says why, for the lead."""


def webhook_url_check(url: str, *, resolve: bool = True) -> None:
    """Raise WebhookTargetRefused unless ``url`` may be called: http or https, a host, no
    user or password, and (unless private addresses are allowed) an address, or a name
    whose every address, that is globally routable. With ``resolve`` off a name is not
    looked up (a literal address is still checked)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise WebhookTargetRefused("Only http:// and https:// URLs can receive webhooks.")
    if not parts.hostname:
        raise WebhookTargetRefused("The URL names no host.")
    if parts.username or parts.password:
        raise WebhookTargetRefused(
            "Put no user or password in the URL; the signature "
            "tells your receiver the message is ours."
        )
    try:
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError:
        raise WebhookTargetRefused("The URL's port is not a valid port.") from None
    if settings.STEPLAB_WEBHOOK_ALLOW_PRIVATE:
        return
    for address in _addresses(parts.hostname, resolve=resolve):
        if not address.is_global:
            raise WebhookTargetRefused(
                f"{parts.hostname} is a private, loopback or reserved address ({address}); "
                "webhooks are sent to public addresses only."
            )


def _addresses(host: str, *, resolve: bool) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    if host.lower() == "localhost" or host.lower().endswith(".localhost"):
        return [ipaddress.ip_address("127.0.0.1")]
    if not resolve:
        return []
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError:
        raise WebhookTargetRefused(f"{host} could not be resolved.") from None
    found = []
    for info in infos:
        # An IPv6 address may carry a zone ("fe80::1%eth0"), which ip_address refuses.
        text = str(info[4][0]).split("%", 1)[0]
        found.append(ipaddress.ip_address(text))
    return found
