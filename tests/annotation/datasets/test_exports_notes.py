"""What annotators wrote beside their ratings, a rewrite of the step they marked wrong and
comments on steps, reaches every export format: each file is read back and compared,
step by step, with the passes in the database (their current revisions)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from annotation.datasets.exports import export_write
from annotation.datasets.imports import chain_import
from annotation.datasets.snapshots import snapshot_create
from annotation.labeling.queue.submit import RatingInput, assignment_submit
from annotation.labeling.revisions import annotation_revise
from annotation.models import Annotation, AnnotationSource, Chain, LabelingMode, StepRating
from tests.annotation.labeling.claiming import assignment_claim_next
from tests.factories import MembershipFactory, ProjectFactory, UserFactory

pytestmark = pytest.mark.django_db

# Per chain (by problem number): each annotator's ratings, comments by step, rewrite.
PASSES: dict[int, dict[str, tuple[list[int], dict[int, str], str]]] = {
    0: {
        "ann": ([1, -1, -1, 1], {0: "Sue has 12 pink, not 18"}, "So 12 + 6 = 18 flowers."),
        "bob": ([1, -1, 1, 1], {1: 'the "18" is wrong', 3: "=SUM(A1)"}, "12 + 6 = 18"),
    },
    1: {
        "ann": ([1, 1, 1, 1], {}, ""),
        "bob": ([1, 1, 1, 1], {2: "ok, but terse"}, ""),
    },
    2: {
        "ann": ([1, 1, 1, 1], {}, ""),
        "bob": ([1, 1, 1, 1], {}, ""),
    },
}


def _chains_file(path: Path) -> Path:
    with path.open("w", encoding="utf-8") as out:
        for number in PASSES:
            steps = [f"Problem {number}, step {s}: $x_{s}$" for s in range(4)]
            record = {"problem": f"Problem {number}: Ünïcode?", "steps": steps, "answer": "7"}
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path


def _number(chain: Chain) -> int:
    return int(chain.problem.text.split(":")[0].removeprefix("Problem "))


@pytest.fixture
def project(tmp_path: Path) -> Any:
    """Three chains rated by ann and bob with rewrites and comments; then ann revises
    chain 0 (her newer pass moves a comment and rewrites again): only the current pass's
    texts may reach an export."""
    project = ProjectFactory(overlap=2, labeling_mode=LabelingMode.ALL_STEPS)
    chain_import(project=project, path=_chains_file(tmp_path / "chains.jsonl"))
    for name in ("ann", "bob"):
        user = MembershipFactory(project=project, user=UserFactory(username=name)).user
        while (lease := assignment_claim_next(project=project, user=user)) is not None:
            ratings, comments, rewrite = PASSES[_number(lease.chain)][name]
            steps = list(lease.chain.steps.order_by("index").values_list("id", flat=True))
            assignment_submit(
                assignment_id=lease.pk,
                user=user,
                ratings=[
                    RatingInput(step_id=step, rating=rating, comment=comments.get(index, ""))
                    for index, (step, rating) in enumerate(zip(steps, ratings, strict=True))
                ],
                rewrite=rewrite,
            )
    first = Annotation.objects.get(
        annotator__username="ann", chain__problem__text__startswith="Problem 0:"
    )
    steps = list(first.chain.steps.order_by("index").values_list("id", flat=True))
    annotation_revise(
        project=project,
        user=first.annotator,
        annotation_id=first.pk,
        ratings=[
            RatingInput(step_id=steps[0], rating=1),
            RatingInput(step_id=steps[1], rating=-1, comment="18 should be 12"),
            RatingInput(step_id=steps[2], rating=-1),
            RatingInput(step_id=steps[3], rating=1),
        ],
        rewrite="Sue has 12 pink flowers.",
    )
    return project


def _said(chain: Chain) -> dict[tuple[int | None, str], dict[str, Any]]:
    """What each current pass of ``chain`` wrote, straight from the database:
    {(step, voter): {"rating", "comment"?, "rewrite"?}}."""
    out: dict[tuple[int | None, str], dict[str, Any]] = {}
    current = Annotation.objects.filter(
        chain=chain, source=AnnotationSource.HUMAN, superseded_by__isnull=True
    )
    for annotation in current.select_related("annotator"):
        ratings = dict(annotation.ratings.values_list("step__index", "rating"))
        by = annotation.annotator.username
        rows = StepRating.objects.filter(annotation=annotation).exclude(comment="")
        for index, comment in rows.values_list("step__index", "comment"):
            out[(index, by)] = {"rating": ratings[index], "comment": comment}
        if annotation.rewrite:
            wrong = min(index for index, rating in ratings.items() if rating == -1)
            entry = out.setdefault((wrong, by), {"rating": ratings[wrong]})
            entry["rewrite"] = annotation.rewrite
    return out


def _as_said(notes: list[dict[str, Any]]) -> dict[tuple[int | None, str], dict[str, Any]]:
    return {
        (note["step"], note["by"]): {
            key: note[key] for key in ("rating", "comment", "rewrite") if note.get(key) is not None
        }
        for note in notes
    }


def _chains(project: Any) -> dict[str, Chain]:
    return {chain.content_hash: chain for chain in Chain.objects.filter(project=project)}


@pytest.mark.parametrize("fmt", ["trl", "processbench", "openrlhf", "qwen_prm"])
def test_a_json_lines_export_carries_every_rewrite_and_comment_with_its_vote(
    project: Any, tmp_path: Path, fmt: str
) -> None:
    # Given a snapshot of the three chains
    snapshot = snapshot_create(project=project, heldout_fraction=0.0, ties="mark")
    by_problem = {_number(chain): chain for chain in Chain.objects.filter(project=project)}

    # When it is exported and read back
    out = tmp_path / f"export.{fmt}.jsonl"
    export_write(snapshot=snapshot, fmt=fmt, path=out)
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]

    # Then each record's notes are what the current passes wrote, and only those
    assert len(records) == 3
    noted = [record for record in records if "notes" in record]
    assert len(noted) == 2
    found = sorted((_as_said(record["notes"]) for record in noted), key=len)
    assert found == sorted((_said(by_problem[0]), _said(by_problem[1])), key=len)
    assert (0, "ann") not in _said(by_problem[0])  # the revision dropped that comment


def test_prm800k_carries_the_rewrite_as_the_step_s_human_completion(
    project: Any, tmp_path: Path
) -> None:
    snapshot = snapshot_create(project=project, heldout_fraction=0.0, ties="mark")
    out = tmp_path / "export.jsonl"
    export_write(snapshot=snapshot, fmt="prm800k", path=out)
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    zero = next(line for line in lines if line["question"]["problem"].startswith("Problem 0:"))

    # Then step 1, marked wrong by both, carries a rewrite as PRM800K carries one (the
    # chain still follows its own text): the older current pass's, bob's (ann revised
    # after him); the record's notes hold both rewrites
    steps = zero["label"]["steps"]
    assert [step["human_completion"] is not None for step in steps] == [False, True, False, False]
    assert steps[1]["human_completion"] == {
        "text": "12 + 6 = 18",
        "rating": None,
        "source": "human",
        "flagged": False,
    }
    assert all(step["chosen_completion"] == 0 for step in steps)
    rewrites = {note["by"]: note.get("rewrite") for note in zero["notes"] if note.get("rewrite")}
    assert rewrites == {"ann": "Sue has 12 pink flowers.", "bob": "12 + 6 = 18"}


def test_csv_carries_each_step_s_notes_in_its_row(project: Any, tmp_path: Path) -> None:
    snapshot = snapshot_create(project=project, heldout_fraction=0.0, ties="mark")
    out = tmp_path / "export.csv"
    export_write(snapshot=snapshot, fmt="csv", path=out)
    chains = _chains(project)
    with out.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    found: dict[str, dict[tuple[int | None, str], dict[str, Any]]] = {}
    for row in rows:
        for note in json.loads(row["notes"]) if row["notes"] else []:
            found.setdefault(row["chain_hash"], {}).update(
                _as_said([{**note, "step": int(row["step_index"])}])
            )
    expected = {key: _said(chain) for key, chain in chains.items() if _said(chain)}
    assert found == expected
    # A comment that a spreadsheet would read as a formula sits inside a JSON list
    assert all(not row["notes"] or row["notes"].startswith("[") for row in rows)


def test_parquet_carries_the_notes_of_the_steps_it_writes(project: Any, tmp_path: Path) -> None:
    snapshot = snapshot_create(project=project, heldout_fraction=0.0, ties="mark")
    out = tmp_path / "export.parquet"
    export_write(snapshot=snapshot, fmt="parquet", path=out)
    table = pq.read_table(out).to_pylist()
    by_prompt = {row["prompt"]: row for row in table}
    for chain in Chain.objects.filter(project=project).select_related("problem"):
        row = by_prompt[chain.problem.text]
        assert _as_said(row["notes"]) == _said(chain)
