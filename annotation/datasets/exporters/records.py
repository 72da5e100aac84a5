"""One record per example for the JSON Lines formats (``formats`` says what each holds):
pure functions of one example."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import regex

from annotation.datasets.exporters.special_tokens import holds_reserved, reserved_text
from annotation.first_error import first_error

if TYPE_CHECKING:
    from annotation.datasets.snapshot_reads import SnapshotExample


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


def record_notes(*, example: SnapshotExample, written: int) -> list[dict[str, Any]]:
    """The example's notes (``SnapshotChain.notes``) on the first ``written`` steps, the
    steps a record writes, and a rewrite written for no step (a pass that marked none
    wrong) wherever the record goes."""
    return [note for note in example.notes if note["step"] is None or note["step"] < written]


def human_completion(*, example: SnapshotExample, index: int) -> dict[str, Any] | None:
    """PRM800K's ``human_completion`` of step ``index``: a rewrite written for that step,
    shaped as the real files shape it (the text, a null rating, ``source: human``). Of
    several, a lead's ruling's first, then one by a voter whose rating is the step's
    label, then the first; the others are in the record's ``notes``."""
    written = [note for note in example.notes if note["step"] == index and "rewrite" in note]
    if not written:
        return None
    label = example.labels[index]
    best = min(
        written,
        key=lambda note: (note["source"] != _ADJUDICATION, note["rating"] != label),
    )
    return {"text": best["rewrite"], "rating": None, "source": "human", "flagged": False}


def prm800k_record(*, example: SnapshotExample) -> dict[str, Any]:
    """PRM800K's line: every step as its single completion, followed (``chosen_completion``
    0, so an import follows the chain's own text), with a rewrite written for it as its
    ``human_completion``."""
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
                    "human_completion": human_completion(example=example, index=index)
                    if example.notes
                    else None,
                    "chosen_completion": 0,
                }
                for index, (text, rating) in enumerate(zip(example.steps, labels, strict=True))
            ],
            "total_time": None,
            "finish_reason": finish_reason,
        },
    }


def first_error_index(*, labels: list[int | None], ambiguous: str) -> int | None:
    """ProcessBench's label: the earliest wrong step, -1 for none, None when unrated
    steps leave it unknown (the "reference" reading of ``annotation.first_error``), an
    unsure step counted wrong where ``ambiguous`` is "negative".

    >>> first_error_index(labels=[1, 0, -1], ambiguous="negative")
    1
    >>> first_error_index(labels=[1, 1, None], ambiguous="drop")
    """
    if ambiguous == "negative":
        labels = [-1 if label == 0 else label for label in labels]
    return first_error(labels, reading="reference")


def _answer_key(text: str) -> str:
    return "".join(text.replace("$", "").split())


def processbench_record(
    *, example: SnapshotExample, ambiguous: str, project_id: int
) -> dict[str, Any] | None:
    label = first_error_index(labels=example.labels, ambiguous=ambiguous)
    if label is None:
        return None
    # What came in stays: the record's own verdict, else one from the answers.
    correct = example.answer_correct
    if correct is None and example.final_answer and example.reference_answer:
        correct = _answer_key(example.final_answer) == _answer_key(example.reference_answer)
    source_id = example.source_id
    return {
        "id": source_id if source_id is not None else f"steplab-{project_id}-{example.chain_id}",
        "generator": example.generator,
        "problem": example.problem,
        "steps": example.steps,
        "label": label,
        "final_answer_correct": correct,
    }


# OpenRLHF's PRM examples train on Math-Shepherd, whose placeholder this is (the token
# their --placeholder_token names); Qwen2.5-Math-PRM reads its steps at <extra_0>.
OPENRLHF_PLACEHOLDER = "ки"
QWEN_PRM_SEPARATOR = "<extra_0>"
# Qwen2.5-Math's system prompt, which Qwen2.5-Math-PRM's model card sends with every chain.
QWEN_PRM_SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."
# The ``source`` of a lead's ruling among ``SnapshotChain.votes`` (AnnotationSource).
_ADJUDICATION = "adjudication"

# What each trainer format reserves: the special tokens of the tokenizers it targets
# (``special_tokens``: Llama 2's and Mistral's </s>, Qwen's <|im_end|>, Gemma's
# <end_of_turn>, ...) and its own marker, which OpenRLHF labels wherever it stands and
# Qwen2.5-Math-PRM reads a step's score at. A chain holding one is not written.
_OPENRLHF_RESERVED = reserved_text("openrlhf", (OPENRLHF_PLACEHOLDER,))
_MATH_SHEPHERD_RESERVED = reserved_text("math_shepherd", (OPENRLHF_PLACEHOLDER,))
_QWEN_PRM_RESERVED = reserved_text("qwen_prm", (QWEN_PRM_SEPARATOR,))


