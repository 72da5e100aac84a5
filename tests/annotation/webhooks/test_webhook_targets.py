"""Which addresses a webhook may reach: only global unicast, after every IPv4 address
carried inside an IPv6 one (mapped, translated, compatible, 6to4, Teredo, NAT64) is taken
out and checked as itself; when the URL is saved and again when an attempt connects."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from annotation.webhooks.targets import WebhookTargetRefused, webhook_target, webhook_url_check

REFUSED = [
    "http://[64:ff9b::a9fe:a9fe]/",  # NAT64 of 169.254.169.254 (cloud metadata)
    "http://[64:ff9b::7f00:1]/",  # NAT64 of 127.0.0.1
    "http://[64:ff9b:1::a00:1]/",  # local-use NAT64 prefix
    "http://[2002:7f00:1::1]/",  # 6to4 of 127.0.0.1
    "http://[2002:a9fe:a9fe::1]/",  # 6to4 of 169.254.169.254
    "http://[::7f00:1]/",  # IPv4-compatible 127.0.0.1
    "http://[::a9fe:a9fe]/",
    "http://[::ffff:7f00:1]/",  # IPv4-mapped 127.0.0.1
    "http://[::ffff:0:7f00:1]/",  # IPv4-translated 127.0.0.1
    "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/",  # Teredo of 127.0.0.1
    "http://224.0.0.1/",  # multicast
    "http://239.255.255.250/",
    "http://[ff02::1]/",  # multicast
    "http://[ff0e::1]/",  # global-scope multicast is still not one host
    "http://255.255.255.255/",
    "http://0.0.0.0/",
    "http://[::]/",
    "http://240.0.0.1/",  # reserved
    "http://100.64.0.1/",  # shared address space
    "http://[fc00::1]/",  # unique local
    "http://[fe80::1]/",  # link-local
    "http://[100::1]/",  # discard-only
]
ALLOWED = [
    "https://93.184.215.14/hooks",
    "https://[2606:4700:4700::1111]/hooks",
    "https://[64:ff9b::5db8:d70e]/hooks",  # NAT64 of a public address (DNS64 networks)
    "https://[::ffff:5db8:d70e]/hooks",  # IPv4-mapped public address
]


@pytest.mark.parametrize("url", REFUSED)
def test_an_address_that_is_not_global_unicast_is_refused_when_saved(
    settings: Any, url: str
) -> None:
    # Given production's rule: no private addresses
    settings.STEPLAB_WEBHOOK_ALLOW_PRIVATE = False
    # When the URL is checked (as a save checks it)
    # Then it is refused, naming why
    with pytest.raises(WebhookTargetRefused, match="public addresses only"):
        webhook_url_check(url)


@pytest.mark.parametrize("url", ALLOWED)
def test_a_global_unicast_address_is_allowed(settings: Any, url: str) -> None:
    settings.STEPLAB_WEBHOOK_ALLOW_PRIVATE = False
    assert webhook_url_check(url)


@pytest.mark.parametrize("url", REFUSED)
def test_a_name_that_resolves_to_such_an_address_is_refused_when_an_attempt_connects(
    settings: Any, monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    # Given a name that resolves, when the attempt is made, to a refused address
    settings.STEPLAB_WEBHOOK_ALLOW_PRIVATE = False
    address = url.split("//", 1)[1].rstrip("/").strip("[]")
    family = socket.AF_INET6 if ":" in address else socket.AF_INET

    def resolved(host: str, *args: Any, **kwargs: Any) -> list[Any]:
        return [(family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, 0))]

    monkeypatch.setattr(socket, "getaddrinfo", resolved)
    # When the attempt asks where to connect
    # Then no target is given
    with pytest.raises(WebhookTargetRefused, match="public addresses only"):
        webhook_target("https://hooks.example.org/x")
