"""The Content-Security-Policy: every response carries one that forbids inline scripts,
and in a real browser (Debian's chromium, Playwright) an inline script injected into the
annotator workspace does not run, while every page of the app still works under it
(no CSP violation from our own code or from the vendored KaTeX, Chart.js, Swagger UI,
Redoc and the Django admin)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Page

from annotation.models import Chain, Role, Step
from tests.browser import CHROMIUM, chromium_running, page_login, workspace_open
from tests.conftest import IN_CI
from tests.factories import MembershipFactory, ProblemFactory, ProjectFactory, UserFactory

INJECTED_SCRIPT = """() => {
  window.__inline_ran = false;
  window.__handler_ran = false;
  const script = document.createElement("script");
  script.textContent = "window.__inline_ran = true;";
  document.body.appendChild(script);
  const holder = document.createElement("div");
  holder.innerHTML = '<img src="data:," onerror="window.__handler_ran = true">';
  document.body.appendChild(holder);
  const link = document.createElement("a");
  link.href = "javascript:window.__inline_ran = true";
  document.body.appendChild(link);
  link.click();
}"""


# Outside resources a vendored page asks for, which the policy blocks by design (nothing
# is loaded from a CDN): Redoc's "powered by" logo.
EXPECTED_BLOCKS = ("https://cdn.redoc.ly/",)


def _expected_block(violation: str) -> bool:
    return violation.startswith("Loading the image") and any(
        f"'{origin}" in violation for origin in EXPECTED_BLOCKS
    )


def _policy(response: Any) -> dict[str, list[str]]:
    header = response.headers["Content-Security-Policy"]
    directives: dict[str, list[str]] = {}
    for part in header.split(";"):
        name, *values = part.split()
        directives[name] = values
    return directives


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/login/", "/api/docs/", "/api/redoc/", "/admin/login/"])
def test_every_page_sends_a_policy_without_inline_scripts(client: Any, path: str) -> None:
    response = client.get(path, HTTP_HOST="localhost")
    assert response.status_code == 200
    policy = _policy(response)
    assert policy["script-src"] == ["'self'"]
    assert policy["default-src"] == ["'self'"]
    assert policy["object-src"] == ["'none'"]
    assert policy["frame-ancestors"] == ["'none'"]
    assert "'unsafe-inline'" not in " ".join(policy["script-src"] + policy["default-src"])
    assert "'unsafe-eval'" not in response.headers["Content-Security-Policy"]


@pytest.mark.django_db
def test_api_responses_carry_the_policy_too(api_client: Any) -> None:
    response = api_client.get("/api/v1/projects/", HTTP_HOST="localhost")
    assert response.status_code == 401
    assert _policy(response)["script-src"] == ["'self'"]


# ------------------------------------------------------------------ real browser


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        if IN_CI:
            pytest.fail(f"{CHROMIUM} is missing in CI (make test installs Debian's chromium)")
        pytest.skip("Debian's chromium is not installed (make test installs it)")
    with chromium_running() as launched:
        yield launched


class _Watched:
    """A page plus what it reported: CSP violations and JavaScript errors."""

    def __init__(self, context: BrowserContext) -> None:
        self.page: Page = context.new_page()
        self.violations: list[str] = []
        self.errors: list[str] = []
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.on(
            "console",
            lambda message: (
                self.violations.append(message.text)
                if "Content Security Policy" in message.text
                else None
            ),
        )


@pytest.fixture
def open_page(browser: Browser) -> Iterator[Any]:
    contexts: list[BrowserContext] = []

    def make(*, bypass_csp: bool = False) -> _Watched:
        context = browser.new_context(bypass_csp=bypass_csp)
        context.set_default_timeout(15_000)
        contexts.append(context)
        return _Watched(context)

    yield make
    for context in contexts:
        context.close()


def _workspace_project() -> tuple[Any, Any]:
    project = ProjectFactory(guidelines="Rate each step.")
    problem = ProblemFactory(project=project, text="Solve $x^2 = 4$ for $x > 0$.")
    chain = Chain.objects.create(
        project=project, problem=problem, content_hash="csp-chain", final_answer="2", step_count=2
    )
    Step.objects.bulk_create(
        [
            Step(chain=chain, index=0, text="$x = \\pm 2$."),
            Step(chain=chain, index=1, text="So $x = 2$."),
        ]
    )
    user = MembershipFactory(project=project, role=Role.ANNOTATOR).user
    return project, user


def _inject(watched: _Watched) -> tuple[bool, bool]:
    watched.page.evaluate(INJECTED_SCRIPT)
    watched.page.wait_for_timeout(300)
    return (
        watched.page.evaluate("window.__inline_ran"),
        watched.page.evaluate("window.__handler_ran"),
    )


def test_injected_inline_script_does_not_run_on_the_workspace(
    live_server: Any, open_page: Any
) -> None:
    # Given: an annotator on the workspace, with a chain rendered (KaTeX included)
    project, user = _workspace_project()
    watched = open_page()
    page_login(page=watched.page, base_url=live_server.url, username=user.username)
    workspace_open(page=watched.page, base_url=live_server.url, project_id=project.pk)
    assert watched.page.locator("#problem-text .katex").count() >= 1
    assert watched.violations == [], "the page itself trips its own policy"

    # When: markup with an inline script, an inline handler and a javascript: URL lands
    # in the page
    inline_ran, handler_ran = _inject(watched)

    # Then: none of it runs, and the browser reports the blocks as CSP violations
    assert (inline_ran, handler_ran) == (False, False)
    assert watched.violations, "expected the browser to report the blocked inline code"
    # And: the page still works (a key press grades a step)
    watched.page.keyboard.press("1")
    assert watched.page.locator("#steps > li").first.get_attribute("data-rating") == "1"
    assert watched.errors == []


def test_without_the_policy_the_same_injection_runs(live_server: Any, open_page: Any) -> None:
    """The control: the injection above is real; only the policy stops it."""
    project, user = _workspace_project()
    watched = open_page(bypass_csp=True)
    page_login(page=watched.page, base_url=live_server.url, username=user.username)
    workspace_open(page=watched.page, base_url=live_server.url, project_id=project.pk)
    assert _inject(watched) == (True, True)


def test_every_page_works_under_the_policy(live_server: Any, open_page: Any) -> None:
    # Given: a staff lead who is also ML staff on a project (so every page opens)
    project = ProjectFactory()
    lead = UserFactory(is_staff=True, is_superuser=True)
    MembershipFactory(project=project, user=lead, role=Role.LEAD)
    watched = open_page()
    page_login(page=watched.page, base_url=live_server.url, username=lead.username)

    pages = {
        "/": "main",
        f"/projects/{project.pk}/": "main",
        f"/projects/{project.pk}/models/": "#versions-table",
        f"/projects/{project.pk}/label/": "#workspace",
        f"/projects/{project.pk}/review/": "main",
        "/api/docs/": ".swagger-ui .info",
        "/api/redoc/": ".api-content",
        "/admin/": "#content",
    }
    for path, ready in pages.items():
        # When: each page is opened and its scripts have run
        response = watched.page.goto(f"{live_server.url}{path}")
        assert response is not None and response.status == 200, path
        watched.page.wait_for_selector(ready)
        watched.page.wait_for_load_state("networkidle")
        # Then: nothing on it was blocked and no script failed
        blocked = [v for v in watched.violations if not _expected_block(v)]
        assert blocked == [], f"{path}: {blocked}"
        assert watched.errors == [], f"{path}: {watched.errors}"


@pytest.mark.django_db
def test_the_kept_header_is_django_csps_and_follows_the_settings(api_client: Any, settings) -> None:
    # Given the header django-csp builds from the settings
    from csp.utils import build_policy

    expected = build_policy()

    # When two API responses are sent (the second from the kept string)
    first = api_client.get("/api/v1/projects/", HTTP_HOST="localhost")
    second = api_client.get("/api/v1/projects/", HTTP_HOST="localhost")

    # Then both carry exactly django-csp's header
    assert first["Content-Security-Policy"] == second["Content-Security-Policy"] == expected

    # When the settings change (as a deployment's would between processes)
    policy = {**settings.CONTENT_SECURITY_POLICY}
    policy["DIRECTIVES"] = {**policy["DIRECTIVES"], "img-src": ["'self'"]}
    settings.CONTENT_SECURITY_POLICY = policy

    # Then the next response carries the new policy, not the kept one
    changed = api_client.get("/api/v1/projects/", HTTP_HOST="localhost")
    assert changed["Content-Security-Policy"] == build_policy() != expected
    assert "img-src 'self';" in changed["Content-Security-Policy"] + ";"


@pytest.mark.django_db
def test_a_view_that_shapes_its_own_policy_still_gets_it(rf: Any) -> None:
    # Given a response that asks for its own policy (as django-csp's decorators mark one)
    from django.http import HttpResponse

    from config.csp import CSPMiddleware

    def view(request: Any) -> HttpResponse:
        response = HttpResponse("ok")
        response._csp_update = {"img-src": ["https://example.org"]}
        return response

    # When it passes the middleware
    response = CSPMiddleware(view)(rf.get("/"))

    # Then django-csp built it, with the update
    assert "https://example.org" in response["Content-Security-Policy"]
