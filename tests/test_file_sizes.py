"""No app module grows past 500 lines: a file that long holds several things (a loop, a
writer, calibration, the launch choice) and a newcomer cannot tell them apart. Split it
along its seams instead (docs/ARCHITECTURE.md names where each use case lives).

annotation/models.py stays one file (the data and its constraints; no data churn), and
migrations are generated; no other file is let off."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ("annotation", "prm_training", "config", "client/steplab_client")
LIMIT = 500
EXEMPT = {"annotation/models.py"}


def _line_counts() -> dict[str, int]:
    counts: dict[str, int] = {}
    for folder in CHECKED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if "/migrations/" in relative or relative in EXEMPT:
                continue
            counts[relative] = len(path.read_text(encoding="utf-8").splitlines())
    return counts


def test_no_app_module_is_over_500_lines() -> None:
    counts = _line_counts()
    too_long = {path: lines for path, lines in counts.items() if lines > LIMIT}
    assert not too_long, f"over {LIMIT} lines (split along their seams): {too_long}"
