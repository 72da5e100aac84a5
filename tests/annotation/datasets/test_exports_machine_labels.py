"""Exports of machine labels, on PostgreSQL (the streamed COPY path): per-step provenance
on request, OpenRLHF soft labels from Monte-Carlo values, and Math-Shepherd records from
the Monte-Carlo hard labels, which Steplab's own importer reads back; and the refusals
when a snapshot does not hold what an option reads."""

from __future__ import annotations

import csv
import io
import json
from io import StringIO

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command

from annotation.datasets import exports
from annotation.datasets.exports import export_bytes, export_write
from annotation.datasets.importers.records import content_hash
from annotation.datasets.snapshot_reads import snapshot_examples
from annotation.datasets.snapshots import snapshot_create
from annotation.models import Chain
from tests.annotation.datasets.test_exports import reimport
from tests.factories import ChainFactory, UserFactory, annotation_with_ratings, machine_labels

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(project):
    """``people``: a person's finished pass, and rollouts that saw an error at step 2;
    ``rolled``: rollouts only (3 of 8, then none, reached the answer from steps 2 and 3);
    a judge on both. The snapshot takes monte_carlo first, then the judge."""
    people = ChainFactory(project=project, step_count=3, is_finished=True, finished_count=1)
    annotation_with_ratings(chain=people, annotator=UserFactory(), labels=[1, 1, 1])
    machine_labels(
        chain=people, ratings=[1, -1, -1], values=[0.875, 0.0, 0.0], model="policy", run_id=5
    )
    machine_labels(chain=people, ratings=[1, 1, 1], source="judge", run_kind="judge", model="j")
    rolled = ChainFactory(project=project, step_count=3)
    machine_labels(
        chain=rolled,
        ratings=[1, 1, -1],
        values=[1.0, 0.375, 0.0],
        detail={"rollouts": 8},
        model="policy",
        run_id=5,
    )
    machine_labels(chain=rolled, ratings=[1, -1, None], source="judge", run_kind="judge")
    snapshot = snapshot_create(
        project=project, heldout_fraction=0.0, machine_sources=["monte_carlo", "judge"]
    )
    return {"snapshot": snapshot, "people": people, "rolled": rolled}


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _steps(chain: Chain) -> list[str]:
    return list(chain.steps.order_by("index").values_list("text", flat=True))


def test_provenance_names_each_labels_source_and_every_machines_say(world, tmp_path):
    out = tmp_path / "prm800k.jsonl"

    result = export_write(snapshot=world["snapshot"], fmt="prm800k", path=out, provenance=True)

    assert result.records == 2
    people, rolled = _lines(out)  # chain order
    assert [step["source"] for step in people["provenance"]] == ["human"] * 3
    assert [step["label"] for step in people["provenance"]] == [1, 1, 1]
    rollouts = people["provenance"][1]["machine"]["monte_carlo"]
    assert rollouts == {
        "rating": -1,
        "value": 0.0,
        "hard": False,
        "model": "policy",
        "run": "rollout:5",
    }
    assert people["provenance"][1]["machine"]["judge"]["rating"] == 1
    assert rolled["label"]["steps"][2]["completions"][0]["rating"] == -1
    assert [step["source"] for step in rolled["provenance"]] == ["machine:monte_carlo"] * 3
    assert rolled["provenance"][2]["machine"]["judge"] is None


def test_without_provenance_a_record_is_as_before(world, tmp_path):
    out = tmp_path / "trl.jsonl"

    export_write(snapshot=world["snapshot"], fmt="trl", path=out)

    assert all("provenance" not in record for record in _lines(out))


def test_a_prefix_format_gives_provenance_for_the_steps_it_writes(world, tmp_path):
    out = tmp_path / "trl.jsonl"

    export_write(snapshot=world["snapshot"], fmt="trl", path=out, provenance=True)

    # rolled's labels from the rollouts: +1, +1, -1: all three written, three entries
    for record in _lines(out):
        assert len(record["provenance"]) == len(record["labels"])


def test_csv_carries_provenance_in_a_last_column(world, tmp_path):
    # a step text that would break naive line handling: a newline and quotes
    world["rolled"].steps.filter(index=0).update(text='Line one\n"quoted" line two')
    out = tmp_path / "steps.csv"

    export_write(snapshot=world["snapshot"], fmt="csv", path=out, provenance=True)

    rows = list(csv.DictReader(io.StringIO(out.read_text(encoding="utf-8"))))
    assert len(rows) == 6
    assert rows[0]["provenance"] and rows[3]["step_text"] == 'Line one\n"quoted" line two'
    entry = json.loads(rows[3]["provenance"])
    assert entry["source"] == "machine:monte_carlo"
    assert entry["machine"]["monte_carlo"]["value"] == 1.0


