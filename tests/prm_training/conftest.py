"""Fixtures for the PRM loop: a real Celery worker on Redis (db 7) against the test
database, and helpers that build labeled projects.

Tests that use the worker need ``@pytest.mark.django_db(transaction=True)``: the worker is
another process and only sees committed rows."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from prm_worker import PrivateRedis, WorkerFactory, worker_broker_flush, worker_env


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer BERT with a word-level tokenizer, saved as a local model directory (the
    worker subprocess reads it too)."""
    from tests.prm_training.ml_tiny import tiny_backbone_dir

    return tiny_backbone_dir(tmp_path_factory.mktemp("tiny-bert"), "bert")


@pytest.fixture(autouse=True)
def backbone_root(tiny_bert_dir: Path, monkeypatch: Any) -> Path:
    """The backbone root of every PRM test: the directory holding the tiny BERT, so a run
    names it "bert" (tiny_settings); the worker subprocesses inherit it."""
    monkeypatch.setenv("STEPLAB_BACKBONE_DIR", str(tiny_bert_dir.parent))
    return tiny_bert_dir.parent


@pytest.fixture
def feature_caches(monkeypatch: Any) -> dict[Any, Any]:
    """The process's feature caches (``ml.features.FEATURE_CACHES``), empty for this test
    and put back after it, so no encoding another test did is found: a test counting what
    a run encodes starts cold, and ``feature_caches.clear()`` stands for a new process
    (a worker loading a checkpoint it did not train)."""
    from prm_training.ml import features

    caches: dict[Any, Any] = {}
    monkeypatch.setattr(features, "FEATURE_CACHES", caches)
    return caches


@pytest.fixture
def endless_runs_allowed(settings: Any) -> None:
    """A node whose limit on head epochs lets a run train for ever: the tests that cancel
    or kill a run mid-training ask for 1,000,000 so it is still training when they do
    (the limit is checked where the run is started, in this process)."""
    limits = dict(settings.STEPLAB_TRAINING_LIMITS)
    limits["head_epochs"] = (1_000_000, limits["head_epochs"][1])
    settings.STEPLAB_TRAINING_LIMITS = limits


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    path = tmp_path / "models"
    path.mkdir()
    return path


@pytest.fixture
def celery_workers(
    transactional_db: Any, settings: Any, tmp_path: Path, model_dir: Path, monkeypatch: Any
) -> Iterator[WorkerFactory]:
    """Start a node's workers by the production commands (``config.workers``: the default
    and gpu workers, prefork pool) as subprocesses
    against the pytest-django test database and the run's Redis broker (flushed first).
    They are terminated before the database is flushed at teardown."""
    env = worker_env(settings, STEPLAB_MODEL_DIR=str(model_dir))
    monkeypatch.setenv("STEPLAB_MODEL_DIR", str(model_dir))
    factory = WorkerFactory(env=env, tmp=tmp_path)
    try:
        yield factory
    finally:
        factory.stop_all()
        worker_broker_flush(settings)


@pytest.fixture
def label_chain() -> Callable[..., Any]:
    """label_chain(chain, annotator, ratings) -> a finished human Annotation with one
    StepRating per rating, the chain counted as finished (overlap 1)."""
    from annotation.models import Annotation, AnnotationSource, Chain, Step, StepRating

    def make(chain: Chain, annotator: Any, ratings: Sequence[int]) -> Annotation:
        annotation = Annotation.objects.create(
            chain=chain, source=AnnotationSource.HUMAN, annotator=annotator
        )
        steps = list(Step.objects.filter(chain=chain).order_by("index"))
        StepRating.objects.bulk_create(
            [
                StepRating(annotation=annotation, step=step, rating=rating)
                for step, rating in zip(steps, ratings, strict=False)
            ]
        )
        Chain.objects.filter(pk=chain.pk).update(finished_count=1, is_finished=True)
        return annotation

    return make


@pytest.fixture
def arithmetic_project(project: Any, make_member: Callable[..., Any], label_chain: Any) -> Any:
    """A project with 30 labeled chains (half of them with a wrong step) and 20 unlabeled
    ones, each on its own problem: sums where a wrong step is visibly wrong."""
    from annotation.models import Chain, Step
    from tests.factories import ChainFactory, ProblemFactory

    annotator = make_member(project, "annotator")

    def chain_with(i: int, wrong_at: int | None) -> Chain:
        problem = ProblemFactory(
            project=project,
            text=f"What is {i} + {i} + 1?",
            reference_answer=str(2 * i + 1),
            # Fixed hashes: the snapshot's held-out split hashes them, so it stays the same
            # whatever ran before.
            content_hash=f"arithmetic-problem-{i:044d}",
        )
        chain = ChainFactory(project=project, problem=problem, step_count=0)
        texts = [
            f"First, {i} + {i} = {2 * i}.",
            f"Then {2 * i} + 1 = {2 * i + 1}.",
            f"So the answer is {2 * i + 1}.",
        ]
        if wrong_at is not None:
            texts[wrong_at] = (
                texts[wrong_at]
                .replace(str(2 * i + 1), str(2 * i + 7))
                .replace(f"= {2 * i}.", f"= {2 * i + 3}.")
            )
        Step.objects.bulk_create(
            [Step(chain=chain, index=k, text=text) for k, text in enumerate(texts)]
        )
        Chain.objects.filter(pk=chain.pk).update(
            step_count=3, final_answer=str(2 * i + (7 if wrong_at is not None else 1))
        )
        return chain

    for i in range(30):
        wrong_at = None if i % 2 == 0 else (i // 2) % 2  # error at step 0 or 1
        chain = chain_with(i, wrong_at)
        ratings = [1, 1, 1] if wrong_at is None else [1] * wrong_at + [-1]
        label_chain(chain, annotator, ratings)
    for i in range(30, 50):
        chain_with(i, None if i % 3 else 1)
    project.unlabeled_ids = sorted(  # type: ignore[attr-defined]
        Chain.objects.filter(project=project, is_finished=False).values_list("id", flat=True)
    )
    return project


def _reset_celery_pools() -> None:
    """Drop this process's broker connection and producer pools (built for the broker of
    their first use), so the next task goes to the broker configured now."""
    from kombu import pools

    from config.celery import app

    # kombu keeps pools in a process-wide registry: reset it too, or a closed pool would be
    # handed back for the old broker later.
    pools.reset()
    app._pool = None
    app.amqp._producer_pool = None


@pytest.fixture
def private_broker(tmp_path: Path, monkeypatch: Any) -> Iterator[PrivateRedis]:
    """A private redis-server that this process (the "web" side) publishes to; start the
    worker with ``env={"CELERY_BROKER_URL": private_broker.url}``. Stop and start it to
    simulate an outage; the shared Redis is never touched."""
    broker = PrivateRedis(log=tmp_path / "redis.log")
    broker.start()
    # Celery reads CELERY_BROKER_URL from the environment before its own settings.
    monkeypatch.setenv("CELERY_BROKER_URL", broker.url)
    _reset_celery_pools()
    try:
        yield broker
    finally:
        # The pools are rebuilt on next use, after monkeypatch restores the environment.
        _reset_celery_pools()
        broker.stop()
