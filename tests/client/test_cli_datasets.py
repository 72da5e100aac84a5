"""``steplab`` against a live server with a real Celery worker: a real ProcessBench file
imported with progress, its chains listed and read, a snapshot taken, and every export
format downloaded (streamed to a file) and checked against the snapshot; a bad file's
import fails with its bad lines listed."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from steplab_client.cli_parser import EXPORT_FORMATS

from annotation.models import Chain, Membership, Project, Role
from tests.client.conftest import Steplab
from tests.factories import UserFactory, api_token_key
from tests.prm_training.prm_worker import WorkerHandle

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]


def _lead_of_new_project() -> tuple[Project, str]:
    lead = UserFactory(username="lena", is_staff=True)
    project = Project.objects.create(name="GSM8K", overlap=1)
    Membership.objects.create(project=project, user=lead, role=Role.LEAD)
    return project, api_token_key(lead)


def _rows_in(path: Path, fmt: str) -> int:
    if fmt == "parquet":
        return int(pq.read_table(path).num_rows)
    text = path.read_text(encoding="utf-8")
    if fmt == "csv":
        return len({row["chain_id"] for row in csv.DictReader(io.StringIO(text))})
    return len([json.loads(line) for line in text.splitlines() if line.strip()])


def test_import_chains_snapshot_and_every_export_from_the_command_line(
    steplab: Steplab, worker: WorkerHandle, shared_data: Path, tmp_path: Path
) -> None:
    # Given: a lead's project and ProcessBench's GSM8K file (400 labeled chains)
    project, token = _lead_of_new_project()
    gsm8k = shared_data / "processbench" / "gsm8k.json"

    # When: the lead imports it and follows the job
    imported = steplab(token, "import", str(project.pk), str(gsm8k), "--json")

    # Then: the worker imported every chain; progress lines went to stderr
    assert imported.code == 0, imported.err + worker.output()
    job = imported.json()
    assert job["status"] == "done"
    assert job["result"]["chains_created"] == 400 and job["result"]["format"] == "processbench"
    assert Chain.objects.filter(project=project).count() == 400
    assert f"import {job['id']} done: 400 records" in imported.err
    shown = steplab(token, "imports", "show", str(project.pk), str(job["id"]))
    assert shown.code == 0
    # (told in a sentence, not as the job's fields)
    assert shown.out == (
        f"Import {job['id']} done: 400 chains with {job['result']['steps_created']:,} steps and "
        f"{job['result']['labels_created']:,} labels added from gsm8k.json (processbench).\n"
    )

    # ...the chains list with filters, one chain, and its labels
    first = steplab(token, "chains", "list", str(project.pk), "--limit", "5", "--json").json()
    assert len(first) == 5
    searched = steplab(
        token, "chains", "list", "GSM8K", "--search", "apples", "--all", "--json"
    ).json()
    assert searched and all(row["id"] for row in searched)
    by_filter = steplab(
        token, "chains", "list", "GSM8K", "--filter", "q=apples", "--all", "--json"
    ).json()
    assert by_filter == searched
    assert steplab(token, "chains", "list", "GSM8K", "--machines-vs-people", "--json").json() == []
    bad_filter = steplab(token, "chains", "list", "GSM8K", "--filter", "limit=0")
    assert bad_filter.code == 1 and "HTTP 400" in bad_filter.err and "limit" in bad_filter.err
    chain_id = first[0]["id"]
    chain = steplab(token, "chains", "show", str(chain_id), "--json")
    assert chain.code == 0, chain.err
    assert chain.json()["id"] == chain_id and chain.json()["steps"]
    labels = steplab(token, "chains", "labels", str(chain_id), "--json")
    assert labels.code == 0, labels.err
    assert labels.json()["steps"]

    # ...a snapshot of the imported labels, listed
    taken = steplab(token, "snapshots", "create", str(project.pk), "--include-imported", "--json")
    assert taken.code == 0, taken.err
    snapshot = taken.json()
    counts = snapshot["counts"]
    assert counts["chains"] == 400
    listed = steplab(token, "snapshots", "list", str(project.pk), "--json").json()
    assert [row["version"] for row in listed] == [snapshot["version"]]

    # ...and every export format, whole and per split, streamed to files
    # (math_shepherd writes Monte-Carlo labels, which this snapshot has none of:
    # test_cli_machine_labels.py exports it.)
    for fmt in set(EXPORT_FORMATS) - {"math_shepherd"}:
        out = tmp_path / f"all.{fmt}"
        exported = steplab(token, "export", str(project.pk), "--format", fmt, "--out", str(out))
        assert exported.code == 0, exported.err
        assert out.stat().st_size > 0 and not Path(f"{out}.part").exists()
        assert "0 MB received" not in exported.err  # a small file says only what it wrote
        assert _rows_in(out, fmt) == counts["chains"], fmt
    train = tmp_path / "train.jsonl"
    split = steplab(
        token, "export", "GSM8K", "--format", "trl", "--out", str(train), "--split", "train",
        "--json",
    )  # fmt: skip
    assert split.code == 0, split.err
    assert split.json()["snapshot"] == snapshot["version"]
    assert f"export: wrote {train} ({train.stat().st_size:,} bytes" in split.err
    assert split.json()["bytes"] == train.stat().st_size
    assert _rows_in(train, "trl") == counts["train_chains"]
    # A folder as --out: the server's file name in it
    into = steplab(token, "export", "GSM8K", "--format", "csv", "--out", str(tmp_path), "--json")
    assert Path(into.json()["path"]).name == into.json()["filename"]
    assert into.json()["filename"].endswith(".csv")


def test_a_bad_file_fails_its_import_with_every_bad_line(
    steplab: Steplab, worker: WorkerHandle, tmp_path: Path
) -> None:
    # Given: a JSON Lines file whose second and third lines are not chains
    project, token = _lead_of_new_project()
    bad = tmp_path / "bad.jsonl"
    good = {"problem": "1 + 1?", "steps": ["1 + 1 = 2.", "So 2."], "answer": "2"}
    bad.write_text(json.dumps(good) + "\n{not json\n" + json.dumps({"steps": []}) + "\n")

    # When: the lead imports it
    failed = steplab(token, "import", str(project.pk), str(bad), "--format", "generic")

    # Then: exit 1, the job's reason and each bad line on stderr; nothing imported
    assert failed.code == 1, failed.out + worker.output()
    assert "failed" in failed.err and "line 2" in failed.err and "line 3" in failed.err
    assert "Traceback" not in failed.err
    assert not Chain.objects.filter(project=project).exists()

    # ...and an export before any snapshot is the server's 404 and its advice
    early = steplab(token, "export", str(project.pk), "--format", "trl", "--out", "x.jsonl")
    assert early.code == 1 and "HTTP 404" in early.err and "snapshot" in early.err
    assert not Path("x.jsonl").exists()
