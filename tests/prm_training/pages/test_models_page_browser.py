"""The ML page in a real browser (Debian's chromium, Playwright, under the site's
Content-Security-Policy): each model version says plainly whether it beats the rules
that read no step, a scoring run says when the cold-start rule picked at random instead,
and a run's backbone is chosen from the listed ones."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.utils import timezone
from playwright.sync_api import Browser, Page, expect

from annotation.models import Role, Snapshot
from prm_training.models import ModelVersion, RunStatus, ScoringRun, TrainingRun
from tests.browser import ARTIFACTS, chromium_running, page_login, page_overflow, page_watched
from tests.factories import MembershipFactory, ProjectFactory

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium_running() as launched:
        yield launched


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    with page_watched(browser=browser, width=1366, height=768) as opened:
        yield opened


def _version(project: Any, number: int, metrics: dict[str, float]) -> ModelVersion:
    snapshot = Snapshot.objects.create(project=project, version=number, content_hash=f"h{number}")
    return ModelVersion.objects.create(
        project=project,
        training_run=TrainingRun.objects.create(project=project, status=RunStatus.SUCCEEDED),
        snapshot=snapshot,
        version=number,
        checkpoint_dir="/nonexistent",
        metrics=metrics,
    )


def test_each_version_says_whether_it_beats_the_rules(live_server: Any, page: Page) -> None:
    # Given: v1 below the outcome rule, v2 above both rules and with chains cut to fit its
    # windows, v3 trained without them
    project = ProjectFactory()
    ml = MembershipFactory(project=project, role=Role.ML).user
    rules = {
        "baseline_outcome_rule_processbench_f1": 0.262,
        "baseline_outcome_rule_step_auroc": 0.70,
        "baseline_position_prior_processbench_f1": 0.118,
        "baseline_position_prior_step_auroc": 0.55,
    }
    first = _version(project, 1, {"processbench_f1": 0.231, "step_auroc": 0.63, **rules})
    _version(
        project, 2, {"processbench_f1": 0.301, "step_auroc": 0.71, "truncated_chains": 67, **rules}
    )
    _version(project, 3, {"processbench_f1": 0.25})
    # ...and v1 scored the queue by entropy, which the cold-start rule turned to random
    ScoringRun.objects.create(
        project=project,
        model_version=first,
        status=RunStatus.SUCCEEDED,
        strategy="entropy",
        applied_strategy="random",
        chains_total=40,
        chains_scored=40,
        truncation={"truncated_chains": 3.0, "truncated_problems": 1.0},
        strategy_note="Random picks instead of Step uncertainty (entropy): v1 does not beat "
        "the outcome rule (F1 0.231 vs 0.262, AUROC 0.630 vs 0.700). Step uncertainty "
        "(entropy) takes over once a version beats the rules.",
    )
    page_login(page=page, base_url=live_server.url, username=ml.username)

    # When: ML staff open the ML page
    page.goto(f"{live_server.url}/projects/{project.pk}/models/")
    page.wait_for_selector("#versions-table tbody tr:nth-child(3)")

    # Then: each version's row says it, against the best rule, with that rule's F1, and
    # warns when text was cut
    cells = {
        row.query_selector("td").inner_text(): row.query_selector("td:nth-child(6)").inner_text()
        for row in page.query_selector_all("#versions-table tbody tr")
    }
    assert cells == {
        "v1": "does not beat the strongest baseline: F1 0.231 vs 0.262 the outcome rule; "
        "AUROC 0.630 vs 0.700 the outcome rule",
        "v2": "beats the strongest baseline (F1 0.301 vs 0.262 the outcome rule; AUROC 0.710 "
        "vs 0.700 the outcome rule)\n67 chains cut to fit max_length",
        "v3": "—",
    }
    # And the scoring run says what it applied and why
    strategy = page.locator("#scoring-table tbody tr td:nth-child(3)").inner_text()
    assert strategy.startswith("entropy → random\nRandom picks instead of Step uncertainty")
    # ...and what its windows still cut from the chains it scored
    scored = page.locator("#scoring-table tbody tr td:nth-child(5)").inner_text()
    assert scored.splitlines() == ["40/40 chains", "3 cut to fit max_length"], scored
    # And the backbone is chosen from the listed ones (the backbone root holds "bert")
    options = page.locator("#train-form select[name=backbone] option").all_inner_texts()
    assert options == ["all-MiniLM-L6-v2 (bundled)", "bert"]
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "models-versions-against-rules.png"), full_page=True)


def test_one_version_shows_its_point_on_the_plot(live_server: Any, page: Page) -> None:
    # Given: a project with its first version only (nothing to draw a line between)
    project = ProjectFactory()
    ml = MembershipFactory(project=project, role=Role.ML).user
    _version(project, 1, {"processbench_f1": 0.42, "step_auroc": 0.78})
    page_login(page=page, base_url=live_server.url, username=ml.username)

    # When
    page.goto(f"{live_server.url}/projects/{project.pk}/models/")
    page.wait_for_selector("#versions-plot circle")

    # Then: F1 and AUROC each show a visible marker, AUROC's above F1's
    dots = {
        dot.get_attribute("class"): dot.bounding_box()
        for dot in page.query_selector_all("#versions-plot circle")
    }
    assert set(dots) == {"line-f1 point", "line-auroc point"}
    assert all(box and box["width"] > 4 for box in dots.values())
    assert dots["line-auroc point"]["y"] < dots["line-f1 point"]["y"]  # type: ignore[index]
    page.locator("#versions-plot").screenshot(path=str(ARTIFACTS / "models-one-version-plot.png"))
    # And its date is written as every page writes dates (the templates' "Y-m-d H:i")
    created = page.locator("#versions-table tbody tr td:nth-child(7)").inner_text()
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}", created), created


def test_a_running_runs_loss_curve_grows_live_and_an_earlier_run_can_be_chosen(
    live_server: Any, page: Page
) -> None:
    # Given: a finished run with its loss history, and a run that is training now
    project = ProjectFactory()
    ml = MembershipFactory(project=project, role=Role.ML).user
    done = TrainingRun.objects.create(
        project=project,
        status=RunStatus.SUCCEEDED,
        progress=1.0,
        last_loss=0.31,
        loss_history=[0.9, 0.6, 0.45, 0.31],
    )
    # (its heartbeat fresh: the page's reads reap a run whose worker fell silent)
    running = TrainingRun.objects.create(
        project=project,
        status=RunStatus.RUNNING,
        heartbeat_at=timezone.now(),
        progress=0.2,
        last_loss=0.8,
        loss_history=[0.8],
    )
    page_login(page=page, base_url=live_server.url, username=ml.username)

    # When: ML staff open the ML page
    page.goto(f"{live_server.url}/projects/{project.pk}/models/")

    # Then: the running run's curve is shown, one point so far
    expect(page.locator("#loss-title")).to_have_text(f"Training loss · run #{running.pk} (running)")
    points = "window.Chart.getChart('loss-chart').data.datasets[0].data.length"
    assert page.evaluate(points) == 1

    # When: the worker reports more losses, the page's next poll (every 2 s) draws them
    TrainingRun.objects.filter(pk=running.pk).update(
        progress=0.6, last_loss=0.5, loss_history=[0.8, 0.7, 0.5]
    )
    # (a locator assertion, not wait_for_function: the CSP forbids evaluating strings)
    expect(page.locator("#runs-table")).to_contain_text("60%", timeout=10_000)
    assert page.evaluate(points) == 3
    page.locator("#loss-curve").screenshot(path=str(ARTIFACTS / "models-loss-curve.png"))

    # When: the finished run's loss is chosen in the table; then its whole curve is shown
    page.get_by_title(f"Show run #{done.pk}'s loss curve").click()
    expect(page.locator("#loss-title")).to_have_text(f"Training loss · run #{done.pk} (succeeded)")
    assert page.evaluate(points) == 4


def test_activating_a_version_asks_first(live_server: Any, page: Page) -> None:
    # Given: v1 active and v2 not
    project = ProjectFactory()
    ml = MembershipFactory(project=project, role=Role.ML).user
    first = _version(project, 1, {"processbench_f1": 0.30})
    ModelVersion.objects.filter(pk=first.pk).update(is_active=True)
    second = _version(project, 2, {"processbench_f1": 0.35})
    page_login(page=page, base_url=live_server.url, username=ml.username)
    page.goto(f"{live_server.url}/projects/{project.pk}/models/")
    button = page.locator("#versions-table").get_by_role("button", name="Activate")
    button.wait_for()
    asked: list[str] = []

    # When: the question is dismissed, nothing changes
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    button.click()
    assert asked and asked[0].startswith("Make v2 the active version?")
    second.refresh_from_db()
    assert not second.is_active

    # When: it is accepted, v2 becomes active
    page.once("dialog", lambda dialog: dialog.accept())
    button.click()
    expect(page.locator("#versions-table tbody tr").first).to_contain_text("active")
    second.refresh_from_db()
    assert second.is_active


def test_the_page_says_which_strategy_auto_applies_and_shows_its_evidence(
    live_server: Any, page: Page
) -> None:
    # Given: a project whose stored simulation found no strategy beating random
    from prm_training.models import ProjectTrainingSettings
    from prm_training.services.strategy import strategy_from_evidence

    project = ProjectFactory()
    ml = MembershipFactory(project=project, role=Role.ML).user
    gap = {"mean": -0.022, "low": -0.038, "high": -0.006, "text": "-0.022 ± 0.016"}
    evidence = {
        "chains": 1400,
        "snapshot": 3,
        "seeds": 50,
        "rounds": 8,
        "batch": 40,
        "lines": [
            {
                "strategy": "entropy",
                "labeled_steps": 1444,
                "processbench_f1": gap,
                "step_auroc": gap,
                "first_error_accuracy": gap,
                "below": {"processbench_f1": [], "step_auroc": [], "first_error_accuracy": []},
                "saves_steps": False,
            }
        ],
    }
    evidence["chosen"], evidence["why"] = strategy_from_evidence(evidence)
    ProjectTrainingSettings.objects.create(project=project, strategy_evidence=evidence)
    page_login(page=page, base_url=live_server.url, username=ml.username)

    # When
    page.goto(f"{live_server.url}/projects/{project.pk}/models/")

    # Then: 'auto' applies random, says why, and the evidence is a table
    applied = page.locator("#applied-strategy").inner_text()
    assert "Chosen from evidence" in applied
    assert "now random (no strategy saves labeled steps over random" in applied
    rows = page.locator("#evidence-table tbody tr td").all_inner_texts()
    assert rows == ["entropy", "-0.022 ± 0.016", "-0.022 ± 0.016", "-0.022 ± 0.016", "1444"]
    assert page.locator("#score-form select[name=strategy] option").first.inner_text() == (
        "The loop's: random"
    )
    page.locator("#evidence-table").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "models-strategy-evidence.png"), full_page=True)


@pytest.mark.parametrize(("width", "height"), [(1366, 768), (390, 844)])
def test_a_zero_shot_version_is_made_from_a_listed_open_prm_and_says_what_it_is(
    live_server: Any, browser: Browser, tmp_path: Any, monkeypatch: Any, width: int, height: int
) -> None:
    # Given: an open PRM in the model directory (a model that scores tokens) beside a
    # plain backbone, and a zero-shot version made before the project had a label
    import json

    for name, architecture in (
        ("qwen-prm", "LlamaForTokenClassification"),
        ("plain", "LlamaModel"),
    ):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps({"architectures": [architecture]}))
    monkeypatch.setenv("STEPLAB_BACKBONE_DIR", str(tmp_path))
    project = ProjectFactory()
    ml = MembershipFactory(project=project, role=Role.ML).user
    ModelVersion.objects.create(
        project=project,
        training_run=TrainingRun.objects.create(
            project=project, status=RunStatus.SUCCEEDED, settings={"zero_shot": True}
        ),
        version=1,
        checkpoint_dir="/nonexistent",
        metrics={"zero_shot": 1.0, "threshold": 0.5},
        is_active=True,
    )
    with page_watched(browser=browser, width=width, height=height) as page:
        page_login(page=page, base_url=live_server.url, username=ml.username)

        # When: ML staff open the ML page
        page.goto(f"{live_server.url}/projects/{project.pk}/models/")
        page.wait_for_selector("#versions-table .zero-shot-tag")

        # Then: only the open PRM is offered, and the version says it is zero-shot, with
        # no snapshot and nothing to be compared on
        form = page.locator("#zero-shot-form")
        assert form.locator("select[name=backbone] option").all_inner_texts() == ["qwen-prm"]
        cells = page.locator("#versions-table tbody tr td").all_inner_texts()
        assert cells[1] == "—" and "no labeled held-out chains" in cells[5]
        # ...and says what 'auto' does with it: random, its scores steering only when set
        applied = page.locator("#applied-strategy").inner_text()
        assert "'auto' stays random with it" in applied
        assert "steer from round 0 only where a strategy is set by hand" in applied
        assert "applies their step uncertainty" not in applied
        page.locator("#zero-shot").scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / f"models-zero-shot-{width}.png"), full_page=True)

        # When: they start one, with the PRM's step token
        form.locator("input[name=step_separator]").fill("<extra_0>")
        form.locator("input[name=chat_template]").check()
        form.get_by_role("button", name="Create zero-shot version").click()

        # Then: a run is queued with the zero-shot settings
        expect(page.locator("#zero-shot-message")).to_contain_text("queued")
        run = TrainingRun.objects.exclude(settings={"zero_shot": True}).get(project=project)
        assert run.settings == {
            "zero_shot": True,
            "step_prior": True,
            "backbone": "qwen-prm",
            "step_separator": "<extra_0>",
            "chat_template": True,
        }


def _phase(name: str, done: int, total: int, unit: str, detail: str, **extra: Any) -> dict:
    """A phase as the worker's progress report stores it (services.progress.RunProgress)."""
    from datetime import timedelta

    return {
        "name": name,
        "done": done,
        "total": total,
        "unit": unit,
        "detail": detail,
        "started_at": timezone.now().isoformat(),
        "rate": extra.get("rate"),
        "eta_at": (timezone.now() + timedelta(seconds=extra["eta"])).isoformat()
        if "eta" in extra
        else None,
        "past": extra.get("past", []),
    }


