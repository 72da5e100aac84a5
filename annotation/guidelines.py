"""A project's guidelines, written in Markdown, as HTML: one renderer for every place
that shows them (the workspace's guidelines dialog, the project overview and dashboard,
and the settings page's preview through ``POST /api/v1/guidelines/preview/``), so a lead
previews exactly what annotators will read."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
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
    return renderer


def guidelines_html(*, text: str) -> SafeString:
    """The guidelines' Markdown as HTML that is safe to put in a page as it is.

    >>> guidelines_html(text="Rate **each** step. <b>no</b>")
    '<p>Rate <strong>each</strong> step. &lt;b&gt;no&lt;/b&gt;</p>\\n'
    >>> guidelines_html(text="Say $a*b<b>$.")
    '<p>Say <span class="math-tex">a*b&lt;b&gt;</span>.</p>\\n'
    """
    return mark_safe(_renderer().render(text))  # raw HTML is off (above)
