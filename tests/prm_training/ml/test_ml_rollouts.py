"""Monte-Carlo step values and the first-error binary search: a scripted policy whose
rollouts reach the answer only from prefixes before a planted wrong step, and a tiny Llama
for the real engine path."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pytest

from prm_training.ml.generation import Completion, SamplingParams, TransformersEngine
from prm_training.ml.rollouts import (
    StepValue,
    first_error_search,
    rollout_prompt,
    rollout_search,
    rollout_values,
)
from prm_training.ml.sampling import sample_prompt
from tests.prm_training.ml_tiny import tiny_causal_lm_dir

PROBLEM = "What is 2 + 3?"


class ScriptedPolicy:
    """A GenerationEngine whose completions answer 5 (the reference) unless the prefix
    holds a step with "WRONG"; from a sound prefix, completion j answers 5 only when j is
    below ``right_share * n`` (so soft values are exact). Counts the prompts it got."""

    model_name = "scripted"

    def __init__(self, right_share: float = 1.0) -> None:
        self.right_share = right_share
        self.prompts: list[str] = []

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[list[Completion]]:
        self.prompts.extend(prompts)
        out = []
        for prompt in prompts:
            sound = "WRONG" not in prompt
            answers = [
                "5" if sound and j < self.right_share * params.n else "7" for j in range(params.n)
            ]
            out.append([Completion(rf"So \boxed{{{a}}}.", 4, True) for a in answers])
        return out


def chain(first_error: int | None, length: int = 6) -> list[str]:
    return [
        f"step {i} WRONG" if first_error is not None and i >= first_error else f"step {i} fine"
        for i in range(length)
    ]


def test_rollout_prompt_continues_the_sampling_prompt() -> None:
    prompt = rollout_prompt(PROBLEM, ["a = 2.", " b = 3. ", "c"], 1)
    assert prompt == sample_prompt(PROBLEM) + "a = 2.\n\nb = 3.\n\n"
    with pytest.raises(ValueError, match="upto"):
        rollout_prompt(PROBLEM, ["a"], 1)


def test_values_are_the_share_of_rollouts_that_reach_the_answer() -> None:
    # Given a policy that reaches the answer in 3 of 4 rollouts from a sound prefix
    policy = ScriptedPolicy(right_share=0.75)
    stored: list[StepValue] = []
    # When a 6-step chain whose step 4 is wrong is rolled out, 4 completions a step
    values = rollout_values(
        PROBLEM, chain(4), "5", policy, SamplingParams(n=4), on_step=stored.append
    )
    # Then steps 0-3 have soft 0.75 (hard), steps 4-5 none, each stored as it came
    assert [(v.index, v.rollouts, v.reached) for v in values] == [
        (0, 4, 3),
        (1, 4, 3),
        (2, 4, 3),
        (3, 4, 3),
        (4, 4, 0),
        (5, 4, 0),
    ]
    assert [v.soft for v in values] == [0.75] * 4 + [0.0] * 2
    assert [v.hard for v in values] == [True] * 4 + [False] * 2
    assert stored == values


def test_a_resumed_run_rolls_out_only_the_missing_steps() -> None:
    # Given a run stopped after 2 steps (its stored values)
    first = ScriptedPolicy()
    calls = iter([False, False, True])
    stored: list[StepValue] = []
    partial = rollout_values(
        PROBLEM,
        chain(None),
        "5",
        first,
        SamplingParams(n=2),
        on_step=stored.append,
        should_stop=lambda: next(calls),
    )
    assert [v.index for v in partial] == [0, 1] and len(first.prompts) == 2
    # When it resumes with those values done
    second = ScriptedPolicy()
    values = rollout_values(
        PROBLEM, chain(None), "5", second, SamplingParams(n=2), done={v.index: v for v in stored}
    )
    # Then it rolls out steps 2-5 only and answers all six
    assert len(second.prompts) == 4
    assert all("step 1 fine\n\n" in p and "step 2 fine" in p for p in second.prompts)
    assert [v.index for v in values] == list(range(6))


def test_steps_share_the_engines_batches_with_the_same_values() -> None:
    # Given an engine that batches 8 completions a call, and 2 rollouts a step
    class Batched(ScriptedPolicy):
        rows_per_call = 8

        def __init__(self) -> None:
            super().__init__(right_share=0.5)
            self.calls: list[int] = []

        def generate(self, prompts, params):  # noqa: ANN001, ANN202
            self.calls.append(len(prompts))
            return super().generate(prompts, params)

    grouped, single = Batched(), ScriptedPolicy(right_share=0.5)
    stored: list[StepValue] = []
    stops = iter([False, True])

    # When a 6-step chain is rolled out, stopping before the second call
    partial = rollout_values(
        PROBLEM,
        chain(3),
        "5",
        grouped,
        SamplingParams(n=2),
        on_step=stored.append,
        should_stop=lambda: next(stops),
    )
    # Then one call took 4 steps' rollouts, each step stored, and the rest waits
    assert grouped.calls == [4] and [v.index for v in partial] == [0, 1, 2, 3] == [
        v.index for v in stored
    ]
    # And resumed, the values are those of one step per call
    values = rollout_values(
        PROBLEM, chain(3), "5", grouped, SamplingParams(n=2), done={v.index: v for v in stored}
    )
    assert grouped.calls == [4, 2]
    assert values == rollout_values(PROBLEM, chain(3), "5", single, SamplingParams(n=2))
    assert len(single.prompts) == 6


def test_the_last_step_is_graded_on_its_own_answer() -> None:
    # Given a policy that writes no answer: the final answer is in the chain's last step
    class Silent(ScriptedPolicy):
        def generate(self, prompts, params):  # noqa: ANN001, ANN202
            return [[Completion("", 0, True)] * params.n for _ in prompts]

    steps = ["2 + 3 = 5.", r"The answer is $\boxed{5}$."]
    values = rollout_values(PROBLEM, steps, "5", Silent(), SamplingParams(n=3))
    assert [v.reached for v in values] == [0, 3]


@pytest.mark.parametrize("n_steps", range(0, 41))
def test_binary_search_finds_every_planted_first_error(n_steps: int) -> None:
    # The bound the search proves: ceil(log2(K + 1)) probes, i.e. ceil(log2 K), plus one
    # when K is a power of two; it is reached for some position.
    bound = math.ceil(math.log2(n_steps + 1))
    worst = 0
    for planted in [*range(n_steps), None]:
        # Given a scripted probe: rollouts reach the answer before the planted step only
        asked: list[int] = []

        def probe(index: int, planted: int | None = planted, asked: list[int] = asked) -> StepValue:
            asked.append(index)
            reached = 0 if planted is not None and index >= planted else 8
            return StepValue(index=index, rollouts=8, reached=reached)

        # When the search runs
        result = first_error_search(n_steps, probe)
        # Then it names the planted step (None when every step reaches the answer)
        assert result.first_error == planted and result.decided
        assert len(asked) <= bound
        assert [p.index for p in result.probes] == asked
        assert len(set(asked)) == len(asked)
        worst = max(worst, len(asked))
    assert worst == bound
    if n_steps >= 1:
        assert bound <= math.ceil(math.log2(n_steps)) + 1


def test_a_probe_budget_leaves_the_search_undecided() -> None:
    result = first_error_search(40, lambda i: StepValue(i, 1, 1), max_probes=2)
    assert result.first_error is None and not result.decided and len(result.probes) == 2


def test_rollout_search_resumes_without_repeating_rollouts() -> None:
    # Given a 12-step chain whose step 7 is wrong, searched until a stop after 2 rollouts
    steps = chain(7, length=12)
    stored: dict[int, StepValue] = {}
    calls = iter([False, False, True])
    first = rollout_search(
        PROBLEM,
        steps,
        "5",
        ScriptedPolicy(),
        SamplingParams(n=2),
        on_step=lambda v: stored.__setitem__(v.index, v),
        should_stop=lambda: next(calls),
    )
    assert not first.decided and len(stored) == 2
    # When it resumes with those values done
    policy = ScriptedPolicy()
    result = rollout_search(PROBLEM, steps, "5", policy, SamplingParams(n=2), done=stored)
    # Then it finds step 7 and rolls out only the probes it had not stored
    assert result.first_error == 7 and result.decided
    assert len(policy.prompts) == len(result.probes) - 2
    assert len(result.probes) <= math.ceil(math.log2(13))


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_causal_lm_dir(tmp_path_factory.mktemp("lm"))


def test_rollouts_with_a_real_engine(lm_dir: Path) -> None:
    # Given a tiny random Llama (its words never make a boxed answer)
    engine = TransformersEngine(lm_dir, device="cpu", batch_size=4)
    steps = ["a b", r"so \boxed{5}"]
    # When both steps are rolled out 3 times
    values = rollout_values(
        PROBLEM, steps, "5", engine, SamplingParams(n=3, max_new_tokens=6, seed=1)
    )
    # Then step 0's rollouts reach nothing, step 1's answer is its own boxed 5
    assert [(v.rollouts, v.reached) for v in values] == [(3, 0), (3, 3)]