@pytest.mark.parametrize(("width", "height"), [(1366, 768), (390, 844)])
def test_runs_show_their_phase_and_are_cancelled_or_retried_from_the_page(
    live_server: Any, browser: Browser, width: int, height: int
) -> None:
    # Given: a training run in its training phase, one whose worker was lost, and a
    # scoring run scoring; the heartbeats are fresh, so nothing is reaped
    project = ProjectFactory()
    ml = MembershipFactory(project=project, role=Role.ML).user
    now = timezone.now()
    past = [{"name": "loading", "seconds": 3.2}, {"name": "encoding", "seconds": 481.0}]
    training = TrainingRun.objects.create(
        project=project,
        status=RunStatus.RUNNING,
        heartbeat_at=now,
        worker="gpu@node-1",
        attempts=1,
        settings={"head_epochs": 40},
        phase=_phase("training", 120, 1000, "batches", "epoch 5/40", rate=12.0, eta=70, past=past),
    )
    lost = TrainingRun.objects.create(
        project=project,
        status=RunStatus.FAILED,
        settings={"head_epochs": 40},
        error="Worker lost: gpu@node-1 stopped while running (attempt 1; its last sign of "
        "life 44 s before). Retry it to start a new run.",
        phase=_phase("encoding", 2400, 5600, "steps", "80 chains", past=past[:1]),
    )
    version = _version(project, 1, {"processbench_f1": 0.3})
    scoring = ScoringRun.objects.create(
        project=project,
        model_version=version,
        status=RunStatus.RUNNING,
        strategy="entropy",
        heartbeat_at=now,
        attempts=1,
        chains_total=1200,
        chains_scored=400,
        phase=_phase("scoring", 1300, 3600, "steps", "400/1,200 chains", rate=41.0, eta=56),
    )
    # ...and a simulation run counting its trainings
    from prm_training.models import SimulationRun

    SimulationRun.objects.create(
        project=project,
        status=RunStatus.RUNNING,
        size="quick",
        seeds=3,
        rounds=2,
        heartbeat_at=now,
        attempts=1,
        phase=_phase(
            "simulating", 7, 33, "trainings", "5 strategies x 3 seeds x 2 rounds", rate=0.5, eta=52
        ),
    )
    with page_watched(browser=browser, width=width, height=height) as page:
        page_login(page=page, base_url=live_server.url, username=ml.username)

        # When: ML staff open the ML page
        page.goto(f"{live_server.url}/projects/{project.pk}/models/")
        runs = page.locator("#runs-table")
        expect(runs).to_contain_text("Training · epoch 5/40 · 120/1,000 batches")

        # Then: each run says its phase, its pace and what it did before
        assert "12 batches/s · about 1 min" in runs.inner_text()
        assert "Loading 3 s · Encoding steps 8 min 1 s" in runs.inner_text()
        assert "failed: worker lost" in runs.inner_text()
        assert "stopped while: Encoding steps · 80 chains · 2,400/5,600 steps" in runs.inner_text()
        table = page.locator("#scoring-table")
        expect(table).to_contain_text("Scoring · 400/1,200 chains · 1,300/3,600 steps")
        assert re.search(r"41 steps/s · about \d+ s left", table.inner_text())
        simulations = page.locator("#simulation-table")
        expect(simulations).to_contain_text(
            "Simulating · 5 strategies x 3 seeds x 2 rounds · 7/33 trainings"
        )
        assert re.search(r"0\.5 trainings/s · about \d+ s left", simulations.inner_text())
        expect(simulations.get_by_role("button", name="Cancel")).to_be_visible()
        assert page_overflow(page) == []
        page.screenshot(path=str(ARTIFACTS / f"models-run-phases-{width}.png"), full_page=True)

        # When: they cancel the training run (and accept the question)
        page.once("dialog", lambda dialog: dialog.accept())
        runs.locator("tr", has_text=f"#{training.pk} ").get_by_role("button", name="Cancel").click()

        # Then: it is asked to stop, and says so
        expect(runs.locator("tr", has_text=f"#{training.pk} ")).to_contain_text("cancelling…")
        training.refresh_from_db()
        assert training.cancel_requested and training.status == RunStatus.RUNNING

        # When: they cancel the scoring run
        page.once("dialog", lambda dialog: dialog.accept())
        table.get_by_role("button", name="Cancel").click()
        expect(table).to_contain_text("cancelling…")
        scoring.refresh_from_db()
        assert scoring.cancel_requested

        # When: they retry the run whose worker was lost
        runs.locator("tr", has_text=f"#{lost.pk} ").get_by_role("button", name="Retry").click()

        # Then: a new run with its settings is queued, says what it retries, and the
        # message follows it
        expect(page.locator("#train-message")).to_contain_text("queued.")
        retry = TrainingRun.objects.get(retry_of=lost)
        assert retry.settings == lost.settings and retry.status == RunStatus.QUEUED
        expect(page.locator("#train-message")).to_have_text(f"Training run #{retry.pk} queued.")
        expect(runs.locator("tr", has_text=f"#{retry.pk} ")).to_contain_text(f"retry of #{lost.pk}")
        expect(runs.locator("tr", has_text=f"#{retry.pk} ")).to_contain_text("waiting for a worker")
        TrainingRun.objects.filter(pk=retry.pk).update(
            status=RunStatus.RUNNING,
            heartbeat_at=timezone.now(),
            phase=_phase("encoding", 10, 500, "steps", "80 chains"),
        )
        expect(page.locator("#train-message")).to_have_text(
            f"Training run #{retry.pk}: Encoding steps · 80 chains · 10/500 steps."
        )
        page.screenshot(
            path=str(ARTIFACTS / f"models-run-cancel-retry-{width}.png"), full_page=True
        )
        # (the page stops polling before the database is flushed)
        page.goto("about:blank")


