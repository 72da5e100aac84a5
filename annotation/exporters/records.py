"""One record per example for the JSON Lines formats (``formats`` says what each holds):
pure functions of one example."""

from __future__ import annotations

import re
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

# Text that a trainer's tokenizer reads as one of its control tokens, not as text: the
# ``<|name|>`` family (Qwen's <|im_start|>, <|im_end|> and <|endoftext|>, Llama 3's
# <|eot_id|>, Phi's <|end|>), also with DeepSeek's fullwidth bars (<｜end▁of▁sentence｜>).
# Hugging Face tokenizers split such text into the special token itself, so a step holding
# <|im_end|> would end the assistant's turn inside the chat the trainer builds, and
# whatever follows would be read as another turn. A chain holding one is not written to the
# trainer formats (there is no escape inside a chat template that the tokenizer undoes).
_CONTROL_TOKEN = r"<[|\uff5c][^\s<>|\uff5c]{1,64}[|\uff5c]>"
# Per format, the control tokens and the format's own marker: Qwen2.5-Math-PRM's tokenizer
# also adds <extra_N> (its separator is <extra_0>) and <tool_call>; OpenRLHF labels the
# placeholder wherever it stands.
_QWEN_PRM_RESERVED = re.compile(rf"{_CONTROL_TOKEN}|<extra_\d+>|</?tool_call>")
_OPENRLHF_RESERVED = re.compile(rf"{_CONTROL_TOKEN}|{OPENRLHF_PLACEHOLDER}")


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


def _holds(reserved: re.Pattern[str], example: SnapshotExample, steps: list[str]) -> bool:
    """Whether the problem or a written step holds text the format reserves."""
    search = reserved.search
    return search(example.problem) is not None or any(search(step) for step in steps)


def openrlhf_record(*, example: SnapshotExample, ambiguous: str) -> dict[str, Any] | None:
    """OpenRLHF's PRM record in Math-Shepherd's layout (``formats`` says why), or None
    when no step is labeled or the text holds the placeholder or a control token.

    >>> from annotation.selectors.datasets import SnapshotExample
    >>> example = SnapshotExample(chain_id=1, chain_hash="", split="train",
    ...     labels=[1, -1], support=[1.0, 0.5], votes=[], problem="1+1?",
    ...     reference_answer="", final_answer="", generator="", steps=["1+1=2", "so 3"])
    >>> openrlhf_record(example=example, ambiguous="drop")
    {'input': '1+1? Step 1: 1+1=2 ки\\nStep 2: so 3 ки', 'value': [1.0, 0.5]}
    """
    value = soft_labels(
        labels=example.labels, support=example.support, votes=example.votes, ambiguous=ambiguous
    )
    if not value:
        return None
    steps = example.steps[: len(value)]
    if _holds(_OPENRLHF_RESERVED, example, steps):
        return None
    lines = "\n".join(
        f"Step {number}: {step} {OPENRLHF_PLACEHOLDER}" for number, step in enumerate(steps, 1)
    )
    return {"input": f"{example.problem} {lines}", "value": value}


def qwen_prm_record(*, example: SnapshotExample, ambiguous: str) -> dict[str, Any] | None:
    """Qwen2.5-Math-PRM's chat messages with TRL's labels of the prefix they hold, or None
    when no step is labeled or the text holds the separator, another token the Qwen
    tokenizer adds, or a control token."""
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
    if fmt == "openrlhf":
        return lambda example: openrlhf_record(example=example, ambiguous=ambiguous)
    if fmt == "qwen_prm":
        return lambda example: qwen_prm_record(example=example, ambiguous=ambiguous)
    raise ValueError(f"{fmt} is not a JSON Lines export format")
