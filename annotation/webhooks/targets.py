"""Which URLs a webhook may call. A webhook makes the server send requests where a lead
says, so without a check a lead could point one at the server's own neighbours (a
database, a cloud metadata address) and read what answers in the delivery log: server-side
request forgery. Only http and https are called, never with credentials in the URL, and
unless STEPLAB_WEBHOOK_ALLOW_PRIVATE is on, only global unicast addresses
(``address_allowed``): no loopback, private, link-local, shared, reserved, multicast or
broadcast address, and an IPv6 address that carries an IPv4 one (IPv4-mapped, -translated
or -compatible, 6to4, Teredo, NAT64) is judged by the IPv4 address inside it too, so
``[64:ff9b::a9fe:a9fe]`` (NAT64 to 169.254.169.254) or ``[2002:7f00:1::1]`` (6to4 of
loopback) is refused. ``ipaddress``'s ``is_global`` alone is not the rule: it calls
multicast and those wrappers global. The check runs when the URL is saved and again before
every attempt, on the addresses the name resolves to then (a name may be pointed elsewhere
after it was saved).

STEPLAB_WEBHOOK_ALLOW_PRIVATE is off in production settings, on in development (``make
demo`` runs on one machine, with its receivers beside it) and in the tests (whose
receiver listens on 127.0.0.1).

Each attempt is sent to the address that was checked (``webhook_target``: the URL's host
replaced by it, the name kept in the Host header and for TLS), so a name that resolves
to a public address when checked and to a private one a moment later (DNS rebinding)
does not get the request there."""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings


class WebhookTargetRefused(Exception):
    """The URL may not be called; the message says why, for the lead."""


@dataclass(frozen=True)
class Target:
    """Where one attempt goes: ``url`` names the checked address instead of the host;
    ``host`` is the Host header and ``server_name`` the name TLS verifies the
    certificate against (both the URL's own)."""

    url: str
    host: str
    server_name: str


def webhook_target(url: str) -> Target:
    """``url`` checked as ``webhook_url_check`` does, its name resolved once, and pinned
    to the first address it resolved to. Raises WebhookTargetRefused."""
    addresses = webhook_url_check(url)
    parts = urlsplit(url)
    hostname = parts.hostname or ""
    if not addresses:
        addresses = _addresses(hostname, resolve=True)
    address = addresses[0]
    shown = f"[{address}]" if address.version == 6 else str(address)
    netloc = f"{shown}:{parts.port}" if parts.port else shown
    return Target(
        url=urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, "")),
        host=parts.netloc,
        server_name=hostname,
    )


def webhook_url_check(
    url: str, *, resolve: bool = True
) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """Raise WebhookTargetRefused unless ``url`` may be called: http or https, a host, no
    user or password, and (unless private addresses are allowed) an address, or a name
    whose every address, that is globally routable. With ``resolve`` off a name is not
    looked up (a literal address is still checked). Returns the addresses it checked
    (none when private ones are allowed: then nothing is looked up)."""
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
        return []
    addresses = _addresses(parts.hostname, resolve=resolve)
    for address in addresses:
        if not address_allowed(address):
            raise WebhookTargetRefused(
                f"{parts.hostname} is a private, loopback, multicast or reserved address "
                f"({address}); webhooks are sent to public addresses only."
            )
    return addresses


# IPv6's global unicast space; everything outside it (multicast, unique local, link-local,
# the IPv4-compatible and -translated ::/96 forms, NAT64's local-use 64:ff9b:1::/48) is
# refused outright.
_GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")
# NAT64's well-known prefix (RFC 6052): a DNS64 network's way to reach an IPv4-only host,
# so allowed when the IPv4 address in its last 32 bits is.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def address_allowed(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether a webhook may connect to ``address``: a global unicast address, with every
    IPv4 address an IPv6 one carries allowed as well.

    >>> [address_allowed(ipaddress.ip_address(a)) for a in ("8.8.8.8", "224.0.0.1")]
    [True, False]
    >>> address_allowed(ipaddress.ip_address("2002:7f00:1::1"))  # 6to4 of 127.0.0.1
    False
    """
    if isinstance(address, ipaddress.IPv4Address):
        return address.is_global and not address.is_multicast
    if address.ipv4_mapped is not None:
        return address_allowed(address.ipv4_mapped)
    if address in _NAT64:
        return address_allowed(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    carried = [address.sixtofour, *(address.teredo or ())]
    if not all(address_allowed(inner) for inner in carried if inner is not None):
        return False
    return address in _GLOBAL_UNICAST and address.is_global and not address.is_multicast


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
