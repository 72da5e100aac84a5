"""Monte-Carlo step values (Math-Shepherd) and the first-error binary search (OmegaPRM).

A step's value comes from ``k`` completions of the chain's prefix up to and including
that step: *soft* is the share whose final answer matches the reference, *hard* is
whether any does. Math-Shepherd rolls out every step (k·K completions for K steps);
OmegaPRM assumes that once no rollout reaches the answer, none from a longer prefix
will either, and binary-searches the first such step with k·⌈log₂(K+1)⌉ completions.

Both take what is already stored (``done``) and call ``on_step`` as soon as a step is
rolled out, so a run killed halfway resumes without repeating a rollout: the search
asks for the same steps in the same order, and the stored ones answer at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .generation import GenerationEngine, SamplingParams
from .grading import answers_equivalent, extract_answer
from .sampling import sample_prompt

# Between steps in a rollout prompt: a blank line, as the sampling prompt asks a chain
# to write them.
STEP_SEPARATOR = "\n\n"


def rollout_prompt(problem: str, steps: Sequence[str], upto: int, engine: Any = None) -> str:
    """The sampling prompt (``sampling.sample_prompt``, in ``engine``'s chat template when
    it has one) followed by steps 0..``upto``, each its own paragraph, ending with a blank
    line so the model writes the next step.

    >>> rollout_prompt("What is 2 + 3?", ["2 + 3 = 5.", "So 5.", "Done."], 1).endswith(
    ...     "Solution:\\n2 + 3 = 5.\\n\\nSo 5.\\n\\n")
    True
    """
    if not 0 <= upto < len(steps):
        raise ValueError(f"upto must name one of the {len(steps)} steps, not {upto}")
    prefix = STEP_SEPARATOR.join(step.strip() for step in steps[: upto + 1])
    return sample_prompt(problem, engine) + prefix + STEP_SEPARATOR


@dataclass(frozen=True)
class StepValue:
    """Step ``index`` rolled out ``rollouts`` times, ``reached`` of which ended with the
    reference answer."""

    index: int
    rollouts: int
    reached: int

    @property
    def soft(self) -> float:
        """The share of rollouts that reached the answer (Math-Shepherd's soft label)."""
        return self.reached / self.rollouts if self.rollouts else 0.0

    @property
    def hard(self) -> bool:
        """Whether any rollout reached the answer (Math-Shepherd's hard label)."""
        return self.reached > 0


def _rolled_out(
    problem: str,
    steps: Sequence[str],
    indexes: Sequence[int],
    reference: str,
    engine: GenerationEngine,
    params: SamplingParams,
) -> Iterator[StepValue]:
    """``params.n`` completions of the prefix up to each of ``indexes``, in one
    ``generate`` call, each step's value yielded as soon as it is graded. The answer is
    read from prefix + completion: a prefix that already holds the final answer (the
    last step) is graded on it unless the completion writes another."""
    prompts = [rollout_prompt(problem, steps, index, engine) for index in indexes]
    start = len(sample_prompt(problem, engine))
    for index, prompt, completions in zip(
        indexes, prompts, engine.generate(prompts, params), strict=True
    ):
        reached = 0
        for completion in completions:
            answer = extract_answer(prompt[start:] + completion.text)
            reached += answer is not None and answers_equivalent(answer, reference) is True
        yield StepValue(index=index, rollouts=len(completions), reached=reached)


def _rollout(
    problem: str,
    steps: Sequence[str],
    upto: int,
    reference: str,
    engine: GenerationEngine,
    params: SamplingParams,
) -> StepValue:
    """``params.n`` completions of the prefix up to ``upto``, each graded."""
    return next(_rolled_out(problem, steps, [upto], reference, engine, params))


def steps_per_call(engine: GenerationEngine, params: SamplingParams) -> int:
    """How many steps' rollouts one ``generate`` call takes: as many as fill the engine's
    batch (``rows_per_call`` completions; 1 step for an engine that states none)."""
    return max(1, getattr(engine, "rows_per_call", 1) // max(1, params.n))


def rollout_values(
    problem: str,
    steps: Sequence[str],
    reference: str,
    engine: GenerationEngine,
    params: SamplingParams,
    *,
    done: Mapping[int, StepValue] | None = None,
    on_step: Callable[[StepValue], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> list[StepValue]:
    """Every step's value (Math-Shepherd), in step order: steps in ``done`` are taken as
    they are, the others rolled out a group at a time (``steps_per_call``: the rollouts
    of several steps share the engine's batches, since one step's ``params.n`` rarely
    fills them), ``on_step`` called for each step of a group so the caller can store it
    before the next group; ``should_stop`` (checked before each group) ends early, and
    the list then holds only the steps valued so far. Grouping changes no completion:
    each is seeded by its index within its prompt (``TransformersEngine``)."""
    values = dict(done or {})
    pending = [index for index in range(len(steps)) if index not in values]
    group = steps_per_call(engine, params)
    for start in range(0, len(pending), group):
        if should_stop is not None and should_stop():
            break
        indexes = pending[start : start + group]
        for value in _rolled_out(problem, steps, indexes, reference, engine, params):
            values[value.index] = value
            if on_step is not None:
                on_step(value)
    return [values[index] for index in sorted(values)]


@dataclass
class SearchResult:
    """The first step from whose prefix no rollout reached the answer (None when every
    step's did, or when the search was not ``decided``), and the probes it took in order.
    ``decided`` is False when a probe budget or a stop ended the search first."""

    first_error: int | None
    probes: list[StepValue] = field(default_factory=list)
    decided: bool = True


def first_error_search(
    n_steps: int,
    probe: Callable[[int], StepValue],
    *,
    max_probes: int | None = None,
) -> SearchResult:
    """Binary search for the first step ``e`` whose probe has no rollout reaching the
    answer, assuming monotonicity (steps before ``e`` reach it, ``e`` and later do not).

    The answer is one of K+1 outcomes (a step 0..K-1, or none), and each probe halves
    the candidates still open: [lo, hi] holds hi-lo+1 of them, a probe at mid=(lo+hi)//2
    leaves [mid+1, hi] or [lo, mid], at most ⌈(hi-lo+1)/2⌉. So the search takes at most
    ⌈log₂(K+1)⌉ probes, which is ⌈log₂ K⌉ except when K is a power of two (then one more),
    and no search can do with fewer for every position. No probe checks the last step
    separately: "none" is simply the outcome K.

    >>> first_error_search(5, lambda i: StepValue(i, 4, 4 if i < 3 else 0)).first_error
    3
    """
    probes: list[StepValue] = []
    lo, hi = 0, n_steps  # the first error is in [lo, hi]; hi == n_steps means none
    while lo < hi:
        if max_probes is not None and len(probes) >= max_probes:
            return SearchResult(first_error=None, probes=probes, decided=False)
        mid = (lo + hi) // 2
        value = probe(mid)
        probes.append(value)
        if value.hard:
            lo = mid + 1
        else:
            hi = mid
    return SearchResult(first_error=lo if lo < n_steps else None, probes=probes)


class _Stopped(Exception):
    pass


def rollout_search(
    problem: str,
    steps: Sequence[str],
    reference: str,
    engine: GenerationEngine,
    params: SamplingParams,
    *,
    done: Mapping[int, StepValue] | None = None,
    on_step: Callable[[StepValue], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    budget: int | None = None,
) -> SearchResult:
    """``first_error_search`` with ``params.n`` rollouts per probe (OmegaPRM). A step in
    ``done`` answers its probe without a rollout; ``on_step`` is called after each new
    rollout; ``should_stop`` ends the search undecided before the next rollout. ``budget``
    caps the chain's rollouts (probes of ``params.n`` each, stored ones included): a
    search that would need more ends undecided."""
    stored = dict(done or {})
    probed: list[StepValue] = []

    def probe(index: int) -> StepValue:
        if index not in stored:
            if should_stop is not None and should_stop():
                raise _Stopped
            stored[index] = _rollout(problem, steps, index, reference, engine, params)
            if on_step is not None:
                on_step(stored[index])
        probed.append(stored[index])
        return stored[index]

    try:
        max_probes = None if budget is None else max(1, budget // params.n)
        return first_error_search(len(steps), probe, max_probes=max_probes)
    except _Stopped:
        return SearchResult(first_error=None, probes=probed, decided=False)
