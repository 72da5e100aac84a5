"""What every resource group of ``Client`` shares: the JSON types, the progress callback,
the base class holding the client, and the two helpers that shape a request's values and
read an answer's body."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from steplab_client.client import Client

JSON = dict[str, Any]
Rows = list[JSON]
Progress = Callable[[JSON], None]


class Resource:
    def __init__(self, client: Client) -> None:
        self._client = client


def response_body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text


def clean(values: Mapping[str, Any]) -> JSON:
    """``values`` without the Nones: an option not given is not sent, so the server's
    default applies."""
    return {key: value for key, value in values.items() if value is not None}
