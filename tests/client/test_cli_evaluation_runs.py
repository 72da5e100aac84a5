"""``steplab evaluate`` and ``steplab evaluations`` against a live server: a run queued
(no worker takes it), listed, shown, followed with a time limit and cancelled, as the
other kinds of run are; with a real worker, one followed to its end, a version whose
checkpoint is gone skipped with the reason."""

from __future__ import annotations

import pytest

from annotation.datasets.evaluation_sets import evaluation_set_mark_chains
from annotation.models import Membership, Project, Role
from prm_training.models import EvaluationResult, EvaluationRun
from tests.client.conftest import Steplab
from tests.factories import ChainFactory, UserFactory, api_token_key
from tests.prm_training.evaluation_versions import stored_version
from tests.prm_training.prm_worker import WorkerHandle

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]


def _project_with_a_gap() -> tuple[Project, str]:
    """Project "Sums" with v1 (its checkpoint gone) and a set it has no figures on, and
    the token of its ML staff member."""
    project = Project.objects.create(name="Sums", overlap=1)
    user = UserFactory(username="mia")
    Membership.objects.create(project=project, user=user, role=Role.ML)
    stored_version(project, 1)
    chains = [ChainFactory(project=project).pk for _ in range(2)]
    evaluation_set_mark_chains(project=project, chain_ids=chains, name="held")
    return project, api_token_key(user)


def test_an_evaluation_run_is_queued_followed_and_cancelled(
    steplab: Steplab, no_worker: None
) -> None:
    # Given: a version lacking figures on a set (marking it queued a run)
    project, token = _project_with_a_gap()
    [waiting] = EvaluationRun.objects.filter(project=project)

    # When: ML staff ask for a run, it is the one waiting
    asked = steplab(token, "evaluate", "Sums", "--json")
    assert asked.code == 0, asked.err
    assert (asked.json()["id"], asked.json()["status"]) == (waiting.pk, "queued")
    assert f"evaluation run {waiting.pk} queued" in asked.err

    # Then: it is listed, shown, and followed until the time limit
    listed = steplab(token, "evaluations", "list", "Sums", "--json").json()
    assert [row["id"] for row in listed] == [waiting.pk]
    assert "queued" in steplab(token, "evaluations", "show", str(waiting.pk)).out
    waited = steplab(token, "evaluations", "show", str(waiting.pk), "--follow", "--timeout", "1")
    assert waited.code == 1 and "Still queued after 1 s" in waited.err

    # When: they cancel it, it ends at once; cancelling it again is the server's 400
    cancelled = steplab(token, "evaluations", "cancel", str(waiting.pk), "--json")
    assert cancelled.code == 0, cancelled.err
    assert cancelled.json()["status"] == "cancelled"
    again = steplab(token, "evaluations", "cancel", str(waiting.pk))
    assert again.code == 1 and "HTTP 400" in again.err
    # And there is no retry: asking again queues a new run over what is missing
    with pytest.raises(SystemExit, match="2"):  # argparse: no such command
        steplab(token, "evaluations", "retry", str(waiting.pk))
    renewed = steplab(token, "evaluate", "Sums", "--json")
    assert renewed.code == 0 and renewed.json()["id"] != waiting.pk
    assert renewed.json()["trigger"] == "manual"


def test_an_evaluation_run_followed_to_its_end_on_a_worker(
    steplab: Steplab, worker: WorkerHandle
) -> None:
    # Given: a version whose checkpoint is gone, lacking figures on a set
    project, token = _project_with_a_gap()

    # When: ML staff ask for a run and follow it
    followed = steplab(token, "evaluate", "Sums", "--follow", "--json")

    # Then: it succeeded, measured nothing, and says why
    assert followed.code == 0, followed.err + worker.output()
    run = followed.json()
    assert run["status"] == "succeeded" and run["filled"] == 0
    assert [skip["reason"] for skip in run["skipped"]] == ["its checkpoint is gone"]
    assert f"evaluation run {run['id']} succeeded" in followed.err
    assert not EvaluationResult.objects.filter(evaluation_set__project=project).exists()
