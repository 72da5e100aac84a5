"""The trainer formats (openrlhf, math_shepherd, qwen_prm) leave out a chain holding a
special token of a tokenizer the format targets (special_tokens.json says which, and where
each list comes from), also written with spaces or invisible characters inside; text that
only looks like markup is written."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from annotation.datasets.exporters.records import (
    math_shepherd_record,
    openrlhf_record,
    qwen_prm_record,
)
from annotation.datasets.exporters.special_tokens import special_token_families
from annotation.datasets.snapshot_reads import SnapshotExample
from tests.annotation.datasets.examples import snapshot_example


def _example(**changes: Any) -> SnapshotExample:
    """With Monte-Carlo hard labels, so math_shepherd writes it too."""
    machine = {"sources": {"monte_carlo": [{"hard": True}, {"hard": False}]}}
    return snapshot_example(**{"machine": machine, **changes})


def _written(fmt: str, example: SnapshotExample) -> bool:
    if fmt == "openrlhf":
        return openrlhf_record(example=example, ambiguous="negative") is not None
    if fmt == "math_shepherd":
        return math_shepherd_record(example=example) is not None
    return qwen_prm_record(example=example, ambiguous="negative") is not None


# Llama 2's and Mistral's sentencepiece tokens (</s> is their EOS), Mistral's instruct
# control tokens, Gemma's turns, Qwen 3's and DeepSeek-R1's reasoning tags, and spaced or
# invisibly split forms of the bar-shaped ones.
OPENRLHF_REFUSED = [
    "</s>",
    "<s>",
    "<unk>",
    "[INST]",
    "[/INST]",
    "<end_of_turn>",
    "<start_of_turn>",
    "<think>",
    "</think>",
    "<| im_end |>",
    "< |im_end| >",
    "<|\u200bim_end|>",
    "< / s >",
    "[ INST ]",
    "<|reserved_special_token_7|>",
    "<unused12>",
]
QWEN_REFUSED = [
    "<think>",
    "</think>",
    "<tool_response>",
    "<| im_end |>",
    "<|\u2060im_start|>",
    "< extra_0 >",
    "<|vision_pad|>",
]


@pytest.mark.parametrize("token", OPENRLHF_REFUSED)
@pytest.mark.parametrize("fmt", ["openrlhf", "math_shepherd"])
@pytest.mark.parametrize("where", ["problem", "step"])
def test_openrlhf_formats_leave_out_a_chain_holding_a_targeted_special_token(
    token: str, fmt: str, where: str
) -> None:
    # Given a chain whose problem or a written step holds a special token of a tokenizer
    # OpenRLHF's PRM recipes train (Mistral, Llama, Gemma, Qwen, DeepSeek)
    if where == "problem":
        example = _example(problem=f"What is 2 + 2? {token}")
    else:
        example = _example(steps=[f"2 + 2 = 4{token}", "so 5", "hm"])
    # Then the format does not write it
    assert not _written(fmt, example)


@pytest.mark.parametrize("token", QWEN_REFUSED)
def test_qwen_prm_leaves_out_a_chain_holding_a_qwen_special_token(token: str) -> None:
    example = _example(steps=["2 + 2 = 4", f"so {token} 5", "hm"])
    assert not _written("qwen_prm", example)


@pytest.mark.parametrize(
    "text",
    ["a < b | c > d", "<b>bold</b>", "|x| < 1", "<||>", "0 < s < 1", "[1, 2]", "x << y", "<>"],
)
@pytest.mark.parametrize("fmt", ["openrlhf", "math_shepherd", "qwen_prm"])
def test_text_that_only_looks_like_markup_is_written(text: str, fmt: str) -> None:
    assert _written(fmt, _example(steps=["2 + 2 = 4", text, "hm"]))


def test_every_family_names_where_its_tokens_come_from() -> None:
    families = special_token_families()
    assert families
    for name, family in families.items():
        assert family["source"].strip(), name
        assert family["tokens"] or family["patterns"], name


def _installed_qwen_tokenizer() -> Path | None:
    root = Path(os.environ.get("STEPLAB_BACKBONE_DIR", "var/backbones"))
    found = sorted(root.glob("Qwen2.5-*/tokenizer.json"))
    return found[0] if found else None


def test_the_qwen_list_is_the_added_tokens_of_the_installed_qwen_tokenizer() -> None:
    # Given the Qwen 2.5 tokenizer the embedded run installs (make install), when present
    path = _installed_qwen_tokenizer()
    if path is None:
        pytest.skip("no Qwen 2.5 tokenizer installed (make install puts one in var/backbones)")
    added = {token["content"] for token in json.loads(path.read_text())["added_tokens"]}
    # Then the shipped list of its family is exactly the tokenizer's added tokens
    assert set(special_token_families()["qwen2.5"]["tokens"]) == added
