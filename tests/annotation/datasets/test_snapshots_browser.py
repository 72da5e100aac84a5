"""The snapshots page in a real browser (Debian's chromium driven by Playwright against
pytest-django's live server, under the site's Content-Security-Policy): a lead sees the
datasets and the training runs' snapshots apart, takes a snapshot with options, and
compares two versions; at 1366x768 and on a 390 px phone, with screenshots."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from annotation.datasets.snapshots import snapshot_create
from annotation.models import Role, Snapshot, SnapshotChain
from tests.browser import ARTIFACTS, AnswerHeld, page_login, page_watched
from tests.factories import (
    ChainFactory,
    MembershipFactory,
    ProblemFactory,
    ProjectFactory,
    annotation_with_ratings,
)

XSS_IMG = '<img src=x onerror="window.__xss=1">'


@pytest.fixture
def lab() -> Any:
    """Overlap 2, two annotators: two finished chains (one with a 1-1 tie on step 2), one
    only the first annotator labeled; the lead's v1 of every labeled chain with ties at
    the lowest rating, and a training run's own t1 (numbered apart from the datasets)."""
    project = ProjectFactory(overlap=2, name="Algebra PRM, round 3")
    lead = MembershipFactory(project=project, role=Role.LEAD, user__username="lena").user
    ann = MembershipFactory(project=project, user__username="ann").user
    bob = MembershipFactory(project=project, user__username="bob").user
    problem = ProblemFactory(project=project, text=f"Solve $5x = 2(3x-7)$ for $x$. {XSS_IMG}")
    tied = ChainFactory(
        project=project, problem=problem, step_count=4, finished_count=2, is_finished=True
    )
    annotation_with_ratings(chain=tied, annotator=ann, labels=[1, 1, 1, -1])
    annotation_with_ratings(chain=tied, annotator=bob, labels=[1, -1, 1, -1])
    calm = ChainFactory(project=project, step_count=3, finished_count=2, is_finished=True)
    annotation_with_ratings(chain=calm, annotator=ann, labels=[1, 1, 1])
    annotation_with_ratings(chain=calm, annotator=bob, labels=[1, 1, 1])
    partial = ChainFactory(project=project, step_count=3, finished_count=1)
    annotation_with_ratings(chain=partial, annotator=ann, labels=[1, -1, None])
    snapshot_create(project=project, user=lead, finished_only=False, ties="lowest")
    snapshot_create(project=project, user=None, finished_only=False, ties="lowest", training_run=4)
    return {"project": project, "lead": lead, "tied": tied, "partial": partial}


def _open(page: Page, live_server: Any, lab: Any) -> None:
    page_login(page=page, base_url=live_server.url, username=lab["lead"].username)
    page.goto(f"{live_server.url}/projects/{lab['project'].pk}/snapshots/")
    page.wait_for_selector("#snapshots[data-state=ready]")


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    with page_watched(browser=browser, width=1366, height=768, csp_errors=True) as opened:
        yield opened


def test_lead_takes_a_snapshot_with_options_and_compares_it(
    live_server: Any, page: Page, lab: Any
) -> None:
    # Given: the lead opens the snapshots page from the dashboard
    page_login(page=page, base_url=live_server.url, username=lab["lead"].username)
    page.goto(f"{live_server.url}/projects/{lab['project'].pk}/")
    page.get_by_role("link", name="Snapshots").click()
    page.wait_for_selector("#snapshots[data-state=ready]")

    # Then: the lead's dataset and the training run's snapshot are listed apart
    datasets = page.locator("#sn-datasets tbody tr")
    expect(datasets).to_have_count(1)
    assert datasets.first.get_attribute("data-version") == "1"
    assert "all labeled chains" in datasets.first.inner_text()
    assert "ties at lowest" in datasets.first.inner_text()
    assert "lena" in datasets.first.inner_text()
    training = page.locator("#sn-training tbody tr")
    expect(training).to_have_count(1)
    assert training.first.get_attribute("data-version") == "1"
    assert training.first.get_attribute("data-kind") == "training"
    assert "t1" in training.first.inner_text()
    assert "#4" in training.first.inner_text()
    # ...and the form starts from the defaults: finished chains only, ties dropped
    assert page.locator("#sn-finished-only").is_checked()
    assert page.locator("#sn-ties").input_value() == "drop"

    # When: a snapshot of finished chains, tied steps marked, seed 7
    page.locator("#sn-ties").select_option("mark")
    page.locator("#sn-seed").fill("7")
    page.get_by_role("button", name="Take snapshot").click()

    # Then: it is v2 (the training run's t1 leaves no gap), stored with those options, and
    # listed first among the datasets
    expect(page.locator("#sn-message.ok")).to_contain_text("Snapshot v2 taken: 2 chains")
    expect(page.locator("#sn-message")).to_contain_text("1 unfinished chain left out")
    taken = Snapshot.objects.get(project=lab["project"], kind="dataset", version=2)
    assert taken.meta["options"] == {
        "finished_only": True,
        "include_imported": False,
        "min_support": 1,
        "ties": "mark",
        "heldout_fraction": 0.2,
        "seed": 7,
        "machine_sources": [],
    }
    assert SnapshotChain.objects.get(snapshot=taken, chain=lab["tied"]).tied == [1]
    expect(datasets).to_have_count(2)
    assert datasets.first.get_attribute("data-version") == "2"
    assert "finished only" in datasets.first.inner_text()
    assert "ties marked" in datasets.first.inner_text()
    assert "seed 7" in datasets.first.inner_text()
    expect(page.locator("#sn-message")).not_to_contain_text("identical")

    # When: the same snapshot is taken again, nothing changed
    page.get_by_role("button", name="Take snapshot").click()

    # Then: v3 says it repeats v2
    expect(page.locator("#sn-message.ok")).to_contain_text("Snapshot v3 taken")
    expect(page.locator("#sn-message")).to_contain_text("It is identical to v2")

    # When: the lead compares v1 with v2
    page.locator("#sn-diff-a").select_option("dataset:1")
    page.locator("#sn-diff-b").select_option("dataset:2")
    page.get_by_role("button", name="Compare").click()

    # Then: the unfinished chain is removed, and whatever else changed is listed
    page.wait_for_selector("#snapshots[data-diff=ready]")
    expect(page.locator("#sn-diff-counts [data-count=removed]")).to_have_text("1")
    removed = page.locator(f"#sn-diff-table tr[data-chain='{lab['partial'].pk}']")
    expect(removed).to_have_attribute("data-change", "removed")
    assert page.locator("#sn-diff-table img").count() == 0  # problem text shown as text
    assert page.evaluate("() => typeof window.__xss") == "undefined"
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "snapshots.png"), full_page=True)

    # When: only the removed chains are asked for
    page.locator("#sn-diff-change").select_option("removed")
    page.get_by_role("button", name="Compare").click()
    expect(page.locator("#sn-diff-table tbody tr")).to_have_count(1)


