"""A finished rollout or judge run re-routes the project (issue 23, item 7): the labels it
wrote may make the lead's sources agree or disagree on a chain. The run is executed in
process with a scripted judge; the routing pass it sends runs on a real Celery worker
(Redis, PostgreSQL)."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from prm_worker import WorkerFactory, wait_until

from annotation.models import ChainRouting, Project
from prm_training.models import RunStatus
from prm_training.services.machine_label_work import machine_label_run_execute
from prm_training.services.machine_labels import machine_label_run_start
from tests.annotation.routing.routing_lab import MC, RULES, routing_of, trusted_sources
from tests.factories import ChainFactory, machine_labels
from tests.prm_training.lm_fixtures import LM, ScriptedEngine, lm_root  # noqa: F401 - fixtures
from tests.prm_training.lm_fixtures import tiny_lm_dir as tiny_lm_dir  # noqa: F401

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]


def _judge(project: Project, chain: Any, answer: str) -> None:
    run = machine_label_run_start(
        project=project, user=None, kind="judge", model=LM, params={"n": 1}, ids=[chain.pk]
    )
    done = machine_label_run_execute(run_id=run.pk, engine=ScriptedEngine(lambda p, j: answer))
    assert done is not None and done.status == RunStatus.SUCCEEDED, done and done.error


def test_a_judge_run_that_agrees_with_the_rollouts_takes_the_chain_out_of_the_queue(
    lm_root: Any,  # noqa: F811 - before the worker, whose environment inherits the root
    celery_workers: WorkerFactory,
    project: Project,
    settings: Any,
) -> None:
    # Given: the lead's rules, trusted sources, and a fresh chain whose rollouts put the
    # first error at step 1, not yet judged
    Project.objects.filter(pk=project.pk).update(**RULES)
    trusted_sources(project)
    chain = ChainFactory(project=project, step_count=3)
    machine_labels(chain=chain, ratings=[1, -1, None], source=MC, run_kind="rollout", run_id=1)

    # When: a judge run names step 1 too (its own run message waits on the gpu queue:
    # the worker started after finds it done and leaves it)
    _judge(project, chain, "\\boxed{1}")
    assert redis.Redis.from_url(settings.CELERY_BROKER_URL).llen("default") == 1
    worker = celery_workers.start()

    # Then: the pass it sent accepts the chain
    wait_until(
        lambda: routing_of(chain) == ChainRouting.AGREED,
        timeout=90,
        what="the routing pass after the judge run",
        diagnose=lambda: worker.output()[-4000:],
    )
    assert "annotation.chains_route[" in worker.output()


def test_a_project_without_routing_sources_sends_no_pass(
    lm_root: Any,  # noqa: F811 - the fixture
    celery_workers: WorkerFactory,  # a flushed broker
    project: Project,
    settings: Any,
) -> None:
    chain = ChainFactory(project=project, step_count=3)

    _judge(project, chain, "\\boxed{1}")

    # Only the run's own message waits (on gpu); nothing was sent to default
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    assert (broker.llen("gpu"), broker.llen("default")) == (1, 0)
