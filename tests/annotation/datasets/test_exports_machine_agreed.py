"""Machine-agreed chains in snapshots and exports (issue 23, item 7): a chain routing
accepted (its trusted sources agreed, no person labeled it) is marked in its snapshot row
and counted, and every export format says ``machine_agreed`` of every record, true for it
and false for chains people labeled, spot checks included. On PostgreSQL (the streamed
COPY path), through a real routing pass."""

from __future__ import annotations

import csv
import io
import json

import pyarrow.parquet as pq
import pytest

from annotation.datasets.exporters.formats import EXPORT_FORMATS
from annotation.datasets.exports import export_write
from annotation.datasets.snapshots import snapshot_create
from annotation.models import Chain, ChainRouting, SnapshotChain
from annotation.routing.services import chains_route
from tests.annotation.routing.routing_lab import trusted_sources, with_rules
from tests.factories import ChainFactory, UserFactory, annotation_with_ratings, machine_labels

pytestmark = pytest.mark.django_db

BOTH = ["monte_carlo", "judge"]


@pytest.fixture
def agreed(project) -> Chain:
    """Four chains people labeled (both sources right on each: kappa 1) and one chain
    the sources agree on (first error at step 1), which routing accepts; made last, it is
    last in chain order."""
    project = with_rules(project)
    trusted_sources(project)
    chain = ChainFactory(project=project, step_count=3)
    machine_labels(chain=chain, ratings=[1, -1, None], values=[0.75, 0.0, None], run_id=1)
    machine_labels(chain=chain, ratings=[1, -1, None], source="judge", run_kind="judge")
    chains_route(project=project)
    chain.refresh_from_db()
    assert (chain.routing, chain.routing_first_error) == (ChainRouting.AGREED, 1)
    return chain


def _marks(path, fmt: str) -> list[bool]:
    """``machine_agreed`` of each record, in chain order (csv: of each chain's rows)."""
    if fmt == "parquet":
        return pq.read_table(path).column("machine_agreed").to_pylist()
    if fmt == "csv":
        rows = list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))
        by_chain: dict[str, set[str]] = {}
        for row in rows:
            by_chain.setdefault(row["chain_id"], set()).add(row["machine_agreed"])
        assert all(len(marks) == 1 for marks in by_chain.values())  # one mark a chain
        return [marks.pop() == "true" for marks in by_chain.values()]
    return [json.loads(line)["machine_agreed"] for line in path.read_text().splitlines()]


def test_an_agreed_chains_row_is_marked_and_counted(project, agreed):
    snapshot = snapshot_create(project=project, heldout_fraction=0.0, machine_sources=BOTH)

    rows = {row.chain_id: row for row in SnapshotChain.objects.filter(snapshot=snapshot)}
    assert len(rows) == 5
    assert rows[agreed.pk].machine["routing"] == ChainRouting.AGREED
    assert rows[agreed.pk].machine["agreed_first_error"] == 1
    assert rows[agreed.pk].labels == [1, -1, None]
    people = [row for chain_id, row in rows.items() if chain_id != agreed.pk]
    assert all("routing" not in row.machine for row in people)
    assert snapshot.counts["machine_agreed"] == 1


@pytest.mark.parametrize("fmt", EXPORT_FORMATS)
def test_every_format_marks_the_agreed_chain_and_only_it(project, agreed, fmt, tmp_path):
    snapshot = snapshot_create(project=project, heldout_fraction=0.0, machine_sources=BOTH)
    out = tmp_path / f"export.{fmt}"

    export_write(snapshot=snapshot, fmt=fmt, path=out)

    # The people's chains come first (chain order), the agreed one last
    marks = _marks(out, fmt)
    assert marks[-1] is True
    assert len(marks) >= 2 and not any(marks[:-1])


