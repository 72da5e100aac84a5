"""Text generation for machine labels (issue 23): sampling chains from problems, Monte-Carlo
rollouts from a step's prefix, a judge's critiques. One interface, ``GenerationEngine``;
its implementations (transformers ``generate`` always, vLLM where it is installed on the
GPU node) live beside it and return the same things for the same inputs.

Torch-free at import: the web process imports this module for its dataclasses."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class SamplingParams:
    """How to sample: ``n`` completions per prompt, each from its own seed
    (``seed`` + the completion's index within its prompt), so a resumed run draws the
    same completions it would have drawn the first time."""

    n: int = 1
    temperature: float = 0.7
    top_p: float = 0.95
    max_new_tokens: int = 512
    seed: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Completion:
    """One sampled continuation: its text, how many tokens it took, and whether it ended
    by itself (an end-of-sequence token) rather than at ``max_new_tokens``."""

    text: str
    tokens: int
    finished: bool


class GenerationEngine(Protocol):
    """Generates completions of prompts. ``model_name`` is what provenance records."""

    model_name: str

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[list[Completion]]:
        """``params.n`` completions for each prompt, in the prompts' order."""
        ...
