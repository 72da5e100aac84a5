"""``{{ project.guidelines|guidelines_html }}``: the guidelines' Markdown rendered the one
way every page and the settings preview render it (``annotation.guidelines``)."""

from __future__ import annotations

from django import template
from django.utils.safestring import SafeString

from annotation.guidelines import guidelines_html as render_guidelines

register = template.Library()


@register.filter(name="guidelines_html")
def guidelines_html(text: str) -> SafeString:
    return render_guidelines(text=text or "")
