"""The guidelines' Markdown renderer, and the child process it runs in
(``python -m annotation.guidelines_markdown``: Markdown on stdin, HTML on stdout).

``annotation.guidelines`` starts one child per rendering, so its cost is bounded by the
kernel whatever the Markdown holds: the child lowers its own priority, then limits its
address space (RENDER_MEMORY_BYTES) and, once the renderer is imported, its CPU time
(a profiling timer of RENDER_CPU_SECONDS, whose SIGPROF ends it, and RLIMIT_CPU's
SIGXCPU a second later as a backstop). Inline parsing (link brackets) and block parsing
(tables, nested lists) alike are stopped there; no Python-level deadline is read, and the
wall clock never is, so a busy machine renders what an idle one does. Imports nothing
of Django, so the child starts in about 0.1 s."""

from __future__ import annotations

import math
import os
import resource
import signal
import sys
from collections.abc import Sequence
from functools import cache
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
from markdown_it.token import Token
from mdit_py_plugins.dollarmath import dollarmath_plugin
from mdit_py_plugins.texmath import texmath_plugin

# CPU seconds one rendering may take. 100,000 characters of ordinary guidelines take
# 0.2 s; a table or nested lists of the same size, 1 to 2.5 s (BENCHMARKS.md, "Attacks").
RENDER_CPU_SECONDS = 0.75
# The child's address space: the interpreter, the renderer, its tokens and the HTML of
# 100,000 characters fit in a tenth of it.
RENDER_MEMORY_BYTES = 1024 * 1024 * 1024
# How far below the web process's priority the child runs, so pages and health checks
# come first on a busy machine.
RENDER_NICENESS = 10

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
def renderer() -> MarkdownIt:
    # markdown-it's "js-default" preset: CommonMark plus tables and strikethrough, with raw
    # HTML off, so markup written in the guidelines is shown as text (a lead's typo or a
    # pasted <script> never runs in an annotator's page), and its link check drops
    # javascript:, vbscript:, file: and data: (but image) URLs. Math as the steps write
    # it: $...$ and $$...$$ (a dollar before a digit stays a price: "$5 and $10"), and
    # \(...\) and \[...\] that Markdown would otherwise read as escaped brackets.
    md = (
        MarkdownIt("js-default")
        .use(dollarmath_plugin, allow_space=True, allow_digits=False, double_inline=True)
        .use(texmath_plugin, delimiters="brackets")
    )
    # Both plugins name their tokens alike; one rendering for all of them (above).
    md.add_render_rule("math_inline", _rule(MATH_INLINE))
    md.add_render_rule("math_inline_double", _rule(MATH_INLINE_DISPLAY))
    for name in ("math_block", "math_block_label", "math_block_eqno"):
        md.add_render_rule(name, _rule(MATH_BLOCK))
    return md


def _limits_set() -> None:
    """The child's own bounds, set before it reads a byte of the Markdown."""
    os.nice(RENDER_NICENESS)
    resource.setrlimit(resource.RLIMIT_AS, (RENDER_MEMORY_BYTES, RENDER_MEMORY_BYTES))
    used = resource.getrusage(resource.RUSAGE_SELF)
    backstop = math.ceil(used.ru_utime + used.ru_stime + RENDER_CPU_SECONDS) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (backstop, backstop))
    # SIGPROF's default action ends the process: nothing here catches it.
    signal.setitimer(signal.ITIMER_PROF, RENDER_CPU_SECONDS)


def main() -> int:
    renderer()  # imported and built before the clock starts
    _limits_set()
    text = sys.stdin.buffer.read().decode("utf-8", "surrogatepass")
    html = renderer().render(text)
    sys.stdout.buffer.write(html.encode("utf-8", "surrogatepass"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
