"""A number no JSON column can hold (``1e400`` overflows a double to infinity; ``NaN``
and ``Infinity`` are not JSON) is a bad line with its number, in every format and both
layouts (JSON Lines and one JSON array), and through ``import_chains`` and the upload job
alike: never a database error with no line, and nothing is written."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from annotation.datasets.importers import LineError, iter_chains
from annotation.models import Chain, ImportBatch

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "imports"
SAMPLES = {
    "prm800k": "prm800k_quirks.jsonl",
    "processbench": "processbench_sample.json",
    "trl": "trl_sample.jsonl",
    "math_shepherd": "math_shepherd_sample.jsonl",
    "generic": "generic_sample.jsonl",
}
# A number no float64 holds, and the constants Python's json takes but JSON has not.
NON_FINITE = ["1e400", "-1e400", "NaN", "Infinity", "-Infinity", "1E+999"]
MARKER = 123456.5


def _record(fmt: str) -> dict[str, Any]:
    """The format's first sample record, with MARKER in a field the import keeps (meta)."""
    raw = (FIXTURES / SAMPLES[fmt]).read_bytes()
    record = json.loads(raw)[0] if raw.lstrip()[:1] == b"[" else json.loads(raw.splitlines()[0])
    if fmt == "prm800k":
        record["label"]["total_time"] = MARKER
    else:
        record["extra_score"] = MARKER
    return record


def _lines(fmt: str, number: str) -> list[bytes]:
    good = json.dumps(_record(fmt)).encode()
    bad = good.replace(str(MARKER).encode(), number.encode())
    assert bad != good
    return [good, bad, good.replace(str(MARKER).encode(), b"7")]


def _errors(data: bytes, fmt: str) -> list[LineError]:
    return [item for item in iter_chains(io.BytesIO(data), fmt) if isinstance(item, LineError)]


@pytest.mark.parametrize("number", NON_FINITE)
@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_a_non_finite_number_is_a_bad_line_in_json_lines(fmt: str, number: str) -> None:
    errors = _errors(b"\n".join(_lines(fmt, number)) + b"\n", fmt)

    assert [error.line for error in errors] == [2], errors
    assert "number" in errors[0].reason or "not valid JSON" in errors[0].reason


@pytest.mark.parametrize("number", NON_FINITE)
@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_a_non_finite_number_is_a_bad_record_in_a_json_array(fmt: str, number: str) -> None:
    errors = _errors(b"[" + b",\n".join(_lines(fmt, number)) + b"]", fmt)

    assert [error.line for error in errors] == [2], errors


@pytest.mark.django_db
@pytest.mark.parametrize("number", ["1e400", "NaN"])
def test_import_chains_names_the_line_and_writes_nothing(
    project: Any, tmp_path: Path, number: str
) -> None:
    # Given a JSONL file whose second line holds a number no column can store
    path = tmp_path / "chains.jsonl"
    path.write_bytes(b"\n".join(_lines("generic", number)) + b"\n")

    # When it is imported, the command fails naming line 2, not a database error
    with pytest.raises(CommandError) as failure:
        call_command("import_chains", str(project.pk), str(path), stdout=io.StringIO())

    assert "line 2" in str(failure.value)
    assert "psycopg" not in str(failure.value).lower()
    # Then nothing was written
    assert (ImportBatch.objects.count(), Chain.objects.count()) == (0, 0)
