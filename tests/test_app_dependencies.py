"""The apps depend one way: the training app uses the annotation app, never the reverse
(the annotation app calls the training app only through hooks it registers)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            # include("prm_training.api.urls") and import_module strings count too
            if node.value.startswith("prm_training."):
                names.add(node.value)
    return names


def test_the_annotation_app_never_imports_the_training_app() -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(
            name for name in _imports(path) if name.split(".")[0] == "prm_training"
        )
        for path in (ROOT / "annotation").rglob("*.py")
        if "migrations" not in path.parts
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def test_the_training_app_registers_its_hook_on_finished_chains() -> None:
    from annotation.services import chain_events
    from prm_training.services.training import training_autostart_enqueue

    assert training_autostart_enqueue in chain_events._HOOKS
