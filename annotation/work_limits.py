"""The error a start raises when enough work of its kind already waits (queued or
running) in a project or on the node: the API answers it with 429 (``api.errors``).
Here, beside the models, so a service raises it without depending on the web layer."""

from __future__ import annotations

from typing import Any


class TooManyWaiting(Exception):
    """``detail`` says what waits and which limit (and variable) it meets; ``waiting``
    lists the caller's project's runs of that kind that are queued or running."""

    def __init__(self, detail: str, *, waiting: list[dict[str, Any]], limit: int) -> None:
        super().__init__(detail)
        self.detail = detail
        self.waiting = waiting
        self.limit = limit
