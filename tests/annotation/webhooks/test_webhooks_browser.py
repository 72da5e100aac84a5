"""A lead sets up a webhook in the browser (Debian's chromium driven by Playwright against
pytest-django's live server, a real Celery worker and a real HTTP receiver on loopback),
on the lab's project (``tests.pages_lab``): the page is one click from the project page;
a webhook is added with two events; its test event fails while the receiver is down and
the log says so, backed off; once the receiver is up, the replay button sends it again,
it arrives signed with the secret the page shows, and the log shows it delivered; the
webhook is then paused and deleted.
Screenshots go to tests/artifacts/."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from annotation.models import WebhookDelivery
from tests.annotation.webhooks.receiver import Receiver
from tests.browser import (
    ARTIFACTS,
    AnswerHeld,
    chromium_running,
    page_login,
    page_overflow,
    page_watched,
)
from tests.pages_lab import lab_build
from tests.prm_training.prm_worker import WorkerFactory, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.redis, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium_running() as launched:
        yield launched


def _log_ready(page: Page) -> None:
    page.click("text=Refresh log")
    page.wait_for_selector("#webhooks[data-state=ready]")


def test_a_lead_adds_a_webhook_and_replays_a_failed_delivery(
    live_server: Any, browser: Browser, hook_workers: WorkerFactory
) -> None:
    # Given the lab, a worker, and a receiver that is down (nothing on its port yet)
    lab = lab_build()
    worker = hook_workers.start(name="hooks-page-worker@%h")
    receiver = Receiver()
    receiver.reserve_port()
    base = live_server.url
    with page_watched(browser=browser, width=1366, height=900, csp_errors=True) as page:
        page_login(page=page, base_url=base, username=lab.lead.username)

        # When the lead follows "Webhooks" from the project page
        page.goto(f"{base}/projects/{lab.project.pk}/")
        page.click("nav.project-pages a:text-is('Webhooks')")
        page.wait_for_selector("#webhooks[data-state=ready]")
        expect(page.locator("#webhooks-empty")).to_be_visible()

        # ... and adds a webhook on finished chains and snapshots
        page.fill("#f-webhook-url", receiver.url)
        page.fill("#f-webhook-description", "Nightly training pipeline")
        page.check("#webhook-new input[value='chain.finished']")
        page.check("#webhook-new input[value='snapshot.created']")
        page.click("#btn-webhook-new")
        card = page.locator("section.webhook")
        expect(card).to_have_count(1)
        expect(card).to_contain_text("Events: Chain finished, Snapshot created")
        expect(card.locator(".webhook-badge")).to_have_text("Active")

        # ... and sends a test event while the receiver is down
        card.get_by_role("button", name="Send test event").click()
        expect(page.locator("#webhooks-message")).to_have_text("A test event is on its way.")
        wait_until(
            lambda: WebhookDelivery.objects.filter(attempts=1).exclude(last_error="").exists(),
            timeout=60,
            what="the first attempt",
            diagnose=lambda: worker.output()[-4000:],
        )
        _log_ready(page)

        # Then the log shows it waiting, backed off, with why
        first = page.locator("table.deliveries-table tbody tr")
        expect(first).to_have_count(1)
        expect(first).to_contain_text("webhook.test")
        expect(first).to_contain_text("pending")
        expect(first).to_contain_text("Could not connect")
        expect(first).to_contain_text("Next try")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "webhooks-failed-1366.png"), full_page=True)

        # When the receiver is up and the lead presses Replay
        receiver.start()
        try:
            first.get_by_role("button", name="Replay").click()
            expect(page.locator("#webhooks-message")).to_contain_text("replayed")
            wait_until(
                lambda: (
                    bool(receiver.received)
                    and not WebhookDelivery.objects.filter(status="pending").exists()
                ),
                timeout=60,
                what="the replay to be delivered",
                diagnose=lambda: worker.output()[-4000:],
            )
        finally:
            receiver.stop()
        _log_ready(page)

        # Then it arrived, signed with the secret the page shows, and the log says so
        card.get_by_role("button", name="Show secret").click()
        secret = card.locator(".webhook-secret code").inner_text()
        (got,) = receiver.received
        assert got.verified(secret)["type"] == "webhook.test"
        rows = page.locator("table.deliveries-table tbody tr")
        expect(rows).to_have_count(2)
        expect(rows.nth(0)).to_contain_text("delivered")
        expect(rows.nth(0)).to_contain_text("Replay of")
        expect(rows.nth(1)).to_contain_text("failed")
        expect(rows.nth(1)).to_contain_text("Replayed as delivery")
        assert page_overflow(page) == []
        page.screenshot(path=str(ARTIFACTS / "webhooks-replayed-1366.png"), full_page=True)

        # When the lead pauses the webhook from its Edit form, it shows as paused
        card.locator("summary:text-is('Edit')").click()
        card.locator(".webhook-edit input[type=checkbox]:not([value])").uncheck()
        card.locator(".webhook-edit button[type=submit]").click()
        expect(page.locator("#webhooks-message")).to_have_text("Saved.")
        expect(page.locator("section.webhook .webhook-badge")).to_have_text("Paused")

        # At a phone's width the page still fits
        page.set_viewport_size({"width": 390, "height": 844})
        page.reload()
        page.wait_for_selector("#webhooks[data-state=ready]")
        assert page_overflow(page) == []
        page.screenshot(path=str(ARTIFACTS / "webhooks-390.png"), full_page=True)

        # When the lead deletes it, the list is empty again
        page.once("dialog", lambda dialog: dialog.accept())
        page.locator("section.webhook").get_by_role("button", name="Delete").click()
        expect(page.locator("section.webhook")).to_have_count(0)
        expect(page.locator("#webhooks-empty")).to_be_visible()
    assert not WebhookDelivery.objects.exists()


def test_a_late_answer_does_not_bring_back_a_deleted_webhook(
    live_server: Any, browser: Browser
) -> None:
    # Given: a lead's webhook on the page
    lab = lab_build()
    receiver = Receiver()
    receiver.reserve_port()
    with page_watched(browser=browser, width=1366, height=900, csp_errors=True) as page:
        page_login(page=page, base_url=live_server.url, username=lab.lead.username)
        page.goto(f"{live_server.url}/projects/{lab.project.pk}/webhooks/")
        page.wait_for_selector("#webhooks[data-state=ready]")
        page.fill("#f-webhook-url", receiver.url)
        page.check("#webhook-new input[value='snapshot.created']")
        page.click("#btn-webhook-new")
        expect(page.locator("section.webhook")).to_have_count(1)

        # When: a refresh's answer (the webhook still there) is held on its way back...
        older = AnswerHeld(page, r".*/api/.*/webhooks/$")
        page.click("text=Refresh log")
        older.wait()
        # ...while the lead deletes the webhook, and the list is read again
        page.once("dialog", lambda dialog: dialog.accept())
        page.locator("section.webhook").get_by_role("button", name="Delete").click()
        expect(page.locator("#webhooks-empty")).to_be_visible()
        older.release()

        # Then: the older answer is dropped: the webhook stays gone, the page is ready
        expect(page.locator("section.webhook")).to_have_count(0)
        expect(page.locator("#webhooks-empty")).to_be_visible()
        expect(page.locator("#webhooks")).to_have_attribute("data-state", "ready")
