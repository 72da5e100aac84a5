"""Fixtures of the client's tests: a live HTTP server (pytest-django's ``live_server``, a
threaded WSGI server on the PostgreSQL test database), a real Celery worker for the
commands that queue work (imports, training, scoring), and ``steplab``, which runs one
command line of the client against the server as a given user.

Tests that use them commit their rows (``django_db(transaction=True)``): the server's
threads and the worker see only committed rows."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.prm_training.prm_worker import (
    WorkerFactory,
    WorkerHandle,
    worker_broker_flush,
    worker_env,
)


@dataclass
class Ran:
    """One command line's exit status and what it printed."""

    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


Steplab = Callable[..., Ran]


@pytest.fixture
def steplab(
    live_server: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Steplab:
    """steplab(token, *argv) -> Ran: ``steplab argv`` against the live server, the token
    and URL from the environment as a user's shell would hold them (no config file)."""
    from steplab_client.cli import main

    def run(token: str | None, *argv: str) -> Ran:
        monkeypatch.setenv("STEPLAB_URL", live_server.url)
        monkeypatch.setenv("STEPLAB_CONFIG", "/nonexistent/steplab.toml")
        if token is None:
            monkeypatch.delenv("STEPLAB_TOKEN", raising=False)
        else:
            monkeypatch.setenv("STEPLAB_TOKEN", token)
        capsys.readouterr()
        code = main(list(argv))
        printed = capsys.readouterr()
        return Ran(code=code, out=printed.out, err=printed.err)

    return run


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer BERT with a word-level tokenizer, a backbone named "bert"."""
    from tests.prm_training.ml_tiny import tiny_backbone_dir

    return tiny_backbone_dir(tmp_path_factory.mktemp("tiny-bert"), "bert")


@pytest.fixture
def model_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "models"
    path.mkdir()
    monkeypatch.setenv("STEPLAB_MODEL_DIR", str(path))
    return path


@pytest.fixture
def worker(
    transactional_db: Any,
    settings: Any,
    tmp_path: Path,
    import_dir: Path,
    model_dir: Path,
    tiny_bert_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[WorkerHandle]:
    """The production default and gpu workers (``config.workers``), started and ready,
    sharing the server's import folder, model folder and backbone root; stopped before
    the database is flushed."""
    monkeypatch.setenv("STEPLAB_BACKBONE_DIR", str(tiny_bert_dir.parent))
    env = worker_env(
        settings,
        STEPLAB_IMPORT_DIR=str(import_dir),
        STEPLAB_MODEL_DIR=str(model_dir),
        STEPLAB_BACKBONE_DIR=str(tiny_bert_dir.parent),
    )
    factory = WorkerFactory(env=env, tmp=tmp_path)
    try:
        yield factory.start(name="client-worker@%h")
    finally:
        factory.stop_all()
        worker_broker_flush(settings)


@pytest.fixture
def no_worker(transactional_db: Any, settings: Any) -> Iterator[None]:
    """Runs queued and never taken (no worker listens): what they queued is flushed from
    the broker after the test."""
    worker_env(settings)  # skips without PostgreSQL and Redis, flushes the broker
    try:
        yield
    finally:
        worker_broker_flush(settings)


def labeled_arithmetic_project(*, project: Any, annotator: Any, chains: int = 30) -> Any:
    """``chains`` chains of sums labeled by ``annotator`` (every other one with a visibly
    wrong step) and 10 unlabeled ones: enough for the tiny PRM to train on."""
    from annotation.models import Annotation, AnnotationSource, Chain, Step, StepRating
    from tests.factories import ChainFactory, ProblemFactory

    def chain_with(i: int, wrong_at: int | None) -> Any:
        problem = ProblemFactory(
            project=project,
            text=f"What is {i} + {i} + 1?",
            reference_answer=str(2 * i + 1),
            content_hash=f"client-problem-{i:049d}",
        )
        chain = ChainFactory(project=project, problem=problem, step_count=0)
        texts = [f"First, {i} + {i} = {2 * i}.", f"Then {2 * i} + 1 = {2 * i + 1}."]
        if wrong_at is not None:
            texts[wrong_at] = texts[wrong_at].replace(f"= {2 * i}", f"= {2 * i + 3}")
            texts[wrong_at] = texts[wrong_at].replace(f"= {2 * i + 1}", f"= {2 * i + 7}")
        Step.objects.bulk_create(
            [Step(chain=chain, index=k, text=text) for k, text in enumerate(texts)]
        )
        Chain.objects.filter(pk=chain.pk).update(step_count=len(texts))
        return chain

    for i in range(chains):
        wrong_at = None if i % 2 == 0 else (i // 2) % 2
        chain = chain_with(i, wrong_at)
        ratings: Sequence[int] = [1, 1] if wrong_at is None else [1] * wrong_at + [-1]
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
    for i in range(chains, chains + 10):
        chain_with(i, None)
    return project