def test_a_scoring_start_message_follows_its_run_to_the_end(live_server: Any, page: Page) -> None:
    # Given: an active version and ML staff on the ML page
    project = ProjectFactory()
    ml = MembershipFactory(project=project, role=Role.ML).user
    version = _version(project, 1, {"processbench_f1": 0.3})
    ModelVersion.objects.filter(pk=version.pk).update(is_active=True)
    page_login(page=page, base_url=live_server.url, username=ml.username)
    page.goto(f"{live_server.url}/projects/{project.pk}/models/")

    # When: they start a scoring run (no worker takes it here)
    page.get_by_role("button", name="Score unlabeled chains with the active version").click()
    message = page.locator("#score-message")
    expect(message).to_contain_text("queued.")
    run = ScoringRun.objects.get(project=project)
    expect(message).to_have_text(f"Scoring run #{run.pk} queued.")

    # When: a worker runs it to the end
    ScoringRun.objects.filter(pk=run.pk).update(
        status=RunStatus.SUCCEEDED, finished_at=timezone.now(), chains_total=4, chains_scored=4
    )

    # Then: the message says so, no longer "queued"
    expect(message).to_have_text(f"Scoring run #{run.pk} succeeded.")
    page.locator("#score-form").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "models-scoring-message-follows.png"), full_page=True)
    page.goto("about:blank")


