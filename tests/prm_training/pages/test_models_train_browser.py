"""ML staff start training from the Models page and watch it move, in a real browser
(Debian's chromium against pytest-django's live server) with a real Celery worker on
Redis: the form answers at once with the run queued, the runs table goes through the
worker's phases, and the new version appears. A tiny BERT (with BERT's 512 positions,
as the form trains at the default max_length) keeps it to seconds on a CPU. Screenshots
go to tests/artifacts/."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from prm_training.models import ModelVersion, TrainingRun
from tests.browser import ARTIFACTS, chromium_running, page_login, page_overflow, page_watched
from tests.prm_training.prm_worker import WorkerFactory

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True), pytest.mark.timeout(420)]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium_running() as launched:
        yield launched


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    with page_watched(browser=browser, width=1366, height=768) as opened:
        yield opened


@pytest.fixture
def bert_512(tmp_path_factory: pytest.TempPathFactory, monkeypatch: Any) -> Path:
    """A 2-layer BERT with 512 positions under its own backbone root, set before the
    worker's environment is taken (request it before ``celery_workers``)."""
    from transformers import BertConfig, BertModel

    from tests.prm_training.ml_tiny import tiny_tokenizer

    root = tmp_path_factory.mktemp("bert-512")
    tokenizer = tiny_tokenizer("encoder")
    model = BertModel(
        BertConfig(
            vocab_size=len(tokenizer),
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=512,
        )
    )
    model.save_pretrained(str(root / "bert"))
    tokenizer.save_pretrained(str(root / "bert"))
    monkeypatch.setenv("STEPLAB_BACKBONE_DIR", str(root))
    return root / "bert"


def test_ml_staff_start_training_from_the_page_and_watch_its_phases(
    bert_512: Path,
    celery_workers: WorkerFactory,
    arithmetic_project: Any,
    make_member: Any,
    live_server: Any,
    page: Page,
) -> None:
    # Given: a labeled project, a worker, and ML staff on the Models page
    project = arithmetic_project
    ml = make_member(project, "ml")
    worker = celery_workers.start()
    page_login(page=page, base_url=live_server.url, username=ml.username)
    page.goto(f"{live_server.url}/projects/{project.pk}/models/")
    form = page.locator("#train-form")
    form.locator("select[name=backbone]").select_option("bert")
    form.locator("select[name=mode]").select_option("frozen_head")
    # Enough epochs that the training phase outlasts the page's 2-second refresh on a
    # quiet machine too (at 120 a run could end before the page showed it training)
    form.locator("input[name=head_epochs]").fill("4000")

    # When: they start training
    asked = time.monotonic()
    form.locator("button[type=submit]").click()

    # Then: the page answers at once with the run queued (no request runs a task) ...
    message = page.locator("#train-message")
    expect(message).to_have_attribute("data-follows", re.compile(r"^\d+$"), timeout=5_000)
    answered = time.monotonic() - asked
    run = TrainingRun.objects.get(pk=int(message.get_attribute("data-follows") or 0))
    # ... and the runs table follows the worker's phases until the version is published
    runs = page.locator("#runs-table")
    seen: list[str] = []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        run.refresh_from_db()
        now = runs.locator(".phase-now").all_inner_texts()
        if now and (not seen or seen[-1] != now[0]):
            seen.append(now[0])
            if now[0].startswith("Training") and not (ARTIFACTS / "models-train-live.png").exists():
                ARTIFACTS.mkdir(exist_ok=True)
                page.screenshot(path=str(ARTIFACTS / "models-train-live.png"), full_page=True)
        if run.status in ("succeeded", "failed", "cancelled"):
            break
        time.sleep(0.25)
    assert run.status == "succeeded", (run.status, run.error, worker.output()[-3000:])
    print(f"start answered in {answered:.2f} s; phases seen: {seen}")
    assert len({text.split(" · ")[0] for text in seen}) >= 2, seen
    assert any(text.startswith("Training · epoch") for text in seen), seen
    version = ModelVersion.objects.get(training_run=run)
    page.reload()
    expect(page.locator("#versions-table")).to_contain_text(f"v{version.version}")
    assert page_overflow(page) == []
    page.screenshot(path=str(ARTIFACTS / "models-train-done.png"), full_page=True)
