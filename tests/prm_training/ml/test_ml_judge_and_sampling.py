"""The judge (ProcessBench's critique format, verdict parsing, majority) and chain
sampling, with a scripted judge and a tiny Llama built from a config."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from prm_training.ml.generation import Completion, SamplingParams, TransformersEngine
from prm_training.ml.judge import (
    DEFAULT_TEMPLATE,
    JudgeResult,
    judge_chain,
    judge_prompt,
    parse_verdict,
    template_hash,
)
from prm_training.ml.sampling import sample_chains, sample_prompt
from tests.prm_training.ml_tiny import tiny_causal_lm_dir


class ScriptedJudge:
    """A GenerationEngine that answers the given texts, one per sample."""

    model_name = "scripted-judge"

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.prompts: list[str] = []

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[list[Completion]]:
        self.prompts.extend(prompts)
        return [[Completion(t, 5, True) for t in self.texts[: params.n]] for _ in prompts]


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_causal_lm_dir(tmp_path_factory.mktemp("lm"))


def test_default_template_is_processbench_critique() -> None:
    prompt = judge_prompt(DEFAULT_TEMPLATE, r"Find $x$ if $\{x\} = 2$.", ["x = 2.", "So 2."])
    assert prompt.startswith("The following is a math problem and a solution")
    assert r"Find $x$ if $\{x\} = 2$." in prompt  # braces in a problem are kept as they are
    assert "<paragraph_0>\nx = 2.\n</paragraph_0>\n\n<paragraph_1>\nSo 2.\n</paragraph_1>" in prompt
    assert prompt.rstrip().endswith(r"Please put your final answer (i.e., the index) in \boxed{}.")
    assert template_hash(DEFAULT_TEMPLATE) == template_hash(str(DEFAULT_TEMPLATE))
    assert len(template_hash(DEFAULT_TEMPLATE)) == 64
    assert template_hash(DEFAULT_TEMPLATE) != template_hash(DEFAULT_TEMPLATE + " ")


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        (r"The earliest error is in paragraph 1. \boxed{1}", 1),
        (r"All paragraphs are correct: \boxed{-1}", -1),
        (r"First \boxed{3}, no wait, \boxed{ 0 }", 0),
        (r"\boxed{\text{2}}", 2),
        (r"\boxed{3}", None),  # out of range for 3 steps
        (r"\boxed{-2}", None),
        (r"\boxed{paragraph 1}", None),
        ("The error is in paragraph 1.", None),
        ("", None),
    ],
)
def test_parse_verdict(text: str, verdict: int | None) -> None:
    assert parse_verdict(text, 3) == verdict


@pytest.mark.parametrize(
    ("verdicts", "majority"),
    [
        ([1, 1, 2], 1),
        ([2, -1, 2, -1], 2),  # a tie goes to the error
        ([3, 1, None, None, None], 1),  # a tie between errors goes to the earliest
        ([-1, -1, None], -1),
        ([None, None], None),
        ([], None),
    ],
)
def test_majority(verdicts: list[int | None], majority: int | None) -> None:
    assert JudgeResult(verdicts=verdicts, texts=[""] * len(verdicts)).majority == majority


def test_judge_chain_records_unparsed_answers() -> None:
    # Given a judge whose 4 samples say step 1, step 1, nothing readable, step 9 (of 3)
    judge = ScriptedJudge([r"\boxed{1}", r"so \boxed{1}.", "I cannot tell.", r"\boxed{9}"])
    # When it judges a 3-step chain with 4 samples
    result = judge_chain(judge, DEFAULT_TEMPLATE, "P", ["a", "b", "c"], SamplingParams(n=4))
    # Then every sample is recorded, the unreadable ones as None, and the majority is 1
    assert result.verdicts == [1, 1, None, None]
    assert result.texts[2] == "I cannot tell."
    assert result.majority == 1
    assert judge.prompts == [judge_prompt(DEFAULT_TEMPLATE, "P", ["a", "b", "c"])]


def test_judge_chain_with_a_real_engine(lm_dir: Path) -> None:
    # Given a tiny random model as the judge (it never writes a box)
    engine = TransformersEngine(lm_dir, device="cpu")
    result = judge_chain(
        engine, DEFAULT_TEMPLATE, "a b", ["a", "b"], SamplingParams(n=3, max_new_tokens=8)
    )
    # Then its three answers are kept and recorded as unparsed, not as a verdict
    assert len(result.texts) == 3 and result.verdicts == [None] * 3
    assert result.majority is None


def test_sample_chains(lm_dir: Path) -> None:
    # Given two problems
    engine = TransformersEngine(lm_dir, device="cpu", batch_size=4)
    params = SamplingParams(n=3, max_new_tokens=8, seed=5)
    # When chains are sampled
    chains = sample_chains(["what is a", "what is b"], engine, params)
    # Then each problem has n completions, the same as the engine draws for its prompt
    assert [len(c) for c in chains] == [3, 3]
    assert chains[1] == engine.generate([sample_prompt("what is b", engine)], params)[0]
    assert r"\boxed{}" in sample_prompt("x") and "Problem: x" in sample_prompt("x")


def test_an_instruction_model_is_asked_in_its_chat_template_and_answers_in_its_turn() -> None:
    from prm_training.ml.rollouts import rollout_prompt

    class ChatEngine:
        def chat_prompt(self, text: str) -> str:
            return f"<|user|>{text}<|end|><|assistant|>"

    engine = ChatEngine()
    prompt = sample_prompt("What is 2 + 3?", engine)
    # The request is the user's message, with no "Solution:" cue: the turn is the model's
    assert prompt.startswith("<|user|>Solve the following") and "Problem: What is 2 + 3?" in prompt
    assert prompt.endswith("<|end|><|assistant|>") and "Solution:" not in prompt
    # A rollout continues the assistant's turn after the chain's prefix
    assert rollout_prompt("What is 2 + 3?", ["2 + 3 = 5.", "So 5."], 0, engine) == (
        prompt + "2 + 3 = 5.\n\n"
    )
