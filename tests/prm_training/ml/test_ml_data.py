"""Pure transforms from chains to token windows, on a tiny word-level tokenizer."""

from __future__ import annotations

import doctest

import pytest
import torch

from prm_training.ml import (
    acquisition,
    baselines,
    data,
    evaluation,
    fitting,
    grading,
    inputs,
    judge,
    machine_labeler,
    metrics,
    oracle,
    paired,
    ranks,
    readout,
    rollouts,
    sampling,
    simulate,
    simulation_report,
)
from prm_training.ml.config import PRMConfig
from prm_training.ml.data import (
    ChainExample,
    Truncation,
    Window,
    chain_content_key,
    chains_to_windows,
    step_target,
    tokenize_chain,
    truncation,
)
from tests.prm_training.ml_tiny import tiny_tokenizer


@pytest.fixture(scope="module")
def encoder_tokenizer():  # noqa: ANN201
    return tiny_tokenizer("encoder")


def _tokens(tokenizer, ids: list[int]) -> list[str]:  # noqa: ANN001
    return tokenizer.convert_ids_to_tokens(ids)


def test_tokenize_chain_puts_each_label_on_the_separator_closing_its_step(
    encoder_tokenizer,  # noqa: ANN001
) -> None:
    # Given: a problem and two rated steps
    example = ChainExample(7, "what is a", ("add the two", "so we get"), (1, -1))

    # When
    row = tokenize_chain(encoder_tokenizer, example, max_length=64)

    # Then: [CLS] problem [SEP] step [SEP] step [SEP], segments per step, labels on the SEPs
    assert _tokens(encoder_tokenizer, row["input_ids"]) == [
        "[CLS]",
        "what",
        "is",
        "a",
        "[SEP]",
        "add",
        "the",
        "two",
        "[SEP]",
        "so",
        "we",
        "get",
        "[SEP]",
    ]
    assert row["segment_ids"] == [0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]
    assert row["step_end_positions"] == [8, 12]
    assert row["step_labels"] == [1, -1]


def test_decoder_tokenizer_without_sep_uses_bos_and_eos() -> None:
    tokenizer = tiny_tokenizer("decoder")
    row = tokenize_chain(tokenizer, ChainExample(1, "what is a", ("add",)), max_length=32)
    assert _tokens(tokenizer, row["input_ids"]) == ["<s>", "what", "is", "a", "</s>", "add", "</s>"]
    assert row["step_labels"] == [None]


def test_long_chain_splits_into_windows_that_each_start_with_the_problem(
    encoder_tokenizer,  # noqa: ANN001
) -> None:
    # Given: steps of 4 words + SEP and a 16-token window: [CLS] a [SEP] fits two steps
    example = ChainExample(1, "a", tuple("add the two numbers" for _ in range(5)))

    # When
    windows = chains_to_windows(encoder_tokenizer, [example], max_length=16)

    # Then: every step is scored in exactly one window, every window begins with the
    # problem, and a window after the first reads the step before its own (the overlap:
    # half the room after the problem, here one step), so no step is read cut off from
    # what came just before it
    assert [w.first_step for w in windows] == [0, 2, 3, 4]
    assert [w.context_steps for w in windows] == [0, 1, 1, 1]
    assert sum(len(w.step_end_positions) for w in windows) == 5
    for window in windows:
        assert len(window.input_ids) <= 16
        assert _tokens(encoder_tokenizer, list(window.input_ids[:3])) == ["[CLS]", "a", "[SEP]"]
        for position in window.step_end_positions:
            assert window.input_ids[position] == encoder_tokenizer.sep_token_id
        # the context step's tokens come first, with its own segment (the mask's order)
        if window.context_steps:
            assert window.segment_ids[3] == window.first_step
    # And what the windows could not hold is counted: 3 steps scored without the whole
    # prefix, in one chain
    assert truncation(encoder_tokenizer, [example], 16) == Truncation(
        problems=0, steps=0, chains=1, context_steps=3
    )
    with pytest.raises(ValueError, match="windows"):
        tokenize_chain(encoder_tokenizer, example, max_length=16)


