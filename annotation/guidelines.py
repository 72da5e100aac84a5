"""A project's guidelines, written in Markdown, as HTML: one renderer for every place
that shows them (the workspace's guidelines dialog, the project overview and dashboard,
and the settings page's preview through ``POST /api/v1/guidelines/preview/``), so a lead
previews exactly what annotators will read."""

from __future__ import annotations

from functools import cache

from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt


@cache
def _renderer() -> MarkdownIt:
    # markdown-it's "js-default" preset: CommonMark plus tables and strikethrough, with raw
    # HTML off, so markup written in the guidelines is shown as text (a lead's typo or a
    # pasted <script> never runs in an annotator's page), and its link check drops
    # javascript:, vbscript:, file: and data: (but image) URLs.
    return MarkdownIt("js-default")


def guidelines_html(*, text: str) -> SafeString:
    """The guidelines' Markdown as HTML that is safe to put in a page as it is.

    >>> guidelines_html(text="Rate **each** step. <b>no</b>")
    '<p>Rate <strong>each</strong> step. &lt;b&gt;no&lt;/b&gt;</p>\\n'
    """
    return mark_safe(_renderer().render(text))  # raw HTML is off (above)