def _vote_target(rating: int, ambiguous: str) -> float | None:
    """What one vote says about "this step is correct": 1.0, 0.0, or None (no say)."""
    if rating == 1:
        return 1.0
    if rating == -1:
        return 0.0
    return {"positive": 1.0, "negative": 0.0}.get(ambiguous)


def _support_target(*, label: int, support: float | None, ambiguous: str) -> float:
    """A step's soft label from its consensus alone, for a row that keeps no votes (a
    snapshot taken before votes were kept): the support of a +1, the rest of a -1's
    (exact when the votes were +1 and -1 only); an ambiguous consensus maps as TRL's."""
    share = 1.0 if support is None else support
    if label == 1:
        return share
    if label == -1:
        return 1.0 - share
    return 1.0 if ambiguous == "positive" else 0.0


def soft_labels(
    *,
    labels: list[int | None],
    support: list[float | None],
    votes: list[dict[str, Any]],
    ambiguous: str,
) -> list[float]:
    """P(step correct) of each step of TRL's labeled prefix (``trl_labels``), from the
    votes behind its consensus (``SnapshotChain.votes``), rounded to 4 places: the lead's
    ruling when it rates the step (it decided the consensus), else the share of the
    counted votes that call the step correct. An ambiguous (0) vote counts as correct
    with ``positive``, as wrong with ``negative`` and not at all with ``drop``.

    Why the votes and not ``support``: support is the share behind the *winning*
    rating, which says nothing of how the rest split (+1, 0, -1 at a third each has
    support 1/3 whichever wins).

    >>> votes = [{"by": "a", "source": "human", "labels": [1, 1, -1]},
    ...          {"by": "b", "source": "human", "labels": [1, -1, 0]},
    ...          {"by": "c", "source": "human", "labels": [1, 1, 0]}]
    >>> soft_labels(labels=[1, 1, 0], support=[1.0, 2 / 3, 2 / 3], votes=votes,
    ...             ambiguous="positive")
    [1.0, 0.6667, 0.6667]
    >>> soft_labels(labels=[1, 1, 0], support=[1.0, 2 / 3, 2 / 3], votes=votes,
    ...             ambiguous="drop")
    [1.0, 0.6667]
    """
    prefix = len(trl_labels(labels=labels, ambiguous=ambiguous))
    rulings = [vote["labels"] for vote in votes if vote.get("source") == _ADJUDICATION]
    ruling = rulings[-1] if rulings else None
    counted = [vote["labels"] for vote in votes if vote.get("source") != _ADJUDICATION]
    out: list[float] = []
    for index in range(prefix):
        if ruling is not None and index < len(ruling) and ruling[index] is not None:
            ratings = [ruling[index]]
        else:
            ratings = [
                rating
                for ballot in counted
                if index < len(ballot) and (rating := ballot[index]) is not None
            ]
        targets = [
            target for rating in ratings if (target := _vote_target(rating, ambiguous)) is not None
        ]
        if targets:
            out.append(round(sum(targets) / len(targets), 4))
        else:
            label = labels[index]
            assert label is not None  # the prefix holds rated steps only
            out.append(_support_target(label=label, support=support[index], ambiguous=ambiguous))
    return out


def _holds(reserved: regex.Pattern[str], example: SnapshotExample, steps: list[str]) -> bool:
    """Whether the problem or a written step holds text the format reserves."""
    return holds_reserved(reserved, example.problem) or any(
        holds_reserved(reserved, step) for step in steps
    )


def _shepherd_text(problem: str, steps: list[str]) -> str:
    """Math-Shepherd's layout, which OpenRLHF trains on: the problem, then ``Step k:
    <step> ки`` a line."""
    lines = "\n".join(
        f"Step {number}: {step} {OPENRLHF_PLACEHOLDER}" for number, step in enumerate(steps, 1)
    )
    return f"{problem} {lines}"


MONTE_CARLO = "monte_carlo"