def test_imported_labels_enter_a_snapshot_only_when_the_lead_ticks_them(
    live_server: Any, page: Page, lab: Any
) -> None:
    # Given: beside the people's chains, one that came labeled with its import
    annotation_with_ratings(
        chain=ChainFactory(project=lab["project"], step_count=2), labels=[1, -1]
    )
    _open(page, live_server, lab)
    assert not page.locator("#sn-include-imported").is_checked()

    # When: a snapshot with the defaults
    page.get_by_role("button", name="Take snapshot").click()

    # Then: people's labels only; the imported chain is said to be left out
    expect(page.locator("#sn-message.ok")).to_contain_text("Snapshot v2 taken: 2 chains")
    expect(page.locator("#sn-message")).to_contain_text(
        "1 chain labeled by an import only left out"
    )
    row = page.locator("#sn-datasets tbody tr").first
    expect(row).to_contain_text("people's labels only")
    expect(row.locator(".sn-sources")).to_have_text("2 / 0")

    # When: the lead ticks the imported labels
    page.locator("#sn-include-imported").check()
    page.get_by_role("button", name="Take snapshot").click()

    # Then: the imported chain is in, counted apart
    expect(page.locator("#sn-message.ok")).to_contain_text(
        "Snapshot v3 taken: 3 chains, 8 labeled steps (1 with imported labels)"
    )
    row = page.locator("#sn-datasets tbody tr").first
    expect(row).to_contain_text("people's and imported labels")
    expect(row.locator(".sn-sources")).to_have_text("2 / 1")
    assert Snapshot.objects.get(project=lab["project"], kind="dataset", version=3).meta[
        "sources"
    ] == [
        "human",
        "import",
    ]
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "snapshots-imported.png"), full_page=True)


def test_every_snapshot_downloads_from_its_row_whole_or_by_split(
    browser: Browser, live_server: Any, lab: Any
) -> None:
    # Given: a newer dataset v2 beside the lead's v1 (the training run's is t1)
    snapshot_create(project=lab["project"], user=lab["lead"], heldout_fraction=0.5, seed=1)
    v1 = Snapshot.objects.get(project=lab["project"], kind="dataset", version=1)
    with page_watched(
        browser=browser, width=1366, height=768, accept_downloads=True, csp_errors=True
    ) as page:
        _open(page, live_server, lab)
        row = page.locator("#sn-datasets tr[data-version='1'][data-kind=dataset]")
        expect(row.locator(".sn-download-link")).to_have_count(3)

        # When: the lead picks CSV and downloads v1's train split, then all of it
        page.locator("#sn-format").select_option("csv")
        expect(page.locator("#sn-format-holds")).to_contain_text("a row a step")
        files = {}
        for split in ("train", "all"):
            with page.expect_download() as download:
                row.locator(f".sn-download-link[data-split={split}]").click()
            files[split] = download.value
        # ...and the training run's own t1 as TRL, held-out split
        page.locator("#sn-format").select_option("trl")
        with page.expect_download() as download:
            page.locator("#sn-training tr[data-version='1'] [data-split=heldout]").click()
        trl = download.value
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "snapshots-downloads.png"), full_page=True)
        # (a download's file lives as long as its page)
        held = {split: _csv_chains(file.path()) for split, file in files.items()}

    # Then: each file is named by project, version and split (the training run's t1
    # apart from the dataset v1), and holds that split of v1
    slug = "algebra-prm-round-3"
    assert files["train"].suggested_filename == f"{slug}-v1-train.csv"
    assert files["all"].suggested_filename == f"{slug}-v1-all.csv"
    assert trl.suggested_filename == f"{slug}-t1-heldout.trl.jsonl"
    rows = SnapshotChain.objects.filter(snapshot=v1)
    assert held["train"] == set(rows.filter(split="train").values_list("chain_id", flat=True))
    assert held["all"] == set(rows.values_list("chain_id", flat=True))


