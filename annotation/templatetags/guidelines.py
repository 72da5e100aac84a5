"""``{{ project|guidelines_html }}``: the project's guidelines as HTML, rendered the one
way every page and the settings preview render them (``annotation.guidelines``), once
when they are saved (``projects.services.project_guidelines_html``)."""

from __future__ import annotations

from django import template
from django.utils.safestring import SafeString

from annotation.models import Project
from annotation.projects.services import project_guidelines_html

register = template.Library()


@register.filter(name="guidelines_html")
def guidelines_html(project: Project) -> SafeString:
    return project_guidelines_html(project=project)
