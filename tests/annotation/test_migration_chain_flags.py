"""Migration 0008 gives chains flagged before it the author, reason and time of the lease
that flagged them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("annotation", "0007_assignment_chain_open")]
AFTER = [("annotation", "0008_chain_flag_author_reason")]


def migrate(target: list[tuple[str, str]]):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(target)
    return executor.loader.project_state(target).apps


@pytest.fixture(autouse=True)
def back_to_the_latest_schema():
    """The tests after this one need every migration applied, not just 0008."""
    yield
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


def test_earlier_flags_get_their_author_reason_and_time_from_the_flagging_lease() -> None:
    # Given, before the migration, a chain flagged twice through leases (the newer one
    # counts), a chain flagged by hand (no lease) and a chain skipped but not flagged
    apps = migrate(BEFORE)
    User = apps.get_model("auth", "User")
    Project = apps.get_model("annotation", "Project")
    Problem = apps.get_model("annotation", "Problem")
    Chain = apps.get_model("annotation", "Chain")
    Assignment = apps.get_model("annotation", "Assignment")
    project = Project.objects.create(name="old flags")
    problem = Problem.objects.create(project=project, text="p", content_hash="p")
    first, second = (User.objects.create(username=name) for name in ("ann", "bob"))
    flagged, by_hand, skipped = (
        Chain.objects.create(project=project, problem=problem, content_hash=h, is_flagged=f)
        for h, f in (("a", True), ("b", True), ("c", False))
    )
    now = timezone.now()

    def closed(chain, user, reason, at):
        Assignment.objects.create(
            project=project,
            chain=chain,
            annotator=user,
            status="skipped",
            skip_reason=reason,
            expires_at=at,
            finished_at=at,
        )

    closed(flagged, first, "Flagged as broken: garbled", now - timedelta(hours=2))
    closed(flagged, second, "Flagged as broken: steps merged", now - timedelta(hours=1))
    closed(skipped, first, "too long", now)

    # When the migration runs
    apps = migrate(AFTER)

    # Then the flagged chain names the newest flagging lease's annotator, reason and time,
    # and the others have no author
    Chain = apps.get_model("annotation", "Chain")
    rows = {
        c.content_hash: (c.flagged_by_id, c.flag_reason, c.flagged_at)
        for c in Chain.objects.filter(project_id=project.pk)
    }
    assert rows == {
        "a": (second.pk, "steps merged", now - timedelta(hours=1)),
        "b": (None, "", None),
        "c": (None, "", None),
    }