def monte_carlo_prefix(*, example: SnapshotExample, key: str) -> list[Any]:
    """The Monte-Carlo labels' ``key`` (``value``: the share of rollouts that reached
    the answer; ``hard``: whether any did) for each step from the first on, up to the
    first step without one: the prefix an export of Monte-Carlo labels writes.

    >>> from annotation.datasets.snapshot_reads import SnapshotExample
    >>> cells = [{"value": 0.5, "hard": True}, None, {"value": 0.0, "hard": False}]
    >>> example = SnapshotExample(chain_id=1, chain_hash="", split="train", labels=[],
    ...     support=[], votes=[], problem="", reference_answer="", final_answer="",
    ...     generator="", steps=["a", "b", "c"],
    ...     machine={"sources": {"monte_carlo": cells}})
    >>> monte_carlo_prefix(example=example, key="value")
    [0.5]
    """
    cells = example.machine.get("sources", {}).get(MONTE_CARLO, []) if example.machine else []
    out: list[Any] = []
    for cell in cells[: len(example.steps)]:
        if not cell or cell.get(key) is None:
            break
        out.append(cell[key])
    return out


def openrlhf_record(
    *, example: SnapshotExample, ambiguous: str, soft_labels_from: str = "votes"
) -> dict[str, Any] | None:
    """OpenRLHF's PRM record in Math-Shepherd's layout (``formats`` says why), or None
    when no step is labeled or the text holds the placeholder or a special token. With
    ``soft_labels_from="monte_carlo"`` each step's soft label is its Monte-Carlo value
    (the share of rollouts from its prefix that reached the answer), over the steps
    that have one from the first on.

    >>> from annotation.datasets.snapshot_reads import SnapshotExample
    >>> example = SnapshotExample(chain_id=1, chain_hash="", split="train",
    ...     labels=[1, -1], support=[1.0, 0.5], votes=[], problem="1+1?",
    ...     reference_answer="", final_answer="", generator="", steps=["1+1=2", "so 3"])
    >>> openrlhf_record(example=example, ambiguous="drop")
    {'input': '1+1? Step 1: 1+1=2 ки\\nStep 2: so 3 ки', 'value': [1.0, 0.5]}
    """
    if soft_labels_from == MONTE_CARLO:
        value = [round(float(v), 4) for v in monte_carlo_prefix(example=example, key="value")]
    else:
        value = soft_labels(
            labels=example.labels,
            support=example.support,
            votes=example.votes,
            ambiguous=ambiguous,
        )
    if not value:
        return None
    steps = example.steps[: len(value)]
    if _holds(_OPENRLHF_RESERVED, example, steps):
        return None
    return {"input": _shepherd_text(example.problem, steps), "value": value}


def math_shepherd_record(*, example: SnapshotExample) -> dict[str, Any] | None:
    """Math-Shepherd's record from the Monte-Carlo hard labels: ``input`` in its layout
    (as ``openrlhf``), ``label`` the same text with ``+`` (some rollout from the step
    reached the answer) or ``-`` in place of each tag, over the steps that have a hard
    label from the first on; None when none has, or the text holds the tag or a control
    token. The ``math_shepherd`` import reads it back, labels and all.

    >>> from annotation.datasets.snapshot_reads import SnapshotExample
    >>> cells = [{"hard": True}, {"hard": False}]
    >>> example = SnapshotExample(chain_id=1, chain_hash="", split="train", labels=[],
    ...     support=[], votes=[], problem="1+1?", reference_answer="", final_answer="",
    ...     generator="", steps=["1+1=2", "so 3"],
    ...     machine={"sources": {"monte_carlo": cells}})
    >>> math_shepherd_record(example=example)["label"]
    '1+1? Step 1: 1+1=2 +\\nStep 2: so 3 -'
    """
    hard = monte_carlo_prefix(example=example, key="hard")
    if not hard:
        return None
    steps = example.steps[: len(hard)]
    if _holds(_MATH_SHEPHERD_RESERVED, example, steps):
        return None
    text = _shepherd_text(example.problem, steps)
    pieces = text.split(OPENRLHF_PLACEHOLDER)
    label = (
        "".join(piece + ("+" if good else "-") for piece, good in zip(pieces, hard, strict=False))
        + pieces[-1]
    )
    return {"input": text, "label": label}


def step_provenance(*, example: SnapshotExample) -> list[dict[str, Any]]:
    """Where each step's label came from and what every machine source in the snapshot
    said of the step: ``{"label", "source", "machine": {source: {"rating", "value",
    "hard", "model", "run"} or null}}``. ``source`` is ``adjudication`` (a lead's
    ruling), ``human`` (people's consensus), ``import``, ``machine:<source>`` (a chain no
    person labeled), or null for an unlabeled step (or a row that kept no votes)."""
    machine = example.machine or {}
    labels_from = machine.get("labels_from")
    sources: dict[str, list[Any]] = machine.get("sources", {})
    votes = example.votes

    def rated(vote: dict[str, Any], index: int) -> bool:
        labels = vote.get("labels", [])
        return index < len(labels) and labels[index] is not None

    out: list[dict[str, Any]] = []
    for index, label in enumerate(example.labels):
        origin: str | None = None
        if label is not None:
            if labels_from:
                origin = f"machine:{labels_from}"
            else:
                by_source = {vote.get("source") for vote in votes if rated(vote, index)}
                for source in (_ADJUDICATION, "human", "import"):
                    if source in by_source:
                        origin = source
                        break
        said: dict[str, Any] = {}
        for source, cells in sources.items():
            cell = cells[index] if index < len(cells) else None
            said[source] = (
                None
                if cell is None
                else {key: cell.get(key) for key in ("rating", "value", "hard", "model", "run")}
            )
        out.append({"label": label, "source": origin, "machine": said})
    return out


