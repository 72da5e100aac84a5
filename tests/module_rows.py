"""Rows that every test of a module reads, made once for the module (Django's
``TestCase.setUpTestData``, for pytest): they are written in a transaction opened before
the module's first test and rolled back after its last, and each test's own ``db``
transaction nests inside it as a savepoint, so whatever a test writes is still undone
when it ends.

Only for modules whose tests are all plain ``django_db`` tests: a transactional test
(``transaction=True``, ``live_server``) run while the module's transaction is open would
see its rows uncommitted and flush them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from django.db import transaction

T = TypeVar("T")


def rows_for_the_module(django_db_blocker: Any, build: Callable[[], T]) -> Iterator[T]:
    """Yields what ``build()`` made inside the module's transaction; rolls it back when
    the module's fixture is torn down (use from a ``scope="module"`` fixture)."""
    with django_db_blocker.unblock():
        outer = transaction.atomic()
        outer.__enter__()
        try:
            rows = build()
        except BaseException:
            transaction.set_rollback(True)
            outer.__exit__(None, None, None)
            raise
    try:
        yield rows
    finally:
        with django_db_blocker.unblock():
            transaction.set_rollback(True)
            outer.__exit__(None, None, None)
