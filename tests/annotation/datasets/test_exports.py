"""Exports: every format's round trip through the real import and the labeling queue
(import -> label -> snapshot -> export -> import into a new project gives the same labels),
TRL through `datasets`, Parquet through pyarrow, and the export_dataset command."""

from __future__ import annotations

import csv
import json
from io import StringIO
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from django.core.management import CommandError, call_command

from annotation.datasets.exporters.csv_lines import CSV_HEADER
from annotation.datasets.exporters.records import first_error_index, trl_labels
from annotation.datasets.exports import export_write
from annotation.datasets.imports import chain_import
from annotation.datasets.snapshots import snapshot_create
from annotation.labeling.queue.submit import RatingInput, assignment_submit
from annotation.models import Annotation, Chain, LabelingMode, SnapshotChain
from tests.annotation.labeling.claiming import assignment_claim_next
from tests.conftest import require_shared_data
from tests.factories import MembershipFactory, ProjectFactory, UserFactory

pytestmark = pytest.mark.django_db

# Per chain: what the first annotator rates; the second agrees except where noted.
FIRST = [
    [1, 1, 1],
    [1, -1, -1, 1],
    [1, 0, 1],
    [0, 1, -1],
    [1, 1, 1, 1],
    [-1, 1, 1],
]
SECOND_DIFFERS = {0: [1, -1, 1], 2: [1, 0, 0]}  # chain 0 step 1: a tie -> -1


def _write_generic(path: Path) -> Path:
    with path.open("w", encoding="utf-8") as out:
        for index, labels in enumerate(FIRST):
            steps = [
                f"Chain {index}, step {s}: $x_{s} = {s}$ <b>ok</b>" for s in range(len(labels))
            ]
            steps[-1] += f"\n# Answer\n{index}"
            record = {
                "problem": f'Problem {index}: what is {index} × 1? Ünïcode and "quotes".',
                "steps": steps,
                "answer": str(index),
                "reference_answer": str(index if index % 2 else index + 1),
            }
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path


def rate(*, project, user, ratings_for) -> None:
    while (lease := assignment_claim_next(project=project, user=user)) is not None:
        chain = lease.chain
        step_ids = list(chain.steps.order_by("index").values_list("id", flat=True))
        ratings = ratings_for(chain)
        if project.labeling_mode == LabelingMode.FIRST_ERROR and -1 in ratings:
            ratings = ratings[: ratings.index(-1) + 1]
        assignment_submit(
            assignment_id=lease.pk,
            user=user,
            ratings=[
                RatingInput(step_id=s, rating=r)
                for s, r in zip(step_ids[: len(ratings)], ratings, strict=True)
            ],
        )


def _chain_index(chain: Chain) -> int:
    return int(chain.problem.text.split(":")[0].removeprefix("Problem "))


@pytest.fixture
def labeled(tmp_path):
    """A project of 6 imported chains, each rated by two annotators through the queue."""

    def make(mode: str = LabelingMode.ALL_STEPS):
        project = ProjectFactory(overlap=2, labeling_mode=mode)
        chain_import(project=project, path=_write_generic(tmp_path / "chains.jsonl"))
        first = MembershipFactory(project=project, user=UserFactory(username="ann")).user
        second = MembershipFactory(project=project, user=UserFactory(username="bob")).user
        rate(project=project, user=first, ratings_for=lambda c: FIRST[_chain_index(c)])
        rate(
            project=project,
            user=second,
            ratings_for=lambda c: SECOND_DIFFERS.get(_chain_index(c), FIRST[_chain_index(c)]),
        )
        assert Chain.objects.filter(project=project, is_finished=True).count() == len(FIRST)
        # Ties at the lowest rating: the exports below carry the 1-1 split of chain 0.
        snapshot = snapshot_create(project=project, heldout_fraction=0.0, ties="lowest")
        expected = {
            row.chain.content_hash: row.labels
            for row in SnapshotChain.objects.filter(snapshot=snapshot).select_related("chain")
        }
        return project, snapshot, expected

    return make


