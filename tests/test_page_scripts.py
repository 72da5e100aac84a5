"""The pages' scripts are ES modules importing their helpers from static/js/steplab.js.

ESLint (`make lint`) checks each file alone; what it cannot see is checked here: a
template that loads a module as a classic script (the `import` line is then a syntax
error and the page is dead), an import of a name the shared module does not export (the
module graph fails to link: every script of the page is dead), and a static files storage
that renames files (a relative `./steplab.js` import would then miss the hashed name).
"""

from __future__ import annotations

import re
from pathlib import Path

from django.contrib.staticfiles.storage import staticfiles_storage

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "static" / "js"
TEMPLATES = ROOT / "templates"

SCRIPT_TAG = re.compile(r"<script\b[^>]*\{% static 'js/([\w.]+)' %\}[^>]*>")
IMPORT = re.compile(r'^import \{([^}]*)\} from "\./([\w.]+)";', re.M)
EXPORT = re.compile(r"^export (?:async )?(?:function|const|let|class) ([\w$]+)", re.M)


def _page_script_tags() -> list[tuple[str, str, str]]:
    tags = []
    for template in sorted(TEMPLATES.rglob("*.html")):
        for match in SCRIPT_TAG.finditer(template.read_text()):
            tags.append((template.relative_to(ROOT).as_posix(), match.group(1), match.group(0)))
    return tags


def test_every_page_script_is_loaded_as_a_module() -> None:
    tags = _page_script_tags()
    assert {name for _, name, _ in tags} == {path.name for path in SCRIPTS.glob("*.js")}
    classic = [(where, tag) for where, _, tag in tags if 'type="module"' not in tag]
    assert classic == []


def test_every_import_names_an_export() -> None:
    exports = {path.name: set(EXPORT.findall(path.read_text())) for path in SCRIPTS.glob("*.js")}
    missing = []
    for path in sorted(SCRIPTS.glob("*.js")):
        for names, source in IMPORT.findall(path.read_text()):
            assert source in exports, f"{path.name} imports the missing ./{source}"
            for name in (n.strip() for n in names.split(",")):
                if name and name not in exports[source]:
                    missing.append(f"{path.name}: {name} from ./{source}")
    assert missing == []


def test_static_names_are_kept_for_relative_imports() -> None:
    # A hashing storage (ManifestStaticFilesStorage) would serve js/steplab.<hash>.js while
    # the pages' modules import "./steplab.js": the same settings serve production.
    assert staticfiles_storage.url("js/steplab.js") == "/static/js/steplab.js"
