"""A project's guidelines, written in Markdown, as HTML: one renderer for every place
that shows them (the workspace's guidelines dialog, the project overview and dashboard,
and the settings page's preview through ``POST /api/v1/guidelines/preview/``), so a lead
previews exactly what annotators will read.

Bounded in size and in time: guidelines are at most GUIDELINES_MAX_CHARS characters, and
a rendering that runs past RENDER_SECONDS stops (``GuidelinesTooSlow``): Markdown's link
brackets cost time per bracket and per character after it (20,000 ``![`` took 1.6 s of
CPU, 1,000 ``[`` before 24,000 short lines 2.6 s). A project stores its rendering when
its guidelines are saved, so pages serve the stored HTML (``projects.services``)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from functools import cache
from typing import Any

from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
from markdown_it.rules_inline import StateInline
from markdown_it.token import Token
from mdit_py_plugins.dollarmath import dollarmath_plugin
from mdit_py_plugins.texmath import texmath_plugin

# Formulas leave the Markdown parser as their source text, escaped, in a box the pages
# typeset with KaTeX (static/js/steplab.js, typesetGuidelines): Markdown never reads
# inside them (its backslash escapes and emphasis would eat \{, \( or a*b*c), and no
# markup is ever built from the formula's text.
MATH_INLINE = '<span class="math-tex">{}</span>'
MATH_INLINE_DISPLAY = '<span class="math-tex math-display">{}</span>'
MATH_BLOCK = '<div class="math-tex math-display">{}</div>\n'

# About 30 pages of prose; the longest guidelines seen (ProcessBench's, PRM800K's) are a
# tenth of it. At this size ordinary Markdown renders in well under 0.1 s.
GUIDELINES_MAX_CHARS = 100_000
RENDER_SECONDS = 1.0
# The deadline is read once per this many inline positions (a clock read costs ~50 ns).
_CHECK_EVERY = 256


class GuidelinesTooSlow(Exception):
    """The rendering ran past its deadline (what was written is not rendered)."""


def too_slow_message() -> str:
    return (
        f"These guidelines take more than {RENDER_SECONDS:g} s to render; simplify the "
        "Markdown (unclosed [ or ![ brackets are the usual cause)."
    )


def guidelines_digest(text: str) -> str:
    """What a stored rendering is checked against: the SHA-256 of the Markdown."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _check_deadline(state: StateInline) -> None:
    env = state.env
    env["calls"] = calls = env.get("calls", 0) + 1
    if calls % _CHECK_EVERY == 0 and time.monotonic() > env["deadline"]:
        raise GuidelinesTooSlow(too_slow_message())


def _deadline_rule(state: StateInline, silent: bool) -> bool:
    """An inline rule that matches nothing: it runs first at every inline position and
    stops the rendering once the deadline in ``env`` has passed."""
    _check_deadline(state)
    return False


def _bounded_skip_token(skip_token: Any) -> Any:
    """markdown-it's ``skipToken`` (how a link label is scanned, one call per position
    and per bracket, mostly from its cache) with the same deadline."""

    def skip(state: StateInline) -> None:
        _check_deadline(state)
        skip_token(state)

    return skip


def _rule(template: str) -> Any:
    def render(self: Any, tokens: Sequence[Token], idx: int, *args: Any) -> str:
        return template.format(escapeHtml(tokens[idx].content.strip()))

    return render


@cache
def _renderer() -> MarkdownIt:
    # markdown-it's "js-default" preset: CommonMark plus tables and strikethrough, with raw
    # HTML off, so markup written in the guidelines is shown as text (a lead's typo or a
    # pasted <script> never runs in an annotator's page), and its link check drops
    # javascript:, vbscript:, file: and data: (but image) URLs. Math as the steps write
    # it: $...$ and $$...$$ (a dollar before a digit stays a price: "$5 and $10"), and
    # \(...\) and \[...\] that Markdown would otherwise read as escaped brackets.
    renderer = (
        MarkdownIt("js-default")
        .use(dollarmath_plugin, allow_space=True, allow_digits=False, double_inline=True)
        .use(texmath_plugin, delimiters="brackets")
    )
    # Both plugins name their tokens alike; one rendering for all of them (above).
    renderer.add_render_rule("math_inline", _rule(MATH_INLINE))
    renderer.add_render_rule("math_inline_double", _rule(MATH_INLINE_DISPLAY))
    for name in ("math_block", "math_block_label", "math_block_eqno"):
        renderer.add_render_rule(name, _rule(MATH_BLOCK))
    renderer.inline.ruler.before("text", "deadline", _deadline_rule)
    renderer.inline.skipToken = _bounded_skip_token(renderer.inline.skipToken)  # type: ignore[method-assign]
    return renderer


def guidelines_html(*, text: str, seconds: float = RENDER_SECONDS) -> SafeString:
    """The guidelines' Markdown as HTML that is safe to put in a page as it is. Raises
    GuidelinesTooSlow when it takes more than ``seconds``.

    >>> guidelines_html(text="Rate **each** step. <b>no</b>")
    '<p>Rate <strong>each</strong> step. &lt;b&gt;no&lt;/b&gt;</p>\\n'
    >>> guidelines_html(text="Say $a*b<b>$.")
    '<p>Say <span class="math-tex">a*b&lt;b&gt;</span>.</p>\\n'
    """
    env = {"deadline": time.monotonic() + seconds}
    return mark_safe(_renderer().render(text, env))  # raw HTML is off (above)