def reimport(path: Path, fmt: str) -> dict[str, list[int | None]]:
    """Import ``path`` into a new project; its imported labels by chain content hash."""
    project = ProjectFactory()
    chain_import(project=project, path=path, fmt=fmt)
    labels: dict[str, list[int | None]] = {}
    for chain in Chain.objects.filter(project=project).prefetch_related("steps"):
        ratings = {}
        annotation = Annotation.objects.filter(chain=chain).first()
        if annotation is not None:
            ratings = dict(annotation.ratings.values_list("step__index", "rating"))
        labels[chain.content_hash] = [ratings.get(i) for i in range(chain.step_count)]
    return labels


@pytest.mark.parametrize("mode", [LabelingMode.ALL_STEPS, LabelingMode.FIRST_ERROR])
def test_prm800k_round_trip_gives_same_chains_and_labels(labeled, tmp_path, mode):
    project, snapshot, expected = labeled(mode)
    assert snapshot.counts["chains"] == 6
    tie_chain = Chain.objects.get(project=project, problem__text__startswith="Problem 0:")
    tie_row = SnapshotChain.objects.get(snapshot=snapshot, chain=tie_chain)
    assert tie_row.labels[1] == -1 and tie_row.support[1] == 0.5
    if mode == LabelingMode.FIRST_ERROR:
        assert (
            None
            in expected[
                Chain.objects.get(
                    project=project, problem__text__startswith="Problem 1:"
                ).content_hash
            ]
        )

    # When
    out = tmp_path / "export.jsonl"
    result = export_write(snapshot=snapshot, fmt="prm800k", path=out)

    # Then every line has PRM800K's shape and importing it gives the same chains and labels
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert result.records == len(lines) == 6
    for line in lines:
        assert set(line) == {"question", "label"}
        assert line["label"]["finish_reason"] in {"found_error", "solution", "give_up"}
        for step in line["label"]["steps"]:
            assert step["chosen_completion"] == 0 and step["human_completion"] is None
    assert reimport(out, "prm800k") == expected


def test_trl_round_trip_and_ambiguous_mapping(labeled, tmp_path):
    project, snapshot, expected = labeled()
    by_hash = {
        chain.content_hash: chain
        for chain in Chain.objects.filter(project=project).prefetch_related("steps")
    }
    for ambiguous in ("positive", "negative", "drop"):
        out = tmp_path / f"trl-{ambiguous}.jsonl"
        result = export_write(snapshot=snapshot, fmt="trl", path=out, ambiguous=ambiguous)
        assert result.ambiguous == ambiguous
        rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
        assert all(set(row) == {"prompt", "completions", "labels"} for row in rows)
        assert all(isinstance(x, bool) for row in rows for x in row["labels"])

        # The re-imported chains are the labeled prefixes, with +1/-1 for true/false
        from annotation.datasets.importers.records import content_hash

        want: dict[str, list[int]] = {}
        for chain_hash, labels in expected.items():
            prefix = trl_labels(labels=labels, ambiguous=ambiguous)
            if prefix:
                chain = by_hash[chain_hash]
                steps = [s.text for s in chain.steps.all()][: len(prefix)]
                want[content_hash(chain.problem.text, steps)] = [1 if x else -1 for x in prefix]
        assert reimport(out, "trl") == want
    # drop cuts chain 3 ([0, 1, -1]) entirely and chain 2 ([1, 0, ...]) after one step
    assert len(want) == 5