@pytest.mark.redis
def test_a_simulation_started_from_the_page_runs_and_its_evidence_replaces_the_command(
    live_server: Any,
    page: Page,
    celery_workers: Any,
    arithmetic_project: Any,
    make_member: Any,
    tiny_bert_dir: Any,
    settings: Any,
) -> None:
    # Given: the project's labels in a snapshot, automatic runs on the tiny BERT, a worker,
    # and a node that allows at most 4 seeds
    from annotation.datasets.snapshots import snapshot_create
    from prm_training.models import ProjectTrainingSettings, SimulationRun
    from tests.prm_training.ml_tiny import tiny_settings

    settings.STEPLAB_SIMULATION_LIMITS = {
        "seeds": (4, "STEPLAB_SIMULATION_MAX_SEEDS"),
        "rounds": (8, "STEPLAB_SIMULATION_MAX_ROUNDS"),
    }
    project = arithmetic_project
    snapshot_create(project=project)
    ProjectTrainingSettings.objects.create(
        project=project, default_config=tiny_settings(tiny_bert_dir)
    )
    celery_workers.start()
    ml = make_member(project, "ml")
    page_login(page=page, base_url=live_server.url, username=ml.username)
    page.goto(f"{live_server.url}/projects/{project.pk}/models/")

    # Then: 'auto' points at the button, not at a command
    applied = page.locator("#applied-strategy").inner_text()
    assert 'run one with "Simulate strategies" on the ML page' in applied
    assert "manage.py" not in page.content()
    form = page.locator("#simulate-form")

    # When: ML staff ask more seeds than the node allows
    form.locator("input[name=seeds]").fill("5")
    form.get_by_role("button", name="Simulate strategies").click()

    # Then: it is refused, naming the limit, and nothing is queued
    message = page.locator("#simulate-message")
    expect(message).to_contain_text("at most 4: this node's limit (STEPLAB_SIMULATION_MAX_SEEDS")
    assert not SimulationRun.objects.exists()

    # When: they start a quick run of 2 seeds and 1 round
    form.locator("input[name=seeds]").fill("2")
    form.locator("input[name=rounds]").fill("1")
    form.get_by_role("button", name="Simulate strategies").click()

    # Then: the run shows its phase while it simulates, with a Cancel, ...
    table = page.locator("#simulation-table")
    expect(table).to_contain_text("Simulating", timeout=120_000)
    expect(table.get_by_role("button", name="Cancel")).to_be_visible()
    page.locator("#simulation").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "models-simulation-running.png"), full_page=True)

    # ...and when it ends, the message, the evidence table and 'auto''s reason follow it
    run = SimulationRun.objects.get(project=project)
    expect(message).to_have_text(f"Simulation run #{run.pk} succeeded.", timeout=180_000)
    evidence = page.locator("#evidence-table tbody tr")
    expect(evidence).to_have_count(4)
    run.refresh_from_db()
    expect(page.locator("#applied-why")).to_have_text(run.evidence["why"])
    assert page.locator("#evidence-table td").first.inner_text() in {
        "entropy",
        "first_error_entropy",
        "disagreement",
        "convincing_wrong",
    }
    assert page_overflow(page) == []
    page.locator("#evidence").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "models-simulation-evidence.png"), full_page=True)
    page.goto("about:blank")
