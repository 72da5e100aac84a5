"""The labeling queue on the embedded default (SQLite, tasks in-process), as `make demo`
runs it. The rest of the suite runs on PostgreSQL; the queue writes its submit in one
statement there and statement by statement on SQLite, and reads rows by hand on both, so
the SQLite path gets its own run: a subprocess with the development settings on a fresh
SQLite file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r"""
import json
import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)

from django.contrib.auth import get_user_model
from django.test import Client
JSON = "application/json"  # what the workspace sends; multipart is for imports only
from tests.factories import api_token_key

from annotation.models import (
    Annotation, Assignment, Chain, LabelingMode, Membership, Problem, Project, Step, StepRating
)
from annotation.public_ids import CHAIN_IDS

User = get_user_model()
project = Project.objects.create(name="sqlite", overlap=2)
problem = Problem.objects.create(project=project, text="2 + 2?", content_hash="p")
for c in range(2):
    chain = Chain.objects.create(
        project=project, problem=problem, content_hash=f"c{c}", step_count=3, meta={"k": c}
    )
    Step.objects.bulk_create(Step(chain=chain, index=i, text=f"step {i}") for i in range(3))
users = []
for name in ("ann", "bob"):
    user = User.objects.create_user(username=name, password="pw-" + name)
    Membership.objects.create(project=project, user=user, role="annotator")
    users.append(user)

out = {}
# ann over a token: the token door
token = Client(HTTP_AUTHORIZATION="Token " + api_token_key(users[0]))
leased = token.post(f"/api/v1/projects/{project.pk}/assignments/next/", content_type=JSON)
out["next"] = leased.status_code
lease = leased.json()
out["next_again_same"] = (
    token.post(f"/api/v1/projects/{project.pk}/assignments/next/", content_type=JSON)
    .json()["assignment"]["id"]
    == lease["assignment"]["id"]
)
body = {
    "ratings": [{"step": s["id"], "rating": 1} for s in lease["chain"]["steps"]],
    "request_id": "r1",
}
url = f"/api/v1/assignments/{lease['assignment']['id']}/submit/"
first = token.post(url, json.dumps(body), content_type=JSON)
again = token.post(url, json.dumps(body), content_type=JSON)
out["submit"] = [first.status_code, again.status_code, first.json() == again.json()]
out["ratings"] = [r["rating"] for r in first.json()["annotation"]["ratings"]]

# bob over a session (DRF's full cycle), with a rating comment
session = Client()
session.force_login(User.objects.get(username="bob"))
lease = session.post(f"/api/v1/projects/{project.pk}/assignments/next/", content_type=JSON).json()
steps = lease["chain"]["steps"]
body = {"ratings": [{"step": s["id"], "rating": -1, "comment": " why "} for s in steps]}
url = f"/api/v1/assignments/{lease['assignment']['id']}/submit/"
submitted = session.post(url, json.dumps(body), content_type=JSON)
out["session_submit"] = submitted.status_code

chain = Chain.objects.get(pk=CHAIN_IDS.read(lease["chain"]["id"], viewer=users[1].pk))  # bob's
out["chain"] = [chain.finished_count, chain.is_finished, chain.meta]
out["stored"] = sorted(StepRating.objects.values_list("rating", "comment"))
out["leases"] = sorted(Assignment.objects.values_list("status", flat=True))
out["annotations"] = Annotation.objects.count()

# a chain longer than one batch of rating inserts
from annotation.labeling.queue.submit_writes import _RATINGS_PER_STATEMENT
long_project = Project.objects.create(name="long", overlap=1)
Membership.objects.create(project=long_project, user=users[0], role="annotator")
long_chain = Chain.objects.create(
    project=long_project, problem=Problem.objects.create(
        project=long_project, text="long", content_hash="l"
    ), content_hash="long", step_count=2 * _RATINGS_PER_STATEMENT + 1,
)
Step.objects.bulk_create(
    Step(chain=long_chain, index=i, text=f"s{i}") for i in range(long_chain.step_count)
)
next_url = f"/api/v1/projects/{long_project.pk}/assignments/next/"
lease = token.post(next_url, content_type=JSON).json()
body = {"ratings": [{"step": s["id"], "rating": 0} for s in lease["chain"]["steps"]]}
url = f"/api/v1/assignments/{lease['assignment']['id']}/submit/"
out["long_submit"] = token.post(url, json.dumps(body), content_type=JSON).status_code
long_chain.refresh_from_db()
out["long"] = [
    StepRating.objects.filter(annotation__chain=long_chain).count(),
    long_chain.step_count,
    long_chain.is_finished,
]

# flag, clear and skip-then-submit: the chain lock they take is BEGIN IMMEDIATE here
flag_project = Project.objects.create(name="flags", overlap=1)
Membership.objects.create(project=flag_project, user=users[0], role="annotator")
lead = User.objects.create_user(username="lea", password="pw-lea")
Membership.objects.create(project=flag_project, user=lead, role="lead")
flag_problem = Problem.objects.create(project=flag_project, text="flag", content_hash="f")
for c in range(2):
    chain = Chain.objects.create(
        project=flag_project, problem=flag_problem, content_hash=f"f{c}", step_count=1
    )
    Step.objects.create(chain=chain, index=0, text="only")
