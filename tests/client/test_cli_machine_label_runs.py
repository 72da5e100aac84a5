"""``steplab machine-label`` and ``steplab machine-runs`` against a live server: a
sampling run queued for two problems (no worker takes it), listed, shown, followed with
a time limit, cancelled and retried; a model that is no causal LM is the server's 400."""

from __future__ import annotations

from pathlib import Path

import pytest

from annotation.models import Membership, Project, Role
from prm_training.models import MachineLabelRun
from tests.client.conftest import Steplab
from tests.factories import ProblemFactory, UserFactory, api_token_key
from tests.prm_training.lm_fixtures import LM, lm_root, tiny_lm_dir  # noqa: F401 - fixtures

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]


def test_machine_label_runs_from_the_command_line(
    steplab: Steplab,
    no_worker: None,
    lm_root: Path,  # noqa: F811 - the fixture
) -> None:
    # Given: two problems and ML staff
    project = Project.objects.create(name="Sums", overlap=1)
    user = UserFactory(username="mia")
    Membership.objects.create(project=project, user=user, role=Role.ML)
    token = api_token_key(user)
    problems = [ProblemFactory(project=project, reference_answer="2") for _ in range(2)]
    ids = ",".join(str(problem.pk) for problem in problems)

    # When: they queue a sampling run of the tiny LM
    started = steplab(
        token, "machine-label", "Sums", "--kind", "sample", "--model", LM, "--ids", ids,
        "--set", "n=3", "--set", "temperature=0.7", "--json",
    )  # fmt: skip

    # Then: it is queued with those problems and parameters
    assert started.code == 0, started.err
    run = started.json()
    assert (run["status"], run["kind"], run["model_name"]) == ("queued", "sample", LM)
    assert run["params"]["n"] == 3 and run["params"]["temperature"] == 0.7
    assert MachineLabelRun.objects.get(pk=run["id"]).item_ids == [p.pk for p in problems]

    # ...listed, shown, and followed no longer than asked
    listed = steplab(token, "machine-runs", "list", "Sums", "--json").json()
    assert [row["id"] for row in listed] == [run["id"]]
    assert "queued" in steplab(token, "machine-runs", "show", str(run["id"])).out
    waited = steplab(token, "machine-runs", "show", str(run["id"]), "--follow", "--timeout", "1")
    assert waited.code == 1 and "Still queued after 1 s" in waited.err

    # ...cancelled, and retried as a new queued run
    cancelled = steplab(token, "machine-runs", "cancel", str(run["id"]), "--json")
    assert cancelled.code == 0 and cancelled.json()["status"] == "cancelled"
    retried = steplab(token, "machine-runs", "retry", str(run["id"]), "--json")
    assert retried.code == 0, retried.err
    assert retried.json()["status"] == "queued" and retried.json()["model_name"] == LM
    assert steplab(token, "machine-runs", "cancel", str(retried.json()["id"])).code == 0

    # ...and a model that is not a causal LM is refused with the server's reason
    refused = steplab(
        token, "machine-label", "Sums", "--kind", "sample", "--model", "bert", "--filter", "all"
    )
    assert refused.code == 1 and "HTTP 400" in refused.err and "model" in refused.err
