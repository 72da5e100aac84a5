"""The ``<id:...>`` path converter: an object id, as ``<int:...>`` but bounded to a
bigint (every id column), so a longer number is no route at all (a 404) instead of a
value that raw SQL cannot bind (a 500). Registered in config/urls.py."""

from __future__ import annotations

BIGINT_MAX = 2**63 - 1


class IdConverter:
    regex = "[0-9]{1,19}"

    def to_python(self, value: str) -> int:
        number = int(value)
        if number > BIGINT_MAX:
            raise ValueError("not an id")  # Django: this route does not match
        return number

    def to_url(self, value: int) -> str:
        return str(value)
