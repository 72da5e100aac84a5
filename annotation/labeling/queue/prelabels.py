"""Verification (issue 23): the workspace shows each step's machine verdict, which the
annotator confirms or overrides, and each rating records which it was.

- The lease decides and stores what it shows (``Assignment.prelabel_source``,
  ``prelabels``, ``prelabels_shown``) in the statement that takes it (``sql.lease_sql``):
  the project's source's latest verdict on each step as of then. Later machine runs do not
  change a lease's pre-labels, and the submit compares the ratings with what the lease
  stored, never with anything the client sends.
- A share of chains (``Project.prelabel_holdout``) is served without pre-labels, to
  measure how much they sway people. Which ones is ``prelabel_held_out``: a keyed hash of
  the project, chain and annotator, so it is fixed per chain and annotator (a reload, a
  renewal, a lease taken again shows the same), and neither guessable nor movable by the
  annotator, who knows the three numbers but not the key. Gold chains are drawn the same
  way and show their verdicts the same way: nothing an annotator reads tells them apart.
- The stored verdicts of a held-out lease stay on the lease, never shown, so the
  dashboard can set the agreement of unassisted ratings with the machine beside the
  acceptance of shown verdicts (``quality.prelabel_effects``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from annotation.models import Assignment, PrelabelOutcome, Project
from annotation.public_ids import keyed_share


class Rated(Protocol):
    """A step's grade as the submit holds it (``submit.RatingInput``)."""

    @property
    def step_id(self) -> int: ...

    @property
    def rating(self) -> int: ...


def prelabel_held_out(*, project_id: int, chain_id: int, user_id: int, share: float) -> bool:
    """Whether ``user_id`` labels ``chain_id`` without pre-labels: a uniform number in
    [0, 1) fixed by the three ids, keyed with a secret, below ``share``.

    >>> prelabel_held_out(project_id=1, chain_id=2, user_id=3, share=0.0)
    False
    >>> prelabel_held_out(project_id=1, chain_id=2, user_id=3, share=1.0)
    True
    """
    return keyed_share("prelabel-holdout", project_id, chain_id, user_id) < share


@dataclass(frozen=True, slots=True)
class PrelabelPlan:
    """What a new lease on one chain does about pre-labels: read ``source``'s verdicts
    ('' when the project does not pre-label) and show them or not (held out)."""

    source: str
    shown: bool

    def sql_params(self) -> dict[str, Any]:
        """The lease statement's parameters for this plan (``sql.LEASE_IF_FREE_SQL``)."""
        return {
            "prelabel_from": self.source,
            "prelabel_source": self.source,
            "prelabels_shown": self.shown,
        }


OFF = PrelabelPlan(source="", shown=False)


def prelabel_plan(*, project: Project, chain_id: int, user_id: int) -> PrelabelPlan:
    """The plan for a new lease of ``chain_id`` to ``user_id`` in ``project``; no query."""
    if not project.prelabels:
        return OFF
    held_out = prelabel_held_out(
        project_id=project.pk, chain_id=chain_id, user_id=user_id, share=project.prelabel_holdout
    )
    return PrelabelPlan(source=project.prelabel_source, shown=not held_out)


def verdicts_from_db(value: Any) -> dict[str, int] | None:
    """The stored pre-labels as the database hands them back (JSON text, or already a
    dict), as {"step index": verdict}."""
    if value is None:
        return None
    return json.loads(value) if isinstance(value, str | bytes) else dict(value)


def shown_verdicts(assignment: Assignment) -> dict[str, int]:
    """The verdicts the lease shows, by step index (as a string): none when held out,
    when the project did not pre-label, or when the source had none on the chain."""
    if not assignment.prelabels_shown or not assignment.prelabels:
        return {}
    return assignment.prelabels


def prelabel_outcomes(
    *,
    assignment: Assignment,
    ratings: Sequence[Rated],
    steps: Sequence[tuple[int, int]],
) -> list[tuple[str, str]]:
    """(outcome, source) for each of ``ratings``, whose steps are named as in ``steps``
    ((id, index) pairs): confirmed where the rating equals the verdict the lease showed
    on its step, overridden where it differs, none (with no source) where it showed
    none. Precondition: the ratings were validated against ``steps``."""
    shown = shown_verdicts(assignment)
    none: tuple[str, str] = (PrelabelOutcome.NONE, "")
    if not shown:
        return [none] * len(ratings)
    index_of = dict(steps)
    outcomes: list[tuple[str, str]] = []
    for item in ratings:
        verdict = shown.get(str(index_of[item.step_id]))
        if verdict is None:
            outcomes.append(none)
        elif item.rating == verdict:
            outcomes.append((PrelabelOutcome.CONFIRMED, assignment.prelabel_source))
        else:
            outcomes.append((PrelabelOutcome.OVERRIDDEN, assignment.prelabel_source))
    return outcomes
