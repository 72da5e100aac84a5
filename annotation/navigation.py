"""A project's pages and the roles that may open each, in one table: every page view
checks its roles here (``page_roles``), and the project page links exactly the pages the
caller's role may open (``project_pages``). So no link leads to "Not allowed", and no
page a role may use has to be typed (invariant 6: the pages agree with each other, and
each page with the API it calls, ``tests/test_navigation.py``).

The training app adds its own page (Models) from its ``ready()``, through
``project_page_register``: the annotation app never names it."""

from __future__ import annotations

from dataclasses import dataclass

from django.urls import reverse

from annotation.models import Role

EVERY_ROLE: tuple[str, ...] = (Role.ANNOTATOR, Role.LEAD, Role.ML)
LEADS: tuple[str, ...] = (Role.LEAD,)


@dataclass(frozen=True)
class ProjectPage:
    """A page under ``/projects/{id}/``: its URL name (which takes ``project_id``), the
    words of its link, the roles that may open it and whether it is the role's main
    action (shown first, as the primary button)."""

    url_name: str
    label: str
    roles: tuple[str, ...]
    primary: bool = False


@dataclass(frozen=True)
class ProjectLink:
    label: str
    href: str
    primary: bool


_PAGES: list[ProjectPage] = [
    ProjectPage("label-workspace", "Label", EVERY_ROLE, primary=True),
    ProjectPage("history-page", "Your history", EVERY_ROLE),
    ProjectPage("review-page", "Review disagreements", LEADS),
    ProjectPage("chains-page", "Chains", LEADS),
    ProjectPage("import-page", "Import chains", LEADS),
    ProjectPage("snapshots-page", "Snapshots", LEADS),
    ProjectPage("project-settings", "Settings", LEADS),
    ProjectPage("project-members", "Members", LEADS),
    ProjectPage("webhooks-page", "Webhooks", LEADS),
]


def project_page_register(page: ProjectPage, *, after: str | None = None) -> None:
    """Add another app's project page to the table (once; a second call replaces it),
    after the page named ``after`` or at the end."""
    _PAGES[:] = [known for known in _PAGES if known.url_name != page.url_name]
    names = [known.url_name for known in _PAGES]
    at = names.index(after) + 1 if after in names else len(_PAGES)
    _PAGES.insert(at, page)


def page_roles(url_name: str) -> tuple[str, ...]:
    """The roles that may open the page ``url_name``; a name not in the table is a
    programming error (KeyError), never "anyone"."""
    for page in _PAGES:
        if page.url_name == url_name:
            return page.roles
    raise KeyError(f"{url_name} is not a project page")


def project_page_names() -> list[str]:
    return [page.url_name for page in _PAGES]


def project_pages(*, role: str | None, project_id: int) -> list[ProjectLink]:
    """The links a member with ``role`` sees on the project page, in the table's order."""
    return [
        ProjectLink(
            label=page.label,
            href=reverse(page.url_name, args=[project_id]),
            primary=page.primary,
        )
        for page in _PAGES
        if role in page.roles
    ]
