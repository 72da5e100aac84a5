"""The import page in a real browser (Debian's chromium driven by Playwright against
pytest-django's live server, under the site's Content-Security-Policy) with a real Celery
worker: a lead opens it from the dashboard, uploads a real ProcessBench file, watches the
job run, and reads its counts; a dropped bad file lists its bad lines and writes nothing.
At 1366x768 and on a 390 px phone, with screenshots."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, transaction
from playwright.sync_api import Browser, Page, expect

from annotation.models import Chain, ImportBatch, ImportJob, Role, Step, StepRating
from tests.annotation.import_worker import import_worker  # noqa: F401 - a fixture
from tests.browser import ARTIFACTS, page_login, page_watched
from tests.factories import MembershipFactory, ProjectFactory
from tests.prm_training.prm_worker import WorkerHandle

pytestmark = [pytest.mark.slow, pytest.mark.redis, pytest.mark.django_db(transaction=True)]

_IMPORT_LOCK_NAMESPACE = 0x53544C  # datasets.imports: imports into a project take it
XSS = '<img src=x onerror="window.__xss=1">'
BAD = (
    b'{"problem": "What is 2+2?", "steps": ["2+2=4"]}\n'
    b'{"problem": "Empty", "steps": []}\n'
    b'{"problem": "Fine", "steps": ["ok"], "labels": [1]}\n'
    + json.dumps({"problem": XSS, "steps": ["a"], "labels": [7]}).encode()
    + b"\n{broken\n"
)


@pytest.fixture
def lab() -> dict[str, Any]:
    project = ProjectFactory(name="GSM8K round 1")
    lead = MembershipFactory(project=project, role=Role.LEAD, user__username="lena").user
    return {"project": project, "lead": lead}


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    with page_watched(browser=browser, width=1366, height=768, csp_errors=True) as opened:
        yield opened


def _open(page: Page, live_server: Any, lab: dict[str, Any]) -> None:
    page_login(page=page, base_url=live_server.url, username=lab["lead"].username)
    page.goto(f"{live_server.url}/projects/{lab['project'].pk}/")
    page.get_by_role("link", name="Import chains").click()
    page.wait_for_selector("#import[data-state=idle]")


def test_a_lead_uploads_processbench_and_sees_progress_then_counts(
    live_server: Any,
    page: Page,
    lab: dict[str, Any],
    shared_data: Path,
    import_worker: WorkerHandle,  # noqa: F811 - the fixture
) -> None:
    # Given: the lead on the import page, the real ProcessBench MATH file chosen
    _open(page, live_server, lab)
    path = shared_data / "processbench" / "math.json"
    page.locator("#im-file").set_input_files(str(path))
    expect(page.locator("#im-chosen")).to_contain_text("math.json (1.9 MB)")

    # When: it is imported while another import into the project holds the project's
    # import lock, so the worker's job waits in the middle of its run
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_advisory_xact_lock(%s)",
                [(_IMPORT_LOCK_NAMESPACE << 32) | lab["project"].pk],
            )
        page.get_by_role("button", name="Import").click()

        # Then: the page follows the running job with its progress bar
        page.wait_for_selector("#import[data-state=running]", timeout=30_000)
        expect(page.locator("#im-job-status")).to_have_text("importing")
        expect(page.locator("#im-progress-text")).to_contain_text("Checking the file (1.9 MB)")
        expect(page.locator("#im-bar")).to_be_visible()
        job = ImportJob.objects.get()
        assert page.url.endswith(f"/import/?job={job.pk}")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "import-running.png"), full_page=True)

    # Then, once the lock is let go: the counts, as the database has them
    page.wait_for_selector("#import[data-state=done]", timeout=60_000)
    batch = ImportBatch.objects.get(project=lab["project"])
    assert (batch.format, batch.chains_created) == ("processbench", 1000)
    counts = {
        "#im-chains-created": "1,000",
        "#im-chains-duplicate": "0",
        "#im-steps-created": f"{Step.objects.filter(chain__project=lab['project']).count():,}",
        "#im-labels-created": f"{StepRating.objects.count():,}",
        "#im-format-read": "processbench",
    }
    for selector, text in counts.items():
        expect(page.locator(selector)).to_have_text(text)
    assert batch.steps_created > 1000 and batch.labels_created > 0
    expect(page.locator("#im-progress-text")).to_have_text("1,000 records read · 1.9 MB")
    assert page.locator("#im-bar").evaluate("bar => bar.value === bar.max")
    expect(page.locator("#im-message.ok")).to_have_text("math.json was imported: 1,000 chains.")
    page.screenshot(path=str(ARTIFACTS / "import-done.png"), full_page=True)

    # And a reload keeps following the job, which says it is done
    page.reload()
    page.wait_for_selector("#import[data-state=done]")
    expect(page.locator("#im-chains-created")).to_have_text("1,000")


def test_records_read_move_while_a_large_file_imports(
    live_server: Any,
    page: Page,
    lab: dict[str, Any],
    tmp_path: Path,
    import_worker: WorkerHandle,  # noqa: F811 - the fixture
) -> None:
    # Given: 30,000 chains (15 of the import's chunks)
    path = tmp_path / "many.jsonl"
    with path.open("w") as out:
        for index in range(30_000):
            steps = [f"Step {k} of chain {index}: {'x' * 80}" for k in range(6)]
            out.write(json.dumps({"problem": f"Problem {index}", "steps": steps}) + "\n")
    _open(page, live_server, lab)
    page.locator("#im-file").set_input_files(str(path))

    # When: it is imported
    page.get_by_role("button", name="Import").click()

    # Then: the page shows records read part of the way, then all of them
    page.wait_for_function(
        """() => {
            const text = document.getElementById("im-progress-text").textContent;
            const match = /^([\\d,]+) records read · /.exec(text);
            const root = document.getElementById("import");
            return root.dataset.state === "running" && match
                && Number(match[1].replace(/,/g, "")) < 30000;
        }""",
        timeout=60_000,
    )
    page.screenshot(path=str(ARTIFACTS / "import-progress.png"), full_page=True)
    page.wait_for_selector("#import[data-state=done]", timeout=120_000)
    expect(page.locator("#im-chains-created")).to_have_text("30,000")


def test_a_dropped_bad_file_lists_its_bad_lines_and_writes_nothing(
    live_server: Any,
    page: Page,
    lab: dict[str, Any],
    import_worker: WorkerHandle,  # noqa: F811 - the fixture
) -> None:
    # Given: the lead drops a file with three bad lines (one with markup in its text)
    _open(page, live_server, lab)
    dropped = page.evaluate_handle(
        """(text) => {
            const transfer = new DataTransfer();
            transfer.items.add(new File([text], "bad.jsonl", { type: "application/jsonl" }));
            return transfer;
        }""",
        BAD.decode(),
    )
    page.dispatch_event("#im-drop", "drop", {"dataTransfer": dropped})
    expect(page.locator("#im-chosen")).to_contain_text("bad.jsonl")

    # When: it is imported
    page.get_by_role("button", name="Import").click()

    # Then: every bad line, with its number and reason, and nothing written
    page.wait_for_selector("#import[data-state=failed]", timeout=60_000)
    expect(page.locator("#im-detail")).to_have_text(
        "bad.jsonl was not imported: 3 bad lines (read as generic); nothing was written."
    )
    rows = page.locator("#im-errors tbody tr")
    expect(rows).to_have_count(3)
    lines = [row.locator("td").first.inner_text() for row in rows.all()]
    assert lines == ["line 2", "line 4", "line 5"]
    assert all(row.locator("td").nth(1).inner_text() for row in rows.all())
    expect(page.locator("#im-message.error")).to_have_text("Nothing from this file was written.")
    assert (ImportBatch.objects.count(), Chain.objects.count()) == (0, 0)
    assert page.evaluate("() => typeof window.__xss") == "undefined"
    page.screenshot(path=str(ARTIFACTS / "import-bad-lines.png"), full_page=True)


def test_the_import_page_fits_a_phone(
    browser: Browser,
    live_server: Any,
    lab: dict[str, Any],
    shared_data: Path,
    import_worker: WorkerHandle,  # noqa: F811 - the fixture
) -> None:
    with page_watched(browser=browser, width=390, height=844, csp_errors=True) as phone:
        _open(phone, live_server, lab)
        ARTIFACTS.mkdir(exist_ok=True)
        phone.screenshot(path=str(ARTIFACTS / "import-empty-390.png"), full_page=True)
        phone.locator("#im-file").set_input_files(str(shared_data / "processbench" / "gsm8k.json"))
        phone.get_by_role("button", name="Import").click()
        phone.wait_for_selector("#import[data-state=done]", timeout=60_000)
        expect(phone.locator("#im-chains-created")).to_have_text("400")
        phone.screenshot(path=str(ARTIFACTS / "import-done-390.png"), full_page=True)
        phone.locator("#im-file").set_input_files(
            files=[{"name": "bad.jsonl", "mimeType": "application/jsonl", "buffer": BAD}]
        )
        phone.get_by_role("button", name="Import").click()
        phone.wait_for_selector("#import[data-state=failed]", timeout=60_000)
        expect(phone.locator("#im-errors tbody tr")).to_have_count(3)
        phone.screenshot(path=str(ARTIFACTS / "import-bad-lines-390.png"), full_page=True)
        # Nothing scrolls the page sideways
        assert phone.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
