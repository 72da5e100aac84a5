#!/usr/bin/env python
"""Keys and seconds per chain in the annotator's workspace: how many key presses label an
all-correct chain and a chain whose step 3 is wrong, in each labeling mode, and the wall
seconds a chain takes on that path, in the real page, in Debian's chromium, against a
live Django server on PostgreSQL.

    .venv/bin/python bench/bench_workspace_keys.py [--chains 20] [--steps 8]

The shortest key paths the workspace offers (its help dialog lists the keys):

- all-correct chain: ``a`` (every step still open +1), Enter (submit);
- step 3 wrong, all_steps mode: ``1`` ``1`` ``3`` (steps 1-2 +1, step 3 -1), ``a`` (the
  rest +1), Enter;
- step 3 wrong, first_error mode: ``1`` ``1`` ``3`` (grading stops at the first -1), Enter.

A chain's seconds run from its first key press to the next chain on screen (the page's
``data-assignment`` changes), the keys pressed by Playwright as fast as the page takes
them: the floor the page and server put under a person's time, not a person's reading
time. Chains alternate all-correct and wrong at step 3. Every submit is checked in the
database (the ratings the keys meant); the script prints a table and writes
bench/out/workspace_keys.json. A measurement, not a test: it fails only if a submit is
missing or holds other ratings than the keys meant.

It runs as a pytest session over this file, so pytest-django makes and drops the test
database (``test_<name>`` of $DATABASE_URL, by default test_steplab_keys_bench) and
serves the live server and static files exactly as the browser tests do.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

# The bench folder is on sys.path both as a script and as pytest's rootdir-relative import.
from bench_workspace import bench_session, bench_settings

REPO_ROOT = Path(__file__).resolve().parents[1]
OUT = REPO_ROOT / "bench" / "out" / "workspace_keys.json"
WRONG_STEP = 2  # 0-based: step 3
CHAINS = 20  # default --chains

# (mode, kind) -> the keys, in order.
KEY_PATHS = {
    ("all_steps", "all correct"): ["a", "Enter"],
    ("all_steps", "step 3 wrong"): ["1", "1", "3", "a", "Enter"],
    ("first_error", "all correct"): ["a", "Enter"],
    ("first_error", "step 3 wrong"): ["1", "1", "3", "Enter"],
}


def _expected(mode: str, kind: str, steps: int) -> list[int]:
    """The ratings the keys mean, step by step (first_error mode rates none after the -1)."""
    if kind == "all correct":
        return [1] * steps
    ratings = [1] * WRONG_STEP + [-1]
    return ratings if mode == "first_error" else ratings + [1] * (steps - WRONG_STEP - 1)


def _project(mode: str, chains: int, steps: int) -> tuple[Any, Any]:
    """A project in ``mode`` with ``chains`` + 1 chains of ``steps`` steps (one more than
    labeled, so every submit has a next chain to show), and its annotator."""
    from annotation.models import Chain, Role, Step
    from tests.factories import MembershipFactory, ProblemFactory, ProjectFactory

    project = ProjectFactory(labeling_mode=mode)
    user = MembershipFactory(project=project, role=Role.ANNOTATOR).user
    for n in range(chains + 1):
        problem = ProblemFactory(
            project=project,
            text=f"Problem {n}: if $\\frac{{x}}{{3x-7}} = \\frac{{2}}{{5}}$, find $x$.",
            reference_answer="$14$",
        )
        chain = Chain.objects.create(
            project=project,
            problem=problem,
            content_hash=f"keys-{mode}-{n}",
            final_answer="14",
            step_count=steps,
        )
        Step.objects.bulk_create(
            [
                Step(chain=chain, index=i, text=f"Step {i + 1}: so $5x = 6x - {14 + i}$.")
                for i in range(steps)
            ]
        )
    return project, user


def _label_chains(page: Any, mode: str, chains: int) -> list[tuple[str, int, float]]:
    """Label ``chains`` chains on the open workspace, alternating the two kinds: per chain
    (kind, keys pressed, wall seconds from the first key to the next chain on screen)."""
    done = []
    for n in range(chains):
        kind = "all correct" if n % 2 == 0 else "step 3 wrong"
        keys = KEY_PATHS[(mode, kind)]
        current = page.locator("#workspace").get_attribute("data-assignment")
        # A person reads for seconds, long enough for the page to lease and build the
        # next chain; the benchmark waits for that too, then times the keys.
        page.wait_for_selector("#workspace[data-prefetched]")
        started = time.perf_counter()
        for key in keys:
            page.keyboard.press(key)
        page.wait_for_function(
            "(id) => document.getElementById('workspace').dataset.assignment !== id",
            arg=current,
            polling="raf",
        )
        done.append((kind, len(keys), time.perf_counter() - started))
    return done


def _check_submits(user: Any, mode: str, labeled: list[tuple[str, int, float]], steps: int) -> None:
    from annotation.models import Annotation

    annotations = list(
        Annotation.objects.filter(annotator=user).order_by("pk").prefetch_related("ratings__step")
    )
    assert len(annotations) == len(labeled), f"{len(annotations)} of {len(labeled)} submits"
    for annotation, (kind, _, _) in zip(annotations, labeled, strict=True):
        ratings = sorted((r.step.index, r.rating) for r in annotation.ratings.all())
        assert [rating for _, rating in ratings] == _expected(mode, kind, steps), (mode, kind)


def test_bench_keys_and_seconds_per_chain(live_server: Any) -> None:
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    from django.core.cache import cache
    from playwright.sync_api import sync_playwright

    from tests.browser import chromium_launch, page_login, workspace_open

    settings = bench_settings(chains=CHAINS)
    rows = []
    with sync_playwright() as playwright:
        browser = chromium_launch(playwright=playwright)
        for mode in ("all_steps", "first_error"):
            project, user = _project(mode, settings["chains"], settings["steps"])
            cache.clear()
            # bypass_csp: wait_for_function evaluates a string in the page, which the
            # Content-Security-Policy forbids; the app's own code is the same either way.
            page = browser.new_page(viewport={"width": 1366, "height": 768}, bypass_csp=True)
            page_login(page=page, base_url=live_server.url, username=user.username)
            workspace_open(page=page, base_url=live_server.url, project_id=project.pk)
            labeled = _label_chains(page, mode, settings["chains"])
            page.close()
            _check_submits(user, mode, labeled, settings["steps"])
            for kind in ("all correct", "step 3 wrong"):
                seconds = [s for k, _, s in labeled if k == kind]
                rows.append(
                    {
                        "mode": mode,
                        "chain": kind,
                        "keys": KEY_PATHS[(mode, kind)],
                        "key_presses": len(KEY_PATHS[(mode, kind)]),
                        "chains": len(seconds),
                        "median_s": round(statistics.median(seconds), 3),
                        "max_s": round(max(seconds), 3),
                    }
                )
        browser.close()
    result = {
        "steps_per_chain": settings["steps"],
        "rows": rows,
        "load_average_1min": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nworkspace keys and seconds per chain ({settings['steps']} steps a chain)")
    print(
        f"{'mode':<12} {'chain':<13} {'keys':>4}  {'path':<16} {'chains':>6} "
        f"{'median s':>9} {'max s':>7}"
    )
    for row in rows:
        print(
            f"{row['mode']:<12} {row['chain']:<13} {row['key_presses']:>4}  "
            f"{' '.join(row['keys']):<16} {row['chains']:>6} {row['median_s']:>9.3f} "
            f"{row['max_s']:>7.3f}"
        )
    print(f"load average {result['load_average_1min']} on {result['cpus']} CPUs")


def main() -> int:
    return bench_session(
        __file__, description=__doc__, chains=CHAINS, database="steplab_keys_bench"
    )


if __name__ == "__main__":
    sys.exit(main())
