"""The keyset page plumbing both paged lists share (``annotation.keyset``): where a page
starts and where it is cut. The lists themselves are tested through their selectors
(tests/annotation/chains/test_chain_order.py,
tests/annotation/labeling/test_history.py)."""

from __future__ import annotations

import doctest

from django.db.models import F

from annotation import keyset
from annotation.keyset import Keyset, page_cut


def test_the_examples_in_the_module_hold() -> None:
    result = doctest.testmod(keyset)
    assert result.attempted and not result.failed


def test_a_page_is_cut_at_its_limit_and_says_where_the_next_starts() -> None:
    assert page_cut([9, 8, 7, 6], limit=3) == ([9, 8, 7], 7)
    assert page_cut([9, 8, 7], limit=3) == ([9, 8, 7], None)
    assert page_cut([], limit=3) == ([], None)


def test_by_id_alone_the_value_is_ignored_and_the_order_is_the_id() -> None:
    newest_first = Keyset(descending=True)
    assert newest_first.ordering() == [F("pk").desc()]
    assert str(newest_first.after(value=None, last_id=42)) == "(AND: ('pk__lt', 42))"
    assert str(Keyset().after(value=3.5, last_id=42)) == "(AND: ('pk__gt', 42))"


def test_by_a_column_the_id_breaks_ties() -> None:
    passes = Keyset("finished_count", descending=False, tiebreak="pk")
    assert passes.ordering() == [F("finished_count").asc(), F("pk").asc()]
    after = passes.after(value=2, last_id=42)
    assert type(after).__name__ == "TupleGreaterThan"
    assert after.rhs == (2, 42)
    assert type(Keyset("agreement", True).after(value=0.5, last_id=7)).__name__ == ("TupleLessThan")