def test_a_download_that_cannot_start_shows_its_error_and_saves_nothing(
    browser: Browser, live_server: Any, lab: Any
) -> None:
    # Given: v1 holds no Monte-Carlo labels, which math_shepherd's records are made of
    with page_watched(
        browser=browser, width=1366, height=768, accept_downloads=True, csp_errors=True
    ) as page:
        _open(page, live_server, lab)
        row = page.locator("#sn-datasets tr[data-version='1'][data-kind=dataset]")
        saved: list[Any] = []
        page.on("download", lambda download: saved.append(download))

        # When: the lead downloads it as math_shepherd
        page.locator("#sn-format").select_option("math_shepherd")
        row.locator(".sn-download-link[data-split=all]").click()

        # Then: the page says why, and no file was saved
        expect(page.locator("#sn-message.error")).to_contain_text("No download:")
        expect(page.locator("#sn-message.error")).to_contain_text("monte_carlo")
        page.wait_for_timeout(500)
        assert saved == []

        # And: a format that can start still downloads at the first click
        page.locator("#sn-format").select_option("csv")
        with page.expect_download() as download:
            row.locator(".sn-download-link[data-split=all]").click()
        assert download.value.suggested_filename.endswith("-v1-all.csv")


def _csv_chains(path: Any) -> set[int]:
    with open(path, encoding="utf-8", newline="") as stream:
        return {int(row["chain_id"]) for row in csv.DictReader(stream)}


def test_a_snapshot_the_options_leave_empty_says_why(
    live_server: Any, page: Page, lab: Any
) -> None:
    _open(page, live_server, lab)

    page.locator("#sn-min-support").fill("3")
    page.get_by_role("button", name="Take snapshot").click()

    expect(page.locator("#sn-message.error")).to_contain_text("lower min_support")
    assert not Snapshot.objects.filter(project=lab["project"], kind="dataset", version=2).exists()


def test_a_late_more_answer_does_not_mix_into_the_list_a_new_snapshot_reloaded(
    live_server: Any, page: Page, lab: Any
) -> None:
    # Given: 51 datasets (v1..v51), one more than a page; the lead's list shows v51..v2
    for _ in range(50):
        snapshot_create(project=lab["project"], user=lab["lead"], finished_only=False)
    _open(page, live_server, lab)
    datasets = page.locator("#sn-datasets tbody tr")
    expect(datasets).to_have_count(50)

    # When: the answer to "More" (v1) is held on its way back...
    older = AnswerHeld(page, r".*/api/.*/snapshots/\?.*", lambda url: "page=2" in url)
    page.locator("#sn-datasets-more").click()
    older.wait()
    # ...while the lead takes v52, which reloads the list (v52..v3, v2 on the next page)
    page.get_by_role("button", name="Take snapshot").click()
    expect(page.locator("#sn-message.ok")).to_contain_text("Snapshot v52 taken")
    expect(datasets.first).to_have_attribute("data-version", "52")
    older.release()

    # Then: the stale page is dropped: the list is the new first page, v2 one "More" away
    shown = [int(row.get_attribute("data-version") or 0) for row in datasets.all()]
    assert shown == list(range(52, 2, -1))
    expect(page.locator("#sn-datasets-more")).to_be_visible()


def test_the_snapshots_page_fits_a_phone(browser: Browser, live_server: Any, lab: Any) -> None:
    with page_watched(browser=browser, width=390, height=844, csp_errors=True) as phone:
        _open(phone, live_server, lab)
        phone.get_by_role("button", name="Take snapshot").click()
        expect(phone.locator("#sn-message.ok")).to_contain_text("Snapshot v2 taken")
        phone.locator("#sn-diff-a").select_option("dataset:1")
        phone.locator("#sn-diff-b").select_option("dataset:2")
        phone.get_by_role("button", name="Compare").click()
        phone.wait_for_selector("#snapshots[data-diff=ready]")
        expect(phone.locator("#sn-diff-table tbody tr").first).to_be_visible()
        ARTIFACTS.mkdir(exist_ok=True)
        phone.screenshot(path=str(ARTIFACTS / "snapshots-390.png"), full_page=True)
        # Nothing scrolls the page sideways: wide tables scroll inside their cards
        overflow = phone.evaluate(
            """() => document.documentElement.scrollWidth <= window.innerWidth"""
        )
        assert overflow is True
