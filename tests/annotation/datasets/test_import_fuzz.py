"""The importers under hypothesis: random bytes, and real sample lines mutated as JSON
(values swapped for other JSON, keys dropped, types changed) and as bytes (flipped,
inserted, cut). Whatever comes in, a parser yields chains or clean, line-numbered
rejections (`LineError`), detection answers a format or a `FormatDetectionError`, and
the import service writes a file whole or raises `ImportRejected` listing line numbers,
and nothing else: no other exception, no line number outside the file.

Bounded: STEPLAB_FUZZ_EXAMPLES examples per property (default 200 for the parsers,
a tenth of that for the database-backed service)."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from annotation.datasets.importers import (
    FORMATS,
    FormatDetectionError,
    LineError,
    ParsedChain,
    detect_format,
    iter_chains,
)
from annotation.datasets.imports import ImportRejected, chain_import
from annotation.models import Chain, ImportBatch
from tests.conftest import FIXTURES
from tests.factories import ProjectFactory

EXAMPLES = int(os.environ.get("STEPLAB_FUZZ_EXAMPLES", "200"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
DB_FUZZ = settings(
    FUZZ,
    max_examples=max(EXAMPLES // 10, 5),
    suppress_health_check=list(HealthCheck),
)


def _sample_records() -> list[Any]:
    """One record of each format from the checked-in samples (JSONL, and the
    ProcessBench JSON array)."""
    records: list[Any] = []
    for path in sorted((FIXTURES / "imports").iterdir()):
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".json":
            records.extend(json.loads(text)[:2])
        else:
            records.extend(json.loads(line) for line in text.splitlines()[:2] if line.strip())
    return records


SAMPLES = _sample_records()

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def mutated_record(draw: st.DrawFn) -> Any:
    """A sample record with a few fields, at any depth, replaced, removed or retyped."""
    record = json.loads(json.dumps(draw(st.sampled_from(SAMPLES))))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        container, key = _pick_slot(draw, record)
        if container is None:
            record = draw(json_values)
            continue
        action = draw(st.sampled_from(("replace", "delete", "stringify", "wrap")))
        if action == "delete" and isinstance(container, dict):
            container.pop(key, None)
        elif action == "stringify":
            container[key] = json.dumps(container[key])
        elif action == "wrap":
            container[key] = [container[key]]
        else:
            container[key] = draw(json_values)
    return record


def _pick_slot(draw: st.DrawFn, record: Any) -> tuple[Any, Any]:
    """A (container, key) inside ``record``, walking down a random path."""
    container, key = None, None
    node = record
    for _ in range(draw(st.integers(min_value=1, max_value=5))):
        if isinstance(node, dict) and node:
            container, key = node, draw(st.sampled_from(sorted(node)))
        elif isinstance(node, list) and node:
            container, key = node, draw(st.integers(min_value=0, max_value=len(node) - 1))
        else:
            break
        node = container[key]
    return container, key


@st.composite
def mutated_bytes(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` with a few bytes flipped, inserted or cut."""
    buffer = bytearray(data)
    for _ in range(draw(st.integers(min_value=1, max_value=6))):
        position = draw(st.integers(min_value=0, max_value=max(len(buffer) - 1, 0)))
        action = draw(st.sampled_from(("flip", "insert", "cut")))
        if action == "insert" or not buffer:
            buffer[position:position] = draw(st.binary(min_size=1, max_size=8))
        elif action == "flip":
            buffer[position] = draw(st.integers(min_value=0, max_value=255))
        else:
            del buffer[position : position + draw(st.integers(min_value=1, max_value=16))]
    return bytes(buffer)


@st.composite
def import_files(draw: st.DrawFn) -> bytes:
    """A JSONL or JSON-array file of good, mutated and byte-damaged sample records, or
    plain random bytes."""
    kind = draw(st.sampled_from(("jsonl", "array", "random")))
    if kind == "random":
        return draw(st.binary(max_size=2048))
    records = draw(st.lists(st.sampled_from(SAMPLES) | mutated_record(), min_size=1, max_size=6))
    if kind == "array":
        content = json.dumps(records).encode()
    else:
        content = b"\n".join(json.dumps(record).encode() for record in records) + b"\n"
    if draw(st.booleans()):
        content = draw(mutated_bytes(content))
    return content


def _line_count(content: bytes) -> int:
    """An upper bound for any line number or array index a rejection may name."""
    return max(content.count(b"\n") + 1, content.count(b",") + 2)


def _assert_clean_output(content: bytes, fmt: str) -> None:
    limit = _line_count(content)
    for item in iter_chains(io.BytesIO(content), fmt):
        assert isinstance(item, ParsedChain | LineError), type(item)
        assert 1 <= item.line <= limit, (item, limit)
        if isinstance(item, LineError):
            assert isinstance(item.reason, str) and item.reason.strip()
        else:
            assert item.problem and item.steps
            assert item.labels is None or len(item.labels) == len(item.steps)


@FUZZ
@given(content=import_files(), fmt=st.sampled_from(FORMATS))
def test_parsers_yield_only_chains_or_line_numbered_rejections(content: bytes, fmt: str) -> None:
    _assert_clean_output(content, fmt)


@FUZZ
@given(content=st.binary(max_size=4096), fmt=st.sampled_from(FORMATS))
# An array that never closes, found by a two-process run: its error had no line.
@example(content=b"[", fmt="prm800k")
@example(content=b"\n\n[ ", fmt="processbench")
def test_parsers_survive_random_bytes(content: bytes, fmt: str) -> None:
    _assert_clean_output(content, fmt)


@FUZZ
@given(head=import_files() | st.binary(max_size=512))
def test_detection_answers_a_format_or_a_clear_error(head: bytes) -> None:
    try:
        assert detect_format(head) in FORMATS
    except FormatDetectionError as error:
        assert str(error).strip()


@pytest.mark.django_db
@DB_FUZZ
@given(content=import_files())
def test_the_import_service_writes_all_or_rejects_with_line_numbers(
    content: bytes, tmp_path_factory: pytest.TempPathFactory
) -> None:
    project = ProjectFactory()
    path = Path(tmp_path_factory.mktemp("fuzz")) / "upload.jsonl"
    path.write_bytes(content)
    try:
        result = chain_import(project=project, path=path, fmt="auto")
    except ImportRejected as rejected:
        # Nothing from the file was written, and every bad line is named.
        assert not ImportBatch.objects.filter(project=project).exists()
        assert not Chain.objects.filter(project=project).exists()
        assert rejected.errors and rejected.error_count >= len(rejected.errors)
        limit = _line_count(content)
        assert all(1 <= error.line <= limit for error in rejected.errors), rejected.errors
    except FormatDetectionError as error:
        assert str(error).strip()
        assert not ImportBatch.objects.filter(project=project).exists()
    else:
        assert result.chains_created + result.chains_duplicate >= 1
        assert Chain.objects.filter(project=project).count() == result.chains_created