def qwen_prm_record(*, example: SnapshotExample, ambiguous: str) -> dict[str, Any] | None:
    """Qwen2.5-Math-PRM's chat messages with TRL's labels of the prefix they hold, or None
    when no step is labeled or the text holds the separator, another token the Qwen
    tokenizer adds, or a special token."""
    labels = trl_labels(labels=example.labels, ambiguous=ambiguous)
    if not labels:
        return None
    steps = example.steps[: len(labels)]
    if _holds(_QWEN_PRM_RESERVED, example, steps):
        return None
    return {
        "messages": [
            {"role": "system", "content": QWEN_PRM_SYSTEM_PROMPT},
            {"role": "user", "content": example.problem},
            {
                "role": "assistant",
                "content": QWEN_PRM_SEPARATOR.join(steps) + QWEN_PRM_SEPARATOR,
            },
        ],
        "labels": labels,
    }


def json_record_builder(
    *,
    fmt: str,
    ambiguous: str,
    project_id: int,
    soft_labels_from: str = "votes",
    provenance: bool = False,
    machine_agreed: bool = False,
) -> Callable[[SnapshotExample], dict[str, Any] | None]:
    """The record function of JSON Lines format ``fmt``; its None means "not written".
    With ``machine_agreed`` (a snapshot that includes a machine source) each record also
    holds ``machine_agreed``, whether its labels are machine labels routing accepted;
    a record of a chain whose voters wrote a rewrite or a comment on a step it writes
    holds ``notes``, those of ``record_notes``; with ``provenance`` then ``provenance``,
    ``step_provenance`` of the steps it writes. All after the format's own keys, which
    stay as the format has them."""
    record_of = _record_builder(
        fmt=fmt, ambiguous=ambiguous, project_id=project_id, soft_labels_from=soft_labels_from
    )

    def with_extras(example: SnapshotExample) -> dict[str, Any] | None:
        record = record_of(example)
        if record is None or not (provenance or machine_agreed or example.notes):
            return record
        if machine_agreed:
            record["machine_agreed"] = example.machine_agreed
        written = record_steps(fmt=fmt, record=record, example=example)
        notes = record_notes(example=example, written=written)
        if notes:
            record["notes"] = notes
        if provenance:
            record["provenance"] = step_provenance(example=example)[:written]
        return record

    return with_extras


def shepherd_steps(record: dict[str, Any]) -> int:
    """The steps a record in Math-Shepherd's layout writes: one tag closes each."""
    return int(record["input"].count(OPENRLHF_PLACEHOLDER))


def record_steps(*, fmt: str, record: dict[str, Any], example: SnapshotExample) -> int:
    """How many of the chain's steps a record of ``fmt`` writes (from the first)."""
    if fmt == "math_shepherd":
        return shepherd_steps(record)
    key = {"trl": "labels", "openrlhf": "value", "qwen_prm": "labels"}.get(fmt)
    return len(record[key]) if key else len(example.steps)


def _record_builder(
    *, fmt: str, ambiguous: str, project_id: int, soft_labels_from: str
) -> Callable[[SnapshotExample], dict[str, Any] | None]:
    if fmt == "prm800k":
        return lambda example: prm800k_record(example=example)
    if fmt == "trl":
        return lambda example: trl_record(example=example, ambiguous=ambiguous)
    if fmt == "processbench":
        return lambda example: processbench_record(
            example=example, ambiguous=ambiguous, project_id=project_id
        )
    if fmt == "openrlhf":
        return lambda example: openrlhf_record(
            example=example, ambiguous=ambiguous, soft_labels_from=soft_labels_from
        )
    if fmt == "math_shepherd":
        return lambda example: math_shepherd_record(example=example)
    if fmt == "qwen_prm":
        return lambda example: qwen_prm_record(example=example, ambiguous=ambiguous)
    raise ValueError(f"{fmt} is not a JSON Lines export format")
