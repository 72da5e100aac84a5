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


def _module_graph() -> dict[str, set[str]]:
    """Each app module's imports of other app modules, those inside functions included
    (a lazy import is still a dependency). ``from package import module`` depends on the
    module, not on the package's ``__init__``."""
    paths = {
        ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): path
        for package in ("annotation", "prm_training", "config")
        for path in (ROOT / package).rglob("*.py")
        if "migrations" not in path.parts
    }

    def owner(name: str) -> str:
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(owner(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    submodule = f"{node.module}.{alias.name}"
                    targets.add(submodule if submodule in paths else owner(node.module))
        graph[module] = targets - {"", module}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circle_among_the_app_modules() -> None:
    graph = _module_graph()
    assert "prm_training.services.runs" in graph["prm_training.tasks"]
    assert _cycles(graph) == []


def test_the_circle_check_finds_a_circle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# Where app code may run SQL it wrote: the queue's hot path, the import's and the
# export's COPY paths (with the import's advisory lock), a job's progress (an import's, a
# bulk action's: on a connection of its own, which the ORM cannot name), the snapshot's
# and the consensus fit's advisory locks, and the health check's SELECT 1. Everything
# else goes through the ORM.
SQL_ALLOWED = {
    "annotation/services/imports.py",
    "annotation/services/progress.py",
    "annotation/services/consensus.py",
    "annotation/selectors/datasets.py",
    "annotation/services/snapshots.py",
    "config/health.py",
}


def _runs_sql(node: ast.Call) -> bool:
    """A call that sends SQL text: a cursor's execute, executemany or copy, a manager's
    raw, or RawSQL."""
    func = node.func
    if isinstance(func, ast.Name):
        return func.id == "RawSQL"
    if not isinstance(func, ast.Attribute):
        return False
    receiver = ast.unparse(func.value)
    if func.attr in ("execute", "executemany", "copy"):
        return "cursor" in receiver
    return func.attr == "raw" and receiver.endswith("objects")


def test_no_hand_written_sql_outside_the_queue_and_the_copy_paths() -> None:
    found = set()
    for package in ("annotation", "prm_training", "config"):
        for path in (ROOT / package).rglob("*.py"):
            name = str(path.relative_to(ROOT))
            if "migrations" in path.parts or name.startswith("annotation/queue/"):
                continue
            tree = ast.parse(path.read_text(), name)
            if any(isinstance(node, ast.Call) and _runs_sql(node) for node in ast.walk(tree)):
                found.add(name)
    assert found == SQL_ALLOWED


# A function longer than this reads as several; split it into the steps it takes.
FUNCTION_MAX_LINES = 80


def test_no_function_in_the_app_code_is_over_80_lines() -> None:
    too_long = {
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name}": node.end_lineno - node.lineno + 1
        for app in ("annotation", "prm_training", "config")
        for path in (ROOT / app).rglob("*.py")
        if "migrations" not in path.parts
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > FUNCTION_MAX_LINES
    }
    assert too_long == {}
