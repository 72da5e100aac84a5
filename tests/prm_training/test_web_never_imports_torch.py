"""The web process never imports torch (DESIGN.md): set Django up, load the URL config and
every view it resolves to, and check that neither torch nor transformers got imported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

PROBE = r"""
import sys
import django
django.setup()
import config.urls
from django.urls import URLPattern, URLResolver, get_resolver

def walk(patterns):
    for entry in patterns:
        if isinstance(entry, URLResolver):
            yield from walk(entry.url_patterns)
        elif isinstance(entry, URLPattern):
            yield entry.callback

views = list(walk(get_resolver().url_patterns))
import prm_training.tasks, prm_training.services.training, prm_training.services.scoring
assert any("prm_training" in getattr(v, "__module__", "") for v in views), "no PRM views"
print(len(views), "torch" in sys.modules, "transformers" in sys.modules)
"""


def test_loading_every_view_imports_neither_torch_nor_transformers() -> None:
    # Given a fresh interpreter with the test settings
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings.test"}
    # When it sets Django up and resolves every URL pattern to its view
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # Then neither torch nor transformers is in sys.modules
    assert result.returncode == 0, result.stderr
    count, torch_loaded, transformers_loaded = result.stdout.split()
    assert int(count) > 10
    assert torch_loaded == "False"
    assert transformers_loaded == "False"
