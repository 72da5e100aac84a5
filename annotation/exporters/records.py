"""One record per example for the JSON Lines formats (``formats`` says what each holds):
pure functions of one example."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from annotation.selectors.datasets import SnapshotExample


def trl_labels(*, labels: list[int | None], ambiguous: str) -> list[bool]:
    """The boolean labels of the labeled prefix TRL gets (see the module docstring).

    >>> trl_labels(labels=[1, 0, -1, None], ambiguous="positive")
    [True, True, False]
    >>> trl_labels(labels=[1, 0, -1], ambiguous="drop")
    [True]
    """
    out: list[bool] = []
    for label in labels:
        if label is None:
            break
        if label == 0:
            if ambiguous == "drop":
                break
            out.append(ambiguous == "positive")
        else:
            out.append(label == 1)
    return out


def trl_record(*, example: SnapshotExample, ambiguous: str) -> dict[str, Any] | None:
    labels = trl_labels(labels=example.labels, ambiguous=ambiguous)
    if not labels:
        return None
    return {
        "prompt": example.problem,
        "completions": example.steps[: len(labels)],
        "labels": labels,
    }


def prm800k_record(*, example: SnapshotExample) -> dict[str, Any]:
    labels = example.labels
    if -1 in labels:
        finish_reason = "found_error"
    elif None in labels:
        finish_reason = "give_up"
    else:
        finish_reason = "solution"
    return {
        "question": {
            "problem": example.problem,
            "ground_truth_answer": example.reference_answer or None,
        },
        "label": {
            "steps": [
                {
                    "completions": [{"text": text, "rating": rating, "flagged": False}],
                    "human_completion": None,
                    "chosen_completion": 0,
                }
                for text, rating in zip(example.steps, labels, strict=True)
            ],
            "total_time": None,
            "finish_reason": finish_reason,
        },
    }


def first_error_index(*, labels: list[int | None], ambiguous: str) -> int | None:
    """ProcessBench's label: the earliest wrong step, -1 for none, None when unrated
    steps leave it unknown.

    >>> first_error_index(labels=[1, 0, -1], ambiguous="negative")
    1
    >>> first_error_index(labels=[1, 1, None], ambiguous="drop")
    """
    for index, label in enumerate(labels):
        if label == -1 or (label == 0 and ambiguous == "negative"):
            return index
        if label is None:
            return None
    return -1


def _answer_key(text: str) -> str:
    return "".join(text.replace("$", "").split())


def processbench_record(
    *, example: SnapshotExample, ambiguous: str, project_id: int
) -> dict[str, Any] | None:
    label = first_error_index(labels=example.labels, ambiguous=ambiguous)
    if label is None:
        return None
    correct = None
    if example.final_answer and example.reference_answer:
        correct = _answer_key(example.final_answer) == _answer_key(example.reference_answer)
    return {
        "id": f"steplab-{project_id}-{example.chain_id}",
        "generator": example.generator,
        "problem": example.problem,
        "steps": example.steps,
        "label": label,
        "final_answer_correct": correct,
    }


def json_record_builder(
    *, fmt: str, ambiguous: str, project_id: int
) -> Callable[[SnapshotExample], dict[str, Any] | None]:
    """The record function of JSON Lines format ``fmt``; its None means "not written"."""
    if fmt == "prm800k":
        return lambda example: prm800k_record(example=example)
    if fmt == "trl":
        return lambda example: trl_record(example=example, ambiguous=ambiguous)
    if fmt == "processbench":
        return lambda example: processbench_record(
            example=example, ambiguous=ambiguous, project_id=project_id
        )
    raise ValueError(f"{fmt} is not a JSON Lines export format")
