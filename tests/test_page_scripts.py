"""The pages' scripts are ES modules importing their helpers from static/js/steplab.js.

ESLint (`make lint`) checks each file alone; what it cannot see is checked here: a
template that loads a module as a classic script (the `import` line is then a syntax
error and the page is dead), an import of a name the shared module does not export (the
module graph fails to link: every script of the page is dead), a static files storage
that renames files (a relative `./steplab.js` import would then miss the hashed name), and
a message box that a page styles or sets on its own instead of through the shared
``showMessage`` and steplab.css's ``.message``.
"""

from __future__ import annotations

import re
from pathlib import Path

from django.contrib.staticfiles.storage import staticfiles_storage

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "static" / "js"
TEMPLATES = ROOT / "templates"
STYLES = ROOT / "static" / "css"

SCRIPT_TAG = re.compile(r"<script\b[^>]*\{% static 'js/([\w.]+)' %\}[^>]*>")
IMPORT = re.compile(r'^import \{([^}]*)\} from "\./([\w.]+)";', re.M)
EXPORT = re.compile(r"^export (?:async )?(?:function|const|let|class) ([\w$]+)", re.M)
# A page's message box: <p id="...-message" ...>, and its class attribute.
MESSAGE_BOX = re.compile(r'<p\b[^>]*\bid="[\w-]+-message"[^>]*>')
CLASS_ATTR = re.compile(r'\bclass="([^"]*)"')
# A message look of a page's own: a prefixed class (.db-message) or a kind (.message.ok).
OWN_MESSAGE_LOOK = re.compile(r"\.[\w-]+-message\b|\.message\.[\w-]")
# A page script that sets a box's class itself rather than through showMessage.
OWN_MESSAGE_CLASS = re.compile(r"\.className\s*=[^;]*message")


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


def test_every_message_box_wears_the_one_message_class() -> None:
    # showMessage sets a kind beside the box's class; steplab.css styles ".message" once.
    boxes = [
        (template.relative_to(ROOT).as_posix(), tag)
        for template in sorted(TEMPLATES.rglob("*.html"))
        for tag in MESSAGE_BOX.findall(template.read_text())
    ]
    assert boxes
    plain = [(where, tag) for where, tag in boxes if "message" not in _classes(tag)]
    assert plain == []


def _classes(tag: str) -> list[str]:
    found = CLASS_ATTR.search(tag)
    return found.group(1).split() if found else []


def test_only_the_shared_stylesheet_gives_a_message_its_look() -> None:
    own = [
        f"{path.name}: {rule}"
        for path in sorted(STYLES.glob("*.css"))
        if path.name != "steplab.css"
        for rule in OWN_MESSAGE_LOOK.findall(path.read_text())
    ]
    assert own == []


def test_no_page_script_sets_a_message_box_s_class_itself() -> None:
    own = [
        f"{path.name}: {line.strip()}"
        for path in sorted(SCRIPTS.glob("*.js"))
        if path.name != "steplab.js"
        for line in path.read_text().splitlines()
        if OWN_MESSAGE_CLASS.search(line)
    ]
    assert own == []