def test_a_batch_pools_only_the_steps_a_window_scores() -> None:
    # Given: a window that reads step 0 as context and scores steps 1 and 2, batched after
    # a window that scores step 0
    from prm_training.ml.model import collate_windows

    first = Window(0, 0, (1, 5, 2, 7, 7, 2), (0, 0, 0, 1, 1, 1), (5,))
    second = Window(0, 1, (1, 5, 2, 7, 7, 2, 8, 2, 9, 2), (0, 0, 0, 1, 1, 1, 2, 2, 3, 3), (7, 9), 1)

    # When
    batch = collate_windows([first, second], pad_id=0, device=torch.device("cpu"))

    # Then: the context step's tokens belong to no step of the batch (-1), and the scored
    # ones to batch steps 1 and 2 (step 0 is the first window's)
    assert batch.step_of_token[1].tolist() == [-1, -1, -1, -1, -1, -1, 1, 1, 2, 2]
    assert batch.step_of_token[0].tolist()[:6] == [-1, -1, -1, 0, 0, 0]


def test_overlong_problem_and_step_are_cut_to_fit(encoder_tokenizer) -> None:  # noqa: ANN001
    example = ChainExample(1, " ".join(["two"] * 40), (" ".join(["add"] * 40),))
    [window] = chains_to_windows(encoder_tokenizer, [example], max_length=20)
    assert len(window.input_ids) == 20
    assert window.input_ids.count(encoder_tokenizer.convert_tokens_to_ids("two")) == 10


@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        ("negative", [1.0, 0.0, 0.0, None]),
        ("positive", [1.0, 1.0, 0.0, None]),
        ("ignore", [1.0, None, 0.0, None]),
    ],
)
def test_ambiguous_rule(rule: str, expected: list[float | None]) -> None:
    assert [step_target(r, rule) for r in (1, 0, -1, None)] == expected


def test_step_target_rejects_other_ratings() -> None:
    with pytest.raises(ValueError):
        step_target(2, "negative")


def test_content_key_ignores_ids_and_labels_but_not_text() -> None:
    a = ChainExample(1, "p", ("s1", "s2"), (1, 1))
    assert chain_content_key(a) == chain_content_key(ChainExample(2, "p", ("s1", "s2")))
    assert chain_content_key(a) != chain_content_key(ChainExample(1, "p", ("s1", "s3")))
    # The separator keeps step boundaries apart: ("ab",) is not ("a", "b").
    assert chain_content_key(ChainExample(1, "p", ("ab",))) != chain_content_key(
        ChainExample(1, "p", ("a", "b"))
    )


def test_labels_must_match_steps() -> None:
    with pytest.raises(ValueError, match="2 labels for 1 steps"):
        ChainExample(1, "p", ("s",), (1, 1))


def test_config_validates_and_round_trips() -> None:
    with pytest.raises(ValueError, match="ambiguous"):
        PRMConfig(ambiguous="maybe")
    with pytest.raises(ValueError, match="mode"):
        PRMConfig(mode="lora")
    config = PRMConfig(mode="full", epochs=2)
    assert PRMConfig.from_dict({**config.to_dict(), "unknown_key": 1}) == config
    assert config.backbone.endswith("model")


def test_docstring_examples_hold() -> None:
    # The transforms' docstring examples are part of their documentation: keep them true.
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(PRMConfig().backbone)
    modules = (
        data,
        metrics,
        acquisition,
        grading,
        baselines,
        paired,
        simulate,
        oracle,
        simulation_report,
        machine_labeler,
        inputs,
        ranks,
        readout,
        fitting,
        evaluation,
        judge,
        rollouts,
        sampling,
    )
    for module in modules:
        result = doctest.testmod(module, extraglobs={"tok": tok})
        assert result.failed == 0, module.__name__
        assert result.attempted > 0, module.__name__
