"""Reading a list of people to invite: text pasted on the members page, a CSV file's
content, or one person typed in the single-invite form. Pure: no database; what needs
one (does this username exist, is this person already a member) is the service's check
(``annotation.projects.invites``).

A list is CSV with a comma, a semicolon or a tab between cells (a spreadsheet's columns
paste as tabs), one person a line:

    ann@lab.example
    bob@lab.example, lead, Bob Smith
    carol                              <- an existing account, by username

or, with a header row naming the columns (any order; ``email`` or ``username`` needed):

    email,role,name
    ann@lab.example,annotator,Ann Lee

Without a header the cells are: an e-mail address or a username (an address has an
``@``), then optionally a role, then optionally a name. An empty role takes the form's
role. Errors name the line (a quoted cell may span lines: the line its row starts on)."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from dataclasses import dataclass, field

from django.contrib.auth.models import BaseUserManager
from django.core.exceptions import ValidationError
from django.core.validators import validate_email

from annotation.models import Role

# What a list may hold at most, in characters (the API's bound on the text): 200 people
# with a 254-character address, a role and a 150-character name each fit in half of it.
MAX_LIST_CHARS = 128 * 1024
EMAIL_MAX = 254
USERNAME_MAX = 150
NAME_MAX = 150

# Header names (lowercase) and the column each stands for.
HEADER_NAMES = {
    "email": "email",
    "e-mail": "email",
    "mail": "email",
    "email address": "email",
    "username": "username",
    "user": "username",
    "role": "role",
    "name": "name",
    "full name": "name",
}
# Without a header: who (an address or a username), role, name.
PLAIN_COLUMNS = ("who", "role", "name")


@dataclass(frozen=True)
class InviteRow:
    """One person to invite: an address or a username, never both."""

    line: int
    email: str = ""
    username: str = ""
    role: str = Role.ANNOTATOR
    name: str = ""

    @property
    def who(self) -> str:
        return self.email or self.username


@dataclass(frozen=True)
class RowError:
    line: int
    who: str
    message: str


@dataclass
class InviteListInvalid(Exception):
    """Nothing is invited: ``detail`` says why in one sentence, ``errors`` lists every
    bad row by its line."""

    detail: str
    errors: list[RowError] = field(default_factory=list)

    def __str__(self) -> str:
        return self.detail


def role_read(value: str, *, default: str) -> str | None:
    """A role cell as a Role value: its value or its label, any case; blank is
    ``default``; None when it names no role."""
    wanted = value.strip().lower()
    if not wanted:
        return default
    for role, label in Role.choices:
        if wanted in (role, str(label).lower()):
            return role
    return None


def _delimiter(text: str) -> str:
    """A tab where a spreadsheet's cells were pasted, else a semicolon where the first
    line uses one and no comma (a European spreadsheet's CSV), else a comma."""
    if "\t" in text:
        return "\t"
    first = next((line for line in text.splitlines() if line.strip()), "")
    return ";" if ";" in first and "," not in first else ","


def _rows(text: str, delimiter: str) -> Iterator[tuple[int, list[str]]]:
    """(the line a row starts on, its stripped cells), blank rows left out."""
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    start = 1
    for cells in reader:
        line, start = start, reader.line_num + 1
        stripped = [cell.strip() for cell in cells]
        if any(stripped):
            yield line, stripped


def _header(cells: list[str]) -> tuple[str, ...] | None:
    """The columns a header row names, or None when the row is a person. A row is a
    header when a cell says ``email`` or ``username`` (no address or username is one)."""
    lowered = [cell.lower() for cell in cells]
    if not any(HEADER_NAMES.get(cell) in ("email", "username") for cell in lowered):
        return None
    unknown = [cell for cell in cells if cell and cell.lower() not in HEADER_NAMES]
    if unknown:
        names = ", ".join(sorted(set(HEADER_NAMES.values())))
        raise InviteListInvalid(
            f"The header names columns this list cannot hold: {', '.join(unknown)} "
            f"(the columns are {names}).",
            [RowError(line=1, who="", message=f"Unknown column {unknown[0]!r}.")],
        )
    columns = tuple(HEADER_NAMES.get(cell, "") for cell in lowered)
    repeated = sorted({c for c in columns if c and columns.count(c) > 1})
    if repeated:
        raise InviteListInvalid(f"The header names the column {repeated[0]} twice.")
    return columns


def _email_problem(email: str) -> str | None:
    if len(email) > EMAIL_MAX:
        return f"An e-mail address has at most {EMAIL_MAX} characters."
    try:
        validate_email(email)
    except ValidationError:
        return f"{email!r} is not an e-mail address."
    return None


def _row(
    *, line: int, cells: list[str], columns: tuple[str, ...], default_role: str
) -> tuple[InviteRow | None, list[str]]:
    """One person from a row's cells, or the problems that stop it."""
    extra = [cell for cell in cells[len(columns) :] if cell]
    if extra:
        expected = (
            "an e-mail address or a username, a role, a name"
            if columns == PLAIN_COLUMNS
            else ", ".join(c for c in columns if c)
        )
        return None, [f"More cells than the columns ({expected}): {extra[0]!r}."]
    value = {column: cell for column, cell in zip(columns, cells, strict=False) if column}
    who = value.get("who", "")
    email = value.get("email", "") or (who if "@" in who else "")
    username = value.get("username", "") or (who if "@" not in who else "")
    problems: list[str] = []
    if email and username:
        problems.append("Give an e-mail address or a username, not both.")
    elif not email and not username:
        problems.append("No e-mail address or username.")
    if email and (problem := _email_problem(email)):
        problems.append(problem)
    if len(username) > USERNAME_MAX:
        problems.append(f"A username has at most {USERNAME_MAX} characters.")
    role = role_read(value.get("role", ""), default=default_role)
    if role is None:
        problems.append(
            f"Unknown role {value.get('role')!r}: use {', '.join(Role.values)} "
            "(or leave it empty for the form's role)."
        )
    name = value.get("name", "")
    if len(name) > NAME_MAX:
        problems.append(f"A name has at most {NAME_MAX} characters.")
    if problems:
        return None, problems
    email = BaseUserManager.normalize_email(email)
    return InviteRow(line=line, email=email, username=username, role=str(role), name=name), []


def invite_rows_parse(*, text: str, default_role: str, max_rows: int) -> list[InviteRow]:
    """Every person of a list, in order. Raises InviteListInvalid with every bad row (by
    line) when any row is bad, the list names someone twice, or it holds more than
    ``max_rows`` people: a list is invited whole or not at all."""
    if len(text) > MAX_LIST_CHARS:
        raise InviteListInvalid(f"The list is over {MAX_LIST_CHARS:,} characters.")
    text = text.removeprefix("\ufeff")  # a spreadsheet's UTF-8 byte order mark
    if "\x00" in text:
        raise InviteListInvalid("The list holds a NUL character: save the sheet as CSV text.")
    rows: list[InviteRow] = []
    errors: list[RowError] = []
    seen: dict[str, int] = {}
    columns: tuple[str, ...] | None = None
    try:
        for line, cells in _rows(text, _delimiter(text)):
            if columns is None:
                columns = _header(cells)
                if columns is not None:
                    continue
                columns = PLAIN_COLUMNS
            if len(rows) + len(errors) >= max_rows:
                raise InviteListInvalid(f"The list holds more than {max_rows} people.")
            row, problems = _row(line=line, cells=cells, columns=columns, default_role=default_role)
            who = row.who if row else (cells[0] if cells else "")
            if row is not None and (first := seen.get(row.who.lower())) is not None:
                problems = [f"{row.who} is on line {first} too."]
            errors.extend(RowError(line=line, who=who, message=m) for m in problems)
            if row is not None and not problems:
                seen[row.who.lower()] = line
                rows.append(row)
    except csv.Error as exc:
        raise InviteListInvalid(f"The list is not CSV: {exc}.") from None
    if errors:
        bad = len({error.line for error in errors})
        raise InviteListInvalid(
            f"Nobody was invited: {bad} line{'s' if bad != 1 else ''} of the list "
            f"{'have' if bad != 1 else 'has'} problems.",
            errors,
        )
    if not rows:
        raise InviteListInvalid("The list names nobody.")
    return rows
