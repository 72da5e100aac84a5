"""A lab's working day in the browser, from an empty database to a trusted dataset and a
trained model, with no terminal and no admin: the lead creates the project, invites two
annotators and one of the ML staff (who join from their links), uploads a real
ProcessBench file (a real Celery worker imports it), watches the annotators label (driven
through the API, as their workspaces would), rules on their disagreement, takes a
snapshot of finished chains, and downloads it in every format; each file is checked
against the labels the annotators and the lead gave. Then the ML staff member reaches
Models from the project page, starts a training run (the same worker trains the tiny
BERT), watches its phase and sees it finish; its own snapshot reads t1 beside the lead's
v1. Every page of the day is measured at 1366x768 and 390x844: nothing scrolls sideways
or is cut off (screenshots in tests/artifacts/lead-e2e-*.png)."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from playwright.sync_api import Browser, Page, expect
from rest_framework.test import APIClient

from annotation.datasets.exporters.formats import EXPORT_FORMATS, MONTE_CARLO_FORMATS
from annotation.models import Annotation, AnnotationSource, Chain, Project, Snapshot
from annotation.public_ids import CHAIN_IDS
from prm_training.models import ModelVersion, TrainingRun
from tests.browser import (
    ARTIFACTS,
    chromium_running,
    page_clipped_sideways,
    page_login,
    page_overflow,
    page_watched,
)
from tests.factories import UserFactory, api_token_key
from tests.prm_training.prm_worker import (
    WorkerFactory,
    WorkerHandle,
    worker_broker_flush,
    worker_env,
)

pytestmark = [pytest.mark.slow, pytest.mark.redis, pytest.mark.django_db(transaction=True)]

# Each annotator labels the same eight chains (overlap 2): the file's first eight, whose
# problems split six to train and two held out (seed 0), so a training run has both.
CHAINS_LABELED = 8
DISPUTED_STEP = 1  # bob calls the first chain's second step wrong, ann right
LAPTOP = (1366, 768)
PHONE = (390, 844)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium_running() as launched:
        yield launched


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    with page_watched(
        browser=browser, width=1366, height=768, accept_downloads=True, csp_errors=True
    ) as opened:
        yield opened


@pytest.fixture(scope="module")
def tiny_bert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer BERT with a word-level tokenizer, a backbone named "bert"."""
    from tests.prm_training.ml_tiny import tiny_backbone_dir

    # 512 positions: a run started from the page trains with the default max_length.
    return tiny_backbone_dir(tmp_path_factory.mktemp("tiny-bert"), "bert", bert_positions=512)


@pytest.fixture
def lab_worker(
    transactional_db: Any,
    settings: Any,
    tmp_path: Path,
    import_dir: Path,
    tiny_bert_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[WorkerHandle]:
    """The default and gpu workers by their production commands (``config.workers``), as
    ``make demo`` runs them beside the web server: it imports the upload and trains,
    sharing the server's import folder, model folder and backbone root; stopped before the
    database is flushed."""
    models = tmp_path / "models"
    models.mkdir()
    monkeypatch.setenv("STEPLAB_MODEL_DIR", str(models))
    monkeypatch.setenv("STEPLAB_BACKBONE_DIR", str(tiny_bert_dir.parent))
    env = worker_env(
        settings,
        STEPLAB_IMPORT_DIR=str(import_dir),
        STEPLAB_MODEL_DIR=str(models),
        STEPLAB_BACKBONE_DIR=str(tiny_bert_dir.parent),
    )
    factory = WorkerFactory(env=env, tmp=tmp_path)
    try:
        yield factory.start(name="lab-worker@%h")
    finally:
        factory.stop_all()
        worker_broker_flush(settings)


def _shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"lead-e2e-{name}.png"), full_page=True)


def _fits(page: Page, name: str) -> None:
    """The page as it is now, at a laptop's width and a phone's: a screenshot of each
    (``lead-e2e-<name>-<width>.png``) and nothing scrolling the page sideways or cut off
    in its box (tests/browser.py measures); back at the laptop's width after."""
    ARTIFACTS.mkdir(exist_ok=True)
    problems = {}
    for width, height in (LAPTOP, PHONE):
        page.set_viewport_size({"width": width, "height": height})
        page.wait_for_timeout(50)  # media and container queries settle in the next frame
        page.screenshot(path=str(ARTIFACTS / f"lead-e2e-{name}-{width}.png"), full_page=True)
        found = {"scrolls the page": page_overflow(page), "cut off": page_clipped_sideways(page)}
        problems[width] = {what: where for what, where in found.items() if where}
    page.set_viewport_size({"width": LAPTOP[0], "height": LAPTOP[1]})
    assert problems == {LAPTOP[0]: {}, PHONE[0]: {}}, name