def test_the_mark_follows_the_formats_own_keys_and_precedes_provenance(project, agreed, tmp_path):
    snapshot = snapshot_create(project=project, heldout_fraction=0.0, machine_sources=BOTH)
    out = tmp_path / "processbench.jsonl"

    export_write(snapshot=snapshot, fmt="processbench", path=out, provenance=True)

    record = json.loads(out.read_text().splitlines()[-1])
    assert list(record) == [
        "id",
        "generator",
        "problem",
        "steps",
        "label",
        "final_answer_correct",
        "machine_agreed",
        "provenance",
    ]
    assert (record["label"], record["machine_agreed"]) == (1, True)
    # and in a CSV, the mark's column comes before provenance's
    out = tmp_path / "steps.csv"
    export_write(snapshot=snapshot, fmt="csv", path=out, provenance=True)
    header = out.read_text(encoding="utf-8").splitlines()[0].split(",")
    assert header[-2:] == ["machine_agreed", "provenance"]
    first, second, third = list(csv.DictReader(io.StringIO(out.read_text(encoding="utf-8"))))[-3:]
    assert [row["machine_agreed"] for row in (first, second, third)] == ["true"] * 3
    assert json.loads(second["provenance"])["source"] == "machine:monte_carlo"
    assert json.loads(second["provenance"])["label"] == -1


def test_a_snapshot_without_machine_sources_exports_as_before(project, agreed, tmp_path):
    snapshot = snapshot_create(project=project, heldout_fraction=0.0)
    assert "machine_agreed" not in snapshot.counts

    for fmt in ("trl", "csv", "parquet"):
        out = tmp_path / f"export.{fmt}"
        export_write(snapshot=snapshot, fmt=fmt, path=out)
        if fmt == "parquet":
            assert pq.read_table(out).column_names == ["prompt", "completions", "labels", "notes"]
        elif fmt == "csv":
            assert "machine_agreed" not in out.read_text().splitlines()[0]
        else:
            assert all("machine_agreed" not in json.loads(line) for line in out.open())


def test_a_spot_check_is_marked_until_a_person_labels_it(project, agreed, tmp_path):
    # Given: every agreed chain spot-checked
    project = with_rules(project, routing_spot_check=1.0)
    chains_route(project=project)
    agreed.refresh_from_db()
    assert agreed.routing == ChainRouting.SPOT_CHECK
    snapshot = snapshot_create(project=project, heldout_fraction=0.0, machine_sources=BOTH)
    row = SnapshotChain.objects.get(snapshot=snapshot, chain=agreed)
    assert row.machine["routing"] == ChainRouting.SPOT_CHECK

    # When: a person labels it (and finishes it)
    annotation_with_ratings(chain=agreed, labels=[1, 1, 1], annotator=UserFactory())
    Chain.objects.filter(pk=agreed.pk).update(is_finished=True, finished_count=1)
    snapshot = snapshot_create(project=project, heldout_fraction=0.0, machine_sources=BOTH)

    # Then: its row carries the person's labels and no mark, in the counts and the export
    row = SnapshotChain.objects.get(snapshot=snapshot, chain=agreed)
    assert row.labels == [1, 1, 1] and "routing" not in row.machine
    assert snapshot.counts["machine_agreed"] == 0
    out = tmp_path / "trl.jsonl"
    export_write(snapshot=snapshot, fmt="trl", path=out)
    assert _marks(out, "trl") == [False] * 5


def test_labels_other_than_the_agreed_ones_carry_no_mark(project, agreed):
    # Given: the PRM, no routing source, calls the agreed chain right throughout
    machine_labels(chain=agreed, ratings=[1, 1, 1], source="prm", run_kind="scoring")

    # When: a snapshot takes the PRM's labels first
    snapshot = snapshot_create(
        project=project, heldout_fraction=0.0, machine_sources=["prm", "monte_carlo"]
    )

    # Then: the row's labels are not what was agreed: no mark
    row = SnapshotChain.objects.get(snapshot=snapshot, chain=agreed)
    assert (row.machine["labels_from"], row.labels) == ("prm", [1, 1, 1])
    assert "routing" not in row.machine and snapshot.counts["machine_agreed"] == 0


def test_an_agreed_chain_no_included_source_labeled_stays_out(project, agreed):
    snapshot = snapshot_create(project=project, heldout_fraction=0.0, machine_sources=["prm"])

    assert not SnapshotChain.objects.filter(snapshot=snapshot, chain=agreed).exists()
    assert snapshot.counts["chains"] == 4 and snapshot.counts["machine_agreed"] == 0
