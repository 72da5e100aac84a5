"""PRM800K raw lines (OpenAI, phases 1 and 2) -> one chain per line.

Which text a step contributes (the chain "follows" one candidate per step):

1. `completions[chosen_completion]` when `chosen_completion` is an index;
2. else `human_completion` (phase 1: the labeler rejected every candidate and wrote the
   step; an object {"text", "rating", "source", "flagged"} in the real files, a plain
   string in the upstream README);
3. else `completions[0]`, the step where labeling stopped. In phase 2 that is the
   pre-generated step the labeler rated (found_error: usually -1) and the other entries
   are alternatives sampled after the first mistake; in phase 1 it is the first
   candidate offered when the labeler gave up (ratings there are often null);
4. else (completions null or empty: phase 1 give_up) the chain ends before this step;
   steps after such a step (the real lines have none) are counted in
   meta["dropped_steps"], not followed.

The label of a step is the rating of the followed candidate, null -> None (human
completions carry a null rating in the real files, so they come in unlabeled). A line
with no rating at all comes in unlabeled (labels None). The other candidates, with
their ratings, go to meta["alternatives"]; which steps are human-written, which were
never chosen and which were flagged go to meta too, by step index.

The answer is the text after "# Answer" in the last followed step (PRM800K's own
answer marker), or "" when the chain does not reach one: phase 2 lines labeled up to
their first error stop before the pre-generated answer, which stays in
meta["pre_generated_answer"].
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from annotation.datasets.importers.fields import (
    MISSING,
    JsonObject,
    RecordError,
    build_chain,
    field,
    mismatch,
    optional_text,
    rating,
    require_list,
    require_object,
    require_text,
    shown_value,
    step_text,
)
from annotation.datasets.importers.records import ParsedChain, RecordAt

LABEL_SOURCE = "prm800k"
ANSWER_MARKER = "# Answer"

_LINE_META = (
    "labeler",
    "timestamp",
    "generation",
    "is_quality_control_question",
    "is_initial_screening_question",
)
_LABEL_META = ("finish_reason", "total_time")
_QUESTION_META = ("ground_truth_solution", "pre_generated_answer", "pre_generated_verifier_score")


class _Candidate(NamedTuple):
    """One completion or human completion of a step, as found in the line. (A named
    tuple: phase-1 lines hold hundreds of candidates, and tuples build fastest.)"""

    text: str
    rating: int | None
    flagged: bool
    path: str  # of the completions array, or of the human completion itself
    position: int | None = None  # in the completions array; None for a human completion
    source: str = ""

    def field(self, name: str) -> str:
        where = self.path if self.position is None else f"{self.path}[{self.position}]"
        return f"{where}.{name}"


@dataclass(slots=True)
class _Trajectory:
    steps: list[str]
    labels: list[int | None]
    alternatives: list[JsonObject]
    human_steps: list[int]
    unchosen_steps: list[int]
    flagged_steps: list[int]
    dropped_steps: int = 0


def parse_record(record: JsonObject, at: RecordAt) -> ParsedChain:
    question = require_object(field(record, "question"), "question")
    problem = require_text(field(question, "problem"), "question.problem")
    label = require_object(field(record, "label"), "label")
    trajectory = _follow(label)
    return build_chain(
        at=at,
        problem=problem,
        steps=trajectory.steps,
        labels=trajectory.labels,
        label_source=LABEL_SOURCE,
        answer=_final_answer(trajectory.steps[-1]),
        reference_answer=optional_text(
            question.get("ground_truth_answer"), "question.ground_truth_answer"
        ),
        meta=_meta(record, question, label, trajectory),
    )


def _follow(label: JsonObject) -> _Trajectory:
    raw_steps = require_list(field(label, "steps"), "label.steps")
    trajectory = _Trajectory([], [], [], [], [], [])
    for index, raw_step in enumerate(raw_steps):
        path = f"label.steps[{index}]"
        step = require_object(raw_step, path)
        completions = _completions(step.get("completions"), f"{path}.completions")
        human = _human_completion(step.get("human_completion"), f"{path}.human_completion")
        followed = _followed(step.get("chosen_completion"), completions, human, path)
        if followed is None:
            trajectory.dropped_steps = len(raw_steps) - index - 1
            break
        trajectory.steps.append(step_text(followed.text, followed.field("text")))
        trajectory.labels.append(followed.rating)
        if followed is human:
            trajectory.human_steps.append(index)
        elif step.get("chosen_completion") is None:
            trajectory.unchosen_steps.append(index)
        if followed.flagged:
            trajectory.flagged_steps.append(index)
        trajectory.alternatives.extend(
            _alternative(index, candidate)
            for candidate in (*completions, *([human] if human else []))
            if candidate is not followed
        )
    if not trajectory.steps:
        finish = field(label, "finish_reason")
        said = "missing" if finish is MISSING else finish
        said = said if isinstance(said, str) else shown_value(said)
        raise RecordError(f"label.steps: no step to follow (finish_reason: {said})")
    return trajectory


def _followed(
    chosen: object, completions: list[_Candidate], human: _Candidate | None, path: str
) -> _Candidate | None:
    if chosen is not None:
        if not isinstance(chosen, int) or isinstance(chosen, bool):
            raise RecordError(f"{path}.chosen_completion: expected an integer or null")
        if not 0 <= chosen < len(completions):
            raise RecordError(
                f"{path}.chosen_completion: {chosen} is out of range "
                f"({len(completions)} completions)"
            )
        return completions[chosen]
    if human is not None:
        return human
    return completions[0] if completions else None


def _completions(value: object, path: str) -> list[_Candidate]:
    if value is None:
        return []
    candidates = []
    for index, item in enumerate(require_list(value, path)):
        # Fast path first: phase-1 lines carry hundreds of candidates, and the precise
        # message (with its field path) is only worth building for a bad one.
        if not isinstance(item, dict):
            require_object(item, f"{path}[{index}]")
        text, score = field(item, "text"), item.get("rating")
        if not isinstance(text, str) or not _is_rating(score):
            _candidate_text(text, f"{path}[{index}].text")
            rating(score, f"{path}[{index}].rating")
        candidates.append(_Candidate(text, score, bool(item.get("flagged")), path, index))
    return candidates


def _is_rating(value: object) -> bool:
    return value is None or (type(value) is int and -1 <= value <= 1)


def _human_completion(value: object, path: str) -> _Candidate | None:
    if value is None:
        return None
    if isinstance(value, str):  # the upstream README's shape; the real files use objects
        return _Candidate(text=value, rating=None, flagged=False, path=path, source="human")
    human = require_object(value, path)
    return _Candidate(
        text=_candidate_text(field(human, "text"), f"{path}.text"),
        rating=rating(human.get("rating"), f"{path}.rating"),
        flagged=bool(human.get("flagged")),
        path=path,
        source=optional_text(human.get("source"), f"{path}.source") or "human",
    )


def _candidate_text(value: object, path: str) -> str:
    """Alternatives are kept verbatim in meta, so only their type is checked here; the
    followed one is checked for emptiness when it becomes a step."""
    if not isinstance(value, str):
        raise mismatch(path, "a string", value)
    return value


def _alternative(step_index: int, candidate: _Candidate) -> JsonObject:
    alternative: JsonObject = {
        "step": step_index,
        "text": candidate.text,
        "rating": candidate.rating,
    }
    if candidate.source:
        alternative["source"] = candidate.source
    if candidate.flagged:
        alternative["flagged"] = True
    return alternative


def _final_answer(last_step: str) -> str:
    marker = last_step.rfind(ANSWER_MARKER)
    if marker < 0:
        return ""
    return last_step[marker + len(ANSWER_MARKER) :].strip()


def _meta(
    record: JsonObject, question: JsonObject, label: JsonObject, trajectory: _Trajectory
) -> JsonObject:
    meta: JsonObject = {key: record[key] for key in _LINE_META if key in record}
    meta.update({key: label[key] for key in _LABEL_META if key in label})
    meta.update({key: question[key] for key in _QUESTION_META if key in question})
    pre_generated = question.get("pre_generated_steps")
    if isinstance(pre_generated, list):
        meta["pre_generated_step_count"] = len(pre_generated)
    for key, values in (
        ("alternatives", trajectory.alternatives),
        ("human_steps", trajectory.human_steps),
        ("unchosen_steps", trajectory.unchosen_steps),
        ("flagged_steps", trajectory.flagged_steps),
    ):
        if values:
            meta[key] = values
    if trajectory.dropped_steps:
        meta["dropped_steps"] = trajectory.dropped_steps
    return meta
