"""A project whose passes went through the queue with machine pre-labels shown and held
out, for the dashboard's tests (API and browser)."""

from __future__ import annotations

from typing import Any

from rest_framework.test import APIClient

from annotation.models import Role
from annotation.quality.gold import gold_mark
from tests.factories import (
    ChainFactory,
    MembershipFactory,
    annotation_with_ratings,
    machine_labels,
)


def label(client: Any, project: Any, ratings: list[int], seconds: int) -> dict:
    lease = client.post(f"/api/v1/projects/{project.pk}/assignments/next/").json()
    body = {
        "ratings": [
            {"step": s["id"], "rating": r}
            for s, r in zip(lease["chain"]["steps"], ratings, strict=True)
        ],
        "duration_ms": seconds * 1000,
    }
    response = client.post(
        f"/api/v1/assignments/{lease['assignment']['id']}/submit/", body, format="json"
    )
    assert response.status_code == 201, response.content
    return lease


def verified_project(project: Any) -> dict[str, Any]:
    """Three passes with the judge's verdicts shown (one on a gold chain), a pass on a
    chain the judge never saw, then two passes held out."""
    project.prelabels = True
    project.prelabel_holdout = 0.0
    project.gold_rate = 1.0
    project.save()
    gold = ChainFactory(project=project)
    annotation_with_ratings(chain=gold, labels=[1, -1, 1])
    gold_mark(project=project, chain_ids=[gold.pk])
    shown = [ChainFactory(project=project, priority=p) for p in (5.0, 4.0)]
    unjudged = ChainFactory(project=project, priority=3.0)
    held = [ChainFactory(project=project, priority=p) for p in (2.0, 1.0)]
    for chain in [gold, *shown, *held]:
        machine_labels(chain=chain, ratings=[1, 1, 1], source="judge", run_kind="judge")
    client = APIClient()
    client.force_authenticate(user=MembershipFactory(project=project).user)

    # With the verdicts shown: the gold chain first (accepted, so 2 of 3 against the key),
    # then two chains, the second with step 3 overridden
    assert label(client, project, [1, 1, 1], 10)["chain"]["prelabel_source"] == "judge"
    label(client, project, [1, 1, 1], 20)
    label(client, project, [1, 1, -1], 30)
    assert label(client, project, [1, 1, 1], 99)["chain"]["prelabel_source"] is None  # unjudged

    # Held out: one rating of the six differs from the unseen verdict
    project.prelabel_holdout = 1.0
    project.save()
    label(client, project, [1, -1, 1], 40)
    label(client, project, [1, 1, 1], 60)
    lead = MembershipFactory(project=project, role=Role.LEAD).user
    return {"project": project, "lead": lead, "unjudged": unjudged}