lease = token.post(f"/api/v1/projects/{flag_project.pk}/assignments/next/", content_type=JSON)
lease = lease.json()
url = f"/api/v1/assignments/{lease['assignment']['id']}/flag/"
reason = json.dumps({"reason": "garbled"})
flags = [token.post(url, reason, content_type=JSON).status_code for _ in "ab"]
lead_client = Client()
lead_client.force_login(lead)
listed = lead_client.get(f"/api/v1/projects/{flag_project.pk}/flags/").json()["results"]
# A lead's rooms name chains by their row ids, the workspace by their public ids (ann's).
flagged_chain = CHAIN_IDS.read(lease["chain"]["id"], viewer=users[0].pk)
cleared = lead_client.post(f"/api/v1/chains/{flagged_chain}/unflag/", content_type=JSON).json()
out["flag"] = flags + [
    [listed[0]["flagged_by"], listed[0]["flag_reason"]],
    [cleared["is_flagged"], cleared["cleared_by"]],
]
lease = token.post(f"/api/v1/projects/{flag_project.pk}/assignments/next/", content_type=JSON)
lease = lease.json()
base = f"/api/v1/assignments/{lease['assignment']['id']}"
skip = token.post(f"{base}/skip/", json.dumps({"reason": "no"}), content_type=JSON)
body = {"ratings": [{"step": s["id"], "rating": 1} for s in lease["chain"]["steps"]]}
late = token.post(f"{base}/submit/", json.dumps(body), content_type=JSON)
out["skip_then_submit"] = [skip.status_code, late.status_code, late.json()["code"]]

# verification: the lease's pre-labels come from SQLite's JSON aggregate, the submit
# records confirm and override statement by statement
from annotation.models import MachineLabel
pre_project = Project.objects.create(name="pre", overlap=1, prelabels=True, prelabel_holdout=0.0)
Membership.objects.create(project=pre_project, user=users[0], role="annotator")
pre_chain = Chain.objects.create(
    project=pre_project,
    problem=Problem.objects.create(project=pre_project, text="pre", content_hash="pre"),
    content_hash="pre",
    step_count=3,
)
for i, verdict in enumerate([1, -1, None]):
    step = Step.objects.create(chain=pre_chain, index=i, text=f"p{i}")
    if verdict is not None:
        MachineLabel.objects.create(
            project=pre_project, chain=pre_chain, step=step, source="judge", rating=verdict,
            run_kind="judge", run_id=1,
        )
lease = token.post(f"/api/v1/projects/{pre_project.pk}/assignments/next/", content_type=JSON)
lease = lease.json()
out["prelabels_shown"] = [s["prelabel"] for s in lease["chain"]["steps"]]
body = {"ratings": [{"step": s["id"], "rating": 1} for s in lease["chain"]["steps"]]}
url = f"/api/v1/assignments/{lease['assignment']['id']}/submit/"
out["prelabel_submit"] = token.post(url, json.dumps(body), content_type=JSON).status_code
out["prelabel_outcomes"] = list(
    StepRating.objects.filter(annotation__chain=pre_chain)
    .order_by("step__index")
    .values_list("prelabel", flat=True)
)

print("RESULT " + json.dumps(out))
"""


@pytest.mark.slow
def test_the_queue_on_sqlite(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.dev",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'demo.sqlite3'}",
        "DJANGO_ALLOWED_HOSTS": "testserver",
    }
    env.pop("CELERY_BROKER_URL", None)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [row for row in done.stdout.splitlines() if row.startswith("RESULT ")]
    got = json.loads(line.removeprefix("RESULT "))

    assert got["next"] == 200 and got["next_again_same"]
    assert got["submit"] == [201, 201, True]  # a repeat answers as the first submit did
    assert got["ratings"] == [1, 1, 1]
    assert got["session_submit"] == 201
    # both graded the oldest chain (overlap 2), which is now finished
    assert got["chain"] == [2, True, {"k": 0}]
    assert got["stored"] == [[-1, "why"]] * 3 + [[1, ""]] * 3
    assert got["leases"] == ["submitted", "submitted"]
    assert got["annotations"] == 2
    assert got["long_submit"] == 201
    assert got["long"][0] == got["long"][1] and got["long"][2] is True
    # a live lease flags once; the lead sees who and why, and clearing is recorded
    assert got["flag"] == [200, 409, ["ann", "garbled"], [False, "lea"]]
    assert got["skip_then_submit"] == [200, 409, "lease_closed"]
    assert got["prelabels_shown"] == [1, -1, None]
    assert got["prelabel_submit"] == 201
    assert got["prelabel_outcomes"] == ["confirmed", "overridden", "none"]