def _label(client: APIClient, project: Project, *, viewer: int, wrong_step: int | None) -> int:
    """One annotator's next chain, every step rated +1 (``wrong_step`` -1); its row id
    (``viewer``: the user id of the annotator whose client it is, whose public ids it reads)."""
    leased = client.post(f"/api/v1/projects/{project.pk}/assignments/next/")
    assert leased.status_code == 200, leased.content
    chain = leased.json()["chain"]
    ratings = [
        {"step": step["id"], "rating": -1 if step["index"] == wrong_step else 1}
        for step in chain["steps"]
    ]
    submitted = client.post(
        f"/api/v1/assignments/{leased.json()['assignment']['id']}/submit/",
        {"ratings": ratings},
        format="json",
    )
    assert submitted.status_code == 201, submitted.content
    chain_id = CHAIN_IDS.read(int(chain["id"]), viewer=viewer)
    assert chain_id is not None
    return chain_id


def _download(page: Page, fmt: str) -> bytes:
    with page.expect_download() as download:
        page.locator(f".db-export[data-format={fmt}]").click()
    return Path(download.value.path()).read_bytes()


def _json_lines(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]


def test_a_lead_runs_a_project_from_an_empty_database_to_every_export(
    live_server: Any,
    browser: Browser,
    page: Page,
    shared_data: Path,
    lab_worker: WorkerHandle,
) -> None:
    # Given: an empty database but for one account an administrator made: a staff user
    # who will lead
    assert not Project.objects.exists()
    lead = UserFactory(username="lena", is_staff=True)
    page_login(page=page, base_url=live_server.url, username=lead.username)

    # When: the lead creates a project from the home page: every step graded, two
    # annotators a chain, the file's own labels ignored (the people's labels decide)
    page.get_by_role("link", name="New project").first.click()
    page.wait_for_selector("#project-settings[data-state=ready]")
    page.fill("#f-name", "GSM8K round 1")
    page.select_option("#f-labeling_mode", "all_steps")
    page.fill("#f-overlap", "2")
    page.locator("input[name=import_labels][value=ignore]").check()
    page.get_by_role("button", name="Create project").click()
    page.wait_for_url("**/members/?created=1")
    project = Project.objects.get(name="GSM8K round 1")

    # ...invites two annotators and one of the ML staff on the members page, from a
    # pasted list; each opens their link and chooses a username and a password (the
    # page's form posts)
    page.wait_for_selector("#project-members[data-state=ready]")
    page.fill("#f-invite-list", "ann@lab.example\nbob@lab.example\nmia@lab.example, ml")
    page.get_by_role("button", name="Create invitations").click()
    expect(page.locator("#invite-link-list li")).to_have_count(3)
    for name in ("ann", "bob", "mia"):
        link = page.locator(f'#invite-link-list li[data-who="{name}@lab.example"] code')
        visitor = Client()
        visitor.post("/invite/", {"action": "open", "token": link.inner_text().split("#")[1]})
        password = f"{name}-Longer-one-42"
        joined = visitor.post(
            "/invite/",
            {"action": "accept", "username": name, "password1": password, "password2": password},
        )
        assert joined.status_code == 302, joined.content
    ann, bob = (get_user_model().objects.get(username=name) for name in ("ann", "bob"))
    page.reload()
    page.wait_for_selector("#project-members[data-state=ready]")
    expect(page.locator("#members tbody tr")).to_have_count(4)
    expect(page.locator("#pending-empty")).to_be_visible()
    _fits(page, "members")

    # ...and uploads the real ProcessBench GSM8K file on the import page
    page.goto(f"{live_server.url}/projects/{project.pk}/")
    page.get_by_role("link", name="Import chains").click()
    page.wait_for_selector("#import[data-state=idle]")
    page.locator("#im-file").set_input_files(str(shared_data / "processbench" / "gsm8k.json"))
    page.get_by_role("button", name="Import").click()
    page.wait_for_selector("#import[data-state=done]", timeout=120_000)
    expect(page.locator("#im-chains-created")).to_have_text("400")
    _fits(page, "import")
    assert Chain.objects.filter(project=project).count() == 400

    # When: the annotators label through the API, as their workspaces do: the same three
    # chains each, bob calling the first chain's second step wrong
    clients = {}
    for user in (ann, bob):
        clients[user.username] = APIClient()
        key = api_token_key(user)
        clients[user.username].credentials(HTTP_AUTHORIZATION=f"Token {key}")
    labeled: list[int] = []
    for index in range(CHAINS_LABELED):
        chain_ann = _label(clients["ann"], project, viewer=ann.pk, wrong_step=None)
        chain_bob = _label(
            clients["bob"],
            project,
            viewer=bob.pk,
            wrong_step=DISPUTED_STEP if index == 0 else None,
        )
        assert chain_ann == chain_bob  # overlap 2: both get the oldest chain
        labeled.append(chain_ann)
    disputed = labeled[0]

    # Then: the lead watches it on the dashboard: three chains finished
    page.goto(f"{live_server.url}/projects/{project.pk}/")
    expect(page.locator("#bar-chains")).to_have_attribute("value", str(CHAINS_LABELED))
    _fits(page, "dashboard-labeled")

    # When: the lead rules on the disagreement on the review page: the disputed step
    # incorrect, the rest as the annotators agree
    page.get_by_role("link", name="Review").first.click()
    page.wait_for_selector("#review[data-state=ready]")
    assert page.locator("#review").get_attribute("data-chain") == str(disputed)
    _fits(page, "review")
    page.keyboard.press("3")
    page.keyboard.press("a")
    page.keyboard.press("Enter")
    page.wait_for_selector("#rv-message.ok")
    _shot(page, "review")
    ruling = Annotation.objects.get(chain_id=disputed, source=AnnotationSource.ADJUDICATION)
    assert ruling.annotator == lead

    # ...takes a snapshot of finished chains (the default) on the snapshots page
    page.goto(f"{live_server.url}/projects/{project.pk}/snapshots/")
    page.wait_for_selector("#snapshots[data-state=ready]")
    assert page.locator("#sn-finished-only").is_checked()
    page.get_by_role("button", name="Take snapshot").click()
    expect(page.locator("#sn-message.ok")).to_contain_text(
        f"Snapshot v1 taken: {CHAINS_LABELED} chains"
    )
    _fits(page, "snapshot")
    snapshot = Snapshot.objects.get(project=project)
    assert snapshot.meta["options"]["finished_only"] is True

    # ...and downloads it in every format the dashboard offers for it: all but those
    # written from Monte-Carlo labels, which this snapshot does not hold
    page.goto(f"{live_server.url}/projects/{project.pk}/")
    for fmt in MONTE_CARLO_FORMATS:
        expect(page.locator(f".db-export[data-format={fmt}]")).to_have_count(0)
    files = {fmt: _download(page, fmt) for fmt in EXPORT_FORMATS if fmt not in MONTE_CARLO_FORMATS}
    _fits(page, "exports")

    # Then: every file holds the three finished chains, and the labels the people gave:
    # the disputed step wrong (the lead's ruling), every other step right
    chains = {
        chain.pk: chain for chain in Chain.objects.filter(pk__in=labeled).select_related("problem")
    }
    problems = {chain.problem.text: chain.pk for chain in chains.values()}
    steps = {pk: chain.steps.count() for pk, chain in chains.items()}

    def expected(chain_id: int) -> list[int]:
        wrong = DISPUTED_STEP if chain_id == disputed else None
        return [-1 if i == wrong else 1 for i in range(steps[chain_id])]

    def by_problem(records: list[dict[str, Any]], text: Any) -> dict[int, dict[str, Any]]:
        found = {}
        for record in records:
            matches = [pk for problem, pk in problems.items() if problem in text(record)]
            assert len(matches) == 1, text(record)[:200]
            found[matches[0]] = record
        assert set(found) == set(labeled)
        return found

    trl = by_problem(_json_lines(files["trl"]), lambda r: r["prompt"])
    for pk, record in trl.items():
        assert record["labels"] == [rating == 1 for rating in expected(pk)]
        assert len(record["completions"]) == steps[pk]

    table = pq.read_table(io.BytesIO(files["parquet"])).to_pylist()
    parquet = by_problem(table, lambda r: r["prompt"])
    for pk, record in parquet.items():
        assert record["labels"] == [rating == 1 for rating in expected(pk)]

    rows = list(csv.DictReader(io.StringIO(files["csv"].decode("utf-8"))))
    hashes = {chains[pk].content_hash: pk for pk in labeled}
    consensus: dict[int, dict[int, int]] = {}
    for row in rows:
        consensus.setdefault(hashes[row["chain_hash"]], {})[int(row["step_index"])] = int(
            row["consensus"]
        )
    assert {pk: [by[i] for i in sorted(by)] for pk, by in consensus.items()} == {
        pk: expected(pk) for pk in labeled
    }

    processbench = by_problem(_json_lines(files["processbench"]), lambda r: r["problem"])
    for pk, record in processbench.items():
        assert record["label"] == (DISPUTED_STEP if pk == disputed else -1)

    prm800k = by_problem(_json_lines(files["prm800k"]), lambda r: r["question"]["problem"])
    for pk, record in prm800k.items():
        ratings = [step["completions"][0]["rating"] for step in record["label"]["steps"]]
        assert ratings == expected(pk)

    openrlhf = by_problem(_json_lines(files["openrlhf"]), lambda r: r["input"])
    for pk, record in openrlhf.items():
        assert record["value"] == [1.0 if rating == 1 else 0.0 for rating in expected(pk)]

    qwen = by_problem(_json_lines(files["qwen_prm"]), lambda r: r["messages"][1]["content"])
    for pk, record in qwen.items():
        assert record["labels"] == [rating == 1 for rating in expected(pk)]
        assert record["messages"][2]["content"].count("<extra_0>") == steps[pk]

    # When: the ML staff member trains from the page on the labels of the day (the tiny
    # BERT, the one backbone in this server's backbone folder, stands in for MiniLM)
    with page_watched(browser=browser, width=LAPTOP[0], height=LAPTOP[1], csp_errors=True) as ml:
        run = _ml_staff_train(ml, base_url=live_server.url, project=project)

    # Then: the run made a version from its own snapshot, which reads t1 beside the
    # lead's dataset v1 on the snapshots page
    version = ModelVersion.objects.get(training_run=run)
    assert version.snapshot is not None and version.snapshot.label == "t1"
    page.goto(f"{live_server.url}/projects/{project.pk}/snapshots/")
    page.wait_for_selector("#snapshots[data-state=ready]")
    expect(page.locator("#sn-datasets tbody tr strong")).to_have_text(["v1"])
    expect(page.locator("#sn-training tbody tr strong")).to_have_text(["t1"])
    expect(page.locator("#sn-training tbody tr .sn-download-link").first).to_have_attribute(
        "href", re.compile(r"snapshot=1&kind=training")
    )
    _fits(page, "snapshots-after-training")


