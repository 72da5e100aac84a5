"""A project's Dawid-Skene fit is made once per label state for every process: two
processes asking at the same moment run one fit between them (the other waits on the
project's lock and reads the stored fit), and a later process reads it without fitting."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection

from annotation.models import ConsensusFit, ConsensusMethod, Project
from annotation.quality import consensus_fit
from annotation.quality.consensus_fit import dawid_skene_fit
from tests.factories import ChainFactory, UserFactory, annotation_with_ratings

pytestmark = pytest.mark.django_db(transaction=True)

REPO_ROOT = Path(__file__).resolve().parents[3]
CHAINS = 40
STEPS = 8
# The children set Django up (a few seconds on a loaded machine) before this moment.
START_DELAY_SECONDS = 12.0


def _child_env() -> dict[str, str]:
    db = connection.settings_dict
    url = f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    if db.get("PASSWORD"):
        url = url.replace("@", f":{db['PASSWORD']}@", 1)
    return {
        **os.environ,
        "DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "PYTHONPATH": str(REPO_ROOT),
    }


def _labeled_project() -> Project:
    """A Dawid-Skene project whose chains three annotators rated."""
    project = ChainFactory().project
    project.consensus = ConsensusMethod.DAWID_SKENE
    project.save(update_fields=["consensus"])
    people = [UserFactory() for _ in range(3)]
    for number in range(CHAINS):
        chain = ChainFactory(project=project, step_count=STEPS)
        for who, person in enumerate(people):
            labels = [1 if (number + step + who) % 4 else -1 for step in range(STEPS)]
            annotation_with_ratings(chain=chain, annotator=person, labels=labels)
    return project


def _run_children(project: Project, count: int) -> list[dict]:
    start_at = time.time() + START_DELAY_SECONDS
    children = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.annotation.quality.fit_child",
                str(project.pk),
                str(start_at),
            ],
            cwd=REPO_ROOT,
            env=_child_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(count)
    ]
    answers = []
    for child in children:
        out, err = child.communicate(timeout=180)
        assert child.returncode == 0, err
        answers.append(json.loads(out.strip().splitlines()[-1]))
    assert all(answer["began"] >= start_at for answer in answers), "a child started late"
    return answers


def test_two_processes_refitting_at_once_run_one_fit() -> None:
    # Given a Dawid-Skene project with no stored fit
    project = _labeled_project()
    assert not ConsensusFit.objects.exists()

    # When two processes ask for its fit at the same moment
    first, second = _run_children(project, 2)

    # Then both asked before either had its answer (the fits would have overlapped)...
    assert max(first["began"], second["began"]) < min(first["ended"], second["ended"])
    # ...one process fitted and the other read what it stored, the same fit
    assert first["fits"] + second["fits"] == 1
    assert first["votes"] == second["votes"] == CHAINS * STEPS * 3
    stored = ConsensusFit.objects.get(project=project)

    # And a third process, later, reads the stored fit without fitting
    (third,) = _run_children(project, 1)
    assert third["fits"] == 0
    assert ConsensusFit.objects.get(project=project).fitted_at == stored.fitted_at


def test_a_stored_fit_of_older_labels_is_not_served() -> None:
    # Given a project fitted once, then a new vote
    project = _labeled_project()
    fitted = dawid_skene_fit(project=project)
    chain = ChainFactory(project=project, step_count=2)
    annotation_with_ratings(chain=chain, annotator=UserFactory(), labels=[1, -1])
    # When another process (nothing of this one's memory) asks for the fit
    consensus_fit._RECENT_FITS.clear()
    refit = dawid_skene_fit(project=project)
    # Then it fits again on the current labels and stores that fit in place of the old
    assert refit.votes == fitted.votes + 2
    assert ConsensusFit.objects.filter(project=project).count() == 1
    consensus_fit._RECENT_FITS.clear()
    assert dawid_skene_fit(project=project).votes == refit.votes
