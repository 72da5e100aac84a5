"""Sampling chains from problems (issue 23): N completions per problem from one prompt
format. Splitting a completion into steps is the platform's job (its splitter), so a
sampled chain and an imported one are split the same way.

The prompt asks for one step per paragraph and the final answer in ``\\boxed{}``; a
rollout (``rollouts.rollout_prompt``) continues this same prompt after a chain's prefix,
so a policy sees the same text whether it writes a chain or finishes one.

An instruction model (an engine with ``chat_prompt``: its tokenizer has a chat template)
gets the request as a user message and writes the solution as its own turn, as it was
trained to; a base model gets the plain prompt and continues after "Solution:"."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .generation import Completion, GenerationEngine, SamplingParams

REQUEST = (
    "Solve the following math problem step by step. Write each step as its own paragraph, "
    "separated by a blank line, and put the final answer in \\boxed{{}}.\n\n"
    "Problem: {problem}"
)
PROMPT = REQUEST + "\n\nSolution:\n"


def sample_prompt(problem: str, engine: Any = None) -> str:
    """The prompt a chain is sampled from: for an engine with a chat template
    (``chat_prompt``), the request as a user message with the assistant's turn opened;
    else the plain prompt.

    >>> print(sample_prompt("What is 2 + 3?"))  # doctest: +NORMALIZE_WHITESPACE
    Solve the following math problem step by step. Write each step as its own paragraph,
    separated by a blank line, and put the final answer in \\boxed{}.
    <BLANKLINE>
    Problem: What is 2 + 3?
    <BLANKLINE>
    Solution:
    """
    chat_prompt = getattr(engine, "chat_prompt", None)
    if callable(chat_prompt):
        return str(chat_prompt(REQUEST.format(problem=problem.strip())))
    return PROMPT.format(problem=problem.strip())


def sample_chains(
    problems: Sequence[str], engine: GenerationEngine, params: SamplingParams
) -> list[list[Completion]]:
    """``params.n`` completions per problem, in the problems' order; completion j of a
    problem is drawn with seed ``params.seed + j`` (``SamplingParams``)."""
    return engine.generate([sample_prompt(problem, engine) for problem in problems], params)