def _ml_staff_train(page: Page, *, base_url: str, project: Project) -> TrainingRun:
    """mia (ML staff) signs in, reaches Models from the project page's navigation (no
    typed address), starts a training run and follows its message until it succeeds;
    every text the message showed is kept, to show it followed the run's phases."""
    page_login(page=page, base_url=base_url, username="mia", password="mia-Longer-one-42")
    page.goto(f"{base_url}/projects/{project.pk}/")
    page.get_by_role("navigation", name="Project pages").get_by_role("link", name="Models").click()
    page.wait_for_selector("#train-form")
    _fits(page, "models")
    form = page.locator("#train-form")
    form.locator("select[name=backbone]").select_option("bert")
    form.locator("select[name=mode]").select_option("frozen_head")
    form.locator("input[name=head_epochs]").fill("20")
    page.evaluate(
        """() => {
          const message = document.getElementById("train-message");
          window.seenMessages = [];
          new MutationObserver(() => window.seenMessages.push(message.textContent))
            .observe(message, { childList: true, characterData: true, subtree: true });
        }"""
    )
    form.get_by_role("button", name="Start training").click()
    message = page.locator("#train-message")
    expect(message).to_have_text(re.compile(r"Training run #\d+ succeeded\."), timeout=480_000)
    run = TrainingRun.objects.get(project=project)
    seen = page.evaluate("window.seenMessages")
    # The message named the run's phase while it ran (the worker's report, read every
    # 2 s), then its end: what it said changed with the run.
    running = [text for text in seen if text.startswith(f"Training run #{run.pk}: ")]
    assert running, seen
    assert seen[-1] == f"Training run #{run.pk} succeeded."
    # ...and the run's row lists the phases it went through
    row = page.locator("#runs-table tbody tr", has_text=f"#{run.pk} ")
    expect(row).to_contain_text("succeeded")
    expect(row.locator(".phase-past")).to_contain_text("Training")
    expect(page.locator("#versions-table tbody tr").first).to_contain_text("t1")
    _fits(page, "models-trained")
    return run
