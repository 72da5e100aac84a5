"""CSV exports neutralise formula injection (OWASP's rule); the other formats keep every
step text byte for byte."""

from __future__ import annotations

import csv
import io
import json

import pyarrow.parquet as pq
import pytest
from django.urls import reverse

from annotation.datasets.exporters.csv_lines import csv_cell
from tests.factories import ChainFactory, UserFactory, annotation_with_ratings

FORMULAS = [
    '=HYPERLINK("http://evil.example","x")',
    "+1+1",
    "-2+3",
    "@SUM(A1:A2)",
    "\tleading tab",
    "\rcarriage return",
    "  =1+1",  # spreadsheets skip leading spaces
    "\u3000=1",  # an ideographic space too
    "\uff1d1+1",  # fullwidth =
    "\uff0b1",
    "\uff0d1",
    "\uff20SUM(A1)",
    # Invisible characters a spreadsheet may drop before it reads the cell: format
    # characters (zero-width space, joiners, the byte-order mark, the word joiner, the
    # soft hyphen), other spaces, and control characters.
    "\u200b=1+1",
    "\ufeff=1+1",
    "\u200c\u200d+1",
    "\u2060@SUM(A1)",
    "\u00ad-1",
    "\u00a0=1",
    "\u2028=1",
    "\x01=1",
    "\u200e\u202e=1",  # direction marks
    "\u200b\t",
    "\nleading newline",
    "\ufe66small equals",
    # Code points that show nothing, found by Unicode's properties (Default_Ignorable_Code_Point,
    # White_Space) and names (BLANK, FILLER): Hangul fillers, the Braille blank, the
    # combining grapheme joiner, a variation selector, a Mongolian vowel separator, a tag
    # character, a Khmer inherent vowel.
    "\u3164=1+1",
    "\u2800=1+1",
    "\u115f=1+1",
    "\u034f=1+1",
    "\ufe0f=1+1",
    "\uffa0\u1160=1+1",
    "\u180e=1+1",
    "\U000e0041=1+1",
    "\u17b4+1",
    "\u3164\u2800\u034f\ufe0f\u115f@SUM(A1)",
]
PLAIN = [
    "x = 5",
    "So 3 - 2 = 1.",
    "",
    "'quoted",
    "e-mail me @ noon",
    "1+1=2",
    "\u200bx = 5",  # an invisible start before plain text
    "é = 1",
    "\u3164x = 5",  # a filler before plain text
    "\u2801=1",  # a Braille pattern with a dot is a character one sees
    "\u0301=1",  # neither is a combining accent, though it has no base
    "\ud55c = 1",  # a Hangul syllable
]


@pytest.mark.parametrize("text", FORMULAS)
def test_a_formula_start_gets_an_apostrophe(text):
    assert csv_cell(text) == "'" + text


def test_a_nul_start_gets_an_apostrophe():
    # (Not in FORMULAS: PostgreSQL cannot store a NUL, so no step holds one.)
    assert csv_cell("\x00=1") == "'\x00=1"


@pytest.mark.parametrize("text", PLAIN)
def test_other_texts_are_left_as_they_are(text):
    assert csv_cell(text) == text


@pytest.mark.django_db
def test_export_neutralises_csv_and_keeps_jsonl_exact(project, make_member, client_for):
    # Given a finished chain whose steps start like formulas, and a snapshot of it
    steps = FORMULAS + PLAIN
    chain = ChainFactory(project=project, step_count=len(steps), finished_count=1, is_finished=True)
    for step in chain.steps.all():
        step.text = steps[step.index]
        step.save(update_fields=["text"])
    annotation_with_ratings(chain=chain, annotator=UserFactory(), labels=[1] * len(steps))
    client = client_for(make_member(project, "lead"))
    snapshots = reverse("api-project-snapshots", args=[project.pk])
    assert client.post(snapshots, {}, format="json").status_code == 201
    url = reverse("api-project-export", args=[project.pk])

    def body(fmt: str) -> bytes:
        response = client.get(url, {"format": fmt})
        assert response.status_code == 200
        return b"".join(response.streaming_content)

    # When exported as CSV, no step cell starts a formula, and each reads back as its
    # text behind one apostrophe
    rows = list(csv.DictReader(io.StringIO(body("csv").decode("utf-8"), newline="")))
    cells = [row["step_text"] for row in rows]
    assert cells == [csv_cell(text) for text in steps]
    for cell in cells:
        assert cell[:1] == "'" or cell in PLAIN

    # Then PRM800K, TRL, ProcessBench and Parquet carry the texts unchanged
    (record,) = [json.loads(line) for line in body("processbench").splitlines()]
    assert record["steps"] == steps
    (record,) = [json.loads(line) for line in body("trl").splitlines()]
    assert record["completions"] == steps
    (record,) = [json.loads(line) for line in body("prm800k").splitlines()]
    assert [s["completions"][0]["text"] for s in record["label"]["steps"]] == steps
    table = pq.read_table(io.BytesIO(body("parquet")))
    assert table.column("completions").to_pylist() == [steps]
