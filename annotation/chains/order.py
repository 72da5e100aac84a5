"""The data manager's sort orders, and keyset pages in each of them.

A page is read in the order of (value, id), from where the last one ended
(``annotation.keyset``, a keyset per phase), on an index that holds that order, so the
page at the 500,000th chain costs what the first does (BENCHMARKS.md). Ties are broken by
id, so the order is total and no chain is shown twice or skipped while the data stands
still.

An order is a sequence of phases, each a set of chains read in its own order:

- ``id``, ``passes`` (``finished_count``): one phase;
- ``agreement``, ``prm_score``, ``prm_uncertainty``: the chains with a value, then those
  without one (by id): chains without a value come last whichever way the sort goes;
- ``status``: one phase per status, in ``ChainStatus.ALL``'s order (reversed for a
  descending sort), each read by id. A status is worked out from leases and passes, not
  stored, so a phase is the status filter's own query.

A cursor names the phase, the value and the id of the page's last row; it is handed out
as an opaque string and refused when it was made for another order."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import Lookup, Q, QuerySet

from annotation.chains.scores import chains_scored_by, chains_with_scores
from annotation.keyset import Keyset
from annotation.models import Chain

BIGINT_MAX = 2**63 - 1

# The orders a page may be read in, by the column the data manager shows.
SORT_KEYS = ("id", "status", "passes", "agreement", "prm_score", "prm_uncertainty")
SORTS = tuple(f"{sign}{key}" for key in SORT_KEYS for sign in ("", "-"))


@dataclass(frozen=True)
class ChainOrder:
    """``key`` (one of SORT_KEYS), ascending unless ``descending``."""

    key: str = "id"
    descending: bool = False

    @classmethod
    def parse(cls, text: str) -> ChainOrder:
        """``"agreement"`` or ``"-agreement"``; ValueError for anything else."""
        if text not in SORTS:
            raise ValueError(f"Not a sort order: {text!r}.")
        return cls(key=text.removeprefix("-"), descending=text.startswith("-"))

    def __str__(self) -> str:
        return f"{'-' if self.descending else ''}{self.key}"


# Far above what ``ChainCursor.encode`` writes (the order's name and three numbers).
CURSOR_MAX_CHARS = 512


@dataclass(frozen=True)
class ChainCursor:
    """Where a page ended: the phase of its last row, that row's value in the phase's
    column (None in a phase read by id alone) and its id."""

    phase: int
    value: float | None
    chain_id: int

    def encode(self, order: ChainOrder) -> str:
        text = json.dumps([str(order), self.phase, self.value, self.chain_id])
        return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str, *, order: ChainOrder, phases: int) -> ChainCursor:
        """The cursor ``encode`` wrote for ``order``; ValueError for anything else (a
        cursor of another order, a phase past ``phases``, a value or id out of range).
        A cursor is four scalars, so a longer text is refused before it is decoded."""
        if len(text) > CURSOR_MAX_CHARS:
            raise ValueError("Not a cursor of this list.")
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            made_for, phase, value, chain_id = json.loads(raw)
        except (binascii.Error, ValueError, TypeError) as error:
            raise ValueError("Not a cursor of this list.") from error
        if made_for != str(order):
            raise ValueError(f"A cursor of the order {made_for!r}, not {str(order)!r}.")
        numbers = (int, float)
        if (
            type(phase) is not int
            or not 0 <= phase < phases
            or type(chain_id) is not int
            or not 1 <= chain_id <= BIGINT_MAX
            or not (value is None or (isinstance(value, numbers) and not isinstance(value, bool)))
        ):
            raise ValueError("Not a cursor of this list.")
        return cls(phase=phase, value=None if value is None else float(value), chain_id=chain_id)


# How a phase gets its chains' PRM columns: a join on the newest run's scores (to walk them
# in order), or one sub-select per row.
Scored = Callable[[QuerySet[Chain]], QuerySet[Chain] | None]


@dataclass(frozen=True)
class Phase:
    """One run of a sorted list: the chains ``where`` selects, read in ``keyset``'s order
    (the index the phase reads: for the PRM columns the joined score row's own chain id
    breaks ties, so the row comparison is on that index's columns). ``scored`` adds the
    PRM columns (None: no chain is in this phase). ``shown`` is the loaded row's
    attribute holding the column's value, when the column is an alias the rows do not
    carry."""

    where: Q
    keyset: Keyset
    scored: Scored
    shown: str | None = None

    def after(self, cursor: ChainCursor) -> Q | Lookup:
        """The chains of this phase past ``cursor``'s row."""
        return self.keyset.after(value=cursor.value, last_id=cursor.chain_id)

    def value_of(self, chain: Chain) -> float | None:
        column = self.keyset.column
        if column is None:
            return None
        return float(getattr(chain, self.shown or column))


def order_phases(
    *, order: ChainOrder, project_id: int, statuses: Sequence[str], status_where: Callable[..., Q]
) -> list[Phase]:
    """The phases of ``order`` in the project. ``statuses`` is the status order and
    ``status_where(status)`` the chains whose status it is (one status each)."""
    desc = order.descending

    def subselect(chains: QuerySet[Chain]) -> QuerySet[Chain]:
        return chains_with_scores(chains=chains, project_id=project_id)

    by_id = Keyset(descending=desc)
    if order.key == "id":
        return [Phase(Q(), by_id, subselect)]
    if order.key == "passes":
        return [Phase(Q(), Keyset("finished_count", desc), subselect)]
    if order.key == "agreement":
        return [
            Phase(Q(agreement__isnull=False), Keyset("agreement", desc), subselect),
            Phase(Q(agreement__isnull=True), by_id, subselect),
        ]
    if order.key in ("prm_score", "prm_uncertainty"):
        field = order.key

        def joined(chains: QuerySet[Chain]) -> QuerySet[Chain] | None:
            return chains_scored_by(chains=chains, project_id=project_id, field=field)

        return [
            Phase(Q(), Keyset("prm_sort", desc, tiebreak="prm_sort_chain"), joined, shown=field),
            Phase(Q(**{f"{field}__isnull": True}), by_id, subselect),
        ]
    if order.key == "status":
        ordered = list(reversed(statuses)) if desc else list(statuses)
        return [Phase(status_where(status), by_id, subselect) for status in ordered]
    raise ValueError(f"Not a sort order: {order.key!r}.")


def phase_rows(
    *,
    phases: list[Phase],
    cursor: ChainCursor | None,
    limit: int,
    prepared: Callable[[QuerySet[Chain]], QuerySet[Chain]],
    base: QuerySet[Chain],
) -> list[tuple[int, Chain]]:
    """Up to ``limit + 1`` chains from ``cursor`` on, each with its phase: a query per
    phase reached (the phases before the cursor's are not read). ``prepared`` adds the
    page's columns and filters to a phase's chains."""
    rows: list[tuple[int, Any]] = []
    first = cursor.phase if cursor is not None else 0
    for index in range(first, len(phases)):
        phase = phases[index]
        chains = phase.scored(base)
        if chains is None:
            continue
        chains = prepared(chains).filter(phase.where)
        if cursor is not None and index == cursor.phase:
            chains = chains.filter(phase.after(cursor))
        wanted = limit + 1 - len(rows)
        rows.extend((index, chain) for chain in chains.order_by(*phase.keyset.ordering())[:wanted])
        if len(rows) > limit:
            break
    return rows
