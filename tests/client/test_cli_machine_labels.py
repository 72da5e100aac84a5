"""``steplab`` with machine labels against a live server: a snapshot that takes the
Monte-Carlo source, then Math-Shepherd records with provenance and OpenRLHF soft labels
from the Monte-Carlo values, downloaded to files; an option the snapshot cannot serve
prints the server's message and exits non-zero. No worker: nothing here is queued."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from annotation.models import Membership, Project, Role
from tests.client.conftest import Steplab
from tests.factories import ChainFactory, UserFactory, api_token_key, machine_labels

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_cli_snapshots_a_machine_source_and_exports_it(steplab: Steplab, tmp_path: Path) -> None:
    # Given a project whose one chain only rollouts labeled
    lead = UserFactory(username="lena")
    project = Project.objects.create(name="Rollouts", overlap=1)
    Membership.objects.create(project=project, user=lead, role=Role.LEAD)
    chain = ChainFactory(project=project, step_count=2)
    machine_labels(chain=chain, ratings=[1, -1], values=[0.5, 0.0], model="policy")
    token = api_token_key(lead)

    # When the lead takes a people-only snapshot, then one with the rollouts
    people = steplab(token, "snapshots", "create", "Rollouts", "--json")
    taken = steplab(
        token, "snapshots", "create", "Rollouts", "--machine-source", "monte_carlo", "--json"
    )
    shepherd = tmp_path / "shepherd.jsonl"
    exported = steplab(
        token, "export", "Rollouts", "--format", "math_shepherd", "--provenance",
        "--out", str(shepherd),
    )  # fmt: skip
    soft = tmp_path / "soft.jsonl"
    softly = steplab(
        token, "export", "Rollouts", "--format", "openrlhf", "--soft-labels", "monte_carlo",
        "--out", str(soft),
    )  # fmt: skip
    refused = steplab(
        token, "export", "Rollouts", "--format", "math_shepherd", "--snapshot", "99",
        "--out", str(tmp_path / "none.jsonl"),
    )  # fmt: skip

    # Then the first has nothing to freeze, the second labels the chain from the rollouts
    assert people.code != 0 and "nothing to snapshot" in people.err.lower() + people.out
    assert taken.code == 0, taken.err
    assert taken.json()["counts"]["machine"] == {"monte_carlo": 1}
    assert exported.code == 0, exported.err
    (record,) = [json.loads(line) for line in shepherd.read_text().splitlines()]
    assert record["label"].endswith("+\nStep 2: Step 2. -")
    assert [step["source"] for step in record["provenance"]] == ["machine:monte_carlo"] * 2
    assert softly.code == 0, softly.err
    assert json.loads(soft.read_text())["value"] == [0.5, 0.0]
    assert refused.code != 0 and "snapshot" in refused.err.lower()
