"""What the import contracts cannot say (those are in pyproject.toml's [tool.importlinter],
checked by `lint-imports` in `make lint`: the apps depend one way, no circles): the
training app's hook is registered, SQL is written only where it must be, functions stay
short."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_training_app_registers_its_hook_on_finished_chains() -> None:
    from annotation.chains import events as chain_events
    from prm_training.services.autostart import training_autostart_enqueue

    assert training_autostart_enqueue in chain_events._HOOKS


# Where app code may run SQL it wrote: the queue's hot path, the import's and the
# export's COPY paths (with the import's advisory lock), a job's progress (an import's, a
# bulk action's: on a connection of its own, which the ORM cannot name), the snapshot's,
# the consensus fit's and the run admission's advisory locks, and the health check's
# SELECT 1. Everything else goes through the ORM.
SQL_ALLOWED = {
    "annotation/datasets/imports.py",
    "annotation/datasets/import_copy.py",
    "annotation/progress.py",
    "annotation/quality/consensus_fit.py",
    "annotation/datasets/snapshot_reads.py",
    "annotation/datasets/snapshot_diff.py",
    "annotation/datasets/snapshots.py",
    "config/health.py",
    "prm_training/services/runs.py",
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
            if "migrations" in path.parts or name.startswith("annotation/labeling/queue/"):
                continue
            tree = ast.parse(path.read_text(), name)
            if any(isinstance(node, ast.Call) and _runs_sql(node) for node in ast.walk(tree)):
                found.add(name)
    assert found == SQL_ALLOWED


# A function longer than this reads as several; split it into the steps it takes.
FUNCTION_MAX_LINES = 80


def test_no_function_in_the_app_or_client_code_is_over_80_lines() -> None:
    too_long = {
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name}": node.end_lineno - node.lineno + 1
        for app in ("annotation", "prm_training", "config", "client/steplab_client")
        for path in (ROOT / app).rglob("*.py")
        if "migrations" not in path.parts
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > FUNCTION_MAX_LINES
    }
    assert too_long == {}