def test_trl_jsonl_loads_with_datasets_and_parquet_with_pyarrow(labeled, tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    _, snapshot, _ = labeled()
    jsonl = tmp_path / "trl.jsonl"
    parquet = tmp_path / "trl.parquet"
    export_write(snapshot=snapshot, fmt="trl", path=jsonl, ambiguous="negative")
    result = export_write(snapshot=snapshot, fmt="parquet", path=parquet, ambiguous="negative")
    rows = [json.loads(line) for line in jsonl.read_text(encoding="utf-8").splitlines()]

    # The datasets library reads the JSONL as is
    loaded = datasets.load_dataset(
        "json", data_files=str(jsonl), split="train", cache_dir=str(tmp_path / "hf")
    )
    assert loaded.column_names == ["prompt", "completions", "labels"]
    assert loaded.to_list() == rows

    # pyarrow reads the Parquet file: the same rows, typed, with the mapping in metadata
    table = pq.read_table(parquet)
    assert str(table.schema.field("labels").type) == "list<element: bool>"
    # With a column of what voters wrote after TRL's three (none wrote here)
    assert table.to_pylist() == [{**row, "notes": []} for row in rows]
    meta = json.loads(table.schema.metadata[b"steplab"])
    assert meta["ambiguous"] == "negative"
    assert meta["snapshot_hash"] == snapshot.content_hash
    assert result.records == len(rows) == 6
    from_parquet = datasets.load_dataset(
        "parquet", data_files=str(parquet), split="train", cache_dir=str(tmp_path / "hf2")
    )
    assert from_parquet.to_list() == [{**row, "notes": []} for row in rows]


def test_parquet_writes_row_groups_in_batches(labeled, tmp_path, monkeypatch):
    _, snapshot, _ = labeled()
    monkeypatch.setattr("annotation.datasets.exporters.streams.PARQUET_ROWS_PER_GROUP", 2)
    out = tmp_path / "small-groups.parquet"
    export_write(snapshot=snapshot, fmt="parquet", path=out, ambiguous="positive")
    parquet_file = pq.ParquetFile(out)
    assert parquet_file.metadata.num_row_groups == 3
    assert parquet_file.metadata.num_rows == 6


def test_processbench_round_trip(labeled, tmp_path):
    _, snapshot, expected = labeled(LabelingMode.FIRST_ERROR)
    out = tmp_path / "pb.jsonl"
    result = export_write(snapshot=snapshot, fmt="processbench", path=out, ambiguous="negative")
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert all(
        set(row) == {"id", "generator", "problem", "steps", "label", "final_answer_correct"}
        for row in rows
    )
    # Answers equal the reference on odd chains only
    assert sorted(row["final_answer_correct"] for row in rows) == [False] * 3 + [True] * 3

    reimported = reimport(out, "processbench")
    assert result.records == len(reimported) == 6
    for chain_hash, labels in expected.items():
        error = first_error_index(labels=labels, ambiguous="negative")
        assert error is not None
        want = [1] * len(labels) if error == -1 else [1] * error + [-1]
        want += [None] * (len(labels) - len(want))
        assert reimported[chain_hash] == want


def test_csv_has_a_row_per_step_with_consensus_and_raw_labels(labeled, tmp_path):
    project, snapshot, expected = labeled()
    out = tmp_path / "labels.csv"
    result = export_write(snapshot=snapshot, fmt="csv", path=out)

    with out.open(encoding="utf-8", newline="") as stream:
        rows = list(csv.DictReader(stream))
    assert tuple(rows[0]) == CSV_HEADER
    assert result.records == len(rows) == sum(len(labels) for labels in FIRST)
    by_chain: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        by_chain.setdefault(row["chain_hash"], []).append(row)
    for chain_hash, labels in expected.items():
        got = sorted(by_chain[chain_hash], key=lambda r: int(r["step_index"]))
        assert [int(r["consensus"]) for r in got] == labels
    tie_hash = Chain.objects.get(
        project=project, problem__text__startswith="Problem 0:"
    ).content_hash
    tie_step = next(r for r in by_chain[tie_hash] if r["step_index"] == "1")
    assert json.loads(tie_step["raw_labels"]) == {"ann": 1, "bob": -1}
    assert tie_step["support"] == "0.5"
    assert "<b>ok</b>" in tie_step["step_text"]


def test_export_dataset_command_creates_a_snapshot_and_prints_a_summary(labeled, tmp_path):
    project, snapshot, _ = labeled()
    out = tmp_path / "cmd.jsonl"
    stdout = StringIO()

    call_command(
        "export_dataset",
        project.name,
        "--format",
        "trl",
        "--out",
        str(out),
        "--ambiguous",
        "positive",
        stdout=stdout,
    )

    summary = stdout.getvalue().strip()
    assert "\n" not in summary
    assert summary.startswith("exported 6 chains")
    assert "new snapshot v2" in summary and "ambiguous=positive" in summary
    assert project.snapshots.get(version=2).meta["trl_ambiguous"] == "positive"
    assert len(out.read_text(encoding="utf-8").splitlines()) == 6

    # An existing snapshot, one split
    stdout = StringIO()
    call_command(
        "export_dataset",
        str(project.pk),
        "--format",
        "csv",
        "--out",
        str(tmp_path / "a.csv"),
        "--snapshot",
        "1",
        "--split",
        "heldout",
        stdout=stdout,
    )
    assert stdout.getvalue().startswith("exported 0 step rows")
    assert project.snapshots.count() == 2


def test_export_dataset_command_takes_the_snapshot_options(labeled, tmp_path):
    # Given a project whose chain "Problem 0" has a step its two annotators tie on
    project, _, _ = labeled()

    # When a new snapshot is exported with its tied steps kept and marked, unfinished
    # chains included and every label backed by two votes
    call_command(
        "export_dataset",
        project.name,
        "--format",
        "trl",
        "--out",
        str(tmp_path / "marked.jsonl"),
        "--ties",
        "mark",
        "--include-unfinished",
        "--min-support",
        "2",
        stdout=StringIO(),
    )

    # Then the snapshot says what it was taken with and marks the tied step
    snapshot = project.snapshots.get(version=2)
    assert snapshot.meta["options"]["ties"] == "mark"
    assert snapshot.meta["options"]["finished_only"] is False
    assert snapshot.meta["options"]["min_support"] == 2
    tie_chain = Chain.objects.get(project=project, problem__text__startswith="Problem 0:")
    assert snapshot.chains.get(chain=tie_chain).tied == [1]


def test_export_dataset_command_errors(project, tmp_path):
    with pytest.raises(CommandError, match="no labeled step"):
        call_command(
            "export_dataset", project.name, "--format", "trl", "--out", str(tmp_path / "x")
        )
    with pytest.raises(CommandError, match="no snapshot v4"):
        call_command(
            "export_dataset",
            project.name,
            "--format",
            "trl",
            "--out",
            str(tmp_path / "x"),
            "--snapshot",
            "4",
        )
    with pytest.raises(CommandError, match="No project"):
        call_command("export_dataset", "nope", "--format", "csv", "--out", str(tmp_path / "x"))
    with pytest.raises(CommandError, match="no such directory"):
        call_command(
            "export_dataset", project.name, "--format", "csv", "--out", str(tmp_path / "a/b.csv")
        )


@pytest.mark.parametrize("name", ["gsm8k.json", "math.json"])
def test_processbench_file_round_trips_with_its_ids_and_verdicts(tmp_path, name):
    """A real ProcessBench file imported and exported as ProcessBench gives back every
    record: its id, steps (stripped, as every import stores text), label and
    final_answer_correct."""
    path = require_shared_data() / "processbench" / name
    given = {record["id"]: record for record in json.loads(path.read_text(encoding="utf-8"))}
    project = ProjectFactory(labeling_mode=LabelingMode.FIRST_ERROR)
    chain_import(project=project, path=path, fmt="processbench")
    snapshot = snapshot_create(project=project, heldout_fraction=0.0, include_imported=True)
    out = tmp_path / "pb.jsonl"
    result = export_write(snapshot=snapshot, fmt="processbench", path=out)

    back = {row["id"]: row for row in map(json.loads, out.read_text("utf-8").splitlines())}
    assert result.records == len(back) == len(given)
    for record_id, record in given.items():
        row = back[record_id]
        assert row["steps"] == [step.strip() for step in record["steps"]]
        assert row["problem"] == record["problem"].strip()
        assert row["label"] == record["label"]
        assert row["final_answer_correct"] is record["final_answer_correct"]
        assert row["generator"] == record["generator"]

    # The CSV's rows name their record too, one id per chain
    table = tmp_path / "pb.csv"
    export_write(snapshot=snapshot, fmt="csv", path=table)
    with table.open(encoding="utf-8", newline="") as stream:
        ids = {(row["chain_id"], row["source_id"]) for row in csv.DictReader(stream)}
    assert sorted(source for _, source in ids) == sorted(given)
