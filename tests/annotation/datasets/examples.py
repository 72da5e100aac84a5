"""A snapshot example for the export record tests, built without a database."""

from __future__ import annotations

from typing import Any

from annotation.datasets.snapshot_reads import SnapshotExample


def snapshot_example(**changes: Any) -> SnapshotExample:
    """A three-step chain (+1, -1, 0) of "What is 2 + 2?", with ``changes`` applied."""
    fields: dict[str, Any] = {
        "chain_id": 1,
        "chain_hash": "h",
        "split": "train",
        "labels": [1, -1, 0],
        "support": [1.0, 2 / 3, 1 / 3],
        "votes": [],
        "problem": "What is 2 + 2?",
        "reference_answer": "",
        "final_answer": "",
        "generator": "",
        "steps": ["2 + 2 = 4", "so 5", "hm"],
    }
    fields.update(changes)
    return SnapshotExample(**fields)
