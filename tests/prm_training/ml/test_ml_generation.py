"""The transformers sampling engine on a tiny Llama built from a config: reproducible
whatever the batch size, one seed per completion, EOS ends a completion."""

from __future__ import annotations

from pathlib import Path

import pytest

from prm_training.ml.generation import (
    Completion,
    SamplingParams,
    TransformersEngine,
    engine_load,
)
from tests.prm_training.ml_tiny import tiny_causal_lm_dir

# Prompts of different lengths, so left padding is exercised.
PROMPTS = ["what is a", "a b c d e what is", "b"]


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_causal_lm_dir(tmp_path_factory.mktemp("lm"))


def test_same_completions_whatever_the_batch_size(lm_dir: Path) -> None:
    # Given one set of prompts and sampling parameters
    params = SamplingParams(n=4, temperature=1.0, top_p=0.9, max_new_tokens=12, seed=7)
    # When engines of batch sizes 1, 3 and 8 sample them
    results = [
        TransformersEngine(lm_dir, device="cpu", batch_size=size).generate(PROMPTS, params)
        for size in (1, 3, 8)
    ]
    # Then every engine draws the same completions, n per prompt, in the prompts' order
    assert results[0] == results[1] == results[2]
    assert [len(row) for row in results[0]] == [4, 4, 4]
    # and the completions of one prompt differ (each has its own seed)
    assert len({c.text for c in results[0][1]}) > 1


def test_a_completion_depends_only_on_its_own_seed(lm_dir: Path) -> None:
    # Given an engine
    engine = TransformersEngine(lm_dir, device="cpu", batch_size=4)
    params = SamplingParams(n=3, temperature=1.0, top_p=1.0, max_new_tokens=10, seed=100)
    # When it samples 3 completions, and then 1 completion from seed 102 on its own
    three = engine.generate(["what is a"], params)[0]
    alone = engine.generate(
        ["what is a"], SamplingParams(n=1, temperature=1.0, top_p=1.0, max_new_tokens=10, seed=102)
    )[0]
    # Then the third completion (seed 100 + 2) is the one drawn alone: a resumed run that
    # asks only for the missing completions redraws them exactly
    assert three[2] == alone[0]


def test_finished_means_ended_by_eos(lm_dir: Path) -> None:
    # Given many completions of a random model, some of which draw EOS before the limit
    engine = TransformersEngine(lm_dir, device="cpu", batch_size=8)
    params = SamplingParams(n=16, temperature=1.0, top_p=1.0, max_new_tokens=8, seed=0)
    completions = [c for row in engine.generate(PROMPTS, params) for c in row]
    finished = [c for c in completions if c.finished]
    unfinished = [c for c in completions if not c.finished]
    # Then both kinds are there: a finished one counts its EOS and stops at or before
    # the limit, an unfinished one used every token
    assert finished and unfinished
    assert all(1 <= c.tokens <= 8 for c in finished)
    assert all(c.tokens == 8 for c in unfinished)
    # and no text carries the EOS or pad token
    assert all("</s>" not in c.text for c in completions)


def test_greedy_is_deterministic_and_ignores_the_seed(lm_dir: Path) -> None:
    engine = engine_load(lm_dir, engine="transformers", device="cpu")
    a = engine.generate(["b"], SamplingParams(n=2, temperature=0.0, max_new_tokens=6, seed=1))
    b = engine.generate(["b"], SamplingParams(n=1, temperature=0.0, max_new_tokens=6, seed=9))
    assert a[0][0] == a[0][1] == b[0][0]
    assert isinstance(a[0][0], Completion)


def test_engine_load_names_the_model_and_refuses_unknown_engines(lm_dir: Path) -> None:
    engine = engine_load(lm_dir, device="cpu")
    # Without vLLM installed, "auto" is transformers; the model is named by its directory
    assert isinstance(engine, TransformersEngine)
    assert engine.model_name == "tiny-llama-lm"
    with pytest.raises(ValueError, match="engine must be one of"):
        engine_load(lm_dir, engine="tgi")