def test_openrlhf_soft_labels_from_monte_carlo_values(world, tmp_path):
    votes, rollouts = tmp_path / "votes.jsonl", tmp_path / "mc.jsonl"

    export_write(snapshot=world["snapshot"], fmt="openrlhf", path=votes, ambiguous="drop")
    export_write(
        snapshot=world["snapshot"],
        fmt="openrlhf",
        path=rollouts,
        ambiguous="drop",
        soft_labels="monte_carlo",
    )

    # From the votes: the person's +1s, and the rollouts' labels on the unlabeled chain
    assert [record["value"] for record in _lines(votes)] == [[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]
    # From the Monte-Carlo values: each step's share of rollouts that reached the answer
    assert [record["value"] for record in _lines(rollouts)] == [
        [0.875, 0.0, 0.0],
        [1.0, 0.375, 0.0],
    ]


def test_math_shepherd_export_reads_back_with_its_hard_labels(world, tmp_path):
    out = tmp_path / "shepherd.jsonl"

    result = export_write(snapshot=world["snapshot"], fmt="math_shepherd", path=out)

    assert (result.records, result.steps) == (2, 6)
    first = _lines(out)[0]
    assert first["label"].endswith("+\nStep 2: Step 2. -\nStep 3: Step 3. -")
    reimported = reimport(out, "math_shepherd")
    people, rolled = world["people"], world["rolled"]
    assert reimported == {
        content_hash(people.problem.text, _steps(people)): [1, -1, -1],
        content_hash(rolled.problem.text, _steps(rolled)): [1, 1, -1],
    }


@pytest.mark.parametrize(
    ("fmt", "options", "field"),
    [
        ("trl", {"soft_labels": "monte_carlo"}, "soft_labels"),
        ("openrlhf", {"soft_labels": "oracle"}, "soft_labels"),
        ("parquet", {"provenance": True}, "provenance"),
    ],
)
def test_options_a_format_cannot_take_are_refused(world, tmp_path, fmt, options, field):
    with pytest.raises(ValidationError) as refused:
        export_write(snapshot=world["snapshot"], fmt=fmt, path=tmp_path / "out", **options)

    assert list(refused.value.message_dict) == [field]


@pytest.mark.parametrize(
    ("fmt", "options", "field"),
    [("math_shepherd", {}, "format"), ("openrlhf", {"soft_labels": "monte_carlo"}, "soft_labels")],
)
def test_monte_carlo_exports_need_a_snapshot_that_includes_them(
    world, project, tmp_path, fmt, options, field
):
    judged = snapshot_create(project=project, heldout_fraction=0.0, machine_sources=["judge"])

    with pytest.raises(ValidationError) as refused:
        export_write(snapshot=judged, fmt=fmt, path=tmp_path / "out", **options)

    assert "does not include Monte-Carlo labels" in refused.value.message_dict[field][0]


def test_the_endpoint_takes_the_options_and_refuses_unknown_ones(
    world, project, make_member, client_for
):
    client = client_for(make_member(project, "lead"))
    url = f"/api/v1/projects/{project.pk}/export/"

    shepherd = client.get(url, {"format": "math_shepherd"})
    soft = client.get(url, {"format": "openrlhf", "soft_labels": "monte_carlo"})
    traced = client.get(url, {"format": "processbench", "provenance": "true"})
    misspelt = client.get(url, {"format": "trl", "provenence": "true"})
    wrong = client.get(url, {"format": "trl", "soft_labels": "monte_carlo"})
    annotator = client_for(make_member(project, "annotator")).get(url, {"format": "math_shepherd"})

    assert shepherd.status_code == 200
    lines = b"".join(shepherd.streaming_content).decode().splitlines()
    assert [json.loads(line)["label"][-1] for line in lines] == ["-", "-"]
    assert soft.status_code == 200
    values = [json.loads(line)["value"] for line in b"".join(soft.streaming_content).splitlines()]
    assert values[1] == [1.0, 0.375, 0.0]
    assert traced.status_code == 200
    records = [json.loads(line) for line in b"".join(traced.streaming_content).splitlines()]
    assert all(len(record["provenance"]) == 3 for record in records)
    assert misspelt.status_code == 400 and "provenence" in misspelt.json()
    assert wrong.status_code == 400 and "soft_labels" in wrong.json()
    assert annotator.status_code == 403


def test_export_dataset_command_takes_a_machine_source_and_the_options(world, tmp_path):
    out = tmp_path / "shepherd.jsonl"
    printed = StringIO()

    call_command(
        "export_dataset",
        str(world["snapshot"].project_id),
        "--format",
        "math_shepherd",
        "--machine-source",
        "monte_carlo",
        "--include-unfinished",
        "--provenance",
        "--out",
        str(out),
        stdout=printed,
    )

    assert "exported 2 chains (6 labeled steps)" in printed.getvalue()
    assert all(len(record["provenance"]) == 3 for record in _lines(out))


@pytest.mark.parametrize(
    ("fmt", "options"),
    [
        ("math_shepherd", {}),
        ("openrlhf", {"soft_labels": "monte_carlo"}),
        ("prm800k", {"provenance": True}),
        ("csv", {"provenance": True}),
    ],
)
def test_postgresql_path_and_fallback_write_identical_machine_exports(
    world, monkeypatch, fmt, options
):
    # Given the export through PostgreSQL's COPY, which reads the rows' machine column
    snapshot = world["snapshot"]
    fast = b"".join(export_bytes(snapshot=snapshot, fmt=fmt, ambiguous="drop", **options))

    # When the same export reads through the portable keyset path, a row a page
    monkeypatch.setattr(
        exports, "snapshot_examples_streamed", lambda **kw: snapshot_examples(chunk_size=1, **kw)
    )
    slow = b"".join(export_bytes(snapshot=snapshot, fmt=fmt, ambiguous="drop", **options))

    # Then the bytes are identical, and not empty
    assert fast == slow
    assert b"monte_carlo" in fast or fmt != "prm800k"
    assert fast.strip()
