"""A project's guidelines, written in Markdown, as HTML: one renderer for every place
that shows them (the workspace's guidelines dialog, the project overview and dashboard,
and the settings page's preview through ``POST /api/v1/guidelines/preview/``), so a lead
previews exactly what annotators will read.

Bounded in size and in CPU: guidelines are at most GUIDELINES_MAX_CHARS characters, and
each rendering runs in a child process (``annotation.guidelines_markdown``) that the
kernel stops after RENDER_CPU_SECONDS of CPU, at a lower priority than the web process
and in a bounded address space; one that is stopped is refused (``GuidelinesTooSlow``).
Markdown's costs are not all in one place: link brackets cost time per bracket and per
character after them (inline parsing), tables per row and cell and nested lists per
marker (block parsing), so the bound is the process's CPU, not a check inside the parser,
and not the wall clock (a busy machine would refuse what an idle one renders). A project
stores its rendering when its guidelines are saved, so pages serve the stored HTML
(``projects.services``); the preview is rate-limited per user
(``projects.api.projects``)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
from pathlib import Path

from django.utils.safestring import SafeString, mark_safe

from annotation.guidelines_markdown import RENDER_CPU_SECONDS

__all__ = ["GUIDELINES_MAX_CHARS", "RENDER_CPU_SECONDS", "GuidelinesTooSlow", "guidelines_html"]

# About 30 pages of prose; the longest guidelines seen (ProcessBench's, PRM800K's) are a
# tenth of it. At this size ordinary Markdown renders in about 0.2 s of CPU.
GUIDELINES_MAX_CHARS = 100_000
# How long the web process waits for a child that is not spending its CPU (a machine so
# busy that the low-priority child waits its turn): far past any rendering's own bound.
RENDER_WAIT_SECONDS = 60.0
# The child: no user site, no PYTHON* variables; run from the project's root, so it
# imports this code whether or not it is installed.
_CHILD = (sys.executable, "-s", "-E", "-m", "annotation.guidelines_markdown")
_ROOT = Path(__file__).resolve().parent.parent
# Renderings one web process runs at once. A burst of previews would otherwise hold every
# request thread while their children run, and a health check or a page would wait for a
# free thread; past this a preview is told to come back (GuidelinesBusy), a save waits.
RENDERS_AT_ONCE = 2
_RENDERING = threading.BoundedSemaphore(RENDERS_AT_ONCE)


class GuidelinesTooSlow(Exception):
    """The rendering ran past its CPU bound (what was written is not rendered)."""


class GuidelinesBusy(Exception):
    """RENDERS_AT_ONCE renderings are running in this process; nothing was rendered."""


def too_slow_message() -> str:
    return (
        f"These guidelines take more than {RENDER_CPU_SECONDS:g} s of CPU to render; "
        "simplify the Markdown (unclosed [ or ![ brackets, and tables or nested lists of "
        "tens of thousands of rows, are the usual cause)."
    )


def guidelines_digest(text: str) -> str:
    """What a stored rendering is checked against: the SHA-256 of the Markdown."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def guidelines_html(*, text: str, wait: bool = True) -> SafeString:
    """The guidelines' Markdown as HTML that is safe to put in a page as it is. Raises
    GuidelinesTooSlow when the rendering runs past its CPU bound, and GuidelinesBusy when
    ``wait`` is off and RENDERS_AT_ONCE renderings are running here.

    >>> guidelines_html(text="Rate **each** step. <b>no</b>")
    '<p>Rate <strong>each</strong> step. &lt;b&gt;no&lt;/b&gt;</p>\\n'
    >>> guidelines_html(text="Say $a*b<b>$.")
    '<p>Say <span class="math-tex">a*b&lt;b&gt;</span>.</p>\\n'
    """
    if not text:
        return mark_safe("")
    if not _RENDERING.acquire(blocking=wait, timeout=RENDER_WAIT_SECONDS if wait else None):
        raise GuidelinesBusy
    try:
        return _rendered(text)
    finally:
        _RENDERING.release()


def _rendered(text: str) -> SafeString:
    try:
        done = subprocess.run(
            _CHILD,
            input=text.encode("utf-8", "surrogatepass"),
            capture_output=True,
            cwd=_ROOT,
            env={"PATH": os.environ.get("PATH", ""), "LC_ALL": "C.UTF-8"},
            timeout=RENDER_WAIT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise GuidelinesTooSlow(too_slow_message()) from None
    if done.returncode != 0:
        raise GuidelinesTooSlow(too_slow_message())
    return mark_safe(done.stdout.decode("utf-8", "surrogatepass"))  # raw HTML is off
