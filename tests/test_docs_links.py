"""Every relative link in the README, BENCHMARKS.md and docs/ leads to a file that exists
(a moved or renamed doc leaves no dead link behind). Links to the web and to anchors in
the same page are not checked."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").glob("*.md"))]
# [text](target): the target up to a closing parenthesis, a space or an anchor.
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s#]+)[^)]*\)")


def _relative_links(doc: Path) -> list[str]:
    return [
        target
        for target in _LINK.findall(doc.read_text(encoding="utf-8"))
        if not re.match(r"[a-z][a-z0-9+.-]*:", target)  # http:, https:, mailto:
    ]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(doc: Path) -> None:
    dead = [t for t in _relative_links(doc) if not (doc.parent / t).exists()]
    assert not dead, dead


def test_the_docs_link_each_other() -> None:
    # the README routes a developer to the code map, the developer's guide and the words
    assert {"docs/ARCHITECTURE.md", "docs/developing.md", "docs/glossary.md"} <= set(
        _relative_links(ROOT / "README.md")
    )
