"""Reading a list of people to invite (annotation.projects.invite_lists): pasted lines, a
spreadsheet's tabs, a CSV file with a header; every bad line named by its number, and
nothing read past the bounds."""

from __future__ import annotations

import pytest

from annotation.models import Role
from annotation.projects.invite_lists import (
    MAX_LIST_CHARS,
    InviteListInvalid,
    InviteRow,
    invite_rows_parse,
)


def _parse(
    text: str, *, default_role: str = Role.ANNOTATOR, max_rows: int = 200
) -> list[InviteRow]:
    return invite_rows_parse(text=text, default_role=default_role, max_rows=max_rows)


def _errors(text: str, **kwargs: object) -> list[tuple[int, str]]:
    with pytest.raises(InviteListInvalid) as caught:
        _parse(text, **kwargs)  # type: ignore[arg-type]
    return [(error.line, error.message) for error in caught.value.errors]


def test_a_pasted_list_of_addresses_usernames_roles_and_names() -> None:
    text = "ann@Lab.Example\n\n  bob@lab.example , lead , Bob Smith \ncarol,ML staff\n"
    assert _parse(text) == [
        InviteRow(line=1, email="ann@lab.example", role=Role.ANNOTATOR),
        InviteRow(line=3, email="bob@lab.example", role=Role.LEAD, name="Bob Smith"),
        InviteRow(line=4, username="carol", role=Role.ML),
    ]


def test_the_default_role_is_the_form_s() -> None:
    (row,) = _parse("ann@lab.example,,Ann", default_role=Role.ML)
    assert (row.role, row.name) == (Role.ML, "Ann")


def test_cells_pasted_from_a_spreadsheet_are_tab_separated() -> None:
    rows = _parse("ann@lab.example\tlead\tAnn, the first\nbob@lab.example\t\t")
    assert [(r.email, r.role, r.name) for r in rows] == [
        ("ann@lab.example", Role.LEAD, "Ann, the first"),
        ("bob@lab.example", Role.ANNOTATOR, ""),
    ]


def test_a_csv_file_with_a_header_in_any_order_and_a_byte_order_mark() -> None:
    text = (
        '\ufeffName;E-mail;Role\r\n"Lee; Ann";ann@lab.example;Project lead\r\n;bob@lab.example;\r\n'
    )
    rows = _parse(text)
    assert [(r.line, r.email, r.role, r.name) for r in rows] == [
        (2, "ann@lab.example", Role.LEAD, "Lee; Ann"),
        (3, "bob@lab.example", Role.ANNOTATOR, ""),
    ]


def test_a_header_with_a_username_column() -> None:
    rows = _parse("username,role\ncarol,annotator\n")
    assert rows == [InviteRow(line=2, username="carol", role=Role.ANNOTATOR)]


def test_every_bad_line_is_named_and_nobody_is_read() -> None:
    text = (
        "ann@lab.example\n"  # 1 fine
        "not-an-address@\n"  # 2 a bad address
        "bob@lab.example,boss\n"  # 3 an unknown role
        "ANN@lab.example\n"  # 4 ann again, in another case
        "carol,annotator,Carol,extra\n"  # 5 one cell too many
        f"dave@lab.example,,{'x' * 151}\n"  # 6 a name too long
    )
    with pytest.raises(InviteListInvalid) as caught:
        _parse(text)
    assert caught.value.detail == "Nobody was invited: 5 lines of the list have problems."
    errors = [(e.line, e.who, e.message) for e in caught.value.errors]
    assert errors[0] == (2, "not-an-address@", "'not-an-address@' is not an e-mail address.")
    assert errors[1][0] == 3 and "Unknown role 'boss'" in errors[1][2]
    assert errors[2] == (4, "ANN@lab.example", "ANN@lab.example is on line 1 too.")
    assert errors[3][0] == 5 and "More cells than the columns" in errors[3][2]
    assert errors[4] == (6, "dave@lab.example", "A name has at most 150 characters.")


def test_a_quoted_cell_spanning_lines_is_reported_at_the_line_its_row_starts_on() -> None:
    text = 'ann@lab.example\n"bob@lab.example\nstill bob",lead\ncarol@lab.example,nope\n'
    assert _errors(text) == [
        (2, f"{'bob@lab.example' + chr(10) + 'still bob'!r} is not an e-mail address."),
        (
            4,
            "Unknown role 'nope': use annotator, lead, ml (or leave it empty for the form's role).",
        ),
    ]


def test_a_header_naming_an_unknown_column_is_refused() -> None:
    with pytest.raises(InviteListInvalid) as caught:
        _parse("email,phone\nann@lab.example,123\n")
    assert "phone" in caught.value.detail


def test_both_an_address_and_a_username_on_one_line_is_refused() -> None:
    assert _errors("email,username\nann@lab.example,ann\n,\n") == [
        (2, "Give an e-mail address or a username, not both."),
    ]


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("", "The list names nobody."),
        ("\n  \n\t\n", "The list names nobody."),
        ("email,role\n", "The list names nobody."),
        ("ann@lab.example\x00\n", "The list holds a NUL character: save the sheet as CSV text."),
        ("a" * (MAX_LIST_CHARS + 1), f"The list is over {MAX_LIST_CHARS:,} characters."),
    ],
)
def test_lists_that_name_nobody_or_are_not_text(text: str, detail: str) -> None:
    with pytest.raises(InviteListInvalid) as caught:
        _parse(text)
    assert caught.value.detail == detail


def test_more_people_than_the_bound_stops_reading_there() -> None:
    text = "".join(f"person{i}@lab.example\n" for i in range(1_000))
    with pytest.raises(InviteListInvalid) as caught:
        _parse(text, max_rows=5)
    assert caught.value.detail == "The list holds more than 5 people."
    assert caught.value.errors == []


def test_a_long_address_and_a_long_username_are_refused() -> None:
    long_address = "a" * 250 + "@lab.example"
    assert _errors(f"{long_address}\n{'u' * 151}\n") == [
        (1, "An e-mail address has at most 254 characters."),
        (2, "A username has at most 150 characters."),
    ]
