"""Keyset pages: a list read in a total order (a column, then the id) from where the
previous page ended, never by offset, so a page deep in the list costs what the first
does and rows added between two pages move no row to the wrong page.

``Keyset`` says the order and where a page starts; a reader fetches one row more than the
page holds and ``page_cut`` tells from it whether a next page follows. The data
manager's sorted pages (``chains.order``, one keyset per phase) and an annotator's
history (``labeling.history``, newest first by annotation id) read their pages so."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from django.db.models import F, Lookup, OrderBy, Q

# Row comparisons ``(a, b) > (x, y)``: Django's own, which its composite primary keys use
# (written as ANDs and ORs on a database without them).
from django.db.models.fields.tuple_lookups import Tuple, TupleGreaterThan, TupleLessThan

Row = TypeVar("Row")


@dataclass(frozen=True)
class Keyset:
    """Rows read by ``column`` then ``tiebreak``, or by id alone when ``column`` is None;
    ``descending`` or not. ``tiebreak`` names the id as the index read has it (the id of
    a joined row, for instance), so the row comparison is on the index's own columns."""

    column: str | None = None
    descending: bool = False
    tiebreak: str = "pk"

    def ordering(self) -> list[OrderBy]:
        keys = [self.column, self.tiebreak] if self.column else ["pk"]
        return [F(key).desc() if self.descending else F(key).asc() for key in keys]

    def after(self, *, value: object, last_id: int) -> Q | Lookup:
        """The rows past the row (``value``, ``last_id``): ``(value, id) > (v, id0)`` as
        one row comparison (``<`` descending), which the database takes as where its
        index scan starts; spelt ``value > v OR (value = v AND id > id0)`` it reads the
        index from the start of ``v``'s run, half a million entries deep in a page at the
        middle of the data manager's passes order. ``value`` is ignored without a
        column."""
        past = "lt" if self.descending else "gt"
        if self.column is None:
            return Q(**{f"pk__{past}": last_id})
        pair = Tuple(F(self.column), F(self.tiebreak))
        comparison = TupleLessThan if self.descending else TupleGreaterThan
        return comparison(pair, (value, last_id))


def page_cut(rows: Sequence[Row], *, limit: int) -> tuple[list[Row], Row | None]:
    """The page out of the ``limit + 1`` rows read for it, and the row the next page
    starts after (the page's last), or None when no row follows the page.

    >>> page_cut([5, 4, 3], limit=2)
    ([5, 4], 4)
    >>> page_cut([5, 4], limit=2)
    ([5, 4], None)
    """
    page = list(rows[:limit])
    return page, (page[-1] if len(rows) > limit else None)
